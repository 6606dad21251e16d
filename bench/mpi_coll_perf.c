/*
 * mpi_coll_perf.c - the MPI peer of weft's perf tools, for side-by-side comparison.
 *
 *   mpirun -np N mpi_coll_perf -c allreduce|reduce_scatter|allgather|broadcast|reduce|alltoall
 *          [nccl-tests' flags: -b -e -f -i -n -w -m -N -d -o -r -a -z -k/--check ...]
 *
 * Times MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast, MPI_Reduce or
 * MPI_Alltoall the way bench/perf_common.c times weft (nccl-tests' method: warm-up at the
 * largest and smallest size, per size one untimed call, a barrier, `iters` timed calls
 * moving through the buffers, the time combined over ranks per -a, then checked calls on
 * fresh data), with the same size-to-count rules, bus-bandwidth factors, data pattern and
 * output table (shared through perf_common.h), so that rows compare line by line, and the
 * same memory-bandwidth bound section under it (host copy bandwidth measured the same way).
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

typedef struct {
    const char *name;
    perf_kind_t kind;
    unsigned flags;             /* PERF_OP, PERF_REDUCES, PERF_ROOT */
} mpi_coll_t;

static const mpi_coll_t colls[] = {
    { "allreduce", PERF_COLL_ALLREDUCE, PERF_OP | PERF_REDUCES },
    { "reduce_scatter", PERF_COLL_REDUCE_SCATTER, PERF_OP | PERF_REDUCES },
    { "allgather", PERF_COLL_ALLGATHER, 0 },
    { "broadcast", PERF_COLL_BROADCAST, PERF_ROOT },
    { "reduce", PERF_COLL_REDUCE, PERF_OP | PERF_REDUCES | PERF_ROOT },
    { "alltoall", PERF_COLL_ALLTOALL, 0 },
};

typedef struct {
    perf_opts_t o;
    const mpi_coll_t *coll;
    const char *prog;
    int rank, nranks;
    size_t max_bytes;
    char *send, *recv, *expected;
    perf_args_t a;
    MPI_Datatype mtype;
    MPI_Op mop;
    int errors;
    double bw_sum;
    int bw_count;
    int rep;
    perf_bound_t bound;
} mpi_run_t;

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

/* ---- the collectives: counts, bandwidth, data, call ---- */

static void counts(perf_kind_t k, size_t count, int nranks, perf_counts_t *c)
{
    size_t n = (size_t)nranks, base = count / n;
    memset(c, 0, sizeof(*c));
    switch (k) {
    case PERF_COLL_REDUCE_SCATTER:  /* MPI_IN_PLACE: input in recv, result at its start */
        c->sendcount = base * n;
        c->recvcount = c->paramcount = base;
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
    default:
        c->sendcount = c->recvcount = c->paramcount = count;
        break;
    }
}

static void bandwidth(perf_kind_t k, size_t count, size_t ts, double sec, int n,
                      double *algbw, double *busbw)
{
    int spread = k == PERF_COLL_REDUCE_SCATTER || k == PERF_COLL_ALLGATHER ||
                 k == PERF_COLL_ALLTOALL;
    *algbw = (double)(count * ts * (spread ? (size_t)n : 1)) / 1.0e9 / sec;
    *busbw = *algbw * (k == PERF_COLL_ALLREDUCE ? 2.0 * (n - 1) / n
                       : spread                 ? (double)(n - 1) / n
                                                : 1.0);
}

