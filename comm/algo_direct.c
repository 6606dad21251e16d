/*
 * algo_direct.c - one-shot algorithms: every rank talks to every peer at once.
 *
 * For small messages latency is everything: one exchange instead of 2(n-1) ring steps.
 * Reductions receive each peer's contribution into its own TMP slot (own data is
 * copied into slot `rank`) and fold the slots in rank order, so every rank computes
 * exactly the same ((x0 op x1) op x2)... and results are bit-identical across ranks.
 * All-reduce on 2 ranks reduces straight out of the peer's frame instead, operands in
 * rank order (x0 op x1 on both): no copy, no fold, no scratch.
 * The fold runs after every other step, so in-place calls never overwrite data that is
 * still being sent. Also here: alltoall (pairwise, any size) and barrier.
 *
 * Invariant: pure functions of their arguments, like every algorithm.
 */
#include "algo.h"
#include "frame.h"
#include "util.h"

static void direct_allreduce(const sched_args_t *a, size_t esz, sched_t *s)
{
    int r = a->rank, n = a->nranks;
    size_t len = a->count * esz;
    if (n == 2) {       /* reduce straight out of the frame, x0 op x1 on both ranks */
        int tx = sched_send(s, 1 - r, BUF_SEND, 0, len, -1);
        int rx = sched_recv_reduce(s, 1 - r, BUF_RECV, 0, BUF_SEND, 0, len, 1);
        if (rx >= 0) {
            /* in place RECV is SEND: a frame's result may land only where the send has
             * taken the bytes. Per frame, not the whole send: both ranks wait on their
             * sends, which wait on the peer's receive, past one staging buffer. */
            if (a->inplace)
                s->steps[rx].stream = tx;
            s->steps[rx].swap = r == 1;
        }
        return;
    }
    s->tmp_bytes = len * (size_t)n;
    sched_copy(s, BUF_TMP, (size_t)r * len, BUF_SEND, 0, len);
    SCHED_FOR_PEERS(p, k, r, n) {
        sched_send(s, p, BUF_SEND, 0, len, -1);
        sched_recv(s, p, BUF_TMP, (size_t)p * len, len);
    }
    sched_fold(s, BUF_RECV, 0, BUF_TMP, 0, len, n, len, 1);
}

static void direct_reduce_scatter(const sched_args_t *a, size_t esz, sched_t *s)
{
    int r = a->rank, n = a->nranks;
    size_t blk = a->count * esz;
    s->tmp_bytes = blk * (size_t)n;
    sched_copy(s, BUF_TMP, (size_t)r * blk, BUF_SEND, (size_t)r * blk, blk);
    SCHED_FOR_PEERS(p, k, r, n) {
        sched_send(s, p, BUF_SEND, (size_t)p * blk, blk, -1);
        sched_recv(s, p, BUF_TMP, (size_t)p * blk, blk);
    }
    sched_fold(s, BUF_RECV, 0, BUF_TMP, 0, blk, n, blk, 1);
}

static void direct_allgather(const sched_args_t *a, size_t esz, sched_t *s)
{
    int r = a->rank, n = a->nranks;
    size_t blk = a->count * esz;
    if (!a->inplace)
        sched_copy(s, BUF_RECV, (size_t)r * blk, BUF_SEND, 0, blk);
    SCHED_FOR_PEERS(p, k, r, n) {
        sched_send(s, p, BUF_SEND, 0, blk, -1);
        sched_recv(s, p, BUF_RECV, (size_t)p * blk, blk);
    }
}

static void direct_broadcast(const sched_args_t *a, size_t esz, sched_t *s)
{
    int r = a->rank, n = a->nranks;
    size_t len = a->count * esz;
    if (r != a->root) {
        sched_recv(s, a->root, BUF_RECV, 0, len);
        return;
    }
    if (!a->inplace)
        sched_copy(s, BUF_RECV, 0, BUF_SEND, 0, len);
    SCHED_FOR_PEERS(p, k, r, n)
        sched_send(s, p, BUF_SEND, 0, len, -1);
}

static void direct_reduce(const sched_args_t *a, size_t esz, sched_t *s)
{
    int r = a->rank, n = a->nranks;
    size_t len = a->count * esz;
    if (r != a->root) {
        sched_send(s, a->root, BUF_SEND, 0, len, -1);
        return;
    }
    s->tmp_bytes = len * (size_t)n;
    sched_copy(s, BUF_TMP, (size_t)r * len, BUF_SEND, 0, len);
    SCHED_FOR_PEERS(p, k, r, n)
        sched_recv(s, p, BUF_TMP, (size_t)p * len, len);
    sched_fold(s, BUF_RECV, 0, BUF_TMP, 0, len, n, len, 1);
}

