/*
 * broadcast_perf.c - nccl-tests' broadcast_perf over weft_broadcast.
 *
 * count = size/typesize elements go from the root's send buffer to every rank's recv
 * buffer (the root's too); in place is send == recv. -r -1 runs every root.
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
    if (a->rank == a->root)
        perf_fill(a, input, a->c.sendcount, 0, a->root);
    perf_fill(a, a->expected, a->c.recvcount, 0, a->root);
}

static weft_status_t run(const void *send, void *recv, const perf_args_t *a)
{
    return weft_broadcast(send, recv, a->c.paramcount, a->type->dtype, a->root, a->comm);
}

int main(int argc, char **argv)
{
    static const perf_coll_t coll = {
        .name = "broadcast",
        .kind = PERF_COLL_BROADCAST,
        .flags = PERF_ROOT,
        .counts = counts,
        .bw = bw,
        .init = init,
        .run = run,
    };
    return perf_main(argc, argv, &coll);
}
