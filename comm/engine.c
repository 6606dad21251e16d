/*
 * engine.c - runs schedules over the transports: the only code that sees both.
 *
 * One pass visits every peer's send queue and receive queue and the local steps, and
 * moves whatever can move without blocking; a blocking call repeats passes on the
 * caller's thread (spinning WEFT_SPIN idle passes, then yielding the core each pass)
 * until its operation completes, fails, times out or the communicator is aborted.
 * Yielding, not sleeping: a futex doorbell (tried) made 4 ranks on 2 cores 5-9x slower
 * for small messages here, the wake-up of a sleeping vCPU costing ~70 us.
 *
 * Invariants:
 *   - every received header is checked against the running operation before its
 *     payload is touched (frame.h); a wrong length never reaches memcpy;
 *   - a send that the transport did not take whole is retried with the same frame
 *     (same header, same length) until taken;
 *   - per-step state lives in the communicator: only the queue head runs;
 *   - every function here runs with comm->lock held (on the user's thread or the progress
 *     thread, progress.c); an op's status is stored last, with release, and the engine
 *     never touches the op after it: a request may be freed as soon as that store shows.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_int.h"
#include "check.h"
#include "status.h"
#include "util.h"

static weft_status_t ensure_state(weft_comm_t *comm, const sched_t *s)
{
    if (s->tmp_bytes > comm->tmp_cap) {
        void *p = NULL;
        if (posix_memalign(&p, 64, s->tmp_bytes) != 0)
            return weft_error(WEFT_ERR_NO_MEMORY, "engine: cannot allocate %zu bytes of "
                              "scratch", s->tmp_bytes);
        free(comm->tmp);
        comm->tmp = p;
        comm->tmp_cap = s->tmp_bytes;
    }
    if (s->nsteps > comm->st_cap) {
        step_state_t *p = realloc(comm->st, (size_t)s->nsteps * sizeof(*p));
        if (p == NULL)
            return weft_error(WEFT_ERR_NO_MEMORY, "engine: out of memory");
        comm->st = p;
        comm->st_cap = s->nsteps;
    }
    return WEFT_OK;
}

/* Points the per-step state at op's schedule, from its first step. The cursors of the
 * peers outside it are -1 already: every queue of the op before (or of a probe schedule
 * before this one) ended at -1, and finish_head puts a failed op's back (an op that
 * failed failed its communicator, so none runs after it anyway). Only the schedule's peers are visited, here and in every pass: a small
 * call on a communicator of thousands of ranks touches the few it talks to. */
static weft_status_t begin_schedule(weft_comm_t *comm, comm_op_t *op)
{
    const sched_t *s = op->sched;
    RETURN_IF_ERR(ensure_state(comm, s));
    if (s->nsteps)
        memset(comm->st, 0, (size_t)s->nsteps * sizeof(step_state_t));
    for (int k = 0; k < s->npeers; k++) {
        int p = s->peers[k];
        comm->cursor[2 * p] = s->head_send[p];
        comm->cursor[2 * p + 1] = s->head_recv[p];
    }
    comm->local_cursor = 0;
    comm->ncomplete = 0;
    return WEFT_OK;
}

weft_status_t engine_start(weft_comm_t *comm, comm_op_t *op)
{
    RETURN_IF_ERR(tuner_schedule(comm, op));
    RETURN_IF_ERR(begin_schedule(comm, op));
    /* (a probe schedule reaches every peer, so the one after it, whose frame numbers
     * carry on, has none that were not reset here) */
    for (int k = 0; k < op->sched->npeers; k++)
        comm->frame_tx[op->sched->peers[k]] = comm->frame_rx[op->sched->peers[k]] = 0;
    op->mops = mem_ops_for(WEFT_MAX(op->send_mt, op->recv_mt));
    if (!op->mops->usable)
        return weft_error(WEFT_ERR_UNSUPPORTED, "rank %d: %s on %s memory: this build of "
                          "weft copies and reduces host memory only", comm->rank,
                          coll_name(op->args.coll), op->mops->name);
    comm->meta_out.send = (uint64_t)(uintptr_t)op->send;
    comm->meta_out.recv = (uint64_t)(uintptr_t)op->recv;
    if (op->sched->meta)            /* peers will read these one-sidedly */
        RETURN_IF_ERR(rma_begin(comm, op));
    op->started = 1;
    op->t_start = op->t_queued ? op->t_queued : time_ns_coarse();
    fr_started(&comm->flight, op->fr_id, op->sched->algo, op->t_start);
    return WEFT_OK;
}

