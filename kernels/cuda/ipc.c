/*
 * ipc.c - the stream calls GPU to GPU inside a host: every rank maps its peers' device
 * buffers (CUDA IPC handles between processes; the pointers themselves between threads
 * of one process) and one kernel per rank reduces or copies its share straight from the
 * peers' memory into theirs. No byte goes through host memory.
 *
 * A call: the rank waits for its stream (its inputs are written, its outputs free), then
 * the ranks all-gather one record each over the host communicator (what the call is,
 * whether this rank can take this path, and a handle, base offset and pointer for its
 * send and receive buffers): that is the entry barrier. If any rank cannot (a host
 * buffer, a handle refused, more than CUDA_MULTI_MAX ranks) all of them stage instead,
 * having changed nothing. Otherwise each maps what it needs (opened handles are cached
 * per peer and handle, at most MAP_MAX; the oldest is closed), enqueues its kernel on the
 * caller's stream, waits for it, and the ranks all-reduce their status: the exit barrier
 * (no rank returns while a peer may still read its buffers), and every rank fails when
 * one did. Records that disagree (collective, count, dtype, op, root) fail every rank
 * with WEFT_ERR_MISMATCH before anything is touched.
 *
 * Shares, for N ranks and this rank r: all-reduce, broadcast and reduce split the
 * elements into N slices on 16-byte boundaries and rank r does slice r (all-reduce: reads
 * slice r of every send buffer, writes it into every receive buffer; broadcast: from the
 * root's send into every receive; reduce: into the root's receive); reduce-scatter reads
 * block r of every send buffer into its own receive; all-gather copies its send buffer
 * into block r of every receive buffer. No two ranks write the same bytes, and a rank
 * reads every element before it writes it, so in-place calls are safe. When every rank
 * is on the same GPU and some are other processes (nccl-tests' several ranks on one GPU),
 * rank 0 runs every share itself: kernels of different processes time-share the GPU and
 * each switch between their contexts cost about 100 us on an H100, more than the work
 * below a few MB. Sendrecv is
 * pairwise: the records go to dst and come from src (weft_sendrecv), the rank copies
 * src's send buffer into its receive, and a second exchange tells src that its buffer
 * is free.
 *
 * This path blocks the calling thread until the collective is complete (two waits on the
 * stream and two host collectives per call); the enqueue-only form is not done yet.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "comm_int.h"
#include "cuda_coll.h"
#include "cuda_kern.h"
#include "log.h"
#include "status.h"

#define MAP_MAX 64

typedef struct {
    int peer;
    cudaIpcMemHandle_t h;
    void *base;
    uint64_t used;
} ipc_map_t;

typedef struct {
    int need_handles;           /* some peer is another process */
    ipc_map_t map[MAP_MAX];
    int nmap;
    uint64_t tick;
    ipc_rec_t *recs;            /* [nranks] */
    pthread_mutex_t lock;       /* over map: the user's thread and the stream queue's */
    cudaEvent_t ev;             /* marks "the caller's stream up to this call" */
    int has_ev;
} ipc_t;

/* cuMemGetAddressRange (CUDA 12 ABI), from the driver the runtime loaded */
typedef int (*range_fn_t)(unsigned long long *base, size_t *size, unsigned long long ptr);
static range_fn_t range_fn;
static pthread_once_t range_once = PTHREAD_ONCE_INIT;

static void range_load(void)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess && q == cudaDriverEntryPointSuccess)
        range_fn = (range_fn_t)fn;
    cudaGetLastError();
}

static weft_status_t cuda_fail(const scall_t *c, const char *what, cudaError_t e)
{
    cudaGetLastError();
    return weft_error(WEFT_ERR_SYSTEM, "%s_stream: %s: %s (%s)", c->fn, what,
                      cudaGetErrorName(e), cudaGetErrorString(e));
}

int64_t cuda_gpu_key(int dev)
{
    int dom = 0, bus = 0, slot = 0;
    if (cudaDeviceGetAttribute(&dom, cudaDevAttrPciDomainId, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&slot, cudaDevAttrPciDeviceId, dev) == cudaSuccess)
        return (int64_t)((uint64_t)(uint32_t)dom << 16 | ((uint64_t)bus & 0xff) << 8 |
                         ((uint64_t)slot & 0xff));
    cudaGetLastError();
    return -1 - (int64_t)dev;   /* no PCI address: the ordinal, told apart from any address */
}

