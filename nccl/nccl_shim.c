/*
 * nccl_shim.c - NCCL's API over weft (libweft_nccl.so, soname libnccl.so.2; nccl.h).
 *
 * A ncclComm wraps a weft communicator. The unique id carries the rendezvous address of
 * rank 0's bootstrap store ("host:port", a free loopback port picked the way weftrun
 * picks one, or NCCL_COMM_ID), so ncclCommInitRank is weft_comm_init_rank. Collectives go
 * to include/weft_cuda.h's stream calls, which order them on the caller's stream (and
 * today complete them before returning; docs/GPU.md).
 *
 * Groups: between ncclGroupStart and the matching ncclGroupEnd, calls are checked at once
 * (bad arguments fail there) and queued on this thread; ncclGroupEnd runs the queue, each
 * communicator's calls in order on a thread of its own when the group spans several (one
 * thread may drive several ranks, as nccl-tests -g and ncclCommInitAll do: run one after
 * another, their collectives would wait for each other forever). A group's sends and
 * receives on a communicator run together, after its collectives (as NCCL schedules
 * them: run_comm_calls), as weft_sendrecv pairs, as bytes, in NCCL's steps (p2p_plan.h:
 * at step s to rank+s and from rank-s), so rings, gathers, scatters and all-to-alls in
 * any call order, mixed with collectives in any order, never wait on each other in a
 * cycle.
 *
 * Invariants: no call aborts or exits the process; every failure returns a ncclResult_t
 * with its reason in ncclGetLastError() (this thread's). Arguments are checked before
 * anything is queued or touched. Calls weft does not support return ncclInvalidUsage.
 */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl.h"
#include "weft_cuda.h"
#include "config.h"
#include "cuda_kern.h"
#include "log.h"
#include "memtype.h"
#include "p2p_plan.h"
#include "reduce.h"
#include "sock.h"

#define SHIM_EXPORT __attribute__((visibility("default")))
#define COMM_MAGIC 0x43746677u              /* "wftC": a live ncclComm */
#define COMM_ABORTED 0x41746677u            /* "wftA": aborted: kept, never freed (below) */
#define ID_MAGIC "weftNCCL"                 /* the first 8 bytes of a weft unique id */
#define ID_MAGIC_LEN 8
#define MAX_PREMUL 256                /* live PreMulSum ops per communicator */

/* An op from ncclRedOpCreatePreMulSum: each rank's input times its scalar, then a SUM. */
typedef struct {
    int used;
    weft_dtype_t dtype;
    const void *dev;            /* ncclScalarDevice: read when the call runs; else NULL */
    unsigned char value[8];     /* ncclScalarHostImmediate: the scalar, read at creation */
} premul_t;

struct ncclComm {
    uint32_t magic;
    weft_comm_t *w;             /* NULL while a grouped init is pending or after it failed */
    int rank, nranks, dev;      /* dev: the CUDA device at init, -1 when none is visible */
    int finalized;
    ncclResult_t async;         /* the first failure of a call whose caller saw success */
    ncclComm_t next_aborted;    /* the list of aborted ncclComms, kept (comm_free) */
    int aborting;               /* set by ncclCommAbort before it waits for inflight:
                                 * a call counted after it sees it and runs nothing */
    int inflight;               /* threads running this comm's calls (atomic): an abort
                                 * from another thread waits for them to leave */
    char addr[NCCL_UNIQUE_ID_BYTES];
    premul_t premul[MAX_PREMUL];    /* ops from ncclRedOpCreatePreMulSum, by slot */
    /* PreMulSum's scaled inputs: device memory (reused in stream order: each use waits
     * for scratch_ev, recorded after the collective that read it) and host memory */
    void *scratch_dev, *scratch_host;
    size_t scratch_dev_cap, scratch_host_cap;
    cudaEvent_t scratch_ev;
};

/* ---- errors ---------------------------------------------------------------------- */

/* This thread's last error (carried back from ncclGroupEnd's worker threads), and the
 * process's, which ncclGetLastError returns: NCCL keeps one for the process, so that a
 * thread watching the communicators (PyTorch's watchdog) reads what another's call hit. */
static __thread char last_err[512];
static char last_err_any[512];
static pthread_mutex_t last_err_lock = PTHREAD_MUTEX_INITIALIZER;

static void publish_error(void)
{
    pthread_mutex_lock(&last_err_lock);
    memcpy(last_err_any, last_err, sizeof(last_err_any));
    pthread_mutex_unlock(&last_err_lock);
}

__attribute__((format(printf, 2, 3)))
static ncclResult_t fail(ncclResult_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_err, sizeof(last_err), fmt, ap);
    va_end(ap);
    publish_error();
    return r;
}

/* A weft status as NCCL's result, weft's message as the last error. */
static ncclResult_t from_weft(weft_status_t st)
{
    if (st >= 0)
        return ncclSuccess;
    snprintf(last_err, sizeof(last_err), "weft: %s", weft_last_error());
    publish_error();
    switch (st) {
    case WEFT_ERR_INVALID_ARG: return ncclInvalidArgument;
    case WEFT_ERR_NO_MEMORY:
    case WEFT_ERR_SYSTEM: return ncclSystemError;
    case WEFT_ERR_TIMEOUT:
    case WEFT_ERR_PEER_LOST:
    case WEFT_ERR_AUTH: return ncclRemoteError;
    case WEFT_ERR_MISMATCH:
    case WEFT_ERR_ABORTED:
    case WEFT_ERR_UNSUPPORTED: return ncclInvalidUsage;
    default: return ncclInternalError;
    }
}

SHIM_EXPORT const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the weft developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

SHIM_EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
    static __thread char view[sizeof(last_err_any)];   /* a copy another thread cannot tear */
    pthread_mutex_lock(&last_err_lock);
    memcpy(view, last_err_any, sizeof(view));
    pthread_mutex_unlock(&last_err_lock);
    return view;
}

