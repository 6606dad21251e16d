/*
 * reduce_perf.c - nccl-tests' reduce_perf over weft_reduce.
 *
 * count = size/typesize elements from every rank are reduced into the root's recv buffer;
 * the other ranks' recv buffers must stay untouched (checked, as nccl-tests does). In
 * place is send == recv. -r -1 runs every root. algbw = busbw = size/time.
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
    *busbw = *algbw;
}

static void init(const perf_args_t *a, void *input, const void *recv)
{
    perf_fill(a, input, a->c.sendcount, 0, a->rank);
    if (a->rank == a->root)
        perf_fill_reduced(a, a->expected, a->c.recvcount, 0);
    else
        memcpy(a->expected, recv, a->c.recvcount * a->type->size);
}

static weft_status_t run(const void *send, void *recv, const perf_args_t *a)
{
    return weft_reduce(send, recv, a->c.paramcount, a->type->dtype, a->op, a->root, a->comm);
}

int main(int argc, char **argv)
{
    static const perf_coll_t coll = {
        .name = "reduce",
        .kind = PERF_COLL_REDUCE,
        .flags = PERF_OP | PERF_REDUCES | PERF_ROOT,
        .counts = counts,
        .bw = bw,
        .init = init,
        .run = run,
    };
    return perf_main(argc, argv, &coll);
}
