/*
 * algo_hier.c - hierarchical collectives: rings inside each host, rings across hosts.
 *
 * Ranks on H hosts of P ranks each (a uniform layout; hosts with different rank counts
 * are declined, and the ring runs them). "Rank (g, j)" is local rank j of host g: hosts
 * numbered as the layout numbers them, ranks of a host in rank order. Rank (g, j)'s
 * counterparts are the ranks (*, j): one per host, joined by a ring across hosts, so the
 * bytes between hosts go over H rings of 1/P of the data each instead of one ring that
 * moves all of it, and intra-host hops (shm) carry the rest.
 *
 * allreduce      1. reduce-scatter inside the host: the vector in P shards, shard j ends
 *                   host-reduced on local rank j-1 (in RECV), reduced from local rank j
 *                   around the host's ring;
 *                2. all-reduce of that shard among the counterparts: a ring across
 *                   hosts over H sub-blocks, sub-block t reduced from host t around;
 *                3. all-gather of the shards inside the host.
 * reduce_scatter 1. reduce-scatter inside the host where local rank j's shard is the
 *                   blocks of every rank (g, j), partial sums in TMP; 2. reduce-scatter of
 *                   those H blocks across hosts, block (g, j) ending on rank (g, j).
 *                   Block (g, j) is reduced from local rank j+1 on each host and the
 *                   host partials from host g+1 around.
 * allgather      1. all-gather among the counterparts; 2. all-gather inside the host,
 *                   local rank j's shard being the blocks of every rank (g, j).
 * broadcast      a chain across hosts among the root's counterparts, then a chain inside
 *                each host from the rank that holds the data.
 * Pipelining: inside each phase as in the ring (stream dependencies, frame by frame),
 * and across phases too: every block a phase hands on is produced by one step, on which
 * the next phase's send streams (all-reduce therefore moves its shards in H pieces in
 * every phase: piece t of shard j is sub-block t of step 2). A receive that adds to a
 * block the previous phase produced waits for that step (dep). No phase waits for a
 * whole earlier one; a receive may overwrite a block an earlier send is still reading
 * only where the incoming bytes already depend on that send's (as in the ring).
 * The reduction order is fixed by the layout alone, so every rank of an all-reduce ends
 * with the same bits (tests/test_algos.c reproduces it).
 *
 * Invariant: pure functions of their arguments, like every algorithm; supports and cost
 * read only the layout's shared fields (nhosts, per_host, uniform, rank_host).
 */
#include <stdlib.h>

#include "algo.h"
#include "frame.h"
#include "status.h"
#include "util.h"

typedef struct {
    int H, P, h, l;     /* hosts, ranks per host, this rank's host and local rank */
    int *hr;            /* [H * P] host-major: rank (g, j) is hr[g * P + j] */
    size_t esz;
} hier_t;

/* Rank (g, j), both taken around. */
static int at(const hier_t *x, int g, int j)
{
    return x->hr[SCHED_MOD(g, x->H) * x->P + SCHED_MOD(j, x->P)];
}

/* Part i of n of elements [base, base + count): byte offset and length. */
static void part(const hier_t *x, size_t base, size_t count, int n, int i, size_t *off,
                 size_t *len)
{
    size_t o, l;
    sched_block(count, n, SCHED_MOD(i, n), &o, &l);
    *off = (base + o) * x->esz;
    *len = l * x->esz;
}

/* Piece (m, t): part t of H of shard m of P: byte offset and length. */
static void piece(const hier_t *x, size_t count, int m, int t, size_t *off, size_t *len)
{
    size_t so, sl;
    sched_block(count, x->P, SCHED_MOD(m, x->P), &so, &sl);
    part(x, so, sl, x->H, t, off, len);
}

/* Every phase moves pieces, so each piece's next phase streams on the step that
 * produced it. last[t]: the latest producer of piece (*, t) on this rank. */
