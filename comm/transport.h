/*
 * transport.h - the ops table every transport fills (shm, tcp, ucx; later verbs), and
 * the registry that lists them.
 *
 * A transport lives in a folder of its own (comm/shm/, comm/tcp/) and is known to the
 * rest of comm/ only through its tp_ops_t in tp_registry (transport.c), in no particular
 * order: each says how much it prefers itself and whether it reaches a peer. The engine,
 * the tuner and the connection code never name one.
 *
 * A transport moves whole frames (frame_hdr_t + payload) between two ranks over an
 * endpoint. The engine is its only caller. Setup happens in three phases driven by
 * comm/connect.c:
 *   local_setup  before the address exchange: create this rank's context (listeners,
 *                segments) and write its address blob, an opaque tp_addr_t that every
 *                rank receives in the exchange (peer_info_t.addr[the transport's slot])
 *   connect      after the exchange: one endpoint per peer this transport serves
 *   post_connect after every rank connected (a barrier): drop names others no longer
 *                need (shm unlinks its segment here, so a crash leaves nothing behind)
 * Data calls never block:
 *   send        pushes one frame; WEFT_OK once the frame is wholly taken (the payload
 *               may be reused), WEFT_IN_PROGRESS when it could not be (yet) - call again
 *               with the same frame; <0 on failure (WEFT_ERR_PEER_LOST...)
 *   recv_peek   WEFT_OK with the next frame's header (valid until recv_release) and,
 *               when the transport already holds it, its payload; WEFT_IN_PROGRESS when
 *               no header is complete yet, <0 on failure. A NULL *payload_p means the
 *               payload is still on the wire: the engine checks the header, then calls
 *   recv_payload to land it at dst (a plain receive: no staging copy) or, with dst NULL,
 *               in the transport's staging (*payload_p); WEFT_IN_PROGRESS until whole
 * One-sided access (RMA), for the single-copy algorithms (algo_cma.c); a transport
 * without it leaves these ops NULL, and the engine never schedules one-sided steps over
 * it (connect.c: cma_all):
 *   mem_reg     registers len bytes at ptr (of memory type mt) with this rank's context:
 *               a local handle, and a packed remote key (tp_rkey_t, at most
 *               TP_RKEY_BYTES) that travels to peers in the schedule's metadata
 *               (sched_meta_t); mem_dereg releases the handle (caching is the transport's)
 *   rkey_unpack a peer's packed key, as this endpoint can use it (validated: a key that
 *               is not this transport's, is oversized or garbled is refused with a clear
 *               error, never handed to a library); rkey_release gives it back
 *   get, put    post a read of the peer's [raddr, raddr+len) into dst, or a write of src
 *               there, and never block: WEFT_OK when already complete, WEFT_IN_PROGRESS
 *               with the transfer in *req (test it with rma_test; several may be in
 *               flight), <0 on failure. A peer that is gone gives WEFT_ERR_PEER_LOST,
 *               from the post, rma_test, or check_alive while the engine waits
 *   rma_cancel  gives up a posted transfer (a failed call): bounded; afterwards the
 *               transport never touches the request again
 *   rptr        optional: a pointer through which this process reads the peer's memory
 *               in place (shm maps weft_mem_alloc regions), NULL where it cannot
 * docs/TRANSPORTS.md has the table of what each transport implements.
 */
#ifndef WEFT_TRANSPORT_H
#define WEFT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"
#include "frame.h"
#include "mem.h"
#include "memtype.h"

typedef struct weft_comm weft_comm_t;

/* Every transport's endpoint starts with this, so the engine can reach the ops. */
typedef struct tp_ep {
    const struct tp_ops *ops;
    int peer;                   /* rank in the communicator */
    /* counted by the engine alone: frames' bytes (header + payload) this endpoint sent
     * and received, and bytes it read single-copy (rget, rptr) into rx; reported by
     * transport at weft_comm_destroy (WEFT_DEBUG=INFO, NET) */
    uint64_t bytes_tx, bytes_rx;
    uint64_t frames_kept;       /* counted by the transport: frames send_kept sent without
                                   copying their payload */
    int rma_net;                /* set by the transport: its one-sided reads of this peer
                                   are emulated over a network (ucx with neither an RMA nor
                                   a shared-memory lane to it: UCX_TLS=tcp), so that single
                                   copy is no default (connect.c) */
} tp_ep_t;

