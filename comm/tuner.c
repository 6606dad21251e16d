/*
 * tuner.c - which algorithm and frame size a call gets, and the schedule cache.
 *
 * The algorithm (algo_pick, over the registry in algo.c):
 *   1. after a probe that found registered buffers on every rank: cma (it continues
 *      the probe, reading the peers' buffers through mappings);
 *   2. WEFT_ALGO names a registered algorithm that supports the call: that one;
 *   3. among the algorithms that support the call (local: 1 rank; p2p: send, recv,
 *      sendrecv; direct: every collective; ring: allreduce, reduce_scatter, allgather,
 *      broadcast, reduce; tree: allreduce, reduce, broadcast; rhd: allreduce, barrier
 *      (dissemination), and reduce_scatter, allgather at a power of two; cma and probe:
 *      every peer reached
 *      by one-sided reads, shm or ucx's RMA), the first whose knob reserves the call's
 *      per-rank size:
 *        direct   up to WEFT_DIRECT_MAX (32K): one exchange, latency-bound sizes; only
 *                 among few ranks (algo.h: 2 ranks, or <= 4 on one host); beyond, the
 *                 knob only bounds it and rule 4 weighs it
 *        probe    from WEFT_REG_MIN (64M; 0 = off), allreduce/reduce_scatter/allgather:
 *                 exchange the buffer addresses first; registered buffers (weft_mem_alloc)
 *                 everywhere: rule 1, else the call goes on as if it had not probed
 *                 (in place on any rank: registered from twice that, tuner_after_probe)
 *        cma      from WEFT_CMA_MIN (0 = the transports' cma_min: 256K where ucx serves
 *                 every peer within one host, else off; all-gather from 32K on shm, 256K wherever
 *                 every peer is read by single copy; 2 ranks on shm whose cores share
 *                 no cache, WEFT_SHM_FAR: all-reduce from 512K, reduce-scatter from 64K
 *                 per rank): read peers' buffers directly
 *   4. else the cheapest by the cost model (algo.h: alpha-beta-gamma per link class)
 *      among those no knob reserves and whose bounds hold the size: among few ranks the
 *      ring (allreduce, reduce_scatter, allgather) or chain (broadcast, reduce), as
 *      weft always chose; beyond, also direct (up to WEFT_DIRECT_MAX), the double
 *      binary tree and rhd (up to 1M per rank). With the default model that gives, on
 *      one host: direct for the smallest sizes (all-reduce up to 2K at 5 ranks; none at
 *      64, where its 63 frames each way through every rank cost more than rhd's 12 hops:
 *      algo.c, the model's overhead; the barrier by rhd from 23 ranks, 53 with one per
 *      host, 64 with 8 per host),
 *      rhd at power-of-two rank counts from there up to 1M (all-reduce; reduce-
 *      scatter and all-gather above WEFT_DIRECT_MAX), the tree for all-reduce at other
 *      rank counts (4-8K at 5 ranks) and past rhd's bound at many (2-4M at 64), and
 *      for reduce and broadcast at every larger size, the ring above; across hosts the
 *      same shape at larger sizes (test_algos' check_model_spots pins a few); and
 *      where ranks span hosts with more than one on some, hier for all-reduce,
 *      broadcast and (up to the tree's sizes) reduce, and with as many on each host also
 *      reduce-scatter and all-gather, at almost every size past direct's (its
 *      intra-host hops cost SHM, where the others' every hop costs NET);
 *   5. else (a knob governs every candidate and none wants this size: alltoall above
 *      WEFT_DIRECT_MAX) the cheapest of them: direct.
 * Among few ranks this is the table weft had before algorithms registered themselves,
 * choice for choice; the model decides everywhere else.
 * Frames: WEFT_CHUNK, else 128K on shm and 512K on tcp, never above a quarter of the
 * smallest staging buffer of the ranks (WEFT_BUFFSIZE may differ; a frame and a wrap must
 * always fit every receiver's).
 * Streaming stores: in a call whose larger buffer is WEFT_NT_MIN (4M) or more, the steps
 * that write the caller's buffers use non-temporal stores (kern_copy_nt, kern_reduce_nt):
 * those stores cost no read of the line and leave the caches to the ring (from 4M they
 * were 1.1-1.9x faster at 2 and 4 ranks on shm; at 1-2M they lost up to 17% at 4 ranks:
 * docs/PERF.md). Plain stores stay where the data is read again soon: output a later step waits
 * for, output forwarded by a send that heads its queue (a chain's middle rank forwards
 * each frame as it lands), and a reduction in place (the engine checks: its lines were
 * just read). A ring's forwarding send queues behind the previous block's send, a whole
 * staging buffer later, by when the block has left the cache anyway.
 *
 * Invariant: the choice depends only on arguments every rank shares (collective,
 * count, dtype, op, root, in-place, nranks, the layout's shared fields (layout.far: the
 * lower rank's word, connect_cores_far), and after a
 * probe what every rank sent in it) and on configuration, never on timing, so all
 * ranks build matching schedules.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "comm_int.h"
#include "frame.h"
#include "log.h"
#include "status.h"
#include "util.h"

/* The larger of the call's buffers: reduce_scatter's send buffer, allgather's receive
 * buffer and alltoall's hold one block per rank. */
