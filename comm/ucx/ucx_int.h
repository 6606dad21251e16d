/*
 * ucx_int.h - what the UCX transport's files (tp_ucx.c: setup, liveness, teardown;
 * ucx_data.c: frames and peer states) share.
 *
 * A frame of up to UCX_SMALL payload bytes travels as one tagged message, header and
 * payload together, into the receiver's header buffer. A larger one travels as two: its
 * header, then its payload; once the engine has checked that header, the payload
 * receive is posted straight at the engine's destination (or at staging), so a large
 * payload moves once (UCX's rendezvous: a cma or RDMA read out of the sender's buffer).
 * The receiver keeps one header receive (room for a small frame) posted per peer. UCX matches messages of one tag from one
 * endpoint in the order they were sent, so header k pairs with payload k. The worker is
 * the process's, shared by its communicators: tags carry the communicator's id.
 */
#ifndef WEFT_UCX_INT_H
#define WEFT_UCX_INT_H

#include <sys/types.h>
#include "comm_int.h"
#include "ucx_api.h"

extern const tp_ops_t tp_ucx_ops;

/* A tag: kind in bits 63..56, the sending rank in 55..32, the communicator in 31..0.
 * Receives match all 64 bits. */
enum { UCX_TAG_HDR = 1, UCX_TAG_PAYLOAD = 2, UCX_TAG_STATE = 3, UCX_TAG_GONE = 4 };
#define UCX_TAG_MASK_ALL (~(ucp_tag_t)0)

static inline ucp_tag_t ucx_tag(int kind, int rank, uint32_t comm_id)
{
    return (ucp_tag_t)kind << 56 | (ucp_tag_t)((uint32_t)rank & 0xffffffu) << 32 | comm_id;
}

/* The communicator's UCX context (tp_ctx). */
typedef struct ucx_ctx {
    ucp_worker_h worker;            /* the process's, shared (tp_ucx.c); UCS_THREAD_MODE_MULTI:
                                       abort and other communicators come from any thread */
    struct ucx_ep **eps;            /* [nranks], to tell every peer goodbye at the first close */
    int nranks;
    int said_goodbye;
    uint64_t close_end;             /* set at the first close: when every endpoint's drain
                                       stops waiting, so that stuck peers' waits overlap */
    int rank;                       /* this rank: the sender field of our tags */
    uint32_t comm_id;
    double timeout_s;               /* how long teardown waits for peers to take our frames */
    uint8_t *shared_proc;           /* [nranks] once connect asks: 1 where the rank shares
                                       its process with another rank (ucx_can_connect) */
    struct ucx_ctx *next;           /* the process's live contexts (tp_ucx.c: shared.live) */
} ucx_ctx_t;

/* A frame that send took: UCX reads header and payload from here until both complete. */
#define UCX_TX_SLOTS 16
/* payloads up to this many bytes go in the header's message (the same in every rank of
 * a build: the receiver's header buffer has room for it) */
#define UCX_SMALL 32768
typedef struct ucx_tx {
    frame_hdr_t hdr;
    void *req_hdr, *req_payload;    /* NULL once complete */
    char *buf;                      /* the payload's copy (a small frame: header + payload) */
    size_t cap, len;
    int kept;                       /* the payload is read from the caller's memory
                                       (send_kept), not from buf */
} ucx_tx_t;

/* The header receive's buffer: a header, and a small frame's payload behind it. */
typedef struct ucx_rx_in {
    frame_hdr_t hdr;
    char small[UCX_SMALL];
} ucx_rx_in_t;

#define UCX_STATE_SLOTS 4           /* our states UCX may still hold */
#define UCX_STATE_WAIT 8            /* the peer's, arrived ahead of its data */
typedef struct ucx_state_msg {
    tp_state_t s;
    uint64_t frames;                /* data frames the sender had sent before it */
} ucx_state_msg_t;
enum { RX_POSTED = 0, RX_ARRIVED = 1 };             /* the header receive */
enum { PL_NONE = 0, PL_POSTED = 1, PL_DONE = 2 };   /* the payload receive */