#define TP_MAX 4               /* transports in the registry, at most */
/* One transport's address blob, at most. A UCX worker address (every device's) is the
 * largest: 215 bytes with shm, cma and tcp on two interfaces, a few hundred more per RDMA
 * port (tp_ucx falls back to its network devices' address when it does not fit). Every
 * rank's peer_info_t travels through rank 0 in the bootstrap exchange (N^2 copies),
 * packed there (connect.c: peer_pack), so a blob costs its length, not this. */
#define TP_ADDR_BYTES 512

/* A transport's address as its peers need it, opaque to everyone else. len 0: this
 * rank has none (the transport is disabled or not set up here). */
typedef struct tp_addr {
    uint16_t len;
    uint8_t blob[TP_ADDR_BYTES];
} tp_addr_t;

/* What every rank publishes about itself in the bootstrap exchange. Fixed size, so
 * it travels as a flat blob. */
typedef struct peer_info {
    uint32_t rank;
    uint32_t pid;               /* in its pid namespace (pidns) */
    uint64_t host_id;           /* topo_host_id (WEFT_HOSTID): same value = same host */
    uint64_t pidns;             /* pid_ns_id(): pids compare only within one */
    char hostname[64];
    uint32_t local_rank;        /* filled by the communicator after the exchange */
    uint32_t setup_failed;      /* 1: this rank could not set up (connect_all): nobody
                                   waits for it, every rank fails at once */
    tp_addr_t addr[TP_MAX];     /* by registry slot (tp_slot) */
} peer_info_t;

_Static_assert(sizeof(peer_info_t) <= 2304, "peer_info_t crosses the bootstrap N^2 times");

/* Whether b's pid names the same process from a's side: one host and one pid namespace
 * (an unknown namespace, 0, is taken for the same, as before pidns was exchanged). */
static inline int peer_pid_comparable(const peer_info_t *a, const peer_info_t *b)
{
    return a->host_id == b->host_id && (a->pidns == b->pidns || !a->pidns || !b->pidns);
}

/* Whether a and b run in one process (ranks as threads): two containers' pid 1 are two. */
static inline int peer_same_process(const peer_info_t *a, const peer_info_t *b)
{
    return peer_pid_comparable(a, b) && a->pid == b->pid;
}

typedef struct tp_mem tp_mem_t;     /* a local registration (the transport's) */
typedef struct tp_rmem tp_rmem_t;   /* an unpacked remote key (the endpoint's) */
/* A posted transfer: the transport's handle, NULL once complete. The caller owns it. */
typedef struct tp_rma {
    void *req;
} tp_rma_t;

#define TP_RTT_MEASURE UINT32_MAX     /* tp_ops_t.core_rtt: the lower rank measures */

