/*
 * stream.c - include/weft_cuda.h: weft's collectives ordered on a CUDA stream, on device
 * or host buffers (built only with WEFT_HAVE_CUDA).
 *
 * Each call waits for its stream, and when a buffer is device memory (mem_type_of) it
 * stages: device inputs are copied into this thread's pinned host buffers, the host
 * collective runs on those, and the results are copied back on the stream, which is
 * waited for again before returning, so the staging buffers are free for the next call
 * and the caller's buffers hold the results. Calls on host buffers only skip the copies.
 *
 * Invariants: arguments are checked (comm, dtype, op, root, sizes) before any copy, so
 * bad input changes nothing; the staging buffers belong to the calling thread (a
 * communicator is used by one thread at a time); when it exits they go to a small pool
 * that the next thread takes from.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "weft_cuda.h"
#include "check.h"
#include "cuda_coll.h"
#include "memtype.h"
#include "status.h"


typedef struct {
    void *p[2];                 /* [0] send staging, [1] recv staging (pinned) */
    size_t cap[2];
} stage_t;

static pthread_key_t stage_key;
static pthread_once_t stage_once = PTHREAD_ONCE_INIT;

/* Buffers of threads that exited, for the next thread that needs one: the shim runs a
 * group's communicators on short-lived threads, and cudaMallocHost costs milliseconds. */
#define POOL_MAX 32
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static void *pool_p[POOL_MAX];
static size_t pool_cap[POOL_MAX];
static int pool_n;

static void stage_free(void *v)
{
    stage_t *s = v;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < 2; i++) {
        if (s->p[i] && pool_n < POOL_MAX) {
            pool_p[pool_n] = s->p[i];
            pool_cap[pool_n++] = s->cap[i];
        } else if (s->p[i]) {
            cudaFreeHost(s->p[i]);
        }
    }
    pthread_mutex_unlock(&pool_lock);
    free(s);
}

/* A pooled buffer of at least n bytes (its capacity in *cap), or NULL. */
static void *pool_take(size_t n, size_t *cap)
{
    void *p = NULL;
    pthread_mutex_lock(&pool_lock);
    for (int k = 0; k < pool_n; k++)
        if (pool_cap[k] >= n) {
            p = pool_p[k];
            *cap = pool_cap[k];
            pool_p[k] = pool_p[--pool_n];
            pool_cap[k] = pool_cap[pool_n];
            break;
        }
    pthread_mutex_unlock(&pool_lock);
    return p;
}

static void stage_key_make(void)
{
    pthread_key_create(&stage_key, stage_free);
}

/* This thread's staging buffer i, at least n bytes. */
static weft_status_t stage_get(int i, size_t n, void **p_out)
{
    pthread_once(&stage_once, stage_key_make);
    stage_t *s = pthread_getspecific(stage_key);
    if (s == NULL) {
        if ((s = calloc(1, sizeof(*s))) == NULL)
            return weft_error(WEFT_ERR_NO_MEMORY, "cuda staging: out of memory");
        pthread_setspecific(stage_key, s);
    }
    if (s->cap[i] < n) {
        size_t cap = s->cap[i] ? s->cap[i] : 1 << 20;
        while (cap < n)
            cap = cap > SIZE_MAX / 2 ? n : cap * 2;
        if (s->p[i])
            cudaFreeHost(s->p[i]);
        s->p[i] = NULL;
        s->cap[i] = 0;
        if ((s->p[i] = pool_take(n, &s->cap[i])) != NULL) {
            *p_out = s->p[i];
            return WEFT_OK;
        }
        cudaError_t e = cudaMallocHost(&s->p[i], cap);
        if (e != cudaSuccess) {
            cudaGetLastError();
            s->p[i] = NULL;
            return weft_error(WEFT_ERR_NO_MEMORY, "cuda staging: cudaMallocHost(%zu): %s",
                              cap, cudaGetErrorString(e));
        }
        s->cap[i] = cap;
    }
    *p_out = s->p[i];
    return WEFT_OK;
}

static weft_status_t cuda_check(const char *fn, const char *what, cudaError_t e)
{
    if (e == cudaSuccess)
        return WEFT_OK;
    cudaGetLastError();
    return weft_error(WEFT_ERR_SYSTEM, "%s_stream: %s: %s (%s)", fn, what, cudaGetErrorName(e),
                      cudaGetErrorString(e));
}

