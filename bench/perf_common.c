/*
 * perf_common.c - the driver of weft's nccl-tests-compatible perf tools.
 *
 * The flow is nccl-tests' (src/common.cu): parse the flags, join the job with
 * weft_comm_init (weftrun, mpirun or srun environment), print the parameters and one
 * "Using devices" line per rank, then for each (dtype, op, root) warm up at the largest and
 * the smallest size, and for each size time the out-of-place call then the in-place call:
 * one untimed call, a barrier, `iters` timed calls (per-iteration time combined over ranks
 * as -a says), then -c checked calls on fresh data with the wrong elements summed over
 * ranks. Rows, units and bus-bandwidth factors are nccl-tests'. Before the sweep, all ranks
 * measure the host's copy bandwidth together (unless -B gives it); under the table, rows of
 * 1 MB or more are set against the memory-bandwidth bound (see perf_common.h).
 *
 * Invariants: every rank makes the same sequence of weft calls (each decision comes from
 * the command line, nranks, or a value all ranks agreed on), so one rank's failure cannot
 * strand the others in a different collective; a failing call aborts the communicator and
 * exits 1. Only rank 0 writes the table to stdout.
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
    const perf_coll_t *coll;
    const char *prog;
    weft_comm_t *comm;
    int rank, nranks;
    size_t max_bytes;           /* o.max_bytes after the memory limit */
    char *send, *recv, *expected;   /* max_bytes each */
    perf_args_t a;              /* the row being measured */
    int errors;                 /* checks that found wrong elements on this rank */
    double bw_sum;
    int bw_count;
    int rep;                    /* bumps the data seed for each check */
    perf_bound_t bound;         /* copy bandwidth and the rows the bound section lists */
} perf_run_t;

#define PERF_CHECK(r, call)                                                   \
    do {                                                                      \
        weft_status_t st_ = (call);                                           \
        if (st_ != WEFT_OK)                                                   \
            perf_fail((r), st_, __FILE__, __LINE__);                          \
    } while (0)

/* Reports a failed weft call the way nccl-tests reports an NCCL failure, then leaves. */
static void perf_fail(perf_run_t *r, weft_status_t st, const char *file, int line)
{
    char host[256];
    perf_hostname(host, sizeof(host));
    fflush(stdout);
    printf("%s: Test weft failure %s:%d '%s / %s'\n", host, file, line, weft_status_str(st),
           weft_last_error());
    printf(" .. %s pid %d: Test failure (rank %d)\n", host, (int)getpid(), r->rank);
    fflush(stdout);
    if (r->comm)
        weft_comm_abort(r->comm);
    exit(1);
}

/* ---- one row ---- */

static void setup_args(perf_run_t *r, size_t bytes)
{
    r->coll->counts(bytes / r->a.type->size, r->nranks, &r->a.c);
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

    PERF_CHECK(r, r->coll->run(send, out, a));
    if (r->o.blocking)
        PERF_CHECK(r, weft_barrier(r->comm));
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
    r->coll->init(a, input, r->recv);
}

static size_t check_data(perf_run_t *r, int in_place)
{
    const perf_args_t *a = &r->a;
    const char *out = in_place ? r->recv + a->c.recv_inplace_offset * (size_t)a->rank *
                                 a->type->size
                               : r->recv;
    return perf_count_wrong(a->type, out, r->expected, a->c.recvcount);
}

/* This rank's per-iteration time, combined over ranks as -a says (nccl-tests' Allreduce). */
static double combine_time(perf_run_t *r, double sec)
{
    double v = sec;
    switch (r->o.average) {
    case 0:
        PERF_CHECK(r, weft_broadcast(&v, &v, 1, WEFT_FLOAT64, 0, r->comm));
        return v;
    case 2:
        PERF_CHECK(r, weft_allreduce(&sec, &v, 1, WEFT_FLOAT64, WEFT_MIN, r->comm));
        return v;
    case 3:
        PERF_CHECK(r, weft_allreduce(&sec, &v, 1, WEFT_FLOAT64, WEFT_MAX, r->comm));
        return v;
    default:
        PERF_CHECK(r, weft_allreduce(&sec, &v, 1, WEFT_FLOAT64, WEFT_SUM, r->comm));
        return v / r->nranks;
    }
}

