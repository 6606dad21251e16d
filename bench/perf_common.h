/*
 * perf_common.h - nccl-tests-compatible perf tools: one driver, its backends, and what they
 * share.
 *
 * One driver (perf_common.c) runs every tool over a backend (perf_backend_t): weft
 * (perf_weft.c, the bench/<coll>_perf tools) or MPI (mpi_coll_perf.c, built by each MPI's
 * mpicc without libweft: mpi_coll_perf, mpich_coll_perf). The collectives' counts,
 * bandwidth and data are written once, in perf_colls.c. Sharing all of it is what makes a
 * weft row and an MPI row comparable line by line.
 *
 * Part 1 (static inline, library-free): the dtype table in nccl-tests' names and order,
 * the command line, the test data pattern and its expected results, the output table, and
 * the memory-bandwidth bound printed under it (the host copy test and the traffic model).
 * Part 2: a row's counts and arguments, the collectives, the backend interface.
 *
 * Data pattern invariant: every input is a small integer, bounded so that every op over
 * every rank count is exact in every dtype, so results are compared exactly. Sums, min,
 * max and avg use |x| <= span/nranks (span per dtype: int8/bf16 sums stay within 120,
 * half within 2000, wider types within 2^20); prod uses +-1 and at most four 2s per
 * element across all ranks (|product| <= 16). AVG is expected as weft documents it: the
 * exact sum divided by nranks in the reduced type (integers truncate toward zero; half and
 * bfloat16 divide in fp32 and round once to nearest even).
 */
#ifndef WEFT_BENCH_PERF_COMMON_H
#define WEFT_BENCH_PERF_COMMON_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../include/weft.h"   /* relative: mpicc builds the MPI peer without -Iinclude */

/* ---- Part 1: shared, library-free ------------------------------------------------- */

typedef struct {
    const char *name;      /* nccl-tests' name, printed in the type column */
    weft_dtype_t dtype;
    size_t size;
    int is_signed;         /* holds negative values: signed integers and floats */
    int is_float;
    int64_t span;          /* inputs are bounded by span / nranks (see banner) */
} perf_type_t;

/* nccl-tests' order, which "-d all" follows. */
static inline const perf_type_t *perf_types(int *n_p)
{
    static const perf_type_t types[] = {
        { "int8", WEFT_INT8, 1, 1, 0, 120 },
        { "uint8", WEFT_UINT8, 1, 0, 0, 240 },
        { "int32", WEFT_INT32, 4, 1, 0, 1 << 20 },
        { "uint32", WEFT_UINT32, 4, 0, 0, 1 << 20 },
        { "int64", WEFT_INT64, 8, 1, 0, 1 << 20 },
        { "uint64", WEFT_UINT64, 8, 0, 0, 1 << 20 },
        { "half", WEFT_FLOAT16, 2, 1, 1, 2000 },
        { "float", WEFT_FLOAT32, 4, 1, 1, 1 << 20 },
        { "double", WEFT_FLOAT64, 8, 1, 1, 1 << 20 },
        { "bfloat16", WEFT_BFLOAT16, 2, 1, 1, 120 },
    };
    *n_p = (int)(sizeof(types) / sizeof(types[0]));
    return types;
}

/* Index into perf_types() for a name (nccl-tests' names plus common aliases), or -1. */
static inline int perf_type_index(const char *name)
{
    static const struct { const char *alias, *name; } aliases[] = {
        { "char", "int8" }, { "int", "int32" }, { "float16", "half" }, { "fp16", "half" },
        { "float32", "float" }, { "fp32", "float" }, { "float64", "double" },
        { "fp64", "double" }, { "bf16", "bfloat16" },
    };
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (strcmp(name, aliases[i].alias) == 0)
            name = aliases[i].name;
    int n;
    const perf_type_t *t = perf_types(&n);
    for (int i = 0; i < n; i++)
        if (strcmp(name, t[i].name) == 0)
            return i;
    return -1;
}

/* Ops in nccl-tests' order, which "-o all" follows (weft has no premultiplied sum). */
#define PERF_NOPS 5
static inline weft_op_t perf_op_at(int i)
{
    static const weft_op_t ops[] = { WEFT_SUM, WEFT_PROD, WEFT_MAX, WEFT_MIN, WEFT_AVG };
    return ops[i];
}

static inline const char *perf_op_str(weft_op_t op)
{
    static const char *names[] = { [WEFT_SUM] = "sum", [WEFT_PROD] = "prod",
        [WEFT_MIN] = "min", [WEFT_MAX] = "max", [WEFT_AVG] = "avg" };
    return names[op];
}

static inline int perf_op_index(const char *name)
{
    for (int i = 0; i < PERF_NOPS; i++)
        if (strcmp(name, perf_op_str(perf_op_at(i))) == 0)
            return (int)perf_op_at(i);
    return -1;
}

/* ---- half and bfloat16, round to nearest even ---- */

static inline uint16_t perf_float_to_half(float f)
{
    uint32_t x, sign;
    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u)                        /* inf stays inf, NaN stays quiet NaN */
        return (uint16_t)(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0));
    if (x >= 0x477ff000u)                        /* >= 65520 rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (x < 0x38800000u) {                       /* below 2^-14: subnormal or zero */
        float a, half = 0.5f;
        uint32_t r;
        memcpy(&a, &x, 4);
        a += half;                               /* the FPU rounds at 2^-24, half's ulp */
        memcpy(&r, &a, 4);
        return (uint16_t)(sign | (r - 0x3f000000u));
    }
    x += 0xc8000fffu + ((x >> 13) & 1);          /* rebias exponent by -112, round even */
    return (uint16_t)(sign | (x >> 13));
}

