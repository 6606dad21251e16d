/*
 * reduce.c - elementwise reduction kernels: dst[i] = a[i] op b[i] for every dtype x op,
 * the inner loop of every reducing collective.
 *
 * Shape: one plain loop per (dtype, op), written once as a macro and instantiated three
 * times: for the baseline ISA and, on x86-64, inside target("avx2") and target("avx512")
 * functions, so gcc -O3 vectorizes each at that width. fp32/fp64/fp16/bf16 SUM, the
 * all-reduce hot path, have explicit intrinsic versions on top. fp16/bf16 ops other
 * than SUM go through fp32: blocks of KERN_BLOCK elements are widened into stack
 * buffers, reduced by the fp32 loop of the same level, and rounded back. A constant
 * table per level holds the function pointers; kern_isa_best() picks the level from
 * the CPU once (the only static variable here: a fact about the machine).
 *
 * Invariants:
 *   - dst may equal a or b exactly; every loop reads element i of both inputs before
 *     writing element i and never reads an element it has written, so that is safe
 *     without restrict (gcc's runtime alias check accepts a distance of zero).
 *   - Every level gives bit-identical results except for NaN payloads: the fp16/bf16
 *     scalar conversions round exactly like the F16C instructions and the bf16 vector
 *     code, and quiet NaNs the same way. The default MXCSR (no FTZ/DAZ) is assumed.
 *   - Integer SUM/PROD wrap modulo 2^bits (computed in the unsigned type, so signed
 *     overflow is two's-complement wrap, not UB). Integer AVG divides that wrapped sum
 *     by avg_div with C's truncation toward zero; 8- and 32-bit quotients are computed
 *     in float/double, which is exact for those widths.
 *   - Floating MIN/MAX propagate NaN (either input NaN gives NaN); on equal inputs
 *     (+0 vs -0) the result is b.
 *   - fp16/bf16 AVG and divide compute (a + b) / div in fp32 and round once.
 *   - Nothing here allocates, logs or fails: bad dtype/op values are ignored (callers
 *     validate), and a divisor below 2 means no division (AVG is a SUM, divide a copy).
 */
#include <string.h>

#include "reduce.h"
#include "util.h"

/* -DWEFT_KERN_PORTABLE builds only the portable level (what non-x86 CPUs get). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(WEFT_KERN_PORTABLE)
#define KERN_X86 1
#include <cpuid.h>
#include <immintrin.h>
#define ATTR_AVX2   __attribute__((target("avx2,f16c")))
#define ATTR_AVX512 __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512vl")))
#else
#define KERN_X86 0
#endif

#define KERN_BLOCK 256      /* fp16/bf16 elements widened per step: 2 x 1 KiB of floats */

typedef void (*kern_bin_fn_t)(void *dst, const void *a, const void *b, size_t n, int div);
typedef void (*kern_div_fn_t)(void *dst, const void *src, size_t n, int div);
typedef void (*kern_widen_fn_t)(float *dst, const uint16_t *src, size_t n);
typedef void (*kern_narrow_fn_t)(uint16_t *dst, const float *src, size_t n);

/* One level's kernels. A NULL bin/div entry (fp16, bf16) means: go through fp32
 * blocks with this level's widen/narrow ([0] fp16, [1] bf16). */
typedef struct {
    kern_bin_fn_t bin[WEFT_NUM_DTYPES][WEFT_NUM_OPS];
    kern_div_fn_t div[WEFT_NUM_DTYPES];
    kern_widen_fn_t widen[2];
    kern_narrow_fn_t narrow[2];
} kern_isa_ops_t;

/* ---- scalar conversions ------------------------------------------------------------ */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Like VCVTPH2PS: exact, subnormals normalized, NaNs quieted keeping the payload.
 * Written as selects, not branches; the F16C levels convert in bulk with instructions,
 * so this is the bulk path only on CPUs without them. */
static inline float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, em = h & 0x7fffu;
    uint32_t normal = (em << 13) + (112u << 23);            /* rebias 15 -> 127 */
    /* subnormal: (1 + m/1024) * 2^-14 - 2^-14 = m * 2^-24, exact, no subnormal operand */
    uint32_t sub = f32_bits(bits_f32(0x38800000u | (em << 13)) - 0x1p-14f);
    uint32_t special = 0x7f800000u | (em << 13) | (em > 0x7c00 ? 0x00400000u : 0);
    uint32_t r = em < 0x400 ? sub : normal;
    return bits_f32(sign | (em >= 0x7c00 ? special : r));
}

/* Like VCVTPS2PH with round-to-nearest-even: NaN -> quiet NaN with the top payload bits,
 * overflow -> inf, subnormals rounded exactly. Selects, like half_to_float. */
