/*
 * perf_colls.c - the collectives of the perf tools, written once for every backend.
 *
 * For each collective (nccl-tests' definitions): how a row's size becomes element counts
 * and in-place offsets, the algorithm and bus bandwidth, and the inputs and expected
 * outputs of a checked call. The weft tools and the MPI peer both take these, so a weft
 * row and an MPI row of one size move the same data and print the same bandwidths.
 *
 *   all_reduce      every rank sends and receives count = size/typesize elements; in place
 *                   is send == recv. algbw = size/time, busbw = algbw * 2(n-1)/n.
 *   reduce_scatter  each rank receives recvcount = count/n elements and sends n times that;
 *                   the printed size is the send buffer, the printed count recvcount. In
 *                   place, the input is the whole recv buffer and rank r's result lands at
 *                   recv + r*recvcount (MPI_IN_PLACE: at recv). algbw = n*recvcount*
 *                   typesize/time, busbw = algbw * (n-1)/n.
 *   all_gather      each rank sends sendcount = count/n elements and receives n times that;
 *                   the printed size is the recv buffer, the printed count sendcount. In
 *                   place, rank r's input sits at recv + r*sendcount. Bandwidth as
 *                   reduce_scatter.
 *   broadcast       count elements go from the root's send buffer to every rank's recv
 *                   buffer (the root's too); in place is send == recv. algbw = busbw =
 *                   size/time.
 *   reduce          count elements from every rank are reduced into the root's recv buffer;
 *                   the other ranks' recv buffers must stay untouched (checked, as
 *                   nccl-tests does). In place is send == recv. algbw = busbw = size/time.
 *   alltoall        each rank sends block j of paramcount = count/n elements to rank j and
 *                   receives rank j's block for it into block j; the printed size is n
 *                   blocks, the printed count one block. In place is send == recv (checked
 *                   too; nccl-tests, whose NCCL alltoall has no in-place form, prints N/A
 *                   there). Bandwidth as reduce_scatter.
 *   sendrecv        every rank sends count elements to (rank+1)%n while it receives as many
 *                   from (rank-1+n)%n. The op column is looped and printed as nccl-tests
 *                   does, though no op is applied. No in-place call: weft_sendrecv refuses
 *                   overlapping buffers, so that column group prints N/A (nccl-tests times
 *                   an unchecked send == recv call there). algbw = busbw = size/time.
 */
#include "perf_common.h"

unsigned perf_coll_flags(perf_kind_t kind)
{
    switch (kind) {
    case PERF_COLL_ALLREDUCE:
    case PERF_COLL_REDUCE_SCATTER: return PERF_OP | PERF_REDUCES;
    case PERF_COLL_BROADCAST: return PERF_ROOT;
    case PERF_COLL_REDUCE: return PERF_OP | PERF_REDUCES | PERF_ROOT;
    case PERF_COLL_SENDRECV: return PERF_OP | PERF_NO_INPLACE;
    default: return 0;                          /* allgather, alltoall */
    }
}

void perf_coll_counts(perf_kind_t kind, size_t count, size_t esz, int nranks,
                      int scatter_at_start, perf_counts_t *c)
{
    /* a rank's block: count / n, rounded down to 16 bytes as nccl-tests does (an
     * all-gather of 32 B on 4 ranks has blocks of 0) */
    size_t n = (size_t)nranks, base = (count / n) & ~(16 / (esz ? esz : 1) - 1);
    memset(c, 0, sizeof(*c));
    switch (kind) {
    case PERF_COLL_REDUCE_SCATTER:
        c->sendcount = base * n;
        c->recvcount = c->paramcount = base;
        c->recv_inplace_offset = scatter_at_start ? 0 : base;
        break;
    case PERF_COLL_ALLGATHER:
        c->sendcount = c->paramcount = base;
        c->recvcount = base * n;
        c->send_inplace_offset = base;
        break;
    case PERF_COLL_ALLTOALL:
        c->paramcount = base;
        c->sendcount = c->recvcount = base * n;
        break;
    default:                                    /* allreduce, broadcast, reduce, sendrecv */
        c->sendcount = c->recvcount = c->paramcount = count;
        break;
    }
}

void perf_coll_bw(perf_kind_t kind, size_t count, size_t typesize, double sec, int nranks,
                  double *algbw, double *busbw)
{
    int spread = kind == PERF_COLL_REDUCE_SCATTER || kind == PERF_COLL_ALLGATHER ||
                 kind == PERF_COLL_ALLTOALL;   /* paramcount is one rank's block */
    *algbw = (double)(count * typesize * (spread ? (size_t)nranks : 1)) / 1.0e9 / sec;
    *busbw = *algbw * (kind == PERF_COLL_ALLREDUCE ? 2.0 * (nranks - 1) / nranks
                       : spread                    ? (double)(nranks - 1) / nranks
                                                   : 1.0);
}

/* rank's inputs, or the reduction over all ranks, for elements [offset, offset + count)
 * of the pattern. */
static void fill(const perf_args_t *a, void *buf, size_t count, size_t offset, int rank)
{
    perf_fill_values(a->type, a->data_op, a->seed, rank, a->nranks, buf, count, offset);
}

static void fill_reduced(const perf_args_t *a, void *buf, size_t count, size_t offset)
{
    perf_fill_reduced_values(a->type, a->data_op, a->seed, a->nranks, buf, count, offset);
}

static void *elem(const perf_args_t *a, void *buf, size_t k)
{
    return (char *)buf + k * a->type->size;
}

void perf_coll_init(perf_kind_t kind, const perf_args_t *a, void *input, const void *recv)
{
    size_t block = a->c.paramcount;
    int from = kind == PERF_COLL_BROADCAST ? a->root : a->rank;

    if (kind != PERF_COLL_BROADCAST || a->rank == a->root)
        fill(a, input, a->c.sendcount, 0, from);
    switch (kind) {
    case PERF_COLL_ALLREDUCE:
        fill_reduced(a, a->expected, a->c.recvcount, 0);
        break;
    case PERF_COLL_REDUCE_SCATTER:
        fill_reduced(a, a->expected, a->c.recvcount, (size_t)a->rank * block);
        break;
    case PERF_COLL_ALLGATHER:
        for (int j = 0; j < a->nranks; j++)
            fill(a, elem(a, a->expected, (size_t)j * block), block, 0, j);
        break;
    case PERF_COLL_BROADCAST:
        fill(a, a->expected, a->c.recvcount, 0, a->root);
        break;
    case PERF_COLL_REDUCE:
        if (a->rank == a->root)
            fill_reduced(a, a->expected, a->c.recvcount, 0);
        else
            memcpy(a->expected, recv, a->c.recvcount * a->type->size);
        break;
    case PERF_COLL_ALLTOALL:                    /* block j: rank j's block for this rank */
        for (int j = 0; j < a->nranks; j++)
            fill(a, elem(a, a->expected, (size_t)j * block), block, (size_t)a->rank * block,
                 j);
        break;
    case PERF_COLL_SENDRECV:
        fill(a, a->expected, a->c.recvcount, 0, (a->rank - 1 + a->nranks) % a->nranks);
        break;
    }
}
