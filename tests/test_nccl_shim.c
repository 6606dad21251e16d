/*
 * test_nccl_shim.c - the NCCL-API shim (build/lib/libnccl.so.2 = libweft_nccl.so) as a
 * program written for NCCL sees it: linked with -lnccl, nccl.h's declarations only.
 *
 * Checks the CPU-side logic, which needs no GPU: version, error strings and the last
 * error, the unique id (made, refused when it is not one, NCCL_COMM_ID honoured, carried
 * to other threads that init with it: 1 rank, 2 ranks on two threads, 3 ranks from one
 * thread in a group, ncclCommInitAll), ncclCommSplit, argument errors of every kind
 * (NULL comm, bad rank/nranks/config, bad dtype/op/root/peer, fp8, a PreMulSum op used
 * with another datatype than its own) giving ncclInvalidArgument / ncclInvalidUsage with a message and
 * leaving outputs alone, and, without a GPU, collectives and ncclMemAlloc failing with
 * ncclUnhandledCudaError that says no GPU is visible. With a GPU it also all-reduces
 * device buffers on 1 and 2 ranks through the shim, and runs PreMulSum ops (host and
 * device scalars, device and host buffers). Ends "N passed, N failed".
 */
#define _GNU_SOURCE             /* sched_getaffinity, CPU_* */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl.h"

static int passed, failed;

static void check(int ok, const char *what)
{
    if (ok) {
        passed++;
    } else {
        failed++;
        printf("FAIL: %s (last error: %s)\n", what, ncclGetLastError(NULL));
    }
}

/* r is the result wanted, and the last error says something */
static void check_err(ncclResult_t got, ncclResult_t want, const char *what)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s -> %s (got %d, want %d)", what, ncclGetErrorString(want),
             (int)got, (int)want);
    check(got == want && ncclGetLastError(NULL)[0] != '\0', buf);
}

/* the GPUs as the shim sees them: WEFT_CUDA=0 hides them */
static int gpus_visible(void)
{
    int n = 0;
    const char *off = getenv("WEFT_CUDA");
    if (off && !strcmp(off, "0"))
        return 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

static int gpu_visible(void)
{
    return gpus_visible() > 0;
}

/* n ranks of one communicator from this thread: ncclCommInitRank in a group, which (unlike
 * ncclCommInitAll, one rank per device) puts any number of ranks on one GPU */
static int init_group(ncclComm_t *comms, int n)
{
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess)
        return 0;
    ncclGroupStart();
    for (int i = 0; i < n; i++)
        ncclCommInitRank(&comms[i], n, id, i);
    return ncclGroupEnd() == ncclSuccess;
}

/* ncclCommInitAll of n ranks: made where no GPU is visible (host-side ranks) or n GPUs
 * are, refused with ncclInvalidArgument and nothing made where fewer are */
static void test_init_all(int n)
{
    ncclComm_t all[4] = { NULL, NULL, NULL, NULL };
    int ndevs = gpus_visible(), r = -1, cnt = -1;
    char what[96];
    if (ndevs > 0 && ndevs < n) {
        snprintf(what, sizeof(what), "ncclCommInitAll, %d ranks on %d GPUs", n, ndevs);
        check_err(ncclCommInitAll(all, n, NULL), ncclInvalidArgument, what);
        check(all[0] == NULL, "... and makes nothing");
        return;
    }
    snprintf(what, sizeof(what), "ncclCommInitAll, %d ranks", n);
    check(ncclCommInitAll(all, n, NULL) == ncclSuccess, what);
    for (int i = 0; i < n; i++) {
        check(ncclCommUserRank(all[i], &r) == ncclSuccess && r == i &&
              ncclCommCount(all[i], &cnt) == ncclSuccess && cnt == n, "InitAll: rank and count");
        ncclCommDestroy(all[i]);
    }
}

