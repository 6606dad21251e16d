/*
 * perf_common.c - the driver of the nccl-tests-compatible perf tools, over a backend.
 *
 * The flow is nccl-tests' (src/common.cu): parse the flags, join the job (the backend's
 * init: weft_comm_init under weftrun, mpirun or srun, or MPI_Init), print the parameters
 * and one "Using devices" line per rank, then for each (dtype, op, root) warm up at the
 * largest and the smallest size, and for each size time the out-of-place call then the
 * in-place call: one untimed call, a barrier, `iters` timed calls (per-iteration time
 * combined over ranks as -a says), then -c checked calls on fresh data with the wrong
 * elements summed over ranks. Rows, units and bus-bandwidth factors are nccl-tests'
 * (bench/perf_colls.c). Before the sweep, all ranks measure the host's copy bandwidth
 * together (unless -B gives it); under the table, rows of 1 MB or more are set against
 * the memory-bandwidth bound (see perf_common.h).
 *
 * One driver for every backend (perf_backend_t: weft in perf_weft.c, MPI in
 * mpi_coll_perf.c), so that a weft row and an MPI row are measured by the same code.
 *
 * Invariants: every rank makes the same sequence of backend calls (each decision comes
 * from the command line, nranks, or a value all ranks agreed on), so one rank's failure
 * cannot strand the others in a different collective; a failing call is reported by the
 * backend, which exits 1. Only rank 0 writes the table to stdout.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf_common.h"

typedef struct {
    perf_opts_t o;
    perf_kind_t kind;
    unsigned flags;             /* perf_coll_flags(kind) */
    const perf_backend_t *be;
    void *ctx;                  /* the backend's */
    const char *prog;
    perf_job_t job;
    size_t max_bytes;           /* o.max_bytes after the memory limit */
    char *send, *recv, *expected;   /* max_bytes each */
    perf_args_t a;              /* the row being measured */
    int errors;                 /* checks that found wrong elements on this rank */
    double bw_sum;
    int bw_count;
    int rep;                    /* bumps the data seed for each check */
    perf_bound_t bound;         /* copy bandwidth and the rows the bound section lists */
} perf_run_t;

/* ---- one row ---- */

static void setup_args(perf_run_t *r, size_t bytes)
{
    perf_coll_counts(r->kind, bytes / r->a.type->size, r->a.type->size, r->job.nranks,
                     r->be->scatter_at_start, &r->a.c);
}

static size_t row_bytes(const perf_args_t *a)
{
    size_t n = a->c.sendcount > a->c.recvcount ? a->c.sendcount : a->c.recvcount;
    return n * a->type->size;
}

/* One call. Like nccl-tests, iteration `iter` moves the buffers by a row's size within
 * max_bytes, so that timed calls do not all reuse one cache-hot window. */
static void start_coll(perf_run_t *r, int in_place, int iter)
{
    const perf_args_t *a = &r->a;
    size_t ts = a->type->size, total = row_bytes(a);
    size_t steps = total ? r->max_bytes / total : 1;
    size_t shift = total * ((size_t)iter % (steps ? steps : 1));
    char *recv = r->recv + shift;
    const void *send = in_place ? recv + a->c.send_inplace_offset * (size_t)a->rank * ts
                                : r->send + shift;
    void *out = in_place ? recv + a->c.recv_inplace_offset * (size_t)a->rank * ts : recv;

    r->be->run(r->ctx, r->kind, send, out, a, in_place);
    if (r->o.blocking)
        r->be->barrier(r->ctx);
}

/* Fresh inputs and expected outputs for a check (or for the untimed call). */
static void init_data(perf_run_t *r, int in_place, uint64_t seed)
{
    perf_args_t *a = &r->a;
    size_t ts = a->type->size;
    a->seed = seed;
    memset(r->recv, 0, a->c.recvcount * ts);
    void *input = in_place ? r->recv + a->c.send_inplace_offset * (size_t)a->rank * ts
                           : (void *)r->send;
    perf_coll_init(r->kind, a, input, r->recv);
}