static inline uint16_t float_to_half(float f)
{
    uint32_t u = f32_bits(f), a = u & 0x7fffffff;
    uint32_t sign = (u >> 16) & 0x8000;
    /* normal (a >= 2^-14): round at bit 13, rebias; a carry into the exponent is right */
    uint32_t normal = (a + 0xfff + ((a >> 13) & 1) - (112u << 23)) >> 13;
    /* subnormal: adding 0.5 leaves a quantum of 2^-24, so the FPU rounds to nearest even
     * and the low bits of the sum count units of 2^-24 (0x400 is the smallest normal) */
    uint32_t sub = f32_bits(bits_f32(a) + 0.5f) - 0x3f000000u;
    uint32_t nan = 0x7e00 | ((a >> 13) & 0x3ff);
    uint32_t r = a < 0x38800000u ? sub : normal;
    r = a >= 0x477ff000u ? 0x7c00 : r;                     /* >= 65520 (the tie): inf */
    r = a > 0x7f800000u ? nan : r;
    return (uint16_t)(sign | r);
}

static inline float bf16_to_float(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

static inline uint16_t float_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t r = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
    uint32_t q = (u >> 16) | 0x40;          /* NaN: quiet it, keep the sign and payload */
    return (uint16_t)((u & 0x7fffffff) > 0x7f800000 ? q : r);
}

float kern_half_to_float(uint16_t h) { return half_to_float(h); }
uint16_t kern_float_to_half(float f) { return float_to_half(f); }
float kern_bf16_to_float(uint16_t h) { return bf16_to_float(h); }
uint16_t kern_float_to_bf16(float f) { return float_to_bf16(f); }

/* ---- the plain loops, one per (dtype, op), instantiated per level -------------------- */

/* "unused": the explicit SIMD sums replace some instances in the tables. */
#define BIN_LOOP(NAME, T, EXPR, ATTR)                                                  \
    ATTR __attribute__((unused)) static void NAME(void *dv, const void *av,             \
                                                  const void *bv, size_t n, int div)   \
    {                                                                                  \
        T *d = dv;                                                                     \
        const T *a = av, *b = bv;                                                      \
        for (size_t i = 0; i < n; i++) {                                               \
            T x = a[i], y = b[i];                                                      \
            d[i] = (EXPR);                                                             \
        }                                                                              \
    }

#define DIV_LOOP(NAME, T, EXPR, ATTR)                                                  \
    ATTR static void NAME(void *dv, const void *sv, size_t n, int div)                 \
    {                                                                                  \
        T *d = dv;                                                                     \
        const T *s = sv;                                                               \
        for (size_t i = 0; i < n; i++) {                                               \
            T x = s[i];                                                                \
            d[i] = (EXPR);                                                             \
        }                                                                              \
    }

/* Integers: U is the unsigned type of the same width (wrapping arithmetic), Q the type
 * the quotient is computed in (exact for the width, see the invariants). */
