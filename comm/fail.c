/*
 * fail.c - one rank's failure becomes every rank's error, with the reason.
 *
 * A rank sees only the frames its schedule receives, so a mismatch, a lost peer or a
 * timeout is first noticed by one or two ranks. Three things spread it:
 *   - FAILED: the first failure of a communicator is posted to every peer as a
 *     tp_state_t (who saw it, what it blames, both calls); a rank that reads one fails
 *     its running call with the same cause and posts it on (relays keep the origin),
 *     unless the failure is in a later collective, which the origin reached by
 *     finishing this one: then the call goes on and the next one fails;
 *   - WAITING: a call that has waited WAIT_POST_NS posts its own description once, and
 *     every stalled rank compares the peers' posts with its call: the same sequence
 *     number with a different call is a mismatch, even when no frame ever moved (two
 *     ranks that both think they are the root of a reduce wait for each other);
 *   - abort: the transport's abort op (thread-safe) tells peers this rank gave up.
 * States are read by idle waits (engine.c: check_stalled), and once at the end of a call
 * that read peers' memory through a transport that keeps no registration (shm:
 * fail_check_read_peers), never elsewhere on the data path.
 *
 * Invariants: a communicator publishes at most one failure, the first; the message a
 * rank returns names the ranks involved and, for a mismatch, both calls.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "comm_int.h"
#include "status.h"
#include "util.h"

#define WAIT_POST_NS 50000000ull    /* a call waiting longer tells its peers what it is */
#define RMA_EXPLAIN_NS 100000000ull /* how long a failed read waits for its owner's FAILED */

static int is_coll(int coll)
{
    return coll > 0 && coll < COLL_NUM && coll != COLL_SEND && coll != COLL_RECV &&
           coll != COLL_SENDRECV;
}

static void post_all(weft_comm_t *comm, const tp_state_t *s)
{
    for (int p = 0; p < comm->nranks; p++)
        if (comm->eps[p])
            comm->eps[p]->ops->post_state(comm->eps[p], s);
}

void fail_note(weft_comm_t *comm, weft_status_t st, int other, const call_desc_t *theirs)
{
    if (comm->fail.kind != TP_STATE_NONE)
        return;
    comm->fail.kind = TP_STATE_FAILED;
    comm->fail.status = st;
    comm->fail.origin = comm->rank;
    comm->fail.other = other;
    if (theirs)
        comm->fail.other_call = *theirs;
}

void fail_publish(weft_comm_t *comm, const comm_op_t *op, weft_status_t st)
{
    if (comm->fail.kind == TP_STATE_NONE)
        fail_note(comm, st, -1, NULL);
    if (comm->fail.origin == comm->rank && op)
        engine_call_desc(op, &comm->fail.call);
    post_all(comm, &comm->fail);
}

