/*
 * test_cuda.c - weft's CUDA parts: the memory-type dispatch everywhere, the kernels and
 * the stream calls where a GPU is visible (built only with CUDA; make CUDA=0 leaves it out).
 *
 * WEFT_CUDA=0 (in a forked child): no GPU and no CUDA call whatever the machine has.
 * Without a GPU (this part runs on every CUDA build): host pointers are typed HOST,
 * mem_cuda_visible says why there is no GPU, the CUDA table refuses copy/reduce/divide
 * with WEFT_ERR_UNSUPPORTED naming the reason, weft_cuda_available() is 0 with a message,
 * and every stream call fails the same way without touching its buffers. The GPU checks
 * then print "SKIP: no GPU visible" and count nothing.
 *
 * With a GPU: device pointers are typed CUDA; every dtype x op (and divide) through the
 * CUDA table against the host kernels (kern_reduce, bit for bit; inputs without NaN), at
 * sizes around the 16-byte vector width, aligned and at an odd element offset, in place
 * and not; PreMulSum's scaling kernel against kern_premul; the stream calls on 1 rank (device, host and mixed buffers, ordered after a
 * kernel on the caller's stream), and all-reduce, reduce-scatter, all-gather, broadcast
 * on 2, 4 and 8 ranks sharing the one GPU, each rank a thread with its own stream, and on
 * 2 and 4 ranks as processes (CUDA IPC handles): in place and not, AVG and MIN, reduce,
 * a sendrecv ring, and counts that disagree failing every rank with WEFT_ERR_MISMATCH.
 * Ends "N passed, N failed".
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "weft.h"
#include "weft_cuda.h"
#include "cuda_kern.h"
#include "memtype.h"
#include "reduce.h"
#include "sock.h"
#include "cuda_coll.h"

static int passed, failed;

__attribute__((format(printf, 2, 3)))
static void check(int ok, const char *fmt, ...)
{
    if (ok) {
        passed++;
        return;
    }
    failed++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL: ");
    vprintf(fmt, ap);
    printf(" (last error: %s)\n", weft_last_error());
    va_end(ap);
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* n elements of dtype: small integers and finite floats, so products stay finite */
static void fill(weft_dtype_t dt, void *buf, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) {
        int64_t v = (int64_t)(rng(s) % 41) - 20;
        switch (dt) {
        case WEFT_INT8: case WEFT_UINT8: ((int8_t *)buf)[i] = (int8_t)v; break;
        case WEFT_INT32: case WEFT_UINT32: ((int32_t *)buf)[i] = (int32_t)(v * 100003); break;
        case WEFT_INT64: case WEFT_UINT64: ((int64_t *)buf)[i] = v * 1000000007; break;
        case WEFT_FLOAT16: ((uint16_t *)buf)[i] = kern_float_to_half((float)v / 3); break;
        case WEFT_BFLOAT16: ((uint16_t *)buf)[i] = kern_float_to_bf16((float)v / 3); break;
        case WEFT_FLOAT32: ((float *)buf)[i] = (float)v / 3; break;
        case WEFT_FLOAT64: ((double *)buf)[i] = (double)v / 3; break;
        }
    }
}