SHIM_EXPORT ncclResult_t ncclGetVersion(int *version)
{
    if (version == NULL)
        return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/* ---- argument checks ------------------------------------------------------------- */

static ncclResult_t need_gpu(const char *fn)
{
    const char *why = "";
    if (mem_cuda_visible(&why))
        return ncclSuccess;
    return fail(ncclUnhandledCudaError, "%s: %s", fn, why);
}

static ncclResult_t check_comm(const char *fn, ncclComm_t c, int need_ready)
{
    if (c == NULL)
        return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
    if (c->magic == COMM_ABORTED)
        return fail(ncclInvalidArgument, "%s: comm was aborted (ncclCommAbort)", fn);
    if (c->magic != COMM_MAGIC)
        return fail(ncclInvalidArgument, "%s: comm is not a live communicator", fn);
    if (need_ready && c->finalized)
        return fail(ncclInvalidUsage, "%s: comm was finalized", fn);
    if (need_ready && c->w == NULL && c->async != ncclSuccess)
        return fail(c->async, "%s: comm failed to initialize", fn);
    return ncclSuccess;
}

static ncclResult_t map_dtype(const char *fn, ncclDataType_t t, weft_dtype_t *out)
{
    static const int map[] = {
        [ncclInt8] = WEFT_INT8, [ncclUint8] = WEFT_UINT8, [ncclInt32] = WEFT_INT32,
        [ncclUint32] = WEFT_UINT32, [ncclInt64] = WEFT_INT64, [ncclUint64] = WEFT_UINT64,
        [ncclFloat16] = WEFT_FLOAT16, [ncclFloat32] = WEFT_FLOAT32,
        [ncclFloat64] = WEFT_FLOAT64, [ncclBfloat16] = WEFT_BFLOAT16,
    };
    if (t == ncclFloat8e4m3 || t == ncclFloat8e5m2)
        return fail(ncclInvalidUsage, "%s: fp8 datatypes are not supported by weft", fn);
    if ((unsigned)t >= sizeof(map) / sizeof(map[0]))
        return fail(ncclInvalidArgument, "%s: invalid datatype %d", fn, (int)t);
    *out = (weft_dtype_t)map[t];
    return ncclSuccess;
}

/* op as weft's; a PreMulSum op (made for dtype) is a SUM with its scalar copied to *pm. */
static ncclResult_t map_op(const char *fn, ncclComm_t c, ncclRedOp_t op, weft_dtype_t dtype,
                           weft_op_t *out, premul_t *pm)
{
    static const int map[] = { [ncclSum] = WEFT_SUM, [ncclProd] = WEFT_PROD,
                               [ncclMax] = WEFT_MAX, [ncclMin] = WEFT_MIN,
                               [ncclAvg] = WEFT_AVG };
    if ((unsigned)op < ncclNumOps) {
        *out = (weft_op_t)map[op];
        /* ncclAvg of float16 as NCCL's: each input times 1/nranks (in float16), then a
         * sum, so that an average whose sum passes 65504 is not inf as WEFT_AVG's
         * sum-then-divide would be; the other types keep WEFT_AVG (bf16, float32 and
         * float64 do not overflow there, and integers are sum-then-divide in NCCL too) */
        if (op == ncclAvg && dtype == WEFT_FLOAT16 && c->nranks > 1) {
            uint16_t k = kern_float_to_half(1.0f / (float)c->nranks);
            memset(pm, 0, sizeof(*pm));
            pm->used = 1;
            pm->dtype = dtype;
            memcpy(pm->value, &k, sizeof(k));
            *out = WEFT_SUM;
        }
        return ncclSuccess;
    }
    int slot = (int)op - ncclNumOps;
    if (slot < 0 || slot >= MAX_PREMUL || !c->premul[slot].used)
        return fail(ncclInvalidArgument, "%s: invalid reduction op %d", fn, (int)op);
    if (c->premul[slot].dtype != dtype)
        return fail(ncclInvalidArgument, "%s: op %d was made for datatype %s, the call's is "
                    "%s", fn, (int)op, weft_dtype_name(c->premul[slot].dtype),
                    weft_dtype_name(dtype));
    *pm = c->premul[slot];
    *out = WEFT_SUM;
    return ncclSuccess;
}

/* ---- unique id and init ---------------------------------------------------------- */

SHIM_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (id == NULL)
        return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    char addr[NCCL_UNIQUE_ID_BYTES - ID_MAGIC_LEN];
    struct sockaddr_in sa;
    const char *env = getenv("NCCL_COMM_ID");
    if (env != NULL && env[0]) {
        if (strlen(env) >= sizeof(addr) || sock_parse_addr(env, &sa) != WEFT_OK)
            return fail(ncclInvalidArgument, "ncclGetUniqueId: NCCL_COMM_ID '%s' is not "
                        "host:port", env);
        snprintf(addr, sizeof(addr), "%s", env);
    } else {
        /* a free loopback port (below the ephemeral range: no other job's bind(0) takes
         * it meanwhile): rank 0's bootstrap listens there once init starts */
        int port = sock_pick_loopback_port();
        if (port < 0)
            return fail(ncclSystemError, "ncclGetUniqueId: no free loopback port");
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    }
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, ID_MAGIC, ID_MAGIC_LEN);
    memcpy(id->internal + ID_MAGIC_LEN, addr, strlen(addr) + 1);
    return ncclSuccess;
}

/* The rendezvous address in an id, or NULL when it is not one of ours. */
static const char *id_addr(const ncclUniqueId *id)
{
    const char *a = id->internal + ID_MAGIC_LEN;
    if (memcmp(id->internal, ID_MAGIC, ID_MAGIC_LEN) != 0 ||
        memchr(a, '\0', NCCL_UNIQUE_ID_BYTES - ID_MAGIC_LEN) == NULL || a[0] == '\0')
        return NULL;
    return a;
}

static ncclResult_t check_config(const char *fn, const ncclConfig_t *cfg)
{
    if (cfg == NULL)
        return ncclSuccess;
    if (cfg->magic != 0xcafebeef || cfg->size < offsetof(ncclConfig_t, netName))
        return fail(ncclInvalidArgument, "%s: config was not made with "
                    "NCCL_CONFIG_INITIALIZER (magic 0x%x, size %zu)", fn, cfg->magic,
                    cfg->size);
    /* blocking 0 is taken, and the call completes before it returns, which NCCL's API
     * allows (ncclSuccess where ncclInProgress could be) */
    if (cfg->blocking != NCCL_CONFIG_UNDEF_INT && cfg->blocking != 0 && cfg->blocking != 1)
        return fail(ncclInvalidArgument, "%s: config.blocking %d is not 0 or 1", fn,
                    cfg->blocking);
    /* the other fields weft does not use are refused as NCCL's parseCommConfig refuses
     * them (it accepted anything before 2026-11-28). min > max only where both are set
     * (NCCL also refuses a minCTAs set with maxCTAs unset, comparing with its unset
     * value); splitShare only where the caller's config (its size) has it, one built
     * against older headers does not */
    if (cfg->cgaClusterSize != NCCL_CONFIG_UNDEF_INT && cfg->cgaClusterSize < 0)
        return fail(ncclInvalidArgument, "%s: config.cgaClusterSize %d is negative", fn,
                    cfg->cgaClusterSize);
    int min_set = cfg->minCTAs != NCCL_CONFIG_UNDEF_INT,
        max_set = cfg->maxCTAs != NCCL_CONFIG_UNDEF_INT;
    if ((min_set && cfg->minCTAs <= 0) || (max_set && cfg->maxCTAs <= 0) ||
        (min_set && max_set && cfg->minCTAs > cfg->maxCTAs))
        return fail(ncclInvalidArgument, "%s: config.minCTAs %d / maxCTAs %d: each at least "
                    "1, min not above max", fn, cfg->minCTAs, cfg->maxCTAs);
    if (cfg->size >= offsetof(ncclConfig_t, splitShare) + sizeof(cfg->splitShare) &&
        cfg->splitShare != NCCL_CONFIG_UNDEF_INT && cfg->splitShare != 0 &&
        cfg->splitShare != 1)
        return fail(ncclInvalidArgument, "%s: config.splitShare %d is not 0 or 1", fn,
                    cfg->splitShare);
    return ncclSuccess;
}

