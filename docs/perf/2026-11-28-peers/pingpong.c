/*
 * pingpong.c - what an idle peer costs a small call: ranks 0 and N/2 of an N-rank
 * communicator ping-pong 8 bytes (weft_send / weft_recv) while the other ranks wait
 * outside weft (sleeping on a file), so only the engine's per-call and per-pass work over
 * the communicator's N ranks differs from N = 2. (weftrun --bind-to core places ranks in
 * blocks: 0 and N/2 get a core each of the 2; WEFT_SPIN=2000, as where every rank has a
 * core: with more ranks than cores weft's auto spin is 0.) Prints rank 0's round trip in
 * us: the median of 7 batches of 20000.
 *
 *   gcc -O2 -Iinclude docs/perf/2026-11-28-peers/pingpong.c -Lbuild/lib \
 *       -Wl,-rpath,$PWD/build/lib -lweft -o /tmp/pingpong
 *   WEFT_SPIN=2000 WEFT_TRANSPORT=shm build/bin/weftrun -n N --bind-to core /tmp/pingpong
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

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    weft_comm_t *c;
    if (weft_comm_init(&c) != WEFT_OK) {
        fprintf(stderr, "init: %s\n", weft_last_error());
        return 1;
    }
    int rank = weft_comm_rank(c), n = weft_comm_size(c);
    char done[64];
    snprintf(done, sizeof(done), "/tmp/pingpong.%d.done", (int)getppid());
    float buf[2] = { 0 };
    if (rank == 0)
        unlink(done);
    weft_barrier(c);
    int half = n / 2;
    if (rank != 0 && rank != half) {
        while (access(done, F_OK) != 0)
            usleep(50000);
    } else {
        int peer = rank == 0 ? half : 0, iters = 20000;
        double t[7];
        for (int b = -1; b < 7; b++) {
            double t0 = now_s();
            for (int i = 0; i < iters; i++) {
                weft_status_t st = rank == 0 ? weft_send(buf, 2, WEFT_FLOAT32, peer, c)
                                             : weft_recv(buf, 2, WEFT_FLOAT32, peer, c);
                if (st == WEFT_OK)
                    st = rank == 0 ? weft_recv(buf, 2, WEFT_FLOAT32, peer, c)
                                   : weft_send(buf, 2, WEFT_FLOAT32, peer, c);
                if (st != WEFT_OK) {
                    fprintf(stderr, "rank %d: %s\n", rank, weft_last_error());
                    return 1;
                }
            }
            if (b >= 0)
                t[b] = (now_s() - t0) / iters * 1e6;
        }
        qsort(t, 7, sizeof(double), cmp_d);
        if (rank == 0) {
            printf("%d ranks: 8-byte round trip %.3f us (median of 7; min %.3f, max %.3f)\n",
                   n, t[3], t[0], t[6]);
            FILE *f = fopen(done, "w");
            if (f)
                fclose(f);
        }
    }
    weft_barrier(c);
    weft_comm_destroy(c);
    return 0;
}
