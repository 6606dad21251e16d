/*
 * sendrecv_perf.c - nccl-tests' sendrecv_perf over weft_sendrecv.
 *
 * Every rank sends count = size/typesize elements to (rank+1)%n while it receives as many
 * from (rank-1+n)%n. The op column is looped and printed as nccl-tests does, though no op
 * is applied. weft_sendrecv refuses overlapping buffers, so there is no in-place call and
 * that column group prints N/A (nccl-tests times an unchecked send == recv call there).
 * algbw = busbw = size/time.
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
    perf_fill(a, a->expected, a->c.recvcount, 0, (a->rank - 1 + a->nranks) % a->nranks);
}

static weft_status_t run(const void *send, void *recv, const perf_args_t *a)
{
    int n = a->nranks;
    return weft_sendrecv(send, a->c.paramcount, (a->rank + 1) % n, recv, a->c.paramcount,
                         (a->rank - 1 + n) % n, a->type->dtype, a->comm);
}

int main(int argc, char **argv)
{
    static const perf_coll_t coll = {
        .name = "sendrecv",
        .kind = PERF_COLL_SENDRECV,
        .flags = PERF_OP | PERF_NO_INPLACE,
        .counts = counts,
        .bw = bw,
        .init = init,
        .run = run,
    };
    return perf_main(argc, argv, &coll);
}
