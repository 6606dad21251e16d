/*
 * algo_ring.c - bandwidth-optimal pipelined rings and chains.
 *
 * allreduce      reduce-scatter then all-gather around the ring (2(n-1) steps, each
 *                moving count/n elements); every block is reduced along the ring in the
 *                same order, so all ranks end with bit-identical results
 * reduce_scatter the first half of that, ending with block `rank` on rank `rank`
 * allgather      the second half
 * broadcast      a chain from the root, forwarding each frame as it arrives
 * reduce         a chain ending at the root, reducing and forwarding each frame
 * Pipelining comes from `stream` dependencies: a forwarding send may move the bytes its
 * producing receive already has, frame by frame, instead of waiting for the whole block.
 *
 * Invariant: every function here is pure - (args) -> schedule - and uses byte offsets.
 */
#include "algo.h"
#include "frame.h"
#include "util.h"

typedef struct {
    size_t count, esz;
    int n;
} blocks_t;

static size_t blk_off(const blocks_t *b, int i)
{
    size_t off, len;
    sched_block(b->count, b->n, SCHED_MOD(i, b->n), &off, &len);
    return off * b->esz;
}

static size_t blk_len(const blocks_t *b, int i)
{
    size_t off, len;
    sched_block(b->count, b->n, SCHED_MOD(i, b->n), &off, &len);
    return len * b->esz;
}

/* Reduce-scatter phase of allreduce: block r+1 ends fully reduced in RECV.
 * Returns the index of the last receive (the producer of that block). */
static int ring_rs_into_recv(const sched_args_t *a, const blocks_t *b, sched_t *s)
{
    int r = a->rank, n = a->nranks, left = SCHED_MOD(r - 1, n), right = SCHED_MOD(r + 1, n);
    int prev = -1;
    for (int k = 0; k < n - 1; k++) {
        int sb = r - k, rb = r - k - 1;
        if (k == 0)
            sched_send(s, right, BUF_SEND, blk_off(b, sb), blk_len(b, sb), -1);
        else
            sched_send(s, right, BUF_RECV, blk_off(b, sb), blk_len(b, sb), prev);
        prev = sched_recv_reduce(s, left, BUF_RECV, blk_off(b, rb), BUF_SEND, blk_off(b, rb),
                                 blk_len(b, rb), k == n - 2);
    }
    return prev;
}

/* All-gather phase: block r+1 (produced by `prev`) travels around the ring in RECV. */
static void ring_ag_from(const sched_args_t *a, const blocks_t *b, int first_block, int prev,
                         int first_src, sched_t *s)
{
    int r = a->rank, n = a->nranks, left = SCHED_MOD(r - 1, n), right = SCHED_MOD(r + 1, n);
    for (int k = 0; k < n - 1; k++) {
        int sb = first_block - k, rb = first_block - k - 1;
        if (k == 0 && first_src == BUF_SEND)
            sched_send(s, right, BUF_SEND, 0, blk_len(b, sb), -1);
        else
            sched_send(s, right, BUF_RECV, blk_off(b, sb), blk_len(b, sb), prev);
        prev = sched_recv(s, left, BUF_RECV, blk_off(b, rb), blk_len(b, rb));
    }
}

static void ring_allreduce(const sched_args_t *a, size_t esz, sched_t *s)
{
    blocks_t b = { a->count, esz, a->nranks };
    int last = ring_rs_into_recv(a, &b, s);
    ring_ag_from(a, &b, a->rank + 1, last, BUF_RECV, s);
}

/* Rank r ends with block r in RECV; partial sums travel in TMP (n blocks). */
static void ring_reduce_scatter(const sched_args_t *a, size_t esz, sched_t *s)
{
    int r = a->rank, n = a->nranks, left = SCHED_MOD(r - 1, n), right = SCHED_MOD(r + 1, n);
    size_t blk = a->count * esz;
    int prev = -1;
    s->tmp_bytes = blk * (size_t)n;
    for (int k = 0; k < n - 1; k++) {
        int sb = SCHED_MOD(r - k - 1, n), rb = SCHED_MOD(r - k - 2, n);
        if (k == 0)
            sched_send(s, right, BUF_SEND, (size_t)sb * blk, blk, -1);
        else
            sched_send(s, right, BUF_TMP, (size_t)sb * blk, blk, prev);
        if (k == n - 2)
            sched_recv_reduce(s, left, BUF_RECV, 0, BUF_SEND, (size_t)rb * blk, blk, 1);
        else
            prev = sched_recv_reduce(s, left, BUF_TMP, (size_t)rb * blk, BUF_SEND,
                                     (size_t)rb * blk, blk, 0);
    }
}

