/*
 * algo_local.c - one rank: every collective is a copy of its own data (or nothing, in
 * place); AVG over one rank is the value itself.
 *
 * Invariant: a pure function of its arguments, like every algorithm.
 */
#include "algo.h"
#include "frame.h"

static weft_status_t local_build(const sched_args_t *a, sched_t *s)
{
    size_t len = a->count * weft_dtype_size(a->dtype);
    if (a->coll == COLL_BARRIER || a->inplace)
        return WEFT_OK;
    sched_copy(s, BUF_RECV, 0, BUF_SEND, 0, len);
    return WEFT_OK;
}

static int local_supports(const sched_args_t *a)
{
    return a->nranks == 1;
}

static double local_cost(const sched_args_t *a, const algo_model_t *m)
{
    return a->inplace ? 0 : algo_time(m, a, 0, (double)algo_rank_bytes(a), 0);
}

const algo_t algo_local_def = {
    .name = "local", .supports = local_supports, .cost = local_cost, .window = algo_no_window,
    .build = local_build,
};
