/*
 * test_coll.c - multi-process correctness of every collective; run under weftrun.
 *
 *   weftrun -n N build/tests/test_coll [--colls LIST] [--counts LIST] [--dtypes all|LIST]
 *                                      [--ops all|LIST] [--quick] [--timeout S] [--verbose]
 *                                      [--reg all|even]
 *
 * Every rank fills its inputs from (rank, index, dtype, op) with small integers chosen so
 * that every result is exact in every dtype and in every reduction order (PROD: mostly 1,
 * a few 2 and -1), computes for itself the expected contents of every buffer it passes
 * (outputs, and inputs that must stay unchanged), runs the call, and compares bit for bit,
 * including canary guard regions before and after every buffer. AVG is computed as the API
 * defines it: the exact sum divided by nranks in the reduced type (integers truncate;
 * half/bf16 divide in fp32 and round to nearest even).
 *
 * --reg allocates every buffer with weft_mem_alloc (all ranks, or the even ranks only):
 * large enough calls then run single-copy through mappings, or, where some rank's
 * buffers are ordinary memory, as usual; the results must be the same either way.
 *
 * Invariants: all ranks run the same sequence of calls (the matrix is a pure function of
 * the options and nranks). A call that returns an error ends this rank with exit 1, since
 * the ranks may then disagree about what comes next; wrong data is counted and the run goes
 * on. Only the public API (weft.h) is used. A hang is reported by a per-call watchdog
 * (--timeout, default 90 s) naming the call it was in.
 *
 * Why one long file (the style's 800-line mark): the Makefile builds every tests/test_*.c
 * as one standalone program. It reads in sections: half/bf16 conversions; inputs and
 * expected values; guarded buffers; cases (prep, issue, verify); the matrix; barrier;
 * comm_split; nonblocking; options.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

enum {
    C_ALLREDUCE, C_REDUCE_SCATTER, C_ALLGATHER, C_BROADCAST, C_REDUCE, C_ALLTOALL,
    C_SENDRECV, C_SENDRECV_PAIRS, C_BARRIER, C_SPLIT, C_NONBLOCKING, C_NUM
};
static const char *coll_names[C_NUM] = {
    "allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall",
    "sendrecv", "sendrecv_pairs", "barrier", "split", "nonblocking",
};

enum { K_SINT, K_UINT, K_HALF, K_BF16, K_FLOAT, K_DOUBLE };
static const struct { const char *name, *alias; size_t size; int kind; } dts[WEFT_NUM_DTYPES] = {
    [WEFT_INT8] = { "int8", "char", 1, K_SINT },       [WEFT_UINT8] = { "uint8", "u8", 1, K_UINT },
    [WEFT_INT32] = { "int32", "int", 4, K_SINT },      [WEFT_UINT32] = { "uint32", "u32", 4, K_UINT },
    [WEFT_INT64] = { "int64", "long", 8, K_SINT },     [WEFT_UINT64] = { "uint64", "u64", 8, K_UINT },
    [WEFT_FLOAT16] = { "half", "float16", 2, K_HALF }, [WEFT_BFLOAT16] = { "bfloat16", "bf16", 2, K_BF16 },
    [WEFT_FLOAT32] = { "float", "float32", 4, K_FLOAT },
    [WEFT_FLOAT64] = { "double", "float64", 8, K_DOUBLE },
};
static const char *op_names[WEFT_NUM_OPS] = { "sum", "prod", "min", "max", "avg" };

#define DEFAULT_COUNTS "0,1,17,32771,1048576"
#define QUICK_LARGE 4096        /* --quick: counts from here on run a few combinations */
#define GUARD 128               /* canary bytes before and after every buffer */
#define MAX_FAIL_LINES 200      /* per rank; later failures are counted, not printed */

typedef struct {
    long passed, failed, printed;
} stats_t;

typedef struct {
    weft_comm_t *comm;
    int rank, nranks;
    int range;                  /* inputs of SUM/MIN/MAX/AVG lie in [-range, range] */
    unsigned colls;             /* bit per C_* */
    size_t counts[32];
    int ncounts;
    int dtypes[WEFT_NUM_DTYPES], ndtypes;
    int ops[WEFT_NUM_OPS], nops;
    int quick, verbose, timeout_s;
    int reg;                    /* --reg: 0 none, 1 all ranks, 2 even ranks */
    unsigned seq;               /* cases run so far; varies the junk fill */
    stats_t *st;
} ctx_t;

/* ---- half / bfloat16 conversions (our own, independent of the library) ----
 * Round to nearest even; checked once over every float against gcc's _Float16. */

static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (ax >= 0x477ff000u)                      /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {                     /* below 2^-14: subnormal half or zero */
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f));
    }
    uint32_t h = ((((ax >> 23) - 127 + 15) << 10) | ((ax & 0x7fffffu) >> 13));
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    float f;
    if (e == 0) {
        f = ldexpf((float)m, -24);
        return sign ? -f : f;
    }
    uint32_t x = sign | (e == 31 ? (0xffu << 23) | (m << 13) : ((e - 15 + 127) << 23) | (m << 13));
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* ---- inputs and expected values ---- */

static int is_unsigned(weft_dtype_t dt) { return dts[dt].kind == K_UINT; }

/* The value rank r contributes at input index i. */
static int64_t gen(const ctx_t *c, int r, size_t i, weft_dtype_t dt, weft_op_t op)
{
    uint64_t h = ((uint64_t)i * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(r + 1) * 0xc2b2ae3d27d4eb4full)
                 ^ ((uint64_t)dt << 7);
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    if (op == WEFT_PROD) {
        unsigned k = (unsigned)(h & 15);
        if (k < 3)
            return 2;
        if (k < 5 && !is_unsigned(dt))
            return -1;
        return 1;
    }
    int64_t span = 2 * (int64_t)c->range + 1;
    int64_t v = (int64_t)(((h >> 32) * (uint64_t)span) >> 32);   /* [0, span) */
    return is_unsigned(dt) ? v : v - c->range;
}

/* AVG's division as the API defines it, from the exact sum. */
static double avg_of(double sum, weft_dtype_t dt, int n)
{
    switch (dts[dt].kind) {
    case K_SINT:   return (double)((int64_t)sum / n);
    case K_UINT:   return (double)((uint64_t)sum / (uint64_t)n);
    case K_DOUBLE: return sum / n;
    default:       return (double)((float)sum / (float)n);   /* float, half, bf16 */
    }
}

/* gen() of rank r over indices base..base+n-1, as doubles (small integers, exact). */
static void gen_run(const ctx_t *c, int r, size_t base, size_t n, weft_dtype_t dt, weft_op_t op,
                    double *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (double)gen(c, r, base + i, dt, op);
}

enum { RUN_ELEMS = 2048 };      /* the fill functions work in runs of this many elements */

static void put_run(void *b, weft_dtype_t dt, const double *v, size_t n)
{
    switch (dt) {
#define PUT_RUN(T, conv) for (size_t i = 0; i < n; i++) ((T *)b)[i] = conv; break
    case WEFT_INT8:     PUT_RUN(int8_t, (int8_t)(int64_t)v[i]);
    case WEFT_UINT8:    PUT_RUN(uint8_t, (uint8_t)(int64_t)v[i]);
    case WEFT_INT32:    PUT_RUN(int32_t, (int32_t)(int64_t)v[i]);
    case WEFT_UINT32:   PUT_RUN(uint32_t, (uint32_t)(int64_t)v[i]);
    case WEFT_INT64:    PUT_RUN(int64_t, (int64_t)v[i]);
    case WEFT_UINT64:   PUT_RUN(uint64_t, (uint64_t)(int64_t)v[i]);
    case WEFT_FLOAT16:  PUT_RUN(uint16_t, f32_to_f16((float)v[i]));
    case WEFT_BFLOAT16: PUT_RUN(uint16_t, f32_to_bf16((float)v[i]));
    case WEFT_FLOAT32:  PUT_RUN(float, (float)v[i]);
    case WEFT_FLOAT64:  PUT_RUN(double, v[i]);
#undef PUT_RUN
    }
}

