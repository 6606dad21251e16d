/*
 * comm_int.h - the communicator and the operation record, shared inside comm/.
 *
 * Invariants: a communicator owns its endpoints, its schedule cache and its scratch
 * buffer; it borrows user buffers. Operations on one communicator run one at a time in
 * issue order (the queue); the head operation is the only one the engine touches, so
 * the scratch buffer and the per-step state can live in the communicator. Everything
 * the engine reads or writes (the queue, the per-step state, the endpoints, the flight
 * recorder, error) is touched only with `lock` held: by the calls on the user's thread
 * and by the progress thread (progress.c). Read without it: `aborted` (any thread),
 * `error` and an op's `status` (atomics; whoever stores them releases what they cover).
 */
#ifndef WEFT_COMM_INT_H
#define WEFT_COMM_INT_H

#include <pthread.h>
#include <stdint.h>

#include "weft.h"
#include "config.h"
#include "flight.h"
#include "schedule.h"
#include "sock.h"
#include "transport.h"

#define SCHED_CACHE_SIZE 64

typedef struct comm_op comm_op_t;

/* One collective call: what the user asked for and how far it got. */
struct comm_op {
    sched_args_t args;
    const void *send;
    void *recv;
    uint32_t seq;            /* collective sequence number */
    uint32_t seq_tx, seq_rx; /* point-to-point: per-peer sequence numbers */
    sched_t *sched;          /* borrowed from the cache while the op runs */
    mem_type_t send_mt, recv_mt;    /* the memory types of send and recv (coll.c) */
    const mem_ops_t *mops;   /* copies and reductions of this op (engine_start: for the
                                types of its buffers; scratch and staging are host) */
    weft_status_t status;    /* WEFT_IN_PROGRESS until done; stored last (atomic), after
                                which the engine never touches the op again */
    char *error_msg;         /* a request's: its failure's message (the message is
                                thread-local, and the progress thread may fail it) */
    int started;
    int probed;              /* it began with a probe schedule (engine.c: the probe's
                                frames went to every peer, so its end flushes them all) */
    int noop;                /* count 0 behind other ops: done when it reaches the head */
    int posted_wait;         /* told the peers it is waiting (comm/fail.c) */
    int draining;            /* its steps are done; waiting for the transports' flush */
    uint64_t t_start;
    double warned_s;         /* WEFT_WAIT_WARN: the wait it last logged (0: none yet) */
    uint64_t t_queued;       /* set when it was queued first in line (it starts at once),
                                else 0 */
    uint64_t fr_id;          /* its flight recorder entry */
    comm_op_t *next;         /* queue link */
};

struct weft_request {
    comm_op_t op;
    weft_comm_t *comm;
    char error_msg[512];
};

typedef struct sched_cache_entry {
    sched_args_t key;
    sched_t *sched;
} sched_cache_entry_t;

/* Per-step progress of the running operation. */
/* One-sided transfers of the head op (engine.c): the step that runs posts them in order
 * and completes them in order, at most ENGINE_RMA_DEPTH at a time. */
#define ENGINE_RMA_DEPTH 4
/* Bytes one engine pass reads (and reduces) through a transport whose gets block (shm)
 * before the step returns WEFT_IN_PROGRESS: a 1 GB single-copy step otherwise held the
 * lock (the progress thread's, a waiter's) and a nonblocking call for its whole read, and
 * an abort was seen only after it. */
#define ENGINE_RMA_PASS (4u << 20)
typedef struct engine_rma {
    tp_rma_t xfer[ENGINE_RMA_DEPTH];
    size_t off[ENGINE_RMA_DEPTH], len[ENGINE_RMA_DEPTH];   /* in the step, bytes */
    int head, n;             /* ring of posted transfers, oldest at head */
    int peer;                /* whose memory they read (when n > 0) */
    int active;              /* something below needs undoing when the op ends */
    /* this rank's registrations of the head op's send and recv buffers, by key slot */
    tp_mem_t *reg[2][SCHED_META_KEYS];
    tp_rmem_t **rmem;        /* [2*nranks] peers' unpacked keys (send, recv), head op */
} engine_rma_t;