static void ring_allgather(const sched_args_t *a, size_t esz, sched_t *s)
{
    blocks_t b = { a->count * (size_t)a->nranks, esz, a->nranks };
    if (!a->inplace)
        sched_copy(s, BUF_RECV, blk_off(&b, a->rank), BUF_SEND, 0, blk_len(&b, a->rank));
    ring_ag_from(a, &b, a->rank, -1, BUF_SEND, s);
}

static void chain_broadcast(const sched_args_t *a, size_t esz, sched_t *s)
{
    int r = a->rank, n = a->nranks, pos = SCHED_MOD(r - a->root, n);
    int next = SCHED_MOD(r + 1, n), prev = SCHED_MOD(r - 1, n);
    size_t len = a->count * esz;
    if (pos == 0) {
        if (!a->inplace)
            sched_copy(s, BUF_RECV, 0, BUF_SEND, 0, len);
        sched_send(s, next, BUF_SEND, 0, len, -1);
    } else if (pos == n - 1) {
        sched_recv(s, prev, BUF_RECV, 0, len);
    } else {
        int rx = sched_recv(s, prev, BUF_RECV, 0, len);
        sched_send(s, next, BUF_RECV, 0, len, rx);
    }
}

/* Chain root+1 -> root+2 -> ... -> root; partial results travel in TMP. */
static void chain_reduce(const sched_args_t *a, size_t esz, sched_t *s)
{
    int r = a->rank, n = a->nranks, pos = SCHED_MOD(r - a->root - 1, n);
    int next = SCHED_MOD(r + 1, n), prev = SCHED_MOD(r - 1, n);
    size_t len = a->count * esz;
    if (pos == 0) {
        sched_send(s, next, BUF_SEND, 0, len, -1);
    } else if (pos == n - 1) {
        sched_recv_reduce(s, prev, BUF_RECV, 0, BUF_SEND, 0, len, 1);
    } else {
        s->tmp_bytes = len;
        int rx = sched_recv_reduce(s, prev, BUF_TMP, 0, BUF_SEND, 0, len, 0);
        sched_send(s, next, BUF_TMP, 0, len, rx);
    }
}

static weft_status_t ring_build(const sched_args_t *a, sched_t *s)
{
    size_t esz = weft_dtype_size(a->dtype);
    switch (a->coll) {
    case COLL_ALLREDUCE:      ring_allreduce(a, esz, s); break;
    case COLL_REDUCE_SCATTER: ring_reduce_scatter(a, esz, s); break;
    case COLL_ALLGATHER:      ring_allgather(a, esz, s); break;
    case COLL_BROADCAST:      chain_broadcast(a, esz, s); break;
    case COLL_REDUCE:         chain_reduce(a, esz, s); break;
    default:                  return WEFT_ERR_INTERNAL;
    }
    return WEFT_OK;
}

static int ring_supports(const sched_args_t *a)
{
    return a->nranks > 1 && (a->coll == COLL_ALLREDUCE || a->coll == COLL_REDUCE_SCATTER ||
                             a->coll == COLL_ALLGATHER || a->coll == COLL_BROADCAST ||
                             a->coll == COLL_REDUCE);
}

/* n-1 hops per phase; a pipelined chain moves its S bytes over each link once. */
static double ring_cost(const sched_args_t *a, const algo_model_t *m)
{
    double n = a->nranks, S = (double)algo_rank_bytes(a);
    switch (a->coll) {
    case COLL_ALLREDUCE:      return algo_time(m, a, 2 * (n - 1), 2 * (n - 1) / n * S,
                                               (n - 1) / n * S);
    case COLL_REDUCE_SCATTER: return algo_time(m, a, n - 1, (n - 1) * S, (n - 1) * S);
    case COLL_ALLGATHER:      return algo_time(m, a, n - 1, (n - 1) * S, 0);
    case COLL_BROADCAST:      return algo_time(m, a, n - 1, S, 0);
    default:                  return algo_time(m, a, n - 1, S, S);    /* reduce */
    }
}

const algo_t algo_ring_def = {
    .name = "ring", .supports = ring_supports, .cost = ring_cost, .window = algo_no_window,
    .build = ring_build,
};
