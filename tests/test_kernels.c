/*
 * test_kernels.c - the reduction kernels (kernels/reduce.c) against a scalar reference.
 *
 * Covers every dtype x op (AVG with avg_div 0..5) and kern_divide (div 0..5) at every
 * instruction-set level this CPU has, for lengths 0, 1, 7, 17, 33, 1023, 32771, out of
 * place and with dst == a / dst == b, with aligned, one-element-misaligned and mixed
 * offsets, checking that nothing outside [0, n) is written. The fp16/bf16 conversions
 * are checked over all 65536 patterns (widen, and round trip), at every tie between
 * neighbours, on random floats, and through the SIMD paths by sweeping all 65536 halves
 * against a set of partners in SUM and AVG. kern_premul (x times one scalar) against the
 * reference's PROD with that scalar.
 *
 * Usage: test_kernels           run the tests; prints one summary line, exits 1 on failure
 *        test_kernels --bench   SUM throughput (GB/s) at 256 KiB, 4 MiB, 64 MiB; no tests
 *
 * Invariants: the reference shares no code with the kernels. fp16/bf16 are converted
 * with frexp/ldexp/nearbyint in double, integers are reduced in 64-bit arithmetic and
 * truncated; floats compare bit for bit except that any NaN matches any NaN.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reduce.h"

static struct { int passed, failed, reports; } T;

#define MAX_REPORTS 30

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
    if (ok) {
        T.passed++;
        return;
    }
    T.failed++;
    if (T.reports++ >= MAX_REPORTS)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* ---- helpers: rng, bits ------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static const char *DT[] = { "int8", "uint8", "int32", "uint32", "int64", "uint64",
                            "fp16", "bf16", "fp32", "fp64" };
static const char *OP[] = { "sum", "prod", "min", "max", "avg" };
static const size_t DSIZE[] = { 1, 1, 4, 4, 8, 8, 2, 2, 4, 8 };

/* ---- reference conversions (double arithmetic, no bit tricks) ----------------------- */

static float ref_h2f(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (float)((h & 0x8000) ? -v : v);
}

static float ref_b2f(uint16_t h)
{
    int e = (h >> 7) & 255, m = h & 127;
    double v = e == 255 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
    return (float)((h & 0x8000) ? -v : v);
}

/* Round |f| to a format with mbits stored mantissa bits, exponent bias `bias`, top
 * exponent field emax (all ones), subnormal quantum 2^qmin; returns the magnitude bits. */
static uint16_t ref_round(double a, int mbits, int bias, int emax, int qmin)
{
    if (isinf(a))
        return (uint16_t)(emax << mbits);
    int e;
    frexp(a, &e);
    int E = e - 1;                              /* a in [2^E, 2^(E+1)) */
    if (a == 0 || E < 1 - bias) {               /* subnormal range: quantum 2^qmin */
        double q = nearbyint(ldexp(a, -qmin));  /* may reach 2^mbits: the smallest normal */
        return (uint16_t)q;
    }
    double m = nearbyint(ldexp(a, mbits - E));  /* in [2^mbits, 2^(mbits+1)] */
    if (m == ldexp(1, mbits + 1)) {
        m = ldexp(1, mbits);
        E++;
    }
    if (E + bias >= emax)
        return (uint16_t)(emax << mbits);
    return (uint16_t)(((E + bias) << mbits) | ((int)m - (1 << mbits)));
}

static uint16_t ref_f2h(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f))
        return sign | 0x7e00;
    return sign | ref_round(fabs((double)f), 10, 15, 31, -24);
}

static uint16_t ref_f2b(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f))
        return sign | 0x7fc0;
    return sign | ref_round(fabs((double)f), 7, 127, 255, -133);
}

static int h_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
static int b_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

/* ---- reference reduction, one element at a time -------------------------------------- */

