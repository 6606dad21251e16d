/*
 * bf16.c - bf16 rounding, the CPU feature check, and weft's own bf16 GEMM.
 *
 * Rounding is round-to-nearest-even; NaNs stay NaN (quieted). Debian's OpenBLAS 0.3.21
 * is built without BUILD_BFLOAT16 (no cblas_sbgemm), so the bf16 matmul is our own:
 * operands are rounded to bf16 while they are packed, and products are summed in fp32
 * by AVX512-BF16 vdpbf16ps (fp32 += a0*b0 + a1*b1 over a pair of consecutive k).
 *
 * Blocking, as in BLIS: for each NC-column block of C and each KC-deep slice of k, the
 * slice of op(B) is packed into 32-column panels; for each MC-row block, op(A) into
 * 8-row panels; an 8x32 micro-kernel (16 zmm accumulators) then walks the panels.
 * Panel layouts, in uint16 (a bf16 pair of k = 2p, 2p+1 is one 32-bit lane):
 *   B panel: for each pair p, 32 columns x (k even, k odd)       -> 64 uint16 per p
 *   A panel: for each pair p, 8 rows x (k even, k odd)           -> 16 uint16 per p
 * Rows, columns and k beyond the matrix are packed as zeros, so any M, N, K works; only
 * the store is masked. The AVX512-BF16 code is compiled with a target attribute and
 * must only be called when kern_have_bf16() says so.
 */
#include "nn.h"

#include <string.h>

static inline uint16_t bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    int nan = (u & 0x7fffffffu) > 0x7f800000u;
    return (uint16_t)(nan ? ((u >> 16) | 0x40u) : r);
}

KERN_CLONES
void kern_to_bf16(uint16_t *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = bf16_round(inp[i]);
}

int kern_have_bf16(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") ? 1 : 0;
#else
    return 0;
#endif
}

/* column sums of dout (N, OC) into dbias (accumulates) */
KERN_CLONES
static void bias_backward(float *dbias, const float *dout, int N, int OC)
{
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * OC;
        for (int j = 0; j < OC; j++)
            dbias[j] += d[j];
    }
}

void kern_matmul_forward_bf16(float *out, const float *inp, const float *weight,
                              const float *bias, int N, int C, int OC, uint16_t *work)
{
    kern_gemm_bf16(out, OC, inp, C, 0, weight, C, 1, bias, 0.0f, N, OC, C, work);
}

void kern_matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, int N, int C, int OC,
                               uint16_t *work)
{
    kern_gemm_bf16(dinp, C, dout, OC, 0, weight, C, 0, NULL, 0.0f, N, C, OC, work);
    kern_gemm_bf16(dweight, C, dout, OC, 1, inp, C, 0, NULL, 1.0f, OC, C, N, work);
    if (dbias)
        bias_backward(dbias, dout, N, OC);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)

#include <immintrin.h>

#define BF16_TARGET __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl")))

enum { MR = 8, NR = 32, MC = 96, KC = 256, NC = 512 };
_Static_assert(KERN_GEMM_BF16_WORK == MC * KC + KC * NC, "nn.h workspace size");
_Static_assert(MC % MR == 0 && NC % NR == 0 && KC % 2 == 0, "blocking");

static inline uint32_t bf16_pair(float lo, float hi)
{
    return (uint32_t)bf16_round(lo) | (uint32_t)bf16_round(hi) << 16;
}

/* op(X)[r][k] = X[r*rs + k*ks]. Packs rows [0, rows) (padded to a multiple of W with
 * zeros) and k in [0, kc) (padded to even) into W-wide panels of pairs. */
BF16_TARGET
static void pack_panels(uint32_t *dst, const float *X, size_t rs, size_t ks, int rows,
                        int kc, int W)
{
    int kp = (kc + 1) / 2;
    for (int r0 = 0; r0 < rows; r0 += W) {
        uint32_t *panel = dst + (size_t)(r0 / W) * kp * W;
        int w = rows - r0 < W ? rows - r0 : W;
        if (ks == 1) {   // k contiguous: walk each row along k
            for (int r = 0; r < w; r++) {
                const float *x = X + (size_t)(r0 + r) * rs;
                for (int p = 0; p < kc / 2; p++)
                    panel[(size_t)p * W + r] = bf16_pair(x[2 * p], x[2 * p + 1]);
                if (kc & 1)
                    panel[(size_t)(kp - 1) * W + r] = bf16_pair(x[kc - 1], 0.0f);
            }
        } else {         // rows contiguous: walk two k-rows at once
            for (int p = 0; p < kp; p++) {
                const float *x0 = X + (size_t)(2 * p) * ks + (size_t)r0 * rs;
                const float *x1 = x0 + ks;
                uint32_t *d = panel + (size_t)p * W;
                if (2 * p + 1 < kc)
                    for (int r = 0; r < w; r++)
                        d[r] = bf16_pair(x0[(size_t)r * rs], x1[(size_t)r * rs]);
                else
                    for (int r = 0; r < w; r++)
                        d[r] = bf16_pair(x0[(size_t)r * rs], 0.0f);
            }
        }
        if (w < W)
            for (int p = 0; p < kp; p++)
                memset(panel + (size_t)p * W + w, 0, (size_t)(W - w) * 4);
    }
}

