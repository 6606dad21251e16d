/*
 * coll.c - the public collective calls: check the arguments, then queue an operation.
 *
 * Contract for every call: bad input returns WEFT_ERR_INVALID_ARG with the reason in
 * weft_last_error() and touches nothing (no buffer, no sequence number); count == 0 is
 * a successful no-op. Blocking calls progress the queue on the caller's thread, with the
 * communicator's lock held from queueing to completion (progress.c); a nonblocking call
 * of more than PROGRESS_EAGER_MAX bytes queues its op for the progress thread (started
 * then); a smaller one starts the op with one pass and leaves the rest to the thread
 * (started by the first nonblocking call of any size); without the thread
 * (WEFT_PROGRESS_THREAD=0) the rest is left to later calls.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm_int.h"
#include "check.h"
#include "status.h"
#include "util.h"

#define BAD(...) weft_error_quiet(WEFT_ERR_INVALID_ARG, __VA_ARGS__)

typedef struct {
    const char *fn;
    int coll;
    const void *send;
    void *recv;
    size_t count, count2;
    int dtype, op, root, peer2;
    size_t send_bytes, recv_bytes;   /* how much of each buffer the call uses */
    int inplace;
} call_t;

static weft_status_t check_comm(const char *fn, const weft_comm_t *comm)
{
    if (comm == NULL)
        return BAD("%s: comm is NULL", fn);
    if (comm->forked)
        return BAD("%s: the communicator belongs to the parent of this process (made by "
                   "fork): a child cannot use it (destroy there only forgets it)", fn);
    weft_status_t err = __atomic_load_n(&comm->error, __ATOMIC_ACQUIRE);
    if (err != WEFT_OK)     /* the progress thread may have set it: its message is in */
        return weft_error_quiet(err, "%s: the communicator failed earlier (%s); "
                                "destroy it", fn, comm->error_msg);
    if (comm_is_aborted(comm))
        return weft_error_quiet(WEFT_ERR_ABORTED, "%s: the communicator was aborted "
                                "(weft_comm_abort); destroy it", fn);
    return WEFT_OK;
}

static int ranges_overlap(const void *a, size_t na, const void *b, size_t nb)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

/* Sizes, NULL buffers and in-place layout; fills c->*_bytes and c->inplace. */
static weft_status_t check_buffers(call_t *c, const weft_comm_t *comm, size_t send_mult,
                                   size_t recv_mult, const void *inplace_send)
{
    size_t esz = weft_dtype_size((weft_dtype_t)c->dtype), per;
    /* per, not only what this rank sends: a broadcast's non-roots send nothing, and must
     * refuse the count the root refuses */
    if (mul_size(c->count, esz, &per) || mul_size(per, send_mult, &c->send_bytes) ||
        mul_size(per, recv_mult, &c->recv_bytes) || c->send_bytes > SIZE_MAX / 4 ||
        per > SIZE_MAX / 4)
        return BAD("%s: count %zu of %s overflows the address space", c->fn, c->count,
                   weft_dtype_name((weft_dtype_t)c->dtype));
    if (c->count == 0)
        return WEFT_OK;
    if (c->send_bytes && c->send == NULL)
        return BAD("%s: send buffer is NULL with count %zu", c->fn, c->count);
    if (c->recv_bytes && c->recv == NULL)
        return BAD("%s: recv buffer is NULL with count %zu", c->fn, c->count);
    c->inplace = inplace_send != NULL && c->send == inplace_send;
    if (!c->inplace && ranges_overlap(c->send, c->send_bytes, c->recv, c->recv_bytes))
        return BAD("%s: send and recv buffers overlap but are not the in-place layout "
                   "(rank %d)", c->fn, comm->rank);
    return WEFT_OK;
}