/* Pairwise exchange; in place, the outgoing blocks are first saved in TMP. */
static void direct_alltoall(const sched_args_t *a, size_t esz, sched_t *s)
{
    int r = a->rank, n = a->nranks;
    size_t blk = a->count * esz;
    int src = BUF_SEND, saved = -1;
    if (a->inplace) {
        s->tmp_bytes = blk * (size_t)n;
        saved = sched_copy(s, BUF_TMP, 0, BUF_SEND, 0, blk * (size_t)n);
        src = BUF_TMP;
    } else {
        sched_copy(s, BUF_RECV, (size_t)r * blk, BUF_SEND, (size_t)r * blk, blk);
    }
    SCHED_FOR_PEERS(p, k, r, n) {
        int i = sched_send(s, p, src, (size_t)p * blk, blk, -1);
        int j = sched_recv(s, SCHED_MOD(r - k, n), BUF_RECV, (size_t)SCHED_MOD(r - k, n) * blk, blk);
        if (i >= 0 && j >= 0)   /* nothing lands in RECV before it is saved */
            s->steps[i].dep = s->steps[j].dep = saved;
    }
}

static void direct_barrier(const sched_args_t *a, sched_t *s)
{
    SCHED_FOR_PEERS(p, k, a->rank, a->nranks) {
        sched_send(s, p, BUF_NONE, 0, 0, -1);
        sched_recv(s, p, BUF_NONE, 0, 0);
    }
}

static weft_status_t direct_build(const sched_args_t *a, sched_t *s)
{
    size_t esz = weft_dtype_size(a->dtype);
    switch (a->coll) {
    case COLL_ALLREDUCE:      direct_allreduce(a, esz, s); break;
    case COLL_REDUCE_SCATTER: direct_reduce_scatter(a, esz, s); break;
    case COLL_ALLGATHER:      direct_allgather(a, esz, s); break;
    case COLL_BROADCAST:      direct_broadcast(a, esz, s); break;
    case COLL_REDUCE:         direct_reduce(a, esz, s); break;
    case COLL_ALLTOALL:       direct_alltoall(a, esz, s); break;
    case COLL_BARRIER:        direct_barrier(a, s); break;
    default:                  return WEFT_ERR_INTERNAL;
    }
    return WEFT_OK;
}

static int direct_supports(const sched_args_t *a)
{
    return a->nranks > 1 && a->coll >= COLL_ALLREDUCE && a->coll <= COLL_BARRIER &&
           a->coll != COLL_SEND && a->coll != COLL_RECV;
}

/* One hop; the busiest rank moves (and reduces) n-1 contributions, 2 ranks' all-reduce
 * one, and passes n-1 frames each way where a hop passes one (the model's overhead for
 * each of the others: those of its host's ranks at the shm rate, the rest at the
 * network's; the hop's own at its link's). */
static double direct_cost(const sched_args_t *a, const algo_model_t *m)
{
    double n = a->nranks, S = (double)algo_rank_bytes(a), in = (n - 1) * S;
    int reduces = a->coll == COLL_ALLREDUCE || a->coll == COLL_REDUCE_SCATTER ||
                  a->coll == COLL_REDUCE;
    double local = a->layout.nhosts > 1 ? WEFT_MAX(a->layout.per_host, 1) - 1 : n - 1;
    double frames = 2 * (local * m->overhead[ALGO_LINK_SHM] +
                         (n - 1 - local) * m->overhead[ALGO_LINK_NET] -
                         m->overhead[algo_link(&a->layout)]);
    frames = WEFT_MAX(frames, 0);
    if (a->coll == COLL_BARRIER)
        return algo_time(m, a, 1, 0, 0) + frames;
    return algo_time(m, a, 1, in, reduces ? in : 0) + frames;
}

/* WEFT_DIRECT_MAX: latency-bound sizes, one exchange. Among few ranks (algo.h) the
 * knob reserves them; beyond, it only bounds them and the model weighs the exchange
 * against the trees (n-1 contributions at one rank cost more than log2(n) hops). */
static int direct_window(const weft_config_t *cfg, const sched_args_t *a, size_t *lo,
                         size_t *hi)
{
    size_t cma = algo_cma_allgather_min(cfg, a);
    *lo = 0;
    *hi = cma && cma <= cfg->direct_max ? cma - 1 : cfg->direct_max;
    return algo_few_ranks(a) ? 1 : 2;
}

const algo_t algo_direct_def = {
    .name = "direct", .supports = direct_supports, .cost = direct_cost,
    .window = direct_window, .build = direct_build,
};