/* C (mr <= 8, nr <= 32) = first ? beta*C + bias + a.b : C + a.b, over kp pairs */
BF16_TARGET
static void micro_8x32(float *C, size_t ldc, const uint32_t *a, const uint32_t *b, int kp,
                       int mr, int nr, int first, float beta, const float *bias)
{
    __m512 acc[MR][2];
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int p = 0; p < kp; p++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + (size_t)p * NR);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + (size_t)p * NR + 16);
        for (int i = 0; i < MR; i++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[(size_t)p * MR + i]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
        }
    }
    __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
    __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
    if (first && bias) {
        bias0 = _mm512_maskz_loadu_ps(m0, bias);
        bias1 = _mm512_maskz_loadu_ps(m1, bias + 16);
    }
    __m512 vbeta = _mm512_set1_ps(first ? beta : 1.0f);
    int load = !first || beta != 0.0f;   // beta = 0 must not read C (may be garbage)
    for (int i = 0; i < mr; i++) {
        float *c = C + (size_t)i * ldc;
        __m512 c0 = _mm512_add_ps(acc[i][0], bias0), c1 = _mm512_add_ps(acc[i][1], bias1);
        if (load) {
            c0 = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(m0, c), c0);
            c1 = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(m1, c + 16), c1);
        }
        _mm512_mask_storeu_ps(c, m0, c0);
        _mm512_mask_storeu_ps(c + 16, m1, c1);
    }
}

BF16_TARGET
void kern_gemm_bf16(float *C, int ldc, const float *A, int lda, int transA,
                    const float *B, int ldb, int transB, const float *bias, float beta,
                    int M, int N, int K, uint16_t *work)
{
    uint32_t *apack = (uint32_t *)work;                   // MC*KC uint16
    uint32_t *bpack = (uint32_t *)(work + MC * KC);       // KC*NC uint16
    size_t a_rs = transA ? 1 : (size_t)lda, a_ks = transA ? (size_t)lda : 1;
    size_t b_rs = transB ? (size_t)ldb : 1, b_ks = transB ? 1 : (size_t)ldb;   // by column
    for (int jc = 0; jc < N; jc += NC) {
        int nc = N - jc < NC ? N - jc : NC;
        for (int pc = 0; pc == 0 || pc < K; pc += KC) {
            int kc = K - pc < KC ? K - pc : KC, kp = (kc + 1) / 2;
            pack_panels(bpack, B + (size_t)jc * b_rs + (size_t)pc * b_ks, b_rs, b_ks, nc,
                        kc, NR);
            for (int ic = 0; ic < M; ic += MC) {
                int mc = M - ic < MC ? M - ic : MC;
                pack_panels(apack, A + (size_t)ic * a_rs + (size_t)pc * a_ks, a_rs, a_ks,
                            mc, kc, MR);
                for (int jr = 0; jr < nc; jr += NR) {
                    const uint32_t *bp = bpack + (size_t)(jr / NR) * kp * NR;
                    const float *bi = bias ? bias + jc + jr : NULL;
                    for (int ir = 0; ir < mc; ir += MR)
                        micro_8x32(C + (size_t)(ic + ir) * ldc + jc + jr, (size_t)ldc,
                                   apack + (size_t)(ir / MR) * kp * MR, bp, kp,
                                   mc - ir < MR ? mc - ir : MR, nc - jr < NR ? nc - jr : NR,
                                   pc == 0, beta, bi);
                }
            }
        }
    }
}

#else   /* no AVX512-BF16: kern_have_bf16() is 0; a plain loop keeps the contract */

static float bf16_value(float x)
{
    uint32_t u = (uint32_t)bf16_round(x) << 16;
    memcpy(&x, &u, 4);
    return x;
}

void kern_gemm_bf16(float *C, int ldc, const float *A, int lda, int transA,
                    const float *B, int ldb, int transB, const float *bias, float beta,
                    int M, int N, int K, uint16_t *work)
{
    (void)work;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++)
                s += bf16_value(transA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                     bf16_value(transB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            float *c = &C[(size_t)i * ldc + j];
            *c = (beta != 0.0f ? beta * *c : 0.0f) + (bias ? bias[j] : 0.0f) + s;
        }
}

#endif