static int deps_met(const weft_comm_t *comm, const sched_t *s, int i)
{
    const sched_step_t *st = &s->steps[i];
    if (st->dep >= 0 && !comm->st[st->dep].complete)
        return 0;
    if (st->after_all)
        for (int j = 0; j < i; j++)
            if (!comm->st[j].complete)
                return 0;
    return 1;
}

static void complete_step(weft_comm_t *comm, int i)
{
    comm->st[i].complete = 1;
    comm->ncomplete++;
}

static void fill_header(const weft_comm_t *comm, const comm_op_t *op, int peer,
                        unsigned channel, size_t len, frame_hdr_t *h)
{
    const sched_args_t *a = &op->args;
    h->magic = FRAME_MAGIC;
    h->version = FRAME_VERSION;
    h->coll = (uint8_t)(a->coll == COLL_SENDRECV ? COLL_SEND : a->coll);
    h->dtype = (uint8_t)a->dtype;
    h->op = (uint8_t)a->op;
    h->comm_id = comm->id32;
    h->seq = op->seq;
    h->root = a->root;
    h->count = a->count;
    if (a->coll == COLL_SEND || a->coll == COLL_SENDRECV) {
        h->seq = op->seq_tx;
        h->root = -1;          /* the receiver names us as its source, not itself */
    }
    h->frame = frame_word(comm->frame_tx[peer], channel);
    h->len = (uint32_t)len;
    h->src_rank = (uint32_t)comm->rank;
}

/* Whether the op's buffer `buf` is host memory (the scratch always is). */
static int buf_on_host(const comm_op_t *op, int buf)
{
    return buf == BUF_TMP || (buf == BUF_RECV && op->recv_mt == MEM_HOST) ||
           (buf == BUF_SEND && op->send_mt == MEM_HOST);
}

/* Pushes frames of send step i until done, blocked, or the stream source runs dry. */
static weft_status_t progress_send(weft_comm_t *comm, comm_op_t *op, int i, int *moved)
{
    const sched_t *s = op->sched;
    const sched_step_t *st = &s->steps[i];
    step_state_t *ss = &comm->st[i];
    tp_ep_t *ep = comm->eps[st->peer];
    const char *src = engine_buf(comm, op, st->src_buf) + st->src_off;
    /* bytes no step writes until the call ends (and its flush): the transport may read
     * them where they are (transport.h, send_kept) */
    weft_status_t (*send)(tp_ep_t *, const frame_hdr_t *, const void *) =
        st->keep && ep->ops->send_kept && buf_on_host(op, st->src_buf) ? ep->ops->send_kept
                                                                       : ep->ops->send;
    for (;;) {
        size_t avail = st->stream >= 0 ? comm->st[st->stream].done : st->len;
        if (ss->done == st->len && ss->frames > 0)
            return WEFT_OK;
        size_t n = ss->inflight ? ss->inflight_len : WEFT_MIN(s->chunk, avail - ss->done);
        if (n == 0 && st->len != 0)
            return WEFT_IN_PROGRESS;             /* waiting for the stream source */
        frame_hdr_t h;
        fill_header(comm, op, st->peer, st->channel, n, &h);
        weft_status_t rc = send(ep, &h, src + ss->done);
        if (rc == WEFT_IN_PROGRESS) {
            ss->inflight = 1;
            ss->inflight_len = n;
            return rc;
        }
        if (rc < 0)
            return rc;
        ss->inflight = 0;
        ep->bytes_tx += sizeof(h) + n;
        comm->frame_tx[st->peer]++;
        ss->done += n;
        ss->frames++;
        *moved = 1;
    }
}