static void test_basics(void)
{
    int v = 0;
    check(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE && v == 21903,
          "ncclGetVersion gives NCCL_VERSION_CODE 2.19.3");
    check_err(ncclGetVersion(NULL), ncclInvalidArgument, "ncclGetVersion(NULL)");
    for (int r = 0; r < ncclNumResults; r++)
        for (int s = r + 1; s < ncclNumResults; s++)
            check(strcmp(ncclGetErrorString((ncclResult_t)r),
                         ncclGetErrorString((ncclResult_t)s)) != 0, "error strings differ");
    check(strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0, "ncclSuccess: no error");
    check(strstr(ncclGetErrorString((ncclResult_t)99), "unknown") != NULL,
          "an unknown result code is named unknown");
    check(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    check(ncclMemFree(NULL) == ncclSuccess, "ncclMemFree(NULL) does nothing");
    check_err(ncclMemAlloc(NULL, 64), ncclInvalidArgument, "ncclMemAlloc(NULL ptr)");
    if (!gpu_visible()) {
        void *p = (void *)0x1;
        check_err(ncclMemAlloc(&p, 64), ncclUnhandledCudaError, "ncclMemAlloc without a GPU");
        check(p == (void *)0x1 && strstr(ncclGetLastError(NULL), "no GPU visible"),
              "ncclMemAlloc without a GPU says so and writes nothing");
    }
}

static void test_unique_id(void)
{
    ncclUniqueId a, b;
    check(ncclGetUniqueId(&a) == ncclSuccess && ncclGetUniqueId(&b) == ncclSuccess,
          "ncclGetUniqueId");
    check(sizeof(ncclUniqueId) == 128, "ncclUniqueId is 128 bytes");
    check(memcmp(&a, &b, sizeof(a)) != 0, "two ids differ (each has its own port)");
    check(strncmp(a.internal + 8, "127.0.0.1:", 10) == 0, "the id holds a loopback address");
    check_err(ncclGetUniqueId(NULL), ncclInvalidArgument, "ncclGetUniqueId(NULL)");
    setenv("NCCL_COMM_ID", "127.0.0.1:23456", 1);
    check(ncclGetUniqueId(&a) == ncclSuccess && strcmp(a.internal + 8, "127.0.0.1:23456") == 0,
          "NCCL_COMM_ID is the rendezvous address");
    setenv("NCCL_COMM_ID", "no-port-here", 1);
    check_err(ncclGetUniqueId(&a), ncclInvalidArgument, "NCCL_COMM_ID without a port");
    unsetenv("NCCL_COMM_ID");
}

static void test_init_errors(void)
{
    ncclUniqueId id, zero;
    ncclComm_t c = (ncclComm_t)0x1;
    memset(&zero, 0, sizeof(zero));
    ncclGetUniqueId(&id);
    check_err(ncclCommInitRank(NULL, 1, id, 0), ncclInvalidArgument, "init: comm NULL");
    check_err(ncclCommInitRank(&c, 0, id, 0), ncclInvalidArgument, "init: nranks 0");
    check_err(ncclCommInitRank(&c, 2, id, 2), ncclInvalidArgument, "init: rank == nranks");
    check_err(ncclCommInitRank(&c, 2, id, -1), ncclInvalidArgument, "init: rank -1");
    check_err(ncclCommInitRank(&c, 1, zero, 0), ncclInvalidArgument, "init: a zero id");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.magic = 0x1234;
    check_err(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), ncclInvalidArgument,
              "init: config not from NCCL_CONFIG_INITIALIZER");
    /* fields NCCL's parseCommConfig refuses (the shim took them all before 2026-11-28) */
    static const struct { int cga, min, max, share; const char *what; } badcfg[] = {
        { -1, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,
          "init: config.cgaClusterSize -1" },
        { NCCL_CONFIG_UNDEF_INT, 0, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,
          "init: config.minCTAs 0" },
        { NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, -3, NCCL_CONFIG_UNDEF_INT,
          "init: config.maxCTAs -3" },
        { NCCL_CONFIG_UNDEF_INT, 8, 2, NCCL_CONFIG_UNDEF_INT, "init: config.minCTAs 8 > maxCTAs 2" },
        { NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, 7,
          "init: config.splitShare 7" },
    };
    for (size_t k = 0; k < sizeof(badcfg) / sizeof(badcfg[0]); k++) {
        ncclConfig_t b = NCCL_CONFIG_INITIALIZER;
        b.cgaClusterSize = badcfg[k].cga;
        b.minCTAs = badcfg[k].min;
        b.maxCTAs = badcfg[k].max;
        b.splitShare = badcfg[k].share;
        check_err(ncclCommInitRankConfig(&c, 1, id, 0, &b), ncclInvalidArgument, badcfg[k].what);
    }
    check(c == (ncclComm_t)0x1, "failed inits leave *comm alone");
    check_err(ncclCommInitAll(NULL, 2, NULL), ncclInvalidArgument, "ncclCommInitAll(NULL)");
    check_err(ncclCommInitAll(&c, -1, NULL), ncclInvalidArgument, "ncclCommInitAll ndev -1");
    check(ncclCommInitAll(&c, 0, NULL) == ncclSuccess && c == (ncclComm_t)0x1,
          "ncclCommInitAll ndev 0: success, nothing made (NCCL's answer)");
    int bad = -3;
    check_err(ncclCommInitAll(&c, 1, &bad), ncclInvalidArgument, "ncclCommInitAll devlist -3");
}