static inline float perf_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    uint32_t x;
    float f;
    if (exp == 0) {                              /* zero or subnormal: mant * 2^-24 */
        f = (float)mant * 0x1p-24f;
        return sign ? -f : f;
    }
    x = sign | (exp == 31 ? 0x7f800000u : (exp + 112) << 23) | (mant << 13);
    memcpy(&f, &x, 4);
    return f;
}

static inline uint16_t perf_float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static inline float perf_bf16_to_float(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* ---- the data pattern ---- */

static inline uint64_t perf_mix(uint64_t x)   /* splitmix64's finalizer */
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The input of `rank` at element `idx`: see the banner for the bounds. */
static inline int64_t perf_value(const perf_type_t *t, weft_op_t op, uint64_t seed, int rank,
                                 size_t idx, int nranks)
{
    uint64_t h = perf_mix((seed << 48) ^ ((uint64_t)rank << 36) ^ (uint64_t)idx);
    if (op == WEFT_PROD) {
        /* At most ceil(nranks/q) <= 4 ranks can hold a 2 for one element. */
        uint64_t q = nranks < 8 ? 2 : (uint64_t)(nranks + 3) / 4;
        if ((idx + (uint64_t)rank + seed) % q == 0 && (h & 2))
            return 2;
        return (t->is_signed && (h & 1)) ? -1 : 1;
    }
    int64_t span = t->span / (nranks > 0 ? nranks : 1);
    if (span < 1)
        span = 1;
    int64_t v = (int64_t)(h % (uint64_t)(span + 1));
    return t->is_signed ? v - span / 2 : v;
}

/* op over all ranks' inputs at element idx, exactly (AVG: the sum; perf_store divides). */
static inline int64_t perf_reduced(const perf_type_t *t, weft_op_t op, uint64_t seed,
                                   size_t idx, int nranks)
{
    int64_t acc = perf_value(t, op, seed, 0, idx, nranks);
    for (int r = 1; r < nranks; r++) {
        int64_t v = perf_value(t, op, seed, r, idx, nranks);
        switch (op) {
        case WEFT_PROD: acc *= v; break;
        case WEFT_MIN: acc = v < acc ? v : acc; break;
        case WEFT_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;                /* SUM, AVG */
        }
    }
    return acc;
}

/* buf[k] = v in t's dtype; avg_div > 0 divides first, in the reduced type. */
static inline void perf_store(const perf_type_t *t, void *buf, size_t k, int64_t v, int avg_div)
{
    float f = (float)v;
    double d = (double)v;
    if (avg_div > 0) {
        v /= avg_div;                            /* C division truncates toward zero */
        f /= (float)avg_div;
        d /= (double)avg_div;
    }
    switch (t->dtype) {
    case WEFT_INT8: ((int8_t *)buf)[k] = (int8_t)v; break;
    case WEFT_UINT8: ((uint8_t *)buf)[k] = (uint8_t)v; break;
    case WEFT_INT32: ((int32_t *)buf)[k] = (int32_t)v; break;
    case WEFT_UINT32: ((uint32_t *)buf)[k] = (uint32_t)v; break;
    case WEFT_INT64: ((int64_t *)buf)[k] = v; break;
    case WEFT_UINT64: ((uint64_t *)buf)[k] = (uint64_t)v; break;
    case WEFT_FLOAT16: ((uint16_t *)buf)[k] = perf_float_to_half(f); break;
    case WEFT_BFLOAT16: ((uint16_t *)buf)[k] = perf_float_to_bf16(f); break;
    case WEFT_FLOAT32: ((float *)buf)[k] = f; break;
    case WEFT_FLOAT64: ((double *)buf)[k] = d; break;
    }
}

/* A float element as a double (for comparing values, so that -0 == +0). */
static inline double perf_load_float(const perf_type_t *t, const void *buf, size_t k)
{
    switch (t->dtype) {
    case WEFT_FLOAT16: return perf_half_to_float(((const uint16_t *)buf)[k]);
    case WEFT_BFLOAT16: return perf_bf16_to_float(((const uint16_t *)buf)[k]);
    case WEFT_FLOAT32: return ((const float *)buf)[k];
    default: return ((const double *)buf)[k];
    }
}

/* Elements of got that differ from want: integers bit for bit, floats by value. */
static inline size_t perf_count_wrong(const perf_type_t *t, const void *got, const void *want,
                                      size_t count)
{
    size_t wrong = 0;
    if (memcmp(got, want, count * t->size) == 0)
        return 0;
    for (size_t k = 0; k < count; k++) {
        if (t->is_float)
            wrong += !(perf_load_float(t, got, k) == perf_load_float(t, want, k));
        else
            wrong += memcmp((const char *)got + k * t->size,
                            (const char *)want + k * t->size, t->size) != 0;
    }
    return wrong;
}

/* Fill helpers over element ranges [offset, offset+count). */
static inline void perf_fill_values(const perf_type_t *t, weft_op_t op, uint64_t seed,
                                    int rank, int nranks, void *buf, size_t count,
                                    size_t offset)
{
    for (size_t k = 0; k < count; k++)
        perf_store(t, buf, k, perf_value(t, op, seed, rank, offset + k, nranks), 0);
}

static inline void perf_fill_reduced_values(const perf_type_t *t, weft_op_t op, uint64_t seed,
                                            int nranks, void *buf, size_t count, size_t offset)
{
    int div = op == WEFT_AVG ? nranks : 0;
    for (size_t k = 0; k < count; k++)
        perf_store(t, buf, k, perf_reduced(t, op, seed, offset + k, nranks), div);
}

/* ---- command line (nccl-tests' flags) ---- */

typedef struct {
    int nthreads, ngpus;
    size_t min_bytes, max_bytes, step_bytes, step_factor;
    int iters, agg_iters, warmup, run_cycles;
    int parallel_init, check, blocking, stream_null, timeout, graph, cputime, average;
    int local_register;
    int type;                   /* index into perf_types(), -1 for all */
    int op;                     /* weft_op_t, -1 for all */
    int root;                   /* -1 for all */
    const char *coll;           /* the MPI peer's -c <collective> */
    double copy_bw;             /* -B: host copy GB/s per rank; -1 measures, 0 no bound */
} perf_opts_t;

static inline void perf_opts_default(perf_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->nthreads = o->ngpus = 1;
    o->min_bytes = o->max_bytes = 32u << 20;
    o->step_bytes = 1u << 20;
    o->step_factor = 1;
    o->iters = 20;
    o->agg_iters = 1;
    o->warmup = 1;               /* nccl-tests' default; every doubling size is warmed */
    o->run_cycles = 1;
    o->check = 1;
    o->average = 1;
    o->type = perf_type_index("float");
    o->op = WEFT_SUM;
    o->copy_bw = -1.0;
}

/* nccl-tests' size syntax: a number with an optional K/M/G (binary) suffix; -1 if bad. */
static inline double perf_parse_size(const char *s)
{
    double v;
    char unit;
    int n = sscanf(s, "%lf %c", &v, &unit);
    if (n < 1 || !(v >= 0.0 && v <= 1e300))   /* NaN and inf too */
        return -1.0;
    if (n == 1)
        return v;
    switch (unit) {
    case 'G': case 'g': return v * 1024.0 * 1024.0 * 1024.0;
    case 'M': case 'm': return v * 1024.0 * 1024.0;
    case 'K': case 'k': return v * 1024.0;
    default: return -1.0;
    }
}

static inline int perf_parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 0);
    if (end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* A bandwidth in GB/s: a finite number >= 0; -1 if bad. */
static inline int perf_parse_bw(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v >= 0.0 && v < 1e12))
        return -1;
    *out = v;
    return 0;
}