typedef struct step_state {
    size_t done;             /* bytes moved / produced */
    size_t posted;           /* one-sided steps: bytes whose transfers were posted */
    uint32_t frames;         /* frames moved */
    uint32_t inflight_len;   /* send: length of the frame the transport has not taken */
    uint8_t inflight;
    uint8_t complete;
} step_state_t;

struct weft_comm {
    int rank, nranks;
    int local_rank, local_size;
    uint64_t id;             /* unique per job and communicator; same on every rank */
    uint32_t id32;           /* as carried in frame headers */
    weft_config_t cfg;
    int bound_process;       /* init bound this process (comm_bind): undone if init fails */
    int forked;              /* this process is a child made by fork(): the communicator is
                                the parent's, unusable here (comm.c, comm_fork_child) */
    weft_comm_t *live_next, *live_prev;     /* the process's live communicators (comm.c) */
    uint64_t setup_deadline; /* while init or split connects: when it must be over (one
                                WEFT_TIMEOUT for the whole setup), else 0 */
    char secret[256];
    int has_secret;

    peer_info_t *peers;      /* [nranks], from the address exchange */
    const int *parent_ranks; /* while a split connects: each rank's parent rank, which
                                connect.c's messages name (NULL otherwise) */
    sock_watch_t setup_watch; /* while connecting: asks the bootstrap whether a rank was
                                 lost, so setup waits end then (fn NULL: no watch) */
    tp_ep_t **eps;           /* [nranks], NULL for self */
    const tp_ops_t *transports[TP_MAX];  /* enabled, by preference */
    int ntransports;
    const tp_ops_t *progress_tps[TP_MAX]; /* used, with a progress op */
    int nprogress;
    size_t chunk_default;    /* the largest chunk of the transports the endpoints use */
    size_t buffsize_min;     /* the smallest WEFT_BUFFSIZE of the ranks (connect's barrier):
                              * every receiver's ring or frame limit takes a frame of a
                              * quarter of it (tuner.c: pick_chunk); 0 before connect */
    size_t buffsize_shm;     /* this rank's shm rings, where they shrank below WEFT_BUFFSIZE
                              * to fit /dev/shm (tp_shm.c: host_fit), else 0: what it puts
                              * in connect's barrier (cfg.buffsize keeps the setting); a
                              * split's rings are no larger (comm.c) */
    int flush_eps;           /* some endpoint's transport has a flush op */
    char transport_desc[16];

    /* transport-private contexts (local_setup creates them), by registry slot */
    void *tp_ctx[TP_MAX];

    uint32_t seq;            /* next collective sequence number */
    uint32_t nsplits;        /* splits made from this comm, to derive child ids */
    comm_op_t *q_head, *q_tail;

    sched_cache_entry_t cache[SCHED_CACHE_SIZE];
    int ncache;
    int cache_last;          /* the entry the last call used */