typedef struct ucx_ep {
    tp_ep_t base;
    ucx_ctx_t *x;
    ucp_ep_h ep;
    pid_t peer_pid;
    int same_host;                  /* peer_pid names a process we can ask about */
    int fast_small;                 /* header messages go eagerly (tp_ucx.c: lanes_read) */
    int lost;                       /* atomic: the error callback ran, lost_status is why */
    ucs_status_t lost_status;
    int aborted;                    /* atomic: GONE was sent (abort, close) */
    int abort_busy;                 /* atomic: an abort (any thread) is using ep now */
    int gone;                       /* the peer's goodbye arrived, after gone_frames frames */
    int failed_posted;              /* our FAILED state was posted (ucx_state.c) */
    uint64_t gone_frames;
    weft_status_t rx_err;           /* a failure recv_release could not return */
    size_t max_frame;
    struct ucx_rkeys *rkeys;        /* the peer's unpacked remote keys (ucx_rma.c) */

    /* sends: frames UCX still holds, tx_tail..tx_head (free-running), at most tx_max
     * payload bytes of them (one frame always goes) */
    ucx_tx_t tx[UCX_TX_SLOTS];
    unsigned tx_head, tx_tail;
    size_t tx_bytes, tx_max;

    /* receives */
    ucx_rx_in_t *rx_in;             /* the header receive's buffer (ucx_rx_start) */
    void *rx_hdr_req;
    int rx_state;                   /* RX_* */
    void *rx_pl_req;
    int pl_state;                   /* PL_* */
    void *pl_dst;
    char *rx_buf;                   /* staging for payloads that are reduced */
    size_t rx_cap;

    /* peer states (ucx_state.c): each message says after how many data frames it was
     * posted, and is seen only once that many were read here, as tcp's stream would
     * deliver it; arrived ones wait in st_wait until then */
    uint64_t frames_tx;             /* data frames sent (atomic: abort reads it) */
    uint64_t frames_rx;             /* data frames read (released) */
    tp_state_t st_rx;               /* the peer's latest state seen */
    ucx_state_msg_t st_rx_buf, st_wait[UCX_STATE_WAIT];
    unsigned st_wait_head, st_wait_tail;
    void *st_rx_req;
    struct { ucx_state_msg_t m; void *req; } st_tx[UCX_STATE_SLOTS];
    uint64_t gone_rx_buf, gone_tx_buf;  /* a goodbye: the frames sent before it */
    void *gone_req, *gone_tx_req;
} ucx_ep_t;

/* ucx_data.c */
/* posts the receives a new endpoint keeps: peer states, goodbye, the first header */
weft_status_t ucx_rx_start(ucx_ep_t *e);
/* cancels them (a receive UCX already matched gets 100 ms), frees the staging */
void ucx_rx_stop(ucx_ep_t *e);
void ucx_cancel_recv(ucx_ep_t *e, void **req);
/* 1 while UCX holds a frame or the goodbye we sent (quiet: failures count as done) */
int ucx_tx_busy(ucx_ep_t *e);
/* 1 while UCX holds one of our peer states */
int ucx_states_busy(ucx_ep_t *e);
/* 1 while UCX holds any send of ours: a frame, a state, the goodbye */
int ucx_sends_busy(ucx_ep_t *e);
/* frees what the send ring holds (after the endpoint's flush or force close) */
void ucx_tx_free(ucx_ep_t *e);
/* WEFT_OK, or the failure (logged unless quiet) of a peer whose error callback ran */
weft_status_t ucx_lost_error(ucx_ep_t *e, int quiet);
/* a UCX failure s of `what` ("send to", "receive from") as a weft error, logged */
weft_status_t ucx_failed(ucx_ep_t *e, ucs_status_t s, const char *what);
/* the request's status, UCS_INPROGRESS while it runs; frees it once done */
ucs_status_t ucx_req_test(void **req);
/* an nbx call's result as a request slot: NULL (done), the request, or an error */
ucs_status_t ucx_req_take(ucs_status_ptr_t p, void **req);
/* tagged messages of a kind (UCX_TAG_*) to / from the endpoint's peer */
/* transport.h's flush: WEFT_OK once every frame this endpoint took has completed */
weft_status_t ucx_flush(tp_ep_t *ep);
ucs_status_t ucx_post_send(ucx_ep_t *e, const void *buf, size_t len, int kind, void **req);
ucs_status_t ucx_post_recv(ucx_ep_t *e, void *buf, size_t len, int kind, void **req,
                           ucp_tag_recv_info_t *info);

