/*
 * alltoall_perf.c - nccl-tests' alltoall_perf over weft_alltoall.
 *
 * Each rank sends block j of paramcount = (size/typesize)/n elements to rank j and receives
 * rank j's block for it into block j; the printed size is n blocks, the printed count one
 * block. In place is send == recv: weft supports it, so it is checked too (nccl-tests,
 * whose NCCL alltoall has no in-place form, prints N/A there).
 * algbw = n*paramcount*typesize/time, busbw = algbw * (n-1)/n.
 */
#include "perf_common.h"

static void counts(size_t count, int nranks, perf_counts_t *c)
{
    c->paramcount = count / (size_t)nranks;
    c->sendcount = c->recvcount = c->paramcount * (size_t)nranks;
    c->send_inplace_offset = c->recv_inplace_offset = 0;
}

static void bw(size_t count, size_t typesize, double sec, int nranks, double *algbw,
               double *busbw)
{
    *algbw = (double)(count * (size_t)nranks * typesize) / 1.0e9 / sec;
    *busbw = *algbw * ((double)(nranks - 1) / nranks);
}

static void init(const perf_args_t *a, void *input, const void *recv)
{
    size_t block = a->c.paramcount;
    perf_fill(a, input, a->c.sendcount, 0, a->rank);
    for (int j = 0; j < a->nranks; j++)     /* block j: rank j's block for this rank */
        perf_fill(a, perf_elem(a, a->expected, (size_t)j * block), block,
                  (size_t)a->rank * block, j);
}

static weft_status_t run(const void *send, void *recv, const perf_args_t *a)
{
    return weft_alltoall(send, recv, a->c.paramcount, a->type->dtype, a->comm);
}

int main(int argc, char **argv)
{
    static const perf_coll_t coll = {
        .name = "alltoall",
        .kind = PERF_COLL_ALLTOALL,
        .flags = 0,
        .counts = counts,
        .bw = bw,
        .init = init,
        .run = run,
    };
    return perf_main(argc, argv, &coll);
}
