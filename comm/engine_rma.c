/*
 * engine_rma.c - the engine's one-sided steps (STEP_RGET, STEP_RGET_REDUCE): registering
 * this rank's buffers for a call, the keys that travel in its metadata, and reading the
 * peers' buffers with the transports' get (transport.h).
 *
 * A call whose schedule exchanges metadata (single-copy and probe schedules) registers,
 * when it starts, the buffers its peers will read (rma_begin): with every transport in
 * comm->rma_tps, each giving a packed key for slot k of sched_meta_t. A peer's keys are
 * unpacked by the endpoint that reads them, on its first step that needs them, and kept
 * for the rest of the call. A step reads the peer's bytes in place where the transport
 * offers a pointer (shm's mapping of a weft_mem_alloc region), else posts gets:
 *   RGET         straight into dst, in up to ENGINE_RMA_DEPTH pieces all in flight (one
 *                piece where the transport's get blocks: more would only add calls);
 *   RGET_REDUCE  a chunk at a time into one of two halves of TMP, two in flight: while
 *                one is reduced into dst the next is on its way.
 * Every transfer completes in the order it was posted (the oldest is tested first), and
 * the step completes once the last did. Whatever the call holds is given back when it
 * ends, in success or failure (rma_end, from finish_head): transfers still in flight are
 * cancelled, keys released, registrations dropped.
 *
 * Invariants: only the head op's one local step posts transfers, so one ring in the
 * communicator holds them all; at most two are in flight in a reduction, so a TMP half
 * is rewritten only after its piece was reduced; every copy and reduction goes through
 * the op's mem_ops_t.
 */
#include <string.h>

#include "comm_int.h"
#include "check.h"
#include "status.h"
#include "util.h"

/* What of a buffer peers read one-sidedly in a single-copy call (algo_cma.c): the send
 * buffer (the root's alone in a broadcast), and an all-reduce's receive buffer. */
static size_t peer_read_bytes(const weft_comm_t *comm, const comm_op_t *op, int buf)
{
    const sched_args_t *a = &op->args;
    size_t blk = a->count * weft_dtype_size(a->dtype);
    if (buf == BUF_RECV)
        return a->coll == COLL_ALLREDUCE ? blk : 0;
    if (a->coll == COLL_BROADCAST)
        return a->rank == a->root ? blk : 0;
    return a->coll == COLL_REDUCE_SCATTER ? blk * (size_t)a->nranks : blk;
}

/* Registers buf (BUF_SEND or BUF_RECV, b = 0 or 1) with every one-sided transport; its
 * keys go to meta_out. The receive buffer of a call in place shares the send's. */
static weft_status_t reg_buffer(weft_comm_t *comm, const comm_op_t *op, int buf,
                                tp_rkey_t *keys)
{
    int b = buf == BUF_RECV;
    const void *ptr = b ? op->recv : op->send;
    size_t len = peer_read_bytes(comm, op, buf);
    mem_type_t mt = b ? op->recv_mt : op->send_mt;
    memset(keys, 0, SCHED_META_KEYS * sizeof(*keys));
    if (ptr == NULL || len == 0)
        return WEFT_OK;
    if (b && ptr == op->send && len <= peer_read_bytes(comm, op, BUF_SEND)) {
        memcpy(keys, comm->meta_out.send_key, SCHED_META_KEYS * sizeof(*keys));
        return WEFT_OK;
    }
    for (int k = 0; k < comm->nrma_tps; k++) {
        comm->rma.active = 1;
        RETURN_IF_ERR(comm->rma_tps[k]->mem_reg(comm, ptr, len, mt, &comm->rma.reg[b][k],
                                                &keys[k]));
        keys[k].tp = (uint8_t)tp_slot(comm->rma_tps[k]);
    }
    return WEFT_OK;
}

weft_status_t rma_begin(weft_comm_t *comm, const comm_op_t *op)
{
    sched_meta_t *m = &comm->meta_out;
    mem_region_t r;
    m->registered = 0;
    mem_lookup(op->send, &r);
    m->registered |= r.fd >= 0 ? META_SEND_REG : 0;
    mem_lookup(op->recv, &r);
    m->registered |= r.fd >= 0 ? META_RECV_REG : 0;
    m->inplace = (uint32_t)op->args.inplace;
    RETURN_IF_ERR(reg_buffer(comm, op, BUF_SEND, m->send_key));
    return reg_buffer(comm, op, BUF_RECV, m->recv_key);
}

/* The peer's key for its buffer rbuf, unpacked by the endpoint that reads it (once per
 * call). */
static weft_status_t peer_key(weft_comm_t *comm, int peer, int rbuf, tp_rmem_t **rm_p)
{
    tp_rmem_t **slot = &comm->rma.rmem[2 * peer + (rbuf == BUF_RECV)];
    tp_ep_t *ep = comm->eps[peer];
    if (*slot == NULL) {
        const sched_meta_t *m = &comm->meta_in[peer];
        const tp_rkey_t *keys = rbuf == BUF_RECV ? m->recv_key : m->send_key;
        int tp = tp_slot(ep->ops), k = 0;
        while (k < SCHED_META_KEYS && !(keys[k].len > 0 && keys[k].tp == tp))
            k++;
        if (k == SCHED_META_KEYS)
            return weft_error(WEFT_ERR_INTERNAL, "rank %d: rank %d sent no %s key for its "
                              "%s buffer", comm->rank, peer, ep->ops->name,
                              rbuf == BUF_RECV ? "receive" : "send");
        comm->rma.active = 1;
        RETURN_IF_ERR(ep->ops->rkey_unpack(ep, &keys[k], slot));
    }
    *rm_p = *slot;
    return WEFT_OK;
}

