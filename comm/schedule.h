/*
 * schedule.h - schedules: the per-rank programs that algorithms produce and the engine runs.
 *
 * A schedule is an array of steps. Buffers are named, not pointed to (SEND, RECV, TMP),
 * so one schedule serves every call with the same (collective, count, dtype, op, root,
 * in-place, algorithm, chunk) and is cached.
 *
 * Ordering rules the engine follows:
 *   - steps that send to one peer run in array order; so do steps that receive from one
 *     peer (each direction of a connection is a FIFO);
 *   - a step starts only after step `dep` completed (-1: no dependency), and, when
 *     `after_all` is set, after every earlier step completed;
 *   - a step with `stream` >= 0 may only move bytes that step `stream` has already
 *     produced (same length): this is what pipelines a ring, a chain or a tree; a
 *     receive's `stream` may be a send, and then it writes only bytes that send has
 *     already handed to the transport (an in-place exchange, frame by frame);
 *   - local steps (COPY, FOLD) run whole once their dependencies are met;
 *   - channels: a schedule may run several independent pieces (a ring per slice of the
 *     buffer), each step tagged with its channel. Each channel's steps to (from) one peer
 *     keep their array order, and the channels take turns on the connection: its k-th
 *     steps of channel 0, 1, ..., then the (k+1)-th, so both ends derive the same order
 *     from their own schedules. Algorithms with channels make a channel's k-th step on a
 *     connection depend only on its own earlier steps, which keeps the turns deadlock-free.
 * Every SEND/RECV/RECV_REDUCE moves at least one frame, even with len 0, so a barrier is
 * a schedule of empty frames and every step is checked against the peer's header.
 */
#ifndef WEFT_SCHED_H
#define WEFT_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"
#include "mem.h"

typedef enum {
    BUF_NONE = 0, BUF_SEND, BUF_RECV, BUF_TMP,
    BUF_META_OUT,       /* this rank's buffer addresses, for single-copy peers */
    BUF_META_IN         /* every rank's addresses, sched_meta_t each, by rank */
} sched_buf_t;

/* What a rank tells single-copy peers about one call: where its buffers are, and for
 * each transport that reads them one-sidedly (at most SCHED_META_KEYS per communicator,
 * connect.c) a packed remote key per buffer. A peer uses the key whose tp is its
 * endpoint's transport (engine.c). Sent as one frame with the default chunk (the tuner's
 * least is 256 bytes, and then it takes several, as any step's bytes would). */
#define SCHED_META_KEYS 2
enum { META_SEND_REG = 1, META_RECV_REG = 2 };   /* sched_meta_t.registered */
typedef struct sched_meta {
    uint64_t send, recv;
    uint32_t inplace;                   /* this rank's call is in place */
    uint32_t registered;                /* META_*_REG: weft_mem_alloc memory holds it */
    tp_rkey_t send_key[SCHED_META_KEYS], recv_key[SCHED_META_KEYS];
} sched_meta_t;
_Static_assert(sizeof(sched_meta_t) <= 4096, "a META frame stays one frame at the default "
               "chunk (and small beside the calls that send one)");

/* A call's registered-buffer state (sched_args_t.reg): whether its buffers on every rank
 * are weft_mem_alloc memory is found out by an address exchange (the "probe" schedule),
 * after which the call continues with a schedule chosen for the answer. */
enum {
    SCHED_REG_ASK = 0,  /* not known: the tuner may pick the probe */
    SCHED_REG_ALL,      /* every rank's buffers are registered: single copy by mapping */
    SCHED_REG_NONE      /* some rank's are not: the usual choice */
};

typedef enum {
    STEP_SEND,        /* send src[off, off+len) to peer */
    STEP_RECV,        /* receive into dst[off, off+len) from peer */
    STEP_RECV_REDUCE, /* dst = src op incoming, elementwise (dst may equal src); with
                         swap, incoming op src */
    STEP_COPY,        /* dst = src, local */
    STEP_FOLD,        /* dst = src[0] op src[1] op ... op src[nslots-1], in slot order,
                         slots `slot_stride` bytes apart; local */
    STEP_RGET,        /* dst = peer's buffer rbuf[roff, roff+len), read directly (single
                         copy); local, needs the peer's BUF_META_IN entry */
    STEP_RGET_REDUCE  /* dst = src op peer's rbuf[roff...], through TMP in chunks; local */
} step_kind_t;