/* Fills d with this rank's call as frames and peer states describe it. */
void engine_call_desc(const comm_op_t *op, call_desc_t *d)
{
    const sched_args_t *a = &op->args;
    memset(d, 0, sizeof(*d));
    d->count = a->count;
    /* point-to-point: its number among the calls to (from) that peer; every comparison
     * of seq across calls is between collectives (comm/fail.c: is_coll) */
    d->seq = a->coll == COLL_RECV ? op->seq_rx
             : a->coll == COLL_SEND || a->coll == COLL_SENDRECV ? op->seq_tx : op->seq;
    d->root = a->root;
    d->coll = (uint8_t)a->coll;
    d->dtype = (uint8_t)a->dtype;
    d->op = (uint8_t)a->op;
}

/* Checks a received header against what step i of op expects from its peer. */
static weft_status_t check_header(weft_comm_t *comm, const comm_op_t *op, int i,
                                  const frame_hdr_t *h)
{
    const sched_args_t *a = &op->args;
    const sched_step_t *st = &op->sched->steps[i];
    frame_expect_t e = {
        .comm_id = comm->id32, .peer = (uint32_t)st->peer,
        .p2p = a->coll == COLL_RECV || a->coll == COLL_SENDRECV,
        .frame = comm->frame_rx[st->peer], .channel = st->channel,
        .room = st->len - comm->st[i].done,
        .esz = (uint32_t)weft_dtype_size(a->dtype),
    };
    engine_call_desc(op, &e.call);
    if (e.p2p) {   /* the receive: its count, number and source */
        e.call.count = a->coll == COLL_SENDRECV ? a->count2 : a->count;
        e.call.seq = op->seq_rx;
        e.call.root = a->coll == COLL_SENDRECV ? a->peer2 : a->root;
    }
    char why[400];
    frame_verdict_t v = frame_check(h, &e, why, sizeof(why));
    if (v == FRAME_OK)
        return WEFT_OK;
    if (v == FRAME_MISMATCH) {
        call_desc_t theirs;
        call_desc_of_hdr(h, &theirs);
        fail_note(comm, WEFT_ERR_MISMATCH, st->peer, &theirs);
        /* A frame left over from an earlier call: say what this rank made of that call
         * (two ranks that both took themselves for a broadcast's root end up here). */
        if (!e.p2p && h->seq > e.call.seq)
            return weft_error(WEFT_ERR_MISMATCH, "rank %d: %s; rank %d has completed seq "
                              "%u as some other call", comm->rank, why, st->peer, e.call.seq);
        const fr_entry_t *past = e.p2p || h->seq == e.call.seq ? NULL
                                 : fr_find_coll(&comm->flight, h->seq);
        if (past) {
            char pd[128];
            return weft_error(WEFT_ERR_MISMATCH, "rank %d: %s; this rank's seq %u was %s",
                              comm->rank, why, h->seq, call_desc_str(&past->call, pd, sizeof(pd)));
        }
        return weft_error(WEFT_ERR_MISMATCH, "rank %d: %s", comm->rank, why);
    }
    return weft_error(WEFT_ERR_INTERNAL, "rank %d: %s", comm->rank, why);
}

