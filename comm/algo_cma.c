/*
 * algo_cma.c - single-copy collectives for ranks on one host.
 *
 * Instead of pushing data through the rings (copy in, copy out), each rank reads what
 * it needs straight out of its peers' buffers with the transports' one-sided get
 * (shm: process_vm_readv; ucx: ucp_get_nbx with the packed keys the META frame carries;
 * engine_rma.c), so every byte crosses memory once. A call starts with every rank telling its peers
 * where its buffers are (a small META frame), and ends with a "done" exchange, so no
 * rank returns (and lets the caller reuse its buffers) while a peer may still read them.
 *
 * allreduce       rank r reduces block r: it reads block r of every peer's send buffer
 *                 in cache-sized chunks and reduces into its own recv; it then tells
 *                 the peers "ready" and reads their reduced blocks into its recv
 * reduce_scatter  the first half of that, into recv
 * allgather       every rank reads every peer's send buffer into its recv
 * broadcast       every non-root reads the root's buffer
 *
 * In place is safe by construction: a rank overwrites block p of its buffer only after
 * rank p said "ready", and p says so only after it has read that block.
 * Block b is reduced by rank b alone, so every rank ends with the same bits.
 *
 * Reads are gets, or, where the transport maps the peer's buffer (shm, for weft_mem_alloc
 * memory, mem.c), reads in place: then a reduction reads the peer's block with no
 * scratch copy and a gather is one memcpy. A call whose buffers are
 * registered on every rank finds that out in a probe (the "probe" algorithm, below) and skips the
 * address exchange here.
 */
#include <stdlib.h>

#include "algo.h"
#include "frame.h"
#include "util.h"

#define META sizeof(sched_meta_t)

/* Everyone's addresses to everyone; mi[p] = the step that receives p's. After a probe
 * (registered buffers everywhere) they were exchanged already: no step waits on them. */
static void exchange_meta(const sched_args_t *a, sched_t *s, int *mi)
{
    s->meta = 1;
    if (a->reg == SCHED_REG_ALL) {
        SCHED_FOR_PEERS(p, k, a->rank, a->nranks)
            mi[p] = -1;
        return;
    }
    SCHED_FOR_PEERS(p, k, a->rank, a->nranks) {
        sched_send(s, p, BUF_META_OUT, 0, META, -1);
        mi[p] = sched_recv(s, p, BUF_META_IN, (size_t)p * META, META);
    }
}

/* An empty frame to every peer once everything before it is done, then one from each.
 * All sends come before all receives: a send's after_all must not wait on a receive. */
static void signal_all(const sched_args_t *a, sched_t *s, int *rx)
{
    SCHED_FOR_PEERS(p, k, a->rank, a->nranks) {
        int i = sched_send(s, p, BUF_NONE, 0, 0, -1);
        if (i >= 0)
            s->steps[i].after_all = 1;
    }
    SCHED_FOR_PEERS(p, k, a->rank, a->nranks) {
        int j = sched_recv(s, p, BUF_NONE, 0, 0);
        if (rx)
            rx[p] = j;
    }
}

/* recv[block own] = send[own] op every peer's send[own], chunk by chunk through TMP. */
static void reduce_own(const sched_args_t *a, sched_t *s, const int *mi, size_t own_off,
                       size_t dst_off, size_t len)
{
    int first = 1;
    s->tmp_bytes = 2 * s->chunk;        /* two pieces in flight (engine_rma.c) */
    SCHED_FOR_PEERS(p, k, a->rank, a->nranks) {
        sched_rget_reduce(s, p, BUF_RECV, dst_off, first ? BUF_SEND : BUF_RECV,
                          first ? own_off : dst_off, BUF_SEND, own_off, len, mi[p],
                          k == a->nranks - 1);
        first = 0;
    }
}

static void cma_allreduce(const sched_args_t *a, size_t esz, sched_t *s, int *mi, int *rdy)
{
    size_t off, len;
    exchange_meta(a, s, mi);
    sched_block(a->count, a->nranks, a->rank, &off, &len);
    reduce_own(a, s, mi, off * esz, off * esz, len * esz);
    signal_all(a, s, rdy);                                   /* "my block is ready" */
    SCHED_FOR_PEERS(p, k, a->rank, a->nranks) {
        sched_block(a->count, a->nranks, p, &off, &len);
        sched_rget(s, p, BUF_RECV, off * esz, BUF_RECV, off * esz, len * esz, rdy[p]);
    }
    signal_all(a, s, NULL);                                  /* "done reading yours" */
}

static void cma_reduce_scatter(const sched_args_t *a, size_t esz, sched_t *s, int *mi)
{
    size_t blk = a->count * esz;
    exchange_meta(a, s, mi);
    reduce_own(a, s, mi, (size_t)a->rank * blk, 0, blk);
    signal_all(a, s, NULL);
}

static void cma_allgather(const sched_args_t *a, size_t esz, sched_t *s, int *mi)
{
    size_t blk = a->count * esz;
    exchange_meta(a, s, mi);
    if (!a->inplace)
        sched_copy(s, BUF_RECV, (size_t)a->rank * blk, BUF_SEND, 0, blk);
    SCHED_FOR_PEERS(p, k, a->rank, a->nranks)
        sched_rget(s, p, BUF_RECV, (size_t)p * blk, BUF_SEND, 0, blk, mi[p]);
    signal_all(a, s, NULL);
}

