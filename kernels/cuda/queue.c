/*
 * queue.c - the stream calls of several ranks without blocking the caller: each call is
 * enqueued on the caller's stream as waits on flags in pinned host memory around weft's
 * kernels, and a thread per communicator (the queue's) does the host side when the stream
 * gets there. The caller's thread returns at once, as with NCCL.
 *
 * On the caller's stream, for call number s (slot s mod Q_SLOTS):
 *   event ev[slot]                       (the queue learns that the inputs are written)
 *   wait go >= s                         (cuStreamWaitValue32)
 *   this rank's kernels: one block copies args[slot] (mapped host memory) into device
 *   memory, then each kernel reads its work there when it runs (when every block read
 *   it across PCIe, a 512 MB all-reduce of 2 ranks on one H200 took 18.4 ms; 0.66 ms
 *   since)
 *   write kdone = s                      (cuStreamWriteValue32)
 *   wait release >= s
 *   write fin[slot] = s
 * The queue's thread, in call order: waits for ev[slot]; all-gathers the call's records
 * over a host communicator of its own (ipc.c: the entry barrier, the check that the ranks
 * agree, the handles), maps the peers' buffers and writes the kernels' work into
 * args[slot]; sets go, waits for kdone when this rank has kernels, all-reduces the ranks'
 * status (the exit barrier: no rank's stream moves on while a peer may still read its
 * buffers) and sets release. A failure still sets go and release with the kernels empty,
 * so no stream waits forever; it is kept (the first one) and returned by every later call
 * on the communicator. The kernel shares are ipc.c's; which rank runs which is fixed when
 * the queue starts (every rank on one GPU: rank 0 runs them all).
 *
 * Where a queue runs (q_setup): every rank its own process, all on this host, one queue
 * per process, stream memory operations on the GPU, and rank 0's WEFT_CUDA_ASYNC 1, or
 * auto (weft-train's default) with no two ranks on one GPU: processes sharing a GPU
 * without MPS time-slice it, and a context whose stream waits on a flag still takes its
 * slices (2 ranks of a sharded GPT-2 124M on one H200: 48915 tok/s queued, 137989
 * blocking; under MPS 205042 and 205618). Off by default (0): a buffer that cannot go GPU
 * to GPU fails a queued call where a blocking one stages it (below). A host-flag wait in
 * a stream holds up whatever shares its hardware queue, so two ranks (or two queues) in a
 * process can deadlock each other; elsewhere the calls block the caller (ipc.c, stream.c).
 * Host buffers are refused on a queue rather than staged (the staging copies could sit
 * behind the caller's wait).
 *
 * Invariants: at most Q_SLOTS calls are queued (a caller beyond that waits for the
 * oldest); a slot's work is rewritten only after its kernels ran (kdone) and its waits
 * passed; the ranks decide together at the first call whether the queue is used
 * (WEFT_CUDA_ASYNC, stream memory operations on the GPU), so every rank takes the same path.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "comm_int.h"
#include "cuda_coll.h"
#include "cuda_kern.h"
#include "log.h"
#include "status.h"

#define Q_SLOTS 8

typedef struct {
    volatile uint32_t go, kdone, release, probe;
    volatile uint32_t fin[Q_SLOTS];
    cuda_multi_t args[Q_SLOTS][CUDA_MULTI_MAX];
} q_shared_t;

typedef struct {
    scall_t c;
    size_t sb, rb;
    int failed;                 /* the caller's part failed: the ranks fail the call */
    ipc_rec_t rec;
    uint32_t seq;
    int nshare, share0;         /* this rank's kernels: shares share0 .. share0+nshare-1 */
    int kdone_on, fin_on;       /* the stream's writes of kdone and fin were enqueued */
    int nshare_timed;           /* timing events around the kernels were recorded */
} q_job_t;