/* The shim's defaults, as NCCL behaves: no binding of the process (NCCL pins only its own
 * threads; a PyTorch process's OpenMP threads and data-loader workers keep every cpu), and
 * no call timeout (NCCL has none: PyTorch's watchdog aborts, at the timeout given to
 * init_process_group); a long wait still logs at WEFT_WAIT_WARN. WEFT_BIND and
 * WEFT_TIMEOUT set in the environment still rule. */
static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;

static void shim_defaults(void)
{
    cfg_set_default("WEFT_BIND", "none");
    cfg_set_default("WEFT_TIMEOUT", "1e9");
}

static void comm_init_now(ncclComm_t c)
{
    pthread_once(&defaults_once, shim_defaults);
    if (c->dev >= 0)
        cudaSetDevice(c->dev);
    weft_status_t st = weft_comm_init_rank(c->rank, c->nranks, c->addr, &c->w);
    if (st != WEFT_OK) {
        c->w = NULL;
        c->async = from_weft(st);
    }
}

/* ---- the queue of a group -------------------------------------------------------- */

typedef enum { G_INIT, G_SPLIT, G_ALLREDUCE, G_REDUCE_SCATTER, G_ALLGATHER, G_BROADCAST,
               G_REDUCE, G_SEND, G_RECV } gkind_t;

typedef struct {
    gkind_t kind;
    ncclComm_t comm;
    const void *send;
    void *recv;
    size_t count;               /* elements; G_SEND/G_RECV: bytes */
    weft_dtype_t dtype;
    weft_op_t op;
    int peer;                   /* root, or the p2p peer; G_SPLIT: the color */
    int key;                    /* G_SPLIT: the key */
    ncclComm_t child;           /* G_SPLIT: the new communicator (NULL: NOCOLOR) */
    cudaStream_t stream;
    premul_t pm;                /* pm.used: a PreMulSum op's scalar (op is then SUM) */
} gop_t;

static __thread int group_depth;
static __thread gop_t *group_ops;
static __thread size_t group_n, group_cap;
/* The first call of the open group that was refused: ncclGroupEnd then runs none of the
 * group's calls and returns it (NCCL's rule), so no rank runs half of a group. */
static __thread ncclResult_t group_err;

/* A call refused inside a group also fails the group. */
static ncclResult_t group_note(ncclResult_t r)
{
    if (r != ncclSuccess && group_depth > 0 && group_err == ncclSuccess)
        group_err = r;
    return r;
}

/* A pair's receive stream waits for what was enqueued on its send stream (the call ran
 * there): later work on either stream sees the received bytes. */
static ncclResult_t join_streams(cudaStream_t from, cudaStream_t to)
{
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) {
        e = cudaEventRecord(ev, from);
        if (e == cudaSuccess)
            e = cudaStreamWaitEvent(to, ev, 0);
        cudaEventDestroy(ev);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(ncclUnhandledCudaError, "ncclGroupEnd: ordering a receive's stream: %s",
                    cudaGetErrorString(e));
    }
    return ncclSuccess;
}

/* comm c's sends and receives among ops[first..n), in p2p_plan's steps (NCCL's order:
 * at step s, to rank+s and from rank-s), each pair one weft_sendrecv */
static ncclResult_t run_p2p(ncclComm_t c, const gop_t *ops, size_t n, size_t first)
{
    size_t m = 0;
    for (size_t i = first; i < n; i++)
        m += ops[i].comm == c && (ops[i].kind == G_SEND || ops[i].kind == G_RECV);
    size_t *idx = malloc(m * sizeof(*idx));
    int *is_send = malloc(m * sizeof(int)), *peer = malloc(m * sizeof(int));
    p2p_pair_t *plan = malloc(m * sizeof(*plan));
    ncclResult_t r = ncclSuccess;
    if (!idx || !is_send || !peer || !plan) {
        r = fail(ncclSystemError, "ncclGroupEnd: out of memory");
        goto out;
    }
    m = 0;
    for (size_t i = first; i < n; i++)
        if (ops[i].comm == c && (ops[i].kind == G_SEND || ops[i].kind == G_RECV)) {
            idx[m] = i;
            is_send[m] = ops[i].kind == G_SEND;
            peer[m++] = ops[i].peer;
        }
    size_t np = p2p_plan(c->rank, c->nranks, is_send, peer, m, plan);
    for (size_t k = 0; k < np && r == ncclSuccess; k++) {
        const gop_t *sd = plan[k].send >= 0 ? &ops[idx[plan[k].send]] : NULL;
        const gop_t *rv = plan[k].recv >= 0 ? &ops[idx[plan[k].recv]] : NULL;
        cudaStream_t st = sd ? sd->stream : rv->stream;
        int two = sd && rv && rv->stream != sd->stream;
        if (two && cudaStreamSynchronize(rv->stream) != cudaSuccess) {
            cudaGetLastError();
            r = fail(ncclUnhandledCudaError, "ncclGroupEnd: waiting for a receive's stream");
            break;
        }
        /* one way: the missing side's peer is the other's, with no bytes */
        weft_status_t w = weft_sendrecv_stream(sd ? sd->send : NULL, sd ? sd->count : 0,
                                               sd ? sd->peer : rv->peer, rv ? rv->recv : NULL,
                                               rv ? rv->count : 0, rv ? rv->peer : sd->peer,
                                               WEFT_UINT8, c->w, st);
        r = from_weft(w);
        if (r == ncclSuccess && two)
            r = join_streams(st, rv->stream);
    }
out:
    free(idx);
    free(is_send);
    free(peer);
    free(plan);
    return r;
}

static ncclResult_t cuda_fail(const char *what, cudaError_t e)
{
    cudaGetLastError();
    return fail(ncclUnhandledCudaError, "%s: %s", what, cudaGetErrorString(e));
}

