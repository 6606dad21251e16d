/*
 * ucx_data.c - the UCX transport's frames (ucx_int.h says how a frame travels as two
 * tagged messages).
 *
 * send copies the frame into a slot of the endpoint's ring and posts its message(s); it
 * returns WEFT_OK at once (the engine may reuse its buffer), and WEFT_IN_PROGRESS when
 * UCX_TX_SLOTS frames or WEFT_BUFFSIZE payload bytes are still on the wire to that peer:
 * like shm's ring, the bound is what a slow receiver can make a sender hold. send_kept
 * posts a payload over UCX_SMALL from where it lies instead (the caller keeps it as it
 * is until flush; a failed call gives such frames up: ucx_withdraw_kept). recv_peek
 * hands out a header once its receive completed; recv_payload posts the payload's
 * receive at the engine's destination (or at staging, dst NULL) and reports it done;
 * recv_release posts the next header's receive. Nothing here blocks or progresses the
 * worker: the progress op does, once per engine pass.
 *
 * Peer states and goodbyes are in ucx_state.c. Every message is matched with all 64 tag
 * bits, so a state can never be taken for a frame.
 *
 * Invariants: a slot's buffers stay untouched until both its requests completed; a
 * header is handed out only after its receive completed with exactly sizeof(frame_hdr_t)
 * bytes, or that plus the small payload its len announces; a payload receive is posted
 * only after the engine checked its header, and at most one per endpoint.
 */
#include <stdlib.h>
#include <string.h>

#include "ucx_int.h"
#include "check.h"
#include "status.h"
#include "util.h"

ucs_status_t ucx_req_take(ucs_status_ptr_t p, void **req)
{
    *req = NULL;
    if (UCS_PTR_IS_ERR(p))
        return UCS_PTR_STATUS(p);
    *req = p;
    return p == NULL ? UCS_OK : UCS_INPROGRESS;
}

ucs_status_t ucx_req_test(void **req)
{
    if (*req == NULL)
        return UCS_OK;
    ucs_status_t s = ucp_request_check_status(*req);
    if (s != UCS_INPROGRESS) {
        ucp_request_free(*req);
        *req = NULL;
    }
    return s;
}

weft_status_t ucx_lost_error(ucx_ep_t *e, int quiet)
{
    if (!__atomic_load_n(&e->lost, __ATOMIC_ACQUIRE))
        return WEFT_OK;
    if (e->ep == NULL)              /* ucx_withdraw_kept */
        return (quiet ? weft_error_quiet : weft_error)(WEFT_ERR_PEER_LOST, "ucx: connection "
               "to rank %d closed: a failed call's frames were still waiting for it",
               e->base.peer);
    return (quiet ? weft_error_quiet : weft_error)(WEFT_ERR_PEER_LOST, "ucx: connection to "
           "rank %d failed: %s", e->base.peer, ucs_status_string(e->lost_status));
}

weft_status_t ucx_failed(ucx_ep_t *e, ucs_status_t s, const char *what)
{
    weft_status_t st = ucx_lost_error(e, 0);
    if (st != WEFT_OK)
        return st;
    if (s == UCS_ERR_CONNECTION_RESET || s == UCS_ERR_ENDPOINT_TIMEOUT ||
        s == UCS_ERR_UNREACHABLE)
        return weft_error(WEFT_ERR_PEER_LOST, "ucx: %s rank %d: %s", what, e->base.peer,
                          ucs_status_string(s));
    return weft_error(WEFT_ERR_SYSTEM, "ucx: %s rank %d failed: %s", what, e->base.peer,
                      ucs_status_string(s));
}

static ucp_tag_t tag_in(const ucx_ep_t *e, int kind)
{
    return ucx_tag(kind, e->base.peer, e->x->comm_id);
}

/* Posts a receive of len bytes at buf; the request (or NULL: done at once) in *req. */
ucs_status_t ucx_post_recv(ucx_ep_t *e, void *buf, size_t len, int kind, void **req,
                           ucp_tag_recv_info_t *info)
{
    ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO,
                              .recv_info.tag_info = info };
    info->length = len;
    return ucx_req_take(ucp_tag_recv_nbx(e->x->worker, buf, len, tag_in(e, kind),
                                         UCX_TAG_MASK_ALL, &p), req);
}

ucs_status_t ucx_post_send(ucx_ep_t *e, const void *buf, size_t len, int kind, void **req)
{
    ucp_request_param_t p = { .op_attr_mask = kind == UCX_TAG_HDR && e->fast_small ?
                                              UCP_OP_ATTR_FLAG_FAST_CMPL : 0 };
    *req = NULL;
    if (e->ep == NULL)              /* closed after a failed call (ucx_withdraw_kept) */
        return UCS_ERR_CANCELED;
    return ucx_req_take(ucp_tag_send_nbx(e->ep, buf, len,
                                         ucx_tag(kind, e->x->rank, e->x->comm_id), &p), req);
}