static void test_no_gpu(void)
{
    char host[64], ref[64];
    int stack_var = 0;
    void *heap = malloc(64);
    memset(host, 7, sizeof(host));
    memcpy(ref, host, sizeof(ref));
    check(mem_type_of(host) == MEM_HOST && mem_type_of(heap) == MEM_HOST &&
          mem_type_of(&stack_var) == MEM_HOST && mem_type_of(NULL) == MEM_HOST,
          "host pointers (stack, heap, NULL) are typed HOST");
    free(heap);
    const char *why = NULL;
    check(!mem_cuda_visible(&why) && why && strstr(why, "no GPU visible"),
          "mem_cuda_visible: 0, and why: %s", why ? why : "(none)");
    const mem_ops_t *cu = mem_ops_for(MEM_CUDA);
    check(!cu->usable && cu->copy(host, ref, 8, 0) == WEFT_ERR_UNSUPPORTED &&
          strstr(weft_last_error(), "no GPU visible"), "the CUDA copy is refused: no GPU");
    check(cu->reduce(host, ref, ref, 4, WEFT_FLOAT32, WEFT_SUM, 0, 0) == WEFT_ERR_UNSUPPORTED &&
          cu->divide(host, ref, 4, WEFT_FLOAT32, 2) == WEFT_ERR_UNSUPPORTED,
          "the CUDA reduce and divide are refused");
    check(weft_cuda_available() == 0 && strstr(weft_last_error(), "no GPU visible"),
          "weft_cuda_available: 0 with a message");
    weft_comm_t *c = NULL;
    check(weft_comm_init_rank(0, 1, "127.0.0.1:0", &c) == WEFT_OK, "1-rank comm");
    check(weft_allreduce_stream(host, host, 4, WEFT_FLOAT32, WEFT_SUM, c, 0) ==
          WEFT_ERR_UNSUPPORTED && strstr(weft_last_error(), "no GPU visible"),
          "allreduce_stream without a GPU: unsupported, says why");
    check(weft_allreduce_stream(host, host, 4, WEFT_FLOAT32, WEFT_SUM, NULL, 0) ==
          WEFT_ERR_INVALID_ARG, "allreduce_stream with comm NULL");
    check(weft_broadcast_stream(host, host, 4, WEFT_FLOAT32, 0, c, 0) == WEFT_ERR_UNSUPPORTED &&
          weft_sendrecv_stream(host, 1, 0, host + 8, 1, 0, WEFT_UINT8, c, 0) ==
          WEFT_ERR_UNSUPPORTED, "broadcast/sendrecv_stream without a GPU");
    check(memcmp(host, ref, sizeof(ref)) == 0, "refused calls wrote nothing");
    check(weft_stream_error(c) == WEFT_OK && weft_stream_error(NULL) == WEFT_ERR_INVALID_ARG,
          "weft_stream_error: none on a comm without queued calls; comm NULL refused");
    weft_comm_destroy(c);
}

/* Whether a communicator's stream calls queue (WEFT_CUDA_ASYNC and the ranks' GPU keys),
 * and whether rank 0 runs every share: queue.c's choice, no GPU needed. */
static void test_queue_choice(void)
{
    static const struct {
        long async;
        int n;
        int64_t gpu[4];
        int each, queue, lead;
        const char *what;
    } t[] = {
        { -1, 3, { 5, 6, 7 }, 0, 1, 0, "auto, three GPUs: queued, each rank its share" },
        { -1, 2, { 5, 5 }, 0, 0, 1, "auto, two ranks on one GPU: blocking, rank 0 runs all" },
        { -1, 3, { 5, 6, 5 }, 0, 0, 0, "auto, two of three ranks share a GPU: blocking" },
        { -1, 4, { 9, 8, 7, 6 }, 0, 1, 0, "auto, four GPUs: queued" },
        { 1, 2, { 5, 5 }, 0, 1, 1, "1, two ranks on one GPU: queued, rank 0 runs all" },
        { 1, 4, { 5, 5, 5, 5 }, 1, 1, 0, "1 with WEFT_TEST_CUDA_SHARES=each: each its share" },
        { 0, 2, { 5, 6 }, 0, 0, 0, "0, two GPUs: blocking" },
        { -1, 2, { -1, -1 }, 0, 0, 1, "auto, no PCI address, the same ordinal: one GPU" },
        { -1, 2, { 1ll << 32, 0 }, 0, 1, 0, "auto, PCI domains 0x10000 and 0: two GPUs" },
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        int lead = -1;
        int q = cuda_queue_choose(t[i].async, t[i].each, t[i].n, t[i].gpu, &lead);
        check(q == t[i].queue && lead == t[i].lead, "queue choice: %s (got queue %d, lead %d)",
              t[i].what, q, lead);
    }
}

/* ---- with a GPU ------------------------------------------------------------------ */