static weft_status_t run_host(const scall_t *c, const void *send, void *recv,
                              weft_comm_t *comm)
{
    switch (c->coll) {
    case S_ALLREDUCE: return weft_allreduce(send, recv, c->count, c->dtype, c->op, comm);
    case S_REDUCE_SCATTER:
        return weft_reduce_scatter(send, recv, c->count, c->dtype, c->op, comm);
    case S_ALLGATHER: return weft_allgather(send, recv, c->count, c->dtype, comm);
    case S_BROADCAST: return weft_broadcast(send, recv, c->count, c->dtype, c->root, comm);
    case S_REDUCE: return weft_reduce(send, recv, c->count, c->dtype, c->op, c->root, comm);
    case S_SENDRECV:
        return weft_sendrecv(send, c->count, c->root, recv, c->count2, c->peer2, c->dtype,
                             comm);
    }
    return WEFT_ERR_INTERNAL;
}

/* The bytes this rank reads from send and writes to recv; checks what the copies rely on
 * (the host collective checks the rest, before it touches anything). */
static weft_status_t call_bytes(const scall_t *c, weft_comm_t *comm, size_t *sb, size_t *rb)
{
    size_t esz = weft_dtype_size(c->dtype);
    if (esz == 0)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "%s_stream: unknown dtype %d", c->fn,
                                (int)c->dtype);
    int rank = weft_comm_rank(comm), n = weft_comm_size(comm);
    int rooted = c->coll == S_BROADCAST || c->coll == S_REDUCE || c->coll == S_SENDRECV;
    if (rooted && (c->root < 0 || c->root >= n))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "%s_stream: %s %d is out of range "
                                "[0, %d)", c->fn, c->coll == S_SENDRECV ? "dst" : "root",
                                c->root, n);
    size_t per = c->count * esz, mult = (size_t)n;
    if (c->count > SIZE_MAX / 4 / esz / mult ||
        (c->coll == S_SENDRECV && c->count2 > SIZE_MAX / 4 / esz))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "%s_stream: count %zu overflows the "
                                "address space", c->fn, c->count);
    switch (c->coll) {
    case S_ALLREDUCE: *sb = *rb = per; break;
    case S_REDUCE_SCATTER: *sb = per * mult; *rb = per; break;
    case S_ALLGATHER: *sb = per; *rb = per * mult; break;
    case S_BROADCAST: *sb = rank == c->root ? per : 0; *rb = per; break;
    case S_REDUCE: *sb = per; *rb = rank == c->root ? per : 0; break;
    case S_SENDRECV: *sb = per; *rb = c->count2 * esz; break;
    }
    /* before any exchange or copy (a NULL input was taken for host memory, the ranks
     * exchanged, then the copy failed: ncclSystemError where NCCL says invalid argument) */
    if ((*sb && c->send == NULL) || (*rb && c->recv == NULL))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "%s_stream: the %s buffer is NULL for "
                                "%zu bytes", c->fn, *sb && c->send == NULL ? "send" : "receive",
                                *sb && c->send == NULL ? *sb : *rb);
    return WEFT_OK;
}

static weft_status_t cuda_stage_run(const scall_t *c, size_t sb, size_t rb, int dev,
                                    weft_comm_t *comm, cudaStream_t stream);

static weft_status_t run_stream(const scall_t *c, weft_comm_t *comm, cudaStream_t stream)
{
    const char *why = "";
    if (comm == NULL)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "%s_stream: comm is NULL", c->fn);
    if (!mem_cuda_visible(&why))
        return weft_error_quiet(WEFT_ERR_UNSUPPORTED, "%s_stream: %s", c->fn, why);
    size_t sb = 0, rb = 0;
    RETURN_IF_ERR(call_bytes(c, comm, &sb, &rb));
    int send_dev = sb && mem_type_of(c->send) == MEM_CUDA;
    int recv_dev = rb && mem_type_of(c->recv) == MEM_CUDA;
    int dev = send_dev || recv_dev, all_dev = (!sb || send_dev) && (!rb || recv_dev);
    /* one rank, device buffers: the result is the input, copied on the stream; nothing
     * waits (sendrecv only to itself, with matching counts: else the host call says why) */
    if (weft_comm_size(comm) == 1 && all_dev &&
        (c->coll != S_SENDRECV || (c->peer2 == 0 && c->count == c->count2))) {
        if (rb && c->recv != c->send)
            RETURN_IF_ERR(cuda_check(c->fn, "copying on the stream",
                                     cudaMemcpyAsync(c->recv, c->send, rb,
                                                     cudaMemcpyDeviceToDevice, stream)));
        return WEFT_OK;
    }
    /* several ranks: enqueued for this communicator's stream queue (queue.c) */
    if (c->coll != S_SENDRECV) {
        int done = 0;
        weft_status_t st = cuda_queue_run(c, sb, rb, dev, all_dev, comm, stream, &done);
        if (done)
            return st;
    }
    /* ranks on one host: GPU to GPU (ipc.c), unless a rank has host buffers */
    if (cuda_ipc_wanted(comm) && (c->coll != S_SENDRECV || all_dev)) {
        int done = 0;
        weft_status_t st = cuda_ipc_run(c, sb, rb, all_dev, comm, stream, &done);
        if (done)
            return st;
    }
    return cuda_stage_run(c, sb, rb, dev, comm, stream);
}