int cuda_test_each_share(void)
{
    const char *e = getenv("WEFT_TEST_CUDA_SHARES");
    return e != NULL && strcmp(e, "each") == 0;
}

int cuda_ipc_wanted(const weft_comm_t *comm)
{
    return comm->nranks > 1 && comm->local_size == comm->nranks && comm->cfg.cuda_ipc;
}

static ipc_t *ipc_of(weft_comm_t *comm)
{
    if (comm->cuda == NULL) {
        ipc_t *x = calloc(1, sizeof(*x));
        if (x == NULL || (x->recs = calloc((size_t)comm->nranks, sizeof(ipc_rec_t))) == NULL) {
            free(x);
            return NULL;
        }
        for (int i = 0; i < comm->nranks; i++)
            x->need_handles |= i != comm->rank &&
                               !peer_same_process(&comm->peers[i], &comm->peers[comm->rank]);
        pthread_mutex_init(&x->lock, NULL);
        comm->cuda = x;
    }
    return comm->cuda;
}

void cuda_ipc_free(weft_comm_t *comm)
{
    ipc_t *x = comm->cuda;
    if (x == NULL)
        return;
    for (int i = 0; i < x->nmap; i++)
        cudaIpcCloseMemHandle(x->map[i].base);
    if (x->has_ev)
        cudaEventDestroy(x->ev);
    cudaGetLastError();
    free(x->recs);
    pthread_mutex_destroy(&x->lock);
    free(x);
    comm->cuda = NULL;
}

/* This rank's description of [p, p+bytes): 0 when it cannot be shared (logged why). */
static int own_buf(const scall_t *c, const void *p, size_t bytes, int handle, ipc_buf_t *b)
{
    memset(b, 0, sizeof(*b));
    if (bytes == 0)
        return 1;
    b->has = 1;
    b->ptr = (uintptr_t)p;
    if (!handle)
        return 1;
    pthread_once(&range_once, range_load);
    unsigned long long base = 0;
    size_t size = 0;
    cudaError_t e;
    if (range_fn == NULL || range_fn(&base, &size, (uintptr_t)p) != 0) {
        LOG_INFO(LOG_COLL, "%s_stream: no allocation range for %p: not shared", c->fn, p);
        return 0;
    }
    if ((e = cudaIpcGetMemHandle(&b->h, (void *)(uintptr_t)base)) != cudaSuccess) {
        cudaGetLastError();
        LOG_INFO(LOG_COLL, "%s_stream: no IPC handle for %p (%s): not shared", c->fn, p,
                 cudaGetErrorName(e));
        return 0;
    }
    b->off = (uintptr_t)p - base;
    return 1;
}