/* Fails with what rank p reported (relaying it), in words that name the ranks. */
static weft_status_t adopt(weft_comm_t *comm, const comm_op_t *op, int p, const tp_state_t *s)
{
    char theirs[128], other[128], ours[300];
    call_desc_t mine;
    engine_call_desc(op, &mine);
    call_desc_str(&s->call, theirs, sizeof(theirs));
    call_desc_str(&mine, ours, sizeof(ours));
    /* the call the report is about may be one this rank is already past */
    const call_desc_t *about = s->status == WEFT_ERR_MISMATCH && s->other_call.seq != mine.seq
                               ? &s->other_call : &s->call;
    const fr_entry_t *past = about->seq == mine.seq || !is_coll(about->coll) ? NULL
                             : fr_find_coll(&comm->flight, about->seq);
    if (past) {     /* this rank is past (or before) that call: say what it made of it */
        call_desc_t d = past->call;
        size_t n = strlen(ours);
        snprintf(ours + n, sizeof(ours) - n, ", and its seq %u was ", d.seq);
        n = strlen(ours);
        call_desc_str(&d, ours + n, sizeof(ours) - n);
    }
    comm->fail = *s;
    switch (s->status == WEFT_ERR_MISMATCH && s->other_call.coll == 0 ? WEFT_ERR_INTERNAL
            : s->status) {  /* a mismatch with no call of the other's: a transport's */
    case WEFT_ERR_MISMATCH:
        call_desc_str(&s->other_call, other, sizeof(other));
        return weft_error(WEFT_ERR_MISMATCH, "rank %d: collective mismatch found by rank %d "
                          "(told by rank %d): rank %d called %s, but rank %d called %s; "
                          "this rank called %s", comm->rank, s->origin, p, s->other, other,
                          s->origin, theirs, ours);
    case WEFT_ERR_TIMEOUT: {
        /* and whom this rank waits for: the rank that did not come may be a third one */
        char waiting[200];
        engine_waiting(comm, waiting, sizeof(waiting));
        return weft_error(WEFT_ERR_TIMEOUT, "rank %d: rank %d timed out in %s waiting for "
                          "rank %d (told by rank %d); this rank called %s%s%s", comm->rank,
                          s->origin, theirs, s->other, p, ours,
                          waiting[0] ? ", waiting for rank(s) " : "", waiting);
    }
    case WEFT_ERR_ABORTED:
        return weft_error(WEFT_ERR_PEER_LOST, "rank %d: rank %d aborted its communicator "
                          "(told by rank %d); this rank called %s", comm->rank, s->origin, p,
                          ours);
    case WEFT_ERR_PEER_LOST:
        if (s->other >= 0)
            return weft_error(WEFT_ERR_PEER_LOST, "rank %d: rank %d is lost (seen by rank "
                              "%d in %s, told by rank %d); this rank called %s", comm->rank,
                              s->other, s->origin, theirs, p, ours);
        /* fall through */
    default:
        if (s->other >= 0 && s->other != s->origin)
            return weft_error(WEFT_ERR_PEER_LOST, "rank %d: rank %d failed (%s) with rank %d "
                              "in %s (told by rank %d; rank %d's log says why); the "
                              "communicator cannot go on; this rank called %s", comm->rank,
                              s->origin, weft_status_str(s->status), s->other, theirs, p,
                              s->origin, ours);
        return weft_error(WEFT_ERR_PEER_LOST, "rank %d: rank %d failed (%s) in %s (told by "
                          "rank %d); the communicator cannot go on; this rank called %s",
                          comm->rank, s->origin, weft_status_str(s->status), theirs, p, ours);
    }
}

weft_status_t fail_explain_lost(weft_comm_t *comm, const comm_op_t *op, int p,
                                weft_status_t st)
{
    tp_state_t s;
    if (comm->eps[p] != NULL) {
        comm->eps[p]->ops->peer_state(comm->eps[p], &s);
        if (s.kind == TP_STATE_FAILED)
            return adopt(comm, op, p, &s);
    }
    fail_note(comm, st, p, NULL);
    return st;
}

weft_status_t fail_explain_rma(weft_comm_t *comm, const comm_op_t *op, int p,
                               weft_status_t st)
{
    if (st == WEFT_ERR_PEER_LOST)
        return fail_explain_lost(comm, op, p, st);
    tp_ep_t *ep = comm->eps[p];
    uint64_t end = time_ns() + RMA_EXPLAIN_NS;
    while (ep != NULL) {
        tp_state_t s;
        ep->ops->peer_state(ep, &s);
        if (s.kind == TP_STATE_FAILED)
            return adopt(comm, op, p, &s);
        /* a peer that exited (ESRCH) or is exiting (EFAULT, then ESRCH once reaped) is
         * a lost peer, not a bad read */
        if (ep->ops->check_alive && ep->ops->check_alive(ep) == WEFT_ERR_PEER_LOST)
            return fail_explain_lost(comm, op, p, WEFT_ERR_PEER_LOST);
        if (time_ns() >= end)
            break;
        usleep(1000);
    }
    return st;
}

static int same_call(const call_desc_t *a, const call_desc_t *b)
{
    return a->coll == b->coll && a->count == b->count && a->dtype == b->dtype &&
           a->op == b->op && a->root == b->root && a->seq == b->seq;
}

