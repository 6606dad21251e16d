/*
 * all_reduce_perf.c - nccl-tests' all_reduce_perf over weft_allreduce.
 *
 * Every rank sends and receives count = size/typesize elements; in place is send == recv.
 * algbw = size/time, busbw = algbw * 2(n-1)/n.
 */
#include "perf_common.h"

static void counts(size_t count, int nranks, perf_counts_t *c)
{
    c->sendcount = c->recvcount = c->paramcount = count;
    c->send_inplace_offset = c->recv_inplace_offset = 0;
}

static void bw(size_t count, size_t typesize, double sec, int nranks, double *algbw,
               double *busbw)
{
    *algbw = (double)(count * typesize) / 1.0e9 / sec;
    *busbw = *algbw * (2.0 * (nranks - 1) / nranks);
}

static void init(const perf_args_t *a, void *input, const void *recv)
{
    perf_fill(a, input, a->c.sendcount, 0, a->rank);
    perf_fill_reduced(a, a->expected, a->c.recvcount, 0);
}

static weft_status_t run(const void *send, void *recv, const perf_args_t *a)
{
    return weft_allreduce(send, recv, a->c.paramcount, a->type->dtype, a->op, a->comm);
}

int main(int argc, char **argv)
{
    static const perf_coll_t coll = {
        .name = "all_reduce",
        .kind = PERF_COLL_ALLREDUCE,
        .flags = PERF_OP | PERF_REDUCES,
        .counts = counts,
        .bw = bw,
        .init = init,
        .run = run,
    };
    return perf_main(argc, argv, &coll);
}
