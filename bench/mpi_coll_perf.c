/*
 * mpi_coll_perf.c - the MPI peer of weft's perf tools, for side-by-side comparison.
 *
 *   mpirun -np N mpi_coll_perf -c allreduce|reduce_scatter|allgather|broadcast|reduce|alltoall
 *          [nccl-tests' flags: -b -e -f -i -n -w -m -N -d -o -r -a -z -k/--check ...]
 *
 * The perf driver's MPI backend: times MPI_Allreduce, MPI_Reduce_scatter_block,
 * MPI_Allgather, MPI_Bcast, MPI_Reduce or MPI_Alltoall with the driver that times weft
 * (bench/perf_common.c: nccl-tests' method, the table, the memory-bandwidth bound section)
 * and the same size-to-count rules, bus-bandwidth factors and data (bench/perf_colls.c),
 * so that rows compare line by line. mpicc builds it with those two files, without libweft.
 *
 * In-place columns use MPI_IN_PLACE, whose layouts are MPI's: reduce_scatter leaves the
 * result at the start of the buffer; allgather finds each rank's block in place; bcast is
 * one buffer (the out-of-place column copies send to recv at the root first, the work an
 * out-of-place broadcast does); reduce is in place at the root. MPI has no half, bfloat16
 * arithmetic or avg: those rows are refused (or skipped under "all"); half and bfloat16 still
 * move as 16-bit words where nothing is reduced. Exit codes: 0 ok, 1 wrong results or MPI
 * failure, 2 bad command line.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf_common.h"

/* -c's names, in its usage line's order. */
static const struct {
    const char *name;
    perf_kind_t kind;
} colls[] = {
    { "allreduce", PERF_COLL_ALLREDUCE }, { "reduce_scatter", PERF_COLL_REDUCE_SCATTER },
    { "allgather", PERF_COLL_ALLGATHER }, { "broadcast", PERF_COLL_BROADCAST },
    { "reduce", PERF_COLL_REDUCE }, { "alltoall", PERF_COLL_ALLTOALL },
};

typedef struct {
    const char *prog;
    MPI_Datatype mtype;         /* the rows' (pm_row) */
    MPI_Op mop;
} pm_ctx_t;

#define MPI_CHECK(call)                                                               \
    do {                                                                              \
        int rc_ = (call);                                                             \
        if (rc_ != MPI_SUCCESS)                                                       \
            mpi_fail(rc_, __FILE__, __LINE__);                                        \
    } while (0)

