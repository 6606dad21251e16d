/*
 * tuner.c - which algorithm and frame size a call gets, and the schedule cache.
 *
 * The table (overridable with WEFT_ALGO and WEFT_CHUNK):
 *   1 rank                     local copy
 *   send, recv, sendrecv       p2p
 *   alltoall, barrier          direct (pairwise)
 *   per-rank bytes <= WEFT_DIRECT_MAX (32K)   direct: one exchange, latency-bound sizes
 *   per-rank bytes >= WEFT_CMA_MIN (0 = off), all ranks on one host with single-copy access,
 *   allreduce/reduce_scatter/allgather/broadcast
 *                              cma: read peers' buffers directly (one copy)
 *   otherwise                  ring (allreduce, reduce_scatter, allgather) or chain
 *                              (broadcast, reduce): bandwidth-bound sizes
 * Frames: WEFT_CHUNK, else 128K on shm and 512K on tcp, never above a quarter of the
 * staging buffer (a frame and a wrap must always fit).
 *
 * Invariant: the choice depends only on arguments every rank shares (collective,
 * count, dtype, op, root, in-place, nranks) and on configuration, never on timing,
 * so all ranks build matching schedules.
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
    if (!strcmp(comm->cfg.algo, "cma"))
        return cma ? "cma" : "ring";     /* same answer on every rank: cma_all is agreed */
    if (strcmp(comm->cfg.algo, "auto") != 0)
        return comm->cfg.algo;
    if (per_rank_bytes(a) <= comm->cfg.direct_max)
        return "direct";
    if (cma && comm->cfg.cma_min && per_rank_bytes(a) >= comm->cfg.cma_min)
        return "cma";
    return "ring";
}

static size_t pick_chunk(const weft_comm_t *comm, const sched_args_t *a)
{
    size_t chunk = comm->cfg.chunk;
    if (chunk == 0)
        chunk = strcmp(comm->transport_desc, "shm") == 0 ? 128 * 1024 : 512 * 1024;
    chunk = WEFT_MIN(chunk, comm->cfg.buffsize / 4);
    size_t esz = weft_dtype_size(a->dtype);
    chunk = chunk / 64 * 64;
    return chunk / esz * esz;
}

static weft_status_t build(const sched_args_t *a, const char *algo, sched_t *s)
{
    weft_status_t st;
    sched_init(s, algo, a->chunk);
    if (!strcmp(algo, "local"))
        st = algo_local(a, s);
    else if (!strcmp(algo, "p2p"))
        st = algo_p2p(a, s);
    else if (!strcmp(algo, "direct"))
        st = algo_direct(a, s);
    else if (!strcmp(algo, "cma"))
        st = algo_cma(a, s);
    else
        st = algo_ring(a, s);
    if (st != WEFT_OK) {
        sched_free(s);
        return st;
    }
    return sched_finish(s, a->nranks);
}

void tuner_cache_clear(weft_comm_t *comm)
{
    for (int i = 0; i < comm->ncache; i++) {
        sched_free(comm->cache[i].sched);
        free(comm->cache[i].sched);
    }
    comm->ncache = 0;
}

static int key_equal(const sched_args_t *x, const sched_args_t *y)
{
    return x->coll == y->coll && x->count == y->count && x->dtype == y->dtype &&
           x->op == y->op && x->root == y->root && x->inplace == y->inplace &&
           x->chunk == y->chunk && x->peer2 == y->peer2 && x->count2 == y->count2;
}

weft_status_t tuner_schedule(weft_comm_t *comm, comm_op_t *op)
{
    sched_args_t *a = &op->args;
    const char *algo = pick_algo(comm, a);
    a->chunk = pick_chunk(comm, a);
    for (int i = 0; i < comm->ncache; i++)
        if (key_equal(&comm->cache[i].key, a) && !strcmp(comm->cache[i].algo, algo)) {
            op->sched = comm->cache[i].sched;
            return WEFT_OK;
        }
    sched_t *s = malloc(sizeof(*s));
    if (s == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "tuner: out of memory");
    weft_status_t st = build(a, algo, s);
    if (st != WEFT_OK) {
        free(s);
        return st;
    }
    LOG_DEBUG(LOG_TUNE, "%s count %zu %s: algo %s, chunk %zu, %d steps", coll_name(a->coll),
              a->count, weft_dtype_name(a->dtype), algo, a->chunk, s->nsteps);
    if (comm->ncache == SCHED_CACHE_SIZE)
        tuner_cache_clear(comm);
    sched_cache_entry_t *e = &comm->cache[comm->ncache++];
    e->key = *a;
    snprintf(e->algo, sizeof(e->algo), "%s", algo);
    e->sched = s;
    op->sched = s;
    return WEFT_OK;
}