/* Everything a collective can get wrong, on a live 1-rank comm. */
static void test_coll_errors(ncclComm_t c)
{
    char host[64] = { 0 }, ref[64] = { 0 };
    check_err(ncclAllReduce(host, host, 4, ncclFloat, ncclSum, NULL, 0), ncclInvalidArgument,
              "allreduce: comm NULL");
    check_err(ncclAllReduce(host, host, 4, (ncclDataType_t)99, ncclSum, c, 0),
              ncclInvalidArgument, "allreduce: dtype 99");
    check_err(ncclAllReduce(host, host, 4, ncclFloat8e4m3, ncclSum, c, 0), ncclInvalidUsage,
              "allreduce: fp8 is not supported");
    check_err(ncclAllReduce(host, host, 4, ncclFloat, (ncclRedOp_t)99, c, 0),
              ncclInvalidArgument, "allreduce: op 99");
    check_err(ncclReduce(host, host, 4, ncclFloat, ncclSum, 1, c, 0), ncclInvalidArgument,
              "reduce: root 1 of 1 rank");
    check_err(ncclBroadcast(host, host, 4, ncclFloat, -1, c, 0), ncclInvalidArgument,
              "broadcast: root -1");
    check_err(ncclSend(host, 4, ncclFloat, 5, c, 0), ncclInvalidArgument, "send: peer 5");
    check_err(ncclRecv(host, 4, ncclFloat, -1, c, 0), ncclInvalidArgument, "recv: peer -1");
    float scalar = 0.5f;
    ncclRedOp_t op;
    check(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, c) ==
          ncclSuccess && (int)op >= ncclNumOps, "ncclRedOpCreatePreMulSum makes an op");
    check_err(ncclAllReduce(host, host, 4, ncclHalf, op, c, 0), ncclInvalidArgument,
              "allreduce with a PreMulSum op made for another datatype");
    check(strstr(ncclGetLastError(NULL), "datatype float, the call's is half") != NULL,
          "... names both datatypes");
    check_err(ncclAllReduce(NULL, host, 4, ncclFloat, op, c, 0), ncclInvalidArgument,
              "allreduce with a PreMulSum op and sendbuff NULL");
    /* a NULL buffer beside a device one: refused before anything moves (it went to the
     * staged path as host memory, and the copy from NULL failed: ncclSystemError) */
    void *dev = NULL;
    if (gpu_visible() && ncclMemAlloc(&dev, 64) == ncclSuccess) {
        check_err(ncclAllReduce(NULL, dev, 4, ncclFloat, ncclSum, c, 0), ncclInvalidArgument,
                  "allreduce: sendbuff NULL, recvbuff on the device");
        check_err(ncclAllGather(dev, NULL, 4, ncclFloat, c, 0), ncclInvalidArgument,
                  "allgather: recvbuff NULL, sendbuff on the device");
        ncclMemFree(dev);
    }
    check(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
    check_err(ncclReduce(NULL, host, 4, ncclFloat, op, 0, c, 0), ncclInvalidArgument,
              "reduce with a PreMulSum op and sendbuff NULL, in a group");
    check_err(ncclGroupEnd(), ncclInvalidArgument, "... and the group ends with that error, "
              "as NCCL's (ncclGroupError)");
    check(ncclRedOpDestroy(op, c) == ncclSuccess, "ncclRedOpDestroy");
    check_err(ncclRedOpDestroy(op, c), ncclInvalidArgument, "ncclRedOpDestroy twice");
    check_err(ncclRedOpDestroy(ncclSum, c), ncclInvalidArgument, "ncclRedOpDestroy(ncclSum)");
    check_err(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, (ncclScalarResidence_t)7, c),
              ncclInvalidArgument, "PreMulSum residence 7");
    /* a bad call inside a group fails at once, and the group ends with its error */
    check(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
    check_err(ncclAllGather(host, host, 4, (ncclDataType_t)-2, c, 0), ncclInvalidArgument,
              "allgather in a group: dtype -2");
    check_err(ncclGroupEnd(), ncclInvalidArgument, "the group ends with the call's error");
    check(ncclGroupStart() == ncclSuccess && ncclGroupEnd() == ncclSuccess,
          "the next group starts clean");
    if (!gpu_visible()) {
        check_err(ncclAllReduce(host, host, 4, ncclFloat, ncclSum, c, 0),
                  ncclUnhandledCudaError, "allreduce without a GPU");
        check(strstr(ncclGetLastError(NULL), "no GPU visible") != NULL,
              "the error says no GPU is visible");
        check_err(ncclCommCuDevice(c, &(int){ 0 }), ncclInvalidUsage,
                  "ncclCommCuDevice of a comm made without a GPU");
    }
    check(memcmp(host, ref, sizeof(host)) == 0, "failed calls wrote nothing");
    ncclResult_t ae = ncclInProgress;
    check(ncclCommGetAsyncError(c, &ae) == ncclSuccess && ae == ncclSuccess,
          "no asynchronous error");
    check_err(ncclCommGetAsyncError(c, NULL), ncclInvalidArgument, "GetAsyncError(NULL)");
    check_err(ncclCommCount(NULL, &(int){ 0 }), ncclInvalidArgument, "ncclCommCount(NULL)");
    check_err(ncclCommRegister(c, host, sizeof(host), NULL), ncclInvalidArgument,
              "ncclCommRegister: handle NULL");
}