typedef struct {
    weft_comm_t *hc;            /* the queue's host communicator (a split of the user's) */
    int lead;                   /* rank 0 runs every share */
    int dev;
    q_shared_t *sh;             /* pinned, mapped */
    q_shared_t *sh_dev;         /* the device's view of it */
    cuda_multi_t (*args_dev)[CUDA_MULTI_MAX];  /* [Q_SLOTS]: args copied to device memory */
    cudaEvent_t ev[Q_SLOTS];
    cudaStream_t st;            /* the queue's own stream (staging) */
    q_job_t jobs[Q_SLOTS];
    ipc_rec_t *recs;            /* [nranks] */
    uint32_t seq_next;          /* the caller's: last call enqueued */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    uint32_t posted, done;      /* under lock */
    int stop;                   /* under lock */
    weft_status_t err;          /* under lock: the first failure, and its message */
    char err_msg[512];
    pthread_t thread;
    int thread_on;
    /* where a call's time goes (the thread's; said at INFO when the queue is freed) */
    cudaEvent_t kt0[Q_SLOTS], kt1[Q_SLOTS];  /* around this rank's kernels on the stream */
    int kt_on[Q_SLOTS];
    double t_wait, t_xchg, t_kern, t_gpu, t_exit, t_idle;
    uint32_t n_timed, n_gpu;
    double last_end;
} queue_t;

/* comm->cuda_q: NULL before the first call decided, &q_off when the ranks decided
 * against a queue, else the queue. */
static char q_off;

/* queues running in this process: at most one (see q_setup) */
static int q_active;

/* driver stream memory operations (CUDA 12 ABI): CUresult f(CUstream, CUdeviceptr,
 * cuuint32_t, unsigned) */
typedef int (*memop32_t)(cudaStream_t, unsigned long long, unsigned, unsigned);
static memop32_t wait32, write32;
static pthread_once_t memop_once = PTHREAD_ONCE_INIT;
#define WAIT_GEQ 0u

static void memop_load(void)
{
    void *a = NULL, *b = NULL;
    enum cudaDriverEntryPointQueryResult qa, qb;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &a, 12000, cudaEnableDefault,
                                         &qa) == cudaSuccess && qa == cudaDriverEntryPointSuccess &&
        cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &b, 12000, cudaEnableDefault,
                                         &qb) == cudaSuccess && qb == cudaDriverEntryPointSuccess) {
        wait32 = (memop32_t)a;
        write32 = (memop32_t)b;
    }
    cudaGetLastError();
}

static unsigned long long dptr(const queue_t *q, const volatile void *host_field)
{
    return (unsigned long long)((uintptr_t)q->sh_dev + ((uintptr_t)host_field - (uintptr_t)q->sh));
}

/* -- the queue's thread -- */

static void q_fail(queue_t *q, weft_status_t st)
{
    pthread_mutex_lock(&q->lock);
    if (q->err == WEFT_OK) {
        q->err = st;
        snprintf(q->err_msg, sizeof(q->err_msg), "%s", weft_last_error());
    }
    pthread_mutex_unlock(&q->lock);
}

static double q_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void set_flag(volatile uint32_t *f, uint32_t v)
{
    __atomic_store_n(f, v, __ATOMIC_SEQ_CST);
}

/* Waits until the stream wrote kdone >= seq (or the communicator was aborted: an abort
 * must not wait on a stream that may never get there; an orderly destroy does wait, as
 * the kernels still use the peers' buffers); polls, sleeping more as it waits, and says
 * so every 10 s. */
static void wait_kdone(queue_t *q, const weft_comm_t *comm, uint32_t seq)
{
    unsigned spins = 0;
    time_t warned = time(NULL);
    while ((int32_t)(__atomic_load_n(&q->sh->kdone, __ATOMIC_ACQUIRE) - seq) < 0 &&
           !comm_is_aborted(comm)) {
        if (++spins < 200)
            sched_yield();
        else
            usleep(spins < 2000 ? 5 : 50);
        if (time(NULL) - warned >= 10) {
            LOG_WARN(LOG_COLL, "cuda queue: call %u has waited %ld s for this rank's kernels "
                     "(is the stream blocked by other work?)", seq, (long)(time(NULL) - warned));
            warned = time(NULL);
        }
    }
}