/* A failure in a later collective: its origin finished this one, so every frame it
 * owes this call is sent, and the call may still complete (its payload can be on the
 * wire, a ucx rendezvous, when the news overtakes it). The next call adopts it; a call
 * that cannot complete meets its own cause (a lost peer, a timeout). */
static int past_this_call(const tp_state_t *s, const call_desc_t *mine)
{
    return is_coll(s->call.coll) && is_coll(mine->coll) &&
           (int32_t)(s->call.seq - mine->seq) > 0;
}

weft_status_t fail_check_read_peers(weft_comm_t *comm, const comm_op_t *op)
{
    const sched_t *s = op->sched;
    call_desc_t mine;
    engine_call_desc(op, &mine);
    int last = -1;      /* a peer's reads are mostly consecutive steps: asked once */
    /* the data our reads (or mapped loads) saw is older than the state read below */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    for (int i = 0; i < s->nsteps; i++) {
        const sched_step_t *x = &s->steps[i];
        int p = x->peer;
        /* only transports whose gets complete at once keep nothing registered (shm);
         * elsewhere a peer's deregistration fails our reads (ucx, ib: rma_end) */
        if ((x->kind != STEP_RGET && x->kind != STEP_RGET_REDUCE) || p == last ||
            p < 0 || p >= comm->nranks || comm->eps[p] == NULL ||
            !comm->eps[p]->ops->get_blocks)
            continue;
        last = p;
        tp_state_t st;
        comm->eps[p]->ops->peer_state(comm->eps[p], &st);      /* a few loads on shm */
        /* a failure about a point-to-point call came after this collective there (its
         * META for this one was sent first): our reads were over */
        if (st.kind == TP_STATE_FAILED && is_coll(st.call.coll) &&
            !past_this_call(&st, &mine))
            return adopt(comm, op, p, &st);
    }
    return WEFT_OK;
}

weft_status_t fail_probe(weft_comm_t *comm, comm_op_t *op)
{
    call_desc_t mine;
    engine_call_desc(op, &mine);
    if (!op->posted_wait && !__atomic_load_n(&comm->hold_state, __ATOMIC_RELAXED) &&
        time_ns() - op->t_start > WAIT_POST_NS) {
        tp_state_t s = { .kind = TP_STATE_WAITING, .origin = comm->rank, .other = -1,
                         .call = mine };
        post_all(comm, &s);
        op->posted_wait = 1;
    }
    for (int p = 0; p < comm->nranks; p++) {
        if (comm->eps[p] == NULL)
            continue;
        tp_state_t s;
        weft_status_t st = comm->eps[p]->ops->peer_state(comm->eps[p], &s);
        if (s.kind == TP_STATE_FAILED && !past_this_call(&s, &mine))
            return adopt(comm, op, p, &s);
        /* a closed connection matters only to a call that still needs that peer: one
         * that has finished its part and destroyed its communicator closes it too */
        if (st < 0 && (comm->cursor[2 * p] >= 0 || comm->cursor[2 * p + 1] >= 0)) {
            st = weft_error(st, "%s", weft_last_error());   /* peer_state did not log it */
            fail_note(comm, st, p, NULL);
            return st;
        }
        if (s.kind == TP_STATE_WAITING && is_coll(mine.coll) && is_coll(s.call.coll) &&
            s.call.seq == mine.seq && !same_call(&s.call, &mine)) {
            char theirs[128], ours[128];
            fail_note(comm, WEFT_ERR_MISMATCH, p, &s.call);
            return weft_error(WEFT_ERR_MISMATCH, "rank %d: collective mismatch: rank %d "
                              "called %s, but this rank called %s", comm->rank, p,
                              call_desc_str(&s.call, theirs, sizeof(theirs)),
                              call_desc_str(&mine, ours, sizeof(ours)));
        }
    }
    return WEFT_OK;
}

/* weft_comm_abort and destroy: peers see this rank go (any thread may call it). */
void fail_abort_peers(weft_comm_t *comm)
{
    for (int p = 0; comm->eps && p < comm->nranks; p++)
        if (comm->eps[p])
            comm->eps[p]->ops->abort(comm->eps[p]);
}