#define INT_LOOPS(TN, T, U, Q, SFX, ATTR)                                               \
    BIN_LOOP(sum_##TN##SFX, T, (T)((U)x + (U)y), ATTR)                                 \
    BIN_LOOP(prod_##TN##SFX, T, (T)((U)x * (U)y), ATTR)                                \
    BIN_LOOP(min_##TN##SFX, T, x < y ? x : y, ATTR)                                    \
    BIN_LOOP(max_##TN##SFX, T, x > y ? x : y, ATTR)                                    \
    BIN_LOOP(avg_##TN##SFX, T, (T)((Q)(T)((U)x + (U)y) / (Q)div), ATTR)                \
    DIV_LOOP(div_##TN##SFX, T, (T)((Q)x / (Q)div), ATTR)

#define FLT_LOOPS(TN, T, SFX, ATTR)                                                     \
    BIN_LOOP(sum_##TN##SFX, T, x + y, ATTR)                                            \
    BIN_LOOP(prod_##TN##SFX, T, x * y, ATTR)                                           \
    BIN_LOOP(min_##TN##SFX, T, (x < y || x != x) ? x : y, ATTR)                        \
    BIN_LOOP(max_##TN##SFX, T, (x > y || x != x) ? x : y, ATTR)                        \
    BIN_LOOP(avg_##TN##SFX, T, (x + y) / (T)div, ATTR)                                 \
    DIV_LOOP(div_##TN##SFX, T, x / (T)div, ATTR)

/* bf16 widen/narrow are branch-free and vectorize as plain loops. */
#define BF16_CVT(SFX, ATTR)                                                             \
    ATTR static void widen_bf16##SFX(float *d, const uint16_t *s, size_t n)             \
    {                                                                                  \
        for (size_t i = 0; i < n; i++)                                                 \
            d[i] = bf16_to_float(s[i]);                                                \
    }                                                                                  \
    ATTR static void narrow_bf16##SFX(uint16_t *d, const float *s, size_t n)            \
    {                                                                                  \
        for (size_t i = 0; i < n; i++)                                                 \
            d[i] = float_to_bf16(s[i]);                                                \
    }

#define ALL_LOOPS(SFX, ATTR)                                                            \
    INT_LOOPS(i8, int8_t, uint8_t, float, SFX, ATTR)                                    \
    INT_LOOPS(u8, uint8_t, uint8_t, float, SFX, ATTR)                                   \
    INT_LOOPS(i32, int32_t, uint32_t, double, SFX, ATTR)                                \
    INT_LOOPS(u32, uint32_t, uint32_t, double, SFX, ATTR)                               \
    INT_LOOPS(i64, int64_t, uint64_t, int64_t, SFX, ATTR)                               \
    INT_LOOPS(u64, uint64_t, uint64_t, uint64_t, SFX, ATTR)                             \
    FLT_LOOPS(f32, float, SFX, ATTR)                                                   \
    FLT_LOOPS(f64, double, SFX, ATTR)                                                  \
    BF16_CVT(SFX, ATTR)

#define OPS_ROW(TN, SFX) OPS_ROW_S(TN, SFX, sum_##TN##SFX)
#define OPS_ROW_S(TN, SFX, SUM) { [WEFT_SUM] = SUM, [WEFT_PROD] = prod_##TN##SFX,           \
                           [WEFT_MIN] = min_##TN##SFX, [WEFT_MAX] = max_##TN##SFX,       \
                           [WEFT_AVG] = avg_##TN##SFX }

/* A level's table; fp16 rows start empty (blocks) and SUM_F16/SUM_BF16 may be fused. */
#define ISA_OPS(SFX, SUM_F32, SUM_F64, SUM_F16, SUM_BF16, WIDEN_F16, NARROW_F16) {          \
    .bin = {                                                                           \
        [WEFT_INT8] = OPS_ROW(i8, SFX), [WEFT_UINT8] = OPS_ROW(u8, SFX),               \
        [WEFT_INT32] = OPS_ROW(i32, SFX), [WEFT_UINT32] = OPS_ROW(u32, SFX),           \
        [WEFT_INT64] = OPS_ROW(i64, SFX), [WEFT_UINT64] = OPS_ROW(u64, SFX),           \
        [WEFT_FLOAT32] = OPS_ROW_S(f32, SFX, SUM_F32),                                  \
        [WEFT_FLOAT64] = OPS_ROW_S(f64, SFX, SUM_F64),                                  \
        [WEFT_FLOAT16] = { [WEFT_SUM] = SUM_F16 },                                     \
        [WEFT_BFLOAT16] = { [WEFT_SUM] = SUM_BF16 },                                   \
    },                                                                                 \
    .div = {                                                                           \
        [WEFT_INT8] = div_i8##SFX, [WEFT_UINT8] = div_u8##SFX,                          \
        [WEFT_INT32] = div_i32##SFX, [WEFT_UINT32] = div_u32##SFX,                      \
        [WEFT_INT64] = div_i64##SFX, [WEFT_UINT64] = div_u64##SFX,                      \
        [WEFT_FLOAT32] = div_f32##SFX, [WEFT_FLOAT64] = div_f64##SFX,                   \
    },                                                                                 \
    .widen = { WIDEN_F16, widen_bf16##SFX },                                           \
    .narrow = { NARROW_F16, narrow_bf16##SFX },                                        \
}

ALL_LOOPS(_sc, )

static void widen_f16_sc(float *d, const uint16_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = half_to_float(s[i]);
}

static void narrow_f16_sc(uint16_t *d, const float *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = float_to_half(s[i]);
}

#if KERN_X86
ALL_LOOPS(_v2, ATTR_AVX2)
ALL_LOOPS(_v5, ATTR_AVX512)

/* ---- explicit SIMD: AVX2 + F16C ------------------------------------------------------ */

#define RNE_SAE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

ATTR_AVX2 static void sum_f32_x2(void *dv, const void *av, const void *bv, size_t n, int div)
{
    float *d = dv;
    const float *a = av, *b = bv;
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 32; k += 8)
            _mm256_storeu_ps(d + i + k, _mm256_add_ps(_mm256_loadu_ps(a + i + k),
                                                      _mm256_loadu_ps(b + i + k)));
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++)
        d[i] = a[i] + b[i];
}

ATTR_AVX2 static void sum_f64_x2(void *dv, const void *av, const void *bv, size_t n, int div)
{
    double *d = dv;
    const double *a = av, *b = bv;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k += 4)
            _mm256_storeu_pd(d + i + k, _mm256_add_pd(_mm256_loadu_pd(a + i + k),
                                                      _mm256_loadu_pd(b + i + k)));
    for (; i < n; i++)
        d[i] = a[i] + b[i];
}

ATTR_AVX2 static void widen_f16_x2(float *d, const uint16_t *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++)
        d[i] = half_to_float(s[i]);
}

ATTR_AVX2 static void narrow_f16_x2(uint16_t *d, const float *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), RNE_SAE));
    for (; i < n; i++)
        d[i] = float_to_half(s[i]);
}

ATTR_AVX2 static inline __m128i f16_add8_x2(const uint16_t *a, const uint16_t *b)
{
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)a));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b));
    return _mm256_cvtps_ph(_mm256_add_ps(x, y), RNE_SAE);
}

ATTR_AVX2 static void sum_f16_x2(void *dv, const void *av, const void *bv, size_t n, int div)
{
    uint16_t *d = dv;
    const uint16_t *a = av, *b = bv;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i r0 = f16_add8_x2(a + i, b + i), r1 = f16_add8_x2(a + i + 8, b + i + 8);
        _mm_storeu_si128((__m128i *)(d + i), r0);
        _mm_storeu_si128((__m128i *)(d + i + 8), r1);
    }
    for (; i < n; i++)
        d[i] = float_to_half(half_to_float(a[i]) + half_to_float(b[i]));
}