static void init(perf_kind_t k, const perf_args_t *a, void *input, const void *recv)
{
    size_t block = a->c.paramcount;
    if (k != PERF_COLL_BROADCAST || a->rank == a->root)
        perf_fill(a, input, a->c.sendcount, 0, k == PERF_COLL_BROADCAST ? a->root : a->rank);
    switch (k) {
    case PERF_COLL_ALLREDUCE:
        perf_fill_reduced(a, a->expected, a->c.recvcount, 0);
        break;
    case PERF_COLL_REDUCE_SCATTER:
        perf_fill_reduced(a, a->expected, a->c.recvcount, (size_t)a->rank * block);
        break;
    case PERF_COLL_ALLGATHER:
        for (int j = 0; j < a->nranks; j++)
            perf_fill(a, perf_elem(a, a->expected, (size_t)j * block), block, 0, j);
        break;
    case PERF_COLL_BROADCAST:
        perf_fill(a, a->expected, a->c.recvcount, 0, a->root);
        break;
    case PERF_COLL_REDUCE:
        if (a->rank == a->root)
            perf_fill_reduced(a, a->expected, a->c.recvcount, 0);
        else
            memcpy(a->expected, recv, a->c.recvcount * a->type->size);
        break;
    case PERF_COLL_ALLTOALL:
        for (int j = 0; j < a->nranks; j++)
            perf_fill(a, perf_elem(a, a->expected, (size_t)j * block), block,
                      (size_t)a->rank * block, j);
        break;
    case PERF_COLL_SENDRECV:    /* not a -c choice */
        break;
    }
}