static size_t check_data(perf_run_t *r, int in_place)
{
    const perf_args_t *a = &r->a;
    const char *out = in_place ? r->recv + a->c.recv_inplace_offset * (size_t)a->rank *
                                 a->type->size
                               : r->recv;
    return perf_count_wrong(a->type, out, r->expected, a->c.recvcount);
}

/* This rank's per-iteration time, combined over ranks as -a says (nccl-tests' Allreduce):
 * 0 rank 0's (a sum where only rank 0 adds), 1 the mean, 2 the min, 3 the max. */
static double combine_time(perf_run_t *r, double sec)
{
    switch (r->o.average) {
    case 0: return r->be->allreduce_f64(r->ctx, r->job.rank == 0 ? sec : 0.0, WEFT_SUM);
    case 2: return r->be->allreduce_f64(r->ctx, sec, WEFT_MIN);
    case 3: return r->be->allreduce_f64(r->ctx, sec, WEFT_MAX);
    default: return r->be->allreduce_f64(r->ctx, sec, WEFT_SUM) / r->job.nranks;
    }
}

static uint64_t sum_over_ranks(perf_run_t *r, uint64_t x)
{
    return r->be->allreduce_u64(r->ctx, x, WEFT_SUM);
}

/* -c checked calls; the wrong elements over all ranks, or -1 where nothing is checked. */
static long check_calls(perf_run_t *r, int in_place)
{
    uint64_t wrong = 0;
    r->rep++;
    if (r->o.check == 0)
        return -1;
    for (int c = 0; c < r->o.check && wrong == 0; c++) {
        init_data(r, in_place, (uint64_t)r->rep);
        start_coll(r, in_place, 0);
        size_t mine = check_data(r, in_place);
        if (mine)
            r->errors++;
        wrong = sum_over_ranks(r, mine);
    }
    return (long)wrong;
}

/* Times and checks one column group (nccl-tests' BenchTime). */
static void bench_time(perf_run_t *r, int in_place)
{
    const perf_opts_t *o = &r->o;
    double algbw, busbw;

    if (in_place && (r->flags & PERF_NO_INPLACE)) {
        if (r->job.rank == 0)
            perf_print_na();
        return;
    }

    if (o->check)
        init_data(r, in_place, 99);
    start_coll(r, in_place, 0);
    r->be->barrier(r->ctx);

    double t0 = perf_now();
    for (int iter = 0; iter < o->iters; iter++)
        for (int aiter = 0; aiter < o->agg_iters; aiter++)
            start_coll(r, in_place, iter * o->agg_iters + aiter);
    double sec = combine_time(r, (perf_now() - t0) / ((double)o->iters * o->agg_iters));

    perf_coll_bw(r->kind, r->a.c.paramcount, r->a.type->size, sec, r->job.nranks, &algbw,
                 &busbw);
    r->be->barrier(r->ctx);

    long wrong = check_calls(r, in_place);
    if (r->job.rank == 0)
        perf_print_result(sec * 1.0e6, algbw, busbw, wrong);
    perf_bound_record(&r->bound, row_bytes(&r->a), in_place, sec, busbw);
    r->bw_sum += busbw;
    r->bw_count++;
}

static void warmup(perf_run_t *r, size_t bytes)
{
    setup_args(r, bytes);
    for (int iter = 0; iter < r->o.warmup; iter++)
        start_coll(r, 0, iter);
}

/* All sizes for one (dtype, op, root) (nccl-tests' TimeTest). */
static void time_test(perf_run_t *r, const char *op_name)
{
    perf_args_t *a = &r->a;
    long cycles = r->o.run_cycles;

    r->be->barrier(r->ctx);
    /* every doubling size from the smallest, as nccl-tests 2.19.6 warms up */
    for (size_t size = r->o.min_bytes; size <= r->max_bytes; size = size ? 2 * size : 1)
        warmup(r, size);
    do {
        for (size_t size = r->o.min_bytes;;) {
            setup_args(r, size);
            if (r->job.rank == 0)
                perf_print_row_start(row_bytes(a), a->c.paramcount, a->type->name, op_name,
                                     a->root);
            bench_time(r, 0);
            bench_time(r, 1);
            if (r->job.rank == 0)
                printf("\n");
            size = perf_next_size(&r->o, size);
            if (size == 0)
                break;
        }
    } while (--cycles != 0);
}