/* PreMulSum: g's input times this rank's scalar, into the comm's scratch (*send then points
 * there; *on_dev says it is device memory, to be released by premul_release). Device
 * inputs are scaled by a kernel on g's stream, host inputs on this thread once the stream
 * is idle. */
static ncclResult_t premul_input(const gop_t *g, const void **send, int *on_dev)
{
    ncclComm_t c = g->comm;
    size_t esz = weft_dtype_size(g->dtype);
    size_t mult = g->kind == G_REDUCE_SCATTER ? (size_t)c->nranks : 1;
    size_t n = g->count * mult, bytes = n * esz;    /* bounded by coll() */
    *on_dev = 0;
    if (n == 0)
        return ncclSuccess;
    cudaError_t e;
    if (mem_type_of(g->send) == MEM_CUDA) {
        if (c->scratch_ev == NULL &&
            (e = cudaEventCreateWithFlags(&c->scratch_ev, cudaEventDisableTiming)) != cudaSuccess)
            return cuda_fail("PreMulSum: cudaEventCreate", e);
        if (c->scratch_dev_cap < bytes) {
            /* the last collective that read the old buffer may still run */
            if ((e = cudaEventSynchronize(c->scratch_ev)) != cudaSuccess)
                return cuda_fail("PreMulSum: waiting for the scratch buffer", e);
            cudaFree(c->scratch_dev);
            c->scratch_dev = NULL;
            c->scratch_dev_cap = 0;
            /* powers of two: a sweep of sizes reallocates (and peers map it anew) rarely */
            size_t cap = 4096;
            while (cap < bytes)
                cap *= 2;
            if ((e = cudaMalloc(&c->scratch_dev, cap)) != cudaSuccess) {
                c->scratch_dev = NULL;
                return cuda_fail("PreMulSum: cudaMalloc", e);
            }
            c->scratch_dev_cap = cap;
        } else if ((e = cudaStreamWaitEvent(g->stream, c->scratch_ev, 0)) != cudaSuccess) {
            return cuda_fail("PreMulSum: ordering the scratch buffer", e);
        }
        int k = cuda_kern_premul(c->scratch_dev, g->send, n, g->dtype, g->pm.dev,
                                g->pm.dev ? NULL : g->pm.value, g->stream);
        if (k != 0)
            return cuda_fail("PreMulSum: the scaling kernel", (cudaError_t)k);
        *send = c->scratch_dev;
        *on_dev = 1;
        return ncclSuccess;
    }
    unsigned char k[8];
    memcpy(k, g->pm.value, sizeof(k));
    /* an event recorded on the stream waits, as the stream's work does, for the legacy
     * default stream's earlier work too (cudaStreamSynchronize of an idle stream would
     * not): what wrote the host input may have run there */
    cudaEvent_t ev;
    if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess)
        return cuda_fail("PreMulSum: cudaEventCreate", e);
    e = cudaEventRecord(ev, g->stream);
    if (e == cudaSuccess)
        e = cudaEventSynchronize(ev);
    cudaEventDestroy(ev);
    if (e != cudaSuccess)
        return cuda_fail("PreMulSum: waiting for the stream", e);
    if (g->pm.dev && (e = cudaMemcpy(k, g->pm.dev, esz, cudaMemcpyDefault)) != cudaSuccess)
        return cuda_fail("PreMulSum: reading the device scalar", e);
    if (c->scratch_host_cap < bytes) {
        void *p = realloc(c->scratch_host, bytes);
        if (p == NULL)
            return fail(ncclSystemError, "PreMulSum: out of memory (%zu bytes)", bytes);
        c->scratch_host = p;
        c->scratch_host_cap = bytes;
    }
    kern_premul(c->scratch_host, g->send, n, g->dtype, k);
    *send = c->scratch_host;
    return ncclSuccess;
}

/* After the collective that read the device scratch was enqueued on g's stream. */
static void premul_release(const gop_t *g, int on_dev)
{
    if (on_dev)
        cudaEventRecord(g->comm->scratch_ev, g->stream);
}

static ncclResult_t run_one(const gop_t *g)
{
    ncclComm_t c = g->comm;
    weft_status_t w = WEFT_OK;
    const void *send = g->send;
    int on_dev = 0;
    if (g->pm.used) {
        ncclResult_t r = premul_input(g, &send, &on_dev);
        if (r != ncclSuccess) {
            /* (a CUDA or memory failure: arguments were checked in coll()) the peers are
             * in, or entering, this collective and would wait for this rank until
             * WEFT_TIMEOUT: the abort tells them now */
            weft_comm_abort(c->w);
            if (c->async == ncclSuccess)
                c->async = r;
            return r;
        }
    }
    switch (g->kind) {
    case G_INIT:
        comm_init_now(c);
        return c->async;
    case G_SPLIT: {
        weft_comm_t *nw = NULL;
        weft_status_t st = weft_comm_split(c->w, g->peer < 0 ? WEFT_UNDEFINED : g->peer,
                                           g->key, &nw);
        ncclResult_t r = from_weft(st);
        if (g->child != NULL && st == WEFT_OK && nw != NULL) {
            g->child->w = nw;
            g->child->rank = weft_comm_rank(nw);
            g->child->nranks = weft_comm_size(nw);
        } else if (g->child != NULL) {
            g->child->async = r != ncclSuccess ? r : ncclInternalError;
        }
        return r;
    }
    case G_ALLREDUCE:
        w = weft_allreduce_stream(send, g->recv, g->count, g->dtype, g->op, c->w, g->stream);
        break;
    case G_REDUCE_SCATTER:
        w = weft_reduce_scatter_stream(send, g->recv, g->count, g->dtype, g->op, c->w,
                                       g->stream);
        break;
    case G_ALLGATHER:
        w = weft_allgather_stream(g->send, g->recv, g->count, g->dtype, c->w, g->stream);
        break;
    case G_BROADCAST:
        w = weft_broadcast_stream(g->send, g->recv, g->count, g->dtype, g->peer, c->w,
                                  g->stream);
        break;
    case G_REDUCE:
        w = weft_reduce_stream(send, g->recv, g->count, g->dtype, g->op, g->peer, c->w,
                               g->stream);
        break;
    case G_SEND:
    case G_RECV:
        return ncclInternalError;       /* run_p2p's */
    }
    premul_release(g, on_dev);
    return from_weft(w);
}

static ncclResult_t run_comm_calls(ncclComm_t c, const gop_t *ops, size_t n);

/* Runs comm c's calls among ops[0..n) (run_comm_calls: in order, the sends and receives
 * together after the rest). Counted in c->inflight while it runs. */