static inline void perf_usage(FILE *f, const char *prog, int mpi_peer)
{
    fprintf(f, "USAGE: %s \n\t", prog);
    if (mpi_peer)
        fprintf(f, "[-c,--coll <allreduce/reduce_scatter/allgather/broadcast/reduce/alltoall>"
                   " (a number: as --check)] \n\t"
                   "[-k,--check <0/1>] \n\t");
    fprintf(f,
        "[-t,--nthreads <num threads>] (1 only: one rank per process) \n\t"
        "[-g,--ngpus <gpus per thread>] (1 only) \n\t"
        "[-b,--minbytes <min size in bytes>] \n\t"
        "[-e,--maxbytes <max size in bytes>] \n\t"
        "[-i,--stepbytes <increment size>] \n\t"
        "[-f,--stepfactor <increment factor>] \n\t"
        "[-n,--iters <iteration count>] \n\t"
        "[-m,--agg_iters <aggregated iteration count>] \n\t"
        "[-w,--warmup_iters <warmup iteration count>] \n\t"
        "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] \n\t"
        "[-p,--parallel_init <0/1>] (accepted; ranks are processes) \n\t");
    if (!mpi_peer)
        fprintf(f, "[-c,--check <check iteration count>] \n\t");
    fprintf(f,
        "[-o,--op <sum/prod/min/max/avg/all>] \n\t"
        "[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/all>] \n\t"
        "[-r,--root <root>] (-1: every root) \n\t"
        "[-z,--blocking <0/1>] (calls always block; 1 adds a barrier after each call) \n\t"
        "[-y,--stream_null <0/1>] (accepted, no effect) \n\t"
        "[-T,--timeout <time in seconds>] (%s) \n\t"
        "[-G,--cudagraph <num graph launches>] (accepted, no CUDA graphs) \n\t"
        "[-C,--report_cputime <0/1>] \n\t"
        "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] \n\t"
        "[-R,--local_register <0/1>] 1: send and recv buffers from weft_mem_alloc (registered) \n\t"
        "[-B,--copy_bw <GB/s>] host copy bandwidth per rank for the memory-bandwidth bound\n\t"
        "    under the table (default: measured at startup; 0: no bound section) \n\t"
        "[-h,--help]\n"
        "Environment: NCCL_TESTS_MIN_BW (or WEFT_TESTS_MIN_BW) fails the run when the average\n"
        "bus bandwidth is below 90%% of it; WEFT_PERF_COPY_BW is the default for -B.%s\n",
        mpi_peer ? "accepted, no effect" : "sets WEFT_TIMEOUT",
        mpi_peer ? "" : " Launch with weftrun, mpirun or srun.");
}

/* Parses argv into o. Returns 0 to run, 1 after printing help, 2 on a bad command line
 * (message printed to stderr). mpi_peer: -c names the collective, -k is the check. */