/* Every (dtype, op, root) the flags ask for, in nccl-tests' order; rows the backend
 * cannot run are skipped. */
static void run_all(perf_run_t *r)
{
    unsigned flags = r->flags;
    int ntypes, nops = 1, nroots = 1;
    const perf_type_t *types = perf_types(&ntypes);
    int t0 = r->o.type < 0 ? 0 : r->o.type, t1 = r->o.type < 0 ? ntypes : r->o.type + 1;

    if ((flags & PERF_OP) && r->o.op < 0)
        nops = PERF_NOPS;
    if ((flags & PERF_ROOT) && r->o.root < 0)
        nroots = r->job.nranks;
    for (int t = t0; t < t1; t++) {
        for (int i = 0; i < nops; i++) {
            weft_op_t op = !(flags & PERF_OP) ? WEFT_SUM
                           : r->o.op < 0      ? perf_op_at(i)
                                              : (weft_op_t)r->o.op;
            if (r->be->row && !r->be->row(r->ctx, r->kind, &types[t], op))
                continue;
            for (int j = 0; j < nroots; j++) {
                perf_args_t *a = &r->a;
                a->type = &types[t];
                a->op = op;
                a->data_op = (flags & PERF_REDUCES) ? op : WEFT_SUM;
                a->root = !(flags & PERF_ROOT) ? -1 : r->o.root < 0 ? j : r->o.root;
                time_test(r, (flags & PERF_OP) ? perf_op_str(op) : "none");
            }
        }
    }
}

/* ---- setup ---- */

/* "# Using devices": each rank formats its line, rank 0 prints them in rank order. */
static void print_devices(perf_run_t *r)
{
    enum { LINE = 256 };
    char line[LINE];
    char *all = malloc((size_t)r->job.nranks * LINE);

    if (!all) {
        fprintf(stderr, "%s: out of memory\n", r->prog);
        r->be->abort(r->ctx);
        exit(1);
    }
    memset(line, 0, sizeof(line));
    perf_device_line(line, sizeof(line) - 1, r->job.rank, r->job.local_rank, r->job.desc);
    r->be->gather(r->ctx, line, all, LINE);
    if (r->job.rank == 0)
        for (int i = 0; i < r->job.nranks; i++) {
            all[(size_t)i * LINE + LINE - 1] = '\0';
            printf("%s", all + (size_t)i * LINE);
        }
    free(all);
}

static void barrier_fn(void *ctx)
{
    const perf_run_t *r = ctx;
    r->be->barrier(r->ctx);
}

/* The copy bandwidth for the bound section, as rank 0's -B says: none, given, or measured
 * by all ranks at once and taken from the slowest. Also agrees whether any host runs more
 * ranks than cores. */
static void measure_copy_bw(perf_run_t *r)
{
    perf_bound_t *b = &r->bound;
    double opt = r->be->allreduce_f64(r->ctx, r->job.rank == 0 ? r->o.copy_bw : 0.0,
                                      WEFT_SUM);

    perf_bound_init(b, r->kind, r->job.nranks, opt, r->job.local_size);
    if (b->off)
        return;
    if (!b->given)
        b->copy_bw = r->be->allreduce_f64(r->ctx, perf_copy_bw(b->copy_bytes, barrier_fn, r),
                                          WEFT_MIN);
    b->oversubscribed = r->be->allreduce_u64(r->ctx, (uint64_t)b->oversubscribed,
                                             WEFT_MAX) != 0;
}

/* Caps max_bytes so send, recv and expected fit in this host's memory per local rank
 * (nccl-tests caps by GPU memory). All ranks agree on the smallest cap. */
static void limit_memory(perf_run_t *r)
{
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    int local = r->job.local_size > 0 ? r->job.local_size : 1;
    uint64_t mine = phys / (uint64_t)local, cap;
    uint64_t reserve = mine / 4 < (1ull << 30) ? mine / 4 : (1ull << 30);

    mine = (mine - reserve) / 3;   /* expected too, with -c 0 as well (alloc_buffers) */
    cap = r->be->allreduce_u64(r->ctx, mine, WEFT_MIN);
    r->max_bytes = r->o.max_bytes;
    if (r->max_bytes > cap) {
        r->max_bytes = cap;
        if (r->o.min_bytes > cap)
            r->o.min_bytes = cap;
        if (r->job.rank == 0)
            printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", r->max_bytes);
    }
}