typedef struct sched_step {
    uint8_t kind;       /* step_kind_t */
    uint8_t dst_buf;    /* sched_buf_t */
    uint8_t src_buf;
    uint8_t final;      /* apply AVG's division here (the last reduction of an element) */
    uint8_t after_all;
    uint8_t swap;       /* RECV_REDUCE: dst = incoming op src (the peer's data first) */
    uint8_t nt;         /* RECV, RECV_REDUCE, COPY: write dst with streaming stores (set by
                           the tuner, tuner.c) */
    uint8_t channel;    /* SEND/RECV*: which of the schedule's channels (frame.h) */
    int32_t peer;       /* SEND/RECV*: rank in the communicator */
    int32_t dep;
    int32_t stream;
    int32_t nslots;     /* FOLD */
    uint8_t rbuf;       /* RGET*: BUF_SEND or BUF_RECV of the peer */
    uint8_t keep;       /* SEND: no step writes its source bytes while the call runs, so a
                           transport may still read them after send returned, until the
                           call's flush (tp_ops_t.send_kept; set by sched_mark_keep) */
    size_t dst_off, src_off, len, slot_stride;   /* bytes */
    size_t roff;        /* RGET*: offset in the peer's buffer */
} sched_step_t;

typedef struct sched {
    int nsteps, cap;
    sched_step_t *steps;
    /* derived by sched_finish: the per-peer FIFOs and the local steps */
    int nranks;
    int *next_same;     /* [nsteps] next step in the same peer/direction queue, or -1 */
    int *head_send;     /* [nranks] first SEND step to each peer, or -1 */
    int *head_recv;     /* [nranks] first RECV/RECV_REDUCE step from each peer, or -1 */
    int *peers;         /* [npeers] the ranks with a send or receive queue, ascending: the
                           engine's passes visit these, not every rank of a large job */
    int npeers;
    int *locals;        /* [nlocals] COPY/FOLD steps in order */
    int nlocals;
    int oom;
    size_t tmp_bytes;   /* scratch the schedule needs (BUF_TMP) */
    size_t chunk;       /* largest frame payload, a multiple of the element size */
    const char *algo;   /* name, for logs and the flight recorder */
    int probe;          /* only the address exchange: the engine then picks the rest */
    int meta;           /* fills BUF_META_OUT (single-copy and probe schedules) */
    int nchannels;      /* channels its steps use (1 + the largest step.channel); with
                           more than one, each peer's queues interleave them (sched.c) */
} sched_t;

/* Where the ranks are: the same on every rank but local_rank and host. Algorithms and
 * the tuner's choices may read only the shared fields (the choice must agree). */
typedef struct sched_layout {
    int nhosts;         /* hosts the ranks span */
    int per_host;       /* ranks on the most populated host */
    int local_rank;     /* this rank among its host's ranks (in rank order) */
    int host;           /* this rank's host, 0..nhosts-1 (in order of their first rank) */
    int cma;            /* every rank reaches every other with single-copy reads */
    size_t cma_min;     /* the transports' single-copy threshold, agreed at connect
                           (tp_ops_t.cma_min; 0: none): cma's window when WEFT_CMA_MIN
                           is unset */
    int cma_blocks;     /* with cma: every rank's one-sided reads block (shm; connect.c) */
    int cma_slow;       /* with cma_blocks: on some rank's host they run more than
                           ALGO_CMA_SLOW_RATIO times slower than a copy; or some rank's
                           are emulated over a network (tp_ep_t.rma_net; connect.c) */
    int far;            /* 2 ranks of one host, read by single copy at about a copy's
                           speed, whose cores share no cache (WEFT_SHM_FAR; connect.c) */
    int uniform;        /* every host has per_host ranks */
    const int *rank_host;   /* [nranks] each rank's host (0..nhosts-1, as `host`), shared
                               and read-only, owned by whoever made the layout (the
                               communicator, for its life); NULL: not known, and then
                               algorithms treat ranks as host-contiguous (ring order is
                               the identity) and hierarchical ones decline */
} sched_layout_t;