static void test_kernels(void)
{
    static const size_t sizes[] = { 1, 7, 8, 15, 16, 17, 1000, (1 << 20) + 3 };
    const size_t maxn = (1 << 20) + 3 + 8, maxb = maxn * 8;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    char *ha = malloc(maxb), *hb = malloc(maxb), *want = malloc(maxb), *got = malloc(maxb);
    char *da, *db, *dd;
    check(cudaMalloc((void **)&da, maxb) == cudaSuccess && cudaMalloc((void **)&db, maxb) ==
          cudaSuccess && cudaMalloc((void **)&dd, maxb) == cudaSuccess, "cudaMalloc");
    check(mem_type_of(da) == MEM_CUDA && mem_type_of(ha) == MEM_HOST,
          "device memory is typed CUDA, host memory HOST");
    const mem_ops_t *cu = mem_ops_for(MEM_CUDA);
    for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++) {
        size_t esz = weft_dtype_size((weft_dtype_t)dt);
        for (int op = 0; op < WEFT_NUM_OPS; op++)
            for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
                for (int off = 0; off < 2; off++)
                    for (int inplace = 0; inplace < 2; inplace++) {
                        size_t n = sizes[si], o = off * esz, b = n * esz;
                        int div = op == WEFT_AVG ? 3 : 0;
                        fill((weft_dtype_t)dt, ha, n, &seed);
                        fill((weft_dtype_t)dt, hb, n, &seed);
                        kern_reduce(want, ha, hb, n, (weft_dtype_t)dt, (weft_op_t)op, div);
                        cudaMemcpy(da + o, ha, b, cudaMemcpyHostToDevice);
                        cudaMemcpy(db + o, hb, b, cudaMemcpyHostToDevice);
                        char *dst = inplace ? da + o : dd + o;
                        weft_status_t st = cu->reduce(dst, da + o, db + o, n, (weft_dtype_t)dt,
                                                      (weft_op_t)op, div, 0);
                        cudaMemcpy(got, dst, b, cudaMemcpyDeviceToHost);
                        check(st == WEFT_OK && memcmp(got, want, b) == 0,
                              "cuda reduce %s %s n=%zu off=%d inplace=%d",
                              weft_dtype_name((weft_dtype_t)dt), weft_op_name((weft_op_t)op),
                              n, off, inplace);
                    }
        size_t n = 1000;
        fill((weft_dtype_t)dt, ha, n, &seed);
        kern_divide(want, ha, n, (weft_dtype_t)dt, 5);
        cudaMemcpy(da, ha, n * esz, cudaMemcpyHostToDevice);
        weft_status_t st = cu->divide(dd, da, n, (weft_dtype_t)dt, 5);
        cudaMemcpy(got, dd, n * esz, cudaMemcpyDeviceToHost);
        check(st == WEFT_OK && memcmp(got, want, n * esz) == 0, "cuda divide %s",
              weft_dtype_name((weft_dtype_t)dt));
    }
    check(cu->copy(dd, da, 4096, 0) == WEFT_OK, "cuda copy");
    /* PreMulSum's scaling (the NCCL shim's): the scalar by value and from device memory */
    for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++) {
        size_t esz = weft_dtype_size((weft_dtype_t)dt), n = 1000;
        for (int from_dev = 0; from_dev < 2; from_dev++) {
            fill((weft_dtype_t)dt, ha, n, &seed);
            fill((weft_dtype_t)dt, hb, 1, &seed);
            kern_premul(want, ha, n, (weft_dtype_t)dt, hb);
            cudaMemcpy(da, ha, n * esz, cudaMemcpyHostToDevice);
            cudaMemcpy(db, hb, esz, cudaMemcpyHostToDevice);
            int e = cuda_kern_premul(dd, da, n, (weft_dtype_t)dt, from_dev ? db : NULL,
                                     from_dev ? NULL : hb, NULL);
            cudaMemcpy(got, dd, n * esz, cudaMemcpyDeviceToHost);
            check(e == 0 && memcmp(got, want, n * esz) == 0, "cuda premul %s, scalar %s",
                  weft_dtype_name((weft_dtype_t)dt), from_dev ? "on the device" : "by value");
        }
    }
    /* the stream queue's fetch: mapped pinned host memory into device memory, read when
     * the kernel runs, and its refusals */
    unsigned *mh = NULL, *mdev = NULL;
    const size_t words = 3 * sizeof(cuda_multi_t) / 4;
    if (cudaHostAlloc((void **)&mh, words * 4, cudaHostAllocMapped) == cudaSuccess &&
        cudaHostGetDevicePointer((void **)&mdev, mh, 0) == cudaSuccess) {
        for (size_t k = 0; k < words; k++)
            mh[k] = (unsigned)rng(&seed);
        int e = cuda_kern_fetch(dd, mdev, words * 4, NULL);
        e = e ? e : (int)cudaDeviceSynchronize();
        cudaMemcpy(got, dd, words * 4, cudaMemcpyDeviceToHost);
        check(e == 0 && memcmp(got, mh, words * 4) == 0, "cuda fetch: %zu words from mapped "
              "host memory", words);
        for (size_t k = 0; k < words; k++)
            mh[k] = ~mh[k];
        e = cuda_kern_fetch(dd + 4, mdev + 1, words * 4 - 4, NULL);
        e = e ? e : (int)cudaDeviceSynchronize();
        cudaMemcpy(got, dd, words * 4, cudaMemcpyDeviceToHost);
        check(e == 0 && memcmp(got + 4, mh + 1, words * 4 - 4) == 0,
              "cuda fetch: a second fetch sees the host's new contents, at a 4-byte offset");
        check(cuda_kern_fetch(dd, mdev, 6, NULL) == (int)cudaErrorInvalidValue &&
              cuda_kern_fetch(dd + 2, mdev, 8, NULL) == (int)cudaErrorInvalidValue &&
              cuda_kern_fetch(dd, mdev, 0, NULL) == 0, "cuda fetch refuses sizes and "
              "addresses that are not 4-byte multiples, does nothing for 0 bytes");
        cudaGetLastError();
    } else {
        check(0, "cudaHostAlloc of mapped memory");
    }
    cudaFreeHost(mh);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
    free(ha);
    free(hb);
    free(want);
    free(got);
}