static ncclResult_t run_comm(ncclComm_t c, const gop_t *ops, size_t n)
{
    /* counted first, then the abort flag read (both sequentially consistent, as the
     * abort's store and count): either the abort waits for this call, or the call sees
     * the abort and leaves weft's communicator, which the abort destroys, alone */
    __atomic_add_fetch(&c->inflight, 1, __ATOMIC_SEQ_CST);
    ncclResult_t r = __atomic_load_n(&c->aborting, __ATOMIC_SEQ_CST)
                     ? fail(ncclInvalidUsage, "comm was aborted (ncclCommAbort) while this "
                            "call started")
                     : run_comm_calls(c, ops, n);
    __atomic_sub_fetch(&c->inflight, 1, __ATOMIC_SEQ_CST);
    return r;
}

/* The communicators that comm c's splits among ops[from..n) would have made carry r:
 * those splits never ran (ncclCommGetAsyncError says so). */
static void fail_children(ncclComm_t c, const gop_t *ops, size_t n, size_t from,
                          ncclResult_t r)
{
    for (size_t i = from; i < n; i++)
        if (ops[i].comm == c && ops[i].kind == G_SPLIT && ops[i].child &&
            ops[i].child->async == ncclSuccess && ops[i].child->w == NULL)
            ops[i].child->async = r;
}

/* NCCL schedules a group's collectives before its sends and receives (one launch runs
 * them all): here the collectives (and inits, splits) run in call order, then the sends
 * and receives as one batch, so ranks that interleave the two differently within a group,
 * which NCCL allows, never wait on each other in a cycle (rank 0 in an all-reduce while
 * rank 1 waits for its send, called first on rank 1 only). */
static ncclResult_t run_comm_calls(ncclComm_t c, const gop_t *ops, size_t n)
{
    size_t first_p2p = n;
    if (c->dev >= 0)
        cudaSetDevice(c->dev);
    for (size_t pass = 0; pass <= n; pass++) {   /* ops in order, then the p2p batch */
        size_t i = pass < n ? pass : first_p2p;
        if (i == n || ops[i].comm != c)
            continue;
        int p2p = ops[i].kind == G_SEND || ops[i].kind == G_RECV;
        if (p2p && pass < n) {
            if (first_p2p == n)
                first_p2p = i;
            continue;
        }
        if (ops[i].kind != G_INIT && c->w == NULL) {
            ncclResult_t r = c->async != ncclSuccess ? c->async : ncclInvalidUsage;
            fail_children(c, ops, n, i, r);
            return fail(r, "comm failed to initialize");
        }
        ncclResult_t r = p2p ? run_p2p(c, ops, n, i) : run_one(&ops[i]);
        if (r != ncclSuccess) {
            if (ops[i].kind != G_INIT && c->async == ncclSuccess &&
                (r == ncclRemoteError || r == ncclSystemError))
                c->async = r;
            if (!p2p)   /* the batch runs last: no split is left after it */
                fail_children(c, ops, n, i + 1, r);
            return r;
        }
    }
    return ncclSuccess;
}

typedef struct {
    ncclComm_t comm;
    const gop_t *ops;
    size_t n;
    ncclResult_t r;
    char err[sizeof(last_err)];
    pthread_t tid;
    int started;
} worker_t;

static void *worker_main(void *v)
{
    worker_t *k = v;
    k->r = run_comm(k->comm, k->ops, k->n);
    memcpy(k->err, last_err, sizeof(k->err));
    return NULL;
}

static ncclResult_t run_ops(const gop_t *ops, size_t n)
{
    if (n == 0)
        return ncclSuccess;
    worker_t *ks = calloc(n, sizeof(*ks));
    if (ks == NULL)
        return fail(ncclSystemError, "ncclGroupEnd: out of memory");
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < nk && ks[j].comm != ops[i].comm)
            j++;
        if (j == nk)
            ks[nk++] = (worker_t){ .comm = ops[i].comm, .ops = ops, .n = n };
    }
    /* the first communicator on this thread, the others each on a thread of its own */
    for (size_t j = 1; j < nk; j++)
        ks[j].started = pthread_create(&ks[j].tid, NULL, worker_main, &ks[j]) == 0;
    ncclResult_t r = ncclSuccess;
    for (size_t j = 1; j < nk; j++)
        if (!ks[j].started)
            r = fail(ncclSystemError, "ncclGroupEnd: cannot start a thread for rank %d",
                     ks[j].comm->rank);
    if (r == ncclSuccess) {
        ks[0].r = run_comm(ks[0].comm, ops, n);
        memcpy(ks[0].err, last_err, sizeof(ks[0].err));
    } else {
        for (size_t j = 1; j < nk; j++)     /* the others cannot finish without this one */
            if (ks[j].started && ks[j].comm->w)
                weft_comm_abort(ks[j].comm->w);
    }
    for (size_t j = 1; j < nk; j++)
        if (ks[j].started)
            pthread_join(ks[j].tid, NULL);
    for (size_t j = 0; j < nk && r == ncclSuccess; j++)
        if (ks[j].r != ncclSuccess) {
            r = ks[j].r;
            memcpy(last_err, ks[j].err, sizeof(last_err));
        }
    free(ks);
    return r;
}

/* The caller's current CUDA device (-1: none visible), which running a call may change
 * (run_comm and init set the comm's device) and restore_device puts back, as NCCL does. */
static int caller_device(void)
{
    int d = -1;
    if (mem_cuda_visible(NULL) && cudaGetDevice(&d) != cudaSuccess) {
        cudaGetLastError();
        d = -1;
    }
    return d;
}

static void restore_device(int d)
{
    if (d >= 0)
        cudaSetDevice(d);
}

static ncclResult_t submit(const gop_t *g)
{
    if (group_depth == 0) {
        int dev = caller_device();
        ncclResult_t r = g->kind == G_INIT ? run_one(g) : run_ops(g, 1);
        restore_device(dev);
        return r;
    }
    if (group_n == group_cap) {
        size_t cap = group_cap ? group_cap * 2 : 16;
        gop_t *p = realloc(group_ops, cap * sizeof(*p));
        if (p == NULL)
            return fail(ncclSystemError, "out of memory queueing a grouped call");
        group_ops = p;
        group_cap = cap;
    }
    group_ops[group_n++] = *g;
    return ncclSuccess;
}

SHIM_EXPORT ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