    void *tmp;               /* scratch for BUF_TMP */
    size_t tmp_cap;
    step_state_t *st;        /* [st_cap] per-step state of the head op */
    int st_cap;
    int *cursor;             /* [2*nranks] next step index per peer: send, recv; -1 for
                                every peer outside the head op's schedule (sched_t.peers),
                                and for all between ops: a schedule's queues end at -1 */
    uint32_t *frame_tx, *frame_rx;  /* [nranks] frame counters of the head op (its
                                schedule's peers'; the others' are stale) */
    int local_cursor;        /* next local step of the head op */
    int ncomplete;           /* completed steps of the head op */
    uint32_t *p2p_tx, *p2p_rx;      /* [nranks] point-to-point sequence numbers */
    weft_status_t error;     /* first failure; the communicator is unusable after it */
    char error_msg[512];     /* ... and its message, repeated by later calls */
    tp_state_t fail;         /* what this rank posts to its peers about that failure */
    int hold_state;          /* 1: calls post no WAITING state, which would replace a
                                posted SPLIT_FAILED before the members read it (comm.c) */
    sched_meta_t meta_out;   /* the head op's buffer addresses, for single-copy peers */
    sched_meta_t *meta_in;   /* [nranks] the peers' */
    int cma_all;             /* every rank reaches every other with single-copy reads */
    size_t cma_min_default;  /* the tuner's WEFT_CMA_MIN when unset: agreed at connect from
                                the transports' cma_min (0: none) */
    int cma_blocks;          /* and every rank's reads of every peer block (shm) */
    int cma_slow;            /* and some rank's host reads that way well below a copy, or
                                some rank's reads are emulated over a network (rma_net:
                                then with or without cma_blocks) */
    int cores_far;           /* 2 ranks with cma_blocks, not cma_slow: their cores share no
                                cache (WEFT_SHM_FAR, connect.c: connect_cores_far) */
    /* the transports whose one-sided ops serve this rank's peers (connect.c); key slot k
     * of sched_meta_t is rma_tps[k]'s */
    const tp_ops_t *rma_tps[SCHED_META_KEYS];
    int nrma_tps;
    engine_rma_t rma;        /* the head op's one-sided transfers (engine.c) */
    sched_layout_t layout;   /* hosts, ranks per host, this rank's place (tuner_setup) */
    int *rank_host;          /* [nranks] each rank's host: what layout.rank_host points to */
    uint64_t last_check_ns;  /* when idle waits last looked for lost peers */
    flight_t flight;         /* the last FLIGHT_SIZE calls */
    struct sockaddr_in rdv_addr;    /* where the bootstrap met */
    int rdv_named_lo;               /* rdv_addr came from a name that resolved to a
                                       loopback address here (sock_named_loopback) */

    void *cuda;              /* kernels/cuda/ipc.c: peers' mapped GPU memory (CUDA builds) */
    void *cuda_q;            /* kernels/cuda/queue.c: the stream calls' queue and thread */

    int aborted;             /* set by weft_comm_abort from any thread: atomics only */
    int abort_busy;          /* weft_comm_abort calls still touching the endpoints
                              * (atomics): destroy waits for them */

    /* progress.c: the lock over the engine state, and the background thread */
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* the thread sleeps here: nothing queued, or a caller drives */
    pthread_t thread;
    int thread_on;           /* the thread runs (written by the user's thread only) */
    int thread_stop;         /* under lock: the thread leaves */
    int fg;                  /* atomic: callers on the user's thread waiting for or
                                holding the lock; the thread stands aside while > 0 */
};

static inline int comm_is_aborted(const weft_comm_t *comm)
{
    return __atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE);
}

/* engine.c (all with comm->lock held) */
weft_status_t engine_start(weft_comm_t *comm, comm_op_t *op);
weft_status_t engine_progress(weft_comm_t *comm, comm_op_t *op, int *moved_p);
/* Progresses the queue until `op` completed (or failed); honours WEFT_TIMEOUT. */
weft_status_t engine_wait(weft_comm_t *comm, comm_op_t *op);
/* One pass over the queue head (weft_test, the progress thread); *moved_p (may be NULL)
 * says whether anything moved. Idle passes look for lost peers and timeouts. */
weft_status_t engine_poll(weft_comm_t *comm, int *moved_p);
/* Fails every queued op with WEFT_ERR_ABORTED (weft_comm_destroy). */
void engine_cancel_all(weft_comm_t *comm);

static inline weft_status_t op_status(const comm_op_t *op)
{
    return __atomic_load_n(&op->status, __ATOMIC_ACQUIRE);
}

/* progress.c: the communicator's lock and its progress thread (see the file's banner). */
weft_status_t progress_init(weft_comm_t *comm);
/* Takes the lock for a call on the user's thread; returns what comm_leave needs. */
int comm_enter(weft_comm_t *comm);
void comm_leave(weft_comm_t *comm, int entered);
/* With the lock held, after queueing a nonblocking op: starts the thread on first use
 * (WEFT_PROGRESS_THREAD=1); comm_leave then wakes it. Ops of PROGRESS_EAGER_MAX bytes or
 * less make their first pass on the caller's thread (coll.c). */
#define PROGRESS_EAGER_MAX (64u << 10)
void progress_kick(weft_comm_t *comm);
/* Stops and joins the thread (pending ops stay pending); then frees the lock. */
void progress_fini(weft_comm_t *comm);