static weft_status_t check_call(call_t *c, const weft_comm_t *comm, int needs_op,
                                int needs_root)
{
    RETURN_IF_ERR(check_comm(c->fn, comm));
    if (!dtype_valid(c->dtype))
        return BAD("%s: unknown dtype %d", c->fn, c->dtype);
    if (needs_op && !op_valid(c->op))
        return BAD("%s: unknown reduction op %d", c->fn, c->op);
    if (needs_root && (c->root < 0 || c->root >= comm->nranks))
        return BAD("%s: %s %d is out of range [0, %d)", c->fn,
                   c->coll == COLL_BROADCAST || c->coll == COLL_REDUCE ? "root" : "peer",
                   c->root, comm->nranks);
    return WEFT_OK;
}

static weft_status_t submit(weft_comm_t *comm, const call_t *c, weft_request_t **req_p)
{
    sched_args_t a;
    memset(&a, 0, sizeof(a));
    a.coll = c->coll;
    a.rank = comm->rank;
    a.nranks = comm->nranks;
    a.count = c->count;
    a.dtype = (weft_dtype_t)c->dtype;
    a.op = c->coll == COLL_ALLREDUCE || c->coll == COLL_REDUCE_SCATTER ||
           c->coll == COLL_REDUCE ? (weft_op_t)c->op : WEFT_SUM;
    a.root = c->root;
    a.peer2 = c->peer2;
    a.count2 = c->count2;
    a.inplace = c->inplace;
    return coll_run(comm, &a, c->send, c->recv, req_p);
}

/* The call's place in its sequence: the collectives' one, or a p2p direction's (under
 * the comm's lock). */
static void number_call(weft_comm_t *comm, const sched_args_t *args, comm_op_t *op)
{
    if (args->coll == COLL_SEND || args->coll == COLL_SENDRECV)
        op->seq_tx = comm->p2p_tx[args->root]++;
    if (args->coll == COLL_RECV)
        op->seq_rx = comm->p2p_rx[args->root]++;
    if (args->coll == COLL_SENDRECV)
        op->seq_rx = comm->p2p_rx[args->peer2]++;
    if (args->coll != COLL_SEND && args->coll != COLL_RECV && args->coll != COLL_SENDRECV)
        op->seq = comm->seq++;
}

/* The buffers' memory types, refused unless weft.h's calls can use them: before the call
 * takes a number, as any bad argument: the engine copies and reduces host memory only,
 * and a refusal once the call started would fail the communicator on every rank (NCCL
 * refuses a wrong pointer up front as well). A call that moves nothing (moves 0)
 * touches neither buffer: the stream calls pass theirs on as they are. */
static weft_status_t usable_buffers(int coll, const void *send, const void *recv, int moves,
                                    mem_type_t *send_mt, mem_type_t *recv_mt)
{
    *send_mt = moves ? mem_type_of(send) : MEM_HOST;
    *recv_mt = moves ? mem_type_of(recv) : MEM_HOST;
    if (!mem_ops_for(WEFT_MAX(*send_mt, *recv_mt))->usable)
        return BAD("%s: %s is %s memory: weft.h's calls copy and reduce host memory (device "
                   "buffers go to weft_cuda.h's stream calls)", coll_name(coll),
                   *send_mt != MEM_HOST ? "the send buffer" : "the receive buffer",
                   mem_type_name(*send_mt != MEM_HOST ? *send_mt : *recv_mt));
    return WEFT_OK;
}