typedef struct {
    ncclUniqueId id;
    int rank, nranks;
    ncclResult_t r;
    int count, me, split_size;
    int gpu_ok, premul_ok, mixed_ok, avg_ok;
} rank_arg_t;

/* PreMulSum on the GPU: each rank's input times its own scalar, then summed. An all-reduce
 * of device buffers with a host scalar (rank + 1), a reduce-scatter with the scalar 2 in
 * device memory, an all-reduce of host int32 buffers with the scalar 3. Inputs are
 * h[i] = rank + i. */
static int gpu_premul(ncclComm_t c, int rank, int nranks, cudaStream_t st)
{
    enum { N = 256 };
    float h[N], got[N], *d = NULL, *d2 = NULL, *dk = NULL, two = 2.f, hk = (float)(rank + 1);
    int32_t hi[N], ho[N], k3 = 3;
    ncclRedOp_t op1, op2, op3;
    for (int i = 0; i < N; i++)
        h[i] = (float)(rank + i), hi[i] = rank + i;
    int sum_ranks = nranks * (nranks - 1) / 2, sum_sq = 0, sum_r1 = 0;
    for (int r = 0; r < nranks; r++)
        sum_sq += r * (r + 1), sum_r1 += r + 1;
    int ok = ncclMemAlloc((void **)&d, sizeof(h)) == ncclSuccess &&
             ncclMemAlloc((void **)&d2, sizeof(h)) == ncclSuccess &&
             ncclMemAlloc((void **)&dk, sizeof(two)) == ncclSuccess &&
             cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(dk, &two, sizeof(two), cudaMemcpyHostToDevice) == cudaSuccess &&
             ncclRedOpCreatePreMulSum(&op1, &hk, ncclFloat, ncclScalarHostImmediate, c) ==
                 ncclSuccess &&
             ncclRedOpCreatePreMulSum(&op2, dk, ncclFloat, ncclScalarDevice, c) == ncclSuccess &&
             ncclRedOpCreatePreMulSum(&op3, &k3, ncclInt32, ncclScalarHostImmediate, c) ==
                 ncclSuccess;
    hk = -100.f;        /* read at creation: changing it now changes nothing */
    /* sum_r (r + 1)(r + i) = sum_sq + i * sum_r1 */
    ok = ok && ncclAllReduce(d, d2, N, ncclFloat, op1, c, st) == ncclSuccess &&
         cudaStreamSynchronize(st) == cudaSuccess &&
         cudaMemcpy(got, d2, sizeof(got), cudaMemcpyDeviceToHost) == cudaSuccess;
    for (int i = 0; i < N && ok; i++)
        ok = got[i] == (float)(sum_sq + i * sum_r1);
    /* block `rank` of sum_r 2 (r + i) */
    int per = N / nranks;
    ok = ok && ncclReduceScatter(d, d2, per, ncclFloat, op2, c, st) == ncclSuccess &&
         cudaStreamSynchronize(st) == cudaSuccess &&
         cudaMemcpy(got, d2, per * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess;
    for (int j = 0; j < per && ok; j++)
        ok = got[j] == 2.f * (float)(sum_ranks + nranks * (rank * per + j));
    ok = ok && cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost) == cudaSuccess &&
         memcmp(got, h, sizeof(h)) == 0;        /* the input is left alone */
    ok = ok && ncclAllReduce(hi, ho, N, ncclInt32, op3, c, st) == ncclSuccess &&
         cudaStreamSynchronize(st) == cudaSuccess;
    for (int i = 0; i < N && ok; i++)
        ok = ho[i] == 3 * (sum_ranks + nranks * i) && hi[i] == rank + i;
    ncclRedOpDestroy(op1, c);
    ncclRedOpDestroy(op2, c);
    ncclRedOpDestroy(op3, c);
    ncclMemFree(d), ncclMemFree(d2), ncclMemFree(dk);
    return ok;
}

/* float16 bits of f, a normal number float16 holds exactly */
static uint16_t half_exact(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return (uint16_t)(((u >> 16) & 0x8000) | ((((u >> 23) & 0xff) - 127 + 15) << 10) |
                      ((u >> 13) & 0x3ff));
}

/* ncclAvg as NCCL computes it: float16 inputs times 1/nranks, then summed, so that an
 * average whose sum passes float16's 65504 is finite (before 2026-11-27 the shim summed
 * first: inf); int32 sums, then divides, truncating. In place; inputs 40000 - 32 i on
 * every rank (exact when halved or quartered, so the average is the input) and
 * rank + 3 i. */
