/*
 * probe_fork.c - weft in a process that forks after init, as PyTorch's data-loader
 * workers do (run by tests/run.sh under weftrun, 2 ranks):
 *
 *   probe_fork child   each rank forks a worker that calls a collective on the inherited
 *                      communicator (refused: it is the parent's), destroys it (as an
 *                      atexit handler would) and writes a weft_mem_alloc'd buffer, then
 *                      exits (the worker's weft_comm_dump is refused too); the parents
 *                      then all-reduce correctly, and the parent's
 *                      buffer still holds its own value. Before 2026-11-27 the child's
 *                      destroy shut down the parent's tcp sockets or set its shm segment's
 *                      "gone" flag (the parents' next call failed), and the child's write
 *                      reached the parent's buffer (MAP_SHARED).
 *   probe_fork death   (tcp) rank 1 forks a worker that outlives it, then leaves without
 *                      destroying; rank 0's next all-reduce must fail with PEER_LOST
 *                      within 2 s. Before, the worker's copies of the sockets kept the
 *                      connection open and rank 0 waited until WEFT_TIMEOUT.
 *   probe_fork regions (one process, no launcher; run with WEFT_TRANSPORT=shm and
 *                      WEFT_ALGO=cma or WEFT_REG_MIN=1) allocates two buffers with
 *                      weft_mem_alloc, then forks two workers that each write their own
 *                      values into them (copy on write: their own pages) and all-reduce
 *                      them in a communicator of their own (weft_comm_init_rank), by single
 *                      copy: every element must be the workers' sum. Before 2026-11-28 a
 *                      worker still offered the inherited regions to its peer, which mapped
 *                      the parent's pages through the memfd and summed the parent's zeros.
 *
 * Prints "ok ..." / "FAIL ..." lines; exit 0 when every check passed.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
        /* the dump too: the parent's lock may be held by a thread the fork left behind */
        alarm(10);
        refused &= weft_comm_dump(c) == WEFT_ERR_INVALID_ARG;
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

/* regions: see the banner. The rendezvous is a loopback port the kernel picked free. */
static int regions_mode(void)
{
    size_t n = (size_t)1 << 18;
    float *in = NULL, *out = NULL;
    if (weft_mem_alloc((void **)&in, n * sizeof(float)) != WEFT_OK ||
        weft_mem_alloc((void **)&out, n * sizeof(float)) != WEFT_OK) {
        printf("FAIL weft_mem_alloc: %s\n", weft_last_error());
        return 1;
    }
    memset(in, 0, n * sizeof(float));
    memset(out, 0, n * sizeof(float));
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof(a);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &alen) != 0) {
        printf("FAIL no free loopback port\n");
        return 1;
    }
    close(s);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
    fflush(stdout);
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            for (size_t i = 0; i < n; i++)
                in[i] = (float)(r + 1);
            weft_comm_t *c;
            weft_status_t st = weft_comm_init_rank(r, 2, addr, &c);
            if (st != WEFT_OK) {
                printf("FAIL worker %d init: %s\n", r, weft_last_error());
                fflush(stdout);
                _exit(1);
            }
            st = weft_allreduce(in, out, n, WEFT_FLOAT32, WEFT_SUM, c);
            size_t wrong = 0, first = 0;
            for (size_t i = 0; i < n; i++)
                if (out[i] != 3.0f && wrong++ == 0)
                    first = i;
            char what[200];
            snprintf(what, sizeof(what), "worker all-reduce of inherited weft_mem_alloc "
                     "buffers: %s, %zu of %zu elements wrong (element %zu is %g, want 3)",
                     weft_status_str(st), wrong, n, first, (double)out[first]);
            check(r, st == WEFT_OK && wrong == 0, what);
            weft_comm_destroy(c);
            fflush(stdout);
            _exit(bad);
        }
    }
    alarm(60);      /* a worker that waits for a failed one: the test fails, not hangs */
    for (int r = 0; r < 2; r++) {
        int ws = 0;
        if (pid[r] <= 0 || waitpid(pid[r], &ws, 0) != pid[r] || !WIFEXITED(ws) ||
            WEXITSTATUS(ws) != 0)
            bad = 1;
    }
    check(0, in[0] == 0.0f && out[0] == 0.0f, "the parent's buffers kept their zeros");
    weft_mem_free(in);
    weft_mem_free(out);
    return bad;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "regions"))
        return regions_mode();
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
        fprintf(stderr, "usage: probe_fork child|death (2 ranks) | regions (no launcher)\n");
        return 2;
    }
    weft_comm_destroy(c);
    return bad;
}