/* Allocates and touches the three buffers; every rank learns whether all succeeded.
 * With -R, send and recv come from the backend's registered memory (weft_mem_alloc,
 * MPI_Alloc_mem), as nccl-tests -R registers its buffers. */
static void alloc_buffers(perf_run_t *r)
{
    size_t n = r->max_bytes > 64 ? r->max_bytes : 64;
    uint64_t bad = 0;
    char **bufs[3] = { &r->send, &r->recv, &r->expected };

    for (int i = 0; i < 3; i++) {
        void *p = r->be->alloc(r->ctx, n, r->o.local_register && i < 2);
        if (!p) {
            bad = 1;
            continue;
        }
        memset(p, 0, n);
        *bufs[i] = p;
    }
    if (sum_over_ranks(r, bad)) {
        if (r->job.rank == 0)
            fprintf(stderr, "%s: cannot allocate 3 x %zu bytes on some rank\n", r->prog, n);
        r->be->finalize(r->ctx);
        exit(1);
    }
}

static void free_buffers(perf_run_t *r)
{
    r->be->free(r->ctx, r->send, r->o.local_register);
    r->be->free(r->ctx, r->recv, r->o.local_register);
    r->be->free(r->ctx, r->expected, 0);
}

/* Joins the job and checks what needs nranks; 0 to go on, else the exit code. */
static int join(perf_run_t *r, int *argc, char ***argv)
{
    int rc = r->be->init(r->ctx, argc, argv, &r->o, &r->job);
    if (rc != 0)
        return rc;
    r->a.rank = r->job.rank;
    r->a.nranks = r->job.nranks;
    if ((r->flags & PERF_ROOT) && r->o.root >= r->job.nranks) {
        if (r->job.rank == 0)
            fprintf(stderr, "%s: invalid root %d for %d ranks\n", r->prog, r->o.root,
                    r->job.nranks);
        r->be->finalize(r->ctx);
        return 2;
    }
    return 0;
}

int perf_main(int argc, char **argv, int kind, const perf_backend_t *be, void *ctx)
{
    perf_run_t run, *r = &run;
    int rc;

    memset(r, 0, sizeof(*r));
    setlinebuf(stdout);
    r->be = be;
    r->ctx = ctx;
    r->prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    perf_opts_default(&r->o);
    rc = perf_parse_opts(argc, argv, &r->o, kind < 0);
    if (rc == 0 && be->check)
        rc = be->check(ctx, &r->o, &kind);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    r->kind = (perf_kind_t)kind;
    r->flags = perf_coll_flags(r->kind);
    if ((rc = join(r, &argc, &argv)) != 0)
        return rc;

    if (r->job.rank == 0) {
        be->notes(ctx, &r->o, r->kind);
        perf_print_params(&r->o, r->prog);
        if (r->o.local_register && be->reg_alloc)
            printf("# Buffers: send and recv from %s (-R %d): peers on this host "
                   "read them in place\n", be->reg_alloc, r->o.local_register);
    }
    print_devices(r);
    measure_copy_bw(r);                         /* before the buffers: less memory at once */
    limit_memory(r);
    alloc_buffers(r);
    r->a.expected = r->expected;
    if (r->job.rank == 0)
        perf_print_header(r->o.cputime);

    run_all(r);

    int errors = (int)sum_over_ranks(r, (uint64_t)r->errors);
    double avg_bw = r->bw_count ? r->bw_sum / r->bw_count : 0.0;
    if (r->job.rank == 0)
        perf_print_footer(errors, avg_bw, &r->bound, be->last_error(ctx), r->prog);
    rc = perf_exit_code(errors, avg_bw);

    perf_bound_free(&r->bound);
    free_buffers(r);
    be->finalize(ctx);
    return rc;
}