static void fmt_elem(const void *b, size_t i, weft_dtype_t dt, char *out, size_t outlen)
{
    uint16_t h;
    uint32_t x;
    uint64_t y;
    switch (dt) {
    case WEFT_INT8:   snprintf(out, outlen, "%d", ((const int8_t *)b)[i]); break;
    case WEFT_UINT8:  snprintf(out, outlen, "%u", ((const uint8_t *)b)[i]); break;
    case WEFT_INT32:  snprintf(out, outlen, "%" PRId32, ((const int32_t *)b)[i]); break;
    case WEFT_UINT32: snprintf(out, outlen, "%" PRIu32, ((const uint32_t *)b)[i]); break;
    case WEFT_INT64:  snprintf(out, outlen, "%" PRId64, ((const int64_t *)b)[i]); break;
    case WEFT_UINT64: snprintf(out, outlen, "%" PRIu64, ((const uint64_t *)b)[i]); break;
    case WEFT_FLOAT16:
        h = ((const uint16_t *)b)[i];
        snprintf(out, outlen, "%.6g(0x%04x)", f16_to_f32(h), h);
        break;
    case WEFT_BFLOAT16:
        h = ((const uint16_t *)b)[i];
        snprintf(out, outlen, "%.6g(0x%04x)", bf16_to_f32(h), h);
        break;
    case WEFT_FLOAT32:
        memcpy(&x, (const char *)b + 4 * i, 4);
        snprintf(out, outlen, "%.9g(0x%08" PRIx32 ")", ((const float *)b)[i], x);
        break;
    case WEFT_FLOAT64:
        memcpy(&y, (const char *)b + 8 * i, 8);
        snprintf(out, outlen, "%.17g(0x%016" PRIx64 ")", ((const double *)b)[i], y);
        break;
    }
}

/* ---- guarded buffers ---- */

typedef struct {
    const char *name;           /* "send", "recv" or "buf" (in place) */
    unsigned char *mem;         /* pre | data | GUARD, all guards */
    size_t pre;                 /* GUARD plus a shift of 0-3 elements, so that buffers
                                   start at varied alignments */
    unsigned char *data;
    unsigned char *expect;      /* what data must hold after the call */
    size_t bytes;
} tbuf_t;

static unsigned char canary(size_t j) { return (unsigned char)(0xa5 ^ (j * 29)); }

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test_coll: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static int use_reg;             /* --reg: this rank's buffers come from weft_mem_alloc */

static void *blk_alloc(size_t n)
{
    void *p = NULL;
    if (!use_reg)
        return xmalloc(n);
    weft_status_t st = weft_mem_alloc(&p, n);
    if (st != WEFT_OK) {
        fprintf(stderr, "test_coll: weft_mem_alloc(%zu): %s: %s\n", n, weft_status_str(st),
                weft_last_error());
        exit(1);
    }
    return p;
}

static void blk_free(void *p)
{
    if (!use_reg) {
        free(p);
    } else if (weft_mem_free(p) != WEFT_OK) {
        fprintf(stderr, "test_coll: weft_mem_free: %s\n", weft_last_error());
        exit(1);
    }
}

/* A small cache of freed blocks, so that the large cases do not pay for fresh pages
 * (page faults were a third of the run time). Each block starts with its capacity. */
#define POOL_MAX 12
static struct { size_t cap; void *blk; } pool[POOL_MAX];

static void *pool_get(size_t n)
{
    int best = -1;
    for (int k = 0; k < POOL_MAX; k++)
        if (pool[k].blk && pool[k].cap >= n && (best < 0 || pool[k].cap < pool[best].cap))
            best = k;
    if (best >= 0) {
        void *b = pool[best].blk;
        pool[best].blk = NULL;
        return (char *)b + 64;
    }
    size_t *b = blk_alloc(n + 64);
    b[0] = n;
    return (char *)b + 64;
}

static void pool_put(void *p)
{
    if (!p)
        return;
    size_t *b = (size_t *)((char *)p - 64);
    int slot = -1;
    for (int k = 0; k < POOL_MAX && slot < 0; k++)
        if (!pool[k].blk)
            slot = k;
    if (slot < 0) {                     /* full: drop the smallest */
        slot = 0;
        for (int k = 1; k < POOL_MAX; k++)
            if (pool[k].cap < pool[slot].cap)
                slot = k;
        if (pool[slot].cap > b[0]) {
            blk_free(b);
            return;
        }
        blk_free(pool[slot].blk);
    }
    pool[slot].blk = b;
    pool[slot].cap = b[0];
}

/* data is filled with junk and expect is a copy; callers then write inputs and results. */
static void tbuf_alloc(tbuf_t *b, const char *name, size_t bytes, unsigned char junk,
                       size_t shift)
{
    b->name = name;
    b->bytes = bytes;
    b->pre = GUARD + shift;
    b->mem = pool_get(bytes + b->pre + GUARD);
    b->data = b->mem + b->pre;
    b->expect = pool_get(bytes);
    for (size_t j = 0; j < b->pre; j++)
        b->mem[j] = canary(j);
    for (size_t j = 0; j < GUARD; j++)
        b->data[bytes + j] = canary(b->pre + j);
    memset(b->data, junk, bytes);
    memset(b->expect, junk, bytes);
}

static void tbuf_free(tbuf_t *b)
{
    pool_put(b->mem);
    pool_put(b->expect);
    memset(b, 0, sizeof(*b));
}

/* ---- cases ---- */

typedef struct {
    int coll;
    weft_dtype_t dt;
    weft_op_t op;
    size_t count;
    int inplace, root;
    int asym;                   /* sendrecv: rank r sends count + r % 3 elements;
                                   sendrecv_pairs: the buffer goes as 3 messages */
    tbuf_t b[2];
    int nb;
    void *send, *recv;
    size_t scount, rcount;      /* sendrecv */
    int dst, src;
} tcase_t;

static void describe(const ctx_t *c, const tcase_t *t, char *out, size_t n)
{
    snprintf(out, n, "rank %d %s dtype=%s op=%s count=%zu inplace=%d root=%d%s (nranks=%d)",
             c->rank, coll_names[t->coll], dts[t->dt].name,
             t->coll == C_ALLREDUCE || t->coll == C_REDUCE_SCATTER || t->coll == C_REDUCE
                 ? op_names[t->op] : "-",
             t->count, t->inplace, t->root,
             !t->asym ? "" : t->coll == C_SENDRECV ? " asym" : " in-3-messages", c->nranks);
}