static weft_status_t hier_allreduce(const sched_args_t *a, const hier_t *x, sched_t *s)
{
    int H = x->H, P = x->P, h = x->h, l = x->l, j = SCHED_MOD(l + 1, P), prev = -1;
    int right = at(x, h, l + 1), left = at(x, h, l - 1);
    int nr = at(x, h + 1, l), nl = at(x, h - 1, l);
    size_t o, n, c = a->count;
    int *last = malloc((size_t)H * sizeof(int));
    if (last == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "hier: out of memory");
    /* 1. shard j ends host-reduced in RECV on local rank j-1 */
    for (int k = 0; k < P - 1; k++) {
        for (int t = 0; t < H; t++) {
            piece(x, c, l - k, t, &o, &n);
            sched_send(s, right, k ? BUF_RECV : BUF_SEND, o, n, k ? last[t] : -1);
        }
        for (int t = 0; t < H; t++) {
            piece(x, c, l - k - 1, t, &o, &n);
            last[t] = sched_recv_reduce(s, left, BUF_RECV, o, BUF_SEND, o, n, 0);
        }
    }
    /* 2. a ring all-reduce of shard j's pieces among the counterparts, in RECV */
    for (int k = 0; k < H - 1; k++) {
        int ts = SCHED_MOD(h - k, H), tr = SCHED_MOD(h - k - 1, H);
        piece(x, c, j, ts, &o, &n);
        sched_send(s, nr, BUF_RECV, o, n, k ? prev : last[ts]);
        piece(x, c, j, tr, &o, &n);
        int i = sched_recv_reduce(s, nl, BUF_RECV, o, BUF_RECV, o, n, k == H - 2);
        if (i >= 0)
            s->steps[i].dep = last[tr];     /* adds to this host's partial */
        prev = i;
    }
    last[SCHED_MOD(h + 1, H)] = prev;
    for (int k = 0; k < H - 1; k++) {
        int ts = SCHED_MOD(h + 1 - k, H), tr = SCHED_MOD(h - k, H);
        piece(x, c, j, ts, &o, &n);
        sched_send(s, nr, BUF_RECV, o, n, prev);
        piece(x, c, j, tr, &o, &n);
        prev = last[tr] = sched_recv(s, nl, BUF_RECV, o, n);
    }
    /* 3. the shards around the host, piece by piece as they are done */
    for (int k = 0; k < P - 1; k++) {
        for (int t = 0; t < H; t++) {
            piece(x, c, j - k, t, &o, &n);
            sched_send(s, right, BUF_RECV, o, n, last[t]);
        }
        for (int t = 0; t < H; t++) {
            piece(x, c, j - k - 1, t, &o, &n);
            last[t] = sched_recv(s, left, BUF_RECV, o, n);
        }
    }
    free(last);
    return WEFT_OK;
}

