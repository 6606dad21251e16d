/*
 * engine.c - runs schedules over the transports: the only code that sees both.
 *
 * One pass visits every peer's send queue and receive queue and the local steps, and
 * moves whatever can move without blocking; a blocking call repeats passes on the
 * caller's thread (spinning WEFT_SPIN idle passes, then yielding the core each pass)
 * until its operation completes, fails, times out or the communicator is aborted.
 *
 * Invariants:
 *   - every received header is checked against the running operation before its
 *     payload is touched (frame.h); a wrong length never reaches memcpy;
 *   - a send that the transport did not take whole is retried with the same frame
 *     (same header, same length) until taken;
 *   - per-step state lives in the communicator: only the queue head runs.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_int.h"
#include "check.h"
#include "reduce.h"
#include "status.h"
#include "util.h"

const char *coll_name(int coll)
{
    static const char *names[COLL_NUM] = {
        [COLL_ALLREDUCE] = "allreduce", [COLL_REDUCE_SCATTER] = "reduce_scatter",
        [COLL_ALLGATHER] = "allgather", [COLL_BROADCAST] = "broadcast",
        [COLL_REDUCE] = "reduce", [COLL_ALLTOALL] = "alltoall", [COLL_SEND] = "send",
        [COLL_RECV] = "recv", [COLL_BARRIER] = "barrier", [COLL_SENDRECV] = "sendrecv",
    };
    return coll > 0 && coll < COLL_NUM && names[coll] ? names[coll] : "unknown";
}

static char *buf_ptr(weft_comm_t *comm, comm_op_t *op, int buf)
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

weft_status_t engine_start(weft_comm_t *comm, comm_op_t *op)
{
    RETURN_IF_ERR(tuner_schedule(comm, op));
    const sched_t *s = op->sched;
    RETURN_IF_ERR(ensure_state(comm, s));
    if (s->nsteps)
        memset(comm->st, 0, (size_t)s->nsteps * sizeof(step_state_t));
    for (int p = 0; p < comm->nranks; p++) {
        comm->cursor[2 * p] = s->head_send[p];
        comm->cursor[2 * p + 1] = s->head_recv[p];
        comm->frame_tx[p] = comm->frame_rx[p] = 0;
    }
    comm->local_cursor = 0;
    comm->ncomplete = 0;
    comm->meta_out.send = (uint64_t)(uintptr_t)op->send;
    comm->meta_out.recv = (uint64_t)(uintptr_t)op->recv;
    op->started = 1;
    op->t_start = time_ns();
    fr_started(&comm->flight, op->fr_id, s->algo);
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
                        size_t len, frame_hdr_t *h)
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
    h->frame = comm->frame_tx[peer];
    h->len = (uint32_t)len;
    h->src_rank = (uint32_t)comm->rank;
}

/* Pushes frames of send step i until done, blocked, or the stream source runs dry. */
static weft_status_t progress_send(weft_comm_t *comm, comm_op_t *op, int i, int *moved)
{
    const sched_t *s = op->sched;
    const sched_step_t *st = &s->steps[i];
    step_state_t *ss = &comm->st[i];
    tp_ep_t *ep = comm->eps[st->peer];
    const char *src = buf_ptr(comm, op, st->src_buf) + st->src_off;
    for (;;) {
        size_t avail = st->stream >= 0 ? comm->st[st->stream].done : st->len;
        if (ss->done == st->len && ss->frames > 0)
            return WEFT_OK;
        size_t n = ss->inflight ? ss->inflight_len : WEFT_MIN(s->chunk, avail - ss->done);
        if (n == 0 && st->len != 0)
            return WEFT_IN_PROGRESS;             /* waiting for the stream source */
        frame_hdr_t h;
        fill_header(comm, op, st->peer, n, &h);
        weft_status_t rc = ep->ops->send(ep, &h, src + ss->done);
        if (rc == WEFT_IN_PROGRESS) {
            ss->inflight = 1;
            ss->inflight_len = n;
            return rc;
        }
        if (rc < 0)
            return rc;
        ss->inflight = 0;
        comm->frame_tx[st->peer]++;
        ss->done += n;
        ss->frames++;
        *moved = 1;
    }
}