static void fail_line(ctx_t *c, const tcase_t *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_line(ctx_t *c, const tcase_t *t, const char *fmt, ...)
{
    if (c->st->printed++ >= MAX_FAIL_LINES) {
        if (c->st->printed == MAX_FAIL_LINES + 1)
            fprintf(stderr, "FAIL rank %d: further failure lines suppressed\n", c->rank);
        return;
    }
    char d[256], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (t) {
        describe(c, t, d, sizeof(d));
        fprintf(stderr, "FAIL %s: %s\n", d, msg);
    } else {
        fprintf(stderr, "FAIL rank %d (nranks=%d): %s\n", c->rank, c->nranks, msg);
    }
}

/* The last few inputs and folds made, by what made them: consecutive cases (in and out of
 * place, each root, the ops that share inputs) ask for the same ones, and a copy costs a
 * small part of making them again. Bounded in bytes; the oldest entry goes first. */
#define MEMO_MAX 8
#define MEMO_BYTES (96u << 20)
typedef struct {
    int kind, r, op, dt;        /* kind 0: rank r's input (op: PROD or not); 1: the fold */
    int nranks, range;          /* of the communicator it was made for */
    size_t base, n;
    void *bytes;                /* NULL: an empty slot */
    unsigned long used;         /* when it was last made or read */
} memo_t;
static memo_t memo[MEMO_MAX];
static size_t memo_total;
static unsigned long memo_clock;

static memo_t *memo_find(const ctx_t *c, int kind, int r, int op, weft_dtype_t dt,
                         size_t base, size_t n)
{
    for (int k = 0; k < MEMO_MAX; k++) {
        memo_t *m = &memo[k];
        if (m->bytes && m->kind == kind && m->r == r && m->op == op && m->dt == (int)dt &&
            m->nranks == c->nranks && m->range == c->range && m->base == base && m->n == n) {
            m->used = ++memo_clock;
            return m;
        }
    }
    return NULL;
}

static void memo_keep(const ctx_t *c, int kind, int r, int op, weft_dtype_t dt, size_t base,
                      size_t n, const void *src)
{
    size_t bytes = n * dts[dt].size;
    if (bytes == 0 || bytes > MEMO_BYTES / 2)
        return;
    for (;;) {                  /* evict the oldest until a slot and the bytes are free */
        int oldest = -1, free_slot = -1;
        for (int k = 0; k < MEMO_MAX; k++) {
            if (!memo[k].bytes)
                free_slot = k;
            else if (oldest < 0 || memo[k].used < memo[oldest].used)
                oldest = k;
        }
        if (free_slot >= 0 && memo_total + bytes <= MEMO_BYTES) {
            memo_t *m = &memo[free_slot];
            m->bytes = malloc(bytes);
            if (!m->bytes)
                return;         /* only a cache: go without */
            memcpy(m->bytes, src, bytes);
            *m = (memo_t){ kind, r, op, (int)dt, c->nranks, c->range, base, n, m->bytes,
                           ++memo_clock };
            memo_total += bytes;
            return;
        }
        memo_total -= memo[oldest].n * dts[memo[oldest].dt].size;
        free(memo[oldest].bytes);
        memo[oldest].bytes = NULL;
    }
}

static void fill_input(const ctx_t *c, void *dst, int r, size_t base, size_t n,
                       weft_dtype_t dt, weft_op_t op)
{
    double v[RUN_ELEMS];
    size_t es = dts[dt].size;
    int prod = op == WEFT_PROD;         /* gen() tells PROD from the rest, nothing more */
    memo_t *m = memo_find(c, 0, r, prod, dt, base, n);
    if (m) {
        memcpy(dst, m->bytes, n * es);
        return;
    }
    for (size_t i = 0; i < n; i += RUN_ELEMS) {
        size_t k = n - i < RUN_ELEMS ? n - i : RUN_ELEMS;
        gen_run(c, r, base + i, k, dt, op, v);
        put_run((char *)dst + i * es, dt, v, k);
    }
    memo_keep(c, 0, r, prod, dt, base, n, dst);
}

/* The reduction over all ranks of inputs base..base+n-1 (AVG: the exact sum, divided as
 * the API defines it) into dst. */
static void fill_fold(const ctx_t *c, void *dst, size_t base, size_t n, weft_dtype_t dt,
                      weft_op_t op)
{
    double acc[RUN_ELEMS], v[RUN_ELEMS];
    size_t es = dts[dt].size;
    memo_t *m = memo_find(c, 1, -1, op, dt, base, n);
    if (m) {
        memcpy(dst, m->bytes, n * es);
        return;
    }
    for (size_t i = 0; i < n; i += RUN_ELEMS) {
        size_t k = n - i < RUN_ELEMS ? n - i : RUN_ELEMS;
        gen_run(c, 0, base + i, k, dt, op, acc);
        for (int r = 1; r < c->nranks; r++) {
            gen_run(c, r, base + i, k, dt, op, v);
            for (size_t j = 0; j < k; j++) {
                switch (op) {      /* the same in every pass: well predicted */
                case WEFT_PROD: acc[j] *= v[j]; break;
                case WEFT_MIN:  acc[j] = v[j] < acc[j] ? v[j] : acc[j]; break;
                case WEFT_MAX:  acc[j] = v[j] > acc[j] ? v[j] : acc[j]; break;
                default:        acc[j] += v[j]; break;
                }
            }
        }
        if (op == WEFT_AVG)
            for (size_t j = 0; j < k; j++)
                acc[j] = avg_of(acc[j], dt, c->nranks);
        put_run((char *)dst + i * es, dt, acc, k);
    }
    memo_keep(c, 1, -1, op, dt, base, n, dst);
}

static tbuf_t *add_buf(ctx_t *c, tcase_t *t, const char *name, size_t elems)
{
    tbuf_t *b = &t->b[t->nb];
    size_t shift = ((c->seq + (unsigned)t->nb) % 4) * dts[t->dt].size;
    t->nb++;
    tbuf_alloc(b, name, elems * dts[t->dt].size, (unsigned char)(0xc3 + 17 * c->seq), shift);
    return b;
}

/* Input of this rank into both data and expect (an input that must stay unchanged). */
static void set_input(const ctx_t *c, tcase_t *t, tbuf_t *b, size_t off_elems, int r,
                      size_t base, size_t n, weft_op_t op)
{
    size_t o = off_elems * dts[t->dt].size;
    fill_input(c, b->data + o, r, base, n, t->dt, op);
    memcpy(b->expect + o, b->data + o, n * dts[t->dt].size);
}

/* Builds buffers, inputs and expected contents; the call itself comes later. */
static void prep(ctx_t *c, tcase_t *t)
{
    size_t n = t->count, N = n * (size_t)c->nranks, es = dts[t->dt].size;
    int me = c->rank, P = c->nranks;
    weft_op_t op = t->op;
    weft_op_t mv = WEFT_SUM;            /* generator for the data-movement collectives */
    tbuf_t *s, *r;

    c->seq++;
    t->nb = 0;
    switch (t->coll) {
    case C_ALLREDUCE:
        if (t->inplace) {
            s = r = add_buf(c, t, "buf", n);
            fill_input(c, s->data, me, 0, n, t->dt, op);
        } else {
            s = add_buf(c, t, "send", n);
            set_input(c, t, s, 0, me, 0, n, op);
            r = add_buf(c, t, "recv", n);
        }
        fill_fold(c, r->expect, 0, n, t->dt, op);
        t->send = s->data;
        t->recv = r->data;
        break;
    case C_REDUCE_SCATTER:
        s = add_buf(c, t, t->inplace ? "buf" : "send", N);
        set_input(c, t, s, 0, me, 0, N, op);
        if (t->inplace) {
            r = s;
            t->recv = s->data + (size_t)me * n * es;
            fill_fold(c, s->expect + (size_t)me * n * es, (size_t)me * n, n, t->dt, op);
        } else {
            r = add_buf(c, t, "recv", n);
            t->recv = r->data;
            fill_fold(c, r->expect, (size_t)me * n, n, t->dt, op);
        }
        t->send = s->data;
        break;
    case C_ALLGATHER:
        r = add_buf(c, t, t->inplace ? "buf" : "recv", N);
        for (int j = 0; j < P; j++)
            fill_input(c, r->expect + (size_t)j * n * es, j, 0, n, t->dt, mv);
        if (t->inplace) {
            set_input(c, t, r, (size_t)me * n, me, 0, n, mv);
            t->send = r->data + (size_t)me * n * es;
        } else {
            s = add_buf(c, t, "send", n);
            set_input(c, t, s, 0, me, 0, n, mv);
            t->send = s->data;
        }
        t->recv = r->data;
        break;
    case C_BROADCAST:
        if (t->inplace) {
            r = add_buf(c, t, "buf", n);
            if (me == t->root)
                fill_input(c, r->data, me, 0, n, t->dt, mv);
            t->send = r->data;
        } else {
            s = add_buf(c, t, "send", n);  /* ignored on non-roots, must stay unchanged */
            set_input(c, t, s, 0, me, 0, n, mv);
            r = add_buf(c, t, "recv", n);
            t->send = s->data;
        }
        fill_input(c, r->expect, t->root, 0, n, t->dt, mv);
        t->recv = r->data;
        break;
    case C_REDUCE:
        s = add_buf(c, t, t->inplace ? "buf" : "send", n);
        set_input(c, t, s, 0, me, 0, n, op);
        r = t->inplace ? s : add_buf(c, t, "recv", n);  /* non-root recv stays as it was */
        if (me == t->root)
            fill_fold(c, r->expect, 0, n, t->dt, op);
        t->send = s->data;
        t->recv = r->data;
        break;
    case C_ALLTOALL:
        s = add_buf(c, t, "send", N);
        set_input(c, t, s, 0, me, 0, N, mv);
        r = add_buf(c, t, "recv", N);
        for (int j = 0; j < P; j++)
            fill_input(c, r->expect + (size_t)j * n * es, j, (size_t)me * n, n, t->dt, mv);
        t->send = s->data;
        t->recv = r->data;
        break;
    case C_SENDRECV: {
        int prev = (me + P - 1) % P;
        t->dst = (me + 1) % P;
        t->src = prev;
        t->scount = n + (t->asym ? (size_t)(me % 3) : 0);
        t->rcount = n + (t->asym ? (size_t)(prev % 3) : 0);
        s = add_buf(c, t, "send", t->scount);
        set_input(c, t, s, 0, me, 0, t->scount, mv);
        r = add_buf(c, t, "recv", t->rcount);
        fill_input(c, r->expect, prev, 0, t->rcount, t->dt, mv);
        t->send = s->data;
        t->recv = r->data;
        break;
    }
    case C_SENDRECV_PAIRS: {
        int partner = (me % 2 == 0) ? me + 1 : me - 1;
        t->dst = t->src = partner;
        if (partner >= P)
            break;                      /* odd rank out: idle */
        s = add_buf(c, t, "send", n);
        set_input(c, t, s, 0, me, 0, n, mv);
        r = add_buf(c, t, "recv", n);
        fill_input(c, r->expect, partner, 0, n, t->dt, mv);
        t->send = s->data;
        t->recv = r->data;
        break;
    }
    }
}

static weft_status_t issue(ctx_t *c, tcase_t *t)
{
    weft_comm_t *m = c->comm;
    weft_status_t st;
    switch (t->coll) {
    case C_ALLREDUCE:      return weft_allreduce(t->send, t->recv, t->count, t->dt, t->op, m);
    case C_REDUCE_SCATTER: return weft_reduce_scatter(t->send, t->recv, t->count, t->dt, t->op, m);
    case C_ALLGATHER:      return weft_allgather(t->send, t->recv, t->count, t->dt, m);
    case C_BROADCAST:      return weft_broadcast(t->send, t->recv, t->count, t->dt, t->root, m);
    case C_REDUCE:
        return weft_reduce(t->send, t->recv, t->count, t->dt, t->op, t->root, m);
    case C_ALLTOALL:       return weft_alltoall(t->send, t->recv, t->count, t->dt, m);
    case C_SENDRECV:
        return weft_sendrecv(t->send, t->scount, t->dst, t->recv, t->rcount, t->src, t->dt, m);
    case C_SENDRECV_PAIRS:
        if (t->nb == 0)
            return WEFT_OK;
        for (int phase = 0; phase < 2; phase++) {   /* even sends first, odd answers */
            int sending = (c->rank % 2 == 0) == (phase == 0);
            size_t es = dts[t->dt].size, done = 0, pieces = t->asym ? 3 : 1;
            for (size_t k = 0; k < pieces; k++) {   /* messages to one peer stay in order */
                size_t len = k + 1 < pieces ? t->count / pieces : t->count - done;
                st = sending ? weft_send((char *)t->send + done * es, len, t->dt, t->dst, m)
                             : weft_recv((char *)t->recv + done * es, len, t->dt, t->src, m);
                if (st != WEFT_OK)
                    return st;
                done += len;
            }
        }
        return WEFT_OK;
    }
    return WEFT_ERR_INTERNAL;
}

static weft_status_t issue_nb(ctx_t *c, tcase_t *t, weft_request_t **req)
{
    weft_comm_t *m = c->comm;
    switch (t->coll) {
    case C_ALLREDUCE:
        return weft_iallreduce(t->send, t->recv, t->count, t->dt, t->op, m, req);
    case C_REDUCE_SCATTER:
        return weft_ireduce_scatter(t->send, t->recv, t->count, t->dt, t->op, m, req);
    case C_ALLGATHER:
        return weft_iallgather(t->send, t->recv, t->count, t->dt, m, req);
    case C_BROADCAST:
        return weft_ibroadcast(t->send, t->recv, t->count, t->dt, t->root, m, req);
    }
    return WEFT_ERR_INTERNAL;
}

/* An error status leaves the ranks out of step: report it and end this rank. */
static void fatal_status(ctx_t *c, const tcase_t *t, const char *call, weft_status_t st)
{
    char d[256] = "";
    if (t)
        describe(c, t, d, sizeof(d));
    fprintf(stderr, "FAIL %s: %s returned %d (%s): %s\n", d, call, (int)st,
            weft_status_str(st) ? weft_status_str(st) : "?", weft_last_error());
    fprintf(stderr, "test_coll: rank %d stops after an error status (%ld passed, %ld failed "
            "so far)\n", c->rank, c->st->passed, c->st->failed + 1);
    weft_comm_abort(c->comm);
    exit(1);
}

/* Compares every buffer with its expected contents and its guards; frees the buffers. */
static int verify(ctx_t *c, tcase_t *t)
{
    size_t es = dts[t->dt].size;
    int bad = 0;
    char g[64], e[64];
    for (int k = 0; k < t->nb; k++) {
        tbuf_t *b = &t->b[k];
        if (memcmp(b->data, b->expect, b->bytes) != 0) {
            size_t i = 0, nbad = 0, first = 0;
            for (i = 0; i < b->bytes / es; i++)
                if (memcmp(b->data + i * es, b->expect + i * es, es) != 0 && nbad++ == 0)
                    first = i;
            fmt_elem(b->data, first, t->dt, g, sizeof(g));
            fmt_elem(b->expect, first, t->dt, e, sizeof(e));
            fail_line(c, t, "%s[%zu] got %s expected %s (%zu of %zu elements wrong)", b->name,
                      first, g, e, nbad, b->bytes / es);
            bad = 1;
        }
        for (size_t j = 0; j < b->pre + GUARD; j++) {
            unsigned char *p = b->mem + (j < b->pre ? j : b->pre + b->bytes + (j - b->pre));
            if (*p != canary(j)) {
                fail_line(c, t, "%s guard-%s[%zu] got 0x%02x expected 0x%02x (wrote outside "
                          "the buffer)", b->name, j < b->pre ? "before" : "after",
                          j < b->pre ? b->pre - j : j - b->pre, *p, canary(j));
                bad = 1;
                break;
            }
        }
        tbuf_free(b);
    }
    t->nb = 0;
    if (bad)
        c->st->failed++;
    else
        c->st->passed++;
    return !bad;
}

/* ---- watchdog: a hang is reported with the case it happened in ---- */

static char watch_what[320];

static void on_alarm(int sig)
{
    (void)sig;
    static const char pre[] = "FAIL hang (watchdog): ";
    ssize_t rc = write(2, pre, sizeof(pre) - 1);
    rc = write(2, watch_what, strlen(watch_what));
    rc = write(2, "\n", 1);
    (void)rc;
    _exit(2);
}

static void watch(ctx_t *c, const char *what)
{
    snprintf(watch_what, sizeof(watch_what), "%s", what);
    if (c->verbose && c->rank == 0)
        fprintf(stderr, "test_coll: %s\n", what);
    alarm((unsigned)c->timeout_s);
}

static void watch_case(ctx_t *c, const tcase_t *t)
{
    char d[256];
    describe(c, t, d, sizeof(d));
    watch(c, d);
}

static void run_case(ctx_t *c, tcase_t *t)
{
    prep(c, t);
    watch_case(c, t);
    weft_status_t st = issue(c, t);
    if (st != WEFT_OK)
        fatal_status(c, t, coll_names[t->coll], st);
    verify(c, t);
}

/* ---- the matrix ---- */

static int is_reduction(int coll)
{
    return coll == C_ALLREDUCE || coll == C_REDUCE_SCATTER || coll == C_REDUCE;
}

/* --quick: the combinations that large counts still run. */
static int quick_combo(int coll, weft_dtype_t dt, weft_op_t op)
{
    if (!is_reduction(coll))
        return dt == WEFT_FLOAT32 || dt == WEFT_INT8;
    return (dt == WEFT_FLOAT32 && op == WEFT_SUM) || (dt == WEFT_BFLOAT16 && op == WEFT_AVG) ||
           (dt == WEFT_FLOAT16 && op == WEFT_SUM) || (dt == WEFT_INT8 && op == WEFT_MAX) ||
           (dt == WEFT_INT64 && op == WEFT_PROD) || (dt == WEFT_UINT32 && op == WEFT_MIN);
}

static void run_matrix(ctx_t *c, int coll)
{
    int P = c->nranks;
    int has_root = coll == C_BROADCAST || coll == C_REDUCE;
    int ninplace = (coll == C_ALLTOALL || coll == C_SENDRECV || coll == C_SENDRECV_PAIRS) ? 1 : 2;
    for (int ci = 0; ci < c->ncounts; ci++) {
        size_t count = c->counts[ci];
        int large = c->quick && count >= QUICK_LARGE;
        for (int di = 0; di < c->ndtypes; di++) {
            weft_dtype_t dt = (weft_dtype_t)c->dtypes[di];
            int nops = is_reduction(coll) ? c->nops : 1;
            for (int oi = 0; oi < nops; oi++) {
                weft_op_t op = is_reduction(coll) ? (weft_op_t)c->ops[oi] : WEFT_SUM;
                if (large && !quick_combo(coll, dt, op))
                    continue;
                for (int ip = 0; ip < ninplace; ip++) {
                    int roots[8], nroots = 0;
                    if (!has_root)
                        roots[nroots++] = -1;
                    else if (P <= 5 && !large)
                        for (int r = 0; r < P; r++)
                            roots[nroots++] = r;
                    else {
                        roots[nroots++] = 0;
                        if (P > 1)
                            roots[nroots++] = P - 1;
                        if (P > 2 && !large)
                            roots[nroots++] = P / 2;
                    }
                    for (int ri = 0; ri < nroots; ri++) {
                        int nvar = (coll == C_SENDRECV || coll == C_SENDRECV_PAIRS) ? 2 : 1;
                        for (int asym = 0; asym < nvar; asym++) {
                            tcase_t t = { .coll = coll, .dt = dt, .op = op, .count = count,
                                          .inplace = ip, .root = roots[ri], .asym = asym };
                            run_case(c, &t);
                        }
                    }
                }
            }
        }
    }
}

/* ---- all-reduce: every rank ends with the same bits where operand order shows ---- */

/* Ranks may differ about in place (NCCL allows it): even ranks all-reduce in place, odd
 * ranks out of place. With --reg the counts reach 6 MB and 10 MB, so that with
 * WEFT_REG_MIN=4M both sides of the probe's in-place rule run (tests/test_reg.sh). */
static void test_mixed_inplace(ctx_t *c)
{
    static const size_t counts[] = { 1000, 300000, 1536 * 1024, 2560 * 1024 };
    size_t ncounts = c->reg ? 4 : 2;
    int P = c->nranks, ip = c->rank % 2 == 0;
    watch(c, "all-reduce, in place on even ranks only");
    for (size_t k = 0; k < ncounts; k++) {
        size_t n = counts[k];
        tcase_t t = { .coll = C_ALLREDUCE, .dt = WEFT_INT32, .op = WEFT_SUM, .count = n,
                      .inplace = ip };
        int32_t *in = pool_get(n * 4), *out = pool_get(n * 4);
        for (size_t i = 0; i < n; i++)
            in[i] = c->rank + 1 + (int32_t)(i % 7);
        weft_status_t st = weft_allreduce(in, ip ? in : out, n, WEFT_INT32, WEFT_SUM, c->comm);
        if (st != WEFT_OK)
            fatal_status(c, &t, "allreduce", st);
        const int32_t *res = ip ? in : out;
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += res[i] != P * (P + 1) / 2 + P * (int32_t)(i % 7);
        if (bad) {
            fail_line(c, &t, "%zu of %zu elements wrong", bad, n);
            c->st->failed++;
        } else {
            c->st->passed++;
        }
        pool_put(in);
        pool_put(out);
    }
}

/* MAX and MIN of +0 and -0 (equal: the result is one of the operands, by position) and
 * sums of NaNs with different payloads (the result carries one operand's payload): a rank
 * that combined its operands in another order than its peers ends with other bits. Rank r
 * gives +0 (even r) or -0 (odd r), and quiet NaNs with payload r + 1. Counts reach the
 * direct and the ring algorithms, in and out of place. */
static void test_agree(ctx_t *c)
{
    static const size_t counts[] = { 1, 1000, 300000 };
    static const weft_op_t ops[] = { WEFT_MAX, WEFT_MIN, WEFT_SUM };
    int P = c->nranks;
    watch(c, "all-reduce agreement (signed zeros, NaN payloads)");
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        size_t n = counts[k];
        uint32_t *in = xmalloc(n * 4), *out = xmalloc(n * 4), *all = xmalloc(n * 4 * (size_t)P);
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
            for (int ip = 0; ip < 2; ip++) {
                tcase_t t = { .coll = C_ALLREDUCE, .dt = WEFT_FLOAT32, .op = ops[o],
                              .count = n, .inplace = ip };
                for (size_t i = 0; i < n; i++)
                    in[i] = ops[o] == WEFT_SUM ? 0x7fc00000u | (uint32_t)(c->rank + 1)
                                               : (c->rank % 2 ? 0x80000000u : 0u);
                if (ip)
                    memcpy(out, in, n * 4);
                weft_status_t st = weft_allreduce(ip ? out : in, out, n, WEFT_FLOAT32, ops[o],
                                                  c->comm);
                if (st != WEFT_OK)
                    fatal_status(c, &t, "allreduce", st);
                st = weft_allgather(out, all, n, WEFT_FLOAT32, c->comm);
                if (st != WEFT_OK)
                    fatal_status(c, &t, "allgather(results)", st);
                int bad = 0;
                for (int r = 1; r < P && !bad; r++)
                    for (size_t i = 0; i < n && !bad; i++)
                        if (all[(size_t)r * n + i] != all[i]) {
                            fail_line(c, &t, "element %zu: rank 0 has 0x%08x, rank %d 0x%08x",
                                      i, all[i], r, all[(size_t)r * n + i]);
                            bad = 1;
                        }
                if (bad)
                    c->st->failed++;
                else
                    c->st->passed++;
            }
        }
        free(in);
        free(out);
        free(all);
    }
}