static size_t call_bytes(const sched_args_t *a)
{
    int blocks = a->coll == COLL_REDUCE_SCATTER || a->coll == COLL_ALLGATHER ||
                 a->coll == COLL_ALLTOALL;
    size_t b = algo_rank_bytes(a) * (blocks ? (size_t)a->nranks : 1);
    size_t b2 = a->count2 * weft_dtype_size(a->dtype);
    return WEFT_MAX(b, b2);
}

static size_t pick_chunk(const weft_comm_t *comm, const sched_args_t *a)
{
    size_t chunk = comm->cfg.chunk;
    if (chunk == 0)
        chunk = comm->chunk_default ? comm->chunk_default : 512 * 1024;   /* transports' */
    /* a quarter of the smallest WEFT_BUFFSIZE of the ranks: the receiver's shm ring, tcp
     * or ucx frame limit or ib slot is sized by its own (a frame over a smaller peer's
     * ring waited for room until WEFT_TIMEOUT; over its tcp limit failed the call) */
    size_t buffsize = comm->buffsize_min ? comm->buffsize_min : comm->cfg.buffsize;
    chunk = WEFT_MIN(WEFT_MIN(chunk, buffsize / 4), CFG_CHUNK_MAX);
    size_t esz = weft_dtype_size(a->dtype);
    chunk = chunk / 64 * 64;
    return chunk / esz * esz;
}

/* Sets nt on the steps that write a caller's buffer with data that is not read again
 * soon (see the banner); returns how many. */
static int mark_streaming(sched_t *s)
{
    int marked = 0;
    for (int i = 0; i < s->nsteps; i++) {
        sched_step_t *st = &s->steps[i];
        st->nt = (st->kind == STEP_RECV || st->kind == STEP_RECV_REDUCE ||
                  st->kind == STEP_COPY || st->kind == STEP_RGET ||
                  st->kind == STEP_RGET_REDUCE) &&
                 (st->dst_buf == BUF_SEND || st->dst_buf == BUF_RECV);
    }
    for (int j = 0; j < s->nsteps; j++) {
        const sched_step_t *st = &s->steps[j];
        /* read as it lands: by a receive in place, or a send that heads its queue */
        if (st->stream >= 0 && (st->kind != STEP_SEND || s->head_send[st->peer] == j))
            s->steps[st->stream].nt = 0;
        if (st->dep >= 0)
            s->steps[st->dep].nt = 0;
    }
    for (int i = 0; i < s->nsteps; i++)
        marked += s->steps[i].nt;
    return marked;
}

/* After a probe: SCHED_REG_ALL when every rank's buffers are registered and, where any
 * rank runs in place, the call is at least twice WEFT_REG_MIN (in place the ring stays
 * ahead up to there, docs/PERF.md). Every rank sees the same probe, so in-place may differ
 * between ranks, as NCCL allows, and they still agree. */
int tuner_after_probe(const weft_comm_t *comm, const sched_args_t *a, int all_registered,
                      int any_inplace)
{
    if (!all_registered || (any_inplace && algo_rank_bytes(a) < 2 * comm->cfg.reg_min))
        return SCHED_REG_NONE;
    return SCHED_REG_ALL;
}