/* bf16 pairs in 32-bit lanes: the odd element, masked, and the even one, shifted up,
 * are floats; after rounding, the odd result's high half is already in place and the
 * even one's comes down by 16, so one 16-bit blend packs them (no lane crossing).
 * Rounding is float_to_bf16's u + 0x7fff + lsb without its NaN select: a NaN from
 * adding bf16 values (an input's payload, or the default NaN) has a zero low half on
 * x86, so the carry never reaches the high half and the NaN passes through. */
#define BF16_HI 0xffff0000u

ATTR_AVX2 static inline __m256i bf16_round_x2(__m256 s)
{
    __m256i u = _mm256_castps_si256(s);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
}

ATTR_AVX2 static inline __m256i bf16_add16_x2(__m256i x, __m256i y)
{
    const __m256i hi_mask = _mm256_set1_epi32((int)BF16_HI);
    __m256 odd = _mm256_add_ps(_mm256_castsi256_ps(_mm256_and_si256(x, hi_mask)),
                               _mm256_castsi256_ps(_mm256_and_si256(y, hi_mask)));
    __m256 even = _mm256_add_ps(_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)),
                                _mm256_castsi256_ps(_mm256_slli_epi32(y, 16)));
    return _mm256_blend_epi16(_mm256_srli_epi32(bf16_round_x2(even), 16),
                              bf16_round_x2(odd), 0xaa);
}

ATTR_AVX2 static void sum_bf16_x2(void *dv, const void *av, const void *bv, size_t n, int div)
{
    uint16_t *d = dv;
    const uint16_t *a = av, *b = bv;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(a + i));
        __m256i y = _mm256_loadu_si256((const __m256i *)(b + i));
        _mm256_storeu_si256((__m256i *)(d + i), bf16_add16_x2(x, y));
    }
    for (; i < n; i++)
        d[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

/* ---- explicit SIMD: AVX-512 (F, BW, VL); tails use masked loads and stores ---------- */

static inline __mmask16 tail16(size_t left) { return (__mmask16)((1u << left) - 1); }
static inline __mmask8 tail8(size_t left) { return (__mmask8)((1u << left) - 1); }
static inline __mmask32 tail32(size_t left) { return (__mmask32)((1ull << left) - 1); }

/* Elements before dst reaches a 64-byte boundary (at most n): the sums do those with a
 * mask first, so the full-width stores that follow never split a cache line. */
static inline size_t head_to_line(const void *dst, size_t esize, size_t n)
{
    size_t head = ((0 - (uintptr_t)dst) & 63) / esize;
    return head < n ? head : n;
}

ATTR_AVX512 static inline void f32_add16_x5(float *d, const float *a, const float *b,
                                            __mmask16 m)
{
    _mm512_mask_storeu_ps(d, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a),
                                              _mm512_maskz_loadu_ps(m, b)));
}

ATTR_AVX512 static void sum_f32_x5(void *dv, const void *av, const void *bv, size_t n, int div)
{
    float *d = dv;
    const float *a = av, *b = bv;
    size_t i = head_to_line(d, sizeof *d, n);
    if (i)
        f32_add16_x5(d, a, b, tail16(i));
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 64; k += 16)
            _mm512_storeu_ps(d + i + k, _mm512_add_ps(_mm512_loadu_ps(a + i + k),
                                                      _mm512_loadu_ps(b + i + k)));
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(d + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    if (i < n)
        f32_add16_x5(d + i, a + i, b + i, tail16(n - i));
}