/* Every payload length from 1 to 80 bytes, one message each: the shm ring carries up to
 * 16 bytes in the frame's header line and longer payloads after it, so both sides of
 * that boundary (and of the next lines) must land byte for byte. */
static void test_frame_sizes(ctx_t *c)
{
    watch(c, "sendrecv of 1-80 bytes");
    for (size_t n = 1; n <= 80; n++) {
        tcase_t t = { .coll = C_SENDRECV, .dt = WEFT_UINT8, .count = n, .root = -1 };
        run_case(c, &t);
    }
}

/* ---- barrier: every rank's pre-barrier write is visible to all after it, each rank
 *      late (20 ms) in one of the first iterations ---- */

static void test_barrier(ctx_t *c)
{
    uint64_t token = ((uint64_t)getpid() << 20) ^ (uint64_t)time(NULL);
    tcase_t t = { .coll = C_BARRIER, .dt = WEFT_INT64, .root = 0 };
    weft_status_t st = weft_broadcast(&token, &token, 1, WEFT_UINT64, 0, c->comm);
    if (st != WEFT_OK)
        fatal_status(c, &t, "broadcast(token)", st);
    char path[128];
    snprintf(path, sizeof(path), "/tmp/weft_test_barrier_%016" PRIx64, token);
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0) {
        perror(path);
        exit(1);
    }
    int iters = 100, bad = 0;
    int32_t *seen = xmalloc(sizeof(int32_t) * (size_t)c->nranks);
    watch(c, "barrier loop");
    for (int32_t it = 1; it <= iters; it++) {
        if (it <= c->nranks && c->rank == it - 1)
            usleep(20000);      /* each rank comes late once: the others must wait for it */
        if (pwrite(fd, &it, 4, (off_t)c->rank * 4) != 4) {
            perror("pwrite");
            exit(1);
        }
        st = weft_barrier(c->comm);
        if (st != WEFT_OK)
            fatal_status(c, &t, "barrier", st);
        memset(seen, 0, sizeof(int32_t) * (size_t)c->nranks);
        ssize_t got = pread(fd, seen, sizeof(int32_t) * (size_t)c->nranks, 0);
        (void)got;
        for (int r = 0; r < c->nranks && !bad; r++) {
            if (seen[r] < it) {
                fail_line(c, &t, "iteration %d: rank %d had only reached %d when the barrier "
                          "returned", it, r, seen[r]);
                bad = 1;
            }
        }
    }
    st = weft_barrier(c->comm);
    if (st != WEFT_OK)
        fatal_status(c, &t, "barrier", st);
    close(fd);
    st = weft_barrier(c->comm);
    if (st != WEFT_OK)
        fatal_status(c, &t, "barrier", st);
    if (c->rank == 0)
        unlink(path);
    free(seen);
    if (bad)
        c->st->failed++;
    else
        c->st->passed++;
}