static weft_status_t hier_reduce_scatter(const sched_args_t *a, const hier_t *x, sched_t *s)
{
    int H = x->H, P = x->P, h = x->h, l = x->l, prev = -1;
    int right = at(x, h, l + 1), left = at(x, h, l - 1);
    int nr = at(x, h + 1, l), nl = at(x, h - 1, l);
    size_t blk = a->count * x->esz;
    int *part1 = malloc(2 * (size_t)H * sizeof(int)), *last = part1 + H;
    if (part1 == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "hier: out of memory");
    s->tmp_bytes = blk * (size_t)(H * P);
    /* 1. around the host: local rank j's shard is blocks (*, j); partial sums in TMP.
     * part1[g]: the step that produced block (g, l)'s host partial, last[g] block
     * (g, l-k-2)'s latest. */
    for (int k = 0; k < P - 1; k++) {
        for (int g = 0; g < H; g++)
            sched_send(s, right, k ? BUF_TMP : BUF_SEND, (size_t)at(x, g, l - k - 1) * blk,
                       blk, k ? last[g] : -1);
        for (int g = 0; g < H; g++) {
            size_t q = (size_t)at(x, g, l - k - 2) * blk;
            last[g] = sched_recv_reduce(s, left, BUF_TMP, q, BUF_SEND, q, blk, 0);
        }
    }
    for (int g = 0; g < H; g++)
        part1[g] = last[g];
    /* 2. across hosts: blocks (*, l), block (g, l) ending in RECV on rank (g, l) */
    for (int k = 0; k < H - 1; k++) {
        int gs = SCHED_MOD(h - k - 1, H), gr = SCHED_MOD(h - k - 2, H);
        size_t qs = (size_t)at(x, gs, l) * blk, qr = (size_t)at(x, gr, l) * blk;
        sched_send(s, nr, BUF_TMP, qs, blk, k ? prev : part1[gs]);
        int i = k == H - 2 ? sched_recv_reduce(s, nl, BUF_RECV, 0, BUF_TMP, qr, blk, 1)
                           : sched_recv_reduce(s, nl, BUF_TMP, qr, BUF_TMP, qr, blk, 0);
        if (i >= 0)
            s->steps[i].dep = part1[gr];    /* adds to this host's partial */
        prev = i;
    }
    free(part1);
    return WEFT_OK;
}

static weft_status_t hier_allgather(const sched_args_t *a, const hier_t *x, sched_t *s)
{
    int H = x->H, P = x->P, h = x->h, l = x->l, prev = -1;
    int right = at(x, h, l + 1), left = at(x, h, l - 1);
    int nr = at(x, h + 1, l), nl = at(x, h - 1, l);
    size_t blk = a->count * x->esz;
    int *rx = malloc((size_t)H * sizeof(int));  /* producer of block (g, l-k) in RECV */
    if (rx == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "hier: out of memory");
    if (!a->inplace)
        sched_copy(s, BUF_RECV, (size_t)a->rank * blk, BUF_SEND, 0, blk);
    /* 1. among the counterparts: blocks (*, l) */
    rx[h] = -1;
    for (int k = 0; k < H - 1; k++) {
        int gs = SCHED_MOD(h - k, H), gr = SCHED_MOD(h - k - 1, H);
        if (k == 0)
            sched_send(s, nr, BUF_SEND, 0, blk, -1);
        else
            sched_send(s, nr, BUF_RECV, (size_t)at(x, gs, l) * blk, blk, prev);
        prev = rx[gr] = sched_recv(s, nl, BUF_RECV, (size_t)at(x, gr, l) * blk, blk);
    }
    /* 2. around the host: local rank j's shard is blocks (*, j) */
    for (int k = 0; k < P - 1; k++) {
        for (int g = 0; g < H; g++) {
            if (k == 0 && g == h)
                sched_send(s, right, BUF_SEND, 0, blk, -1);
            else
                sched_send(s, right, BUF_RECV, (size_t)at(x, g, l - k) * blk, blk, rx[g]);
        }
        for (int g = 0; g < H; g++)
            rx[g] = sched_recv(s, left, BUF_RECV, (size_t)at(x, g, l - k - 1) * blk, blk);
    }
    free(rx);
    return WEFT_OK;
}

static void hier_broadcast(const sched_args_t *a, const hier_t *x, sched_t *s)
{
    int H = x->H, P = x->P, h = x->h, l = x->l, hroot = 0, lroot = 0, rx = -1;
    size_t len = a->count * x->esz;
    for (int i = 0; i < H * P; i++)
        if (x->hr[i] == a->root)
            hroot = i / P, lroot = i % P;
    int root = a->rank == a->root;
    if (root && !a->inplace)
        sched_copy(s, BUF_RECV, 0, BUF_SEND, 0, len);
    if (l == lroot) {   /* 1. the chain across hosts */
        int pos = SCHED_MOD(h - hroot, H);
        if (pos > 0)
            rx = sched_recv(s, at(x, h - 1, l), BUF_RECV, 0, len);
        if (pos < H - 1)
            sched_send(s, at(x, h + 1, l), root ? BUF_SEND : BUF_RECV, 0, len, rx);
    }
    /* 2. the chain inside the host from local rank lroot */
    int pos = SCHED_MOD(l - lroot, P);
    if (pos > 0)
        rx = sched_recv(s, at(x, h, l - 1), BUF_RECV, 0, len);
    if (pos < P - 1)
        sched_send(s, at(x, h, l + 1), root ? BUF_SEND : BUF_RECV, 0, len, rx);
}

