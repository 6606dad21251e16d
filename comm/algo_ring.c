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
 * Channels (WEFT_NCHANNELS, ring_channels): a ring or chain per slice, odd ones reversed.
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

/* The ring's blocks: block i of `count` elements split n ways (offsets from `base`), or,
 * with `stride`, slices of the API's per-rank blocks: block i at id * stride + base,
 * `sub` bytes long (a channel's share of every rank's block). */
typedef struct {
    size_t count, esz;
    int n;
    const int *map;     /* block i is block map[i] (a rank's, by ring position); NULL: i */
    size_t base;        /* bytes */
    size_t stride, sub; /* bytes; stride 0: the split of count */
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
    if (b->stride)
        return (size_t)blk_id(b, i) * b->stride + b->base;
    sched_block(b->count, b->n, blk_id(b, i), &off, &len);
    return b->base + off * b->esz;
}

static size_t blk_len(const blocks_t *b, int i)
{
    size_t off, len;
    if (b->stride)
        return b->sub;
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
            sched_send(s, g->right, BUF_SEND, b->base, blk_len(b, sb), -1);
        else
            sched_send(s, g->right, BUF_RECV, blk_off(b, sb), blk_len(b, sb), prev);
        prev = sched_recv(s, g->left, BUF_RECV, blk_off(b, rb), blk_len(b, rb));
    }
}

/* Each builder below runs one channel: the slice [off, off + len) bytes of the buffer
 * (all-reduce, broadcast, reduce), or of every rank's block (reduce-scatter, all-gather). */
static void ring_allreduce(const ring_t *g, size_t esz, size_t off, size_t len, sched_t *s)
{
    blocks_t b = { len / esz, esz, g->n, NULL, off, 0, 0 };
    int last = ring_rs_into_recv(g, &b, s);
    ring_ag_from(g, &b, g->pos + 1, last, BUF_RECV, s);
}

/* Rank r ends with block r in RECV; partial sums travel in TMP (n blocks). */
static void ring_reduce_scatter(const sched_args_t *a, const ring_t *g, size_t esz,
                                size_t off, size_t len, sched_t *s)
{
    int r = g->pos, n = g->n;
    size_t blk = a->count * esz;
    int prev = -1;
    s->tmp_bytes = blk * (size_t)n;
    for (int k = 0; k < n - 1; k++) {
        size_t sb = (size_t)ring_rank(g, r - k - 1) * blk + off,
               rb = (size_t)ring_rank(g, r - k - 2) * blk + off;
        if (k == 0)
            sched_send(s, g->right, BUF_SEND, sb, len, -1);
        else
            sched_send(s, g->right, BUF_TMP, sb, len, prev);
        if (k == n - 2)
            sched_recv_reduce(s, g->left, BUF_RECV, off, BUF_SEND, rb, len, 1);
        else
            prev = sched_recv_reduce(s, g->left, BUF_TMP, rb, BUF_SEND, rb, len, 0);
    }
}

static void ring_allgather(const sched_args_t *a, const ring_t *g, size_t esz, size_t off,
                           size_t len, sched_t *s)
{
    blocks_t b = { a->count * (size_t)g->n, esz, g->n, g->order, off, a->count * esz, len };
    if (!a->inplace)
        sched_copy(s, BUF_RECV, blk_off(&b, g->pos), BUF_SEND, off, len);
    ring_ag_from(g, &b, g->pos, -1, BUF_SEND, s);
}

static void chain_broadcast(const sched_args_t *a, const ring_t *g, size_t off, size_t len,
                            sched_t *s)
{
    int n = g->n, pos = SCHED_MOD(g->pos - ring_pos(g, a->root), n);
    if (pos == 0) {
        if (!a->inplace)
            sched_copy(s, BUF_RECV, off, BUF_SEND, off, len);
        sched_send(s, g->right, BUF_SEND, off, len, -1);
    } else if (pos == n - 1) {
        sched_recv(s, g->left, BUF_RECV, off, len);
    } else {
        int rx = sched_recv(s, g->left, BUF_RECV, off, len);
        sched_send(s, g->right, BUF_RECV, off, len, rx);
    }
}

/* Chain root+1 -> root+2 -> ... -> root (ring positions); partial results travel in TMP. */
static void chain_reduce(const sched_args_t *a, const ring_t *g, size_t esz, size_t off,
                         size_t len, sched_t *s)
{
    int n = g->n, pos = SCHED_MOD(g->pos - ring_pos(g, a->root) - 1, n);
    if (pos == 0) {
        sched_send(s, g->right, BUF_SEND, off, len, -1);
    } else if (pos == n - 1) {
        sched_recv_reduce(s, g->left, BUF_RECV, off, BUF_SEND, off, len, 1);
    } else {
        s->tmp_bytes = a->count * esz;
        int rx = sched_recv_reduce(s, g->left, BUF_TMP, off, BUF_SEND, off, len, 0);
        sched_send(s, g->right, BUF_TMP, off, len, rx);
    }
}

/* The tuner's offer (algo.h). */
int algo_channels(const sched_args_t *a, long want)
{
    size_t most = a->count * weft_dtype_size(a->dtype) / ALGO_CHANNEL_MIN;
    return (int)(most < (size_t)want ? (most ? most : 1) : (size_t)want);
}

/* Channels: a call's elements (all-reduce, broadcast, reduce) or every rank's block
 * (reduce-scatter, all-gather) split into nchannels slices, one ring (or chain) each,
 * odd channels running the ring the other way round, so with more than 2 ranks both
 * directions of every link carry data; at most one channel per element. */
int ring_channels(const sched_args_t *a)
{
    int c = a->nchannels > 1 ? a->nchannels : 1;
    size_t e = a->count;
    if (c > FRAME_CHANNELS)
        c = FRAME_CHANNELS;
    if (e < (size_t)c)
        c = e ? (int)e : 1;
    return c;
}

static weft_status_t ring_build(const sched_args_t *a, sched_t *s)
{
    size_t esz = weft_dtype_size(a->dtype);
    int n = a->nranks, nch = ring_channels(a);
    int *order = malloc(2 * (size_t)n * sizeof(int));
    if (order == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "ring: out of memory");
    int *reverse = order + n;
    algo_ring_order(&a->layout, n, order);
    for (int i = 0; i < n; i++)
        reverse[i] = order[n - 1 - i];
    weft_status_t st = WEFT_OK;
    for (int c = 0; c < nch && st == WEFT_OK; c++) {
        ring_t g = { .n = n, .order = c % 2 ? reverse : order };
        g.pos = ring_pos(&g, a->rank);
        g.left = ring_rank(&g, g.pos - 1);
        g.right = ring_rank(&g, g.pos + 1);
        size_t eoff, elen;
        sched_block(a->count, nch, c, &eoff, &elen);
        size_t off = eoff * esz, len = elen * esz;
        int first = s->nsteps;
        switch (a->coll) {
        case COLL_ALLREDUCE:      ring_allreduce(&g, esz, off, len, s); break;
        case COLL_REDUCE_SCATTER: ring_reduce_scatter(a, &g, esz, off, len, s); break;
        case COLL_ALLGATHER:      ring_allgather(a, &g, esz, off, len, s); break;
        case COLL_BROADCAST:      chain_broadcast(a, &g, off, len, s); break;
        case COLL_REDUCE:         chain_reduce(a, &g, esz, off, len, s); break;
        default:                  st = WEFT_ERR_INTERNAL; break;
        }
        for (int i = first; i < s->nsteps; i++)
            s->steps[i].channel = (uint8_t)c;
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