/* ---- comm_split ---- */

static void check_int(ctx_t *c, const char *what, long got, long want)
{
    if (got != want) {
        fail_line(c, NULL, "split: %s got %ld expected %ld", what, got, want);
        c->st->failed++;
    } else {
        c->st->passed++;
    }
}

/* A few collectives on a sub-communicator, through the same checked cases. */
static void exercise(ctx_t *parent, weft_comm_t *sub)
{
    ctx_t s = *parent;
    s.comm = sub;
    s.rank = weft_comm_rank(sub);
    s.nranks = weft_comm_size(sub);
    size_t counts[] = { 1, 17, 32771 };
    for (size_t k = 0; k < 3; k++) {
        for (int ip = 0; ip < 2; ip++) {
            tcase_t a = { .coll = C_ALLREDUCE, .dt = WEFT_FLOAT32, .op = WEFT_SUM,
                          .count = counts[k], .inplace = ip, .root = -1 };
            run_case(&s, &a);
            tcase_t b = { .coll = C_BROADCAST, .dt = WEFT_INT32, .count = counts[k],
                          .inplace = ip, .root = s.nranks - 1 };
            run_case(&s, &b);
        }
    }
}

static void nb_wait(ctx_t *c, tcase_t *t, weft_request_t *req);

/* Traffic on two communicators over the same ranks at once: a large nonblocking call on
 * one stays in flight while blocking calls run on the other, both ways round. */