static void call(mpi_run_t *r, const void *send, void *recv, int in_place)
{
    const perf_args_t *a = &r->a;
    int n = (int)a->c.paramcount;
    const void *s = in_place ? MPI_IN_PLACE : send;
    MPI_Datatype t = r->mtype;
    MPI_Comm w = MPI_COMM_WORLD;

    switch (r->coll->kind) {
    case PERF_COLL_ALLREDUCE:
        MPI_CHECK(MPI_Allreduce(s, recv, n, t, r->mop, w));
        break;
    case PERF_COLL_REDUCE_SCATTER:
        MPI_CHECK(MPI_Reduce_scatter_block(s, recv, n, t, r->mop, w));
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
            MPI_CHECK(MPI_Reduce(in_place ? recv : send, NULL, n, t, r->mop, a->root, w));
        else
            MPI_CHECK(MPI_Reduce(s, recv, n, t, r->mop, a->root, w));
        break;
    case PERF_COLL_SENDRECV:
        break;
    }
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

/* ---- one row (as perf_common.c) ---- */

static size_t row_bytes(const perf_args_t *a)
{
    size_t n = a->c.sendcount > a->c.recvcount ? a->c.sendcount : a->c.recvcount;
    return n * a->type->size;
}

static void setup_args(mpi_run_t *r, size_t bytes)
{
    counts(r->coll->kind, bytes / r->a.type->size, r->nranks, &r->a.c);
}

static void start_coll(mpi_run_t *r, int in_place, int iter)
{
    const perf_args_t *a = &r->a;
    size_t ts = a->type->size, total = row_bytes(a);
    size_t steps = total ? r->max_bytes / total : 1;
    size_t shift = total * ((size_t)iter % (steps ? steps : 1));
    char *recv = r->recv + shift;
    const void *send = in_place ? recv + a->c.send_inplace_offset * (size_t)a->rank * ts
                                : r->send + shift;
    void *out = in_place ? recv + a->c.recv_inplace_offset * (size_t)a->rank * ts : recv;

    call(r, send, out, in_place);
    if (r->o.blocking)
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

static void init_data(mpi_run_t *r, int in_place, uint64_t seed)
{
    perf_args_t *a = &r->a;
    size_t ts = a->type->size;
    a->seed = seed;
    memset(r->recv, 0, a->c.recvcount * ts);
    void *input = in_place ? r->recv + a->c.send_inplace_offset * (size_t)a->rank * ts
                           : (void *)r->send;
    init(r->coll->kind, a, input, r->recv);
}

static double combine_time(mpi_run_t *r, double sec)
{
    double v = sec;
    MPI_Op op = r->o.average == 2 ? MPI_MIN : r->o.average == 3 ? MPI_MAX : MPI_SUM;
    if (r->o.average == 0) {
        MPI_CHECK(MPI_Bcast(&v, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
        return v;
    }
    MPI_CHECK(MPI_Allreduce(&sec, &v, 1, MPI_DOUBLE, op, MPI_COMM_WORLD));
    return r->o.average == 1 ? v / r->nranks : v;
}

static uint64_t sum_over_ranks(uint64_t x)
{
    uint64_t total = 0;
    MPI_CHECK(MPI_Allreduce(&x, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
    return total;
}

static long check_calls(mpi_run_t *r, int in_place)
{
    const perf_args_t *a = &r->a;
    uint64_t wrong = 0;
    r->rep++;
    if (r->o.check == 0)
        return -1;
    for (int c = 0; c < r->o.check && wrong == 0; c++) {
        init_data(r, in_place, (uint64_t)r->rep);
        start_coll(r, in_place, 0);
        const char *out = in_place ? r->recv + a->c.recv_inplace_offset * (size_t)a->rank *
                                     a->type->size
                                   : r->recv;
        size_t mine = perf_count_wrong(a->type, out, r->expected, a->c.recvcount);
        if (mine)
            r->errors++;
        wrong = sum_over_ranks(mine);
    }
    return (long)wrong;
}

static void bench_time(mpi_run_t *r, int in_place)
{
    const perf_opts_t *o = &r->o;
    double algbw, busbw;

    if (o->check)
        init_data(r, in_place, 99);
    start_coll(r, in_place, 0);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    double t0 = perf_now();
    for (int iter = 0; iter < o->iters; iter++)
        for (int aiter = 0; aiter < o->agg_iters; aiter++)
            start_coll(r, in_place, iter * o->agg_iters + aiter);
    double sec = combine_time(r, (perf_now() - t0) / ((double)o->iters * o->agg_iters));

    bandwidth(r->coll->kind, r->a.c.paramcount, r->a.type->size, sec, r->nranks, &algbw,
              &busbw);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    long wrong = check_calls(r, in_place);
    if (r->rank == 0)
        perf_print_result(sec * 1.0e6, algbw, busbw, wrong);
    perf_bound_record(&r->bound, row_bytes(&r->a), in_place, sec, busbw);
    r->bw_sum += busbw;
    r->bw_count++;
}

static void warmup(mpi_run_t *r, size_t bytes)
{
    setup_args(r, bytes);
    for (int iter = 0; iter < r->o.warmup; iter++)
        start_coll(r, 0, iter);
}

static void time_test(mpi_run_t *r, const char *op_name)
{
    perf_args_t *a = &r->a;
    long cycles = r->o.run_cycles;

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    warmup(r, r->max_bytes);
    warmup(r, r->o.min_bytes);
    do {
        for (size_t size = r->o.min_bytes;;) {
            setup_args(r, size);
            if (r->rank == 0)
                perf_print_row_start(row_bytes(a), a->c.paramcount, a->type->name, op_name,
                                     a->root);
            bench_time(r, 0);
            bench_time(r, 1);
            if (r->rank == 0)
                printf("\n");
            size = perf_next_size(&r->o, size);
            if (size == 0)
                break;
        }
    } while (--cycles != 0);
}

/* Whether MPI can run (type, op); under "all", rows it cannot run are skipped. */
static int runnable(const mpi_run_t *r, const perf_type_t *t, weft_op_t op)
{
    int reduces = (r->coll->flags & PERF_REDUCES) != 0;
    return mpi_type(t, reduces) != MPI_DATATYPE_NULL && (!reduces || mpi_op(op) != MPI_OP_NULL);
}

static void run_all(mpi_run_t *r)
{
    unsigned flags = r->coll->flags;
    int ntypes, nops = 1, nroots = 1;
    const perf_type_t *types = perf_types(&ntypes);
    int t0 = r->o.type < 0 ? 0 : r->o.type, t1 = r->o.type < 0 ? ntypes : r->o.type + 1;

    if ((flags & PERF_OP) && r->o.op < 0)
        nops = PERF_NOPS;
    if ((flags & PERF_ROOT) && r->o.root < 0)
        nroots = r->nranks;
    for (int t = t0; t < t1; t++) {
        for (int i = 0; i < nops; i++) {
            weft_op_t op = !(flags & PERF_OP) ? WEFT_SUM
                           : r->o.op < 0      ? perf_op_at(i)
                                              : (weft_op_t)r->o.op;
            if (!runnable(r, &types[t], op))
                continue;
            for (int j = 0; j < nroots; j++) {
                perf_args_t *a = &r->a;
                a->type = &types[t];
                a->op = op;
                a->data_op = (flags & PERF_REDUCES) ? op : WEFT_SUM;
                a->root = !(flags & PERF_ROOT) ? -1 : r->o.root < 0 ? j : r->o.root;
                r->mtype = mpi_type(a->type, (flags & PERF_REDUCES) != 0);
                r->mop = mpi_op(op);
                time_test(r, (flags & PERF_OP) ? perf_op_str(op) : "none");
            }
        }
    }
}

/* ---- setup ---- */

static void print_devices(mpi_run_t *r)
{
    enum { LINE = 256 };
    char line[LINE], desc[MPI_MAX_LIBRARY_VERSION_STRING + 8];
    char *all = r->rank == 0 ? malloc((size_t)r->nranks * LINE) : NULL;
    int len = 0, local = 0;
    MPI_Comm node;

    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                  &node));
    MPI_CHECK(MPI_Comm_rank(node, &local));
    MPI_CHECK(MPI_Comm_free(&node));
    MPI_CHECK(MPI_Get_library_version(desc, &len));
    desc[strcspn(desc, ",\n")] = '\0';           /* "Open MPI v4.1.4" */
    memset(line, 0, sizeof(line));
    perf_device_line(line, sizeof(line) - 1, r->rank, local, desc);
    MPI_CHECK(MPI_Gather(line, LINE, MPI_CHAR, all, LINE, MPI_CHAR, 0, MPI_COMM_WORLD));
    if (r->rank == 0) {
        for (int i = 0; i < r->nranks; i++)
            printf("%s", all + (size_t)i * LINE);
        free(all);
    }
}

/* The number of ranks on this host. */
static int local_size(void)
{
    int local = 1;
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                  &node));
    MPI_CHECK(MPI_Comm_size(node, &local));
    MPI_CHECK(MPI_Comm_free(&node));
    return local;
}

static void barrier_fn(void *ctx)
{
    (void)ctx;
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

/* As perf_common.c's: the copy bandwidth per rank 0's -B (none, given, or measured by all
 * ranks at once, the slowest rank's), and whether any host runs more ranks than cores. */
static void measure_copy_bw(mpi_run_t *r)
{
    perf_bound_t *b = &r->bound;
    double opt = r->o.copy_bw, mine;
    int over;

    MPI_CHECK(MPI_Bcast(&opt, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    perf_bound_init(b, r->coll->kind, r->nranks, opt, local_size());
    if (b->off)
        return;
    if (!b->given) {
        mine = perf_copy_bw(b->copy_bytes, barrier_fn, NULL);
        MPI_CHECK(MPI_Allreduce(&mine, &b->copy_bw, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD));
    }
    over = b->oversubscribed;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &over, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    b->oversubscribed = over != 0;
}

static void limit_memory(mpi_run_t *r)
{
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    int local = local_size();
    uint64_t mine = phys / (uint64_t)local, cap = 0;
    uint64_t reserve = mine / 4 < (1ull << 30) ? mine / 4 : (1ull << 30);

    mine = (mine - reserve) / (r->o.check ? 3 : 2);
    MPI_CHECK(MPI_Allreduce(&mine, &cap, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD));
    r->max_bytes = r->o.max_bytes;
    if (r->max_bytes > cap) {
        r->max_bytes = cap;
        if (r->o.min_bytes > cap)
            r->o.min_bytes = cap;
        if (r->rank == 0)
            printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", r->max_bytes);
    }
}

/* With -R, send and recv come from MPI_Alloc_mem: the MPI counterpart of weft's -R
 * (weft_mem_alloc), memory the library may register. */
static void alloc_buffers(mpi_run_t *r)
{
    size_t n = r->max_bytes > 64 ? r->max_bytes : 64;
    uint64_t bad = 0;
    char **bufs[3] = { &r->send, &r->recv, &r->expected };
    for (int i = 0; i < 3; i++) {
        void *p = NULL;
        if (r->o.local_register && i < 2 ?
                MPI_Alloc_mem((MPI_Aint)n, MPI_INFO_NULL, &p) != MPI_SUCCESS :
                posix_memalign(&p, 4096, n) != 0) {
            bad = 1;
            continue;
        }
        memset(p, 0, n);
        *bufs[i] = p;
    }
    if (sum_over_ranks(bad)) {
        if (r->rank == 0)
            fprintf(stderr, "%s: cannot allocate 3 x %zu bytes on some rank\n", r->prog, n);
        MPI_Finalize();
        exit(1);
    }
}

/* The checks that need only the command line; 0 to go on, else the exit code. */
static int check_request(mpi_run_t *r)
{
    const char *want = r->o.coll;
    int ntypes;
    const perf_type_t *types = perf_types(&ntypes);

    for (size_t i = 0; want && i < sizeof(colls) / sizeof(colls[0]); i++)
        if (strcmp(want, colls[i].name) == 0)
            r->coll = &colls[i];
    if (!r->coll) {
        fprintf(stderr, "%s: %s collective; -c allreduce|reduce_scatter|allgather|broadcast|"
                "reduce|alltoall\n", r->prog, want ? "unknown" : "no");
        return 2;
    }
    if (r->o.max_bytes > (size_t)INT_MAX) {
        fprintf(stderr, "%s: MPI counts are int: maxbytes must stay below 2G\n", r->prog);
        return 2;
    }
    if (r->o.type >= 0 && !runnable(r, &types[r->o.type], r->o.op < 0 ? WEFT_SUM :
                                                            (weft_op_t)r->o.op)) {
        fprintf(stderr, "%s: MPI cannot %s %s\n", r->prog,
                r->o.op >= 0 ? perf_op_str((weft_op_t)r->o.op) : "reduce",
                types[r->o.type].name);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    mpi_run_t run, *r = &run;
    int rc;

    memset(r, 0, sizeof(*r));
    setlinebuf(stdout);
    r->prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    perf_opts_default(&r->o);
    rc = perf_parse_opts(argc, argv, &r->o, 1);
    if (rc == 0)
        rc = check_request(r);
    if (rc != 0)
        return rc == 1 ? 0 : 2;

    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r->nranks);
    r->a.rank = r->rank;
    r->a.nranks = r->nranks;
    if ((r->coll->flags & PERF_ROOT) && r->o.root >= r->nranks) {
        if (r->rank == 0)
            fprintf(stderr, "%s: invalid root %d for %d ranks\n", r->prog, r->o.root,
                    r->nranks);
        MPI_Finalize();
        return 2;
    }

    if (r->rank == 0 && (r->coll->flags & PERF_REDUCES) && (r->o.type < 0 || r->o.op < 0))
        fprintf(stderr, "%s: note: skipping what MPI cannot reduce (half, bfloat16, avg)\n",
                r->prog);
    if (r->rank == 0)
        perf_print_params(&r->o);
    print_devices(r);
    measure_copy_bw(r);                         /* before the buffers: less memory at once */
    limit_memory(r);
    alloc_buffers(r);
    r->a.expected = r->expected;
    if (r->rank == 0)
        perf_print_header(r->o.cputime);

    run_all(r);

    int errors = (int)sum_over_ranks((uint64_t)r->errors);
    double avg_bw = r->bw_count ? r->bw_sum / r->bw_count : 0.0;
    if (r->rank == 0)
        perf_print_footer(errors, avg_bw, &r->bound, "");
    rc = perf_exit_code(errors, avg_bw);

    perf_bound_free(&r->bound);
    if (r->o.local_register) {
        MPI_Free_mem(r->send);
        MPI_Free_mem(r->recv);
    } else {
        free(r->send);
        free(r->recv);
    }
    free(r->expected);
    MPI_Finalize();
    return rc;
}