weft_status_t coll_run(weft_comm_t *comm, const sched_args_t *args, const void *send,
                       void *recv, weft_request_t **req_p)
{
    comm_op_t local, *op = &local;
    mem_type_t send_mt, recv_mt;
    RETURN_IF_ERR(usable_buffers(args->coll, send, recv, args->count > 0 || args->count2 > 0,
                                 &send_mt, &recv_mt));
    weft_request_t *req = NULL;
    if (req_p) {
        req = calloc(1, sizeof(*req));
        if (req == NULL)
            return weft_error(WEFT_ERR_NO_MEMORY, "out of memory");
        req->comm = comm;
        op = &req->op;
    }
    memset(op, 0, sizeof(*op));
    op->args = *args;
    op->send = send;
    op->recv = recv;
    op->send_mt = send_mt;
    op->recv_mt = recv_mt;
    op->status = WEFT_IN_PROGRESS;
    if (req)
        op->error_msg = req->error_msg;
    int entered = comm_enter(comm);
    number_call(comm, args, op);
    if (args->count == 0 && args->coll != COLL_BARRIER) {
        /* Nothing to move, but the call takes its number in its sequence, as the
         * engine's calls do: a peer that made the call with a count then meets this rank's
         * next call as a mismatch instead of taking it for this one (and computing with
         * its data). (A call refused with INVALID_ARG takes none: it did not happen, as in
         * NCCL; nor does a sendrecv's empty direction, which is how one-way exchanges are
         * asked for: weft.h says so.) Done now when nothing is queued before it, else
         * queued to complete in order, as weft.h promises: a caller who waits only on
         * its last request, or a blocking call, finds every earlier one done. */
        op->noop = 1;
        /* (a communicator failed in the background fails it at the head, as any call) */
        if (comm->q_head == NULL && __atomic_load_n(&comm->error, __ATOMIC_ACQUIRE) == WEFT_OK) {
            /* in the recorder as any call: a peer's mismatch message may quote its number */
            call_desc_t nd;
            engine_call_desc(op, &nd);
            fr_finished(&comm->flight, fr_queued(&comm->flight, &nd, time_ns_coarse()), WEFT_OK);
            op->status = WEFT_OK;
            comm_leave(comm, entered);
            if (req_p)
                *req_p = req;
            return WEFT_OK;
        }
    }
    uint64_t now = time_ns_coarse();
    op->t_queued = comm->q_head == NULL ? now : 0;   /* first in line: starts right away */
    call_desc_t d;
    engine_call_desc(op, &d);
    op->fr_id = fr_queued(&comm->flight, &d, now);
    if (comm->q_tail)
        comm->q_tail->next = op;
    else
        comm->q_head = op;
    comm->q_tail = op;
    weft_status_t st = WEFT_OK;
    if (req) {
        *req_p = req;
        /* Every nonblocking call makes sure the thread exists (the first one starts it):
         * a small call it did not start used to wait for the caller's next weft call on
         * this communicator, and a blocking call on another one left it there (a barrier
         * on a split while a peer waits on this call: a hang until WEFT_TIMEOUT). A large
         * op is the thread's, which starts it off the caller's time; a small one makes
         * its first pass here, where its latency is lowest (0.3 us at 8 B, against 0.7-2
         * us to wake the thread, docs/PERF.md), and comm_leave wakes the thread for the
         * rest when it is not done. */
        size_t bytes = args->count * weft_dtype_size(args->dtype);
        progress_kick(comm);
        if (!comm->thread_on || bytes <= PROGRESS_EAGER_MAX)
            engine_poll(comm, NULL);   /* its status is reported by test/wait */
    } else {
        st = engine_wait(comm, op);
    }
    comm_leave(comm, entered);
    return st;
}

/* ---- the API ---- */

static weft_status_t do_allreduce(const void *send, void *recv, size_t count, weft_dtype_t dtype,
                                  weft_op_t op, weft_comm_t *comm, weft_request_t **req_p)
{
    call_t c = { .fn = "allreduce", .coll = COLL_ALLREDUCE, .send = send, .recv = recv,
                 .count = count, .dtype = dtype, .op = op, .root = -1 };
    RETURN_IF_ERR(check_call(&c, comm, 1, 0));
    RETURN_IF_ERR(check_buffers(&c, comm, 1, 1, recv));
    return submit(comm, &c, req_p);
}

static weft_status_t do_reduce_scatter(const void *send, void *recv, size_t recvcount,
                                       weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm,
                                       weft_request_t **req_p)
{
    call_t c = { .fn = "reduce_scatter", .coll = COLL_REDUCE_SCATTER, .send = send,
                 .recv = recv, .count = recvcount, .dtype = dtype, .op = op, .root = -1 };
    RETURN_IF_ERR(check_call(&c, comm, 1, 0));
    size_t esz = weft_dtype_size(dtype);
    /* unsigned arithmetic: a huge count must reach the overflow check, not UB here */
    const void *legal = recv ? (const void *)((uintptr_t)recv -
                                              (uintptr_t)comm->rank * recvcount * esz) : NULL;
    RETURN_IF_ERR(check_buffers(&c, comm, (size_t)comm->nranks, 1, legal));
    return submit(comm, &c, req_p);
}