/* -- sends -- */

/* Frees the slots whose messages completed, oldest first. */
static weft_status_t tx_reap(ucx_ep_t *e)
{
    while (e->tx_tail != e->tx_head) {
        ucx_tx_t *t = &e->tx[e->tx_tail % UCX_TX_SLOTS];
        ucs_status_t a = ucx_req_test(&t->req_hdr), b = ucx_req_test(&t->req_payload);
        if (a < 0 || b < 0)
            return ucx_failed(e, a < 0 ? a : b, "send to");
        if (a == UCS_INPROGRESS || b == UCS_INPROGRESS)
            return WEFT_OK;
        e->tx_bytes -= t->len;
        e->tx_tail++;
    }
    return WEFT_OK;
}

weft_status_t ucx_flush(tp_ep_t *ep)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    /* nothing outstanding: a peer that has left after its part (destroyed, its
     * connection reset) fails no call that owes it nothing; the engine flushes the
     * endpoints of every peer of a call's schedule before it ends, also those whose
     * queues are done (and every endpoint after a probe). Not so once
     * this rank closed the endpoint itself (ucx_withdraw_kept: frames were given up). */
    if (e->tx_tail == e->tx_head && e->ep != NULL)
        return WEFT_OK;
    RETURN_IF_ERR(ucx_lost_error(e, 0));
    RETURN_IF_ERR(tx_reap(e));
    return e->tx_tail == e->tx_head ? WEFT_OK : WEFT_IN_PROGRESS;
}

int ucx_tx_busy(ucx_ep_t *e)
{
    for (; e->tx_tail != e->tx_head; e->tx_tail++) {
        ucx_tx_t *t = &e->tx[e->tx_tail % UCX_TX_SLOTS];
        if (ucx_req_test(&t->req_hdr) == UCS_INPROGRESS ||
            ucx_req_test(&t->req_payload) == UCS_INPROGRESS)
            return 1;
        e->tx_bytes -= t->len;
    }
    return ucx_req_test(&e->gone_tx_req) == UCS_INPROGRESS;
}

int ucx_states_busy(ucx_ep_t *e)
{
    for (int i = 0; i < UCX_STATE_SLOTS; i++)
        if (ucx_req_test(&e->st_tx[i].req) == UCS_INPROGRESS)
            return 1;
    return 0;
}

int ucx_sends_busy(ucx_ep_t *e)
{
    return ucx_tx_busy(e) || ucx_states_busy(e);
}

/* After the endpoint's flush, or a force close that UCX completed (tp_ucx.c:
 * force_close): a request still in progress here only gets released. */
void ucx_tx_free(ucx_ep_t *e)
{
    for (unsigned i = 0; i < UCX_TX_SLOTS; i++) {
        ucx_tx_t *t = &e->tx[i];
        if (ucx_req_test(&t->req_hdr) == UCS_INPROGRESS)
            ucp_request_free(t->req_hdr);
        if (ucx_req_test(&t->req_payload) == UCS_INPROGRESS)
            ucp_request_free(t->req_payload);
        free(t->buf);
    }
    for (int i = 0; i < UCX_STATE_SLOTS; i++)
        if (ucx_req_test(&e->st_tx[i].req) == UCS_INPROGRESS)
            ucp_request_free(e->st_tx[i].req);
    if (ucx_req_test(&e->gone_tx_req) == UCS_INPROGRESS)
        ucp_request_free(e->gone_tx_req);
}

int ucx_kept_busy(ucx_ep_t *e)
{
    int n = 0;
    for (unsigned i = e->tx_tail; i != e->tx_head; i++) {
        ucx_tx_t *t = &e->tx[i % UCX_TX_SLOTS];
        n += t->kept && ucx_req_test(&t->req_payload) == UCS_INPROGRESS;
    }
    return n;
}