static weft_status_t hier_build(const sched_args_t *a, sched_t *s)
{
    const sched_layout_t *ly = &a->layout;
    hier_t x = { .H = ly->nhosts, .P = ly->per_host, .esz = weft_dtype_size(a->dtype) };
    x.hr = malloc((size_t)a->nranks * sizeof(int));
    if (x.hr == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "hier: out of memory");
    algo_ring_order(ly, a->nranks, x.hr);       /* host-major: (g, j) at g * P + j */
    for (int i = 0; i < a->nranks; i++)
        if (x.hr[i] == a->rank)
            x.h = i / x.P, x.l = i % x.P;
    weft_status_t st = WEFT_OK;
    switch (a->coll) {
    case COLL_ALLREDUCE:      st = hier_allreduce(a, &x, s); break;
    case COLL_REDUCE_SCATTER: st = hier_reduce_scatter(a, &x, s); break;
    case COLL_ALLGATHER:      st = hier_allgather(a, &x, s); break;
    case COLL_BROADCAST:      hier_broadcast(a, &x, s); break;
    default:                  st = WEFT_ERR_INTERNAL; break;
    }
    free(x.hr);
    return st;
}

/* Ranks on more than one host, more than one on each, as many on each: where there is a
 * hierarchy to use and the layout says which rank is where. */
static int hier_supports(const sched_args_t *a)
{
    const sched_layout_t *l = &a->layout;
    return l->rank_host != NULL && l->nhosts > 1 && l->per_host > 1 && l->uniform &&
           l->nhosts * l->per_host == a->nranks &&
           (a->coll == COLL_ALLREDUCE || a->coll == COLL_REDUCE_SCATTER ||
            a->coll == COLL_ALLGATHER || a->coll == COLL_BROADCAST);
}

/* Each phase at its own link class: intra-host hops at SHM, inter-host at NET (the ring's
 * model charges every hop at NET once ranks span hosts). Broadcast's chains pipeline: the
 * data crosses the slowest link once. Reductions add up to the ring's (n-1)/n S. */
static double hier_cost(const sched_args_t *a, const algo_model_t *m)
{
    double H = a->layout.nhosts, P = a->layout.per_host, n = H * P;
    double S = (double)algo_rank_bytes(a), g = m->gamma;
    double as = m->alpha[ALGO_LINK_SHM], bs = m->beta[ALGO_LINK_SHM];
    double an = m->alpha[ALGO_LINK_NET], bn = m->beta[ALGO_LINK_NET];
    switch (a->coll) {
    case COLL_ALLREDUCE:
        return 2 * (P - 1) * as + 2 * (P - 1) / P * S * bs + 2 * (H - 1) * an +
               2 * (H - 1) / H * (S / P) * bn + (n - 1) / n * S * g;
    case COLL_REDUCE_SCATTER:
        return (P - 1) * as + (P - 1) * H * S * bs + (H - 1) * an + (H - 1) * S * bn +
               (n - 1) * S * g;
    case COLL_ALLGATHER:
        return (P - 1) * as + (P - 1) * H * S * bs + (H - 1) * an + (H - 1) * S * bn;
    default:            /* broadcast */
        return (P - 1) * as + (H - 1) * an + S * bn;
    }
}

const algo_t algo_hier_def = {
    .name = "hier", .supports = hier_supports, .cost = hier_cost, .window = algo_no_window,
    .build = hier_build,
};