static int gpu_avg(ncclComm_t c, int rank, int nranks, cudaStream_t st)
{
    enum { N = 64 };
    uint16_t h[N], got[N], *d = NULL;
    int32_t hi[N], goti[N], *di = NULL;
    for (int i = 0; i < N; i++)
        h[i] = half_exact((float)(40000 - 32 * i)), hi[i] = rank + 3 * i;
    int ok = ncclMemAlloc((void **)&d, sizeof(h)) == ncclSuccess &&
             ncclMemAlloc((void **)&di, sizeof(hi)) == ncclSuccess &&
             cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(di, hi, sizeof(hi), cudaMemcpyHostToDevice) == cudaSuccess &&
             ncclAllReduce(d, d, N, ncclFloat16, ncclAvg, c, st) == ncclSuccess &&
             ncclAllReduce(di, di, N, ncclInt32, ncclAvg, c, st) == ncclSuccess &&
             cudaStreamSynchronize(st) == cudaSuccess &&
             cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost) == cudaSuccess &&
             cudaMemcpy(goti, di, sizeof(goti), cudaMemcpyDeviceToHost) == cudaSuccess;
    int sum_ranks = nranks * (nranks - 1) / 2;
    for (int i = 0; i < N && ok; i++)
        ok = got[i] == h[i] && goti[i] == (sum_ranks + nranks * 3 * i) / nranks;
    ncclMemFree(d), ncclMemFree(di);
    return ok;
}

/* A group that mixes sends and receives with an all-reduce, called in different orders:
 * even ranks the all-reduce first, odd ranks their receive and send first (a ring:
 * to rank+1, from rank-1). NCCL runs a group's calls as one launch, so the order does
 * not matter; run in call order, rank 0 would sit in the all-reduce while rank 1 waits in
 * its receive for rank 0's send (until WEFT_TIMEOUT). */
static int gpu_mixed_group(ncclComm_t c, int rank, int nranks, cudaStream_t st)
{
    enum { N = 1024 };
    float h[N], got[N], *a = NULL, *s = NULL, *r = NULL;
    for (int i = 0; i < N; i++)
        h[i] = (float)(rank * N + i);
    int ok = ncclMemAlloc((void **)&a, sizeof(h)) == ncclSuccess &&
             ncclMemAlloc((void **)&s, sizeof(h)) == ncclSuccess &&
             ncclMemAlloc((void **)&r, sizeof(h)) == ncclSuccess &&
             cudaMemcpy(a, h, sizeof(h), cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(s, h, sizeof(h), cudaMemcpyHostToDevice) == cudaSuccess;
    int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
    ok = ok && ncclGroupStart() == ncclSuccess;
    if (ok && rank % 2 == 0)
        ok = ncclAllReduce(a, a, N, ncclFloat, ncclSum, c, st) == ncclSuccess &&
             ncclSend(s, N, ncclFloat, to, c, st) == ncclSuccess &&
             ncclRecv(r, N, ncclFloat, from, c, st) == ncclSuccess;
    else if (ok)
        ok = ncclRecv(r, N, ncclFloat, from, c, st) == ncclSuccess &&
             ncclSend(s, N, ncclFloat, to, c, st) == ncclSuccess &&
             ncclAllReduce(a, a, N, ncclFloat, ncclSum, c, st) == ncclSuccess;
    ok = ncclGroupEnd() == ncclSuccess && ok && cudaStreamSynchronize(st) == cudaSuccess &&
         cudaMemcpy(got, r, sizeof(got), cudaMemcpyDeviceToHost) == cudaSuccess;
    for (int i = 0; i < N && ok; i++)
        ok = got[i] == (float)(from * N + i);
    ok = ok && cudaMemcpy(got, a, sizeof(got), cudaMemcpyDeviceToHost) == cudaSuccess;
    int sum_ranks = nranks * (nranks - 1) / 2;
    for (int i = 0; i < N && ok; i++)
        ok = got[i] == (float)(sum_ranks * N + nranks * i);
    ncclMemFree(a), ncclMemFree(s), ncclMemFree(r);
    return ok;
}

static void *rank_main(void *v)
{
    rank_arg_t *a = v;
    ncclComm_t c = NULL, s = NULL;
    a->r = ncclCommInitRank(&c, a->nranks, a->id, a->rank);
    if (a->r != ncclSuccess)
        return NULL;
    ncclCommCount(c, &a->count);
    ncclCommUserRank(c, &a->me);
    /* rank 0 alone, the others together */
    a->r = ncclCommSplit(c, a->rank == 0 ? 0 : 1, a->rank, &s, NULL);
    if (a->r == ncclSuccess && s != NULL) {
        ncclCommCount(s, &a->split_size);
        ncclCommDestroy(s);
    }
    if (a->r == ncclSuccess && gpu_visible()) {
        /* the runtime path: a device all-reduce through the shim */
        float *d = NULL, h[256];
        cudaStream_t st;
        for (int i = 0; i < 256; i++)
            h[i] = (float)(a->rank + i);
        a->gpu_ok = cudaStreamCreate(&st) == cudaSuccess && ncclMemAlloc((void **)&d, sizeof(h)) ==
                    ncclSuccess && cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice) ==
                    cudaSuccess && ncclAllReduce(d, d, 256, ncclFloat, ncclSum, c, st) ==
                    ncclSuccess && cudaStreamSynchronize(st) == cudaSuccess &&
                    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost) == cudaSuccess;
        int sum_ranks = a->nranks * (a->nranks - 1) / 2;
        for (int i = 0; i < 256 && a->gpu_ok; i++)
            a->gpu_ok = h[i] == (float)(sum_ranks + a->nranks * i);
        ncclMemFree(d);
        a->premul_ok = a->gpu_ok && gpu_premul(c, a->rank, a->nranks, st);
        a->mixed_ok = a->gpu_ok && gpu_mixed_group(c, a->rank, a->nranks, st);
        a->avg_ok = a->gpu_ok && gpu_avg(c, a->rank, a->nranks, st);
        cudaStreamDestroy(st);
    }
    ncclCommDestroy(c);
    return NULL;
}