/* send and send_kept: a frame over UCX_SMALL that is kept goes from where it lies. */
static weft_status_t tx_send(tp_ep_t *ep, const frame_hdr_t *hdr, const void *payload,
                             int kept)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    RETURN_IF_ERR(ucx_lost_error(e, 0));
    if (e->gone_req && ucp_request_check_status(e->gone_req) != UCS_INPROGRESS)
        ucx_states_poll(e, 0);
    if (e->gone)            /* it will read nothing more: tcp's EPIPE */
        return weft_error(WEFT_ERR_PEER_LOST, "ucx: rank %d aborted or destroyed its "
                          "communicator", ep->peer);
    RETURN_IF_ERR(tx_reap(e));
    unsigned used = e->tx_head - e->tx_tail;
    if (used == UCX_TX_SLOTS || (used > 0 && e->tx_bytes + hdr->len > e->tx_max))
        return WEFT_IN_PROGRESS;
    ucx_tx_t *t = &e->tx[e->tx_head % UCX_TX_SLOTS];
    int small = hdr->len > 0 && hdr->len <= UCX_SMALL;
    kept = kept && hdr->len > UCX_SMALL;
    size_t need = kept ? 0 : hdr->len + (small ? sizeof(*hdr) : 0);
    if (need > t->cap) {
        char *p = realloc(t->buf, need);
        if (p == NULL)
            return weft_error(WEFT_ERR_NO_MEMORY, "ucx: out of memory");
        t->buf = p;
        t->cap = need;
    }
    t->hdr = *hdr;
    t->len = hdr->len;
    t->kept = kept;
    ucs_status_t s;
    if (small) {            /* one message: header and payload */
        memcpy(t->buf, hdr, sizeof(*hdr));
        memcpy(t->buf + sizeof(*hdr), payload, hdr->len);
        s = ucx_post_send(e, t->buf, need, UCX_TAG_HDR, &t->req_hdr);
    } else {
        if (hdr->len && !kept)
            memcpy(t->buf, payload, hdr->len);
        s = ucx_post_send(e, &t->hdr, sizeof(t->hdr), UCX_TAG_HDR, &t->req_hdr);
        if (s >= 0 && hdr->len)
            s = ucx_post_send(e, kept ? payload : t->buf, hdr->len, UCX_TAG_PAYLOAD,
                              &t->req_payload);
        ep->frames_kept += kept && s >= 0;
    }
    e->tx_head++;           /* even on failure: the slot's requests are freed at close */
    __atomic_store_n(&e->frames_tx, e->frames_tx + 1, __ATOMIC_RELAXED);  /* abort reads it */
    e->tx_bytes += hdr->len;
    return s < 0 ? ucx_failed(e, s, "send to") : WEFT_OK;
}

weft_status_t ucx_send(tp_ep_t *ep, const frame_hdr_t *hdr, const void *payload)
{
    return tx_send(ep, hdr, payload, 0);
}

weft_status_t ucx_send_kept(tp_ep_t *ep, const frame_hdr_t *hdr, const void *payload)
{
    return tx_send(ep, hdr, payload, 1);
}

/* -- receives -- */

/* A header's message arrived: the header alone, or a small frame whole (its payload then
 * held here). length: its bytes, as a completed request reports them, or as a receive
 * completed at its post does from UCX 1.16 on; 0 when unknown (before 1.16 UCX leaves
 * recv_info untouched there, openucx/ucx#9425: on Debian 12's 1.13 such a header goes
 * unchecked; a message longer than the buffer fails with UCS_ERR_MESSAGE_TRUNCATED
 * either way). */
static weft_status_t hdr_arrived(ucx_ep_t *e, size_t length)
{
    const frame_hdr_t *h = &e->rx_in->hdr;
    int small = h->len > 0 && h->len <= UCX_SMALL;
    size_t want = sizeof(*h) + (small ? h->len : 0);
    if (length != 0 && length != want)
        return weft_error(WEFT_ERR_INTERNAL, "ucx: header from rank %d has %zu bytes, its "
                          "payload length says %zu", e->base.peer, length, want);
    e->rx_state = RX_ARRIVED;
    if (small) {
        e->pl_dst = e->rx_in->small;
        e->pl_state = PL_DONE;
    }
    return WEFT_OK;
}

static weft_status_t hdr_post(ucx_ep_t *e)
{
    ucp_tag_recv_info_t info;
    e->rx_state = RX_POSTED;
    e->pl_state = PL_NONE;
    ucs_status_t s = ucx_post_recv(e, e->rx_in, sizeof(*e->rx_in), UCX_TAG_HDR,
                                   &e->rx_hdr_req, &info);
    if (s < 0)
        return ucx_failed(e, s, "receive from");
    /* info.length stays the buffer's size where UCX leaves it untouched: unknown then */
    return s == UCS_OK ? hdr_arrived(e, info.length == sizeof(*e->rx_in) ? 0 : info.length)
                       : WEFT_OK;
}

/* A posted receive: WEFT_IN_PROGRESS while it runs (or the peer's loss), else frees the
 * request and checks that want bytes arrived, or (length_p) says how many (what:
 * "header" or "payload"). */