static uint64_t load_int(const void *p, weft_dtype_t dt)
{
    switch (dt) {
    case WEFT_INT8: return (uint64_t)(int64_t)*(const int8_t *)p;
    case WEFT_UINT8: return *(const uint8_t *)p;
    case WEFT_INT32: { int32_t v; memcpy(&v, p, 4); return (uint64_t)(int64_t)v; }
    case WEFT_UINT32: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

/* Truncates to the dtype's width, sign-extending signed types. */
static uint64_t wrap_int(uint64_t v, weft_dtype_t dt)
{
    switch (dt) {
    case WEFT_INT8: return (uint64_t)(int64_t)(int8_t)(uint8_t)v;
    case WEFT_UINT8: return (uint8_t)v;
    case WEFT_INT32: return (uint64_t)(int64_t)(int32_t)(uint32_t)v;
    case WEFT_UINT32: return (uint32_t)v;
    default: return v;
    }
}

static int is_signed(weft_dtype_t dt)
{
    return dt == WEFT_INT8 || dt == WEFT_INT32 || dt == WEFT_INT64;
}

static void ref_int(weft_dtype_t dt, weft_op_t op, int div, const void *xp, const void *yp,
                    void *out)
{
    uint64_t x = load_int(xp, dt), y = load_int(yp, dt), r = 0;
    int lt = is_signed(dt) ? (int64_t)x < (int64_t)y : x < y;
    switch (op) {
    case WEFT_SUM: r = x + y; break;
    case WEFT_PROD: r = x * y; break;
    case WEFT_MIN: r = lt ? x : y; break;
    case WEFT_MAX: r = lt ? y : x; break;
    case WEFT_AVG:
        r = wrap_int(x + y, dt);
        if (div > 0)
            r = is_signed(dt) ? (uint64_t)((int64_t)r / div) : r / (uint64_t)div;
        break;
    }
    r = wrap_int(r, dt);
    memcpy(out, &r, DSIZE[dt]);   /* little-endian: the low bytes */
}

#define REF_FLT(T, x, y, op, div) \
    ((op) == WEFT_SUM ? (x) + (y) : (op) == WEFT_PROD ? (x) * (y) :                      \
     (isnan(x) || isnan(y)) ? (T)NAN :                                                  \
     (op) == WEFT_MIN ? ((x) < (y) ? (x) : (y)) : (op) == WEFT_MAX ? ((x) > (y) ? (x) : (y)) : \
     (div) > 0 ? ((x) + (y)) / (T)(div) : (x) + (y))

static void ref_elem(weft_dtype_t dt, weft_op_t op, int div, const void *xp, const void *yp,
                     void *out)
{
    if (dt == WEFT_FLOAT32) {
        float x, y, r;
        memcpy(&x, xp, 4), memcpy(&y, yp, 4);
        r = REF_FLT(float, x, y, op, div);
        memcpy(out, &r, 4);
    } else if (dt == WEFT_FLOAT64) {
        double x, y, r;
        memcpy(&x, xp, 8), memcpy(&y, yp, 8);
        r = REF_FLT(double, x, y, op, div);
        memcpy(out, &r, 8);
    } else if (dt == WEFT_FLOAT16 || dt == WEFT_BFLOAT16) {
        uint16_t hx, hy, hr;
        memcpy(&hx, xp, 2), memcpy(&hy, yp, 2);
        int bf = dt == WEFT_BFLOAT16;
        float x = bf ? ref_b2f(hx) : ref_h2f(hx), y = bf ? ref_b2f(hy) : ref_h2f(hy);
        float r = REF_FLT(float, x, y, op, div);
        hr = bf ? ref_f2b(r) : ref_f2h(r);
        memcpy(out, &hr, 2);
    } else {
        ref_int(dt, op, div, xp, yp, out);
    }
}

/* dst = x / div in the reduced type; div <= 1 is a bit-exact copy. */
static void ref_div(weft_dtype_t dt, int div, const void *xp, void *out)
{
    if (div <= 1) {
        memcpy(out, xp, DSIZE[dt]);
        return;
    }
    if (dt <= WEFT_UINT64) {
        uint64_t x = load_int(xp, dt);
        uint64_t r = is_signed(dt) ? (uint64_t)((int64_t)x / div) : x / (uint64_t)div;
        r = wrap_int(r, dt);
        memcpy(out, &r, DSIZE[dt]);
        return;
    }
    if (dt == WEFT_FLOAT32) {
        float x; memcpy(&x, xp, 4); x = x / (float)div; memcpy(out, &x, 4);
    } else if (dt == WEFT_FLOAT64) {
        double x; memcpy(&x, xp, 8); x = x / (double)div; memcpy(out, &x, 8);
    } else {
        uint16_t h; memcpy(&h, xp, 2);
        int bf = dt == WEFT_BFLOAT16;
        float x = (bf ? ref_b2f(h) : ref_h2f(h)) / (float)div;
        h = bf ? ref_f2b(x) : ref_f2h(x);
        memcpy(out, &h, 2);
    }
}

static int same_elem(weft_dtype_t dt, const void *p, const void *q)
{
    if (dt == WEFT_FLOAT32) {
        float x, y; memcpy(&x, p, 4), memcpy(&y, q, 4);
        if (isnan(x) || isnan(y)) return isnan(x) && isnan(y);
    } else if (dt == WEFT_FLOAT64) {
        double x, y; memcpy(&x, p, 8), memcpy(&y, q, 8);
        if (isnan(x) || isnan(y)) return isnan(x) && isnan(y);
    } else if (dt == WEFT_FLOAT16 || dt == WEFT_BFLOAT16) {
        uint16_t x, y; memcpy(&x, p, 2), memcpy(&y, q, 2);
        int (*nan)(uint16_t) = dt == WEFT_FLOAT16 ? h_nan : b_nan;
        if (nan(x) || nan(y)) return nan(x) && nan(y);
    }
    return memcmp(p, q, DSIZE[dt]) == 0;
}

/* ---- input data ----------------------------------------------------------------------- */

static void fill_float(float *p, uint64_t r)
{
    static const uint32_t special[] = { 0x00000000, 0x80000000, 0x7f800000, 0xff800000,
        0x7fc00000, 0x7f800001, 0x7f7fffff, 0x00800000, 0x00000001, 0x807fffff, 0x3f800000 };
    unsigned k = r & 15;
    if (k == 0)
        *p = bitsf(special[(r >> 8) % (sizeof special / 4)]);
    else if (k == 1)
        *p = bitsf((uint32_t)(r >> 16));
    else
        *p = ldexpf((float)((r >> 20) & 0xffffff) / 0x1p24f, (int)((r >> 50) & 31) - 12) *
             ((r >> 10) & 1 ? -1.f : 1.f);
}

static void fill_double(double *p, uint64_t r)
{
    unsigned k = r & 15;
    if (k == 0) {
        static const double special[] = { 0.0, -0.0, INFINITY, -INFINITY, NAN, 1.7e308, 5e-324 };
        *p = special[(r >> 8) % 7];
    } else if (k == 1) {
        uint64_t b = rng_next(&r);
        memcpy(p, &b, 8);
    } else {
        *p = ldexp((double)(r >> 11) / 0x1p53, (int)((r >> 4) & 63) - 30) * (r & 16 ? -1 : 1);
    }
}

/* 16-bit floats: half raw bit patterns, half with a moderate exponent (so sums matter). */
static uint16_t fill16(uint64_t r, int bf)
{
    uint16_t h = (uint16_t)(r >> 20);
    if (r & 1)
        return h;
    if (bf)
        return (uint16_t)((h & 0x807f) | ((uint16_t)(118 + ((r >> 40) % 20)) << 7));
    return (uint16_t)((h & 0x83ff) | ((uint16_t)(8 + ((r >> 40) % 16)) << 10));
}

static void fill(weft_dtype_t dt, void *buf, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next(s);
        char *p = (char *)buf + i * DSIZE[dt];
        if (dt == WEFT_FLOAT32)
            fill_float((float *)p, r);
        else if (dt == WEFT_FLOAT64)
            fill_double((double *)p, r);
        else if (dt == WEFT_FLOAT16 || dt == WEFT_BFLOAT16) {
            uint16_t h = fill16(r, dt == WEFT_BFLOAT16);
            memcpy(p, &h, 2);
        } else {
            if ((r & 3) == 0)
                r = (r >> 8) % 200;             /* small values: AVG and PROD stay readable */
            memcpy(p, &r, DSIZE[dt]);
        }
    }
}

/* ---- the reduce/divide matrix ------------------------------------------------------- */

#define GUARD 64                 /* bytes of canary on both sides of every output */
#define CANARY 0xa5

enum { OUT_OF_PLACE, DST_IS_A, DST_IS_B, NUM_ALIAS };
static const char *ALIAS[] = { "out-of-place", "dst==a", "dst==b" };

typedef struct {
    weft_dtype_t dt;
    size_t n, es;
    const char *x, *y, *ref;     /* inputs and expected output, n elements each */
    char *bufs[3];               /* 64-aligned scratch: a, b, dst, with guards */
} matrix_case_t;

static int first_mismatch(const matrix_case_t *c, const char *out, size_t *at)
{
    for (size_t i = 0; i < c->n; i++) {
        if (!same_elem(c->dt, out + i * c->es, c->ref + i * c->es)) {
            *at = i;
            return 1;
        }
    }
    return 0;
}

static int guards_intact(const char *out, size_t bytes)
{
    for (size_t i = 0; i < GUARD; i++)
        if ((unsigned char)out[-1 - (long)i] != CANARY || (unsigned char)out[bytes + i] != CANARY)
            return 0;
    return 1;
}

/* Offsets in elements of (a, b, dst) for align mode 0 (aligned), 1 (all +1), 2 (mixed). */
static void offsets(int align, size_t off[3])
{
    static const size_t tab[3][3] = { { 0, 0, 0 }, { 1, 1, 1 }, { 1, 0, 2 } };
    memcpy(off, tab[align], sizeof tab[align]);
}

/* One kernel call (reduce when divide == 0, else divide by div) at one placement; nt
 * takes the streaming-store form of the reduce. */
static void run_case(const matrix_case_t *c, weft_op_t op, int div, int divide, int nt,
                     int isa, int align, int alias)
{
    size_t off[3], bytes = c->n * c->es;
    offsets(align, off);
    char *p[3];
    for (int k = 0; k < 3; k++) {
        p[k] = c->bufs[k] + GUARD + off[k] * c->es;
        memset(p[k] - GUARD, CANARY, bytes + 2 * GUARD);
    }
    memcpy(p[0], c->x, bytes);
    memcpy(p[1], c->y, bytes);
    char *dst = alias == DST_IS_A ? p[0] : alias == DST_IS_B ? p[1] : p[2];
    int best = (int)kern_isa_best();

    if (divide) {
        const char *src = alias == OUT_OF_PLACE ? p[0] : dst;
        if (isa == best)
            kern_divide(dst, src, c->n, c->dt, div);
        else
            kern_divide_isa(dst, src, c->n, c->dt, div, (kern_isa_t)isa);
    } else if (nt && isa == best) {
        kern_reduce_nt(dst, p[0], p[1], c->n, c->dt, op, div);
    } else if (nt) {
        kern_reduce_nt_isa(dst, p[0], p[1], c->n, c->dt, op, div, (kern_isa_t)isa);
    } else if (isa == best) {
        kern_reduce(dst, p[0], p[1], c->n, c->dt, op, div);
    } else {
        kern_reduce_isa(dst, p[0], p[1], c->n, c->dt, op, div, (kern_isa_t)isa);
    }
    size_t at = 0;
    int bad = first_mismatch(c, dst, &at);
    check(!bad && guards_intact(dst, bytes),
          "%s %s%s div=%d n=%zu isa=%s align=%d %s: %s at %zu", DT[c->dt],
          divide ? "divide" : OP[op], nt ? " (nt)" : "", div, c->n,
          kern_isa_name((kern_isa_t)isa), align,
          ALIAS[alias], bad ? "wrong value" : "guard overwritten", at);
}

static void run_all_placements(const matrix_case_t *c, weft_op_t op, int div, int divide)
{
    for (int isa = 0; isa <= (int)kern_isa_best(); isa++)
        for (int align = 0; align < 3; align++)
            for (int alias = 0; alias < NUM_ALIAS; alias++) {
                if (divide && alias == DST_IS_B)
                    continue;       /* divide has one input: in place is dst==a */
                if (align == 2 && alias != OUT_OF_PLACE)
                    continue;       /* aliasing is exact: dst takes the input's offset */
                for (int nt = 0; nt <= !divide; nt++)
                    run_case(c, op, div, divide, nt, isa, align, alias);
            }
}

static void matrix_dtype_len(weft_dtype_t dt, size_t n, uint64_t *seed)
{
    matrix_case_t c = { .dt = dt, .n = n, .es = DSIZE[dt] };
    size_t bytes = ((n + 4) * c.es + 2 * GUARD + 63) / 64 * 64;
    char *x = malloc(n * c.es + 1), *y = malloc(n * c.es + 1), *ref = malloc(n * c.es + 1);
    for (int k = 0; k < 3; k++)
        c.bufs[k] = aligned_alloc(64, bytes);
    fill(dt, x, n, seed);
    fill(dt, y, n, seed);
    c.x = x, c.y = y, c.ref = ref;

    for (int op = 0; op < WEFT_NUM_OPS; op++) {
        int divs = op == WEFT_AVG ? 6 : 1;  /* AVG: avg_div 0 (a sum) .. 5 */
        for (int div = 0; div < divs; div++) {
            for (size_t i = 0; i < n; i++)
                ref_elem(dt, op, div, x + i * c.es, y + i * c.es, ref + i * c.es);
            run_all_placements(&c, op, div, 0);
        }
    }
    for (int div = 0; div <= 5; div++) {
        for (size_t i = 0; i < n; i++)
            ref_div(dt, div, x + i * c.es, ref + i * c.es);
        run_all_placements(&c, WEFT_SUM, div, 1);
    }
    for (int k = 0; k < 3; k++)
        free(c.bufs[k]);
    free(x), free(y), free(ref);
}

static void test_matrix(void)
{
    static const size_t lens[] = { 0, 1, 7, 17, 33, 1023, 32771 };
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++)
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
            matrix_dtype_len((weft_dtype_t)dt, lens[k], &seed);
}

