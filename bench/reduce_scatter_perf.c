/*
 * reduce_scatter_perf.c - nccl-tests' reduce_scatter_perf over weft_reduce_scatter.
 *
 * Each rank receives recvcount = (size/typesize)/n elements and sends n times that; the
 * printed size is the send buffer and the printed count is recvcount. In place, the input
 * is the whole recv buffer and rank r's result lands at recv + r*recvcount.
 * algbw = n*recvcount*typesize/time, busbw = algbw * (n-1)/n.
 */
#include "perf_common.h"

static void counts(size_t count, int nranks, perf_counts_t *c)
{
    size_t base = count / (size_t)nranks;
    c->sendcount = base * (size_t)nranks;
    c->recvcount = c->paramcount = base;
    c->send_inplace_offset = 0;
    c->recv_inplace_offset = base;
}

static void bw(size_t count, size_t typesize, double sec, int nranks, double *algbw,
               double *busbw)
{
    *algbw = (double)(count * typesize * (size_t)nranks) / 1.0e9 / sec;
    *busbw = *algbw * ((double)(nranks - 1) / nranks);
}

static void init(const perf_args_t *a, void *input, const void *recv)
{
    perf_fill(a, input, a->c.sendcount, 0, a->rank);
    perf_fill_reduced(a, a->expected, a->c.recvcount, (size_t)a->rank * a->c.recvcount);
}

static weft_status_t run(const void *send, void *recv, const perf_args_t *a)
{
    return weft_reduce_scatter(send, recv, a->c.paramcount, a->type->dtype, a->op, a->comm);
}

int main(int argc, char **argv)
{
    static const perf_coll_t coll = {
        .name = "reduce_scatter",
        .kind = PERF_COLL_REDUCE_SCATTER,
        .flags = PERF_OP | PERF_REDUCES,
        .counts = counts,
        .bw = bw,
        .init = init,
        .run = run,
    };
    return perf_main(argc, argv, &coll);
}
