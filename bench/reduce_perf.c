/*
 * reduce_perf.c - nccl-tests' reduce_perf over weft_reduce.
 *
 * The driver is perf_common.c and the backend perf_weft.c; the collective's counts,
 * bandwidth and data are in perf_colls.c, shared with the MPI peer (mpi_coll_perf.c).
 */
#include "perf_common.h"

int main(int argc, char **argv)
{
    return perf_weft_main(argc, argv, PERF_COLL_REDUCE);
}