static inline int perf_parse_opts(int argc, char **argv, perf_opts_t *o, int mpi_peer)
{
    static const struct option longopts[] = {
        { "nthreads", required_argument, 0, 't' }, { "ngpus", required_argument, 0, 'g' },
        { "minbytes", required_argument, 0, 'b' }, { "maxbytes", required_argument, 0, 'e' },
        { "stepbytes", required_argument, 0, 'i' }, { "stepfactor", required_argument, 0, 'f' },
        { "iters", required_argument, 0, 'n' }, { "agg_iters", required_argument, 0, 'm' },
        { "warmup_iters", required_argument, 0, 'w' },
        { "run_cycles", required_argument, 0, 'N' },
        { "parallel_init", required_argument, 0, 'p' }, { "check", required_argument, 0, 'k' },
        { "coll", required_argument, 0, 'c' }, { "op", required_argument, 0, 'o' },
        { "datatype", required_argument, 0, 'd' }, { "root", required_argument, 0, 'r' },
        { "blocking", required_argument, 0, 'z' }, { "stream_null", required_argument, 0, 'y' },
        { "timeout", required_argument, 0, 'T' }, { "cudagraph", required_argument, 0, 'G' },
        { "report_cputime", required_argument, 0, 'C' },
        { "average", required_argument, 0, 'a' },
        { "local_register", required_argument, 0, 'R' },
        { "copy_bw", required_argument, 0, 'B' }, { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 }
    };
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    const char *env = getenv("WEFT_PERF_COPY_BW");
    int c, bad = 0;
    double sz;

    if (env && perf_parse_bw(env, &o->copy_bw) != 0) {
        fprintf(stderr, "%s: invalid WEFT_PERF_COPY_BW '%s' (GB/s, 0 for no bound)\n", prog,
                env);
        return 2;
    }
    opterr = 0;
    while (!bad && (c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:c:k:o:d:r:z:y:T:G:C:a:R:B:h",
                                    longopts, NULL)) != -1) {
        switch (c) {
        case 't': bad = perf_parse_int(optarg, 1, 1 << 20, &o->nthreads); break;
        case 'g': bad = perf_parse_int(optarg, 1, 1 << 20, &o->ngpus); break;
        case 'b': case 'e': case 'i':
            sz = perf_parse_size(optarg);
            if (sz < 0 || sz > 9.2e18) {
                fprintf(stderr, "%s: invalid size '%s' for -%c\n", prog, optarg, c);
                return 2;
            }
            *(c == 'b' ? &o->min_bytes : c == 'e' ? &o->max_bytes : &o->step_bytes) =
                (size_t)sz;
            break;
        case 'f': {
            int f = 1;
            bad = perf_parse_int(optarg, 0, 1 << 20, &f);
            o->step_factor = (size_t)f;
            break;
        }
        case 'n': bad = perf_parse_int(optarg, 1, 1 << 30, &o->iters); break;
        case 'm': bad = perf_parse_int(optarg, 1, 1 << 20, &o->agg_iters); break;
        case 'w': bad = perf_parse_int(optarg, 0, 1 << 30, &o->warmup); break;
        case 'N': bad = perf_parse_int(optarg, 0, 1 << 30, &o->run_cycles); break;
        case 'p': bad = perf_parse_int(optarg, 0, 1, &o->parallel_init); break;
        case 'k': bad = perf_parse_int(optarg, 0, 1 << 20, &o->check); break;
        case 'c':
            if (mpi_peer && perf_parse_int(optarg, 0, 1 << 20, &o->check) != 0)
                o->coll = optarg;
            else if (!mpi_peer)
                bad = perf_parse_int(optarg, 0, 1 << 20, &o->check);
            break;
        case 'o':
            o->op = strcmp(optarg, "all") == 0 ? -1 : perf_op_index(optarg);
            if (o->op == -1 && strcmp(optarg, "all") != 0) {
                fprintf(stderr, "%s: invalid op '%s' (sum/prod/min/max/avg/all%s)\n", prog,
                        optarg, strcmp(optarg, "mulsum") == 0 ? "; weft has no mulsum" : "");
                return 2;
            }
            break;
        case 'd':
            o->type = strcmp(optarg, "all") == 0 ? -1 : perf_type_index(optarg);
            if (o->type == -1 && strcmp(optarg, "all") != 0) {
                fprintf(stderr, "%s: invalid datatype '%s'\n", prog, optarg);
                return 2;
            }
            break;
        case 'r': bad = perf_parse_int(optarg, -1, 1 << 30, &o->root); break;
        case 'z': bad = perf_parse_int(optarg, 0, 1, &o->blocking); break;
        case 'y': bad = perf_parse_int(optarg, 0, 1, &o->stream_null); break;
        case 'T': bad = perf_parse_int(optarg, 0, 1 << 30, &o->timeout); break;
        case 'G': bad = perf_parse_int(optarg, 0, 1 << 30, &o->graph); break;
        case 'C': bad = perf_parse_int(optarg, 0, 1, &o->cputime); break;
        case 'a': bad = perf_parse_int(optarg, 0, 3, &o->average); break;
        case 'R': bad = perf_parse_int(optarg, 0, 2, &o->local_register); break;
        case 'B': bad = perf_parse_bw(optarg, &o->copy_bw); break;
        case 'h':
            perf_usage(stdout, prog, mpi_peer);
            return 1;
        default:
            if (optopt && strchr("tgbeifnmwNpckodrzyTGCaRB", optopt))
                fprintf(stderr, "%s: option -%c needs a value\n", prog, optopt);
            else
                fprintf(stderr, "%s: invalid option '%s'\n", prog, argv[optind - 1]);
            perf_usage(stderr, prog, mpi_peer);
            return 2;
        }
        if (bad)
            fprintf(stderr, "%s: invalid value '%s' for -%c\n", prog, optarg, c);
    }
    if (bad)
        return 2;
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        return 2;
    }
    if (o->nthreads != 1 || o->ngpus != 1) {
        fprintf(stderr, "%s: -t %d -g %d: weft runs one rank per process, so only -t 1 -g 1;"
                " start more ranks with the launcher (weftrun -n N, mpirun -np N)\n",
                prog, o->nthreads, o->ngpus);
        return 2;
    }
    if (o->min_bytes > o->max_bytes) {
        fprintf(stderr, "%s: invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", prog,
                o->min_bytes, o->max_bytes);
        return 2;
    }
    if (o->step_factor > 1 && o->min_bytes == 0 && o->max_bytes > 0) {
        fprintf(stderr, "%s: -b 0 with -f %zu never grows (0 x %zu = 0): start at -b 1 or "
                "more, or step by -i bytes with -f 1\n", prog, o->step_factor, o->step_factor);
        return 2;
    }
    if (o->step_factor <= 1 && o->step_bytes == 0 && o->min_bytes < o->max_bytes) {
        fprintf(stderr, "%s: -i 0 with -f %zu never reaches maxbytes\n", prog, o->step_factor);
        return 2;
    }
    return 0;
}