static weft_status_t mismatch(const weft_comm_t *comm, const comm_op_t *op,
                              const frame_hdr_t *h, int peer, const char *what)
{
    const sched_args_t *a = &op->args;
    const char *hd = weft_dtype_name(h->dtype), *ho = weft_op_name(h->op);
    return weft_error(WEFT_ERR_MISMATCH,
                      "rank %d: %s: rank %d sent %s(count=%llu, %s, %s, root=%d) seq %u, "
                      "but this rank called %s(count=%zu, %s, %s, root=%d) seq %u",
                      comm->rank, what, peer, coll_name(h->coll),
                      (unsigned long long)h->count, hd ? hd : "?", ho ? ho : "?",
                      (int)h->root, h->seq, coll_name(a->coll), a->count,
                      weft_dtype_name(a->dtype), weft_op_name(a->op), a->root, op->seq);
}

/* Checks a received header against what step i of op expects from `peer`. */
static weft_status_t check_header(const weft_comm_t *comm, const comm_op_t *op, int i,
                                  const frame_hdr_t *h)
{
    const sched_args_t *a = &op->args;
    const sched_step_t *st = &op->sched->steps[i];
    int peer = st->peer;
    size_t esz = weft_dtype_size(a->dtype);
    if (h->magic != FRAME_MAGIC || h->version != FRAME_VERSION)
        return weft_error(WEFT_ERR_INTERNAL, "rank %d: corrupt frame from rank %d "
                          "(magic %#x version %u)", comm->rank, peer, h->magic, h->version);
    if (h->comm_id != comm->id32 || h->src_rank != (uint32_t)peer)
        return weft_error(WEFT_ERR_INTERNAL, "rank %d: frame from rank %d carries comm %#x "
                          "rank %u, expected comm %#x", comm->rank, peer, h->comm_id,
                          h->src_rank, comm->id32);
    int p2p = a->coll == COLL_RECV || a->coll == COLL_SENDRECV;
    uint64_t want_count = a->coll == COLL_SENDRECV ? a->count2 : a->count;
    if (p2p) {
        if (h->coll != COLL_SEND || h->count != want_count || h->dtype != a->dtype ||
            h->seq != op->seq_rx)
            return mismatch(comm, op, h, peer, "point-to-point mismatch");
    } else if (h->coll != a->coll || h->count != a->count || h->dtype != a->dtype ||
               h->op != a->op || h->root != a->root || h->seq != op->seq) {
        return mismatch(comm, op, h, peer, "collective mismatch");
    }
    step_state_t *ss = &comm->st[i];
    if (h->frame != comm->frame_rx[peer] || h->len > st->len - ss->done ||
        h->len % esz != 0 || (h->len == 0 && st->len != 0))
        return weft_error(WEFT_ERR_INTERNAL, "rank %d: frame %u from rank %d has length %u "
                          "(expected frame %u, at most %zu bytes)", comm->rank, h->frame,
                          peer, h->len, comm->frame_rx[peer], st->len - ss->done);
    return WEFT_OK;
}

