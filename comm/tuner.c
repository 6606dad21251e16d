/*
 * tuner.c - which algorithm and frame size a call gets, and the schedule cache.
 *
 * The table (overridable with WEFT_ALGO and WEFT_CHUNK):
 *   1 rank                     local copy
 *   send, recv, sendrecv       p2p
 *   alltoall, barrier          direct (pairwise)
 *   per-rank bytes <= WEFT_DIRECT_MAX (32K)   direct: one exchange, latency-bound sizes
 *   per-rank bytes >= WEFT_REG_MIN (64M; 0 = off), every peer reached by one-sided reads
 *   (cma_all: shm, or ucx's RMA), allreduce/reduce_scatter/allgather (in place on any
 *   rank: from twice that)
 *                              probe: exchange the buffer addresses first; registered
 *                              buffers (weft_mem_alloc) on every rank: cma, reading the
 *                              peers' buffers in place or with cached registrations;
 *                              else the rows below
 *   per-rank bytes >= WEFT_CMA_MIN (0 = the transports' cma_min: 256K where ucx serves
 *   every peer within one host, else off), every peer reached by one-sided reads,
 *   allreduce/reduce_scatter/allgather/broadcast
 *                              cma: read peers' buffers directly (one copy)
 *   otherwise                  ring (allreduce, reduce_scatter, allgather) or chain
 *                              (broadcast, reduce): bandwidth-bound sizes
 * Frames: WEFT_CHUNK, else 128K on shm and 512K on tcp, never above a quarter of the
 * staging buffer (a frame and a wrap must always fit).
 * Streaming stores: in a call whose larger buffer is WEFT_NT_MIN (32M) or more, the steps
 * that write the caller's buffers use non-temporal stores (kern_copy_nt, kern_reduce_nt):
 * such a buffer does not stay in the caches anyway, and those stores cost no read of the
 * line. Plain stores stay where the data is read again soon: output a later step waits
 * for, output forwarded by a send that heads its queue (a chain's middle rank forwards
 * each frame as it lands), and a reduction in place (the engine checks: its lines were
 * just read). A ring's forwarding send queues behind the previous block's send, a whole
 * staging buffer later, by when the block has left the cache anyway.
 *
 * Invariant: the choice depends only on arguments every rank shares (collective,
 * count, dtype, op, root, in-place, nranks, and after a probe what every rank sent in
 * it) and on configuration, never on timing, so all ranks build matching schedules.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_int.h"
#include "frame.h"
#include "log.h"
#include "status.h"
#include "util.h"

/* Every collective's count is per rank (reduce_scatter's recvcount, allgather's
 * sendcount), so count * size is what one rank contributes. */
static size_t per_rank_bytes(const sched_args_t *a)
{
    return a->count * weft_dtype_size(a->dtype);
}

/* The larger of the call's buffers: reduce_scatter's send buffer, allgather's receive
 * buffer and alltoall's hold one block per rank. */
static size_t call_bytes(const sched_args_t *a)
{
    int blocks = a->coll == COLL_REDUCE_SCATTER || a->coll == COLL_ALLGATHER ||
                 a->coll == COLL_ALLTOALL;
    size_t b = per_rank_bytes(a) * (blocks ? (size_t)a->nranks : 1);
    size_t b2 = a->count2 * weft_dtype_size(a->dtype);
    return WEFT_MAX(b, b2);
}

static const char *pick_algo(const weft_comm_t *comm, const sched_args_t *a)
{
    if (a->nranks == 1)
        return "local";
    switch (a->coll) {
    case COLL_SEND: case COLL_RECV: case COLL_SENDRECV:
        return "p2p";
    case COLL_ALLTOALL: case COLL_BARRIER:
        return "direct";
    default:
        break;
    }
    int cma = comm->cma_all && algo_cma_supports(a->coll);
    if (a->reg == SCHED_REG_ALL)
        return "cma";
    if (!strcmp(comm->cfg.algo, "cma"))
        return cma ? "cma" : "ring";     /* same answer on every rank: cma_all is agreed */
    if (strcmp(comm->cfg.algo, "auto") != 0)
        return comm->cfg.algo;
    if (per_rank_bytes(a) <= comm->cfg.direct_max)
        return "direct";
    if (a->reg == SCHED_REG_ASK && cma && a->coll != COLL_BROADCAST && comm->cfg.reg_min &&
        per_rank_bytes(a) >= comm->cfg.reg_min)
        return "probe";
    size_t cma_min = comm->cfg.cma_min ? comm->cfg.cma_min : comm->cma_min_default;
    if (cma && cma_min && per_rank_bytes(a) >= cma_min)
        return "cma";
    return "ring";
}

static size_t pick_chunk(const weft_comm_t *comm, const sched_args_t *a)
{
    size_t chunk = comm->cfg.chunk;
    if (chunk == 0)
        chunk = comm->chunk_default ? comm->chunk_default : 512 * 1024;   /* transports' */
    chunk = WEFT_MIN(chunk, comm->cfg.buffsize / 4);
    size_t esz = weft_dtype_size(a->dtype);
    chunk = chunk / 64 * 64;
    return chunk / esz * esz;
}