ATTR_AVX512 static inline void f64_add8_x5(double *d, const double *a, const double *b,
                                           __mmask8 m)
{
    _mm512_mask_storeu_pd(d, m, _mm512_add_pd(_mm512_maskz_loadu_pd(m, a),
                                              _mm512_maskz_loadu_pd(m, b)));
}

ATTR_AVX512 static void sum_f64_x5(void *dv, const void *av, const void *bv, size_t n, int div)
{
    double *d = dv;
    const double *a = av, *b = bv;
    size_t i = head_to_line(d, sizeof *d, n);
    if (i)
        f64_add8_x5(d, a, b, tail8(i));
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 32; k += 8)
            _mm512_storeu_pd(d + i + k, _mm512_add_pd(_mm512_loadu_pd(a + i + k),
                                                      _mm512_loadu_pd(b + i + k)));
    for (; i + 8 <= n; i += 8)
        _mm512_storeu_pd(d + i, _mm512_add_pd(_mm512_loadu_pd(a + i), _mm512_loadu_pd(b + i)));
    if (i < n)
        f64_add8_x5(d + i, a + i, b + i, tail8(n - i));
}

ATTR_AVX512 static void widen_f16_x5(float *d, const uint16_t *s, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : tail16(n - i);
        __m512 f = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s + i));
        _mm512_mask_storeu_ps(d + i, m, f);
    }
}

ATTR_AVX512 static void narrow_f16_x5(uint16_t *d, const float *s, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : tail16(n - i);
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, s + i), RNE_SAE);
        _mm256_mask_storeu_epi16(d + i, m, h);
    }
}

/* Up to 32 halves under mask m (two halves of 16: the high one may be all masked). */
ATTR_AVX512 static inline void f16_add32_x5(uint16_t *d, const uint16_t *a, const uint16_t *b,
                                            __mmask32 m)
{
    for (int k = 0; k < 2; k++, m >>= 16, a += 16, b += 16, d += 16) {
        __mmask16 mk = (__mmask16)m;
        __m512 x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, a));
        __m512 y = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, b));
        _mm256_mask_storeu_epi16(d, mk, _mm512_cvtps_ph(_mm512_add_ps(x, y), RNE_SAE));
    }
}

ATTR_AVX512 static void sum_f16_x5(void *dv, const void *av, const void *bv, size_t n, int div)
{
    uint16_t *d = dv;
    const uint16_t *a = av, *b = bv;
    size_t i = head_to_line(d, sizeof *d, n);
    if (i)
        f16_add32_x5(d, a, b, tail32(i));
    for (; i + 32 <= n; i += 32) {
        __m512 x0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i)));
        __m512 y0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i)));
        __m512 x1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i + 16)));
        __m512 y1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i + 16)));
        _mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtps_ph(_mm512_add_ps(x0, y0), RNE_SAE));
        _mm256_storeu_si256((__m256i *)(d + i + 16),
                            _mm512_cvtps_ph(_mm512_add_ps(x1, y1), RNE_SAE));
    }
    if (i < n)
        f16_add32_x5(d + i, a + i, b + i, tail32(n - i));
}

/* As bf16_add16_x2 (same layout trick, same NaN argument), 32 elements per vector. */
ATTR_AVX512 static inline __m512i bf16_round_x5(__m512 s)
{
    __m512i u = _mm512_castps_si512(s);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
}

ATTR_AVX512 static inline __m512i bf16_add32_x5(__m512i x, __m512i y)
{
    const __m512i hi_mask = _mm512_set1_epi32((int)BF16_HI);
    __m512 odd = _mm512_add_ps(_mm512_castsi512_ps(_mm512_and_si512(x, hi_mask)),
                               _mm512_castsi512_ps(_mm512_and_si512(y, hi_mask)));
    __m512 even = _mm512_add_ps(_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)),
                                _mm512_castsi512_ps(_mm512_slli_epi32(y, 16)));
    return _mm512_mask_blend_epi16(0xaaaaaaaau, _mm512_srli_epi32(bf16_round_x5(even), 16),
                                   bf16_round_x5(odd));
}

ATTR_AVX512 static inline void bf16_add32_masked_x5(uint16_t *d, const uint16_t *a,
                                                    const uint16_t *b, __mmask32 m)
{
    __m512i x = _mm512_maskz_loadu_epi16(m, a), y = _mm512_maskz_loadu_epi16(m, b);
    _mm512_mask_storeu_epi16(d, m, bf16_add32_x5(x, y));
}