static weft_status_t do_allgather(const void *send, void *recv, size_t sendcount,
                                  weft_dtype_t dtype, weft_comm_t *comm, weft_request_t **req_p)
{
    call_t c = { .fn = "allgather", .coll = COLL_ALLGATHER, .send = send, .recv = recv,
                 .count = sendcount, .dtype = dtype, .root = -1 };
    RETURN_IF_ERR(check_call(&c, comm, 0, 0));
    size_t esz = weft_dtype_size(dtype);
    const void *legal = recv ? (const void *)((uintptr_t)recv +
                                              (uintptr_t)comm->rank * sendcount * esz) : NULL;
    RETURN_IF_ERR(check_buffers(&c, comm, 1, (size_t)comm->nranks, legal));
    return submit(comm, &c, req_p);
}

static weft_status_t do_broadcast(const void *send, void *recv, size_t count, weft_dtype_t dtype,
                                  int root, weft_comm_t *comm, weft_request_t **req_p)
{
    call_t c = { .fn = "broadcast", .coll = COLL_BROADCAST, .send = send, .recv = recv,
                 .count = count, .dtype = dtype, .root = root };
    RETURN_IF_ERR(check_call(&c, comm, 0, 1));
    RETURN_IF_ERR(check_buffers(&c, comm, comm->rank == root, 1, recv));
    return submit(comm, &c, req_p);
}

weft_status_t weft_allreduce(const void *send, void *recv, size_t count, weft_dtype_t dtype,
                             weft_op_t op, weft_comm_t *comm)
{
    return do_allreduce(send, recv, count, dtype, op, comm, NULL);
}

weft_status_t weft_iallreduce(const void *send, void *recv, size_t count, weft_dtype_t dtype,
                              weft_op_t op, weft_comm_t *comm, weft_request_t **req_p)
{
    if (req_p == NULL)
        return BAD("iallreduce: req_p is NULL");
    return do_allreduce(send, recv, count, dtype, op, comm, req_p);
}

weft_status_t weft_reduce_scatter(const void *send, void *recv, size_t recvcount,
                                  weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm)
{
    return do_reduce_scatter(send, recv, recvcount, dtype, op, comm, NULL);
}

weft_status_t weft_ireduce_scatter(const void *send, void *recv, size_t recvcount,
                                   weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm,
                                   weft_request_t **req_p)
{
    if (req_p == NULL)
        return BAD("ireduce_scatter: req_p is NULL");
    return do_reduce_scatter(send, recv, recvcount, dtype, op, comm, req_p);
}

weft_status_t weft_allgather(const void *send, void *recv, size_t sendcount,
                             weft_dtype_t dtype, weft_comm_t *comm)
{
    return do_allgather(send, recv, sendcount, dtype, comm, NULL);
}

weft_status_t weft_iallgather(const void *send, void *recv, size_t sendcount,
                              weft_dtype_t dtype, weft_comm_t *comm, weft_request_t **req_p)
{
    if (req_p == NULL)
        return BAD("iallgather: req_p is NULL");
    return do_allgather(send, recv, sendcount, dtype, comm, req_p);
}

weft_status_t weft_broadcast(const void *send, void *recv, size_t count, weft_dtype_t dtype,
                             int root, weft_comm_t *comm)
{
    return do_broadcast(send, recv, count, dtype, root, comm, NULL);
}

weft_status_t weft_ibroadcast(const void *send, void *recv, size_t count, weft_dtype_t dtype,
                              int root, weft_comm_t *comm, weft_request_t **req_p)
{
    if (req_p == NULL)
        return BAD("ibroadcast: req_p is NULL");
    return do_broadcast(send, recv, count, dtype, root, comm, req_p);
}