/* Next size of the sweep, or 0 when done (nccl-tests' rule, without its endless loops). */
static inline size_t perf_next_size(const perf_opts_t *o, size_t size)
{
    size_t next = o->step_factor > 1 ? size * o->step_factor : size + o->step_bytes;
    if (next <= size || next > o->max_bytes)
        return 0;
    return next;
}

/* ---- the memory-bandwidth bound, printed under the table ----
 *
 * Model: ranks on one host move data with single copies (a rank reads or writes a peer's
 * buffer directly, as weft's CMA algorithms do). A call then moves at least n*T bytes
 * through the host's memory (bytes read + bytes written, summed over the n ranks), for
 * the row's printed size S; T, the traffic per rank, is:
 *
 *   allreduce       S*(3-1/n)  reduce its own block: read n blocks of S/n, write S/n; then
 *                              read the other n-1 reduced blocks and write them: 2S(n-1)/n
 *   reduce_scatter  S*(1+1/n)  the first half of allreduce (S: the whole send buffer)
 *   allgather       2S         read every block of S/n once, write it once (S: recv buffer);
 *                   2S(n-1)/n  in place, where the own block is already in place
 *   broadcast       2S         every rank reads S and writes S (the root: send to recv);
 *                   2S(n-1)/n  in place, where the root has nothing to move
 *   reduce          S*(1+1/n)  the root reads n buffers of S and writes S, S*(n+1) in all,
 *                              whether the root does it alone or each rank reduces a block
 *                              into the root's buffer
 *   alltoall        2S         read every block and write it (the own block is a copy too);
 *                   2S(n-1)/n  in place, where the own block stays
 *   sendrecv        2S         one copy of S
 *
 * The copy bandwidth B (GB/s, bytes copied per second) is a rank's median memcpy of
 * 256 MB (less on small hosts) while every rank copies at once, the slowest rank's: a
 * rank's share of the host's memory bandwidth. A memcpy of b bytes moves 2b bytes, so the
 * host moves at most n*2B bytes/s and a call takes at least t_b = n*T / (n*2B) = T/(2B).
 * The total, not the busiest rank's traffic, is what bounds the time: where ranks differ
 * (broadcast in place, reduce done by the root), an idle rank's share of the bandwidth is
 * free for the others. %bound = t_b / measured time (out of place and in place each with
 * its own T); bound-busbw = the busbw at t_b, i.e. busbw / %bound. With more ranks than
 * cores on a host, ranks take turns on cores and neither B nor the bound means much.
 */

/* Seconds on a monotonic clock (the driver times its calls with it too). */
static inline double perf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The collectives; the bound model is per collective. */
typedef enum {
    PERF_COLL_ALLREDUCE,
    PERF_COLL_REDUCE_SCATTER,
    PERF_COLL_ALLGATHER,
    PERF_COLL_BROADCAST,
    PERF_COLL_REDUCE,
    PERF_COLL_ALLTOALL,
    PERF_COLL_SENDRECV,
} perf_kind_t;

/* T/S for one call over n ranks: the traffic per rank, as the model above says. */
static inline double perf_traffic(perf_kind_t kind, int n, int in_place)
{
    double own = in_place ? 2.0 / n : 0.0;      /* the own block in place need not move */
    switch (kind) {
    case PERF_COLL_ALLREDUCE: return 3.0 - 1.0 / n;
    case PERF_COLL_REDUCE_SCATTER:
    case PERF_COLL_REDUCE: return 1.0 + 1.0 / n;
    case PERF_COLL_ALLGATHER:
    case PERF_COLL_BROADCAST:
    case PERF_COLL_ALLTOALL: return 2.0 - own;
    default: return 2.0;                        /* sendrecv */
    }
}

static inline const char *perf_traffic_formula(perf_kind_t kind)
{
    switch (kind) {
    case PERF_COLL_ALLREDUCE: return "S*(3-1/n)";
    case PERF_COLL_REDUCE_SCATTER:
    case PERF_COLL_REDUCE: return "S*(1+1/n)";
    case PERF_COLL_ALLGATHER:
    case PERF_COLL_BROADCAST:
    case PERF_COLL_ALLTOALL: return "2*S, in place 2*S*(n-1)/n";
    default: return "2*S";
    }
}

#define PERF_COPY_BYTES ((size_t)256 << 20)
#define PERF_COPY_REPS 5
#define PERF_BOUND_MIN_BYTES ((size_t)1 << 20)  /* rows the bound section lists */

/* The copy test's size: 256 MB, halved while its two buffers would take more than a
 * quarter of a host's memory shared by local_ranks ranks. */
static inline size_t perf_copy_bytes(int local_ranks)
{
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t share = phys / (uint64_t)(local_ranks > 0 ? local_ranks : 1) / 8;
    size_t bytes = PERF_COPY_BYTES;
    while (bytes > PERF_BOUND_MIN_BYTES && bytes > share)
        bytes /= 2;
    return bytes;
}

typedef void perf_barrier_fn_t(void *ctx);

/* This rank's copy bandwidth in GB/s: the median of PERF_COPY_REPS memcpys of `bytes`
 * between two touched buffers, each after barrier(ctx) so that all ranks copy at once.
 * Calls barrier PERF_COPY_REPS times whatever happens; returns 0 if it cannot allocate. */