static void mpi_fail(int rc, const char *file, int line)
{
    char host[64], msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    perf_hostname(host, sizeof(host));
    MPI_Error_string(rc, msg, &len);
    printf("%s: Test MPI failure %s:%d '%s'\n", host, file, line, msg);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* The MPI type for a dtype; reductions need arithmetic, data movement only the width. */
static MPI_Datatype mpi_type(const perf_type_t *t, int reduces)
{
    switch (t->dtype) {
    case WEFT_INT8: return MPI_INT8_T;
    case WEFT_UINT8: return MPI_UINT8_T;
    case WEFT_INT32: return MPI_INT32_T;
    case WEFT_UINT32: return MPI_UINT32_T;
    case WEFT_INT64: return MPI_INT64_T;
    case WEFT_UINT64: return MPI_UINT64_T;
    case WEFT_FLOAT32: return MPI_FLOAT;
    case WEFT_FLOAT64: return MPI_DOUBLE;
    default: return reduces ? MPI_DATATYPE_NULL : MPI_UINT16_T;
    }
}

static MPI_Op mpi_op(weft_op_t op)
{
    switch (op) {
    case WEFT_SUM: return MPI_SUM;
    case WEFT_PROD: return MPI_PROD;
    case WEFT_MIN: return MPI_MIN;
    case WEFT_MAX: return MPI_MAX;
    default: return MPI_OP_NULL;
    }
}

/* Whether MPI can run (type, op) rows of kind; under "all", rows it cannot run are
 * skipped. Sets the MPI type and op of those rows. */
static int pm_row(void *ctx, perf_kind_t kind, const perf_type_t *t, weft_op_t op)
{
    pm_ctx_t *m = ctx;
    int reduces = (perf_coll_flags(kind) & PERF_REDUCES) != 0;
    m->mtype = mpi_type(t, reduces);
    m->mop = mpi_op(op);
    return m->mtype != MPI_DATATYPE_NULL && (!reduces || m->mop != MPI_OP_NULL);
}

/* The checks that need only the command line: -c picks the collective. */
static int pm_check(void *ctx, const perf_opts_t *o, int *kind_p)
{
    pm_ctx_t *m = ctx;
    const char *want = o->coll;
    int ntypes;
    const perf_type_t *types = perf_types(&ntypes);

    for (size_t i = 0; want && i < sizeof(colls) / sizeof(colls[0]); i++)
        if (strcmp(want, colls[i].name) == 0)
            *kind_p = (int)colls[i].kind;
    if (*kind_p < 0) {
        fprintf(stderr, "%s: %s collective; -c allreduce|reduce_scatter|allgather|broadcast|"
                "reduce|alltoall\n", m->prog, want ? "unknown" : "no");
        return 2;
    }
    if (o->max_bytes > (size_t)INT_MAX) {
        fprintf(stderr, "%s: MPI counts are int: maxbytes must stay below 2G\n", m->prog);
        return 2;
    }
    if (o->type >= 0 && !pm_row(m, (perf_kind_t)*kind_p, &types[o->type],
                                o->op < 0 ? WEFT_SUM : (weft_op_t)o->op)) {
        fprintf(stderr, "%s: MPI cannot %s %s\n", m->prog,
                o->op >= 0 ? perf_op_str((weft_op_t)o->op) : "reduce", types[o->type].name);
        return 2;
    }
    return 0;
}

/* ---- the job ---- */

static int pm_init(void *ctx, int *argc, char ***argv, const perf_opts_t *o, perf_job_t *job)
{
    int len = 0;
    char desc[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Comm node;

    MPI_Init(argc, argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &job->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &job->nranks);
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                  &node));
    MPI_CHECK(MPI_Comm_rank(node, &job->local_rank));
    MPI_CHECK(MPI_Comm_size(node, &job->local_size));
    MPI_CHECK(MPI_Comm_free(&node));
    MPI_CHECK(MPI_Get_library_version(desc, &len));
    len = (int)strcspn(desc, ",\n");             /* "Open MPI v4.1.4" */
    len = len < (int)sizeof(job->desc) ? len : (int)sizeof(job->desc) - 1;
    memcpy(job->desc, desc, (size_t)len);
    job->desc[len] = '\0';
    return 0;
}

static void pm_finalize(void *ctx)
{
    MPI_Finalize();
}