static weft_status_t recv_end(ucx_ep_t *e, void **req, size_t want, size_t *length_p,
                              const char *what)
{
    ucp_tag_recv_info_t info;
    ucs_status_t s = ucp_tag_recv_request_test(*req, &info);
    if (s == UCS_INPROGRESS) {
        weft_status_t st = ucx_lost_error(e, 0);
        return st < 0 ? st : WEFT_IN_PROGRESS;
    }
    ucp_request_free(*req);
    *req = NULL;
    if (s != UCS_OK)
        return ucx_failed(e, s, "receive from");
    if (length_p) {
        *length_p = info.length;
        return WEFT_OK;
    }
    if (info.length != want)
        return weft_error(WEFT_ERR_INTERNAL, "ucx: %s from rank %d has %zu bytes, expected "
                          "%zu", what, e->base.peer, info.length, want);
    return WEFT_OK;
}

/* Whether the header receive completed, and whether it holds a header. */
static weft_status_t hdr_test(ucx_ep_t *e)
{
    if (e->rx_state == RX_ARRIVED)
        return WEFT_OK;
    if (e->rx_hdr_req == NULL)      /* a failed post: rx_err says why */
        return e->rx_err < 0 ? e->rx_err : WEFT_IN_PROGRESS;
    size_t length = 0;
    weft_status_t st = recv_end(e, &e->rx_hdr_req, 0, &length, "header");
    return st != WEFT_OK ? st : hdr_arrived(e, length);
}

weft_status_t ucx_recv_peek(tp_ep_t *ep, const frame_hdr_t **hdr_p, const void **payload_p)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    weft_status_t st = hdr_test(e);
    if (st != WEFT_OK)
        return st;
    const frame_hdr_t *h = &e->rx_in->hdr;
    if (h->len > e->max_frame)
        return weft_error(WEFT_ERR_INTERNAL, "ucx: frame from rank %d claims %u bytes "
                          "(limit %zu)", ep->peer, h->len, e->max_frame);
    *hdr_p = h;
    *payload_p = h->len == 0 ? (const void *)h : e->pl_state == PL_DONE ? e->pl_dst : NULL;
    return WEFT_OK;
}

weft_status_t ucx_recv_payload(tp_ep_t *ep, void *dst, const void **payload_p)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    size_t len = e->rx_in->hdr.len;
    ucp_tag_recv_info_t info;
    ucs_status_t s;
    if (e->pl_state == PL_NONE) {
        if (dst == NULL) {
            if (len > e->rx_cap) {
                char *p = realloc(e->rx_buf, len);
                if (p == NULL)
                    return weft_error(WEFT_ERR_NO_MEMORY, "ucx: out of memory");
                e->rx_buf = p;
                e->rx_cap = len;
            }
            dst = e->rx_buf;
        }
        e->pl_dst = dst;
        s = ucx_post_recv(e, dst, len, UCX_TAG_PAYLOAD, &e->rx_pl_req, &info);
        if (s < 0)
            return ucx_failed(e, s, "receive from");
        e->pl_state = PL_POSTED;
        if (s == UCS_OK) {   // completed at once: no request to test
            if (info.length != len)
                return weft_error(WEFT_ERR_INTERNAL, "ucx: payload from rank %d has %zu "
                                  "bytes, expected %zu", ep->peer, info.length, len);
            e->pl_state = PL_DONE;
        }
    }
    if (e->pl_state == PL_POSTED) {
        weft_status_t st = recv_end(e, &e->rx_pl_req, len, NULL, "payload");
        if (st != WEFT_OK)
            return st;
        e->pl_state = PL_DONE;
    }
    *payload_p = e->pl_dst;
    return WEFT_OK;
}

void ucx_recv_release(tp_ep_t *ep)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    e->frames_rx++;
    weft_status_t st = hdr_post(e);
    if (st < 0)
        e->rx_err = st;
}

weft_status_t ucx_rx_start(ucx_ep_t *e)
{
    if (e->rx_in == NULL && (e->rx_in = malloc(sizeof(*e->rx_in))) == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "ucx: out of memory");
    RETURN_IF_ERR(ucx_states_start(e));
    return hdr_post(e);
}

void ucx_cancel_recv(ucx_ep_t *e, void **req)
{
    if (*req == NULL)
        return;
    ucp_request_cancel(e->x->worker, *req);
    uint64_t deadline = time_ns() + 100000000ull;
    while (ucx_req_test(req) == UCS_INPROGRESS && time_ns() < deadline)
        ucp_worker_progress(e->x->worker);
    if (*req) {
        ucp_request_free(*req);
        *req = NULL;
    }
}

void ucx_rx_stop(ucx_ep_t *e)
{
    ucx_cancel_recv(e, &e->rx_hdr_req);
    ucx_cancel_recv(e, &e->rx_pl_req);
    ucx_cancel_recv(e, &e->st_rx_req);
    ucx_cancel_recv(e, &e->gone_req);
    free(e->rx_buf);
    free(e->rx_in);
    e->rx_in = NULL;
}