weft_status_t weft_reduce(const void *send, void *recv, size_t count, weft_dtype_t dtype,
                          weft_op_t op, int root, weft_comm_t *comm)
{
    call_t c = { .fn = "reduce", .coll = COLL_REDUCE, .send = send, .recv = recv,
                 .count = count, .dtype = dtype, .op = op, .root = root };
    RETURN_IF_ERR(check_call(&c, comm, 1, 1));
    RETURN_IF_ERR(check_buffers(&c, comm, 1, comm->rank == root, recv));
    return submit(comm, &c, NULL);
}

weft_status_t weft_alltoall(const void *send, void *recv, size_t count, weft_dtype_t dtype,
                            weft_comm_t *comm)
{
    call_t c = { .fn = "alltoall", .coll = COLL_ALLTOALL, .send = send, .recv = recv,
                 .count = count, .dtype = dtype, .root = -1 };
    RETURN_IF_ERR(check_call(&c, comm, 0, 0));
    RETURN_IF_ERR(check_buffers(&c, comm, (size_t)comm->nranks, (size_t)comm->nranks, recv));
    return submit(comm, &c, NULL);
}

weft_status_t weft_send(const void *buf, size_t count, weft_dtype_t dtype, int peer,
                        weft_comm_t *comm)
{
    call_t c = { .fn = "send", .coll = COLL_SEND, .send = buf, .count = count,
                 .dtype = dtype, .root = peer };
    RETURN_IF_ERR(check_call(&c, comm, 0, 1));
    if (peer == comm->rank)
        return BAD("send: peer %d is this rank (use weft_sendrecv to send to self)", peer);
    RETURN_IF_ERR(check_buffers(&c, comm, 1, 0, NULL));
    return submit(comm, &c, NULL);
}

weft_status_t weft_recv(void *buf, size_t count, weft_dtype_t dtype, int peer,
                        weft_comm_t *comm)
{
    call_t c = { .fn = "recv", .coll = COLL_RECV, .recv = buf, .count = count,
                 .dtype = dtype, .root = peer };
    RETURN_IF_ERR(check_call(&c, comm, 0, 1));
    if (peer == comm->rank)
        return BAD("recv: peer %d is this rank (use weft_sendrecv to send to self)", peer);
    RETURN_IF_ERR(check_buffers(&c, comm, 0, 1, NULL));
    return submit(comm, &c, NULL);
}

weft_status_t weft_sendrecv(const void *sendbuf, size_t sendcount, int dst, void *recvbuf,
                            size_t recvcount, int src, weft_dtype_t dtype, weft_comm_t *comm)
{
    call_t c = { .fn = "sendrecv", .coll = COLL_SENDRECV, .send = sendbuf, .recv = recvbuf,
                 .count = sendcount, .count2 = recvcount, .dtype = dtype, .root = dst,
                 .peer2 = src };
    RETURN_IF_ERR(check_call(&c, comm, 0, 0));
    /* a direction of count 0 is no direction: its rank is not looked at */
    if (sendcount && (dst < 0 || dst >= comm->nranks))
        return BAD("sendrecv: dst %d is out of range [0, %d)", dst, comm->nranks);
    if (recvcount && (src < 0 || src >= comm->nranks))
        return BAD("sendrecv: src %d is out of range [0, %d)", src, comm->nranks);
    int to_self = sendcount && dst == comm->rank, from_self = recvcount && src == comm->rank;
    if (to_self != from_self)
        return BAD("sendrecv: dst %d (sendcount %zu) and src %d (recvcount %zu): sending to "
                   "self needs receiving from self", dst, sendcount, src, recvcount);
    size_t esz = weft_dtype_size(dtype), sb, rb;
    if (mul_size(sendcount, esz, &sb) || sb > SIZE_MAX / 4)
        return BAD("sendrecv: sendcount %zu of %s overflows the address space", sendcount,
                   weft_dtype_name(dtype));
    if (mul_size(recvcount, esz, &rb) || rb > SIZE_MAX / 4)
        return BAD("sendrecv: recvcount %zu of %s overflows the address space", recvcount,
                   weft_dtype_name(dtype));
    if ((sb && sendbuf == NULL) || (rb && recvbuf == NULL))
        return BAD("sendrecv: NULL buffer with a non-zero count");
    if (ranges_overlap(sendbuf, sb, recvbuf, rb))
        return BAD("sendrecv: send and recv buffers overlap");
    if (to_self || (sendcount == 0 && recvcount == 0)) {
        if (to_self && sendcount != recvcount)
            return BAD("sendrecv: to self with sendcount %zu != recvcount %zu", sendcount,
                       recvcount);
        mem_type_t smt, rmt;    /* the copy below is a host one */
        RETURN_IF_ERR(usable_buffers(COLL_SENDRECV, sendbuf, recvbuf, sb > 0, &smt, &rmt));
        /* a blocking call completes every earlier operation first (weft.h); both
         * directions empty is no exchange at all (the NCCL shim's and the CUDA paths'
         * one-way exchanges): it takes no number, unlike a count-0 weft_send or recv */
        int entered = comm_enter(comm);
        weft_status_t st = comm->q_tail ? engine_wait(comm, comm->q_tail) : WEFT_OK;
        comm_leave(comm, entered);
        if (st == WEFT_OK && sb)
            memcpy(recvbuf, sendbuf, sb);
        return st;
    }
    if (sendcount == 0 || recvcount == 0) {   /* one direction only */
        return sendcount ? weft_send(sendbuf, sendcount, dtype, dst, comm)
                         : weft_recv(recvbuf, recvcount, dtype, src, comm);
    }
    return submit(comm, &c, NULL);
}