/* A schedule's buffer as this op names it. */
static inline char *engine_buf(weft_comm_t *comm, comm_op_t *op, int buf)
{
    switch (buf) {
    case BUF_SEND: return (char *)op->send;
    case BUF_RECV: return (char *)op->recv;
    case BUF_TMP:  return (char *)comm->tmp;
    case BUF_META_OUT: return (char *)&comm->meta_out;
    case BUF_META_IN:  return (char *)comm->meta_in;
    default:       return NULL;
    }
}

/* engine_rma.c: the one-sided steps of the head op (with comm->lock held). */
/* registers the buffers peers will read and writes their keys into meta_out */
weft_status_t rma_begin(weft_comm_t *comm, const comm_op_t *op);
/* runs an RGET / RGET_REDUCE step as far as it goes: WEFT_OK once whole */
weft_status_t rma_step(weft_comm_t *comm, comm_op_t *op, const sched_step_t *st,
                       step_state_t *ss, int *moved);
/* cancels what is in flight, releases keys and registrations (every op's end) */
void rma_end(weft_comm_t *comm);

/* Fills d with the call as frames and peer states describe it. */
void engine_call_desc(const comm_op_t *op, call_desc_t *d);
/* The peers the head op waits on, "2(recv),0(send)", for timeout messages ("" if none). */
void engine_waiting(const weft_comm_t *comm, char *buf, size_t cap);

/* fail.c: failure propagation between ranks (see the file's banner). */
/* records who is to blame for a failure being raised (first one wins) */
void fail_note(weft_comm_t *comm, weft_status_t st, int other, const call_desc_t *theirs);
/* posts the communicator's first failure to every peer */
void fail_publish(weft_comm_t *comm, const comm_op_t *op, weft_status_t st);
/* a lost peer p: fails with what p posted before it went, if anything, else st */
weft_status_t fail_explain_lost(weft_comm_t *comm, const comm_op_t *op, int p,
                                weft_status_t st);
/* A one-sided transfer with rank p failed with st. PEER_LOST: as fail_explain_lost. Else
 * (ib: a remote access error) p may have left the call on a failure of its own and
 * released its registrations after posting FAILED: waits up to 100 ms for that post and
 * adopts it; without one st stands (a key that really is wrong). */
weft_status_t fail_explain_rma(weft_comm_t *comm, const comm_op_t *op, int p,
                               weft_status_t st);
/* A call that read peers' buffers one-sidedly (RGET steps) and is complete here: fails
 * it with a peer's posted failure about this call or an earlier one. Such a peer may
 * have given its buffers back to its caller while our reads ran (shm holds nothing whose
 * release would fail them): it posts before it does (engine.c: finish_head), so a peer
 * with nothing posted now took them back after our reads, if at all. */
weft_status_t fail_check_read_peers(weft_comm_t *comm, const comm_op_t *op);
/* from idle waits: tells peers what op waits in, and fails it on their news */
weft_status_t fail_probe(weft_comm_t *comm, comm_op_t *op);
/* thread-safe: every peer will see this rank as gone */
void fail_abort_peers(weft_comm_t *comm);

/* tuner.c: picks algorithm and chunk, builds or finds the schedule. */
/* once connected (peers' host ids, cma_all known): the layout schedules see */
weft_status_t tuner_setup(weft_comm_t *comm);
weft_status_t tuner_schedule(weft_comm_t *comm, comm_op_t *op);
void tuner_cache_clear(weft_comm_t *comm);
int tuner_after_probe(const weft_comm_t *comm, const sched_args_t *a, int all_registered,
                      int any_inplace);

/* connect.c: transport setup over an address exchange. */
typedef weft_status_t (*exchange_fn_t)(void *ctx, const void *mine, void *all, size_t len);
/* A fold of every rank's rec_len-byte record into an acc_len-byte result: acc starts
 * zeroed, then fold(acc, record of rank r, r) for r = 0, 1, ..., n - 1. */
typedef struct {
    size_t rec_len, acc_len;
    void (*fold)(void *acc, const void *rec, int r);
} fold_t;
/* Every rank gets the fold of all ranks' records in acc (bootstrap_reduce: rank 0 folds
 * them as they arrive and sends each rank acc alone, not n records). */