weft_status_t ucx_send(tp_ep_t *ep, const frame_hdr_t *hdr, const void *payload);
/* transport.h's send_kept: a payload over UCX_SMALL is sent from where it lies */
weft_status_t ucx_send_kept(tp_ep_t *ep, const frame_hdr_t *hdr, const void *payload);
/* frames send_kept took whose payload UCX may still read */
int ucx_kept_busy(ucx_ep_t *e);
/* tp_ucx.c: after a failed call's drain, an endpoint whose peer has not taken such
 * frames is closed (and lost): UCX then reads nothing more of the caller's memory */
void ucx_withdraw_kept(ucx_ep_t *e);
/* tp_ucx.c: after a failed call, a payload receive posted into the caller's memory is
 * waited for until `deadline` (time_ns), then cancelled, and where UCX had matched it
 * already its endpoint is closed (and lost): nothing lands there after the call */
void ucx_withdraw_posted(ucx_ep_t *e, uint64_t deadline);
/* tp_ucx.c: gives the endpoint up for good (lost, cancelled) and closes it with
 * UCP_EP_CLOSE_FLAG_FORCE, after our FAILED state had 100 ms to leave: UCX completes
 * what it still held as cancelled, within FORCE_CLOSE_S */
void ucx_withdraw(ucx_ep_t *e);
/* tp_ucx.c: 1 when the peer is a process on this host that no longer exists */
int ucx_peer_exited(const ucx_ep_t *e);
#define FORCE_CLOSE_S 2
weft_status_t ucx_recv_peek(tp_ep_t *ep, const frame_hdr_t **hdr_p, const void **payload_p);
weft_status_t ucx_recv_payload(tp_ep_t *ep, void *dst, const void **payload_p);
void ucx_recv_release(tp_ep_t *ep);

/* tp_ucx.c: waits (progressing) until the peer took every frame and state we sent, or
 * can no longer, or max_s passed (0: no limit) */
void ucx_drain(ucx_ep_t *e, double max_s);

/* tp_ucx.c: 1 when the shared worker holds a message for a communicator closed while it
 * lived (a late goodbye or state not swept yet; for tests) */
int ucx_closed_messages(void);

/* tp_ucx.c: the process's context (for registrations) */
ucp_context_h ucx_context(void);

/* ucx_rma.c: one-sided access (transport.h) */
weft_status_t ucx_mem_reg(weft_comm_t *comm, const void *ptr, size_t len, mem_type_t mt,
                          tp_mem_t **mem_p, tp_rkey_t *rkey);
void ucx_mem_dereg(weft_comm_t *comm, tp_mem_t *mem);
weft_status_t ucx_rkey_unpack(tp_ep_t *ep, const tp_rkey_t *rkey, tp_rmem_t **rmem_p);
void ucx_rkey_release(tp_ep_t *ep, tp_rmem_t *rmem);
weft_status_t ucx_get(tp_ep_t *ep, void *dst, tp_rmem_t *rmem, uint64_t raddr, size_t len,
                      tp_rma_t *req);
weft_status_t ucx_put(tp_ep_t *ep, const void *src, tp_rmem_t *rmem, uint64_t raddr,
                      size_t len, tp_rma_t *req);
weft_status_t ucx_rma_test(tp_ep_t *ep, tp_rma_t *req);
void ucx_rma_cancel(tp_ep_t *ep, tp_rma_t *req);
/* destroys the endpoint's unpacked keys that no transfer holds (all: every one, and
 * their table; at close, once no transfer can be running) */
void ucx_rkeys_destroy(ucx_ep_t *e, int all);
/* unmaps every cached registration (the context is about to go) */
void ucx_reg_purge(void);

/* ucx_state.c */
/* posts the receives of the peer's states and goodbye */
weft_status_t ucx_states_start(ucx_ep_t *e);
/* takes what arrived; a state is seen once the frames sent before it were read, or at
 * once with `all` (the peer is lost: nothing more will come to wait for) */
void ucx_states_poll(ucx_ep_t *e, int all);
void ucx_post_state(tp_ep_t *ep, const tp_state_t *s);
/* says goodbye (once; any thread) */
void ucx_abort(tp_ep_t *ep);

#endif