typedef struct tp_ops {
    const char *name;
    int preference;             /* higher first, among those that reach a peer */
    size_t chunk;               /* frame payload the tuner uses by default (bytes) */
    /* per-rank message from which the tuner moves data by one-sided reads (the cma
     * algorithm) when this transport serves every peer and all are on this host (and no
     * rank's endpoint says rma_net), unless WEFT_CMA_MIN says otherwise; 0: never by
     * default (connect.c agrees on it) */
    size_t cma_min;
    /* get and put complete before they return (shm: a process_vm_readv): the engine then
     * reads a step's bytes in one call (pieces in flight only pay where gets overlap;
     * one 64K-512K read instead of four took an all-gather from 0.9x to 1.0-1.05x Open
     * MPI on shm, 2 ranks: docs/PERF.md) */
    int get_blocks;
    /* optional: how many times longer a one-sided read of 256K from a peer takes on this
     * host than a plain copy of it (measured once per process; <= 0: unknown). Where it
     * is above ALGO_CMA_SLOW_RATIO on any rank, all-gather does not default to single
     * copy (algo.h: algo_cma_allgather_min) */
    double (*get_cost)(void);
    /* optional, for 2 ranks of one host: the two call it together right after the connect
     * barrier, and both leave with the lower rank's word on how far apart their cores
     * are. The lower rank passes in *rtt_ns what to tell, or TP_RTT_MEASURE: then it
     * times a cache line's round trips between the two first and tells the median (ns;
     * 0 when the other came too late or the round trips were a scheduler's, not the
     * caches'); the other rank's *rtt_ns is ignored on entry. The lower rank waits at most
     * 2 s for the other to come (then: 0); the other waits for the word until WEFT_TIMEOUT;
     * both stop when the peer is found gone (connect.c decides what the answer means).
     * Required where get_blocks is set: connect_cores_far calls it on both ranks when
     * they agree on cma_blocks */
    weft_status_t (*core_rtt)(weft_comm_t *comm, tp_ep_t *ep, uint32_t *rtt_ns);

    /* -- setup -- */
    /* whether this rank reaches peer with it; self and peer carry the addresses */
    int (*can_connect)(const weft_comm_t *comm, const peer_info_t *self, const peer_info_t *peer);
    /* creates the context (tp_ctx) and writes this rank's address */
    weft_status_t (*local_setup)(weft_comm_t *comm, tp_addr_t *addr);
    weft_status_t (*connect)(weft_comm_t *comm, int peer, tp_ep_t **ep_p);
    weft_status_t (*post_connect)(weft_comm_t *comm);
    void (*local_cleanup)(weft_comm_t *comm);   /* undoes local_setup */

    /* -- progress: once per engine pass, for transports whose context has work of its
     *    own (a UCX worker, a completion queue); NULL where every endpoint call makes its
     *    own progress (shm, tcp); ucx drives its worker here -- */
    weft_status_t (*progress)(weft_comm_t *comm);

    /* -- data -- */
    weft_status_t (*send)(tp_ep_t *ep, const frame_hdr_t *hdr, const void *payload);
    weft_status_t (*recv_peek)(tp_ep_t *ep, const frame_hdr_t **hdr_p, const void **payload_p);
    weft_status_t (*recv_payload)(tp_ep_t *ep, void *dst, const void **payload_p);
    void (*recv_release)(tp_ep_t *ep);
    /* optional (ib): send, where the payload stays as it is until this endpoint's flush
     * returns WEFT_OK: the transport may read it where it lies, later, instead of copying
     * it before it returns (counting such frames in frames_kept). The engine uses it for
     * the steps a schedule marks `keep` (schedule.h: no step writes those bytes while the
     * call runs) on host memory; a transport with it has flush. A failed call does not
     * flush: a transport reads no byte that could then be unmapped (ib reads through a
     * registration, which pins its pages). NULL where absent: send. */
    weft_status_t (*send_kept)(tp_ep_t *ep, const frame_hdr_t *hdr, const void *payload);
    /* optional (ib): the engine's next frames from this peer are a plain receive into
     * [dst, dst + room) that may be written now. The transport may post that buffer to
     * the peer, which then writes the payloads straight into it: recv_peek hands such a
     * frame with a NULL payload, and recv_payload the pointer into dst where it landed.
     * Called when recv_peek found no frame for such a step (the engine is about to wait;
     * a frame already here needs no post), so it must be cheap when nothing changed. dst
     * NULL: the call failed; withdraw what was posted, so that nothing lands in the
     * caller's memory after it returns. NULL where absent. */
    void (*recv_post)(tp_ep_t *ep, void *dst, size_t room);
    /* optional (ib): a call failed, and with it the communicator (engine.c: finish_head,
     * after its failure was posted and recv_post(NULL)). When this returns, nothing of
     * the caller's memory is read or written through ep any more: not a kept send's
     * payload, not a posted buffer a sender adopted under a registration that outlives
     * the post. The endpoint may be unusable after (ib: where a withdrawn post's
     * registration outlives it, or a kept payload is still unread, its writes, the
     * FAILED state among them, get 100 ms to complete, then its QPs are moved to ERR).
     * NULL where nothing is needed (shm and tcp copy before a call returns; ucx
     * withdraws its endpoints from the FAILED post). */
    void (*fail_end)(tp_ep_t *ep);
    /* WEFT_OK once every frame sent on ep is complete, needing nothing more of this
     * process (the peer has it, or can take it without this rank's progress); else
     * WEFT_IN_PROGRESS, <0 on failure. The engine calls it before an operation ends, so
     * that no rank leaves a call its peers still need it in (a UCX rendezvous reads the
     * sender's memory only after the sender's worker progresses). NULL: sends complete
     * on their own (shm, tcp). */
    weft_status_t (*flush)(tp_ep_t *ep);
    /* WEFT_OK while the peer may still answer, WEFT_ERR_PEER_LOST (logged, naming it)
     * once it cannot; called by the engine only when a wait has been idle a while */
    weft_status_t (*check_alive)(tp_ep_t *ep);

    /* -- peer states (comm/fail.c): outside the data frames, never blocking -- */
    /* tells the peer s; the latest post wins; best effort, and never sets the last
     * error (it runs while a failure's message is being reported) */
    void (*post_state)(tp_ep_t *ep, const tp_state_t *s);
    /* the peer's latest post (kind TP_STATE_NONE before any); <0 when it is gone, with
     * *s still filled: the last state it posted before going; the last error then says
     * why, unlogged (a peer gone after its part is no failure: the caller judges) */
    weft_status_t (*peer_state)(tp_ep_t *ep, tp_state_t *s);
    /* from any thread, at any time: this rank gives up on the peer, which then sees
     * WEFT_ERR_PEER_LOST once it has read what was sent before (abort, destroy) */
    void (*abort)(tp_ep_t *ep);
    /* in a child made by fork() (pthread_atfork, any thread state): let go of what the
     * child shares with the parent's connection without touching it (tcp: close, never
     * shutdown, so that the parent's peers see its death when it dies); NULL: nothing */
    void (*fork_child)(tp_ep_t *ep);

    /* -- one-sided access (see the top of this file); all NULL where absent -- */
    weft_status_t (*mem_reg)(weft_comm_t *comm, const void *ptr, size_t len, mem_type_t mt,
                             tp_mem_t **mem_p, tp_rkey_t *rkey);
    void (*mem_dereg)(weft_comm_t *comm, tp_mem_t *mem);
    /* 1 when get and put reach this endpoint's peer (NULL: whenever get is set) */
    int (*rma_reach)(const tp_ep_t *ep);
    weft_status_t (*rkey_unpack)(tp_ep_t *ep, const tp_rkey_t *rkey, tp_rmem_t **rmem_p);
    void (*rkey_release)(tp_ep_t *ep, tp_rmem_t *rmem);
    weft_status_t (*get)(tp_ep_t *ep, void *dst, tp_rmem_t *rmem, uint64_t raddr, size_t len,
                         tp_rma_t *req);
    weft_status_t (*put)(tp_ep_t *ep, const void *src, tp_rmem_t *rmem, uint64_t raddr,
                         size_t len, tp_rma_t *req);
    weft_status_t (*rma_test)(tp_ep_t *ep, tp_rma_t *req);
    void (*rma_cancel)(tp_ep_t *ep, tp_rma_t *req);
    const void *(*rptr)(tp_ep_t *ep, tp_rmem_t *rmem, uint64_t raddr, size_t len);

    /* -- teardown -- */
    /* NULL, or starts what close waits for (the peer acknowledging what was sent), so
     * that the waits of all endpoints overlap: connect_close_all calls it on every one,
     * then close on every one; close alone must also work */
    void (*close_start)(tp_ep_t *ep);
    void (*close)(tp_ep_t *ep);
} tp_ops_t;

/* The registry (transport.c): every transport built in, NULL-terminated. */
extern const tp_ops_t *const tp_registry[];
/* t's slot in the registry: its index in peer_info_t.addr and weft_comm's tp_ctx. */
int tp_slot(const tp_ops_t *t);
/* a peer's address for t (len 0 when it published none) */
const tp_addr_t *tp_peer_addr(const weft_comm_t *comm, const tp_ops_t *t, int peer);
/* t's context on this communicator (what its local_setup stored), and storing it */
void *tp_ctx(const weft_comm_t *comm, const tp_ops_t *t);
void tp_set_ctx(weft_comm_t *comm, const tp_ops_t *t, void *ctx);

/* Unlinks the weft shm segments in /dev/shm whose creating process is gone. */
void shm_remove_stale_segments(void);

#endif
