/*
 * test_fail.c - failure paths of a running job: a lost peer, a hung peer, a mismatch.
 *
 *   weftrun -n 2 build/tests/test_fail peer_exit|timeout|mismatch|dump
 *
 * peer_exit  rank 1 exits in the middle of the job; rank 0's next all-reduce must return
 *            WEFT_ERR_PEER_LOST naming rank 1 within 2 s (shm and tcp)
 * timeout    rank 1 stays silent for 4 s; rank 0 (WEFT_TIMEOUT=1) must get WEFT_ERR_TIMEOUT
 *            after about 1 s, naming rank 1, with the flight recorder printed
 * mismatch   the ranks call all-reduce with different counts; both must get
 *            WEFT_ERR_MISMATCH naming both calls, and no byte past either buffer changes
 * dump       weft_comm_dump prints the recorder with the calls made so far
 * Each rank exits 0 when it saw what it should, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int expect(int rank, const char *what, weft_status_t got, weft_status_t want,
                  const char *needle, double secs, double max_secs)
{
    const char *msg = weft_last_error();
    int ok = got == want && (needle == NULL || strstr(msg, needle)) && secs <= max_secs;
    printf("%s rank %d %s: %s after %.2f s (want %s within %.1f s): %s\n", ok ? "ok" : "FAIL",
           rank, what, weft_status_str(got), secs, weft_status_str(want), max_secs, msg);
    return ok ? 0 : 1;
}

static int warm_up(weft_comm_t *c, float *buf, size_t n)
{
    for (int i = 0; i < 3; i++)
        if (weft_allreduce(buf, buf, n, WEFT_FLOAT32, WEFT_SUM, c) != WEFT_OK)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    weft_comm_t *c;
    weft_status_t st = weft_comm_init(&c);
    if (st != WEFT_OK) {
        printf("FAIL init: %s: %s\n", weft_status_str(st), weft_last_error());
        return 1;
    }
    int rank = weft_comm_rank(c);
    size_t n = 1 << 20;
    float *buf = calloc(n + 64, sizeof(float));
    if (buf == NULL || warm_up(c, buf, n))
        return 1;
    int bad = 0;
    double t0;
    if (!strcmp(mode, "peer_exit")) {
        if (rank == 1)
            _exit(0);                   /* no destroy: the process is simply gone */
        t0 = now_s();
        st = weft_allreduce(buf, buf, n, WEFT_FLOAT32, WEFT_SUM, c);
        bad = expect(rank, "after peer exit", st, WEFT_ERR_PEER_LOST, "rank 1", now_s() - t0, 2.0);
        st = weft_allreduce(buf, buf, 1, WEFT_FLOAT32, WEFT_SUM, c);
        bad |= expect(rank, "next call on the failed comm", st, WEFT_ERR_PEER_LOST, NULL, 0, 1.0);
    } else if (!strcmp(mode, "timeout")) {
        if (rank == 1) {
            sleep(4);
            _exit(0);                   /* rank 0 has failed by now: nothing to finish */
        }
        t0 = now_s();
        st = weft_allreduce(buf, buf, 8, WEFT_FLOAT32, WEFT_SUM, c);
        bad = expect(rank, "silent peer", st, WEFT_ERR_TIMEOUT, "rank(s) 1", now_s() - t0, 3.0);
    } else if (!strcmp(mode, "mismatch")) {
        size_t cnt = rank == 0 ? 100 : 200;
        for (int i = 0; i < 64; i++)
            buf[cnt + i] = -7.0f;
        t0 = now_s();
        st = weft_allreduce(buf, buf, cnt, WEFT_FLOAT32, WEFT_SUM, c);
        bad = expect(rank, "different counts", st, WEFT_ERR_MISMATCH, "count=", now_s() - t0, 2.0);
        for (int i = 0; i < 64; i++)
            if (buf[cnt + i] != -7.0f) {
                printf("FAIL rank %d: byte past the buffer changed\n", rank);
                bad = 1;
                break;
            }
        fflush(stdout);
        _exit(bad);                     /* the comm is failed; peers may be gone */
    } else if (!strcmp(mode, "dump")) {
        st = weft_comm_dump(c);
        bad = st != WEFT_OK;
        weft_comm_destroy(c);
    } else {
        fprintf(stderr, "usage: test_fail peer_exit|timeout|mismatch|dump\n");
        return 2;
    }
    fflush(stdout);
    _exit(bad);
}