static weft_status_t progress_recv(weft_comm_t *comm, comm_op_t *op, int i, int *moved)
{
    const sched_step_t *st = &op->sched->steps[i];
    step_state_t *ss = &comm->st[i];
    tp_ep_t *ep = comm->eps[st->peer];
    const sched_args_t *a = &op->args;
    size_t esz = weft_dtype_size(a->dtype);
    /* a plain receive into host memory that may be written now (in place: once the
     * bytes it overwrites are sent) can be posted to the peer (transport.h) */
    int postable = ep->ops->recv_post && st->kind == STEP_RECV && st->len > 0 &&
                   buf_on_host(op, st->dst_buf) &&
                   (st->stream < 0 || comm->st[st->stream].done == st->len);
    while (!(ss->done == st->len && ss->frames > 0)) {
        const frame_hdr_t *h;
        const void *payload;
        weft_status_t rc = ep->ops->recv_peek(ep, &h, &payload);
        if (rc == WEFT_IN_PROGRESS && postable && ss->done < st->len)  /* about to wait */
            ep->ops->recv_post(ep, engine_buf(comm, op, st->dst_buf) + st->dst_off + ss->done,
                               st->len - ss->done);
        if (rc != WEFT_OK)
            return rc;
        RETURN_IF_ERR(check_header(comm, op, i, h));
        if (st->stream >= 0 && comm->st[st->stream].done < ss->done + h->len)
            return WEFT_IN_PROGRESS;            /* its bytes are not sent yet (in place) */
        char *dst = engine_buf(comm, op, st->dst_buf) + st->dst_off + ss->done;
        if (payload == NULL) {      /* still on the wire: land it, at dst if we can */
            rc = ep->ops->recv_payload(ep, st->kind == STEP_RECV ? dst : NULL, &payload);
            if (rc != WEFT_OK)
                return rc;
        }
        if (st->kind == STEP_RECV) {
            if (h->len && payload != dst)
                RETURN_IF_ERR(op->mops->copy(dst, payload, h->len, st->nt));
        } else {
            const char *src = engine_buf(comm, op, st->src_buf) + st->src_off + ss->done;
            const void *x = st->swap ? payload : src, *y = st->swap ? src : payload;
            int div = st->final ? comm->nranks : 0;
            /* in place, the lines were just read: cached, plain stores */
            RETURN_IF_ERR(op->mops->reduce(dst, x, y, h->len / esz, a->dtype, a->op, div,
                                           st->nt && dst != src));
        }
        ss->done += h->len;
        ss->frames++;
        ep->bytes_rx += sizeof(*h) + h->len;
        comm->frame_rx[st->peer]++;
        ep->ops->recv_release(ep);
        *moved = 1;
    }
    return WEFT_OK;
}

/* Whether a call's buffers, as a META frame describes them, are registered memory. */
static int meta_registered(int coll, const sched_meta_t *m)
{
    switch (coll) {
    case COLL_REDUCE_SCATTER:
    case COLL_ALLGATHER:
        return (m->registered & META_SEND_REG) != 0;    /* peers read the send buffer only */
    default:
        return (m->registered & (META_SEND_REG | META_RECV_REG)) ==
               (META_SEND_REG | META_RECV_REG);
    }
}

/* A probe schedule is done: every rank's addresses are in. The tuner says from them
 * whether the call goes on single-copy through mappings or as it would have run else.
 * Every rank saw the same frames, so every rank picks the same schedule; frame numbers
 * carry on. */
static weft_status_t continue_after_probe(weft_comm_t *comm, comm_op_t *op)
{
    int all = meta_registered(op->args.coll, &comm->meta_out);
    int any_inplace = op->args.inplace;
    for (int p = 0; p < comm->nranks; p++)
        if (p != comm->rank) {
            all = all && meta_registered(op->args.coll, &comm->meta_in[p]);
            any_inplace |= comm->meta_in[p].inplace != 0;
        }
    op->args.reg = tuner_after_probe(comm, &op->args, all, any_inplace);
    op->probed = 1;
    RETURN_IF_ERR(tuner_schedule(comm, op));
    RETURN_IF_ERR(begin_schedule(comm, op));
    fr_started(&comm->flight, op->fr_id, op->sched->algo, op->t_start);
    return WEFT_IN_PROGRESS;
}

/* A local step: a copy, a fold, or a one-sided read (engine_rma.c), which may take
 * several passes (WEFT_IN_PROGRESS). */
static weft_status_t run_local(weft_comm_t *comm, comm_op_t *op, int i, int *moved)
{
    const sched_step_t *st = &op->sched->steps[i];
    const sched_args_t *a = &op->args;
    const mem_ops_t *mo = op->mops;
    size_t esz = weft_dtype_size(a->dtype);
    if (st->kind == STEP_RGET || st->kind == STEP_RGET_REDUCE) {
        weft_status_t rc = rma_step(comm, op, st, &comm->st[i], moved);
        return rc < 0 ? fail_explain_rma(comm, op, st->peer, rc) : rc;
    }
    char *dst = engine_buf(comm, op, st->dst_buf) + st->dst_off;
    const char *src = engine_buf(comm, op, st->src_buf) + st->src_off;
    int div = st->final && a->op == WEFT_AVG ? comm->nranks : 0;
    if (st->kind == STEP_COPY || st->nslots == 1) {
        if (st->kind == STEP_FOLD && div)
            return mo->divide(dst, src, st->len / esz, a->dtype, div);
        if (dst != src && st->len)
            return mo->copy(dst, src, st->len, st->nt && (dst + st->len <= src ||
                                                          src + st->len <= dst));
        return WEFT_OK;
    }
    size_t n = st->len / esz;
    for (int k = 1; k < st->nslots; k++) {
        const char *acc = k == 1 ? src : dst;
        RETURN_IF_ERR(mo->reduce(dst, acc, src + (size_t)k * st->slot_stride, n, a->dtype,
                                 a->op, k == st->nslots - 1 ? div : 0, 0));
    }
    return WEFT_OK;
}