/*
 * Root agreement (WEFT_ROOT_CHECK). Ranks that disagree only about a rooted
 * collective's root must all fail in that call, so no rank may finish before every
 * rank has shown the root it believes in:
 *   broadcast  every other rank first sends the root an empty frame; the root moves
 *              no data until it has one from each (one extra hop, before the data);
 *   reduce     the root, once it has everything, sends every other rank an empty
 *              frame that rank waits for (one extra hop, after the data).
 * Each empty frame's header names the sender's root and is checked like any frame. A
 * rank that believes in another root sends to, or waits on, a different rank: whoever
 * reads its frames fails with WEFT_ERR_MISMATCH, and when nobody does, every rank is
 * left waiting and the stall probe compares their calls (comm/fail.c).
 * With two ranks the extra hop overlaps the data instead of preceding or following it:
 * the only other rank's frames show its root to the root and the root's frames show the
 * root to it, so neither can finish unconvinced. A broadcast's root sends at once and
 * waits for the empty frame too; a reduce's root sends its empty frame at once. A call
 * then costs one hop, like an exchange, where it cost two.
 */
static int root_guard_before(const sched_args_t *a, sched_t *s)
{
    if (a->coll != COLL_BROADCAST)
        return -1;
    if (a->rank != a->root) {
        sched_send(s, a->root, BUF_NONE, 0, 0, -1);
        return -1;
    }
    SCHED_FOR_PEERS(p, k, a->rank, a->nranks)
        sched_recv(s, p, BUF_NONE, 0, 0);
    if (a->nranks == 2)
        return -1;                  /* no gate: the data goes out alongside */
    int gate = sched_copy(s, BUF_NONE, 0, BUF_NONE, 0, 0);   /* done when all arrived */
    if (gate >= 0)
        s->steps[gate].after_all = 1;
    return gate;
}

static void root_guard_after(const sched_args_t *a, sched_t *s, int gate)
{
    for (int i = gate + 1; gate >= 0 && i < s->nsteps; i++) {
        sched_step_t *st = &s->steps[i];
        if (st->dep < 0 && st->kind != STEP_COPY && st->kind != STEP_FOLD)
            st->dep = gate;    /* the root's transfers wait for every rank's frame */
    }
    if (a->coll != COLL_REDUCE)
        return;
    if (a->rank != a->root) {
        sched_recv(s, a->root, BUF_NONE, 0, 0);
        return;
    }
    SCHED_FOR_PEERS(p, k, a->rank, a->nranks) {
        int i = sched_send(s, p, BUF_NONE, 0, 0, -1);
        if (i >= 0 && a->nranks > 2)
            s->steps[i].after_all = 1;
    }
}

static weft_status_t build(const sched_args_t *a, const char *algo, int root_check,
                           sched_t *s)
{
    weft_status_t st;
    sched_init(s, algo, a->chunk);
    int guard = root_check && a->nranks > 1 &&
                (a->coll == COLL_BROADCAST || a->coll == COLL_REDUCE);
    int gate = guard ? root_guard_before(a, s) : -1;
    if (!strcmp(algo, "local"))
        st = algo_local(a, s);
    else if (!strcmp(algo, "p2p"))
        st = algo_p2p(a, s);
    else if (!strcmp(algo, "direct"))
        st = algo_direct(a, s);
    else if (!strcmp(algo, "cma"))
        st = algo_cma(a, s);
    else if (!strcmp(algo, "probe"))
        st = algo_cma_probe(a, s);
    else
        st = algo_ring(a, s);
    if (st == WEFT_OK && guard)
        root_guard_after(a, s, gate);
    if (st != WEFT_OK) {
        sched_free(s);
        return st;
    }
    return sched_finish(s, a->nranks);
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
    if (!all_registered || (any_inplace && per_rank_bytes(a) < 2 * comm->cfg.reg_min))
        return SCHED_REG_NONE;
    return SCHED_REG_ALL;
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
    const char *algo = pick_algo(comm, a);
    a->chunk = pick_chunk(comm, a);
    sched_t *s = malloc(sizeof(*s));
    if (s == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "tuner: out of memory");
    weft_status_t st = build(a, algo, comm->cfg.root_check, s);
    if (st != WEFT_OK) {
        free(s);
        return st;
    }
    int nt = comm->cfg.nt_min && call_bytes(a) >= comm->cfg.nt_min ? mark_streaming(s) : 0;
    LOG_DEBUG(LOG_TUNE, "%s count %zu %s: algo %s%s, chunk %zu, %d steps (%d streaming)",
              coll_name(a->coll), a->count, weft_dtype_name(a->dtype), algo,
              a->reg == SCHED_REG_ALL ? " (registered buffers)" : "", a->chunk, s->nsteps, nt);
    if (comm->ncache == SCHED_CACHE_SIZE)
        tuner_cache_clear(comm);
    sched_cache_entry_t *e = &comm->cache[comm->ncache];
    e->key = *a;
    e->sched = s;
    op->sched = s;
    comm->cache_last = comm->ncache++;
    return WEFT_OK;
}