static void run_job(queue_t *q, weft_comm_t *comm, q_job_t *j)
{
    int slot = (int)(j->seq % Q_SLOTS), n = comm->nranks;
    const scall_t *c = &j->c;
    weft_status_t st = WEFT_OK;
    int kernels = 0;            /* the work in args[slot] is real */
    pthread_mutex_lock(&q->lock);
    weft_status_t failed = q->err;
    pthread_mutex_unlock(&q->lock);
    if (failed != WEFT_OK) {
        /* an earlier call failed: on every rank, as each call's exit all-reduce makes a
         * failure common, so no thread exchanges anything again (a rank whose caller saw
         * the failure posts no more calls); the stream's flags are still set */
        st = failed;
        goto out;
    }
    double t0 = q_now();
    cudaError_t e = cudaEventSynchronize(q->ev[slot]);
    double t1 = q_now();
    if (e != cudaSuccess) {
        cudaGetLastError();
        st = weft_error(WEFT_ERR_SYSTEM, "%s_stream: waiting for the stream: %s", c->fn,
                        cudaGetErrorString(e));
    }
    /* the entry barrier: every rank's record (a failed one says so) */
    j->rec.ok = (j->failed || st != WEFT_OK) ? -1 : j->rec.ok;
    weft_status_t s2 = weft_allgather(&j->rec, q->recs, sizeof(j->rec), WEFT_UINT8, q->hc);
    double t2 = q_now(), t3 = t2;
    if (s2 != WEFT_OK) {
        st = st != WEFT_OK ? st : s2;
        goto out;               /* the host communicator failed: no barrier to keep */
    }
    int all_ok = 0, lead = 0;
    for (int r = 0; r < n && st == WEFT_OK; r++)
        if (q->recs[r].ok < 0)
            st = weft_error(WEFT_ERR_PEER_LOST, "%s_stream: rank %d failed this call (its own "
                            "error says why)", c->fn, r);
    if (st == WEFT_OK)
        st = cuda_ipc_agree(c, comm, q->recs, &all_ok, &lead);
    if (st == WEFT_OK && !all_ok)   /* staging here could sit behind the caller's wait */
        st = weft_error(WEFT_ERR_UNSUPPORTED, "%s_stream: a rank's buffer is host memory or "
                        "has no CUDA IPC handle (cudaMallocAsync, cuMem): with the stream "
                        "queue (WEFT_CUDA_ASYNC=1 or auto) every buffer must be cudaMalloc "
                        "memory; WEFT_CUDA_ASYNC=0 stages such calls", c->fn);
    if (st == WEFT_OK && lead != q->lead)
        st = weft_error(WEFT_ERR_UNSUPPORTED, "%s_stream: the ranks' GPUs changed since the "
                        "communicator's first stream call", c->fn);
    if (st == WEFT_OK && j->nshare > 0) {
        char *S[CUDA_MULTI_MAX], *R[CUDA_MULTI_MAX];
        st = cuda_ipc_map(c, comm, q->recs, S, R);
        for (int k = 0; st == WEFT_OK && k < j->nshare; k++) {
            weft_dtype_t dt;
            weft_op_t op;
            cuda_ipc_share(c, n, S, R, j->share0 + k, &q->sh->args[slot][k], &dt, &op);
        }
        kernels = st == WEFT_OK;
    }
    /* every rank reaches here with the same records, so all keep the exit barrier */
    if (!kernels)
        for (int k = 0; k < j->nshare; k++)
            q->sh->args[slot][k].ndst = 0;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    t2 = q_now();
    set_flag(&q->sh->go, j->seq);
    if (j->nshare > 0 && j->kdone_on)
        wait_kdone(q, comm, j->seq);  /* and the slot's work must not change under a kernel */
    t3 = q_now();
    int32_t bad = st != WEFT_OK, any = 0;
    s2 = weft_allreduce(&bad, &any, 1, WEFT_INT32, WEFT_MAX, q->hc);
    if (st == WEFT_OK && s2 == WEFT_OK) {
        double t4 = q_now();
        float ms = 0;
        if (q->last_end > 0)
            q->t_idle += t0 - q->last_end;
        q->t_wait += t1 - t0;
        q->t_xchg += t2 - t1;
        q->t_kern += t3 - t2;
        q->t_exit += t4 - t3;
        q->n_timed++;
        q->last_end = t4;
        if (q->kt_on[slot] && cudaEventElapsedTime(&ms, q->kt0[slot], q->kt1[slot]) == cudaSuccess) {
            q->t_gpu += ms * 1e-3;
            q->n_gpu++;
        }
        cudaGetLastError();
    }
    if (st == WEFT_OK && s2 != WEFT_OK)
        st = s2;
    else if (st == WEFT_OK && any)
        st = weft_error(WEFT_ERR_PEER_LOST, "%s_stream: another rank failed its part over CUDA "
                        "IPC (its own error says why)", c->fn);
out:
    if (!kernels) {             /* reached on failure only: empty kernels, then go */
        for (int k = 0; k < j->nshare; k++)
            q->sh->args[slot][k].ndst = 0;
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        set_flag(&q->sh->go, j->seq);
        if (j->nshare > 0 && j->kdone_on)   /* else the stream never writes it */
            wait_kdone(q, comm, j->seq);
    }
    if (st != WEFT_OK)
        q_fail(q, st);
    set_flag(&q->sh->release, j->seq);
    if (!j->fin_on)             /* the stream will not write it: free need not wait */
        set_flag(&q->sh->fin[slot], j->seq);
}