SHIM_EXPORT ncclResult_t ncclGroupEnd(void)
{
    if (group_depth == 0)
        return fail(ncclInvalidUsage, "ncclGroupEnd: no matching ncclGroupStart");
    if (--group_depth > 0)
        return ncclSuccess;
    ncclResult_t r = group_err;
    if (r != ncclSuccess) {     /* nothing of the group runs; its new comms are unusable */
        for (size_t i = 0; i < group_n; i++) {
            ncclComm_t c = group_ops[i].kind == G_INIT ? group_ops[i].comm : group_ops[i].child;
            if ((group_ops[i].kind == G_INIT || group_ops[i].kind == G_SPLIT) && c)
                c->async = r;
        }
        /* the last error stays the refused call's own, which says why */
    } else {
        int dev = caller_device();
        r = run_ops(group_ops, group_n);
        restore_device(dev);
    }
    /* the queue is this thread's: freed here, not left behind when the thread exits */
    free(group_ops);
    group_ops = NULL;
    group_n = group_cap = 0;
    group_err = ncclSuccess;
    return r;
}

/* ---- communicators --------------------------------------------------------------- */

static ncclResult_t init_checked(const char *fn, ncclComm_t *comm, int nranks,
                                 const ncclUniqueId *id, int rank, int dev,
                                 const ncclConfig_t *cfg)
{
    if (comm == NULL)
        return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
    if (nranks < 1)
        return fail(ncclInvalidArgument, "%s: nranks %d is not positive", fn, nranks);
    if (rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "%s: rank %d is out of range [0, %d)", fn, rank,
                    nranks);
    const char *addr = id_addr(id);
    if (addr == NULL)
        return fail(ncclInvalidArgument, "%s: the unique id was not made by this "
                    "library's ncclGetUniqueId", fn);
    if (check_config(fn, cfg) != ncclSuccess)
        return ncclInvalidArgument;
    ncclComm_t c = calloc(1, sizeof(*c));
    if (c == NULL)
        return fail(ncclSystemError, "%s: out of memory", fn);
    c->magic = COMM_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    c->dev = dev;
    snprintf(c->addr, sizeof(c->addr), "%s", addr);
    gop_t g = { .kind = G_INIT, .comm = c };
    ncclResult_t r = submit(&g);
    if (r != ncclSuccess && group_depth == 0) {    /* nothing is left behind */
        c->magic = 0;
        free(c);
        return r;
    }
    *comm = c;
    return r;
}

static ncclResult_t init_rank(const char *fn, ncclComm_t *comm, int nranks,
                              const ncclUniqueId *id, int rank, int dev,
                              const ncclConfig_t *cfg)
{
    return group_note(init_checked(fn, comm, nranks, id, rank, dev, cfg));
}

static int current_dev(void)
{
    int d = -1;
    if (!mem_cuda_visible(NULL) || cudaGetDevice(&d) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return d;
}

SHIM_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                                ncclUniqueId commId, int rank,
                                                ncclConfig_t *config)
{
    return init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank, current_dev(),
                     config);
}

SHIM_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                          int rank)
{
    return init_rank("ncclCommInitRank", comm, nranks, &commId, rank, current_dev(), NULL);
}

SHIM_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    if (comms == NULL || ndev < 0)
        return fail(ncclInvalidArgument, "ncclCommInitAll: %s", comms == NULL ? "comms is NULL"
                    : "ndev is negative");
    if (ndev == 0)
        return ncclSuccess;         /* no communicators asked for (NCCL's answer too) */
    int ndevs = 0;
    if (mem_cuda_visible(NULL) && cudaGetDeviceCount(&ndevs) != cudaSuccess)
        ndevs = 0;
    if (ndevs > 0 && ndev > ndevs)
        return fail(ncclInvalidArgument, "ncclCommInitAll: %d ranks, but %d devices are "
                    "visible (one rank per device)", ndev, ndevs);
    for (int i = 0; devlist && i < ndev; i++) {
        if (devlist[i] < 0 || (ndevs > 0 && devlist[i] >= ndevs))
            return fail(ncclInvalidArgument, "ncclCommInitAll: devlist[%d] = %d is not a "
                        "device (%d visible)", i, devlist[i], ndevs);
        for (int j = 0; j < i; j++)
            if (devlist[j] == devlist[i])
                return fail(ncclInvalidUsage, "ncclCommInitAll: device %d is listed twice "
                            "(devlist[%d] and devlist[%d])", devlist[i], j, i);
    }
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
        return r;
    ncclGroupStart();
    for (int i = 0; i < ndev && r == ncclSuccess; i++) {
        /* no GPU: ranks without a device (host-side use and tests); else the listed ones */
        int dev = ndevs == 0 ? -1 : devlist ? devlist[i] : i;
        r = init_rank("ncclCommInitAll", &comms[i], ndev, &id, i, dev, NULL);
    }
    ncclResult_t e = ncclGroupEnd();
    return r != ncclSuccess ? r : e;
}

SHIM_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                       ncclConfig_t *config)
{
    ncclResult_t r = check_comm("ncclCommSplit", comm, 1);
    if (r != ncclSuccess)
        return group_note(r);
    if (newcomm == NULL)
        return group_note(fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL"));
    if (check_config("ncclCommSplit", config) != ncclSuccess)
        return group_note(ncclInvalidArgument);
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return group_note(fail(ncclInvalidArgument, "ncclCommSplit: color %d is negative",
                               color));
    ncclComm_t c = NULL;
    if (color >= 0 && (c = calloc(1, sizeof(*c))) == NULL)
        return group_note(fail(ncclSystemError, "ncclCommSplit: out of memory"));
    if (c) {
        c->magic = COMM_MAGIC;
        c->dev = comm->dev;
    }
    /* in a group the split runs at ncclGroupEnd, each parent's on a thread of its own (one
     * thread splitting several ranks' communicators), as NCCL defers it */
    gop_t g = { .kind = G_SPLIT, .comm = comm, .peer = color, .key = key, .child = c };
    r = submit(&g);
    if (r != ncclSuccess && group_depth == 0) {    /* nothing is left behind */
        if (c)
            c->magic = 0;
        free(c);
        return r;
    }
    *newcomm = c;
    return r;
}

SHIM_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    ncclResult_t r = check_comm("ncclCommFinalize", comm, 0);
    if (r == ncclSuccess)
        comm->finalized = 1;        /* every call has completed by the time it returned */
    return r;
}

/* Destroy: no call of comm may be running (NCCL's rule; refused, not a use after free).
 * Abort: the calls running on other threads are aborted (weft_comm_abort wakes them) and
 * waited for, 10 s at most; one still inside then (a CUDA wait weft cannot cut short)
 * keeps the communicator's memory: it is leaked, not freed under that thread. An aborted
 * ncclComm itself is never freed (about 6 KB): a call on another thread may have checked
 * it just before the abort (PyTorch's watchdog aborts while the main thread issues
 * calls), and then finds it marked, not freed memory. */
