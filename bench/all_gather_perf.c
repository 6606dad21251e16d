/*
 * all_gather_perf.c - nccl-tests' all_gather_perf over weft_allgather.
 *
 * Each rank sends sendcount = (size/typesize)/n elements and receives n times that; the
 * printed size is the recv buffer and the printed count is sendcount. In place, rank r's
 * input sits at recv + r*sendcount. algbw = n*sendcount*typesize/time,
 * busbw = algbw * (n-1)/n.
 */
#include "perf_common.h"

static void counts(size_t count, int nranks, perf_counts_t *c)
{
    size_t base = count / (size_t)nranks;
    c->sendcount = c->paramcount = base;
    c->recvcount = base * (size_t)nranks;
    c->send_inplace_offset = base;
    c->recv_inplace_offset = 0;
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
    for (int j = 0; j < a->nranks; j++)
        perf_fill(a, perf_elem(a, a->expected, (size_t)j * a->c.sendcount), a->c.sendcount, 0,
                  j);
}

static weft_status_t run(const void *send, void *recv, const perf_args_t *a)
{
    return weft_allgather(send, recv, a->c.paramcount, a->type->dtype, a->comm);
}

int main(int argc, char **argv)
{
    static const perf_coll_t coll = {
        .name = "all_gather",
        .kind = PERF_COLL_ALLGATHER,
        .flags = 0,
        .counts = counts,
        .bw = bw,
        .init = init,
        .run = run,
    };
    return perf_main(argc, argv, &coll);
}