weft_status_t weft_barrier(weft_comm_t *comm)
{
    call_t c = { .fn = "barrier", .coll = COLL_BARRIER, .dtype = WEFT_UINT8, .root = -1 };
    RETURN_IF_ERR(check_comm("barrier", comm));
    return submit(comm, &c, NULL);
}

/* A finished request's status, with its message as this thread's last error (the op
 * may have failed on the progress thread, whose message is its own). */
static weft_status_t req_result(const weft_request_t *req, weft_status_t st)
{
    if (st < 0 && req->error_msg[0])
        weft_error_quiet(st, "%s", req->error_msg);
    return st;
}

/* One pass, unless someone else holds the lock (the progress thread in a pass, which
 * is progress too): weft_test never waits. */
weft_status_t weft_test(weft_request_t *req, int *done_p)
{
    if (req == NULL || done_p == NULL)
        return BAD("test: %s is NULL", req == NULL ? "req" : "done_p");
    weft_comm_t *comm = req->comm;
    /* (a request that is done may outlive its communicator: comm is read only while the
     * request is in progress, which destroy never leaves it) */
    if (op_status(&req->op) == WEFT_IN_PROGRESS && comm->forked)
        return BAD("test: the request's communicator belongs to the parent of this process "
                   "(made by fork)");
    if (op_status(&req->op) == WEFT_IN_PROGRESS &&
        pthread_mutex_trylock(&comm->lock) == 0) {
        engine_poll(comm, NULL);
        comm_leave(comm, 0);
    }
    weft_status_t st = op_status(&req->op);
    *done_p = st != WEFT_IN_PROGRESS;
    return st == WEFT_IN_PROGRESS ? WEFT_OK : req_result(req, st);
}

/* Drives the queue on the caller's thread (the progress thread stands aside), which
 * completes the request soonest. */
weft_status_t weft_wait(weft_request_t *req)
{
    if (req == NULL)
        return BAD("wait: req is NULL");
    weft_status_t st = op_status(&req->op);
    /* (read only in progress: a request that is done may outlive its communicator; one of
     * a parent's communicator stays the parent's, its copy here left as it is) */
    if (st == WEFT_IN_PROGRESS && req->comm->forked)
        return BAD("wait: the request's communicator belongs to the parent of this process "
                   "(made by fork)");
    if (st == WEFT_IN_PROGRESS) {
        int entered = comm_enter(req->comm);
        st = engine_wait(req->comm, &req->op);
        comm_leave(req->comm, entered);
    }
    st = req_result(req, st);
    free(req);
    return st;
}