static weft_status_t progress_recv(weft_comm_t *comm, comm_op_t *op, int i, int *moved)
{
    const sched_step_t *st = &op->sched->steps[i];
    step_state_t *ss = &comm->st[i];
    tp_ep_t *ep = comm->eps[st->peer];
    const sched_args_t *a = &op->args;
    size_t esz = weft_dtype_size(a->dtype);
    while (!(ss->done == st->len && ss->frames > 0)) {
        const frame_hdr_t *h;
        const void *payload;
        weft_status_t rc = ep->ops->recv_peek(ep, &h, &payload);
        if (rc != WEFT_OK)
            return rc;
        RETURN_IF_ERR(check_header(comm, op, i, h));
        char *dst = buf_ptr(comm, op, st->dst_buf) + st->dst_off + ss->done;
        if (payload == NULL) {      /* still on the wire: land it, at dst if we can */
            rc = ep->ops->recv_payload(ep, st->kind == STEP_RECV ? dst : NULL, &payload);
            if (rc != WEFT_OK)
                return rc;
        }
        if (st->kind == STEP_RECV) {
            if (h->len && payload != dst)
                memcpy(dst, payload, h->len);
        } else {
            const char *src = buf_ptr(comm, op, st->src_buf) + st->src_off + ss->done;
            kern_reduce(dst, src, payload, h->len / esz, a->dtype, a->op,
                        st->final ? comm->nranks : 0);
        }
        ss->done += h->len;
        ss->frames++;
        comm->frame_rx[st->peer]++;
        ep->ops->recv_release(ep);
        *moved = 1;
    }
    return WEFT_OK;
}

/* Single-copy steps: the peer's address comes from its META frame. */
static weft_status_t run_rget(weft_comm_t *comm, comm_op_t *op, const sched_step_t *st)
{
    const sched_args_t *a = &op->args;
    tp_ep_t *ep = comm->eps[st->peer];
    const sched_meta_t *m = &comm->meta_in[st->peer];
    uint64_t raddr = (st->rbuf == BUF_SEND ? m->send : m->recv) + st->roff;
    char *dst = buf_ptr(comm, op, st->dst_buf) + st->dst_off;
    if (st->len == 0)
        return WEFT_OK;
    if (st->kind == STEP_RGET)
        return ep->ops->rget(ep, dst, raddr, st->len);
    size_t esz = weft_dtype_size(a->dtype), chunk = op->sched->chunk;
    const char *src = buf_ptr(comm, op, st->src_buf) + st->src_off;
    int div = st->final ? comm->nranks : 0;
    for (size_t off = 0; off < st->len; off += chunk) {
        size_t n = WEFT_MIN(chunk, st->len - off);
        RETURN_IF_ERR(ep->ops->rget(ep, comm->tmp, raddr + off, n));
        kern_reduce(dst + off, src + off, comm->tmp, n / esz, a->dtype, a->op, div);
    }
    return WEFT_OK;
}

static weft_status_t run_local(weft_comm_t *comm, comm_op_t *op, const sched_step_t *st)
{
    const sched_args_t *a = &op->args;
    size_t esz = weft_dtype_size(a->dtype);
    if (st->kind == STEP_RGET || st->kind == STEP_RGET_REDUCE)
        return run_rget(comm, op, st);
    char *dst = buf_ptr(comm, op, st->dst_buf) + st->dst_off;
    const char *src = buf_ptr(comm, op, st->src_buf) + st->src_off;
    int div = st->final && a->op == WEFT_AVG ? comm->nranks : 0;
    if (st->kind == STEP_COPY || st->nslots == 1) {
        if (st->kind == STEP_FOLD && div)
            kern_divide(dst, src, st->len / esz, a->dtype, div);
        else if (dst != src && st->len)
            memmove(dst, src, st->len);
        return WEFT_OK;
    }
    size_t n = st->len / esz;
    for (int k = 1; k < st->nslots; k++) {
        const char *acc = k == 1 ? src : dst;
        kern_reduce(dst, acc, src + (size_t)k * st->slot_stride, n, a->dtype, a->op,
                    k == st->nslots - 1 ? div : 0);
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
    for (int p = 0; p < comm->nranks; p++) {
        if (comm->cursor[2 * p] >= 0)
            RETURN_IF_ERR(progress_queue(comm, op, &comm->cursor[2 * p], 1, &moved));
        if (comm->cursor[2 * p + 1] >= 0)
            RETURN_IF_ERR(progress_queue(comm, op, &comm->cursor[2 * p + 1], 0, &moved));
    }
    while (comm->local_cursor < s->nlocals) {
        int i = s->locals[comm->local_cursor];
        if (!deps_met(comm, s, i))
            break;
        RETURN_IF_ERR(run_local(comm, op, &s->steps[i]));
        complete_step(comm, i);
        comm->local_cursor++;
        moved = 1;
    }
    *moved_p = moved;
    return comm->ncomplete == s->nsteps ? WEFT_OK : WEFT_IN_PROGRESS;
}

/* Names the peers the head op still waits on, for a timeout message. */
static void describe_waiting(const weft_comm_t *comm, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int p = 0; p < comm->nranks && n + 16 < cap; p++) {
        int tx = comm->cursor[2 * p], rx = comm->cursor[2 * p + 1];
        if (rx >= 0 || tx >= 0)
            n += (size_t)snprintf(buf + n, cap - n, "%s%d(%s)", n ? "," : "", p,
                                  rx >= 0 ? "recv" : "send");
    }
}