/* The staged form: waits for stream, copies device inputs (dev: some buffer is device
 * memory) into this thread's pinned host buffers, runs the host collective on comm,
 * copies the results back and waits again; host buffers go straight to the host call. */
static weft_status_t cuda_stage_run(const scall_t *c, size_t sb, size_t rb, int dev,
                                    weft_comm_t *comm, cudaStream_t stream)
{
    /* the stream's earlier work may write our inputs (or still read our outputs) */
    RETURN_IF_ERR(cuda_check(c->fn, "waiting for the stream", cudaStreamSynchronize(stream)));
    if (!dev)
        return run_host(c, c->send, c->recv, comm);
    void *hs = NULL, *hr = NULL;
    if (sb)
        RETURN_IF_ERR(stage_get(0, sb, &hs));
    if (rb)
        RETURN_IF_ERR(stage_get(1, rb, &hr));
    if (sb) {
        RETURN_IF_ERR(cuda_check(c->fn, "copying the input to the host",
                                 cudaMemcpyAsync(hs, c->send, sb, cudaMemcpyDefault, stream)));
        RETURN_IF_ERR(cuda_check(c->fn, "waiting for the input copy",
                                 cudaStreamSynchronize(stream)));
    }
    RETURN_IF_ERR(run_host(c, hs, hr, comm));
    if (rb) {
        RETURN_IF_ERR(cuda_check(c->fn, "copying the result to the device",
                                 cudaMemcpyAsync(c->recv, hr, rb, cudaMemcpyDefault, stream)));
        RETURN_IF_ERR(cuda_check(c->fn, "waiting for the result copy",
                                 cudaStreamSynchronize(stream)));
    }
    return WEFT_OK;
}

weft_status_t weft_stream_error(weft_comm_t *comm)
{
    if (comm == NULL)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "weft_stream_error: comm is NULL");
    return cuda_queue_error(comm);
}

int weft_cuda_available(void)
{
    const char *why = "";
    if (mem_cuda_visible(&why))
        return 1;
    weft_error_quiet(WEFT_ERR_UNSUPPORTED, "weft cuda: %s", why);
    return 0;
}

weft_status_t weft_allreduce_stream(const void *send, void *recv, size_t count,
                                    weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm,
                                    cudaStream_t stream)
{
    scall_t c = { .coll = S_ALLREDUCE, .fn = "allreduce", .send = send, .recv = recv,
                  .count = count, .dtype = dtype, .op = op };
    return run_stream(&c, comm, stream);
}

weft_status_t weft_reduce_scatter_stream(const void *send, void *recv, size_t recvcount,
                                         weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm,
                                         cudaStream_t stream)
{
    scall_t c = { .coll = S_REDUCE_SCATTER, .fn = "reduce_scatter", .send = send,
                  .recv = recv, .count = recvcount, .dtype = dtype, .op = op };
    return run_stream(&c, comm, stream);
}

weft_status_t weft_allgather_stream(const void *send, void *recv, size_t sendcount,
                                    weft_dtype_t dtype, weft_comm_t *comm, cudaStream_t stream)
{
    scall_t c = { .coll = S_ALLGATHER, .fn = "allgather", .send = send, .recv = recv,
                  .count = sendcount, .dtype = dtype };
    return run_stream(&c, comm, stream);
}

weft_status_t weft_broadcast_stream(const void *send, void *recv, size_t count,
                                    weft_dtype_t dtype, int root, weft_comm_t *comm,
                                    cudaStream_t stream)
{
    scall_t c = { .coll = S_BROADCAST, .fn = "broadcast", .send = send, .recv = recv,
                  .count = count, .dtype = dtype, .root = root };
    return run_stream(&c, comm, stream);
}

weft_status_t weft_reduce_stream(const void *send, void *recv, size_t count,
                                 weft_dtype_t dtype, weft_op_t op, int root,
                                 weft_comm_t *comm, cudaStream_t stream)
{
    scall_t c = { .coll = S_REDUCE, .fn = "reduce", .send = send, .recv = recv,
                  .count = count, .dtype = dtype, .op = op, .root = root };
    return run_stream(&c, comm, stream);
}

weft_status_t weft_sendrecv_stream(const void *sendbuf, size_t sendcount, int dst,
                                   void *recvbuf, size_t recvcount, int src,
                                   weft_dtype_t dtype, weft_comm_t *comm, cudaStream_t stream)
{
    scall_t c = { .coll = S_SENDRECV, .fn = "sendrecv", .send = sendbuf, .recv = recvbuf,
                  .count = sendcount, .count2 = recvcount, .dtype = dtype, .root = dst,
                  .peer2 = src };
    return run_stream(&c, comm, stream);
}
