/*
 * probe_lazy.c - what a transport that makes a peer's frame buffers at first use (ib:
 * its rings and staging, comm/ib/tp_ib.c) must still do, run under weftrun by
 * tests/test_ib.sh:
 *
 *   probe_lazy ring      5 all-reduces of 1M floats, checked; with WEFT_ALGO=ring each
 *                        rank moves frames to one peer and from one other, so only
 *                        those two get buffers (the script reads the INFO line and the
 *                        emulator's peak registration)
 *   probe_lazy crossed   ranks in pairs (0-1, 2-3, ...) both send first, 64 bytes, then
 *                        receive: the first send to a peer that is itself blocked in a
 *                        send must complete (its ring made by its progress, not by a
 *                        receive it has not reached), as it did with rings made at init
 *
 * Prints "ok"/"FAIL" lines; exit status 1 on any failure. alarm(60) bounds a hang.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft.h"

static int fails;

static void check(int rank, int ok, const char *what)
{
    printf("%s rank %d: %s%s%s\n", ok ? "ok" : "FAIL", rank, what, ok ? "" : ": ",
           ok ? "" : weft_last_error());
    fails += !ok;
}

static void ring(weft_comm_t *comm, int rank, int n)
{
    size_t count = 1 << 18;      /* 1 MB of floats: several frames per step */
    float *buf = malloc(count * sizeof(float));
    if (buf == NULL) {
        check(rank, 0, "ring: buffer");
        return;
    }
    for (int it = 0; it < 5; it++) {
        for (size_t i = 0; i < count; i++)
            buf[i] = (float)(rank + 1) * (float)(i % 7);
        weft_status_t st = weft_allreduce(buf, buf, count, WEFT_FLOAT32, WEFT_SUM, comm);
        size_t bad = 0;
        float sum = (float)(n * (n + 1) / 2);
        for (size_t i = 0; st == WEFT_OK && i < count; i++)
            bad += buf[i] != sum * (float)(i % 7);
        char msg[96];
        snprintf(msg, sizeof(msg), "all-reduce %d of 1 MB: %s, %zu wrong", it,
                 weft_status_str(st), bad);
        check(rank, st == WEFT_OK && bad == 0, msg);
    }
    free(buf);
}

static void crossed(weft_comm_t *comm, int rank, int n)
{
    int peer = rank ^ 1;
    if (peer >= n)
        return;                 /* the odd one out */
    char out[64], in[64];
    for (int k = 0; k < 3; k++) {
        memset(out, 'a' + rank + k, sizeof(out));
        memset(in, 0, sizeof(in));
        weft_status_t st = weft_send(out, sizeof(out), WEFT_UINT8, peer, comm);
        char msg[96];
        snprintf(msg, sizeof(msg), "send %d to rank %d before it receives: %s", k, peer,
                 weft_status_str(st));
        check(rank, st == WEFT_OK, msg);
        if (st != WEFT_OK)
            return;
        st = weft_recv(in, sizeof(in), WEFT_UINT8, peer, comm);
        int right = st == WEFT_OK;
        for (size_t i = 0; right && i < sizeof(in); i++)
            right = in[i] == 'a' + peer + k;
        snprintf(msg, sizeof(msg), "then its message %d: %s", k, weft_status_str(st));
        check(rank, right, msg);
        if (!right)
            return;
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    alarm(60);
    weft_comm_t *comm;
    if (weft_comm_init(&comm) != WEFT_OK) {
        printf("FAIL init: %s\n", weft_last_error());
        return 1;
    }
    int rank = weft_comm_rank(comm), n = weft_comm_size(comm);
    if (!strcmp(mode, "ring")) {
        ring(comm, rank, n);
    } else if (!strcmp(mode, "crossed")) {
        crossed(comm, rank, n);
    } else {
        fprintf(stderr, "usage: probe_lazy ring|crossed\n");
        weft_comm_destroy(comm);
        return 2;
    }
    weft_comm_destroy(comm);
    printf("probe_lazy %s rank %d: %s\n", mode, rank, fails ? "FAILED" : "passed");
    return fails ? 1 : 0;
}