static void pm_abort(void *ctx)
{
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void pm_notes(void *ctx, const perf_opts_t *o, perf_kind_t kind)
{
    pm_ctx_t *m = ctx;
    if ((perf_coll_flags(kind) & PERF_REDUCES) && (o->type < 0 || o->op < 0))
        fprintf(stderr, "%s: note: skipping what MPI cannot reduce (half, bfloat16, avg)\n",
                m->prog);
}

static const char *pm_error(void *ctx)
{
    return "";
}

/* ---- the driver's own communication ---- */

static void pm_barrier(void *ctx)
{
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

static double pm_allreduce_f64(void *ctx, double x, weft_op_t op)
{
    double v = 0.0;
    MPI_CHECK(MPI_Allreduce(&x, &v, 1, MPI_DOUBLE, mpi_op(op), MPI_COMM_WORLD));
    return v;
}

static uint64_t pm_allreduce_u64(void *ctx, uint64_t x, weft_op_t op)
{
    uint64_t v = 0;
    MPI_CHECK(MPI_Allreduce(&x, &v, 1, MPI_UINT64_T, mpi_op(op), MPI_COMM_WORLD));
    return v;
}

static void pm_gather(void *ctx, const void *mine, void *all, size_t len)
{
    MPI_CHECK(MPI_Gather(mine, (int)len, MPI_CHAR, all, (int)len, MPI_CHAR, 0,
                         MPI_COMM_WORLD));
}

/* ---- buffers: -R takes them from MPI_Alloc_mem, the MPI counterpart of weft's -R
 *      (weft_mem_alloc), memory the library may register ---- */

static void *pm_alloc(void *ctx, size_t bytes, int reg)
{
    void *p = NULL;
    if (reg ? MPI_Alloc_mem((MPI_Aint)bytes, MPI_INFO_NULL, &p) != MPI_SUCCESS
            : posix_memalign(&p, 4096, bytes) != 0)
        return NULL;
    return p;
}

static void pm_free(void *ctx, void *p, int reg)
{
    if (reg)
        MPI_Free_mem(p);
    else
        free(p);
}

/* ---- the measured calls, in place with MPI_IN_PLACE (see the banner) ---- */

static void pm_run(void *ctx, perf_kind_t kind, const void *send, void *recv,
                   const perf_args_t *a, int in_place)
{
    pm_ctx_t *m = ctx;
    int n = (int)a->c.paramcount;
    const void *s = in_place ? MPI_IN_PLACE : send;
    MPI_Datatype t = m->mtype;
    MPI_Comm w = MPI_COMM_WORLD;

    switch (kind) {
    case PERF_COLL_ALLREDUCE:
        MPI_CHECK(MPI_Allreduce(s, recv, n, t, m->mop, w));
        break;
    case PERF_COLL_REDUCE_SCATTER:
        MPI_CHECK(MPI_Reduce_scatter_block(s, recv, n, t, m->mop, w));
        break;
    case PERF_COLL_ALLGATHER:
        MPI_CHECK(MPI_Allgather(s, n, t, recv, n, t, w));
        break;
    case PERF_COLL_ALLTOALL:
        MPI_CHECK(MPI_Alltoall(s, n, t, recv, n, t, w));
        break;
    case PERF_COLL_BROADCAST:
        if (!in_place && a->rank == a->root)
            memcpy(recv, send, a->c.paramcount * a->type->size);
        MPI_CHECK(MPI_Bcast(recv, n, t, a->root, w));
        break;
    case PERF_COLL_REDUCE:      /* MPI_IN_PLACE is for the root only */
        if (a->rank != a->root)
            MPI_CHECK(MPI_Reduce(send, NULL, n, t, m->mop, a->root, w));
        else
            MPI_CHECK(MPI_Reduce(s, recv, n, t, m->mop, a->root, w));
        break;
    case PERF_COLL_SENDRECV:    /* not a -c choice */
        break;
    }
}

static const perf_backend_t pm_backend = {
    /* the job */
    .check = pm_check,
    .init = pm_init,
    .finalize = pm_finalize,
    .abort = pm_abort,
    .notes = pm_notes,
    .last_error = pm_error,
    /* the driver's own communication */
    .barrier = pm_barrier,
    .allreduce_f64 = pm_allreduce_f64,
    .allreduce_u64 = pm_allreduce_u64,
    .gather = pm_gather,
    /* buffers */
    .alloc = pm_alloc,
    .free = pm_free,
    .reg_alloc = NULL,          /* no "# Buffers" line */
    /* the measured calls */
    .row = pm_row,
    .run = pm_run,
    .scatter_at_start = 1,      /* MPI_IN_PLACE: the result at the start of recv */
};

int main(int argc, char **argv)
{
    pm_ctx_t m = { .prog = NULL, .mtype = MPI_DATATYPE_NULL, .mop = MPI_OP_NULL };
    m.prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    return perf_main(argc, argv, -1, &pm_backend, &m);
}