/* Runs the queue of one direction of one peer as far as it goes. */
static weft_status_t progress_queue(weft_comm_t *comm, comm_op_t *op, int *cursor, int send,
                                    int *moved)
{
    const sched_t *s = op->sched;
    while (*cursor >= 0) {
        int i = *cursor;
        if (!deps_met(comm, s, i))
            return WEFT_OK;
        weft_status_t rc = send ? progress_send(comm, op, i, moved)
                                : progress_recv(comm, op, i, moved);
        if (rc == WEFT_IN_PROGRESS)
            return WEFT_OK;
        if (rc < 0)
            return rc;
        complete_step(comm, i);
        *cursor = s->next_same[i];
        *moved = 1;
    }
    return WEFT_OK;
}

weft_status_t engine_progress(weft_comm_t *comm, comm_op_t *op, int *moved_p)
{
    const sched_t *s = op->sched;
    int moved = 0;
    for (int i = 0; i < comm->nprogress; i++)   /* contexts with work of their own */
        RETURN_IF_ERR(comm->progress_tps[i]->progress(comm));
    for (int k = 0; k < s->npeers; k++) {
        int p = s->peers[k];
        weft_status_t rc = WEFT_OK;
        if (comm->cursor[2 * p] >= 0)
            rc = progress_queue(comm, op, &comm->cursor[2 * p], 1, &moved);
        if (rc == WEFT_OK && comm->cursor[2 * p + 1] >= 0)
            rc = progress_queue(comm, op, &comm->cursor[2 * p + 1], 0, &moved);
        if (rc == WEFT_ERR_PEER_LOST)
            return fail_explain_lost(comm, op, p, rc);
        if (rc < 0) {   /* a frame or a link to rank p went wrong: say which peer */
            fail_note(comm, rc, p, NULL);
            return rc;
        }
    }
    while (comm->local_cursor < s->nlocals) {
        int i = s->locals[comm->local_cursor];
        if (!deps_met(comm, s, i))
            break;
        weft_status_t rc = run_local(comm, op, i, &moved);
        if (rc == WEFT_IN_PROGRESS)
            break;
        RETURN_IF_ERR(rc);
        complete_step(comm, i);
        comm->local_cursor++;
        moved = 1;
    }
    *moved_p = moved;
    if (comm->ncomplete == s->nsteps && s->probe) {
        *moved_p = 1;
        return continue_after_probe(comm, op);
    }
    if (comm->ncomplete < s->nsteps)
        return WEFT_IN_PROGRESS;
    return s->meta ? fail_check_read_peers(comm, op) : WEFT_OK;
}

/* What the head op waits on peer p for: 2 a receive, 1 a send the peer has not taken, 0
 * neither (no step with it, or only steps that wait for earlier steps of this rank: a
 * root's root-check frame, say, which goes once everything else is done). */
static int waits_on(const weft_comm_t *comm, int p)
{
    const sched_t *s = comm->q_head ? comm->q_head->sched : NULL;
    int tx = comm->cursor[2 * p], rx = comm->cursor[2 * p + 1];
    if (rx >= 0 && (s == NULL || deps_met(comm, s, rx)))
        return 2;
    if (tx >= 0 && (s == NULL || deps_met(comm, s, tx)))
        return 1;
    return 0;
}