static void test_threads(int nranks)
{
    rank_arg_t a[4];
    pthread_t t[4];
    ncclUniqueId id;
    check(ncclGetUniqueId(&id) == ncclSuccess, "id for the threads");
    for (int r = 0; r < nranks; r++) {
        a[r] = (rank_arg_t){ .rank = r, .nranks = nranks, .r = ncclInternalError };
        memcpy(&a[r].id, &id, sizeof(id));    /* as it would travel: 128 bytes */
        pthread_create(&t[r], NULL, rank_main, &a[r]);
    }
    for (int r = 0; r < nranks; r++)
        pthread_join(t[r], NULL);
    int ok = 1, gpu = gpu_visible();
    for (int r = 0; r < nranks; r++) {
        ok &= a[r].r == ncclSuccess && a[r].count == nranks && a[r].me == r &&
              a[r].split_size == (r == 0 ? 1 : nranks - 1);
        if (gpu) {
            check(a[r].gpu_ok, "a device all-reduce through the shim");
            check(a[r].premul_ok, "PreMulSum all-reduce and reduce-scatter, host and device "
                  "scalars, device and host buffers");
            check(a[r].avg_ok, "ncclAvg: float16 premultiplied (no inf where the sum passes "
                  "65504), int32 summed then divided");
            if (nranks > 1)
                check(a[r].mixed_ok, "a group of a ring's send and receive and an all-reduce, "
                      "called in another order on odd ranks");
        }
    }
    char what[96];
    snprintf(what, sizeof(what), "%d ranks on %d threads init from one id, count, rank, split",
             nranks, nranks);
    check(ok, what);
}

static void *fail_elsewhere(void *v)
{
    int n;
    *(ncclResult_t *)v = ncclCommCount(NULL, &n);
    return NULL;
}

/* ncclGetLastError is the process's, as NCCL's: a thread that watches the communicators
 * reads what another thread's call hit (before 2026-11-27 it was per thread). */
static void test_last_error_shared(void)
{
    pthread_t t;
    ncclResult_t r = ncclSuccess;
    ncclGetVersion(NULL);       /* this thread's own last error first */
    if (pthread_create(&t, NULL, fail_elsewhere, &r) != 0) {
        check(0, "a thread for the shared last error");
        return;
    }
    pthread_join(t, NULL);
    check(r == ncclInvalidArgument && strstr(ncclGetLastError(NULL), "ncclCommCount") != NULL,
          "ncclGetLastError shows another thread's error");
}