typedef weft_status_t (*reduce_fn_t)(void *ctx, const void *mine, void *acc, const fold_t *f);
/* The same over an exchange: every rank folds all n records itself (reduce NULL, in
 * connect_all: a split's exchanges are its parent's all-gathers). */
weft_status_t exchange_reduce(exchange_fn_t exchange, reduce_fn_t reduce, void *ctx, int n,
                              const void *mine, void *acc, const fold_t *f);
/* What each rank puts in connect_all's closing barrier (a rank left out of a split sends
 * zeros): it connected, it reaches every peer one-sidedly, and its transports' default
 * single-copy threshold in KB (connect.c: local_cma_min). */
typedef struct connect_agree {
    int ok, rma, cma_min_k;
    int blocks;     /* every peer's one-sided reads complete at once (tp_ops_t.get_blocks) */
    int slow;       /* they run well below a plain copy here (tp_ops_t.get_cost) */
    int net;        /* some peer's are emulated over a network (tp_ep_t.rma_net) */
    cfg_agree_t cfg;    /* the knobs every rank must set alike (config.h) */
    uint64_t buffsize;  /* WEFT_BUFFSIZE, which may differ: frames fit the smallest */
} connect_agree_t;
/* comm.c: when a wait of init's or split's setup must end: the setup's deadline, else
 * WEFT_TIMEOUT from now. */
uint64_t comm_setup_deadline(const weft_comm_t *c);
/* WEFT_BIND (bind.c): binds this process by the topology, once, after its first
 * communicator knows its local rank (c->bound_process set when this call bound it);
 * errors only for an explicit WEFT_BIND=cores:. comm_unbind: that init failed after all:
 * the process goes back to the cpus it had, and the next init places it anew. */
weft_status_t comm_bind(weft_comm_t *c);
void comm_unbind(void);
/* comm.c: the address the network transports listen on: WEFT_SOCKET_IFNAME's interface,
 * else the one that reaches the rendezvous, except where the rendezvous's name resolved
 * to a loopback address here (rdv_named_lo): then the first other interface that is up
 * (not a docker or libvirt bridge, as NCCL's default skips them). */
weft_status_t comm_local_addr(const weft_comm_t *c, struct sockaddr_in *out);
/* After connect_all (and, at init, the binding): whether the 2 ranks' cores share no
 * cache (cores_far, layout.far; WEFT_SHM_FAR). Both ranks call it, or neither. */
weft_status_t connect_cores_far(weft_comm_t *comm);
/* watch (may be NULL) is asked every 50 ms of a connection wait whether to go on;
 * failed (may be NULL) is told, before the closing barrier, that this rank's own setup
 * or connections failed (not a watch's news), so that it can tell the ranks that may be
 * waiting for it. A rank whose local setup fails says so in the address exchange
 * (peer_info_t.setup_failed), and then no rank connects. */
weft_status_t connect_all(weft_comm_t *comm, exchange_fn_t exchange, reduce_fn_t reduce,
                          int packed,
                          weft_status_t (*watch)(void *ctx),
                          void (*failed)(void *ctx, weft_status_t st), void *ctx);
/* packed 1: the addresses travel packed (peer_pack), for exchanges whose cost grows with
 * the record (the bootstrap's through rank 0: N^2 records at init); every rank of the
 * exchange must pass the same. split passes 0 (its helper ranks mirror the plain one).
 * reduce: the exchanges whose records every rank folds into one answer (the packed
 * records' longest length, the closing barrier's agreement) go through it where it is
 * not NULL (init: bootstrap_reduce), else through exchange (exchange_reduce), so that a
 * split's helper ranks still mirror them with one exchange each. */
/* peer_info_t as the exchange carries it: at most PEER_PACK_MAX bytes; peer_unpack
 * takes a record padded with zeros to n bytes, 0 or -1 when it does not parse. */