void engine_waiting(const weft_comm_t *comm, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    int draining = comm->q_head && comm->q_head->draining, any = 0;
    for (int p = 0; p < comm->nranks; p++)
        any |= waits_on(comm, p) > 0;
    for (int p = 0; p < comm->nranks && n + 16 < cap; p++) {
        int tx = comm->cursor[2 * p], rx = comm->cursor[2 * p + 1];
        int w = any ? waits_on(comm, p) : rx >= 0 ? 2 : tx >= 0 ? 1 : 0;
        tp_ep_t *ep = comm->eps[p];
        if (draining && ep && ep->ops->flush && ep->ops->flush(ep) == WEFT_IN_PROGRESS)
            n += (size_t)snprintf(buf + n, cap - n, "%s%d(to take our sends)", n ? "," : "",
                                  p);
        else if (!draining && comm->rma.n > 0 && comm->rma.peer == p)
            n += (size_t)snprintf(buf + n, cap - n, "%s%d(one-sided read)", n ? "," : "", p);
        else if (!draining && w > 0)
            n += (size_t)snprintf(buf + n, cap - n, "%s%d(%s)", n ? "," : "", p,
                                  w == 2 ? "recv" : "send");
    }
}

static weft_status_t timeout_error(weft_comm_t *comm, comm_op_t *op)
{
    char waiting[512];
    engine_waiting(comm, waiting, sizeof(waiting));
    /* the peer blamed: the first this rank waits to receive from, else to take a send,
     * else any with a step left (before 2026-11-27 the lowest with any step left: a
     * 3-rank reduce's root named rank 1, whose root-check frame it had not yet sent,
     * when rank 2 had not come) */
    int blame = -1;
    for (int want = 2; want > 0 && blame < 0; want--)
        for (int p = 0; p < comm->nranks && blame < 0; p++)
            if (waits_on(comm, p) == want)
                blame = p;
    for (int p = 0; p < comm->nranks && blame < 0; p++)
        if (comm->cursor[2 * p] >= 0 || comm->cursor[2 * p + 1] >= 0)
            blame = p;
    if (blame >= 0)
        fail_note(comm, WEFT_ERR_TIMEOUT, blame, NULL);
    int c = op->args.coll, p2p = c == COLL_SEND || c == COLL_RECV || c == COLL_SENDRECV;
    call_desc_t d;
    engine_call_desc(op, &d);
    return weft_error(WEFT_ERR_TIMEOUT, "rank %d: %s %s%u (count %zu, %s) timed out after "
                      "%.1f s (WEFT_TIMEOUT) waiting for rank(s) %s", comm->rank,
                      coll_name(c), p2p ? "#" : "seq ", d.seq, op->args.count,
                      weft_dtype_name(op->args.dtype), comm->cfg.timeout_s,
                      waiting[0] ? waiting : "?");
}

static void finish_head(weft_comm_t *comm, weft_status_t st)
{
    comm_op_t *op = comm->q_head;
    if (st < 0 && st != WEFT_ERR_ABORTED && comm_is_aborted(comm))   /* our own echo */
        st = weft_error(WEFT_ERR_ABORTED, "rank %d: communicator aborted", comm->rank);
    if (st < 0 && comm->error == WEFT_OK) {
        /* frames of a failed op may be in flight: the comm is done, and says so */
        snprintf(comm->error_msg, sizeof(comm->error_msg), "%s", weft_last_error());
        __atomic_store_n(&comm->error, st, __ATOMIC_RELEASE);
        fail_publish(comm, op, st);
        /* the posted state before any store the caller then makes to its buffers: a
         * release store does not keep later stores behind it, and on a weakly ordered
         * CPU (AArch64) a peer reading them in place could see the new bytes and the old
         * state (fail_check_read_peers' acquire fence is the other half) */
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    }
    /* Only then are the buffers peers may still reach taken back: a peer's read or write
     * that then fails (ib: a remote access error, which breaks the connection both ways)
     * finds the reason already posted, where before the post could no longer get through
     * (test_faults.sh ib single copy: a survivor reported "remote access error" instead
     * of the lost rank in about 1 trial in 50). */
    rma_end(comm);      /* the op's transfers, keys and registrations, if any */
    if (st < 0)         /* receive buffers posted to peers (transport.h, recv_post) */
        for (int p = 0; p < comm->nranks; p++)
            if (comm->eps[p] && comm->eps[p]->ops->recv_post)
                comm->eps[p]->ops->recv_post(comm->eps[p], NULL, 0);
    if (st < 0)         /* then nothing reaches the caller's memory (transport.h, fail_end) */
        for (int p = 0; p < comm->nranks; p++)
            if (comm->eps[p] && comm->eps[p]->ops->fail_end)
                comm->eps[p]->ops->fail_end(comm->eps[p]);
    if (st < 0 && op->sched)    /* (no op runs after a failure; the cursors' invariant
                                   holds all the same: begin_schedule) */
        for (int k = 0; k < op->sched->npeers; k++)
            comm->cursor[2 * op->sched->peers[k]] = comm->cursor[2 * op->sched->peers[k] + 1] = -1;
    comm->q_head = op->next;
    if (comm->q_head == NULL)
        comm->q_tail = NULL;
    op->next = NULL;
    fr_finished(&comm->flight, op->fr_id, st);
    if (st < 0 && op->error_msg)
        snprintf(op->error_msg, sizeof(((weft_request_t *)0)->error_msg), "%s",
                 weft_last_error());
    __atomic_store_n(&op->status, st, __ATOMIC_RELEASE);   /* the last touch of op */
    if (st == WEFT_ERR_TIMEOUT || st == WEFT_ERR_PEER_LOST)
        fr_dump(&comm->flight, stderr, comm->rank, comm->nranks, comm->id32,
                weft_last_error());
}

