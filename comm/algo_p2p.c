/*
 * algo_p2p.c - point-to-point: send, recv, and sendrecv (a send to `root` and a receive
 * from `peer2` at once, for rings and halo exchanges).
 *
 * Invariant: a pure function of its arguments, like every algorithm.
 */
#include "algo.h"
#include "frame.h"

static weft_status_t p2p_build(const sched_args_t *a, sched_t *s)
{
    size_t esz = weft_dtype_size(a->dtype);
    switch (a->coll) {
    case COLL_SEND:
        sched_send(s, a->root, BUF_SEND, 0, a->count * esz, -1);
        break;
    case COLL_RECV:
        sched_recv(s, a->root, BUF_RECV, 0, a->count * esz);
        break;
    case COLL_SENDRECV:
        sched_send(s, a->root, BUF_SEND, 0, a->count * esz, -1);
        sched_recv(s, a->peer2, BUF_RECV, 0, a->count2 * esz);
        break;
    default:
        return WEFT_ERR_INTERNAL;
    }
    return WEFT_OK;
}

static int p2p_supports(const sched_args_t *a)
{
    return a->nranks > 1 &&
           (a->coll == COLL_SEND || a->coll == COLL_RECV || a->coll == COLL_SENDRECV);
}

static double p2p_cost(const sched_args_t *a, const algo_model_t *m)
{
    return algo_time(m, a, 1, (double)algo_rank_bytes(a), 0);
}

const algo_t algo_p2p_def = {
    .name = "p2p", .supports = p2p_supports, .cost = p2p_cost, .window = algo_no_window,
    .build = p2p_build,
};