/* kern_copy_nt at every level: lengths around the 64-byte lines it streams, every kind of
 * destination misalignment; the bytes arrive and nothing around them is touched. */
static void test_copy_nt(void)
{
    static const size_t lens[] = { 0, 1, 63, 64, 65, 127, 128, 129, 191, 4133, 100003 };
    static const size_t doffs[] = { 0, 1, 8, 32, 63 };
    size_t cap = (100003 + 64 + 2 * GUARD + 63) / 64 * 64;   /* aligned_alloc: a multiple */
    unsigned char *src = aligned_alloc(64, cap), *dbuf = aligned_alloc(64, cap);
    uint64_t seed = 0x5bd1e995u;
    for (size_t i = 0; i < cap; i++)
        src[i] = (unsigned char)rng_next(&seed);
    for (int isa = 0; isa <= (int)kern_isa_best(); isa++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (size_t oi = 0; oi < sizeof doffs / sizeof doffs[0]; oi++)
                for (size_t soff = 0; soff <= 3; soff += 3) {
                    size_t n = lens[li];
                    char *d = (char *)dbuf + GUARD + doffs[oi];
                    memset(d - GUARD, CANARY, n + 2 * GUARD);
                    if (isa == (int)kern_isa_best())
                        kern_copy_nt(d, src + soff, n);
                    else
                        kern_copy_nt_isa(d, src + soff, n, (kern_isa_t)isa);
                    check(memcmp(d, src + soff, n) == 0 && guards_intact(d, n),
                          "copy_nt n=%zu dst+%zu src+%zu isa=%s: %s", n, doffs[oi], soff,
                          kern_isa_name((kern_isa_t)isa),
                          memcmp(d, src + soff, n) ? "wrong bytes" : "guard overwritten");
                }
    free(src);
    free(dbuf);
}

/* ---- conversions ---------------------------------------------------------------------- */

/* All 65536 patterns: widen matches the reference; narrow(widen(h)) == h, NaNs staying
 * NaN with their sign and coming back quiet. */
static void test_all_patterns(int bf)
{
    const char *name = bf ? "bf16" : "fp16";
    int (*nan)(uint16_t) = bf ? b_nan : h_nan;
    uint16_t quiet = bf ? 0x40 : 0x200;
    int bad_widen = 0, bad_trip = 0;
    unsigned first_widen = 0, first_trip = 0;

    for (unsigned h = 0; h < 65536; h++) {
        float f = bf ? kern_bf16_to_float((uint16_t)h) : kern_half_to_float((uint16_t)h);
        float r = bf ? ref_b2f((uint16_t)h) : ref_h2f((uint16_t)h);
        uint16_t back = bf ? kern_float_to_bf16(f) : kern_float_to_half(f);
        int sign_ok = !!signbit(f) == !!(h & 0x8000);
        /* fp16 NaNs widen quiet (like VCVTPH2PS); bf16 widens by a plain shift */
        int w_ok = !nan((uint16_t)h) ? fbits(f) == fbits(r)
                   : bf ? fbits(f) == h << 16 : isnan(f) && sign_ok && (fbits(f) & 0x400000);
        int t_ok = nan((uint16_t)h) ? nan(back) && (back & 0x8000) == (h & 0x8000) &&
                                      (back & quiet) : back == h;
        if (!w_ok && bad_widen++ == 0)
            first_widen = h;
        if (!t_ok && bad_trip++ == 0)
            first_trip = h;
    }
    check(bad_widen == 0, "%s->float: %d of 65536 wrong, first 0x%04x", name, bad_widen,
          first_widen);
    check(bad_trip == 0, "%s round trip: %d of 65536 wrong, first 0x%04x", name, bad_trip,
          first_trip);
}

static uint16_t narrow16(int bf, float f)
{
    return bf ? kern_float_to_bf16(f) : kern_float_to_half(f);
}

/* Every tie between neighbours h, h+1 (both signs) goes to the even one; one float ulp
 * either side goes to the nearer. The last tie (max finite vs inf) overflows to inf. */
static void test_ties(int bf)
{
    int bad = 0;
    unsigned first = 0;
    unsigned top = bf ? 0x7f80 : 0x7c00;
    for (unsigned h = 0; h < top; h++) {
        float lo = bf ? ref_b2f((uint16_t)h) : ref_h2f((uint16_t)h), mid;
        if (bf)     /* exact: the bf16 neighbours differ in bit 16 of the float */
            mid = bitsf((h << 16) | 0x8000);
        else        /* exact: 12 significant bits; above 65504 comes 65536 (inf) */
            mid = (lo + (h + 1 < top ? ref_h2f((uint16_t)(h + 1)) : 65536.0f)) / 2;
        unsigned even = (h & 1) ? h + 1 : h;
        for (unsigned sign = 0; sign <= 0x8000; sign += 0x8000) {
            float s = sign ? -1.0f : 1.0f;
            int ok = narrow16(bf, s * mid) == (sign | even) &&
                     narrow16(bf, s * nextafterf(mid, 0)) == (sign | h) &&
                     narrow16(bf, s * nextafterf(mid, INFINITY)) == (sign | (h + 1)) &&
                     narrow16(bf, s * lo) == (sign | h);
            if (!ok && bad++ == 0)
                first = sign | h;
        }
    }
    check(bad == 0, "%s ties: %d wrong, first below 0x%04x", bf ? "bf16" : "fp16", bad, first);
}

/* Random float bit patterns against the reference rounding. */
static void test_random_floats(int bf)
{
    uint64_t s = 12345;
    int bad = 0;
    uint32_t first = 0;
    int (*nan)(uint16_t) = bf ? b_nan : h_nan;
    for (int i = 0; i < 1000000; i++) {
        float f = bitsf((uint32_t)rng_next(&s));
        uint16_t got = narrow16(bf, f), want = bf ? ref_f2b(f) : ref_f2h(f);
        int ok = isnan(f) ? nan(got) && (got & 0x8000) == (want & 0x8000) : got == want;
        if (!ok && bad++ == 0)
            first = fbits(f);
    }
    check(bad == 0, "%s from random floats: %d wrong, first 0x%08x", bf ? "bf16" : "fp16",
          bad, first);
}

/* Named edge cases: ties, overflow, subnormals, NaN. */
static void test_named(void)
{
    static const struct { uint32_t f; uint16_t h, b; } cases[] = {
        { 0x3f801000, 0x3c00, 0x3f80 },   /* 1 + 2^-11: half tie, rounds to 1 */
        { 0x3f803000, 0x3c02, 0x3f80 },   /* 1 + 3*2^-11: half tie, rounds up */
        { 0x3f808000, 0x3c04, 0x3f80 },   /* 1 + 2^-8: bf16 tie, rounds to 1 */
        { 0x3f818000, 0x3c0c, 0x3f82 },   /* 1 + 3*2^-8: bf16 tie, rounds up */
        { 0x477fe000, 0x7bff, 0x4780 },   /* 65504: the largest half */
        { 0x477fefff, 0x7bff, 0x4780 },   /* just below 65520 */
        { 0x477ff000, 0x7c00, 0x4780 },   /* 65520: tie, overflows to inf */
        { 0x4e6e6b28, 0x7c00, 0x4e6e },   /* 1e9 */
        { 0x7f7fffff, 0x7c00, 0x7f80 },   /* FLT_MAX: bf16 overflows to inf too */
        { 0xff7fffff, 0xfc00, 0xff80 },
        { 0x7f800000, 0x7c00, 0x7f80 },   /* inf */
        { 0xff800000, 0xfc00, 0xff80 },
        { 0x33800000, 0x0001, 0x3380 },   /* 2^-24: smallest half subnormal */
        { 0x33000000, 0x0000, 0x3300 },   /* 2^-25: tie, to even (zero) */
        { 0x33000001, 0x0001, 0x3300 },   /* just above: up */
        { 0x33c00000, 0x0002, 0x33c0 },   /* 3*2^-25: tie, to even (2) */
        { 0x387fe000, 0x0400, 0x3880 },   /* 2^-14 - 2^-25: tie between 0x3ff and 0x400 */
        { 0x80000001, 0x8000, 0x8000 },   /* float subnormal: -0 for both */
        { 0x00008000, 0x0000, 0x0000 },   /* bf16 subnormal tie: to even (zero) */
        { 0x00018000, 0x0000, 0x0002 },   /* bf16 subnormal tie: to even (2) */
        { 0x007fffff, 0x0000, 0x0080 },   /* largest float subnormal: bf16 smallest normal */
        { 0x00000000, 0x0000, 0x0000 },
        { 0x80000000, 0x8000, 0x8000 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float f = bitsf(cases[i].f);
        uint16_t h = kern_float_to_half(f), b = kern_float_to_bf16(f);
        check(h == cases[i].h && b == cases[i].b && h == ref_f2h(f) && b == ref_f2b(f),
              "named 0x%08x: half 0x%04x (want 0x%04x), bf16 0x%04x (want 0x%04x)",
              cases[i].f, h, cases[i].h, b, cases[i].b);
    }
    static const uint32_t nans[] = { 0x7f800001, 0xff800001, 0x7fc00000, 0x7fffffff, 0xffa00000 };
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        float f = bitsf(nans[i]);
        uint16_t h = kern_float_to_half(f), b = kern_float_to_bf16(f);
        int sign = (nans[i] >> 31) != 0;
        check(h_nan(h) && (h & 0x200) && b_nan(b) && (b & 0x40) &&
              ((h >> 15) == sign) && ((b >> 15) == sign),
              "NaN 0x%08x -> half 0x%04x, bf16 0x%04x: want quiet NaNs", nans[i], h, b);
    }
}

/* Every 16-bit pattern against a set of partners in SUM and AVG(3), through the kernels
 * (and so the SIMD conversions) at every level. */
static void test_sweep(int bf)
{
    enum { NP = 48, N = 65536 };
    weft_dtype_t dt = bf ? WEFT_BFLOAT16 : WEFT_FLOAT16;
    uint16_t *a = malloc(N * 2), *b = malloc(N * 2), *d = malloc(N * 2), *ref = malloc(N * 2);
    uint16_t partners[NP] = { 0x0000, 0x8000, 0x0001, 0x8001 };
    uint64_t s = 777;
    for (int j = 4; j < NP; j++)
        partners[j] = bf ? fill16(rng_next(&s), 1) : fill16(rng_next(&s), 0);
    partners[4] = bf ? 0x3f80 : 0x3c00;      /* 1: ties against every value near 1 */
    partners[5] = bf ? 0x7f7f : 0x7bff;      /* max: overflow */
    partners[6] = bf ? 0x7f80 : 0x7c00;      /* inf: inf - inf = NaN */
    partners[7] = bf ? 0xff80 : 0xfc00;
    partners[8] = bf ? 0x7fc1 : 0x7e01;      /* NaN */
    for (unsigned i = 0; i < N; i++)
        a[i] = (uint16_t)i;

    for (int j = 0; j < NP; j++) {
        for (unsigned i = 0; i < N; i++)
            b[i] = partners[j];
        for (int div = 0; div <= 3; div += 3) {
            weft_op_t op = div ? WEFT_AVG : WEFT_SUM;
            for (unsigned i = 0; i < N; i++)
                ref_elem(dt, op, div, &a[i], &b[i], &ref[i]);
            for (int isa = 0; isa <= (int)kern_isa_best(); isa++) {
                kern_reduce_isa(d, a, b, N, dt, op, div, (kern_isa_t)isa);
                int bad = 0;
                unsigned first = 0;
                for (unsigned i = 0; i < N; i++)
                    if (!same_elem(dt, &d[i], &ref[i]) && bad++ == 0)
                        first = i;
                check(bad == 0, "%s sweep %s with 0x%04x isa=%s: %d wrong, first a=0x%04x "
                      "got 0x%04x want 0x%04x", DT[dt], OP[op], partners[j],
                      kern_isa_name((kern_isa_t)isa), bad, first, d[first], ref[first]);
            }
        }
    }
    free(a), free(b), free(d), free(ref);
}

/* ---- throughput ----------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Ordinary values (no NaN, inf or subnormal, which some CPUs handle slowly). */
static void bench_fill(weft_dtype_t dt, char *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float f = 1.0f + (float)(i % 1000) / 1024.0f;
        double v = f;
        uint16_t h = dt == WEFT_BFLOAT16 ? kern_float_to_bf16(f) : kern_float_to_half(f);
        uint64_t k = i % 100;
        const void *src = dt == WEFT_FLOAT32 ? (const void *)&f : dt == WEFT_FLOAT64 ?
                          (const void *)&v : dt == WEFT_FLOAT16 || dt == WEFT_BFLOAT16 ?
                          (const void *)&h : (const void *)&k;
        memcpy(buf + i * DSIZE[dt], src, DSIZE[dt]);
    }
}