ATTR_AVX512 static void sum_bf16_x5(void *dv, const void *av, const void *bv, size_t n, int div)
{
    uint16_t *d = dv;
    const uint16_t *a = av, *b = bv;
    size_t i = head_to_line(d, sizeof *d, n);
    if (i)
        bf16_add32_masked_x5(d, a, b, tail32(i));
    for (; i + 32 <= n; i += 32) {
        __m512i x = _mm512_loadu_si512((const void *)(a + i));
        __m512i y = _mm512_loadu_si512((const void *)(b + i));
        _mm512_storeu_si512((void *)(d + i), bf16_add32_x5(x, y));
    }
    if (i < n)
        bf16_add32_masked_x5(d + i, a + i, b + i, tail32(n - i));
}
#endif /* KERN_X86 */

/* ---- the tables and the entry points ------------------------------------------------- */

static const kern_isa_ops_t isa_ops[KERN_ISA_COUNT] = {
    [KERN_ISA_SCALAR] = ISA_OPS(_sc, sum_f32_sc, sum_f64_sc, NULL, NULL,
                                widen_f16_sc, narrow_f16_sc),
#if KERN_X86
    [KERN_ISA_AVX2] = ISA_OPS(_v2, sum_f32_x2, sum_f64_x2, sum_f16_x2, sum_bf16_x2,
                              widen_f16_x2, narrow_f16_x2),
    [KERN_ISA_AVX512] = ISA_OPS(_v5, sum_f32_x5, sum_f64_x5, sum_f16_x5, sum_bf16_x5,
                                widen_f16_x5, narrow_f16_x5),
#endif
};

#if KERN_X86
/* F16C from CPUID directly: not every compiler's __builtin_cpu_supports knows it. The
 * AVX state it needs is the one the avx2 check below already confirms the OS saves. */
static int cpu_has_f16c(void)
{
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
}
#endif

static kern_isa_t detect_isa(void)
{
#if KERN_X86
    __builtin_cpu_init();   /* idempotent; needed only if called before constructors */
    if (!__builtin_cpu_supports("avx2") || !cpu_has_f16c())
        return KERN_ISA_SCALAR;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return KERN_ISA_AVX512;
    return KERN_ISA_AVX2;
#else
    return KERN_ISA_SCALAR;
#endif
}

/* CPUID traps to the hypervisor in a VM (microseconds), so the answer is computed once
 * and kept: a fact about the machine, not state. Racing first callers compute and store
 * the same value, hence relaxed atomics suffice. */
kern_isa_t kern_isa_best(void)
{
    static int cached = -1;
    int isa = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (isa < 0) {
        isa = (int)detect_isa();
        __atomic_store_n(&cached, isa, __ATOMIC_RELAXED);
    }
    return (kern_isa_t)isa;
}

const char *kern_isa_name(kern_isa_t isa)
{
    static const char *names[KERN_ISA_COUNT] = { "scalar", "avx2", "avx512" };
    return (unsigned)isa < KERN_ISA_COUNT ? names[isa] : "unknown";
}

static const kern_isa_ops_t *isa_table(kern_isa_t isa)
{
    kern_isa_t best = kern_isa_best();
    if ((unsigned)isa > (unsigned)best)
        isa = best;
    return &isa_ops[isa];
}

/* fp16/bf16 through fp32, KERN_BLOCK elements at a time (bf selects the format). */
static void reduce16_blocks(const kern_isa_ops_t *t, int bf, uint16_t *d, const uint16_t *a,
                            const uint16_t *b, size_t n, weft_op_t op, int div)
{
    _Alignas(64) float fa[KERN_BLOCK];
    _Alignas(64) float fb[KERN_BLOCK];
    kern_bin_fn_t f = t->bin[WEFT_FLOAT32][op];

    for (size_t i = 0; i < n; i += KERN_BLOCK) {
        size_t m = WEFT_MIN((size_t)KERN_BLOCK, n - i);
        t->widen[bf](fa, a + i, m);
        t->widen[bf](fb, b + i, m);
        f(fa, fa, fb, m, div);
        t->narrow[bf](d + i, fa, m);
    }
}

static void divide16_blocks(const kern_isa_ops_t *t, int bf, uint16_t *d, const uint16_t *s,
                            size_t n, int div)
{
    _Alignas(64) float fs[KERN_BLOCK];

    for (size_t i = 0; i < n; i += KERN_BLOCK) {
        size_t m = WEFT_MIN((size_t)KERN_BLOCK, n - i);
        t->widen[bf](fs, s + i, m);
        t->div[WEFT_FLOAT32](fs, fs, m, div);
        t->narrow[bf](d + i, fs, m);
    }
}

