/*
 * ucx_state.c - the UCX transport's peer states (comm/fail.c) and goodbyes.
 *
 * Both travel as tagged messages of their own kind (UCX_TAG_STATE, UCX_TAG_GONE), with
 * one receive of each kept posted per peer. Each carries the number of data frames its
 * sender had sent to us before it, and takes effect only once this rank has read that
 * many: the order a tcp stream gives. It matters because a frame's payload may still be
 * on its way (a rendezvous) when a later state arrives: a rank still reading the last
 * frames of call 2 from a peer that has already failed call 3 must finish call 2 first,
 * as on shm and tcp, instead of failing it with call 3's news. States that arrived
 * early wait in a small queue (the oldest is dropped when it is full: a newer one
 * supersedes it anyway); a lost peer's waiting states are all taken at once.
 *
 * A goodbye (abort, or the first close of the communicator) tells the peer that no
 * frame will follow the ones it counts; the peer then fails only a call that waits for
 * more (tp_ucx.c: peer_down).
 *
 * Invariants: a state's or goodbye's send buffer stays untouched until its request
 * completed; post_state never blocks and never sets the last error; abort may run on
 * any thread (the worker is UCS_THREAD_MODE_MULTI) and sends at most one goodbye.
 */
#include <string.h>

#include "ucx_int.h"
#include "check.h"
#include "status.h"
#include "util.h"

/* Takes a state that arrived: seen now or queued behind its frames. */
static void state_arrived(ucx_ep_t *e, size_t len)
{
    if (len != sizeof(e->st_rx_buf))
        return;
    if (e->st_wait_head - e->st_wait_tail == UCX_STATE_WAIT)
        e->st_wait_tail++;
    e->st_wait[e->st_wait_head++ % UCX_STATE_WAIT] = e->st_rx_buf;
}

/* Posts the next state receive, taking those already waiting in UCX on the way. */
static void state_post_recv(ucx_ep_t *e)
{
    ucp_tag_recv_info_t info;
    for (;;) {
        ucs_status_t s = ucx_post_recv(e, &e->st_rx_buf, sizeof(e->st_rx_buf), UCX_TAG_STATE,
                                       &e->st_rx_req, &info);
        if (s != UCS_OK)        /* posted, or failed: the data path reports failures */
            return;
        state_arrived(e, info.length);
    }
}

weft_status_t ucx_states_start(ucx_ep_t *e)
{
    ucp_tag_recv_info_t info;
    state_post_recv(e);
    ucs_status_t s = ucx_post_recv(e, &e->gone_rx_buf, sizeof(e->gone_rx_buf), UCX_TAG_GONE,
                                   &e->gone_req, &info);
    if (s < 0)
        return ucx_failed(e, s, "receive from");
    if (s == UCS_OK) {
        e->gone = 1;
        e->gone_frames = e->gone_rx_buf;
    }
    return WEFT_OK;
}

void ucx_states_poll(ucx_ep_t *e, int all)
{
    ucp_tag_recv_info_t info;
    while (e->st_rx_req) {
        ucs_status_t s = ucp_tag_recv_request_test(e->st_rx_req, &info);
        if (s == UCS_INPROGRESS)
            break;
        ucp_request_free(e->st_rx_req);
        e->st_rx_req = NULL;
        if (s != UCS_OK)
            break;
        state_arrived(e, info.length);
        state_post_recv(e);
    }
    while (e->st_wait_tail != e->st_wait_head) {
        const ucx_state_msg_t *m = &e->st_wait[e->st_wait_tail % UCX_STATE_WAIT];
        if (!all && m->frames > e->frames_rx)
            break;
        e->st_rx = m->s;
        e->st_wait_tail++;
    }
    if (e->gone_req && ucx_req_test(&e->gone_req) == UCS_OK) {
        e->gone = 1;
        e->gone_frames = e->gone_rx_buf;
    }
}

/* Best effort: a state that finds every slot busy (a peer that takes nothing) is
 * dropped. A FAILED state is this rank's last word: the failing call will likely be
 * followed by an exit, which would take along the frames peers have not fetched yet
 * (a rendezvous reads them from our memory; shm and tcp leave them with the receiver),
 * and a peer still in an earlier call needs them. So it waits, DRAIN_FAILED_S at most,
 * until they are taken: the one blocking post, once per communicator. Frames sent from
 * the call's own buffers (send_kept) that a peer has still not taken then are given up
 * with their endpoint (ucx_withdraw_kept): the caller may free those buffers once the
 * call returns, and a peer must not get bytes written after it. Likewise a payload
 * receive posted into the caller's buffer that has not completed by then is cancelled,
 * or its endpoint closed where UCX already matched it (ucx_withdraw_posted): nothing
 * lands in the caller's memory after the call. */
#define DRAIN_FAILED_S 0.5

/* Drains once every endpoint has the FAILED post (fail.c posts to all in a row), so no
 * peer hears of the failure late because another one was slow to take its frames. */
static void drain_after_failed(ucx_ep_t *e)
{
    ucx_ctx_t *x = e->x;
    e->failed_posted = 1;
    for (int p = 0; p < x->nranks; p++)
        if (x->eps[p] && !x->eps[p]->failed_posted)
            return;
    uint64_t end = time_ns() + (uint64_t)(DRAIN_FAILED_S * 1e9);
    for (int p = 0; p < x->nranks; p++) {
        uint64_t now = time_ns();
        if (x->eps[p] && now < end)
            ucx_drain(x->eps[p], (double)(end - now) * 1e-9);
    }
    for (int p = 0; p < x->nranks; p++)
        if (x->eps[p]) {
            ucx_withdraw_posted(x->eps[p], end);
            ucx_withdraw_kept(x->eps[p]);
        }
}
/* A lost peer gets nothing, but its endpoint still counts as posted for the drain: the
 * usual failure is a lost peer, and the survivors must hear of it before this rank
 * exits (else one that was waiting on this rank reports it, not the lost one, as the
 * cause). */
void ucx_post_state(tp_ep_t *ep, const tp_state_t *s)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    if (!__atomic_load_n(&e->lost, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < UCX_STATE_SLOTS; i++) {
            if (ucx_req_test(&e->st_tx[i].req) == UCS_INPROGRESS)
                continue;
            e->st_tx[i].m = (ucx_state_msg_t){ .s = *s, .frames = e->frames_tx };
            ucx_post_send(e, &e->st_tx[i].m, sizeof(e->st_tx[i].m), UCX_TAG_STATE,
                          &e->st_tx[i].req);
            break;
        }
    }
    if (s->kind == TP_STATE_FAILED)
        drain_after_failed(e);
}

/* A nudge of the worker follows, so that the goodbye leaves even if this rank makes no
 * further call (another thread may be computing while this one aborts). */
void ucx_abort(tp_ep_t *ep)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    /* abort_busy, then lost (both sequentially consistent): ucx_withdraw_kept sets lost,
     * then waits for abort_busy to drop, so that it closes no endpoint in use here */
    __atomic_add_fetch(&e->abort_busy, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_exchange_n(&e->aborted, 1, __ATOMIC_SEQ_CST) &&
        !__atomic_load_n(&e->lost, __ATOMIC_SEQ_CST)) {
        e->gone_tx_buf = __atomic_load_n(&e->frames_tx, __ATOMIC_RELAXED);
        ucx_post_send(e, &e->gone_tx_buf, sizeof(e->gone_tx_buf), UCX_TAG_GONE,
                      &e->gone_tx_req);
        ucp_worker_progress(e->x->worker);
    }
    __atomic_sub_fetch(&e->abort_busy, 1, __ATOMIC_SEQ_CST);
}