/* Bytes of one buffer reduced per second, dst = a + b (or a += b when in place): the
 * best of 7 trials of at least 50 ms each, since the machine may be shared. */
static double bench_one(weft_dtype_t dt, size_t bytes, kern_isa_t isa, int inplace)
{
    size_t n = bytes / DSIZE[dt];
    char *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes), *d = aligned_alloc(64, bytes);
    bench_fill(dt, a, n);
    bench_fill(dt, b, n);
    memcpy(d, a, bytes);
    char *dst = inplace ? a : d;
    kern_reduce_isa(dst, a, b, n, dt, WEFT_SUM, 0, isa);     /* warm up, fault pages in */
    double best = 0;
    for (int trial = 0; trial < 7; trial++) {
        double t0 = now_s(), t;
        long iters = 0;
        do {
            kern_reduce_isa(dst, a, b, n, dt, WEFT_SUM, 0, isa);
            iters++;
            t = now_s() - t0;
        } while (t < 0.05);
        best = fmax(best, (double)bytes * (double)iters / t / 1e9);
    }
    free(a), free(b), free(d);
    return best;
}

static int bench(void)
{
    static const weft_dtype_t dts[] = { WEFT_FLOAT32, WEFT_BFLOAT16, WEFT_FLOAT16,
                                        WEFT_FLOAT64, WEFT_INT32 };
    static const size_t sizes[] = { 256u << 10, 4u << 20, 64u << 20 };
    printf("# SUM kernel throughput; GB/s = bytes of one buffer reduced per second\n");
    printf("# (memory traffic is 3x: read a, read b, write dst)\n");
    printf("# %-6s %6s %-7s %14s %14s\n", "dtype", "KiB", "isa", "out-of-place", "in-place");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
            for (int isa = 0; isa <= (int)kern_isa_best(); isa++)
                printf("  %-6s %6zu %-7s %14.1f %14.1f\n", DT[dts[i]], sizes[k] >> 10,
                       kern_isa_name((kern_isa_t)isa),
                       bench_one(dts[i], sizes[k], (kern_isa_t)isa, 0),
                       bench_one(dts[i], sizes[k], (kern_isa_t)isa, 1));
    return 0;
}