static void cross_comm(ctx_t *parent, weft_comm_t *dup)
{
    ctx_t d = *parent;
    d.comm = dup;
    d.rank = weft_comm_rank(dup);
    d.nranks = weft_comm_size(dup);
    for (int way = 0; way < 2; way++) {
        ctx_t *nbc = way ? &d : parent, *bc = way ? parent : &d;
        tcase_t big = { .coll = C_ALLREDUCE, .dt = WEFT_FLOAT32, .op = WEFT_SUM,
                        .count = 1048576, .root = -1 };
        tcase_t ag = { .coll = C_ALLGATHER, .dt = WEFT_INT32, .count = 65536, .root = -1 };
        weft_request_t *r[2];
        prep(nbc, &big);
        prep(nbc, &ag);
        watch_case(nbc, &big);
        weft_status_t st = issue_nb(nbc, &big, &r[0]);
        if (st != WEFT_OK)
            fatal_status(nbc, &big, "nonblocking issue (cross-communicator)", st);
        st = issue_nb(nbc, &ag, &r[1]);
        if (st != WEFT_OK)
            fatal_status(nbc, &ag, "nonblocking issue (cross-communicator)", st);
        tcase_t b1 = { .coll = C_ALLREDUCE, .dt = WEFT_INT32, .op = WEFT_MIN,
                       .count = 1048576, .root = -1 };
        tcase_t b2 = { .coll = C_BROADCAST, .dt = WEFT_FLOAT64, .count = 100000,
                       .root = bc->nranks - 1 };
        tcase_t b3 = { .coll = C_SENDRECV, .dt = WEFT_UINT8, .count = 300000, .root = -1 };
        run_case(bc, &b1);
        run_case(bc, &b2);
        run_case(bc, &b3);
        nb_wait(nbc, &big, r[0]);
        nb_wait(nbc, &ag, r[1]);
        verify(nbc, &big);
        verify(nbc, &ag);
    }
}