static void test_grouped_splits(void)
{
    /* one thread, two ranks: splits in a group run together at ncclGroupEnd (before
     * 2026-11-27 the first blocked, waiting for the second, until WEFT_TIMEOUT) */
    ncclComm_t two[2], sub[2] = { NULL, NULL };
    int r = -1, n = -1;
    if (!init_group(two, 2)) {
        check(0, "2 ranks from one thread in a group");
        return;
    }
    ncclGroupStart();
    for (int i = 0; i < 2; i++)
        ncclCommSplit(two[i], 7, 1 - i, &sub[i], NULL);
    check(ncclGroupEnd() == ncclSuccess, "2 splits in one group on one thread");
    for (int i = 0; i < 2; i++)
        check(sub[i] && ncclCommUserRank(sub[i], &r) == ncclSuccess && r == 1 - i &&
              ncclCommCount(sub[i], &n) == ncclSuccess && n == 2,
              "grouped split: rank by key, count 2");
    /* a group with a refused call runs none of its calls: rank 1's split alone would
     * wait for rank 0's until the timeout */
    ncclComm_t lone = NULL;
    ncclGroupStart();
    check_err(ncclCommSplit(two[0], -5, 0, &sub[0], NULL), ncclInvalidArgument,
              "in a group: split with color -5");
    check(ncclCommSplit(two[1], 3, 0, &lone, NULL) == ncclSuccess, "... then a good split");
    check_err(ncclGroupEnd(), ncclInvalidArgument, "the group fails, nothing of it ran");
    check(strstr(ncclGetLastError(NULL), "color -5") != NULL,
          "... and the last error is still the refused call's own");
    ncclResult_t ae = ncclSuccess;
    check(lone != NULL && ncclCommGetAsyncError(lone, &ae) == ncclSuccess &&
          ae == ncclInvalidArgument, "... and the good split's communicator carries the error");
    ncclCommDestroy(lone);
    for (int i = 0; i < 2; i++) {
        ncclCommDestroy(sub[i]);
        ncclCommDestroy(two[i]);
    }
}

/* An abort from another thread while this one issues calls (PyTorch's watchdog aborts while
 * the main thread enqueues): every call before it succeeds, every call after it fails,
 * and none touches freed memory (under ASan: before 2026-11-27 a call that had checked
 * the comm just before the abort used the freed ncclComm). Trials at random moments. */
typedef struct {
    ncclComm_t c;
    float *d;
    cudaStream_t st;
    int calls, ended;
    ncclResult_t last;
} spin_arg_t;

static void *spin_calls(void *v)
{
    spin_arg_t *a = v;
    for (a->calls = 0; a->calls < 1000000; a->calls++) {
        a->last = ncclAllReduce(a->d, a->d, 4, ncclFloat, ncclSum, a->c, a->st);
        if (a->last != ncclSuccess)
            break;
    }
    __atomic_store_n(&a->ended, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void test_abort_race(int trials)
{
    int ok = 1;
    unsigned seed = 12345;
    for (int k = 0; k < trials && ok; k++) {
        ncclUniqueId id;
        spin_arg_t a = { 0 };
        pthread_t t;
        ok = ncclGetUniqueId(&id) == ncclSuccess && ncclCommInitRank(&a.c, 1, id, 0) ==
             ncclSuccess && cudaStreamCreate(&a.st) == cudaSuccess &&
             ncclMemAlloc((void **)&a.d, 4 * sizeof(float)) == ncclSuccess &&
             pthread_create(&t, NULL, spin_calls, &a) == 0;
        if (!ok)
            break;
        usleep(rand_r(&seed) % 300);
        ok = ncclCommAbort(a.c) == ncclSuccess;
        pthread_join(t, NULL);
        ok = ok && a.ended && a.last != ncclSuccess;
        if (!ok)
            printf("trial %d: abort %s, the calling thread %s after %d calls (last %d)\n", k,
                   "returned", a.ended ? "ended" : "ran on", a.calls, (int)a.last);
        ncclMemFree(a.d);
        cudaStreamDestroy(a.st);
    }
    char what[96];
    snprintf(what, sizeof(what), "%d aborts while another thread calls: its calls then fail, "
             "nothing freed under it", trials);
    check(ok, what);
}

/* procs: ranks as processes under weftrun, with NCCL_COMM_ID (else weftrun's rendezvous
 * address, WEFT_ADDR) set, so that every rank's ncclGetUniqueId gives the same id, and neither WEFT_BIND nor WEFT_TIMEOUT: the shim's
 * defaults are NCCL's. Init leaves the process's cpus alone (weft's own init binds each
 * of 2 ranks on 2 cores to one: a PyTorch process's other threads would be held there),
 * and a call has no timeout: rank 1 comes 1 s late to an all-reduce, which rank 0 logs at
 * WEFT_WAIT_WARN with "WEFT_TIMEOUT off" (run.sh looks for it) and then completes. Needs a
 * GPU, or the emulated runtime. Before 2026-11-27 both ranks were bound, and a call
 * failed after 300 s. */
static int procs_mode(void)
{
    const char *r = getenv("WEFT_RANK"), *n = getenv("WEFT_WORLD_SIZE");
    if (getenv("NCCL_COMM_ID") == NULL && getenv("WEFT_ADDR") != NULL)
        setenv("NCCL_COMM_ID", getenv("WEFT_ADDR"), 1);
    if (r == NULL || n == NULL || getenv("NCCL_COMM_ID") == NULL) {
        printf("FAIL procs: run under weftrun (or with NCCL_COMM_ID set)\n");
        return 1;
    }
    int rank = atoi(r), nranks = atoi(n);
    cpu_set_t before, after;
    CPU_ZERO(&before);
    CPU_ZERO(&after);
    sched_getaffinity(0, sizeof(before), &before);
    ncclUniqueId id;
    ncclComm_t c = NULL;
    check(ncclGetUniqueId(&id) == ncclSuccess &&
          ncclCommInitRank(&c, nranks, id, rank) == ncclSuccess, "procs: init");
    sched_getaffinity(0, sizeof(after), &after);
    check(CPU_EQUAL(&before, &after), "procs: init left the process's cpus alone");
    enum { N = 16 };
    float h[N], *d = NULL;
    for (int i = 0; i < N; i++)
        h[i] = (float)(rank + i);
    cudaStream_t st = NULL;
    int ok = c != NULL && cudaStreamCreate(&st) == cudaSuccess &&
             ncclMemAlloc((void **)&d, sizeof(h)) == ncclSuccess &&
             cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice) == cudaSuccess;
    if (ok && rank == 1)
        sleep(1);
    ok = ok && ncclAllReduce(d, d, N, ncclFloat, ncclSum, c, st) == ncclSuccess &&
         cudaStreamSynchronize(st) == cudaSuccess &&
         cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost) == cudaSuccess;
    for (int i = 0; i < N && ok; i++)
        ok = h[i] == (float)(nranks * (nranks - 1) / 2 + nranks * i);
    check(ok, "procs: an all-reduce with a rank 1 s late");
    ncclMemFree(d);
    if (st != NULL)
        cudaStreamDestroy(st);
    if (c)
        ncclCommDestroy(c);
    printf("test_nccl_shim procs rank %d: %d passed, %d failed\n", rank, passed, failed);
    return failed != 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "procs"))
        return procs_mode();
    /* a group that waits in a cycle must fail within the test's bound, not after 300 s */
    setenv("WEFT_TIMEOUT", "30", 0);
    int gpu = gpu_visible();