static void cma_broadcast(const sched_args_t *a, size_t esz, sched_t *s)
{
    size_t len = a->count * esz;
    int r = a->rank, root = a->root;
    s->meta = 1;
    if (r == root) {
        SCHED_FOR_PEERS(p, k, r, a->nranks)
            sched_send(s, p, BUF_META_OUT, 0, META, -1);
        if (!a->inplace)
            sched_copy(s, BUF_RECV, 0, BUF_SEND, 0, len);
        SCHED_FOR_PEERS(p, k, r, a->nranks)
            sched_recv(s, p, BUF_NONE, 0, 0);
        return;
    }
    int mi = sched_recv(s, root, BUF_META_IN, (size_t)root * META, META);
    sched_rget(s, root, BUF_RECV, 0, BUF_SEND, 0, len, mi);
    int i = sched_send(s, root, BUF_NONE, 0, 0, -1);
    if (i >= 0)
        s->steps[i].after_all = 1;
}

/* The first part of a call that may find registered buffers everywhere: the address
 * exchange alone. The engine then compares what every rank sent and continues with the
 * schedule the tuner picks for the answer (engine.c: continue_after_probe). */
static weft_status_t probe_build(const sched_args_t *a, sched_t *s)
{
    int stack_idx[64], *mi = stack_idx, *heap = NULL;
    if (a->nranks > 64) {
        heap = malloc((size_t)a->nranks * sizeof(int));
        if (heap == NULL)
            return WEFT_ERR_NO_MEMORY;
        mi = heap;
    }
    exchange_meta(a, s, mi);
    s->probe = 1;
    free(heap);
    return WEFT_OK;
}

static weft_status_t cma_build(const sched_args_t *a, sched_t *s)
{
    size_t esz = weft_dtype_size(a->dtype);
    int stack_idx[2 * 64], *mi = stack_idx, *rdy = stack_idx + 64;
    int *heap = NULL;
    if (a->nranks > 64) {
        heap = malloc(2 * (size_t)a->nranks * sizeof(int));
        if (heap == NULL)
            return WEFT_ERR_NO_MEMORY;
        mi = heap;
        rdy = heap + a->nranks;
    }
    switch (a->coll) {
    case COLL_ALLREDUCE:      cma_allreduce(a, esz, s, mi, rdy); break;
    case COLL_REDUCE_SCATTER: cma_reduce_scatter(a, esz, s, mi); break;
    case COLL_ALLGATHER:      cma_allgather(a, esz, s, mi); break;
    case COLL_BROADCAST:      cma_broadcast(a, esz, s); break;
    default:                  free(heap); return WEFT_ERR_INTERNAL;
    }
    free(heap);
    return WEFT_OK;
}

static int cma_supports(const sched_args_t *a)
{
    int c = a->coll;
    return a->nranks > 1 && a->layout.cma && (c == COLL_ALLREDUCE ||
           c == COLL_REDUCE_SCATTER || c == COLL_ALLGATHER || c == COLL_BROADCAST);
}

/* Every byte crosses memory once instead of twice (half the ring's beta); hops: the
 * address exchange (none after a probe), "ready", "done". */
static double cma_cost(const sched_args_t *a, const algo_model_t *m)
{
    double n = a->nranks, S = (double)algo_rank_bytes(a), meta = a->reg != SCHED_REG_ALL;
    switch (a->coll) {
    case COLL_ALLREDUCE:
        return algo_time(m, a, meta + 2, (n - 1) / n * S, (n - 1) / n * S);
    case COLL_REDUCE_SCATTER:
        return algo_time(m, a, meta + 1, (n - 1) * S / 2, (n - 1) * S);
    case COLL_ALLGATHER:
        return algo_time(m, a, meta + 1, (n - 1) * S / 2, 0);
    default:
        return algo_time(m, a, 2, S / 2, 0);        /* broadcast */
    }
}

/* WEFT_CMA_MIN, else the transports' agreed threshold (256K where ucx serves every peer
 * of one host), else for all-gather ALGO_CMA_ALLGATHER_MIN wherever every peer is read by
 * single copy (algo_cma_allgather_min), else for all-reduce and reduce-scatter of 2 ranks
 * whose cores share no cache algo_cma_far_min: from there on (0: never unless
 * WEFT_ALGO=cma). */
static int cma_window(const weft_config_t *cfg, const sched_args_t *a, size_t *lo,
                      size_t *hi)
{
    size_t min = cfg->cma_min ? cfg->cma_min : a->layout.cma_min;
    if (!min)
        min = algo_cma_allgather_min(cfg, a);
    if (!min)
        min = algo_cma_far_min(cfg, a);
    return algo_window_from(min, lo, hi);
}

const algo_t algo_cma_def = {
    .name = "cma", .supports = cma_supports, .cost = cma_cost, .window = cma_window,
    .build = cma_build,
};

/* The probe: only while it is not known whether every rank's buffers are registered;
 * not for broadcast, whose peers read the root's buffer once anyway. */
static int probe_supports(const sched_args_t *a)
{
    return cma_supports(a) && a->reg == SCHED_REG_ASK && a->coll != COLL_BROADCAST;
}

/* The exchange, then cma without one (the answer the probe hopes for). */
static double probe_cost(const sched_args_t *a, const algo_model_t *m)
{
    sched_args_t after = *a;
    after.reg = SCHED_REG_ALL;
    return algo_time(m, a, 1, 0, 0) + cma_cost(&after, m);
}

/* WEFT_REG_MIN: from there on (0: never). */
static int probe_window(const weft_config_t *cfg, const sched_args_t *a, size_t *lo,
                        size_t *hi)
{
    return algo_window_from(cfg->reg_min, lo, hi);
}

const algo_t algo_probe_def = {
    .name = "probe", .supports = probe_supports, .cost = probe_cost,
    .window = probe_window, .build = probe_build,
};