weft_status_t tuner_setup(weft_comm_t *comm)
{
    uint64_t *host_id = malloc((size_t)comm->nranks * sizeof(*host_id));
    if (host_id == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "tuner: out of memory");
    free(comm->rank_host);
    comm->rank_host = malloc((size_t)comm->nranks * sizeof(*comm->rank_host));
    if (comm->rank_host == NULL) {
        free(host_id);
        return weft_error(WEFT_ERR_NO_MEMORY, "tuner: out of memory");
    }
    for (int p = 0; p < comm->nranks; p++)
        host_id[p] = comm->peers[p].host_id;
    algo_layout(host_id, comm->nranks, comm->rank, comm->cma_all, &comm->layout);
    algo_host_map(host_id, comm->nranks, comm->rank_host);
    comm->layout.rank_host = comm->rank_host;   /* freed at weft_comm_destroy */
    comm->layout.cma_min = comm->cma_min_default;
    comm->layout.cma_blocks = comm->cma_blocks;
    comm->layout.cma_slow = comm->cma_slow;
    free(host_id);
    return WEFT_OK;
}

void tuner_cache_clear(weft_comm_t *comm)
{
    for (int i = 0; i < comm->ncache; i++) {
        sched_free(comm->cache[i].sched);
        free(comm->cache[i].sched);
    }
    comm->ncache = 0;
}

/* Everything but the chunk, which follows from the rest (configuration never changes
 * after init). */
static int key_equal(const sched_args_t *x, const sched_args_t *y)
{
    return x->count == y->count && x->coll == y->coll && x->dtype == y->dtype &&
           x->op == y->op && x->root == y->root && x->inplace == y->inplace &&
           x->peer2 == y->peer2 && x->count2 == y->count2 && x->reg == y->reg;
}

static weft_status_t cache_hit(weft_comm_t *comm, int i, comm_op_t *op)
{
    comm->cache_last = i;
    op->args.chunk = comm->cache[i].key.chunk;
    op->sched = comm->cache[i].sched;
    return WEFT_OK;
}

/* A loop calls the same collective again and again: the last schedule used is looked at
 * first, and the algorithm and frame size are chosen only when a call is new (this
 * lookup is on every call's path: a small all-reduce is about 200 ns in all). */
weft_status_t tuner_schedule(weft_comm_t *comm, comm_op_t *op)
{
    sched_args_t *a = &op->args;
    if (comm->cache_last < comm->ncache && key_equal(&comm->cache[comm->cache_last].key, a))
        return cache_hit(comm, comm->cache_last, op);
    for (int i = 0; i < comm->ncache; i++)
        if (key_equal(&comm->cache[i].key, a))
            return cache_hit(comm, i, op);
    algo_model_t model;
    double cost;
    algo_model_default(&model);
    a->layout = comm->layout;
    a->nchannels = algo_channels(a, comm->cfg.nchannels);
    const algo_t *algo = algo_pick(&comm->cfg, &model, a, &cost);
    if (algo == NULL)
        return weft_error(WEFT_ERR_INTERNAL, "tuner: no algorithm runs %s on %d ranks",
                          coll_name(a->coll), a->nranks);
    a->chunk = pick_chunk(comm, a);
    sched_t *s = malloc(sizeof(*s));
    if (s == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "tuner: out of memory");
    weft_status_t st = algo_build(algo, a, comm->cfg.root_check, s);
    if (st != WEFT_OK) {
        free(s);
        return st;
    }
    int nt = comm->cfg.nt_min && call_bytes(a) >= comm->cfg.nt_min ? mark_streaming(s) : 0;
    sched_mark_keep(s, a->inplace);     /* for transports with send_kept (transport.h) */
    LOG_DEBUG(LOG_TUNE, "%s count %zu %s: algo %s%s, chunk %zu, %d channel(s), %d steps "
              "(%d streaming), model %.2f us", coll_name(a->coll), a->count,
              weft_dtype_name(a->dtype), algo->name,
              a->reg == SCHED_REG_ALL ? " (registered buffers)" : "", a->chunk, s->nchannels,
              s->nsteps, nt, cost * 1e6);
    if (comm->ncache == SCHED_CACHE_SIZE)
        tuner_cache_clear(comm);
    sched_cache_entry_t *e = &comm->cache[comm->ncache];
    e->key = *a;
    e->sched = s;
    op->sched = s;
    comm->cache_last = comm->ncache++;
    return WEFT_OK;
}