static ncclResult_t comm_free(const char *fn, ncclComm_t comm, int abort)
{
    ncclResult_t r = check_comm(fn, comm, 0);
    if (r != ncclSuccess)
        return r;
    if (!abort && __atomic_load_n(&comm->inflight, __ATOMIC_SEQ_CST) > 0)
        return fail(ncclInvalidUsage, "%s: a call on this communicator is still running on "
                    "another thread (ncclCommAbort stops it)", fn);
    weft_status_t st = WEFT_OK;
    if (abort)
        __atomic_store_n(&comm->aborting, 1, __ATOMIC_SEQ_CST);
    if (comm->w && abort) {
        weft_comm_abort(comm->w);
        for (int ms = 0; ms < 10000 && __atomic_load_n(&comm->inflight, __ATOMIC_SEQ_CST) > 0;
             ms++)
            usleep(1000);
        if (__atomic_load_n(&comm->inflight, __ATOMIC_SEQ_CST) > 0) {
            comm->magic = COMM_ABORTED;     /* no new call starts on it */
            LOG_WARN(LOG_INIT, "%s: a call on rank %d was still running 10 s after the "
                     "abort: the communicator is left allocated", fn, comm->rank);
            return ncclSuccess;
        }
    }
    if (comm->w)
        st = weft_comm_destroy(comm->w);
    comm->w = NULL;
    if (comm->scratch_ev) {
        cudaEventSynchronize(comm->scratch_ev);
        cudaEventDestroy(comm->scratch_ev);
    }
    comm->scratch_ev = NULL;
    if (comm->scratch_dev)
        cudaFree(comm->scratch_dev);
    comm->scratch_dev = NULL;
    free(comm->scratch_host);
    comm->scratch_host = NULL;
    if (abort) {
        comm->magic = COMM_ABORTED;
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        static ncclComm_t aborted;      /* kept where it can be found, not leaked */
        pthread_mutex_lock(&lock);
        comm->next_aborted = aborted;
        aborted = comm;
        pthread_mutex_unlock(&lock);
        return ncclSuccess;
    }
    comm->magic = 0;
    free(comm);
    return from_weft(st);
}

/* A NULL communicator: nothing to do, success (NCCL's answer; cleanup after a failed
 * init calls these with NULL). */
SHIM_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    return comm == NULL ? ncclSuccess : comm_free("ncclCommDestroy", comm, 0);
}

SHIM_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return comm == NULL ? ncclSuccess : comm_free("ncclCommAbort", comm, 1);
}

SHIM_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err)
{
    ncclResult_t r = check_comm("ncclCommGetAsyncError", comm, 0);
    if (r != ncclSuccess)
        return r;
    if (err == NULL)
        return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
    /* a queued call (WEFT_CUDA_ASYNC) that failed after its call returned success;
     * counted as a call, so that an abort on another thread does not destroy weft's
     * communicator under it (run_comm) */
    __atomic_add_fetch(&comm->inflight, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&comm->aborting, __ATOMIC_SEQ_CST) && comm->async == ncclSuccess &&
        comm->w && mem_cuda_visible(NULL)) {
        weft_status_t st = weft_stream_error(comm->w);
        if (st != WEFT_OK)
            comm->async = from_weft(st);
    }
    __atomic_sub_fetch(&comm->inflight, 1, __ATOMIC_SEQ_CST);
    *err = comm->async;
    return ncclSuccess;
}

/* The checks of a query: a live comm and somewhere to write the answer. */
static ncclResult_t check_query(const char *fn, ncclComm_t comm, const int *out,
                                const char *out_name)
{
    ncclResult_t r = check_comm(fn, comm, 0);
    if (r == ncclSuccess && out == NULL)
        r = fail(ncclInvalidArgument, "%s: %s is NULL", fn, out_name);
    return r;
}

SHIM_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    ncclResult_t r = check_query("ncclCommCount", comm, count, "count");
    if (r == ncclSuccess)
        *count = comm->nranks;
    return r;
}

SHIM_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    ncclResult_t r = check_query("ncclCommUserRank", comm, rank, "rank");
    if (r == ncclSuccess)
        *rank = comm->rank;
    return r;
}

SHIM_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    ncclResult_t r = check_query("ncclCommCuDevice", comm, device, "device");
    if (r == ncclSuccess && comm->dev < 0)
        r = fail(ncclInvalidUsage, "ncclCommCuDevice: the communicator was made without a "
                 "visible GPU");
    if (r == ncclSuccess)
        *device = comm->dev;
    return r;
}

/* Registration is a hint in NCCL; weft's stream calls need none, so the handle is the
 * buffer and nothing is held. */
SHIM_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                          void **handle)
{
    ncclResult_t r = check_comm("ncclCommRegister", comm, 1);
    if (r == ncclSuccess && (handle == NULL || (buff == NULL && size)))
        r = fail(ncclInvalidArgument, "ncclCommRegister: %s is NULL",
                 handle == NULL ? "handle" : "buff");
    if (r == ncclSuccess)
        *handle = buff;
    return r;
}

SHIM_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
    return check_comm("ncclCommDeregister", comm, 0);
}

/* ---- memory and ops -------------------------------------------------------------- */

SHIM_EXPORT ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    if (ptr == NULL)
        return fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
    ncclResult_t r = need_gpu("ncclMemAlloc");
    if (r != ncclSuccess)
        return r;
    void *p = NULL;
    cudaError_t e = size ? cudaMalloc(&p, size) : cudaSuccess;
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(ncclUnhandledCudaError, "ncclMemAlloc(%zu): %s", size,
                    cudaGetErrorString(e));
    }
    *ptr = p;
    return ncclSuccess;
}

SHIM_EXPORT ncclResult_t ncclMemFree(void *ptr)
{
    if (ptr == NULL)
        return ncclSuccess;
    ncclResult_t r = need_gpu("ncclMemFree");
    if (r != ncclSuccess)
        return r;
    cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(ncclUnhandledCudaError, "ncclMemFree: %s", cudaGetErrorString(e));
    }
    return ncclSuccess;
}

SHIM_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                                  ncclDataType_t datatype,
                                                  ncclScalarResidence_t residence,
                                                  ncclComm_t comm)
{
    const char *fn = "ncclRedOpCreatePreMulSum";
    weft_dtype_t dt = WEFT_FLOAT32;
    ncclResult_t r = check_comm(fn, comm, 1);
    if (r == ncclSuccess)
        r = map_dtype(fn, datatype, &dt);
    if (r != ncclSuccess)
        return r;
    if (op == NULL || scalar == NULL)
        return fail(ncclInvalidArgument, "%s: %s is NULL", fn, op == NULL ? "op" : "scalar");
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
        return fail(ncclInvalidArgument, "%s: invalid residence %d", fn, (int)residence);
    for (int s = 0; s < MAX_PREMUL; s++)
        if (!comm->premul[s].used) {
            premul_t *p = &comm->premul[s];
            memset(p, 0, sizeof(*p));
            p->used = 1;
            p->dtype = dt;
            if (residence == ncclScalarDevice)
                p->dev = scalar;
            else
                memcpy(p->value, scalar, weft_dtype_size(dt));
            *op = (ncclRedOp_t)(ncclNumOps + s);
            return ncclSuccess;
        }
    return fail(ncclInvalidUsage, "%s: more than %d ops at once", fn, MAX_PREMUL);
}