#define PEER_PACK_MAX (sizeof(peer_info_t) + 8)
size_t peer_pack(const peer_info_t *p, uint8_t *b);
int peer_unpack(const uint8_t *b, size_t n, peer_info_t *p);
void connect_close_all(weft_comm_t *comm);
/* For transports that meet their peers on a listening socket (tcp's data connections,
 * ib's setup): accepts until an authenticated connection from a lower rank that
 * taken(ctx, rank) does not already hold arrives, and returns it (*fd_p, *who_p). A
 * stranger (a failed or silent handshake, a rank out of range or taken) is closed,
 * logged with `tp` as the transport's name, and the accept goes on; the deadline or the
 * setup watch's news ends it with that error. */
weft_status_t connect_accept(weft_comm_t *comm, int lfd, uint64_t deadline, const char *tp,
                             int (*taken)(void *ctx, int who), void *ctx, int *fd_p,
                             int *who_p);

/* bootstrap.c: the rank-0 rendezvous store for weft_comm_init*. rendezvous: the name (for
 * messages) that resolved to addr; named_lo: it names a loopback address on this host
 * only (sock_named_loopback: rank 0 then listens on every interface). job_tag: the
 * launcher's job (launch_env_t; 0 for none), which rank 0 requires of every rank that
 * joins, so that ranks of two jobs that met at one port never mix. relay_addr: where
 * this rank listens for the ranks it relays exchanges to (the data connections' address,
 * comm_local_addr), needed only by a rank with children in that tree (NULL for one:
 * it could not get one, and says so in the bootstrap so that the others fail at once). */
typedef struct bootstrap bootstrap_t;
weft_status_t bootstrap_open(int rank, int nranks, const char *rendezvous,
                             const struct sockaddr_in *addr, int named_lo,
                             const struct sockaddr_in *relay_addr, const char *secret,
                             uint32_t job_tag, uint64_t deadline, bootstrap_t **bs_p);
/* The fanout of the tree the exchanges' records go down at nranks (0: every rank gets
 * them from rank 0): 8 from 128 ranks; WEFT_TEST_BOOT_FANOUT=K (a test hook, on every
 * rank) forces K at any size over 2. */
int bootstrap_fanout(int nranks);
/* Whether rank relays the exchanges' records to others at nranks (it then listens: it
 * needs bootstrap_open's relay_addr). */
int bootstrap_relays(int rank, int nranks);
/* allgather of fixed-size blobs through rank 0; usable as exchange_fn_t */
weft_status_t bootstrap_exchange(void *bs, const void *mine, void *all, size_t len);
/* The fold of every rank's record, folded at rank 0, which sends each rank the result
 * alone (reduce_fn_t): rank 0 sends n * acc_len bytes, not n * n * rec_len. */
weft_status_t bootstrap_reduce(void *bs, const void *mine, void *acc, const fold_t *f);
void bootstrap_close(bootstrap_t *bs);
/* Between exchanges (a connect_all watch): PEER_LOST once a rank is known lost. Rank 0
 * sees a rank's rendezvous connection close and tells every other rank; they see that
 * report (or rank 0's own connection close) arrive. */
weft_status_t bootstrap_watch(void *bs);
/* A connect_all failed callback: this rank could not connect. Rank 0 tells the others at
 * once; another rank's next record says so, and rank 0 then tells the others (from its
 * watch, or the exchange it is in), so nobody waits for this rank until WEFT_TIMEOUT. */
void bootstrap_failed(void *bs, weft_status_t why);
/* Checks a header rank 0 sends (any bytes): WEFT_OK when it announces len bytes for
 * nranks; rank 0's failure report or garbage otherwise, with the error set. */
weft_status_t bootstrap_check_msg(const void *buf, int nranks, size_t len);

/* env.c: the launcher's environment */
typedef struct launch_env {
    int rank, nranks, local_rank, local_size;
    char rendezvous[300];
    const char *source;      /* "weftrun", "torchrun", "Open MPI", "PMI", "Slurm" */
    uint32_t job_tag;        /* a hash of the launcher's job id (and Slurm step); 0: none */
} launch_env_t;
weft_status_t env_detect(launch_env_t *env);

/* coll.c */
weft_status_t coll_run(weft_comm_t *comm, const sched_args_t *args, const void *send,
                       void *recv, weft_request_t **req_p);


#endif