void kern_reduce_isa(void *dst, const void *a, const void *b, size_t n, weft_dtype_t dtype,
                     weft_op_t op, int avg_div, kern_isa_t isa)
{
    if (n == 0 || !dtype_valid(dtype) || !op_valid(op))
        return;
    if (op == WEFT_AVG && avg_div <= 1)     /* 0: an intermediate step; 1: nothing to do */
        op = WEFT_SUM;
    const kern_isa_ops_t *t = isa_table(isa);
    kern_bin_fn_t f = t->bin[dtype][op];
    if (f)
        f(dst, a, b, n, avg_div);
    else
        reduce16_blocks(t, dtype == WEFT_BFLOAT16, dst, a, b, n, op, avg_div);
}

void kern_reduce(void *dst, const void *a, const void *b, size_t n, weft_dtype_t dtype,
                 weft_op_t op, int avg_div)
{
    kern_reduce_isa(dst, a, b, n, dtype, op, avg_div, kern_isa_best());
}

/* div <= 1 copies the elements bit for bit (NaN payloads included). */
void kern_divide_isa(void *dst, const void *src, size_t n, weft_dtype_t dtype, int div,
                     kern_isa_t isa)
{
    if (n == 0 || !dtype_valid(dtype))
        return;
    if (div <= 1) {
        if (dst != src)
            memmove(dst, src, n * weft_dtype_size(dtype));
        return;
    }
    const kern_isa_ops_t *t = isa_table(isa);
    if (t->div[dtype])
        t->div[dtype](dst, src, n, div);
    else
        divide16_blocks(t, dtype == WEFT_BFLOAT16, dst, src, n, div);
}

void kern_divide(void *dst, const void *src, size_t n, weft_dtype_t dtype, int div)
{
    kern_divide_isa(dst, src, n, dtype, div, kern_isa_best());
}

/* ---- scaling (NCCL's PreMulSum: each rank's input times its scalar, then a SUM) ------ */

#define SCALE_LOOP(T, U)                                                                \
    do {                                                                                \
        T *d = dst;                                                                     \
        const T *s = src;                                                               \
        T k;                                                                            \
        memcpy(&k, scalar, sizeof(k));                                                  \
        for (size_t i = 0; i < n; i++)                                                  \
            d[i] = (T)((U)s[i] * (U)k);                                                 \
    } while (0)

void kern_premul(void *dst, const void *src, size_t n, weft_dtype_t dtype, const void *scalar)
{
    if (n == 0 || !dtype_valid(dtype))
        return;
    switch (dtype) {
    case WEFT_INT8: SCALE_LOOP(int8_t, uint8_t); break;
    case WEFT_UINT8: SCALE_LOOP(uint8_t, uint8_t); break;
    case WEFT_INT32: SCALE_LOOP(int32_t, uint32_t); break;
    case WEFT_UINT32: SCALE_LOOP(uint32_t, uint32_t); break;
    case WEFT_INT64: SCALE_LOOP(int64_t, uint64_t); break;
    case WEFT_UINT64: SCALE_LOOP(uint64_t, uint64_t); break;
    case WEFT_FLOAT32: SCALE_LOOP(float, float); break;
    case WEFT_FLOAT64: SCALE_LOOP(double, double); break;
    case WEFT_FLOAT16:
    case WEFT_BFLOAT16: {
        int bf = dtype == WEFT_BFLOAT16;
        uint16_t *d = dst, kb;
        const uint16_t *s = src;
        memcpy(&kb, scalar, sizeof(kb));
        float k = bf ? bf16_to_float(kb) : half_to_float(kb);
        for (size_t i = 0; i < n; i++) {
            float x = (bf ? bf16_to_float(s[i]) : half_to_float(s[i])) * k;
            d[i] = bf ? float_to_bf16(x) : float_to_half(x);
        }
        break;
    }
    }
}

/* ---- streaming (non-temporal) stores ---------------------------------------------------
 *
 * A plain store to a line that is not cached first reads the line from memory (read for
 * ownership): writing b bytes of a buffer larger than the caches moves 2b. Streaming
 * stores write whole lines without reading them and leave nothing in the cache, which is
 * right when the buffer will not be read again before it would have been evicted anyway.
 * Each level's stream loop copies 64-byte lines to a 64-byte aligned destination; the
 * entry points do the unaligned head and tail with plain stores and end with a store
 * fence, so the data is ordered before any flag the caller stores next. */

typedef void (*kern_stream_fn_t)(void *dst, const void *src, size_t lines);

#if KERN_X86
static void stream_sc(void *dst, const void *src, size_t lines)
{
    __m128i *d = dst;
    const __m128i *s = src;
    for (size_t i = 0; i < lines * 4; i += 4) {
        __m128i x0 = _mm_loadu_si128(s + i), x1 = _mm_loadu_si128(s + i + 1);
        __m128i x2 = _mm_loadu_si128(s + i + 2), x3 = _mm_loadu_si128(s + i + 3);
        _mm_stream_si128(d + i, x0);
        _mm_stream_si128(d + i + 1, x1);
        _mm_stream_si128(d + i + 2, x2);
        _mm_stream_si128(d + i + 3, x3);
    }
}