static void test_split(ctx_t *c)
{
    int me = c->rank, P = c->nranks;
    weft_comm_t *sub = NULL;
    tcase_t t = { .coll = C_SPLIT, .dt = WEFT_INT32, .root = -1 };
    weft_status_t st;

    /* By parity, key reversing the order. */
    watch(c, "split by parity");
    st = weft_comm_split(c->comm, me % 2, P - me, &sub);
    if (st != WEFT_OK || !sub)
        fatal_status(c, &t, "comm_split(parity)", st != WEFT_OK ? st : WEFT_ERR_INTERNAL);
    int want_size = 0, want_rank = 0;
    for (int r = 0; r < P; r++) {
        if (r % 2 != me % 2)
            continue;
        want_size++;
        if (r > me)
            want_rank++;
    }
    check_int(c, "parity sub size", weft_comm_size(sub), want_size);
    check_int(c, "parity sub rank", weft_comm_rank(sub), want_rank);
    /* The sum of the parent ranks, and the sub-root's parent rank, through the sub. */
    int32_t mine = me, sum = -1, root_parent = (me == P - 1 || me == P - 2) ? me : -7;
    st = weft_allreduce(&mine, &sum, 1, WEFT_INT32, WEFT_SUM, sub);
    if (st != WEFT_OK)
        fatal_status(c, &t, "allreduce(sub)", st);
    int32_t want_sum = 0;
    for (int r = me % 2; r < P; r += 2)
        want_sum += r;
    check_int(c, "parity sub allreduce of parent ranks", sum, want_sum);
    st = weft_broadcast(&root_parent, &root_parent, 1, WEFT_INT32, 0, sub);
    if (st != WEFT_OK)
        fatal_status(c, &t, "broadcast(sub)", st);
    check_int(c, "parity sub broadcast from sub-rank 0 (highest parent rank)", root_parent,
              (P - 1) % 2 == me % 2 ? P - 1 : P - 2);
    exercise(c, sub);
    /* The parent still works, interleaved with the child. */
    tcase_t a = { .coll = C_ALLREDUCE, .dt = WEFT_INT64, .op = WEFT_MAX, .count = 33, .root = -1 };
    run_case(c, &a);
    exercise(c, sub);
    st = weft_comm_destroy(sub);
    if (st != WEFT_OK)
        fatal_status(c, &t, "comm_destroy(parity)", st);

    /* A duplicate of the parent (one color, same order), used alongside it. */
    watch(c, "split duplicate");
    st = weft_comm_split(c->comm, 3, me, &sub);
    if (st != WEFT_OK || !sub)
        fatal_status(c, &t, "comm_split(duplicate)", st != WEFT_OK ? st : WEFT_ERR_INTERNAL);
    check_int(c, "duplicate size", weft_comm_size(sub), P);
    check_int(c, "duplicate rank", weft_comm_rank(sub), me);
    cross_comm(c, sub);
    st = weft_comm_destroy(sub);
    if (st != WEFT_OK)
        fatal_status(c, &t, "comm_destroy(duplicate)", st);

    /* Everyone WEFT_UNDEFINED: everyone gets NULL. */
    watch(c, "split all undefined");
    sub = (weft_comm_t *)&sub;          /* a non-NULL sentinel that must be replaced */
    st = weft_comm_split(c->comm, WEFT_UNDEFINED, me, &sub);
    if (st != WEFT_OK)
        fatal_status(c, &t, "comm_split(undefined)", st);
    check_int(c, "color=-1 yields NULL", sub != NULL, 0);

    /* Rank 0 undefined, the rest one communicator in the same order. */
    watch(c, "split rank 0 out");
    sub = (weft_comm_t *)&sub;
    st = weft_comm_split(c->comm, me == 0 ? WEFT_UNDEFINED : 5, 0, &sub);
    if (st != WEFT_OK)
        fatal_status(c, &t, "comm_split(rank 0 out)", st);
    if (me == 0) {
        check_int(c, "rank 0 with color=-1 yields NULL", sub != NULL, 0);
    } else if (!sub || sub == (weft_comm_t *)&sub) {
        check_int(c, "rest gets a communicator", 0, 1);
    } else {
        check_int(c, "rest sub size", weft_comm_size(sub), P - 1);
        check_int(c, "rest sub rank", weft_comm_rank(sub), me - 1);
        exercise(c, sub);
        st = weft_comm_destroy(sub);
        if (st != WEFT_OK)
            fatal_status(c, &t, "comm_destroy(rest)", st);
    }
    run_case(c, &a);                    /* the parent after the split */
}

/* ---- nonblocking ---- */

#define NB_MAX 8
#define NB_MANY 40

static void nb_set(ctx_t *c, tcase_t *t, size_t count)
{
    tcase_t set[5] = {
        { .coll = C_ALLREDUCE, .dt = WEFT_FLOAT32, .op = WEFT_SUM, .root = -1 },
        { .coll = C_REDUCE_SCATTER, .dt = WEFT_INT32, .op = WEFT_MAX, .inplace = 1, .root = -1 },
        { .coll = C_ALLGATHER, .dt = WEFT_INT8, .root = -1 },
        { .coll = C_BROADCAST, .dt = WEFT_UINT64, .inplace = 1, .root = c->nranks - 1 },
        { .coll = C_ALLREDUCE, .dt = WEFT_BFLOAT16, .op = WEFT_AVG, .inplace = 1, .root = -1 },
    };
    for (int k = 0; k < 5; k++) {
        t[k] = set[k];
        t[k].count = count;
        prep(c, &t[k]);
    }
}

static void nb_issue(ctx_t *c, tcase_t *t, int n, weft_request_t **req)
{
    for (int k = 0; k < n; k++) {
        req[k] = NULL;
        watch_case(c, &t[k]);
        weft_status_t st = issue_nb(c, &t[k], &req[k]);
        if (st != WEFT_OK)
            fatal_status(c, &t[k], "nonblocking issue", st);
        if (!req[k])
            fatal_status(c, &t[k], "nonblocking issue (NULL request)", WEFT_ERR_INTERNAL);
    }
}

static void nb_wait(ctx_t *c, tcase_t *t, weft_request_t *req)
{
    watch_case(c, t);
    weft_status_t st = weft_wait(req);
    if (st != WEFT_OK)
        fatal_status(c, t, "weft_wait", st);
}

static void test_nonblocking(ctx_t *c)
{
    tcase_t t[NB_MAX];
    weft_request_t *req[NB_MAX];
    const int n = 5;
    for (int ci = 0; ci < c->ncounts; ci++) {
        size_t count = c->counts[ci];

        /* Round 1: test-loop the last one; issue order is completion order. */
        nb_set(c, t, count);
        nb_issue(c, t, n, req);
        int done = 0;
        watch_case(c, &t[n - 1]);
        while (!done) {
            weft_status_t st = weft_test(req[n - 1], &done);
            if (st != WEFT_OK)
                fatal_status(c, &t[n - 1], "weft_test", st);
            if (!done)
                usleep(50);
        }
        for (int k = 0; k < n - 1; k++) {
            int d = 0;
            weft_status_t st = weft_test(req[k], &d);
            if (st != WEFT_OK)
                fatal_status(c, &t[k], "weft_test", st);
            if (!d)
                fail_line(c, &t[k], "nonblocking: not done although a later request is");
        }
        for (int k = 0; k < n; k++) {
            nb_wait(c, &t[k], req[k]);
            verify(c, &t[k]);
        }

        /* Round 2: a blocking call while they are in flight, then wait in reverse. */
        nb_set(c, t, count);
        nb_issue(c, t, n, req);
        tcase_t b = { .coll = C_ALLREDUCE, .dt = WEFT_INT64, .op = WEFT_SUM, .count = count,
                      .root = -1 };
        run_case(c, &b);
        for (int k = n - 1; k >= 0; k--)
            nb_wait(c, &t[k], req[k]);
        for (int k = 0; k < n; k++)
            verify(c, &t[k]);
    }

    /* Round 3: many small requests in flight at once, waited for in issue order. */
    tcase_t many[NB_MANY];
    weft_request_t *mreq[NB_MANY];
    for (int k = 0; k < NB_MANY; k++) {
        tcase_t m = { .coll = k % 3 == 2 ? C_ALLGATHER : C_ALLREDUCE,
                      .dt = (weft_dtype_t)(k % WEFT_NUM_DTYPES), .op = (weft_op_t)(k % WEFT_NUM_OPS),
                      .count = (size_t)(1 + 37 * k), .inplace = k % 2, .root = -1 };
        many[k] = m;
        prep(c, &many[k]);
    }
    nb_issue(c, many, NB_MANY, mreq);
    for (int k = 0; k < NB_MANY; k++) {
        nb_wait(c, &many[k], mreq[k]);
        verify(c, &many[k]);
    }
}

/* ---- options ---- */