/* One pass on the head; returns what the head did (done, in progress, error). */
/* An operation whose steps are done ends once every endpoint's sends are complete
 * (transport.h, flush); until then its rank keeps progressing the transports. */
static weft_status_t drain(weft_comm_t *comm)
{
    /* its frames went to its schedule's peers only; a probed op's to every peer */
    const sched_t *s = comm->q_head->sched;
    int all = comm->q_head->probed, n = all ? comm->nranks : s->npeers;
    for (int i = 0; i < comm->nprogress; i++)
        RETURN_IF_ERR(comm->progress_tps[i]->progress(comm));
    for (int k = 0; k < n; k++) {
        int p = all ? k : s->peers[k];
        tp_ep_t *ep = comm->eps[p];
        if (ep && ep->ops->flush) {
            weft_status_t st = ep->ops->flush(ep);
            if (st != WEFT_OK)
                return st == WEFT_ERR_PEER_LOST ? fail_explain_lost(comm, comm->q_head, p, st)
                                                : st;
        }
    }
    return WEFT_OK;
}

static weft_status_t poll_head(weft_comm_t *comm, int *moved)
{
    comm_op_t *head = comm->q_head;
    weft_status_t st;
    *moved = 0;
    if (comm_is_aborted(comm)) {
        finish_head(comm, weft_error(WEFT_ERR_ABORTED, "rank %d: communicator aborted",
                                     comm->rank));
        *moved = 1;
        return WEFT_ERR_ABORTED;
    }
    if (comm->error != WEFT_OK) {
        finish_head(comm, weft_error_quiet(comm->error, "rank %d: the communicator failed "
                                           "earlier: %s", comm->rank, comm->error_msg));
        *moved = 1;
        return comm->error;
    }
    if (head->noop) {           /* a count-0 call: in order, and nothing to move */
        finish_head(comm, WEFT_OK);
        *moved = 1;
        return WEFT_OK;
    }
    if (!head->started) {
        st = engine_start(comm, head);
        if (st < 0) {
            finish_head(comm, st);
            return st;
        }
    }
    if (!head->draining) {
        st = engine_progress(comm, head, moved);
        if (st == WEFT_OK && comm->flush_eps) {   // its steps are done: now the flush
            head->draining = 1;
            st = drain(comm);
        }
    } else {
        st = drain(comm);
    }
    if (st != WEFT_IN_PROGRESS) {
        finish_head(comm, st);
        *moved = 1;
    }
    return st;
}

/* Fails the head op when a peer it waits on is gone, or it ran past WEFT_TIMEOUT.
 * Called from idle waits only, so the checks cost nothing while data flows. */