/* kern_premul (NCCL's PreMulSum): every element times one scalar, which is the reference's
 * PROD with the scalar as the second input; random scalars and named ones, out of place and
 * in place, guards intact. */
static void test_premul(void)
{
    static const size_t lens[] = { 0, 1, 7, 33, 1023 };
    uint64_t seed = 0x5ca1ab1e;
    for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++) {
        size_t es = DSIZE[dt], maxn = 1023;
        char *x = malloc(maxn * es), *ref = malloc(maxn * es), *k = malloc(es);
        char *buf = malloc(maxn * es + 2 * GUARD);
        for (int sc = 0; sc < 6; sc++) {
            if (sc == 0) {              /* 1: the result is the input */
                uint64_t one = 1;
                if (dt == WEFT_FLOAT32) { float f = 1.f; memcpy(k, &f, 4); }
                else if (dt == WEFT_FLOAT64) { double d = 1.0; memcpy(k, &d, 8); }
                else if (dt == WEFT_FLOAT16) { uint16_t h = 0x3c00; memcpy(k, &h, 2); }
                else if (dt == WEFT_BFLOAT16) { uint16_t h = 0x3f80; memcpy(k, &h, 2); }
                else memcpy(k, &one, es);
            } else {
                fill((weft_dtype_t)dt, k, 1, &seed);
            }
            for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
                size_t n = lens[li];
                fill((weft_dtype_t)dt, x, n, &seed);
                for (size_t i = 0; i < n; i++)
                    ref_elem((weft_dtype_t)dt, WEFT_PROD, 0, x + i * es, k, ref + i * es);
                for (int inplace = 0; inplace <= 1; inplace++) {
                    char *out = buf + GUARD;
                    memset(buf, CANARY, n * es + 2 * GUARD);
                    if (inplace)
                        memcpy(out, x, n * es);
                    kern_premul(out, inplace ? out : x, n, (weft_dtype_t)dt, k);
                    size_t at = n;
                    for (size_t i = 0; i < n && at == n; i++)
                        if (!same_elem((weft_dtype_t)dt, out + i * es, ref + i * es))
                            at = i;
                    check(at == n && guards_intact(out, n * es), "premul %s n=%zu scalar %d "
                          "%s: %s at %zu", DT[dt], n, sc, inplace ? "in place" : "out of place",
                          at < n ? "wrong value" : "guard overwritten", at);
                }
            }
        }
        free(x), free(ref), free(k), free(buf);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--bench") == 0)
        return bench();
    fprintf(stderr, "test_kernels: best isa %s\n", kern_isa_name(kern_isa_best()));
    test_named();
    for (int bf = 0; bf <= 1; bf++) {
        test_all_patterns(bf);
        test_ties(bf);
        test_random_floats(bf);
        test_sweep(bf);
    }
    test_matrix();
    test_copy_nt();
    test_premul();
    printf("test_kernels: %d passed, %d failed\n", T.passed, T.failed);
    return T.failed ? 1 : 0;
}
