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
 * The ring (and the chains) follow algo_ring_order: ranks host-major, so a ring crosses
 * each host boundary once even when ranks are placed round robin across hosts; where
 * every host's ranks are contiguous that order is the rank order and nothing changes.
 * "Rank r+1" below means the next rank in that order; all-reduce's blocks are numbered
 * by ring position, reduce-scatter's and all-gather's by rank (the API's layout).
 *
 * Invariant: every function here is pure - (args) -> schedule - and uses byte offsets.
 */
#include <stdlib.h>

#include "algo.h"
#include "frame.h"
#include "status.h"
#include "util.h"

typedef struct {
    size_t count, esz;
    int n;
    const int *map;     /* block i is block map[i] (a rank's, by ring position); NULL: i */
} blocks_t;

/* The ring: this rank's position and neighbours in the host-aware order. */
typedef struct {
    int n, pos, left, right;
    const int *order;   /* [n] rank at each position */
} ring_t;

static int blk_id(const blocks_t *b, int i)
{
    int k = SCHED_MOD(i, b->n);
    return b->map ? b->map[k] : k;
}

static size_t blk_off(const blocks_t *b, int i)
{
    size_t off, len;
    sched_block(b->count, b->n, blk_id(b, i), &off, &len);
    return off * b->esz;
}

static size_t blk_len(const blocks_t *b, int i)
{
    size_t off, len;
    sched_block(b->count, b->n, blk_id(b, i), &off, &len);
    return len * b->esz;
}

static int ring_rank(const ring_t *g, int pos)
{
    return g->order[SCHED_MOD(pos, g->n)];
}

static int ring_pos(const ring_t *g, int rank)
{
    for (int i = 0; i < g->n; i++)
        if (g->order[i] == rank)
            return i;
    return 0;
}

void algo_ring_order(const sched_layout_t *l, int n, int *order)
{
    int i = 0;
    if (l->rank_host == NULL || l->nhosts <= 1) {
        for (; i < n; i++)
            order[i] = i;
        return;
    }
    for (int h = 0; h < l->nhosts; h++)
        for (int p = 0; p < n; p++)
            if (l->rank_host[p] == h)
                order[i++] = p;
}

/* Reduce-scatter phase of allreduce: block pos+1 (blocks by ring position) ends fully
 * reduced in RECV. Returns the index of the last receive (the producer of that block). */
static int ring_rs_into_recv(const ring_t *g, const blocks_t *b, sched_t *s)
{
    int r = g->pos, n = g->n, prev = -1;
    for (int k = 0; k < n - 1; k++) {
        int sb = r - k, rb = r - k - 1;
        if (k == 0)
            sched_send(s, g->right, BUF_SEND, blk_off(b, sb), blk_len(b, sb), -1);
        else
            sched_send(s, g->right, BUF_RECV, blk_off(b, sb), blk_len(b, sb), prev);
        prev = sched_recv_reduce(s, g->left, BUF_RECV, blk_off(b, rb), BUF_SEND,
                                 blk_off(b, rb), blk_len(b, rb), k == n - 2);
    }
    return prev;
}

/* All-gather phase: block first_block (produced by `prev`) travels around the ring in
 * RECV. */
static void ring_ag_from(const ring_t *g, const blocks_t *b, int first_block, int prev,
                         int first_src, sched_t *s)
{
    int n = g->n;
    for (int k = 0; k < n - 1; k++) {
        int sb = first_block - k, rb = first_block - k - 1;
        if (k == 0 && first_src == BUF_SEND)
            sched_send(s, g->right, BUF_SEND, 0, blk_len(b, sb), -1);
        else
            sched_send(s, g->right, BUF_RECV, blk_off(b, sb), blk_len(b, sb), prev);
        prev = sched_recv(s, g->left, BUF_RECV, blk_off(b, rb), blk_len(b, rb));
    }
}

static void ring_allreduce(const sched_args_t *a, const ring_t *g, size_t esz, sched_t *s)
{
    blocks_t b = { a->count, esz, g->n, NULL };
    int last = ring_rs_into_recv(g, &b, s);
    ring_ag_from(g, &b, g->pos + 1, last, BUF_RECV, s);
}

/* Rank r ends with block r in RECV; partial sums travel in TMP (n blocks). */
static void ring_reduce_scatter(const sched_args_t *a, const ring_t *g, size_t esz,
                                sched_t *s)
{
    int r = g->pos, n = g->n;
    size_t blk = a->count * esz;
    int prev = -1;
    s->tmp_bytes = blk * (size_t)n;
    for (int k = 0; k < n - 1; k++) {
        size_t sb = (size_t)ring_rank(g, r - k - 1), rb = (size_t)ring_rank(g, r - k - 2);
        if (k == 0)
            sched_send(s, g->right, BUF_SEND, sb * blk, blk, -1);
        else
            sched_send(s, g->right, BUF_TMP, sb * blk, blk, prev);
        if (k == n - 2)
            sched_recv_reduce(s, g->left, BUF_RECV, 0, BUF_SEND, rb * blk, blk, 1);
        else
            prev = sched_recv_reduce(s, g->left, BUF_TMP, rb * blk, BUF_SEND, rb * blk, blk,
                                     0);
    }
}

static void ring_allgather(const sched_args_t *a, const ring_t *g, size_t esz, sched_t *s)
{
    blocks_t b = { a->count * (size_t)g->n, esz, g->n, g->order };
    if (!a->inplace)
        sched_copy(s, BUF_RECV, blk_off(&b, g->pos), BUF_SEND, 0, blk_len(&b, g->pos));
    ring_ag_from(g, &b, g->pos, -1, BUF_SEND, s);
}

static void chain_broadcast(const sched_args_t *a, const ring_t *g, size_t esz, sched_t *s)
{
    int n = g->n, pos = SCHED_MOD(g->pos - ring_pos(g, a->root), n);
    size_t len = a->count * esz;
    if (pos == 0) {
        if (!a->inplace)
            sched_copy(s, BUF_RECV, 0, BUF_SEND, 0, len);
        sched_send(s, g->right, BUF_SEND, 0, len, -1);
    } else if (pos == n - 1) {
        sched_recv(s, g->left, BUF_RECV, 0, len);
    } else {
        int rx = sched_recv(s, g->left, BUF_RECV, 0, len);
        sched_send(s, g->right, BUF_RECV, 0, len, rx);
    }
}

/* Chain root+1 -> root+2 -> ... -> root (ring positions); partial results travel in TMP. */
static void chain_reduce(const sched_args_t *a, const ring_t *g, size_t esz, sched_t *s)
{
    int n = g->n, pos = SCHED_MOD(g->pos - ring_pos(g, a->root) - 1, n);
    size_t len = a->count * esz;
    if (pos == 0) {
        sched_send(s, g->right, BUF_SEND, 0, len, -1);
    } else if (pos == n - 1) {
        sched_recv_reduce(s, g->left, BUF_RECV, 0, BUF_SEND, 0, len, 1);
    } else {
        s->tmp_bytes = len;
        int rx = sched_recv_reduce(s, g->left, BUF_TMP, 0, BUF_SEND, 0, len, 0);
        sched_send(s, g->right, BUF_TMP, 0, len, rx);
    }
}

static weft_status_t ring_build(const sched_args_t *a, sched_t *s)
{
    size_t esz = weft_dtype_size(a->dtype);
    ring_t g = { .n = a->nranks };
    int *order = malloc((size_t)a->nranks * sizeof(int));
    if (order == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "ring: out of memory");
    algo_ring_order(&a->layout, a->nranks, order);
    g.order = order;
    g.pos = ring_pos(&g, a->rank);
    g.left = ring_rank(&g, g.pos - 1);
    g.right = ring_rank(&g, g.pos + 1);
    weft_status_t st = WEFT_OK;
    switch (a->coll) {
    case COLL_ALLREDUCE:      ring_allreduce(a, &g, esz, s); break;
    case COLL_REDUCE_SCATTER: ring_reduce_scatter(a, &g, esz, s); break;
    case COLL_ALLGATHER:      ring_allgather(a, &g, esz, s); break;
    case COLL_BROADCAST:      chain_broadcast(a, &g, esz, s); break;
    case COLL_REDUCE:         chain_reduce(a, &g, esz, s); break;
    default:                  st = WEFT_ERR_INTERNAL; break;
    }
    free(order);
    return st;
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