static uint64_t sum_over_ranks(perf_run_t *r, uint64_t x)
{
    uint64_t total = 0;
    PERF_CHECK(r, weft_allreduce(&x, &total, 1, WEFT_UINT64, WEFT_SUM, r->comm));
    return total;
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

    if (in_place && (r->coll->flags & PERF_NO_INPLACE)) {
        if (r->rank == 0)
            perf_print_na();
        return;
    }

    if (o->check)
        init_data(r, in_place, 99);
    start_coll(r, in_place, 0);
    PERF_CHECK(r, weft_barrier(r->comm));

    double t0 = perf_now();
    for (int iter = 0; iter < o->iters; iter++)
        for (int aiter = 0; aiter < o->agg_iters; aiter++)
            start_coll(r, in_place, iter * o->agg_iters + aiter);
    double sec = combine_time(r, (perf_now() - t0) / ((double)o->iters * o->agg_iters));

    r->coll->bw(r->a.c.paramcount, r->a.type->size, sec, r->nranks, &algbw, &busbw);
    PERF_CHECK(r, weft_barrier(r->comm));

    long wrong = check_calls(r, in_place);
    if (r->rank == 0)
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

    PERF_CHECK(r, weft_barrier(r->comm));
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

/* Every (dtype, op, root) the flags ask for, in nccl-tests' order. */
static void run_all(perf_run_t *r)
{
    const perf_coll_t *coll = r->coll;
    int ntypes, nops = 1, nroots = 1;
    const perf_type_t *types = perf_types(&ntypes);
    int t0 = r->o.type < 0 ? 0 : r->o.type, t1 = r->o.type < 0 ? ntypes : r->o.type + 1;

    if ((coll->flags & PERF_OP) && r->o.op < 0)
        nops = PERF_NOPS;
    if ((coll->flags & PERF_ROOT) && r->o.root < 0)
        nroots = r->nranks;
    for (int t = t0; t < t1; t++) {
        for (int i = 0; i < nops; i++) {
            for (int j = 0; j < nroots; j++) {
                perf_args_t *a = &r->a;
                a->type = &types[t];
                a->op = !(coll->flags & PERF_OP) ? WEFT_SUM
                        : r->o.op < 0            ? perf_op_at(i)
                                                 : (weft_op_t)r->o.op;
                a->data_op = (coll->flags & PERF_REDUCES) ? a->op : WEFT_SUM;
                a->root = !(coll->flags & PERF_ROOT) ? -1 : r->o.root < 0 ? j : r->o.root;
                time_test(r, (coll->flags & PERF_OP) ? perf_op_str(a->op) : "none");
            }
        }
    }
}

/* ---- setup ---- */

/* "# Using devices": each rank formats its line, rank 0 prints them in rank order. */
static void print_devices(perf_run_t *r)
{
    enum { LINE = 256 };
    char line[LINE], desc[64];
    char *all = malloc((size_t)r->nranks * LINE);

    if (!all) {
        fprintf(stderr, "%s: out of memory\n", r->prog);
        weft_comm_abort(r->comm);
        exit(1);
    }
    snprintf(desc, sizeof(desc), "weft %s", weft_comm_transport(r->comm));
    memset(line, 0, sizeof(line));
    perf_device_line(line, sizeof(line) - 1, r->rank, weft_comm_local_rank(r->comm), desc);
    PERF_CHECK(r, weft_allgather(line, all, LINE, WEFT_UINT8, r->comm));
    if (r->rank == 0)
        for (int i = 0; i < r->nranks; i++) {
            all[(size_t)i * LINE + LINE - 1] = '\0';
            printf("%s", all + (size_t)i * LINE);
        }
    free(all);
}

static void barrier_fn(void *ctx)
{
    perf_run_t *r = ctx;
    PERF_CHECK(r, weft_barrier(r->comm));
}

/* The copy bandwidth for the bound section, as rank 0's -B says: none, given, or measured
 * by all ranks at once and taken from the slowest. Also agrees whether any host runs more
 * ranks than cores. */
static void measure_copy_bw(perf_run_t *r)
{
    perf_bound_t *b = &r->bound;
    double opt = r->o.copy_bw, mine;
    uint64_t over;

    PERF_CHECK(r, weft_broadcast(&opt, &opt, 1, WEFT_FLOAT64, 0, r->comm));
    perf_bound_init(b, r->coll->kind, r->nranks, opt, weft_comm_local_size(r->comm));
    if (b->off)
        return;
    if (!b->given) {
        mine = perf_copy_bw(b->copy_bytes, barrier_fn, r);
        PERF_CHECK(r, weft_allreduce(&mine, &b->copy_bw, 1, WEFT_FLOAT64, WEFT_MIN, r->comm));
    }
    over = (uint64_t)b->oversubscribed;
    PERF_CHECK(r, weft_allreduce(&over, &over, 1, WEFT_UINT64, WEFT_MAX, r->comm));
    b->oversubscribed = over != 0;
}

/* Caps max_bytes so send, recv and expected fit in this host's memory per local rank
 * (nccl-tests caps by GPU memory). All ranks agree on the smallest cap. */
static void limit_memory(perf_run_t *r)
{
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    int local = weft_comm_local_size(r->comm) > 0 ? weft_comm_local_size(r->comm) : 1;
    uint64_t mine = phys / (uint64_t)local, cap = 0;
    uint64_t reserve = mine / 4 < (1ull << 30) ? mine / 4 : (1ull << 30);

    mine = (mine - reserve) / (r->o.check ? 3 : 2);
    PERF_CHECK(r, weft_allreduce(&mine, &cap, 1, WEFT_UINT64, WEFT_MIN, r->comm));
    r->max_bytes = r->o.max_bytes;
    if (r->max_bytes > cap) {
        r->max_bytes = cap;
        if (r->o.min_bytes > cap)
            r->o.min_bytes = cap;
        if (r->rank == 0)
            printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", r->max_bytes);
    }
}

/* Allocates and touches the three buffers; every rank learns whether all succeeded.
 * With -R, send and recv come from weft_mem_alloc (registered: peers on this host read
 * them through mappings), as nccl-tests -R registers its buffers. */
static void alloc_buffers(perf_run_t *r)
{
    size_t n = r->max_bytes > 64 ? r->max_bytes : 64;
    uint64_t bad = 0;
    char **bufs[3] = { &r->send, &r->recv, &r->expected };

    for (int i = 0; i < 3; i++) {
        void *p = NULL;
        int reg = r->o.local_register && i < 2;
        if (reg ? weft_mem_alloc(&p, n) != WEFT_OK : posix_memalign(&p, 4096, n) != 0) {
            bad = 1;
            continue;
        }
        memset(p, 0, n);
        *bufs[i] = p;
    }
    if (sum_over_ranks(r, bad)) {
        if (r->rank == 0)
            fprintf(stderr, "%s: cannot allocate 3 x %zu bytes on some rank\n", r->prog, n);
        weft_comm_destroy(r->comm);
        exit(1);
    }
}

static void print_flag_notes(const perf_run_t *r)
{
    if (r->o.graph)
        fprintf(stderr, "%s: ignoring -G %d: weft has no CUDA graphs\n", r->prog, r->o.graph);
}

static void free_buffers(perf_run_t *r)
{
    if (r->o.local_register) {
        weft_mem_free(r->send);
        weft_mem_free(r->recv);
    } else {
        free(r->send);
        free(r->recv);
    }
    free(r->expected);
}

static int join(perf_run_t *r)
{
    char num[32];
    if (r->o.timeout > 0) {
        snprintf(num, sizeof(num), "%d", r->o.timeout);
        setenv("WEFT_TIMEOUT", num, 1);
    }
    weft_status_t st = weft_comm_init(&r->comm);
    if (st != WEFT_OK) {
        fprintf(stderr, "%s: weft_comm_init failed: %s: %s\n", r->prog, weft_status_str(st),
                weft_last_error());
        return 1;
    }
    r->rank = weft_comm_rank(r->comm);
    r->nranks = weft_comm_size(r->comm);
    r->a.comm = r->comm;
    r->a.rank = r->rank;
    r->a.nranks = r->nranks;
    if ((r->coll->flags & PERF_ROOT) && r->o.root >= r->nranks) {
        if (r->rank == 0)
            fprintf(stderr, "%s: invalid root %d for %d ranks\n", r->prog, r->o.root,
                    r->nranks);
        weft_comm_destroy(r->comm);
        return 2;
    }
    return 0;
}

int perf_main(int argc, char **argv, const perf_coll_t *coll)
{
    perf_run_t run, *r = &run;
    int rc;

    memset(r, 0, sizeof(*r));
    setlinebuf(stdout);
    r->coll = coll;
    r->prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    perf_opts_default(&r->o);
    rc = perf_parse_opts(argc, argv, &r->o, 0);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    if ((rc = join(r)) != 0)
        return rc;

    if (r->rank == 0) {
        print_flag_notes(r);
        perf_print_params(&r->o);
        if (r->o.local_register)
            printf("# Buffers: send and recv from weft_mem_alloc (-R %d): peers on this host "
                   "read them in place\n", r->o.local_register);
    }
    print_devices(r);
    measure_copy_bw(r);                         /* before the buffers: less memory at once */
    limit_memory(r);
    alloc_buffers(r);
    r->a.expected = r->expected;
    if (r->rank == 0)
        perf_print_header(r->o.cputime);

    run_all(r);

    int errors = (int)sum_over_ranks(r, (uint64_t)r->errors);
    double avg_bw = r->bw_count ? r->bw_sum / r->bw_count : 0.0;
    if (r->rank == 0)
        perf_print_footer(errors, avg_bw, &r->bound, weft_last_error());
    rc = perf_exit_code(errors, avg_bw);

    perf_bound_free(&r->bound);
    free_buffers(r);
    weft_comm_destroy(r->comm);
    return rc;
}