#ifdef SHIM_EMU
    printf("test_nccl_shim: the CUDA runtime emulated on the host (tests/emu_cudart.c): the "
           "GPU half over host memory%s\n", gpu ? "" : ", but no GPU is visible (WEFT_CUDA=0?)");
    check(gpu, "the emulated GPU is visible");
#else
    printf("test_nccl_shim: %s\n", gpu ? "a GPU is visible: runtime checks included"
                                       : "no GPU visible: CPU-side checks only (device "
                                         "collectives skipped)");
#endif
    test_basics();
    test_unique_id();
    test_init_errors();
    test_last_error_shared();

    ncclUniqueId id;
    ncclComm_t c = NULL, s = (ncclComm_t)0x1;
    check(ncclGetUniqueId(&id) == ncclSuccess && ncclCommInitRank(&c, 1, id, 0) == ncclSuccess
          && c != NULL, "1 rank: init from a unique id");
    int n = -1, r = -1;
    check(ncclCommCount(c, &n) == ncclSuccess && n == 1 && ncclCommUserRank(c, &r) ==
          ncclSuccess && r == 0, "1 rank: count 1, rank 0");
    test_coll_errors(c);
    check(ncclCommSplit(c, NCCL_SPLIT_NOCOLOR, 0, &s, NULL) == ncclSuccess && s == NULL,
          "split with NCCL_SPLIT_NOCOLOR gives NULL");
    check_err(ncclCommSplit(c, -5, 0, &s, NULL), ncclInvalidArgument, "split: color -5");
    check(ncclCommFinalize(c) == ncclSuccess, "finalize");
    check_err(ncclAllReduce(&n, &n, 1, ncclInt, ncclSum, c, 0), ncclInvalidUsage,
              "allreduce after finalize");
    check(ncclCommDestroy(c) == ncclSuccess, "destroy");
    check(ncclCommDestroy(NULL) == ncclSuccess && ncclCommAbort(NULL) == ncclSuccess,
          "destroy and abort of NULL succeed, as NCCL's (cleanup after a failed init)");

    test_threads(2);
    test_threads(4);
    if (gpu)
        test_abort_race(100);

    /* one thread, three ranks: the inits must run together at ncclGroupEnd */
    ncclComm_t g[3] = { NULL, NULL, NULL };
    check(ncclGetUniqueId(&id) == ncclSuccess, "id for the group");
    ncclGroupStart();
    for (int i = 0; i < 3; i++)
        ncclCommInitRank(&g[i], 3, id, i);
    check(ncclGroupEnd() == ncclSuccess, "3 ranks init in one group on one thread");
    for (int i = 0; i < 3; i++) {
        check(ncclCommUserRank(g[i], &r) == ncclSuccess && r == i, "grouped init: rank");
        check(ncclCommAbort(g[i]) == ncclSuccess, "abort frees the comm");
    }
    test_grouped_splits();
    test_init_all(2);
    test_init_all(4);
    printf("test_nccl_shim: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