static weft_status_t timeout_error(weft_comm_t *comm, comm_op_t *op)
{
    char waiting[512];
    describe_waiting(comm, waiting, sizeof(waiting));
    return weft_error(WEFT_ERR_TIMEOUT, "rank %d: %s seq %u (count %zu, %s) timed out after "
                      "%.1f s (WEFT_TIMEOUT) waiting for rank(s) %s", comm->rank,
                      coll_name(op->args.coll), op->seq, op->args.count,
                      weft_dtype_name(op->args.dtype), comm->cfg.timeout_s,
                      waiting[0] ? waiting : "?");
}

static void finish_head(weft_comm_t *comm, weft_status_t st)
{
    comm_op_t *op = comm->q_head;
    op->status = st;
    comm->q_head = op->next;
    if (comm->q_head == NULL)
        comm->q_tail = NULL;
    op->next = NULL;
    if (st < 0 && comm->error == WEFT_OK)
        comm->error = st;   /* frames of a failed op may be in flight: the comm is done */
    fr_finished(&comm->flight, op->fr_id, st);
    if (st == WEFT_ERR_TIMEOUT || st == WEFT_ERR_PEER_LOST)
        fr_dump(&comm->flight, stderr, comm->rank, comm->nranks, comm->id32,
                weft_last_error());
}

/* One pass on the head; returns what the head did (done, in progress, error). */
static weft_status_t poll_head(weft_comm_t *comm, int *moved)
{
    comm_op_t *head = comm->q_head;
    weft_status_t st;
    *moved = 0;
    if (comm->aborted) {
        finish_head(comm, weft_error(WEFT_ERR_ABORTED, "rank %d: communicator aborted",
                                     comm->rank));
        return WEFT_ERR_ABORTED;
    }
    if (comm->error != WEFT_OK) {
        finish_head(comm, comm->error);
        return comm->error;
    }
    if (!head->started) {
        st = engine_start(comm, head);
        if (st < 0) {
            finish_head(comm, st);
            return st;
        }
    }
    st = engine_progress(comm, head, moved);
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
        if (comm->cursor[2 * p] < 0 && comm->cursor[2 * p + 1] < 0)
            continue;
        weft_status_t st = comm->eps[p]->ops->check_alive(comm->eps[p]);
        if (st < 0) {
            finish_head(comm, st);
            return;
        }
    }
    if (comm->cfg.timeout_s > 0 && now - head->t_start > (uint64_t)(comm->cfg.timeout_s * 1e9))
        finish_head(comm, timeout_error(comm, head));
}

weft_status_t engine_poll(weft_comm_t *comm)
{
    int moved;
    if (comm->q_head == NULL)
        return WEFT_OK;
    weft_status_t st = poll_head(comm, &moved);
    if (!moved)
        check_stalled(comm);
    return st < 0 ? st : WEFT_OK;
}

weft_status_t engine_wait(weft_comm_t *comm, comm_op_t *op)
{
    long idle = 0;
    while (op->status == WEFT_IN_PROGRESS) {
        int moved;
        poll_head(comm, &moved);
        if (moved) {
            idle = 0;
            continue;
        }
        idle++;
        if (idle > comm->cfg.spin)
            sched_yield();
        if ((idle & 1023) == 0)
            check_stalled(comm);
    }
    return op->status;
}
