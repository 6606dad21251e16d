/*
 * probe_lazy.c - what a transport that makes a peer's frame buffers at first use (ib:
 * its rings and staging, comm/ib/tp_ib.c) must still do, run under weftrun by
 * tests/test_ib.sh:
 *
 *   probe_lazy ring      5 all-reduces of 1M floats, checked; with WEFT_ALGO=ring each
 *                        rank moves frames to one peer and from one other, so only
 *                        those two get buffers (the script reads the INFO line and the
 *                        emulator's peak registration)
 *   probe_lazy crossed   ranks in pairs (0-1, 2-3, ...) both send first, 256K (frames
 *                        too large for ib's eager slots), then receive: a send to a
 *                        peer that is itself blocked in a send must complete (its ring
 *                        made by its progress, not by a receive it has not reached), as
 *                        it did with rings made at init
 *   probe_lazy elsewhere a small send completes while its receiver is elsewhere: rank 0
 *                        sends 64 bytes to rank R (2, or 1 with 2 ranks: with WEFT_ALGO=
 *                        ring no frame went from 0 to 2 before), then joins a barrier on a
 *                        split communicator that R joins before it receives; then rank 0
 *                        sends again and makes a file, which R waits for outside weft
 *                        before it receives (ib's eager slots, made at connect)
 *
 *   probe_lazy dups      two splits of all ranks made before any frame, then an
 *                        all-to-all of 256K per rank on each of the three communicators
 *                        (every pair's ring of each): where /dev/shm is small, rings
 *                        taken at their first frame must still fit, the splits'
 *                        budgets leaving out the rings promised before them (shm)
 *
 * Prints "ok"/"FAIL" lines; exit status 1 on any failure. alarm(60) bounds a hang.
 */
#include <stdint.h>
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
    static char out[256 << 10], in[256 << 10];
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

static void elsewhere(weft_comm_t *comm, int rank, int n)
{
    weft_comm_t *child = NULL;
    weft_status_t st = weft_comm_split(comm, 0, rank, &child);
    check(rank, st == WEFT_OK, "split");
    if (st != WEFT_OK)
        return;
    char msg[160], path[128];
    uint64_t tag = 0;
    if (rank == 0)
        tag = (uint64_t)getpid();
    check(rank, weft_broadcast(&tag, &tag, 1, WEFT_UINT64, 0, child) == WEFT_OK, "tag");
    snprintf(path, sizeof(path), "/tmp/weft_probe_lazy_%llu", (unsigned long long)tag);
    char b[64];
    int to = n >= 3 ? 2 : 1;
    if (rank == 0) {
        memset(b, 7, sizeof(b));
        st = weft_send(b, sizeof(b), WEFT_UINT8, to, comm);
        snprintf(msg, sizeof(msg), "send to rank %d, which is in a barrier of another "
                 "communicator: %s", to, weft_status_str(st));
        check(rank, st == WEFT_OK, msg);
        st = weft_barrier(child);
        check(rank, st == WEFT_OK, "barrier of the split communicator");
        memset(b, 8, sizeof(b));
        st = weft_send(b, sizeof(b), WEFT_UINT8, to, comm);
        snprintf(msg, sizeof(msg), "send to rank %d, which waits outside weft: %s", to,
                 weft_status_str(st));
        check(rank, st == WEFT_OK, msg);
        FILE *f = fopen(path, "w");     /* rank `to` receives once this exists */
        check(rank, f != NULL, "make the file the receiver waits for");
        if (f)
            fclose(f);
    } else if (rank == to) {
        st = weft_barrier(child);
        check(rank, st == WEFT_OK, "barrier of the split communicator");
        memset(b, 0, sizeof(b));
        st = weft_recv(b, sizeof(b), WEFT_UINT8, 0, comm);
        check(rank, st == WEFT_OK && b[0] == 7 && b[63] == 7, "the first message");
        for (int i = 0; i < 2000 && access(path, F_OK) != 0; i++)
            usleep(10000);              /* 20 s at most, outside weft */
        check(rank, access(path, F_OK) == 0, "rank 0's send returned (its file is there)");
        memset(b, 0, sizeof(b));
        st = weft_recv(b, sizeof(b), WEFT_UINT8, 0, comm);
        check(rank, st == WEFT_OK && b[0] == 8 && b[63] == 8, "the second message");
        unlink(path);
    } else {
        check(rank, weft_barrier(child) == WEFT_OK, "barrier of the split communicator");
    }
    weft_comm_destroy(child);
}

static void dups(weft_comm_t *comm, int rank, int n)
{
    weft_comm_t *c[3] = { comm, NULL, NULL };
    for (int k = 1; k < 3; k++)
        check(rank, weft_comm_split(comm, 0, rank, &c[k]) == WEFT_OK, "split before traffic");
    size_t per = 64 << 10;      /* floats per rank: 256K */
    float *out = malloc(per * n * sizeof(float)), *in = malloc(per * n * sizeof(float));
    for (int k = 0; k < 3 && c[k] && out && in; k++) {
        for (size_t i = 0; i < per * n; i++)
            out[i] = (float)(rank * 1000 + (int)(i / per) + k);
        weft_status_t st = weft_alltoall(out, in, per, WEFT_FLOAT32, c[k]);
        size_t bad = 0;
        for (int p = 0; st == WEFT_OK && p < n; p++)
            for (size_t i = 0; i < per; i++)
                bad += in[(size_t)p * per + i] != (float)(p * 1000 + rank + k);
        char msg[96];
        snprintf(msg, sizeof(msg), "all-to-all on communicator %d: %s, %zu wrong", k,
                 weft_status_str(st), bad);
        check(rank, st == WEFT_OK && bad == 0, msg);
    }
    free(out);
    free(in);
    for (int k = 1; k < 3; k++)
        if (c[k])
            weft_comm_destroy(c[k]);
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
    } else if (!strcmp(mode, "elsewhere") && n >= 2) {
        elsewhere(comm, rank, n);
    } else if (!strcmp(mode, "dups")) {
        dups(comm, rank, n);
    } else {
        fprintf(stderr, "usage: probe_lazy ring|crossed|elsewhere|dups (elsewhere: 2 ranks "
                "or more)\n");
        weft_comm_destroy(comm);
        return 2;
    }
    weft_comm_destroy(comm);
    printf("probe_lazy %s rank %d: %s\n", mode, rank, fails ? "FAILED" : "passed");
    return fails ? 1 : 0;
}