ATTR_AVX2 static void stream_x2(void *dst, const void *src, size_t lines)
{
    __m256i *d = dst;
    const __m256i *s = src;
    for (size_t i = 0; i < lines * 2; i += 2) {
        __m256i x0 = _mm256_loadu_si256(s + i), x1 = _mm256_loadu_si256(s + i + 1);
        _mm256_stream_si256(d + i, x0);
        _mm256_stream_si256(d + i + 1, x1);
    }
}

ATTR_AVX512 static void stream_x5(void *dst, const void *src, size_t lines)
{
    char *d = dst;
    const char *s = src;
    size_t i = 0;
    for (; i + 4 <= lines; i += 4) {
        __m512i x0 = _mm512_loadu_si512(s + 64 * i), x1 = _mm512_loadu_si512(s + 64 * i + 64);
        __m512i x2 = _mm512_loadu_si512(s + 64 * i + 128);
        __m512i x3 = _mm512_loadu_si512(s + 64 * i + 192);
        _mm512_stream_si512((void *)(d + 64 * i), x0);
        _mm512_stream_si512((void *)(d + 64 * i + 64), x1);
        _mm512_stream_si512((void *)(d + 64 * i + 128), x2);
        _mm512_stream_si512((void *)(d + 64 * i + 192), x3);
    }
    for (; i < lines; i++)
        _mm512_stream_si512((void *)(d + 64 * i), _mm512_loadu_si512(s + 64 * i));
}

static kern_stream_fn_t stream_fn(kern_isa_t isa)
{
    static const kern_stream_fn_t fns[KERN_ISA_COUNT] = { stream_sc, stream_x2, stream_x5 };
    kern_isa_t best = kern_isa_best();
    return fns[(unsigned)isa > (unsigned)best ? best : isa];
}

static void stream_fence(void) { _mm_sfence(); }
#else
static void stream_plain(void *dst, const void *src, size_t lines)
{
    memcpy(dst, src, lines * 64);
}

static kern_stream_fn_t stream_fn(kern_isa_t isa)
{
    (void)isa;
    return stream_plain;
}

static void stream_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#endif

void kern_copy_nt_isa(void *dst, const void *src, size_t bytes, kern_isa_t isa)
{
    size_t head = (0 - (uintptr_t)dst) & 63;
    if (bytes < head + 64) {
        memcpy(dst, src, bytes);
        return;
    }
    char *d = dst;
    const char *s = src;
    memcpy(d, s, head);
    size_t lines = (bytes - head) / 64;
    stream_fn(isa)(d + head, s + head, lines);
    memcpy(d + head + lines * 64, s + head + lines * 64, bytes - head - lines * 64);
    stream_fence();
}

void kern_copy_nt(void *dst, const void *src, size_t bytes)
{
    kern_copy_nt_isa(dst, src, bytes, kern_isa_best());
}

/* Reduced KERN_NT_BLOCK bytes at a time into a block on the stack (it stays in L1), then
 * streamed out: one path for every dtype and op. */
#define KERN_NT_BLOCK 4096

void kern_reduce_nt_isa(void *dst, const void *a, const void *b, size_t n, weft_dtype_t dtype,
                        weft_op_t op, int avg_div, kern_isa_t isa)
{
    if (n == 0 || !dtype_valid(dtype) || !op_valid(op))
        return;
    size_t esz = weft_dtype_size(dtype), head = ((0 - (uintptr_t)dst) & 63) / esz;
    if ((uintptr_t)dst % esz || n * esz < head * esz + KERN_NT_BLOCK) {
        kern_reduce_isa(dst, a, b, n, dtype, op, avg_div, isa);
        return;
    }
    _Alignas(64) char blk[KERN_NT_BLOCK];
    const size_t per = KERN_NT_BLOCK / esz;
    kern_stream_fn_t stream = stream_fn(isa);
    char *d = dst;
    const char *x = a, *y = b;
    kern_reduce_isa(d, x, y, head, dtype, op, avg_div, isa);
    size_t i = head;
    for (; i + per <= n; i += per) {
        kern_reduce_isa(blk, x + i * esz, y + i * esz, per, dtype, op, avg_div, isa);
        stream(d + i * esz, blk, KERN_NT_BLOCK / 64);
    }
    kern_reduce_isa(d + i * esz, x + i * esz, y + i * esz, n - i, dtype, op, avg_div, isa);
    stream_fence();
}

void kern_reduce_nt(void *dst, const void *a, const void *b, size_t n, weft_dtype_t dtype,
                    weft_op_t op, int avg_div)
{
    kern_reduce_nt_isa(dst, a, b, n, dtype, op, avg_div, kern_isa_best());
}