SHIM_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    ncclResult_t r = check_comm("ncclRedOpDestroy", comm, 0);
    if (r != ncclSuccess)
        return r;
    int s = (int)op - ncclNumOps;
    if ((unsigned)op < ncclNumOps || s < 0 || s >= MAX_PREMUL || !comm->premul[s].used)
        return fail(ncclInvalidArgument, "ncclRedOpDestroy: op %d was not made by "
                    "ncclRedOpCreatePreMulSum on this comm", (int)op);
    comm->premul[s].used = 0;
    return ncclSuccess;
}

/* ---- collectives ----------------------------------------------------------------- */

/* Checks what every collective has (comm, dtype, op when has_op, root/peer when rooted,
 * a GPU) and queues or runs it. */
static ncclResult_t coll_queue(const char *fn, gkind_t kind, const void *send, void *recv,
                               size_t count, ncclDataType_t datatype, int has_op,
                               ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    gop_t g = { .kind = kind, .comm = comm, .send = send, .recv = recv, .count = count,
                .peer = root, .stream = stream };
    ncclResult_t r = check_comm(fn, comm, 1);
    if (r == ncclSuccess)
        r = map_dtype(fn, datatype, &g.dtype);
    if (r == ncclSuccess && has_op)
        r = map_op(fn, comm, op, g.dtype, &g.op, &g.pm);
    if (r != ncclSuccess)
        return r;
    if (root != -1 && (root < 0 || root >= comm->nranks))
        return fail(ncclInvalidArgument, "%s: %s %d is out of range [0, %d)", fn,
                    kind == G_SEND || kind == G_RECV ? "peer" : "root", root, comm->nranks);
    /* the PreMulSum path reads send itself (weft's calls check their own buffers) */
    if (g.pm.used && count > 0 && send == NULL)
        return fail(ncclInvalidArgument, "%s: sendbuff is NULL", fn);
    if (g.pm.used && count > SIZE_MAX / 4 / weft_dtype_size(g.dtype) /
                                 (kind == G_REDUCE_SCATTER ? (size_t)comm->nranks : 1))
        return fail(ncclInvalidArgument, "%s: count %zu is too large", fn, count);
    if ((r = need_gpu(fn)) != ncclSuccess)
        return r;
    if (kind == G_SEND || kind == G_RECV) {
        size_t esz = weft_dtype_size(g.dtype);
        if (count > SIZE_MAX / 4 / esz)
            return fail(ncclInvalidArgument, "%s: count %zu is too large", fn, count);
        g.count = count * esz;
    }
    return submit(&g);
}

static ncclResult_t coll(const char *fn, gkind_t kind, const void *send, void *recv,
                         size_t count, ncclDataType_t datatype, int has_op, ncclRedOp_t op,
                         int root, ncclComm_t comm, cudaStream_t stream)
{
    return group_note(coll_queue(fn, kind, send, recv, count, datatype, has_op, op, root,
                                 comm, stream));
}

SHIM_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream)
{
    return coll("ncclAllReduce", G_ALLREDUCE, sendbuff, recvbuff, count, datatype, 1, op, -1,
                comm, stream);
}

SHIM_EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                                           size_t recvcount, ncclDataType_t datatype,
                                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return coll("ncclReduceScatter", G_REDUCE_SCATTER, sendbuff, recvbuff, recvcount,
                datatype, 1, op, -1, comm, stream);
}

SHIM_EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream)
{
    return coll("ncclAllGather", G_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, 0,
                ncclSum, -1, comm, stream);
}

SHIM_EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream)
{
    if (root == -1)         /* -1 means "no root" to coll(); it is out of range here */
        root = INT_MIN;
    return coll("ncclBroadcast", G_BROADCAST, sendbuff, recvbuff, count, datatype, 0, ncclSum,
                root, comm, stream);
}

SHIM_EXPORT ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                   ncclComm_t comm, cudaStream_t stream)
{
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

SHIM_EXPORT ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, int root,
                                    ncclComm_t comm, cudaStream_t stream)
{
    if (root == -1)
        root = INT_MIN;
    return coll("ncclReduce", G_REDUCE, sendbuff, recvbuff, count, datatype, 1, op, root, comm,
                stream);
}

SHIM_EXPORT ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream)
{
    if (peer == -1)
        peer = INT_MIN;
    return coll("ncclSend", G_SEND, sendbuff, NULL, count, datatype, 0, ncclSum, peer, comm,
                stream);
}

SHIM_EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream)
{
    if (peer == -1)
        peer = INT_MIN;
    return coll("ncclRecv", G_RECV, NULL, recvbuff, count, datatype, 0, ncclSum, peer, comm,
                stream);
}

/* pnccl*: NCCL exports every call under a second name, its profiling interface's (a tool
 * that defines ncclX reaches the library's through pncclX): the same functions. */
#define PNCCL(f) extern __typeof__(f) p##f __attribute__((alias(#f))) SHIM_EXPORT;
PNCCL(ncclAllGather)
PNCCL(ncclAllReduce)
PNCCL(ncclBcast)
PNCCL(ncclBroadcast)
PNCCL(ncclCommAbort)
PNCCL(ncclCommCount)
PNCCL(ncclCommCuDevice)
PNCCL(ncclCommDeregister)
PNCCL(ncclCommDestroy)
PNCCL(ncclCommFinalize)
PNCCL(ncclCommGetAsyncError)
PNCCL(ncclCommInitAll)
PNCCL(ncclCommInitRank)
PNCCL(ncclCommInitRankConfig)
PNCCL(ncclCommRegister)
PNCCL(ncclCommSplit)
PNCCL(ncclCommUserRank)
PNCCL(ncclGetErrorString)
PNCCL(ncclGetLastError)
PNCCL(ncclGetUniqueId)
PNCCL(ncclGetVersion)
PNCCL(ncclGroupEnd)
PNCCL(ncclGroupStart)
PNCCL(ncclMemAlloc)
PNCCL(ncclMemFree)
PNCCL(ncclRecv)
PNCCL(ncclRedOpCreatePreMulSum)
PNCCL(ncclRedOpDestroy)
PNCCL(ncclReduce)
PNCCL(ncclReduceScatter)
PNCCL(ncclSend)