/* Where peer's buffer (which: 0 send, 1 recv) is in this process. */
static weft_status_t peer_ptr(const scall_t *c, weft_comm_t *comm, ipc_t *x, int peer,
                              const ipc_rec_t *r, int which, char **p)
{
    const ipc_buf_t *b = &r->b[which];
    *p = NULL;
    if (!b->has)
        return WEFT_OK;
    /* (by the exchanged peer table, not r->pid: two containers' ranks may both be pid 1) */
    if (peer_same_process(&comm->peers[peer], &comm->peers[comm->rank])) {
        int dev = 0, can = 0;
        cudaGetDevice(&dev);
        if (r->dev != dev) {
            cudaError_t e = cudaDeviceCanAccessPeer(&can, dev, r->dev);
            if (e != cudaSuccess || !can)
                return weft_error(WEFT_ERR_UNSUPPORTED, "%s_stream: GPU %d cannot reach rank "
                                  "%d's GPU %d (no peer access): set WEFT_CUDA_IPC=0 to stage",
                                  c->fn, dev, peer, r->dev);
            e = cudaDeviceEnablePeerAccess(r->dev, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
                return cuda_fail(c, "enabling peer access", e);
            cudaGetLastError();
        }
        *p = (char *)(uintptr_t)b->ptr;
        return WEFT_OK;
    }
    pthread_mutex_lock(&x->lock);
    ipc_map_t *m = NULL;
    for (int i = 0; i < x->nmap && m == NULL; i++)
        if (x->map[i].peer == peer && memcmp(&x->map[i].h, &b->h, sizeof(b->h)) == 0)
            m = &x->map[i];
    if (m == NULL) {
        if (x->nmap == MAP_MAX) {           /* close the least recently used */
            int old = 0;
            for (int i = 1; i < x->nmap; i++)
                if (x->map[i].used < x->map[old].used)
                    old = i;
            cudaIpcCloseMemHandle(x->map[old].base);
            cudaGetLastError();
            x->map[old] = x->map[--x->nmap];
        }
        m = &x->map[x->nmap];
        m->peer = peer;
        m->h = b->h;
        cudaError_t e = cudaIpcOpenMemHandle(&m->base, b->h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
            pthread_mutex_unlock(&x->lock);
            return cuda_fail(c, "opening a peer's memory handle (cudaIpcOpenMemHandle)", e);
        }
        x->nmap++;
    }
    m->used = ++x->tick;
    *p = (char *)m->base + b->off;
    pthread_mutex_unlock(&x->lock);
    return WEFT_OK;
}

/* [*lo, *hi): rank r's slice of n elements of esz bytes, on 16-byte boundaries */
static void slice(size_t n, size_t esz, int nr, int r, size_t *lo, size_t *hi)
{
    size_t unit = esz < 16 ? 16 / esz : 1;
    size_t per = (n + (size_t)nr - 1) / (size_t)nr;
    per = (per + unit - 1) / unit * unit;
    *lo = per * (size_t)r < n ? per * (size_t)r : n;
    *hi = *lo + per < n ? *lo + per : n;
}

void cuda_ipc_share(const scall_t *c, int n, char **S, char **R, int r, cuda_multi_t *m,
                    weft_dtype_t *dt, weft_op_t *op)
{
    size_t esz = weft_dtype_size(c->dtype), lo = 0, hi = 0, off = 0;
    memset(m, 0, sizeof(*m));
    *dt = c->dtype;
    *op = c->op;
#define AT(P, j, o) ((P) ? (P)[j] + (o) : NULL)
    switch (c->coll) {
    case S_ALLREDUCE:
    case S_BROADCAST:
    case S_REDUCE:
        slice(c->count, esz, n, r, &lo, &hi);
        m->n = hi - lo;
        off = lo * esz;
        if (c->coll == S_BROADCAST) {
            m->nsrc = 1;
            m->src[0] = AT(S, c->root, off);
        } else {
            m->nsrc = n;
            for (int j = 0; j < n; j++)
                m->src[j] = AT(S, j, off);
        }
        if (c->coll == S_REDUCE) {
            m->ndst = 1;
            m->dst[0] = AT(R, c->root, off);
        } else {
            m->ndst = n;
            for (int j = 0; j < n; j++)
                m->dst[j] = AT(R, j, off);
        }
        break;
    case S_REDUCE_SCATTER:
        m->n = c->count;
        m->nsrc = n;
        for (int j = 0; j < n; j++)
            m->src[j] = AT(S, j, (size_t)r * c->count * esz);
        m->ndst = 1;
        m->dst[0] = AT(R, r, 0);
        break;
    case S_ALLGATHER:
        m->n = c->count;
        m->nsrc = 1;
        m->src[0] = AT(S, r, 0);
        m->ndst = n;
        for (int j = 0; j < n; j++)
            m->dst[j] = AT(R, j, (size_t)r * c->count * esz);
        break;
    case S_SENDRECV:
        break;
    }
#undef AT
    if (c->coll == S_BROADCAST || c->coll == S_ALLGATHER) {     /* copies: bytes, exactly */
        m->n *= esz;
        *dt = WEFT_UINT8;
        *op = WEFT_SUM;
    }
    m->div = *op == WEFT_AVG ? n : 0;
}

/* Share r's kernel of collective c (every rank's buffers mapped into S and R). */
static weft_status_t launch(const scall_t *c, weft_comm_t *comm, char **S, char **R, int r,
                            cudaStream_t stream)
{
    cuda_multi_t m;
    weft_dtype_t dt;
    weft_op_t op;
    cuda_ipc_share(c, comm->nranks, S, R, r, &m, &dt, &op);
    if (m.n == 0)
        return WEFT_OK;
    int e = cuda_kern_multi(&m, dt, op, stream);
    return e ? cuda_fail(c, "launching the kernel", (cudaError_t)e) : WEFT_OK;
}

static void fill_rec(const scall_t *c, weft_comm_t *comm, int ok, ipc_rec_t *rec)
{
    int dev = 0;
    cudaGetDevice(&dev);
    memset(rec, 0, sizeof(*rec));
    rec->ok = ok;
    rec->pid = (int32_t)comm->peers[comm->rank].pid;
    rec->dev = dev;
    rec->gpu = cuda_gpu_key(dev);
    rec->coll = c->coll;
    rec->dtype = c->dtype;
    rec->op = c->op;
    rec->root = c->root;
    rec->peer2 = c->peer2;
    rec->count = c->count;
    rec->count2 = c->count2;
}

/* Sendrecv over the peers' memory: the record to dst and from src, the copy, and the
 * second exchange that frees the send buffer. Both exchanges always run, so a rank that
 * fails still releases its peers. A side with no bytes exchanges nothing. */
static weft_status_t run_sendrecv(const scall_t *c, size_t sb, size_t rb, int ok,
                                  weft_comm_t *comm, ipc_t *x, cudaStream_t stream)
{
    int dst = c->root, src = c->peer2;
    ipc_rec_t mine, from;
    memset(&from, 0, sizeof(from));
    fill_rec(c, comm, ok, &mine);
    mine.ok = mine.ok && own_buf(c, c->send, sb, x->need_handles, &mine.b[0]);
    weft_status_t st = weft_sendrecv(&mine, sb ? sizeof(mine) : 0, dst, &from,
                                     rb ? sizeof(from) : 0, src, WEFT_UINT8, comm);
    if (st != WEFT_OK)
        return st;
    if (rb) {
        char *p = NULL;
        if (!mine.ok || !from.ok)
            st = weft_error(WEFT_ERR_UNSUPPORTED, "sendrecv_stream: %s is not device memory "
                            "that can be shared: ranks of one host mixing host and device "
                            "buffers need WEFT_CUDA_IPC=0", !mine.ok ? "this rank's buffer"
                            : "the source rank's send buffer");
        else if (from.count * weft_dtype_size((weft_dtype_t)from.dtype) != rb)
            st = weft_error(WEFT_ERR_MISMATCH, "sendrecv_stream: rank %d sends %llu bytes, "
                            "rank %d receives %zu", src, (unsigned long long)(from.count *
                            weft_dtype_size((weft_dtype_t)from.dtype)), comm->rank, rb);
        else if ((st = peer_ptr(c, comm, x, src, &from, 0, &p)) == WEFT_OK) {
            cuda_multi_t m;
            memset(&m, 0, sizeof(m));
            m.n = rb;
            m.nsrc = m.ndst = 1;
            m.src[0] = p;
            m.dst[0] = c->recv;
            int e = cuda_kern_multi(&m, WEFT_UINT8, WEFT_SUM, stream);
            cudaError_t w = e ? (cudaError_t)e : cudaStreamSynchronize(stream);
            if (w != cudaSuccess)
                st = cuda_fail(c, e ? "copying from the source rank" : "waiting for the copy", w);
        }
    }
    int32_t bad = st != WEFT_OK, bad_dst = 0;
    weft_status_t s2 = weft_sendrecv(&bad, rb ? sizeof(bad) : 0, src, &bad_dst,
                                     sb ? sizeof(bad_dst) : 0, dst, WEFT_UINT8, comm);
    if (st != WEFT_OK)
        return st;
    if (s2 != WEFT_OK)
        return s2;
    if (bad_dst)
        return weft_error(WEFT_ERR_PEER_LOST, "sendrecv_stream: rank %d could not receive "
                          "(its own error says why)", dst);
    return WEFT_OK;
}

int cuda_ipc_record(const scall_t *c, weft_comm_t *comm, size_t sb, size_t rb, int dev,
                    ipc_rec_t *rec)
{
    ipc_t *x = ipc_of(comm);
    fill_rec(c, comm, dev && x != NULL && comm->nranks <= CUDA_MULTI_MAX, rec);
    rec->ok = rec->ok && x != NULL && own_buf(c, c->send, sb, x->need_handles, &rec->b[0]) &&
              own_buf(c, c->recv, rb, x->need_handles, &rec->b[1]);
    return rec->ok;
}

weft_status_t cuda_ipc_agree(const scall_t *c, const weft_comm_t *comm, const ipc_rec_t *recs,
                             int *all_ok, int *lead)
{
    int n = comm->nranks, me = comm->rank, one_gpu = 1, procs = 0;
    const ipc_rec_t *mine = &recs[me];
    *all_ok = 1;
    for (int j = 0; j < n; j++) {
        const ipc_rec_t *r = &recs[j];
        if (r->coll != mine->coll || r->count != mine->count || r->dtype != mine->dtype ||
            (c->coll != S_ALLGATHER && c->coll != S_BROADCAST && r->op != mine->op) ||
            ((c->coll == S_BROADCAST || c->coll == S_REDUCE) && r->root != mine->root))
            return weft_error(WEFT_ERR_MISMATCH, "%s_stream: rank %d called with count %llu, "
                              "dtype %d, op %d, root %d; rank %d with count %llu, dtype %d, op "
                              "%d, root %d", c->fn, j, (unsigned long long)r->count, r->dtype,
                              r->op, r->root, me, (unsigned long long)mine->count, mine->dtype,
                              mine->op, mine->root);
        *all_ok &= r->ok;
        one_gpu &= r->gpu == mine->gpu;
        procs |= !peer_same_process(&comm->peers[j], &comm->peers[me]);
    }
    /* every rank on one GPU, some in other processes: rank 0 runs every share, so that
     * the GPU does not switch between the processes' contexts (about 100 us a switch);
     * tests make each rank run its own share there, as ranks on several GPUs do */
    *lead = one_gpu && procs && !cuda_test_each_share();    /* (the hook: set on every rank) */
    return WEFT_OK;
}

weft_status_t cuda_ipc_map(const scall_t *c, weft_comm_t *comm, const ipc_rec_t *recs,
                           char **S, char **R)
{
    ipc_t *x = ipc_of(comm);
    if (x == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "%s_stream: out of memory", c->fn);
    for (int j = 0; j < comm->nranks; j++) {
        RETURN_IF_ERR(peer_ptr(c, comm, x, j, &recs[j], 0, &S[j]));
        RETURN_IF_ERR(peer_ptr(c, comm, x, j, &recs[j], 1, &R[j]));
    }
    return WEFT_OK;
}

weft_status_t cuda_ipc_run(const scall_t *c, size_t sb, size_t rb, int dev, weft_comm_t *comm,
                           cudaStream_t stream, int *done)
{
    *done = 1;
    ipc_t *x = ipc_of(comm);
    if (x == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "%s_stream: out of memory", c->fn);
    /* inputs written, outputs free: an event on the stream, so that work the stream is
     * ordered after (the legacy default stream's copies) is waited for too */
    cudaError_t e = cudaSuccess;
    if (!x->has_ev && (e = cudaEventCreateWithFlags(&x->ev, cudaEventDisableTiming)) == cudaSuccess)
        x->has_ev = 1;
    if (e == cudaSuccess && (e = cudaEventRecord(x->ev, stream)) == cudaSuccess)
        e = cudaEventSynchronize(x->ev);
    if (e != cudaSuccess)
        return cuda_fail(c, "waiting for the stream", e);
    int n = comm->nranks, me = comm->rank;
    if (c->coll == S_SENDRECV)
        return run_sendrecv(c, sb, rb, dev, comm, x, stream);

    ipc_rec_t mine;
    cuda_ipc_record(c, comm, sb, rb, dev, &mine);
    RETURN_IF_ERR(weft_allgather(&mine, x->recs, sizeof(mine), WEFT_UINT8, comm));
    int all_ok = 0, lead = 0;
    RETURN_IF_ERR(cuda_ipc_agree(c, comm, x->recs, &all_ok, &lead));
    if (!all_ok) {
        *done = 0;              /* every rank saw the same records: all of them stage */
        return WEFT_OK;
    }
    int first = lead ? 0 : me, last = lead ? n - 1 : me;
    char *S[CUDA_MULTI_MAX], *R[CUDA_MULTI_MAX];
    weft_status_t st = WEFT_OK;
    if (lead && me != 0)
        first = 1, last = 0;    /* nothing to do but wait */
    if (first <= last)
        st = cuda_ipc_map(c, comm, x->recs, S, R);
    for (int r = first; r <= last && st == WEFT_OK; r++)
        st = launch(c, comm, S, R, r, stream);
    if (st == WEFT_OK && first <= last && (e = cudaStreamSynchronize(stream)) != cudaSuccess)
        st = cuda_fail(c, "waiting for the kernel", e);
    int32_t bad = st != WEFT_OK, any = 0;
    weft_status_t s2 = weft_allreduce(&bad, &any, 1, WEFT_INT32, WEFT_MAX, comm);
    if (st != WEFT_OK)
        return st;
    if (s2 != WEFT_OK)
        return s2;
    if (any)
        return weft_error(WEFT_ERR_PEER_LOST, "%s_stream: another rank failed its part over "
                          "CUDA IPC (its own error says why)", c->fn);
    return WEFT_OK;
}