static void check_stalled(weft_comm_t *comm)
{
    comm_op_t *head = comm->q_head;
    uint64_t now = time_ns();
    if (head == NULL || !head->started || now - comm->last_check_ns < 20000000ull)
        return;
    comm->last_check_ns = now;
    if (fr_signal_take())
        fr_dump(&comm->flight, stderr, comm->rank, comm->nranks, comm->id32, "SIGUSR1");
    for (int p = 0; p < comm->nranks; p++) {
        tp_ep_t *ep = comm->eps[p];
        // the peers it still waits on: steps left, or (draining) sends not yet complete
        if (head->draining ? !(ep && ep->ops->flush && ep->ops->flush(ep) == WEFT_IN_PROGRESS)
                           : comm->cursor[2 * p] < 0 && comm->cursor[2 * p + 1] < 0 &&
                             !(comm->rma.n > 0 && comm->rma.peer == p))
            continue;
        weft_status_t st = ep->ops->check_alive(ep);
        if (st < 0) {
            finish_head(comm, fail_explain_lost(comm, head, p, st));
            return;
        }
    }
    weft_status_t st = fail_probe(comm, head);
    if (st < 0) {
        finish_head(comm, st);
        return;
    }
    if (comm->cfg.timeout_s > 0 && now - head->t_start > (uint64_t)(comm->cfg.timeout_s * 1e9)) {
        finish_head(comm, timeout_error(comm, head));
        return;
    }
    /* a long wait is never silent, where WEFT_TIMEOUT is far off (the NCCL shim's is off,
     * as NCCL's: PyTorch's watchdog aborts): at WEFT_WAIT_WARN, then at twice that, ... */
    double waited = (double)(now - head->t_start) / 1e9, warn = comm->cfg.wait_warn_s;
    if (warn > 0 && waited >= (head->warned_s > 0 ? 2 * head->warned_s : warn)) {
        char waiting[256];
        call_desc_t d;
        engine_waiting(comm, waiting, sizeof(waiting));
        engine_call_desc(head, &d);
        int c = head->args.coll, p2p = c == COLL_SEND || c == COLL_RECV || c == COLL_SENDRECV;
        char limit[48] = "WEFT_TIMEOUT off";
        if (comm->cfg.timeout_s < 1e9)
            snprintf(limit, sizeof(limit), "WEFT_TIMEOUT at %g s", comm->cfg.timeout_s);
        LOG_WARN(LOG_ENGINE, "rank %d: %s %s%u (count %zu, %s) has waited %.1f s for rank(s) "
                 "%s (%s)", comm->rank, coll_name(c), p2p ? "#" : "seq ", d.seq,
                 head->args.count, weft_dtype_name(head->args.dtype), waited,
                 waiting[0] ? waiting : "?", limit);
        head->warned_s = head->warned_s > 0 ? 2 * head->warned_s : warn;
    }
}

weft_status_t engine_poll(weft_comm_t *comm, int *moved_p)
{
    int moved = 0;
    weft_status_t st = WEFT_OK;
    if (comm->q_head != NULL) {
        st = poll_head(comm, &moved);
        if (!moved)
            check_stalled(comm);
    }
    if (moved_p)
        *moved_p = moved;
    return st < 0 ? st : WEFT_OK;
}

/* Destroy with ops still queued: each fails with WEFT_ERR_ABORTED (the peers are told),
 * so that its request can still be waited on, which frees it, without touching the
 * freed communicator. */
void engine_cancel_all(weft_comm_t *comm)
{
    while (comm->q_head) {
        weft_error_quiet(WEFT_ERR_ABORTED, "rank %d: communicator destroyed with %s seq %u "
                         "pending", comm->rank, coll_name(comm->q_head->args.coll),
                         comm->q_head->seq);
        finish_head(comm, WEFT_ERR_ABORTED);
    }
}

weft_status_t engine_wait(weft_comm_t *comm, comm_op_t *op)
{
    long idle = 0;
    while (op_status(op) == WEFT_IN_PROGRESS) {
        int moved;
        poll_head(comm, &moved);
        if (moved || op_status(op) != WEFT_IN_PROGRESS) {
            idle = 0;
            continue;
        }
        idle++;
        if (idle > comm->cfg.spin)
            sched_yield();
        if ((idle & 63) == 0)
            check_stalled(comm);   /* rate-limited inside */
    }
    return op_status(op);
}