static inline double perf_copy_bw(size_t bytes, perf_barrier_fn_t *barrier, void *ctx)
{
    char *src = malloc(bytes), *dst = malloc(bytes);
    double gbs[PERF_COPY_REPS];
    int ok = src && dst;

    if (ok) {
        memset(src, 0x5a, bytes);
        memset(dst, 0xa5, bytes);               /* not 0: malloc + memset 0 may be calloc */
    }
    for (int i = 0; i < PERF_COPY_REPS; i++) {
        barrier(ctx);
        double t0 = perf_now();
        if (ok)
            memcpy(dst, src, bytes);
        __asm__ volatile("" : : "r"(dst) : "memory");  /* dst escapes: the copy stays */
        gbs[i] = (double)bytes / 1.0e9 / (perf_now() - t0);
    }
    free(src);
    free(dst);
    for (int i = 1; i < PERF_COPY_REPS; i++)       /* insertion sort, for the median */
        for (int j = i; j > 0 && gbs[j] < gbs[j - 1]; j--) {
            double t = gbs[j];
            gbs[j] = gbs[j - 1];
            gbs[j - 1] = t;
        }
    return ok ? gbs[PERF_COPY_REPS / 2] : 0.0;
}

/* One table row of PERF_BOUND_MIN_BYTES or more; [0] out of place, [1] in place. */
typedef struct {
    size_t bytes;
    double sec[2];              /* < 0: no such call (sendrecv in place) */
    double busbw[2];
} perf_bound_row_t;

/* What the bound section prints. The rows array is owned: perf_bound_free frees it. */
typedef struct {
    perf_kind_t kind;
    int nranks;
    int off;                    /* -B 0: no section */
    int given;                  /* copy_bw came from -B or WEFT_PERF_COPY_BW */
    double copy_bw;             /* GB/s per rank; 0 where it could not be measured */
    size_t copy_bytes;
    int local_ranks, cores;     /* this host's */
    int oversubscribed;         /* some host runs more ranks than it has cores */
    perf_bound_row_t *rows;
    size_t nrows, cap;
    int open;                   /* the last row waits for its in-place column */
} perf_bound_t;

/* Sets b up from -B (copy_bw: < 0 measure, 0 off, > 0 given); the driver then measures
 * B where asked and combines copy_bw (min) and oversubscribed (max) over ranks. */
static inline void perf_bound_init(perf_bound_t *b, perf_kind_t kind, int nranks,
                                   double copy_bw, int local_ranks)
{
    memset(b, 0, sizeof(*b));
    b->kind = kind;
    b->nranks = nranks;
    b->off = copy_bw == 0.0;
    b->given = copy_bw > 0.0;
    b->copy_bw = copy_bw > 0.0 ? copy_bw : 0.0;
    b->copy_bytes = perf_copy_bytes(local_ranks);
    b->local_ranks = local_ranks;
    b->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    b->oversubscribed = b->cores > 0 && local_ranks > b->cores;
}

/* Keeps one column group's result: out of place opens a row, in place completes it. */
static inline void perf_bound_record(perf_bound_t *b, size_t bytes, int in_place, double sec,
                                     double busbw)
{
    if (b->off || bytes < PERF_BOUND_MIN_BYTES)
        return;
    if (in_place) {
        if (b->open) {
            b->rows[b->nrows - 1].sec[1] = sec;
            b->rows[b->nrows - 1].busbw[1] = busbw;
        }
        b->open = 0;
        return;
    }
    if (b->nrows == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        perf_bound_row_t *rows = realloc(b->rows, cap * sizeof(*rows));
        b->open = 0;
        if (!rows)
            return;                             /* the section lists fewer rows */
        b->rows = rows;
        b->cap = cap;
    }
    b->rows[b->nrows++] = (perf_bound_row_t){ bytes, { sec, -1.0 }, { busbw, 0.0 } };
    b->open = 1;
}

static inline void perf_bound_free(perf_bound_t *b)
{
    free(b->rows);
    b->rows = NULL;
    b->nrows = b->cap = 0;
}

/* t_b / sec for column c of row w, or -1 where there is nothing to compare. */
static inline double perf_bound_fraction(const perf_bound_t *b, const perf_bound_row_t *w,
                                         int c)
{
    double tb = perf_traffic(b->kind, b->nranks, c) * (double)w->bytes / (2.0e9 * b->copy_bw);
    return w->sec[c] > 0.0 && tb > 0.0 ? tb / w->sec[c] : -1.0;
}

/* The section, under "# Avg bus bandwidth"; every line starts with '#'. */
static inline void perf_bound_print(const perf_bound_t *b)
{
    if (b->off)
        return;
    printf("#\n");
    if (b->copy_bw <= 0.0) {
        printf("# Host copy bandwidth : not measured (cannot allocate 2 x %zu MB)\n",
               b->copy_bytes >> 20);
        return;
    }
    if (b->given)
        printf("# Host copy bandwidth : %.2f GB/s per rank (given by -B or WEFT_PERF_COPY_BW)\n",
               b->copy_bw);
    else
        printf("# Host copy bandwidth : %.2f GB/s per rank (memcpy %zu MB, %d ranks at once)\n",
               b->copy_bw, b->copy_bytes >> 20, b->nranks);
    printf("# Memory bound        : single copy, T = %s bytes read + written per rank"
           " (host total / n; S = size, n = %d);\n", perf_traffic_formula(b->kind), b->nranks);
    printf("#   bound time = T / (2 x copy bandwidth); %%bound = bound time / measured time;"
           " bound-busbw = busbw at the out-of-place bound time\n");
    if (b->oversubscribed)
        printf("# Note: more ranks than cores on a host (%d ranks, %d cores here): ranks take"
               " turns on cores, so the bound is not meaningful\n", b->local_ranks, b->cores);
    if (b->nrows == 0) {
        printf("# (no rows of %zu bytes or more)\n", PERF_BOUND_MIN_BYTES);
        return;
    }
    printf("#  %10s  %11s  %10s  %9s\n", "size", "bound-busbw", "oop-%bound", "ip-%bound");
    for (size_t i = 0; i < b->nrows; i++) {
        const perf_bound_row_t *w = &b->rows[i];
        double f0 = perf_bound_fraction(b, w, 0), f1 = perf_bound_fraction(b, w, 1);
        printf("#  %10zu", w->bytes);
        if (f0 > 0.0)
            printf("  %11.2f  %9.1f%%", w->busbw[0] / f0, 100.0 * f0);
        else
            printf("  %11s  %10s", "N/A", "N/A");
        if (f1 > 0.0)
            printf("  %8.1f%%\n", 100.0 * f1);
        else
            printf("  %9s\n", "N/A");
    }
}