/* The algorithm inputs. */
typedef struct sched_args {
    int coll;           /* coll_kind_t */
    int rank, nranks;
    size_t count;       /* the API's count argument */
    weft_dtype_t dtype;
    weft_op_t op;
    int root;           /* root, or the peer for send/recv (the destination for
                           sendrecv); -1 otherwise */
    int peer2;          /* sendrecv: the source */
    size_t count2;      /* sendrecv: the receive count */
    int inplace;
    size_t chunk;       /* frame payload bytes, already a multiple of the element size */
    int reg;            /* SCHED_REG_* */
    int nchannels;      /* channels an algorithm that has them may use (WEFT_NCHANNELS,
                           capped by the tuner for small calls); 0 or 1: one */
    sched_layout_t layout;
} sched_args_t;

/* Builders used by algorithms. sched_add returns the new step's index, or -1 when
 * out of memory (sched_t remembers it: sched_finish then fails). */
void sched_init(sched_t *s, const char *algo, size_t chunk);
int sched_add(sched_t *s, sched_step_t step);
weft_status_t sched_finish(sched_t *s, int nranks);
/* Sets `keep` on the SEND steps whose source bytes (SEND, RECV or TMP) only steps that
 * finish before them write: their dependencies, stream sources and, through after_all,
 * everything earlier, transitively. inplace: the call's SEND and RECV are one buffer,
 * and then any write to either counts as a write to both. Conservative: a schedule of
 * more than SCHED_KEEP_MAX steps, or no memory, leaves every flag 0. The tuner runs it on
 * the schedules the engine gets (cached); weft-sim's replay does not (at hundreds of
 * ranks it would cost several times the replay). */
#define SCHED_KEEP_MAX 1024
void sched_mark_keep(sched_t *s, int inplace);
void sched_free(sched_t *s);
void sched_dump(const sched_t *s, int rank);   /* to stderr, for debugging */

/* Step constructors, so algorithms read like pseudocode. */
int sched_send(sched_t *s, int peer, int buf, size_t off, size_t len, int stream);
int sched_recv(sched_t *s, int peer, int buf, size_t off, size_t len);
int sched_recv_reduce(sched_t *s, int peer, int dst, size_t dst_off, int src, size_t src_off,
                      size_t len, int final);
int sched_copy(sched_t *s, int dst, size_t dst_off, int src, size_t src_off, size_t len);
int sched_fold(sched_t *s, int dst, size_t dst_off, int src, size_t src_off, size_t len,
               int nslots, size_t slot_stride, int final);

int sched_rget(sched_t *s, int peer, int dst, size_t dst_off, int rbuf, size_t roff,
               size_t len, int dep);
int sched_rget_reduce(sched_t *s, int peer, int dst, size_t dst_off, int src, size_t src_off,
                      int rbuf, size_t roff, size_t len, int dep, int final);

#define SCHED_MOD(x, n) ((((x) % (n)) + (n)) % (n))
/* Every peer of rank r in the order r+1, r+2, ...: spreads the first frames over ranks. */
#define SCHED_FOR_PEERS(p, k, r, n)                                              \
    for (int k = 1, p = SCHED_MOD((r) + 1, (n)); k < (n); k++, p = SCHED_MOD((r) + k, (n)))

/* Block b of n when `count` elements are split as evenly as possible: element offset
 * and length. */
static inline void sched_block(size_t count, int n, int b, size_t *off, size_t *len)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n, ub = (size_t)b;
    *off = ub * base + (ub < rem ? ub : rem);
    *len = base + (ub < rem ? 1 : 0);
}

/* The algorithms register in algo.h's registry (algo.c), one file each. */

#endif
