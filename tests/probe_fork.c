/*
 * probe_fork.c - weft in a process that forks after init, as PyTorch's data-loader
 * workers do (run by tests/run.sh under weftrun, 2 ranks):
 *
 *   probe_fork child   each rank forks a worker that calls a collective on the inherited
 *                      communicator (refused: it is the parent's), destroys it (as an
 *                      atexit handler would) and writes a weft_mem_alloc'd buffer, then
 *                      exits; the parents then all-reduce correctly, and the parent's
 *                      buffer still holds its own value. Before 2026-11-27 the child's
 *                      destroy shut down the parent's tcp sockets or set its shm segment's
 *                      "gone" flag (the parents' next call failed), and the child's write
 *                      reached the parent's buffer (MAP_SHARED).
 *   probe_fork death   (tcp) rank 1 forks a worker that outlives it, then leaves without
 *                      destroying; rank 0's next all-reduce must fail with PEER_LOST
 *                      within 2 s. Before, the worker's copies of the sockets kept the
 *                      connection open and rank 0 waited until WEFT_TIMEOUT.
 *
 * Prints "ok ..." / "FAIL ..." lines; exit 0 when every check passed.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

static int bad;

static void check(int rank, int ok, const char *what)
{
    printf("%s rank %d %s\n", ok ? "ok" : "FAIL", rank, what);
    fflush(stdout);
    bad |= !ok;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int sum_ok(weft_comm_t *c, int rank, int nranks)
{
    float x[4096];
    for (int i = 0; i < 4096; i++)
        x[i] = (float)(rank + 1);
    if (weft_allreduce(x, x, 4096, WEFT_FLOAT32, WEFT_SUM, c) != WEFT_OK)
        return 0;
    for (int i = 0; i < 4096; i++)
        if (x[i] != (float)(nranks * (nranks + 1) / 2))
            return 0;
    return 1;
}

static void child_mode(weft_comm_t *c, int rank, int nranks)
{
    int *mine = NULL;
    int have_mem = weft_mem_alloc((void **)&mine, 4096) == WEFT_OK;
    if (have_mem)
        mine[0] = 1;
    check(rank, sum_ok(c, rank, nranks), "all-reduce before the fork");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        float x[16] = { 0 };
        weft_status_t st = weft_allreduce(x, x, 16, WEFT_FLOAT32, WEFT_SUM, c);
        int refused = st == WEFT_ERR_INVALID_ARG && strstr(weft_last_error(), "fork");
        int destroyed = weft_comm_destroy(c) == WEFT_OK;
        if (have_mem)
            mine[0] = 2;
        _exit(refused && destroyed ? 0 : 1);
    }
    int ws = 0;
    check(rank, pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
          "the worker's collective refused (the communicator is the parent's), its destroy ok");
    check(rank, sum_ok(c, rank, nranks) && sum_ok(c, rank, nranks),
          "all-reduces after the worker destroyed its copy and exited");
    if (have_mem) {
        check(rank, mine[0] == 1, "weft_mem_alloc'd buffer: the worker's write stayed its own");
        weft_mem_free(mine);
    }
}

static void death_mode(weft_comm_t *c, int rank, int nranks)
{
    check(rank, sum_ok(c, rank, nranks), "all-reduce before the fork");
    if (rank == 1) {
        fflush(stdout);
        if (fork() == 0) {      /* a worker that outlives its rank, its output elsewhere */
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 1);
            dup2(null, 2);
            sleep(6);
            _exit(0);
        }
        _exit(0);               /* the rank leaves, no destroy */
    }
    float x[4096] = { 0 };
    double t0 = now_s();
    weft_status_t st = weft_allreduce(x, x, 4096, WEFT_FLOAT32, WEFT_SUM, c);
    double t = now_s() - t0;
    char what[300];
    snprintf(what, sizeof(what), "rank 1 gone, its worker alive: %s after %.2f s (want peer "
             "lost within 2 s): %s", weft_status_str(st), t,
             st != WEFT_OK ? weft_last_error() : "");
    check(rank, st == WEFT_ERR_PEER_LOST && t < 2.0, what);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    weft_comm_t *c;
    if (weft_comm_init(&c) != WEFT_OK) {
        printf("FAIL init: %s\n", weft_last_error());
        return 1;
    }
    int rank = weft_comm_rank(c), nranks = weft_comm_size(c);
    if (!strcmp(mode, "child")) {
        child_mode(c, rank, nranks);
    } else if (!strcmp(mode, "death") && nranks == 2) {
        death_mode(c, rank, nranks);
        fflush(stdout);
        _exit(bad);             /* the communicator has failed */
    } else {
        fprintf(stderr, "usage: probe_fork child|death (2 ranks)\n");
        return 2;
    }
    weft_comm_destroy(c);
    return bad;
}