static void *q_thread(void *v)
{
    weft_comm_t *comm = v;
    queue_t *q = comm->cuda_q;
    cudaSetDevice(q->dev);
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (q->posted == q->done && !q->stop)
            pthread_cond_wait(&q->cv, &q->lock);
        if (q->posted == q->done)
            break;              /* stopping, nothing left */
        uint32_t seq = q->done + 1;
        pthread_mutex_unlock(&q->lock);
        run_job(q, comm, &q->jobs[seq % Q_SLOTS]);
        pthread_mutex_lock(&q->lock);
        q->done = seq;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

/* -- setup and teardown -- */

static void q_release(queue_t *q, int free_pinned)
{
    for (int i = 0; i < Q_SLOTS; i++) {
        if (q->ev[i])
            cudaEventDestroy(q->ev[i]);
        if (q->kt0[i])
            cudaEventDestroy(q->kt0[i]);
        if (q->kt1[i])
            cudaEventDestroy(q->kt1[i]);
    }
    if (q->st)
        cudaStreamDestroy(q->st);
    if (q->sh && free_pinned)
        cudaFreeHost(q->sh);
    if (q->args_dev && free_pinned)
        cudaFree(q->args_dev);
    cudaGetLastError();
    if (q->hc)
        weft_comm_destroy(q->hc);
    free(q->recs);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->cv);
    free(q);
}

int cuda_queue_choose(long async, int each, int n, const int64_t *gpu, int *lead)
{
    int one_gpu = 1, shared = 0;
    for (int r = 0; r < n; r++) {
        one_gpu &= gpu[r] == gpu[0];
        for (int k = 0; k < r; k++)
            shared |= gpu[k] == gpu[r];
    }
    *lead = one_gpu && n > 1 && !each;
    return async == 1 || (async < 0 && !shared);
}