/* A free loopback rendezvous address for a job of threads. */
static void pick_addr(char *buf, size_t len)
{
    struct sockaddr_in sa;
    int fd = -1;
    sock_parse_addr("127.0.0.1:0", &sa);
    if (sock_listen(&sa, 1, &fd) == WEFT_OK)
        close(fd);
    snprintf(buf, len, "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
}

/* The GPU-to-GPU path's checks (kernels/cuda/ipc.c) for rank r of n on comm c: every
 * collective out of place and in place, AVG/MIN on integers, a sendrecv ring, with the
 * stream queue (WEFT_CUDA_ASYNC=1) a call that returns before a late peer has called, and
 * last a call whose counts disagree (WEFT_ERR_MISMATCH on every rank: from that call when
 * calls block, the communicator still usable; from the next call when they are queued).
 * Returns 1 when all held; else prints what failed. */
#define IN 1031     /* elements per rank: odd, so slices end off the vector width */
static int ipc_checks(int r, int n, weft_comm_t *c, cudaStream_t st, int want_queue)
{
    int async = 0;
    size_t tot = (size_t)n * IN;
    int32_t *d_a = NULL, *d_b = NULL, *h = malloc(sizeof(int32_t) * tot);
    int ok = h != NULL && cudaMalloc((void **)&d_a, sizeof(int32_t) * tot) == cudaSuccess &&
             cudaMalloc((void **)&d_b, sizeof(int32_t) * tot) == cudaSuccess;
    const char *what = "setup";
#define UP(dst, cnt) (cudaMemcpy(dst, h, sizeof(int32_t) * (cnt), cudaMemcpyHostToDevice) == cudaSuccess)
#define DOWN(src, cnt) (cudaMemcpy(h, src, sizeof(int32_t) * (cnt), cudaMemcpyDeviceToHost) == cudaSuccess)
    /* all-reduce AVG in place: avg over ranks of r*n + i%100 = n(n-1)/2 + i%100 */
    if (ok) {
        what = "all-reduce AVG in place";
        for (size_t i = 0; i < IN; i++)
            h[i] = r * n + (int32_t)(i % 100);
        ok = UP(d_a, IN) && weft_allreduce_stream(d_a, d_a, IN, WEFT_INT32, WEFT_AVG, c, st) ==
             WEFT_OK && cudaStreamSynchronize(st) == cudaSuccess && DOWN(d_a, IN);
        for (size_t i = 0; ok && i < IN; i++)
            ok = h[i] == n * (n - 1) / 2 + (int32_t)(i % 100);
    }
    /* all-reduce MIN out of place: min over ranks of (i*7 + r*13) % 101 */
    if (ok) {
        what = "all-reduce MIN";
        for (size_t i = 0; i < IN; i++)
            h[i] = (int32_t)((i * 7 + (size_t)r * 13) % 101);
        ok = UP(d_a, IN) && weft_allreduce_stream(d_a, d_b, IN, WEFT_INT32, WEFT_MIN, c, st) ==
             WEFT_OK && cudaStreamSynchronize(st) == cudaSuccess && DOWN(d_b, IN);
        for (size_t i = 0; ok && i < IN; i++) {
            int32_t m = INT32_MAX;
            for (int q = 0; q < n; q++)
                m = (int32_t)((i * 7 + (size_t)q * 13) % 101) < m ? (int32_t)((i * 7 + (size_t)q * 13) % 101) : m;
            ok = h[i] == m;
        }
    }
    /* reduce-scatter in place (recv = send + r*IN), then all-gather in place */
    if (ok) {
        what = "reduce-scatter and all-gather in place";
        for (size_t i = 0; i < tot; i++)
            h[i] = r + (int32_t)i;
        ok = UP(d_a, tot) && weft_reduce_scatter_stream(d_a, d_a + (size_t)r * IN, IN, WEFT_INT32,
                                                        WEFT_SUM, c, st) == WEFT_OK &&
             weft_allgather_stream(d_a + (size_t)r * IN, d_a, IN, WEFT_INT32, c, st) == WEFT_OK &&
             cudaStreamSynchronize(st) == cudaSuccess && DOWN(d_a, tot);
        for (size_t i = 0; ok && i < tot; i++)
            ok = h[i] == n * (n - 1) / 2 + n * (int32_t)i;
    }
    /* broadcast from rank n-1 out of place; reduce SUM to rank 0 */
    if (ok) {
        what = "broadcast and reduce";
        for (size_t i = 0; i < IN; i++)
            h[i] = r * 1000 + (int32_t)i;
        ok = UP(d_a, IN) && weft_broadcast_stream(d_a, d_b, IN, WEFT_INT32, n - 1, c, st) ==
             WEFT_OK && cudaStreamSynchronize(st) == cudaSuccess && DOWN(d_b, IN);
        for (size_t i = 0; ok && i < IN; i++)
            ok = h[i] == (n - 1) * 1000 + (int32_t)i;
        for (size_t i = 0; ok && i < IN; i++)
            h[i] = r + (int32_t)i;
        ok = ok && UP(d_a, IN) && UP(d_b, IN) &&
             weft_reduce_stream(d_a, d_b, IN, WEFT_INT32, WEFT_SUM, 0, c, st) == WEFT_OK &&
             cudaStreamSynchronize(st) == cudaSuccess && DOWN(d_b, IN);
        for (size_t i = 0; ok && i < IN; i++)   /* rank 0 has the sum, the others their copy */
            ok = h[i] == (r == 0 ? n * (n - 1) / 2 + n * (int32_t)i : r + (int32_t)i);
    }
    /* a sendrecv ring: from r-1, to r+1 */
    if (ok) {
        what = "sendrecv ring";
        for (size_t i = 0; i < IN; i++)
            h[i] = r * 100000 + (int32_t)i;
        ok = UP(d_a, IN) && weft_sendrecv_stream(d_a, IN, (r + 1) % n, d_b, IN, (r + n - 1) % n,
                                                 WEFT_INT32, c, st) == WEFT_OK &&
             cudaStreamSynchronize(st) == cudaSuccess && DOWN(d_b, IN);
        for (size_t i = 0; ok && i < IN; i++)
            ok = h[i] == ((r + n - 1) % n) * 100000 + (int32_t)i;
    }
    /* the stream queue runs exactly where it should (queue.c: ranks as processes) */
    if (ok) {
        what = "the stream queue's choice";
        async = cuda_queue_on(c);
        ok = async == want_queue;
    }
    /* enqueue only (the stream queue, WEFT_CUDA_ASYNC=1): rank 0's call returns while
     * rank 1 has not called yet, its stream not done; it completes once rank 1 calls */
    if (ok && async) {
        what = "an all-reduce that only enqueues";
        for (size_t i = 0; i < IN; i++)
            h[i] = r;
        ok = UP(d_a, IN);
        if (ok && r == 1)
            usleep(300000);
        ok = ok && weft_allreduce_stream(d_a, d_b, IN, WEFT_INT32, WEFT_SUM, c, st) == WEFT_OK;
        if (ok && r == 0)
            ok = cudaStreamQuery(st) == cudaErrorNotReady;
        ok = ok && cudaStreamSynchronize(st) == cudaSuccess && DOWN(d_b, IN) &&
             h[0] == n * (n - 1) / 2 && h[IN - 1] == n * (n - 1) / 2;
    }
    /* counts that disagree: every rank fails with MISMATCH. Blocking calls return it and
     * the next call works; queued calls return, the stream still completes, and the next
     * call reports it (the communicator's stream calls then stay failed, as NCCL's) */
    if (ok) {
        what = "mismatched counts";
        weft_status_t m = weft_allreduce_stream(d_a, d_b, r == 0 ? IN : IN - 1, WEFT_INT32,
                                                WEFT_SUM, c, st);
        if (async) {
            ok = m == WEFT_OK && cudaStreamSynchronize(st) == cudaSuccess &&
                 weft_allreduce_stream(d_a, d_b, IN, WEFT_INT32, WEFT_SUM, c, st) ==
                 WEFT_ERR_MISMATCH && strstr(weft_last_error(), "count") != NULL;
        } else {
            ok = m == WEFT_ERR_MISMATCH && strstr(weft_last_error(), "count") != NULL;
            for (size_t i = 0; i < IN; i++)
                h[i] = 1;
            ok = ok && UP(d_a, IN) && weft_allreduce_stream(d_a, d_b, IN, WEFT_INT32, WEFT_SUM,
                                                            c, st) == WEFT_OK &&
                 cudaStreamSynchronize(st) == cudaSuccess && DOWN(d_b, IN) && h[0] == n &&
                 h[IN - 1] == n;
        }
    }
#undef UP
#undef DOWN
    if (!ok)
        printf("rank %d of %d: %s failed: %s (CUDA: %s)\n", r, n, what, weft_last_error(),
               cudaGetErrorString(cudaGetLastError()));
    fflush(stdout);
    cudaFree(d_a);
    cudaFree(d_b);
    free(h);
    return ok;
}

/* Ranks as processes (nccl-tests' way), forked before this process touches CUDA: their
 * device buffers reach each other through CUDA IPC handles. A child exits 77 when it sees
 * no GPU; the parent kills them all after 30 s (a hang is a failure). */
static void test_ipc_processes(int n)
{
    char addr[64];
    pid_t pid[8];
    pick_addr(addr, sizeof(addr));
    fflush(stdout);             /* the children must not print the parent's buffer again */
    for (int i = 0; i < n; i++) {
        if ((pid[i] = fork()) == 0) {
            weft_comm_t *c = NULL;
            cudaStream_t st;
            if (!mem_cuda_visible(NULL))
                _exit(77);
            const char *a = getenv("WEFT_CUDA_ASYNC");
            int ok = weft_comm_init_rank(i, n, addr, &c) == WEFT_OK &&
                     cudaStreamCreate(&st) == cudaSuccess &&
                     ipc_checks(i, n, c, st, a != NULL && strcmp(a, "1") == 0);
            weft_comm_destroy(c);
            fflush(stdout);
            _exit(ok ? 0 : 1);
        }
    }
    int ok = 1, skip = 0;
    for (int waited = 0, left = n; left > 0 && waited < 300; waited++) {
        usleep(100000);
        for (int i = 0; i < n; i++) {
            int status;
            if (pid[i] > 0 && waitpid(pid[i], &status, WNOHANG) == pid[i]) {
                pid[i] = 0;
                left--;
                if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
                    skip++;
                else
                    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (pid[i] > 0) {
            kill(pid[i], SIGKILL);
            waitpid(pid[i], NULL, 0);
            printf("rank %d of %d (a process) did not finish in 30 s\n", i, n);
            ok = 0;
        }
    if (skip == n)
        return;     /* no GPU: counted by main's SKIP line */
    check(ok && skip == 0, "%d ranks as processes on one GPU (CUDA IPC): every collective, in "
          "place and not, sendrecv, mismatched counts", n);
}

typedef struct {
    const char *addr;
    int rank, nranks, ok;
} rank_t;

#define RN 4099     /* elements per rank: not a multiple of the vector width */

static void *rank_main(void *v)
{
    rank_t *r = v;
    weft_comm_t *c = NULL;
    cudaStream_t st;
    float *d_send = NULL, *d_recv = NULL, *h = malloc(sizeof(float) * RN * r->nranks);
    r->ok = weft_comm_init_rank(r->rank, r->nranks, r->addr, &c) == WEFT_OK &&
            cudaStreamCreate(&st) == cudaSuccess &&
            cudaMalloc((void **)&d_send, sizeof(float) * RN * r->nranks) == cudaSuccess &&
            cudaMalloc((void **)&d_recv, sizeof(float) * RN * r->nranks) == cudaSuccess;
    int n = r->nranks, tot = n * RN;
    for (int i = 0; r->ok && i < tot; i++)
        h[i] = (float)(r->rank * 1000 + i % 997);
    /* all-reduce: sum over ranks of rank*1000 + i%997 */
    r->ok = r->ok && cudaMemcpyAsync(d_send, h, sizeof(float) * RN, cudaMemcpyHostToDevice,
                                     st) == cudaSuccess &&
            weft_allreduce_stream(d_send, d_recv, RN, WEFT_FLOAT32, WEFT_SUM, c, st) == WEFT_OK
            && cudaMemcpyAsync(h, d_recv, sizeof(float) * RN, cudaMemcpyDeviceToHost, st) ==
            cudaSuccess && cudaStreamSynchronize(st) == cudaSuccess;
    for (int i = 0; r->ok && i < RN; i++)
        r->ok = h[i] == (float)(1000 * n * (n - 1) / 2 + n * (i % 997));
    /* reduce-scatter of n*RN, all-gather back, broadcast from the last rank */
    for (int i = 0; r->ok && i < tot; i++)
        h[i] = (float)(r->rank + i);
    r->ok = r->ok && cudaMemcpy(d_send, h, sizeof(float) * tot, cudaMemcpyHostToDevice) ==
            cudaSuccess && weft_reduce_scatter_stream(d_send, d_recv, RN, WEFT_FLOAT32, WEFT_SUM,
                                                      c, st) == WEFT_OK &&
            weft_allgather_stream(d_recv, d_send, RN, WEFT_FLOAT32, c, st) == WEFT_OK &&
            cudaMemcpy(h, d_send, sizeof(float) * tot, cudaMemcpyDeviceToHost) == cudaSuccess;
    for (int i = 0; r->ok && i < tot; i++)
        r->ok = h[i] == (float)(n * (n - 1) / 2 + n * i);
    r->ok = r->ok && weft_broadcast_stream(d_recv, d_recv, RN, WEFT_FLOAT32, n - 1, c, st) ==
            WEFT_OK && cudaMemcpy(h, d_recv, sizeof(float) * RN, cudaMemcpyDeviceToHost) ==
            cudaSuccess;
    for (int i = 0; r->ok && i < RN; i++)
        r->ok = h[i] == (float)(n * (n - 1) / 2 + n * ((n - 1) * RN + i));
    if (!r->ok)
        printf("rank %d of %d: %s\n", r->rank, n, weft_last_error());
    fflush(stdout);
    r->ok = r->ok && ipc_checks(r->rank, n, c, st, 0);     /* threads: never a queue */
    cudaFree(d_send);
    cudaFree(d_recv);
    free(h);
    weft_comm_destroy(c);
    return NULL;
}

static void test_ranks_on_one_gpu(int n)
{
    char addr[64];
    rank_t r[8];
    pthread_t t[8];
    pick_addr(addr, sizeof(addr));
    for (int i = 0; i < n; i++) {
        r[i] = (rank_t){ .addr = addr, .rank = i, .nranks = n };
        pthread_create(&t[i], NULL, rank_main, &r[i]);
    }
    int ok = 1;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        ok &= r[i].ok;
    }
    check(ok, "%d ranks on one GPU, each a thread with its own stream: every collective on "
          "device buffers, in place and not, sendrecv, mismatched counts", n);
}

static void test_stream_one_rank(void)
{
    weft_comm_t *c = NULL;
    cudaStream_t st;
    int64_t h[512], *d = NULL;
    check(weft_comm_init_rank(0, 1, "127.0.0.1:0", &c) == WEFT_OK &&
          cudaStreamCreate(&st) == cudaSuccess &&
          cudaMalloc((void **)&d, sizeof(h)) == cudaSuccess, "1 rank: comm, stream, buffer");
    for (int i = 0; i < 512; i++)
        h[i] = i;
    /* ordered after an earlier copy on the same stream */
    check(cudaMemcpyAsync(d, h, sizeof(h), cudaMemcpyHostToDevice, st) == cudaSuccess &&
          weft_allreduce_stream(d, d, 512, WEFT_INT64, WEFT_MAX, c, st) == WEFT_OK,
          "1 rank: in-place all-reduce on the stream");
    memset(h, 0, sizeof(h));
    int64_t host_out[512];
    check(weft_allreduce_stream(d, host_out, 512, WEFT_INT64, WEFT_SUM, c, st) == WEFT_OK,
          "1 rank: device send, host recv");
    int ok = 1;
    for (int i = 0; i < 512; i++)
        ok &= host_out[i] == i;
    check(ok, "1 rank: the results are in place when the call returns");
    check(weft_allreduce_stream(d, d, 512, (weft_dtype_t)77, WEFT_SUM, c, st) ==
          WEFT_ERR_INVALID_ARG, "bad dtype refused");
    check(weft_reduce_stream(d, d, 512, WEFT_INT64, WEFT_SUM, 3, c, st) == WEFT_ERR_INVALID_ARG,
          "bad root refused");
    cudaFree(d);
    cudaStreamDestroy(st);
    weft_comm_destroy(c);
}

/* WEFT_CUDA=0, in a child forked before this process calls CUDA: no GPU whatever the
 * machine has, and the reason says why. */
static void test_cuda_off(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        const char *why = "";
        setenv("WEFT_CUDA", "0", 1);
        int ok = !mem_cuda_visible(&why) && strstr(why, "WEFT_CUDA=0") != NULL &&
                 mem_type_of(&why) == MEM_HOST && weft_cuda_available() == 0;
        _exit(ok ? 0 : 1);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    check(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "WEFT_CUDA=0: no GPU, host memory, and the reason names WEFT_CUDA=0");
}

int main(void)
{
    test_cuda_off();
    test_queue_choice();
    test_ipc_processes(2);      /* before this process touches CUDA: children fork clean */
    test_ipc_processes(4);
    if (!mem_cuda_visible(NULL)) {
        test_no_gpu();
        printf("SKIP: no GPU visible: the kernel, stream and several-ranks-on-one-GPU checks "
               "did not run (docs/GPU.md)\n");
    } else {
        test_kernels();
        test_stream_one_rank();
        test_ranks_on_one_gpu(2);
        test_ranks_on_one_gpu(4);
        test_ranks_on_one_gpu(8);
    }
    printf("test_cuda: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