/* ---- output, in nccl-tests' format (rank 0 prints) ---- */

static inline void perf_hostname(char *buf, size_t len)
{
    if (gethostname(buf, len) != 0)
        snprintf(buf, len, "unknown");
    buf[len - 1] = '\0';
    char *dot = strchr(buf, '.');
    if (dot)
        *dot = '\0';
}

/* The opening lines, as nccl-tests 2.19.6 prints them (its first names its version and
 * NCCL's; ours weft's and that format). graph: 0, as no CUDA graph runs. */
static inline void perf_print_params(const perf_opts_t *o, const char *prog)
{
    printf("# weft %d.%d.%d perf tool, nccl-tests 2.19.6 format\n", WEFT_VERSION_MAJOR,
           WEFT_VERSION_MINOR, WEFT_VERSION_PATCH);
    printf("# Collective test starting: %s\n", prog);
    printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
           "iters: %d agg iters: %d validation: %d graph: %d unalign: %d\n",
           o->nthreads, o->ngpus, o->min_bytes, o->max_bytes,
           o->step_factor > 1 ? o->step_factor : o->step_bytes,
           o->step_factor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->agg_iters,
           o->check, 0, 0);
    if (o->blocking)
        printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
    if (o->parallel_init)
        printf("# Parallel Init Enabled: threads call into NcclInitRank concurrently \n");
    printf("#\n# Using devices\n");
}

/* One "# Using devices" line; device is the local rank, desc names the transport. */
static inline void perf_device_line(char *buf, size_t len, int rank, int device,
                                    const char *desc)
{
    char host[64];
    perf_hostname(host, sizeof(host));
    if (snprintf(buf, len, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] %s\n",
                 rank, 0, (int)getpid(), host, device, desc) >= (int)len && len > 1)
        buf[len - 2] = '\n';                     /* keep the line a line when cut */
}

static inline void perf_print_header(int cputime)
{
    const char *t = cputime ? "cputime" : "time";
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place"
           "          \n", "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "size",
           "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw",
           "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
           "");
}

static inline void perf_print_row_start(size_t bytes, size_t count, const char *type,
                                        const char *op, int root)
{
    printf("%12zu  %12zu  %8s  %6s  %6i", bytes, count, type, op, root);
}

/* value in width characters: two decimals, else one, else none, else an exponent
 * (nccl-tests' getFloatStr). */
static inline void perf_float_str(double value, int width, char *str)
{
    if (snprintf(str, (size_t)width + 1, "%*.2f", width, value) <= width)
        return;
    if (snprintf(str, (size_t)width + 1, "%*.1f", width, value) <= width)
        return;
    if (snprintf(str, (size_t)width + 1, "%*.0f", width, value) <= width)
        return;
    snprintf(str, (size_t)width + 1, width >= 7 ? "%*.1e" : "%*.0e", width, value);
}

/* One column group; wrong < 0 prints N/A (checks off with -c 0, or no check for this
 * column, as nccl-tests' in-place alltoall). */
static inline void perf_print_result(double usec, double algbw, double busbw, long wrong)
{
    char t[8], a[7], b[7];
    perf_float_str(usec, 7, t);
    perf_float_str(algbw, 6, a);
    perf_float_str(busbw, 6, b);
    if (wrong >= 0)
        printf("  %7s  %6s  %6s  %6g", t, a, b, (double)wrong);
    else
        printf("  %7s  %6s  %6s    N/A", t, a, b);
}

/* A column group for a call that does not exist (weft refuses in-place sendrecv). */
static inline void perf_print_na(void)
{
    printf("  %7s  %6s  %6s    N/A", "N/A", "N/A", "N/A");
}

/* The threshold from NCCL_TESTS_MIN_BW / WEFT_TESTS_MIN_BW, or -1. */
static inline double perf_min_bw(void)
{
    const char *s = getenv("WEFT_TESTS_MIN_BW");
    if (!s)
        s = getenv("NCCL_TESTS_MIN_BW");
    return s ? atof(s) : -1.0;
}

/* The exit code: nccl-tests' 7 (testNumResults) on wrong results or an average bandwidth
 * below the floor, else 0. */
#define PERF_EXIT_FAILED 7
static inline int perf_exit_code(int errors, double avg_bw)
{
    double min_bw = perf_min_bw();
    return errors || (min_bw != -1.0 && avg_bw < min_bw * 0.9) ? PERF_EXIT_FAILED : 0;
}

/* The closing lines, as nccl-tests 2.19.6 prints them, with the bound section (NULL: none)
 * where it prints its memory report: the average, "concluded", then the library's last
 * error ("# error: ...", or an empty line). */