static int parse_name(const char *s, int n, const char *const *names, const char *const *alias)
{
    for (int k = 0; k < n; k++)
        if (!strcmp(s, names[k]) || (alias && alias[k] && !strcmp(s, alias[k])))
            return k;
    return -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: test_coll [--colls LIST] [--counts LIST] [--dtypes all|LIST] "
            "[--ops all|LIST] [--quick] [--timeout S] [--verbose] [--reg all|even]\n");
    exit(2);
}

/* Splits a comma list and calls add(k) for each name's index. */
static void parse_list(const char *arg, int n, const char *const *names,
                       const char *const *alias, int *out, int *nout, unsigned *mask)
{
    char *dup = strdup(arg), *save = NULL;
    *nout = 0;
    if (!strcmp(arg, "all")) {
        for (int k = 0; k < n; k++) {
            if (out)
                out[(*nout)++] = k;
            if (mask)
                *mask |= 1u << k;
        }
        free(dup);
        return;
    }
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int k = parse_name(tok, n, names, alias);
        if (k < 0) {
            fprintf(stderr, "test_coll: unknown name '%s'\n", tok);
            usage();
        }
        if (out)
            out[(*nout)++] = k;
        if (mask)
            *mask |= 1u << k;
    }
    free(dup);
}

static void parse_args(ctx_t *c, int argc, char **argv)
{
    const char *dn[WEFT_NUM_DTYPES], *da[WEFT_NUM_DTYPES];
    for (int k = 0; k < WEFT_NUM_DTYPES; k++) {
        dn[k] = dts[k].name;
        da[k] = dts[k].alias;
    }
    const char *counts = DEFAULT_COUNTS;
    int dummy;
    c->colls = 0;
    parse_list("all", C_NUM, coll_names, NULL, NULL, &dummy, &c->colls);
    parse_list("all", WEFT_NUM_DTYPES, dn, da, c->dtypes, &c->ndtypes, NULL);
    parse_list("all", WEFT_NUM_OPS, op_names, NULL, c->ops, &c->nops, NULL);
    c->timeout_s = 90;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) {
            c->quick = 1;
        } else if (!strcmp(a, "--verbose")) {
            c->verbose = 1;
        } else if (!v) {
            usage();
        } else if (!strcmp(a, "--colls")) {
            c->colls = 0;
            parse_list(v, C_NUM, coll_names, NULL, NULL, &dummy, &c->colls);
            i++;
        } else if (!strcmp(a, "--dtypes")) {
            parse_list(v, WEFT_NUM_DTYPES, dn, da, c->dtypes, &c->ndtypes, NULL);
            i++;
        } else if (!strcmp(a, "--ops")) {
            parse_list(v, WEFT_NUM_OPS, op_names, NULL, c->ops, &c->nops, NULL);
            i++;
        } else if (!strcmp(a, "--counts")) {
            counts = v;
            i++;
        } else if (!strcmp(a, "--timeout")) {
            c->timeout_s = atoi(v);
            i++;
        } else if (!strcmp(a, "--reg")) {
            if (strcmp(v, "all") != 0 && strcmp(v, "even") != 0)
                usage();
            c->reg = !strcmp(v, "all") ? 1 : 2;
            i++;
        } else {
            usage();
        }
    }
    char *dup = strdup(counts), *save = NULL;
    c->ncounts = 0;
    for (char *tok = strtok_r(dup, ",", &save); tok && c->ncounts < 32;
         tok = strtok_r(NULL, ",", &save)) {
        char *end;
        unsigned long long x = strtoull(tok, &end, 0);
        if (*end)
            usage();
        c->counts[c->ncounts++] = (size_t)x;
    }
    free(dup);
    if (c->timeout_s <= 0)
        c->timeout_s = 90;
}

/* Local ranks use shared memory unless WEFT_TRANSPORT names another transport; with it
 * unset, ranks on several hosts (tests/test_multihost.sh) use shm for their host's ranks
 * and the network for the others ("mixed"), or only the network when alone on a host. */
static void check_transport(ctx_t *c)
{
    const char *want = getenv("WEFT_TRANSPORT"), *got = weft_comm_transport(c->comm);
    int local = weft_comm_local_size(c->comm);
    if (c->nranks < 2)
        return;
    if (!want || !*want) {          /* alone on its host: tcp, or ucx where it sees RDMA */
        int net = got && (!strcmp(got, "tcp") || !strcmp(got, "ucx"));
        want = local == c->nranks ? "shm" : local > 1 ? "mixed" : net ? got : "tcp";
    }
    if (strcmp(want, "shm") && strcmp(want, "tcp") && strcmp(want, "ucx") && strcmp(want, "mixed"))
        return;                         /* another transport or "auto": nothing to check */
    if (!got || strcmp(got, want) != 0) {
        fail_line(c, NULL, "weft_comm_transport() is \"%s\", expected \"%s\"",
                  got ? got : "NULL", want);
        c->st->failed++;
    } else {
        c->st->passed++;
    }
}

int main(int argc, char **argv)
{
    stats_t stats = { 0 };
    ctx_t c = { .st = &stats };
    parse_args(&c, argc, argv);
    signal(SIGALRM, on_alarm);
    setvbuf(stderr, NULL, _IOLBF, 0);

    watch(&c, "weft_comm_init");
    weft_status_t st = weft_comm_init(&c.comm);
    if (st != WEFT_OK || !c.comm) {
        fprintf(stderr, "test_coll: weft_comm_init: %s: %s\n", weft_status_str(st),
                weft_last_error());
        return 1;
    }
    c.rank = weft_comm_rank(c.comm);
    c.nranks = weft_comm_size(c.comm);
    use_reg = c.reg == 1 || (c.reg == 2 && c.rank % 2 == 0);
    c.range = c.nranks <= 5 ? 25 : (125 / c.nranks > 0 ? 125 / c.nranks : 1);
    check_transport(&c);

    static const int order[] = { C_BARRIER, C_ALLREDUCE, C_REDUCE_SCATTER, C_ALLGATHER,
                                 C_BROADCAST, C_REDUCE, C_ALLTOALL, C_SENDRECV_PAIRS,
                                 C_SENDRECV, C_SPLIT, C_NONBLOCKING };
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        int coll = order[k];
        if (!(c.colls & (1u << coll)))
            continue;
        if (coll == C_BARRIER)
            test_barrier(&c);
        else if (coll == C_SPLIT)
            test_split(&c);
        else if (coll == C_NONBLOCKING)
            test_nonblocking(&c);
        else
            run_matrix(&c, coll);
        if (coll == C_ALLREDUCE) {
            test_agree(&c);
            test_mixed_inplace(&c);
        }
        if (coll == C_SENDRECV)
            test_frame_sizes(&c);
    }

    /* Everyone learns the totals. */
    watch(&c, "final allreduce of the counts");
    int64_t tot[2] = { stats.passed, stats.failed }, all[2] = { 0, 0 };
    st = weft_allreduce(tot, all, 2, WEFT_INT64, WEFT_SUM, c.comm);
    if (st != WEFT_OK) {
        fprintf(stderr, "test_coll: rank %d: final allreduce: %s: %s\n", c.rank,
                weft_status_str(st), weft_last_error());
        return 1;
    }
    if (c.rank == 0)
        printf("test_coll: %" PRId64 " passed, %" PRId64 " failed (nranks=%d)\n", all[0], all[1],
               c.nranks);
    st = weft_comm_destroy(c.comm);
    alarm(0);
    if (st != WEFT_OK) {
        fprintf(stderr, "test_coll: rank %d: comm_destroy: %s\n", c.rank, weft_status_str(st));
        return 1;
    }
    return all[1] != 0 || stats.failed != 0;
}