/* This rank's half of the setup: 1 when it can run a queue. */
static int q_setup_local(weft_comm_t *comm, queue_t *q)
{
    pthread_once(&memop_once, memop_load);
    if (wait32 == NULL || write32 == NULL)
        return 0;
    if (cudaGetDevice(&q->dev) != cudaSuccess ||
        cudaHostAlloc((void **)&q->sh, sizeof(q_shared_t),
                      cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
        return 0;
    memset((void *)q->sh, 0, sizeof(q_shared_t));
    void *d = NULL;
    if (cudaHostGetDevicePointer(&d, (void *)q->sh, 0) != cudaSuccess ||
        cudaStreamCreateWithFlags(&q->st, cudaStreamNonBlocking) != cudaSuccess)
        return 0;
    q->sh_dev = d;
    if (cudaMalloc((void **)&q->args_dev, sizeof(cuda_multi_t) * Q_SLOTS * CUDA_MULTI_MAX) !=
        cudaSuccess)
        return 0;
    for (int i = 0; i < Q_SLOTS; i++)
        if (cudaEventCreateWithFlags(&q->ev[i], cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreate(&q->kt0[i]) != cudaSuccess || cudaEventCreate(&q->kt1[i]) != cudaSuccess)
            return 0;
    /* every kernel the queue enqueues behind a wait, loaded now (cuda_kern.h) */
    if (cuda_kern_multi_preload(&q->sh_dev->args[0][0], q->st) != 0)
        return 0;
    /* stream memory operations work on this GPU: write a flag, wait for it */
    if (write32(q->st, dptr(q, &q->sh->probe), 1, 0) != 0 ||
        wait32(q->st, dptr(q, &q->sh->probe), 1, WAIT_GEQ) != 0 ||
        cudaStreamSynchronize(q->st) != cudaSuccess || q->sh->probe != 1)
        return 0;
    return (q->recs = calloc((size_t)comm->nranks, sizeof(ipc_rec_t))) != NULL;
}

/* The first stream call on comm: every rank says whether it can run a queue, and all
 * use one only when all can. Collective on comm.
 *
 * A wait on a host flag in a stream also holds up whatever shares its hardware queue
 * (CUDA_DEVICE_MAX_CONNECTIONS of them per process, streams assigned round robin). With
 * several ranks or several queues in one process, one rank's "wait release" can sit in
 * front of another's kernel whose completion that release needs: a deadlock, seen with 4
 * ranks as threads. So a queue runs only where every rank is its own process, every rank
 * is on this host (GPU to GPU, no staging on the queue's stream) and no other queue runs
 * in this process; elsewhere the calls block the caller. */
static weft_status_t q_setup(weft_comm_t *comm, int *on)
{
    *on = 0;
    int n = comm->nranks, dev = 0;
    if (!cuda_ipc_wanted(comm))         /* the same on every rank: no collective needed */
        return WEFT_OK;
    /* A rank that cannot take part in the collectives below would leave the others
     * waiting in them, or pair their next collective with its own: it aborts comm. */
    int64_t *all = malloc(3 * sizeof(int64_t) * (size_t)n), *gpu = malloc(sizeof(int64_t) * (size_t)n);
    int32_t *cans = malloc(sizeof(int32_t) * (size_t)n);
    queue_t *q = calloc(1, sizeof(*q));
    if (!all || !gpu || !cans || !q) {
        free(all);
        free(gpu);
        free(cans);
        free(q);
        weft_comm_abort(comm);
        return weft_error(WEFT_ERR_NO_MEMORY, "cuda queue: out of memory at the first stream "
                          "call (the communicator is aborted)");
    }
    /* first what the ranks want: rank 0's WEFT_CUDA_ASYNC (and test hook) counts, so
     * that ranks set differently still take one path; every rank's GPU */
    if (cudaGetDevice(&dev) != cudaSuccess)
        cudaGetLastError();
    int64_t want[3] = { comm->cfg.cuda_async, cuda_test_each_share(), cuda_gpu_key(dev) };
    weft_status_t st = weft_allgather(want, all, 3, WEFT_INT64, comm);
    int lead = 0, every = 0;
    for (int r = 0; st == WEFT_OK && r < n; r++)
        gpu[r] = all[r * 3 + 2];
    if (st == WEFT_OK)
        every = cuda_queue_choose(all[0], (int)all[1], n, gpu, &lead);
    int declined = st == WEFT_OK && !every && all[0] < 0;
    free(all);
    free(gpu);
    if (st != WEFT_OK || !every) {
        free(cans);
        free(q);
        if (declined)
            LOG_INFO(LOG_COLL, "comm %#x: stream calls block the caller: ranks share a GPU "
                     "(WEFT_CUDA_ASYNC=auto; 1 queues them there too)", comm->id32);
        return st;
    }
    /* then whether every rank can: its own process, one queue per process, stream memory
     * operations on its GPU */
    int32_t can = 1;
    if (__atomic_fetch_add(&q_active, 1, __ATOMIC_SEQ_CST) != 0) {
        __atomic_fetch_sub(&q_active, 1, __ATOMIC_SEQ_CST);   /* another queue runs */
        can = 0;
    }
    int counted = can;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cv, NULL);
    can = can && q_setup_local(comm, q);
    cudaGetLastError();
    st = weft_allgather(&can, cans, 1, WEFT_INT32, comm);
    every = st == WEFT_OK;
    for (int r = 0; st == WEFT_OK && r < n; r++) {
        every &= cans[r] != 0;
        for (int k = 0; k < r; k++)     /* (pid 1 of two containers: two processes) */
            every &= !peer_same_process(&comm->peers[k], &comm->peers[r]);
    }
    free(cans);
    if (st == WEFT_OK && every)
        st = weft_comm_split(comm, 0, comm->rank, &q->hc);
    if (st != WEFT_OK || !every) {
        q_release(q, 1);
        if (counted)
            __atomic_fetch_sub(&q_active, 1, __ATOMIC_SEQ_CST);
        if (st == WEFT_OK)
            LOG_INFO(LOG_COLL, "comm %#x: stream calls block the caller (ranks on several "
                     "hosts or sharing a process, another queue in a rank's process, or no "
                     "stream memory operations)", comm->id32);
        return st;
    }
    q->lead = lead;
    comm->cuda_q = q;
    if (pthread_create(&q->thread, NULL, q_thread, comm) != 0) {
        comm->cuda_q = NULL;
        q_release(q, 1);
        __atomic_fetch_sub(&q_active, 1, __ATOMIC_SEQ_CST);
        weft_comm_abort(comm);      /* the others' queues run: no path left in common */
        return weft_error(WEFT_ERR_SYSTEM, "cuda queue: cannot start its thread (the "
                          "communicator is aborted)");
    }
    q->thread_on = 1;
    *on = 1;
    return WEFT_OK;
}

int cuda_queue_on(const weft_comm_t *comm)
{
    return comm->cuda_q != NULL && comm->cuda_q != (const void *)&q_off;
}

weft_status_t cuda_queue_error(weft_comm_t *comm)
{
    if (!cuda_queue_on(comm))
        return WEFT_OK;
    queue_t *q = comm->cuda_q;
    pthread_mutex_lock(&q->lock);
    weft_status_t err = q->err;
    if (err != WEFT_OK)
        weft_error_quiet(err, "an earlier stream call failed: %s", q->err_msg);
    pthread_mutex_unlock(&q->lock);
    return err;
}


weft_status_t cuda_queue_run(const scall_t *c, size_t sb, size_t rb, int dev, int all_dev,
                             weft_comm_t *comm, cudaStream_t stream, int *done)
{
    *done = 0;
    if (comm->nranks < 2 || c->coll == S_SENDRECV || comm->cuda_q == &q_off)
        return WEFT_OK;
    if (comm->cuda_q == NULL) {
        int on = 0;
        weft_status_t st = q_setup(comm, &on);
        if (st != WEFT_OK) {
            *done = 1;
            return st;
        }
        if (!on) {
            comm->cuda_q = &q_off;
            return WEFT_OK;
        }
    }
    queue_t *q = comm->cuda_q;
    *done = 1;
    pthread_mutex_lock(&q->lock);
    weft_status_t err = q->err;
    if (err != WEFT_OK) {
        pthread_mutex_unlock(&q->lock);
        return weft_error_quiet(err, "%s_stream: an earlier stream call failed: %s", c->fn,
                                q->err_msg);
    }
    while ((int32_t)(q->seq_next + 1 - q->done) > Q_SLOTS)  /* the slot's last call runs */
        pthread_cond_wait(&q->cv, &q->lock);
    if ((err = q->err) != WEFT_OK) {    /* a call failed while this one waited for a slot */
        pthread_mutex_unlock(&q->lock);
        return weft_error_quiet(err, "%s_stream: an earlier stream call failed: %s", c->fn,
                                q->err_msg);
    }
    uint32_t seq = ++q->seq_next;
    pthread_mutex_unlock(&q->lock);

    int slot = (int)(seq % Q_SLOTS), n = comm->nranks, me = comm->rank;
    q_job_t *j = &q->jobs[slot];
    memset(j, 0, sizeof(*j));
    j->c = *c;
    j->sb = sb;
    j->rb = rb;
    j->seq = seq;
    cuda_ipc_record(c, comm, sb, rb, all_dev, &j->rec);
    j->share0 = q->lead ? 0 : me;
    j->nshare = q->lead ? (me == 0 ? n : 0) : 1;
    /* the stream's side: see the top of this file */
    int e = cudaEventRecord(q->ev[slot], stream);
    if (!e)
        e = wait32(stream, dptr(q, &q->sh->go), seq, WAIT_GEQ);
    j->nshare_timed = 0;        /* the kernels timed on the GPU only for the INFO line */
    if (!e && j->nshare > 0 && log_enabled(LOG_LVL_INFO, LOG_COLL))
        j->nshare_timed = cudaEventRecord(q->kt0[slot], stream) == cudaSuccess;
    if (!e && j->nshare > 0)    /* the work, once into device memory (cuda_kern.h) */
        e = cuda_kern_fetch(q->args_dev[slot], q->sh_dev->args[slot],
                            sizeof(cuda_multi_t) * (size_t)j->nshare, stream);
    for (int k = 0; !e && k < j->nshare; k++) {
        cuda_multi_t m;
        weft_dtype_t dt;
        weft_op_t op;
        cuda_ipc_share(c, n, NULL, NULL, j->share0 + k, &m, &dt, &op);
        if (m.n)
            e = cuda_kern_multi_ind(&q->args_dev[slot][k], m.n, dt, op, stream);
    }
    if (!e && j->nshare_timed)
        j->nshare_timed = cudaEventRecord(q->kt1[slot], stream) == cudaSuccess;
    q->kt_on[slot] = !e && j->nshare_timed;
    cudaGetLastError();
    if (!e)
        e = write32(stream, dptr(q, &q->sh->kdone), seq, 0);
    j->kdone_on = !e;
    if (!e)
        e = wait32(stream, dptr(q, &q->sh->release), seq, WAIT_GEQ);
    if (!e)
        e = write32(stream, dptr(q, &q->sh->fin[slot]), seq, 0);
    j->fin_on = !e;
    weft_status_t st = WEFT_OK;
    if (e) {
        /* the call is posted anyway, failed, so that the ranks fail it together and the
         * flags this stream may already wait on are set */
        cudaGetLastError();
        j->failed = 1;
        st = weft_error(WEFT_ERR_SYSTEM, "%s_stream: enqueueing on the stream failed (CUDA "
                        "error %d)", c->fn, e);
    }
    pthread_mutex_lock(&q->lock);
    q->posted = seq;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->lock);
    return st;
}

void cuda_queue_abort(weft_comm_t *comm)
{
    queue_t *q = __atomic_load_n((queue_t **)&comm->cuda_q, __ATOMIC_ACQUIRE);
    weft_comm_t *hc = q && (void *)q != (void *)&q_off ? __atomic_load_n(&q->hc, __ATOMIC_ACQUIRE)
                                                   : NULL;
    if (hc)
        weft_comm_abort(hc);
}

void cuda_queue_free(weft_comm_t *comm)
{
    queue_t *q = comm->cuda_q;
    if (q == NULL || comm->cuda_q == &q_off) {
        comm->cuda_q = NULL;
        return;
    }
    pthread_mutex_lock(&q->lock);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->lock);
    if (q->thread_on)
        pthread_join(q->thread, NULL);
    /* the streams must be past their last wait before the flags' memory goes: fin */
    int past = 1;
    for (int waited = 0; waited < 10000; waited++) {
        past = 1;
        for (uint32_t s = q->done > Q_SLOTS ? q->done - Q_SLOTS + 1 : 1; s <= q->done; s++)
            past &= (int32_t)(__atomic_load_n(&q->sh->fin[s % Q_SLOTS], __ATOMIC_ACQUIRE) - s) >= 0;
        if (past)
            break;
        usleep(1000);
    }
    if (!past)
        LOG_WARN(LOG_COLL, "comm %#x: a stream has not passed its last weft call after 10 s: "
                 "its flags' pinned memory is left allocated", comm->id32);
    if (q->n_timed > 0) {
        double n = q->n_timed;
        LOG_INFO(LOG_COLL, "comm %#x: cuda queue, %u calls, per call (us): waiting for the stream "
                 "%.1f, exchange and mapping %.1f, go to kernels done %.1f (the kernels on the GPU "
                 "%.1f over %u calls), exit all-reduce %.1f, thread idle between calls %.1f",
                 comm->id32, q->n_timed, q->t_wait / n * 1e6, q->t_xchg / n * 1e6,
                 q->t_kern / n * 1e6, q->n_gpu ? q->t_gpu / q->n_gpu * 1e6 : 0.0, q->n_gpu,
                 q->t_exit / n * 1e6, q->n_timed > 1 ? q->t_idle / (n - 1) * 1e6 : 0.0);
    }
    comm->cuda_q = NULL;
    q_release(q, past);
    __atomic_fetch_sub(&q_active, 1, __ATOMIC_SEQ_CST);
}