static inline void perf_print_footer(int errors, double avg_bw, const perf_bound_t *bound,
                                     const char *last_error, const char *prog)
{
    double min_bw = perf_min_bw();
    printf("# Out of bounds values : %d %s\n", errors, errors ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g %s\n", avg_bw,
           min_bw == -1.0 ? "" : (avg_bw < min_bw * 0.9 ? "FAILED" : "OK"));
    printf("#\n");
    printf("# Collective test concluded: %s\n", prog);
    if (bound)
        perf_bound_print(bound);
    printf("#\n");
    if (last_error && *last_error)
        printf("# error: %s\n", last_error);
    else
        printf("\n");
}

/* ---- Part 2: one row, the collectives, the backends ------------------------------ */

/* Element counts for one size (nccl-tests' getCollByteCount). In place, the input starts
 * at recv + send_inplace_offset*rank elements and the output at recv +
 * recv_inplace_offset*rank elements. The printed size is max(send, recv) bytes and the
 * printed count is paramcount, the count argument of the call. */
typedef struct {
    size_t sendcount, recvcount, paramcount;
    size_t send_inplace_offset, recv_inplace_offset;
} perf_counts_t;

/* What a collective's data and call see for one row. */
typedef struct {
    int rank, nranks;
    const perf_type_t *type;
    weft_op_t op;               /* the op of the call */
    weft_op_t data_op;          /* the op the data pattern is made for (SUM if none) */
    int root;                   /* -1 where the collective has none */
    uint64_t seed;
    perf_counts_t c;
    void *expected;             /* recvcount elements, compared with the output */
} perf_args_t;

enum {
    PERF_OP = 1,                /* loops and prints ops; else "none" */
    PERF_REDUCES = 2,           /* the op changes the data; else the data is made for SUM */
    PERF_ROOT = 4,              /* loops and prints roots; else -1 */
    PERF_NO_INPLACE = 8,        /* no in-place form: that column group prints N/A */
};

/* The collectives, written once for every backend (bench/perf_colls.c): flags, counts,
 * bandwidth, and the inputs and expected outputs of a row. scatter_at_start: in place,
 * reduce_scatter leaves the result at the start of the buffer (MPI_IN_PLACE) instead of
 * at rank*recvcount (NCCL, weft). */
unsigned perf_coll_flags(perf_kind_t kind);
void perf_coll_counts(perf_kind_t kind, size_t count, size_t esz, int nranks,
                      int scatter_at_start,
                      perf_counts_t *c);
/* algbw and busbw in GB/s (1e9 bytes/s) for paramcount `count` taking `sec`. */
void perf_coll_bw(perf_kind_t kind, size_t count, size_t typesize, double sec, int nranks,
                  double *algbw, double *busbw);
/* Writes this rank's inputs at `input` (the in-place location when in place) and the
 * expected output in a->expected. recv (recvcount elements) is zero. */
void perf_coll_init(perf_kind_t kind, const perf_args_t *a, void *input, const void *recv);

/* The job as a backend's init finds it. */
typedef struct {
    int rank, nranks;
    int local_rank, local_size; /* among the ranks on this host */
    char desc[256];             /* "# Using devices" names it: "weft shm", "Open MPI v4.1.4" */
} perf_job_t;

/* A communication library under the driver (bench/perf_weft.c, bench/mpi_coll_perf.c).
 * ctx is the backend's state. Calls between init and finalize that talk to other ranks
 * are collective; a failing one reports the library's error with file:line and exits 1. */
typedef struct {
    /* -- before init: the command line (NULL: nothing to check). Returns 0 to go on or an
     *    exit code after printing why; where *kind_p is -1 (-c picks it) sets it. -- */
    int (*check)(void *ctx, const perf_opts_t *o, int *kind_p);
    /* -- the job: init returns 0 or an exit code after printing why -- */
    int (*init)(void *ctx, int *argc, char ***argv, const perf_opts_t *o, perf_job_t *job);
    void (*finalize)(void *ctx);
    void (*abort)(void *ctx);                    /* takes the job down; the caller exits */
    void (*notes)(void *ctx, const perf_opts_t *o, perf_kind_t kind);  /* rank 0, stderr */
    const char *(*last_error)(void *ctx);        /* nccl-tests' last line */
    /* -- the driver's own communication -- */
    void (*barrier)(void *ctx);
    double (*allreduce_f64)(void *ctx, double x, weft_op_t op);       /* SUM, MIN, MAX */
    uint64_t (*allreduce_u64)(void *ctx, uint64_t x, weft_op_t op);
    void (*gather)(void *ctx, const void *mine, void *all, size_t len);  /* to rank 0 */
    /* -- buffers: reg is -R (NULL on failure) -- */
    void *(*alloc)(void *ctx, size_t bytes, int reg);
    void (*free)(void *ctx, void *p, int reg);
    const char *reg_alloc;      /* where -R buffers come from, for "# Buffers"; NULL: none */
    /* -- the measured calls: row prepares for rows of (type, op), 0 if it cannot run them
     *    (skipped; NULL: all run); run makes one call, in place as perf_counts_t says -- */
    int (*row)(void *ctx, perf_kind_t kind, const perf_type_t *type, weft_op_t op);
    void (*run)(void *ctx, perf_kind_t kind, const void *send, void *recv,
                const perf_args_t *a, int in_place);
    int scatter_at_start;       /* see perf_coll_counts */
} perf_backend_t;

/* The whole tool: flags, init, sweep, output. kind -1: the MPI peer's command line, where
 * -c names the collective (be->check picks it). Returns the exit code. */
int perf_main(int argc, char **argv, int kind, const perf_backend_t *be, void *ctx);

/* The weft backend's tools (bench/perf_weft.c): perf_main over weft_*. */
int perf_weft_main(int argc, char **argv, perf_kind_t kind);

#endif /* WEFT_BENCH_PERF_COMMON_H */