/* The step read in place through the transport's pointer rp. */
static weft_status_t rget_in_place(const comm_op_t *op, const sched_step_t *st, char *dst,
                                   const char *src, const char *rp, size_t len, int div)
{
    const sched_args_t *a = &op->args;
    if (st->kind == STEP_RGET)
        return op->mops->copy(dst, rp, len, st->nt);
    /* in place, the lines were just read: cached, plain stores */
    return op->mops->reduce(dst, src, rp, len / weft_dtype_size(a->dtype), a->dtype,
                            a->op, div, st->nt && dst != src);
}

weft_status_t rma_step(weft_comm_t *comm, comm_op_t *op, const sched_step_t *st,
                       step_state_t *ss, int *moved)
{
    const sched_args_t *a = &op->args;
    engine_rma_t *q = &comm->rma;
    tp_ep_t *ep = comm->eps[st->peer];
    tp_rmem_t *rm = NULL;
    if (st->len == 0)
        return WEFT_OK;
    RETURN_IF_ERR(peer_key(comm, st->peer, st->rbuf, &rm));
    const sched_meta_t *m = &comm->meta_in[st->peer];
    uint64_t raddr = (st->rbuf == BUF_SEND ? m->send : m->recv) + st->roff;
    char *dst = engine_buf(comm, op, st->dst_buf) + st->dst_off;
    const char *src = engine_buf(comm, op, st->src_buf) + st->src_off;
    int reduce = st->kind == STEP_RGET_REDUCE, div = st->final ? comm->nranks : 0;
    const char *rp = ss->posted == 0 && ep->ops->rptr ? ep->ops->rptr(ep, rm, raddr, st->len)
                                                      : NULL;
    if (rp == NULL && ss->posted == 0 && ss->done > 0)     /* rptr answers per key */
        return weft_error(WEFT_ERR_INTERNAL, "single-copy read from rank %d: the peer's "
                          "buffer was mapped for part of the step only", st->peer);
    if (rp != NULL) {                   /* a pass's worth at a time, as below */
        size_t off = ss->done, n = WEFT_MIN(st->len - off, (size_t)ENGINE_RMA_PASS);
        ep->bytes_rx += n;              /* the per-transport counters (engine.c) */
        RETURN_IF_ERR(rget_in_place(op, st, dst + off, src + off, rp + off, n, div));
        ss->done += n;
        *moved = 1;
        return ss->done == st->len ? WEFT_OK : WEFT_IN_PROGRESS;
    }
    size_t esz = weft_dtype_size(a->dtype);
    size_t piece = reduce            ? op->sched->chunk
                   : ep->ops->get_blocks ? WEFT_MIN(st->len, (size_t)ENGINE_RMA_PASS)
                   : align_up((st->len + ENGINE_RMA_DEPTH - 1) / ENGINE_RMA_DEPTH, 64);
    /* blocking gets: a piece done per post, so one at a time keeps a pass to its budget */
    int depth = reduce ? 2 : ep->ops->get_blocks ? 1 : ENGINE_RMA_DEPTH;
    q->peer = st->peer;
    size_t pass = 0;
    for (;;) {
        while (ss->posted < st->len && q->n < depth) {
            size_t off = ss->posted, n = WEFT_MIN(piece, st->len - off);
            int i = (q->head + q->n) % ENGINE_RMA_DEPTH;
            char *to = reduce ? (char *)comm->tmp + (off / piece % 2) * piece : dst + off;
            q->xfer[i].req = NULL;
            q->active = 1;
            RETURN_IF_ERR(ep->ops->get(ep, to, rm, raddr + off, n, &q->xfer[i]));
            q->off[i] = off;
            q->len[i] = n;
            q->n++;
            ss->posted += n;
            ep->bytes_rx += n;
        }
        if (q->n == 0)
            break;
        int h = q->head;
        if (q->xfer[h].req != NULL) {
            weft_status_t rc = ep->ops->rma_test(ep, &q->xfer[h]);
            if (rc != WEFT_OK)
                return rc;
        }
        size_t off = q->off[h];
        if (reduce)
            RETURN_IF_ERR(op->mops->reduce(dst + off, src + off,
                                           (char *)comm->tmp + (off / piece % 2) * piece,
                                           q->len[h] / esz, a->dtype, a->op, div, 0));
        ss->done += q->len[h];
        pass += q->len[h];
        q->head = (h + 1) % ENGINE_RMA_DEPTH;
        q->n--;
        *moved = 1;
        if (ep->ops->get_blocks && pass >= ENGINE_RMA_PASS && ss->done < st->len)
            return WEFT_IN_PROGRESS;    /* the rest in the next pass */
    }
    return ss->done == st->len ? WEFT_OK : WEFT_IN_PROGRESS;
}

void rma_end(weft_comm_t *comm)
{
    engine_rma_t *q = &comm->rma;
    if (!q->active)
        return;
    for (; q->n > 0; q->n--, q->head = (q->head + 1) % ENGINE_RMA_DEPTH) {
        tp_ep_t *ep = comm->eps[q->peer];
        if (q->xfer[q->head].req != NULL)
            ep->ops->rma_cancel(ep, &q->xfer[q->head]);
    }
    q->head = 0;
    for (int i = 0; i < 2 * comm->nranks; i++)
        if (q->rmem[i] != NULL) {
            tp_ep_t *ep = comm->eps[i / 2];
            ep->ops->rkey_release(ep, q->rmem[i]);
            q->rmem[i] = NULL;
        }
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < SCHED_META_KEYS; k++)
            if (q->reg[b][k] != NULL) {
                comm->rma_tps[k]->mem_dereg(comm, q->reg[b][k]);
                q->reg[b][k] = NULL;
            }
    q->active = 0;
}
