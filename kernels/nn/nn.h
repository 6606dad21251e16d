/*
 * nn.h - the model kernels of weft-train: forward and backward of every GPT-2 op on the CPU.
 *
 * Shapes follow llm.c: N = B*T rows, C channels, OC output channels, NH heads, V vocabulary.
 * Every function is `outputs, inputs, dims`. Matmuls go through OpenBLAS cblas_sgemm; the
 * rest are plain loops that gcc vectorises, cloned per instruction set (KERN_CLONES).
 *
 * Gradient contract: parameter gradients (dweight, dbias, dwte, dwpe) are always
 * accumulated (+=), so micro-batches accumulate without extra copies. Activation
 * gradients are overwritten (=) unless the comment says "accumulates" (layernorm's dinp,
 * which is the residual stream's gradient).
 *
 * Nothing here allocates, logs or fails; callers validate sizes.
 */
#ifndef WEFT_KERN_NN_H
#define WEFT_KERN_NN_H

#include <stddef.h>
#include <stdint.h>

/* Runtime dispatch: one clone per instruction-set level, picked by the loader (ifunc).
 * Not under ThreadSanitizer: the loader runs the resolvers before its runtime is up. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define KERN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KERN_CLONES
#endif

/* exp(x) in plain arithmetic that vectorises (no libm call), max rel. error ~2e-7, for
 * x <= 88 (callers pass x - max <= 0). Inputs below -87.3 are clamped, so exp(-inf)
 * gives ~1e-38, not 0. kern_expf_raw skips the clamp: x must lie in [-87.3, 88]. */
static inline float kern_expf_raw(float x)
{
    const float shift = 12582912.0f;                      /* 1.5 * 2^23: round to int */
    float t = x * 1.44269504088896341f + shift;
    float n = t - shift;
    float r = x - n * 0.693359375f - n * -2.12194440e-4f; /* x - n*ln2, split */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { float f; int32_t i; } s = { .f = t };
    union { float f; int32_t i; } sc = { .i = (s.i - 0x4B400000 + 127) << 23 };
    return p * sc.f;
}

static inline float kern_expf(float x)
{
    return kern_expf_raw(x < -87.3f ? -87.3f : x);
}

/* encoder: out = wte[inp] + wpe[t] */
void kern_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
                          int B, int T, int C);
void kern_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                           int B, int T, int C);

/* layernorm over the last dim, eps 1e-5; mean/rstd (N) are saved for backward.
 * Backward accumulates into dinp. */
void kern_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int N, int C);
void kern_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean,
                             const float *rstd, int N, int C);

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL (and then
 * dbias must be NULL too). Backward overwrites dinp (N,C). */
void kern_matmul_forward(float *out, const float *inp, const float *weight,
                         const float *bias, int N, int C, int OC);
void kern_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, int N, int C, int OC);

/* causal self-attention. qkv (B,T,3C) holds q,k,v per row, each (NH, C/NH);
 * att (B,NH,T,T) keeps the softmax probabilities (zero above the diagonal).
 * Backward writes all of dqkv; scratch is (T,T). */
void kern_attention_forward(float *out, float *att, const float *qkv,
                            int B, int T, int C, int NH);
void kern_attention_backward(float *dqkv, float *scratch, const float *dout,
                             const float *qkv, const float *att, int B, int T, int C, int NH);

/* tanh-approximation GELU; dinp may alias dout. */
void kern_gelu_forward(float *out, const float *inp, size_t n);
void kern_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* out = a + b */
void kern_residual_forward(float *out, const float *a, const float *b, size_t n);

/* cross-entropy of softmax(logits (N,V)) against targets (N). lse (N) saves each row's
 * log-sum-exp for backward. Backward: dlogits = (softmax - onehot) * dloss; dlogits may
 * alias logits. */
void kern_crossentropy_forward(float *losses, float *lse, const float *logits,
                               const int *targets, int N, int V);
void kern_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                const int *targets, float dloss, int N, int V);

/* AdamW as torch.optim.AdamW does it, for step t >= 1 (bias correction):
 *   p *= 1 - lr*wd;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
 *   p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps) */
void kern_adamw(float *params, float *m, float *v, const float *grads, size_t n,
                float lr, float beta1, float beta2, float eps, float wd, int t);

/* sum of squares in double; x *= s */
double kern_sumsq(const float *x, size_t n);
void kern_scale(float *x, float s, size_t n);

/* bf16 (round to nearest even) from fp32, and whether this CPU has AVX512-BF16. */
void kern_to_bf16(uint16_t *out, const float *inp, size_t n);
int kern_have_bf16(void);

/* The bf16 GEMM (bf16.c), only where kern_have_bf16() is 1. Row-major:
 *   C (M,N) = op(A) (M,K) . op(B) (K,N) + beta*C + bias (N, may be NULL)
 * op(X) is X, or X^T when transX. Operands are rounded to bf16 (nearest even), products
 * summed in fp32. beta = 0 never reads C. work: KERN_GEMM_BF16_WORK uint16s, any alignment. */
#define KERN_GEMM_BF16_WORK (96 * 256 + 256 * 512)
void kern_gemm_bf16(float *C, int ldc, const float *A, int lda, int transA,
                    const float *B, int ldb, int transB, const float *bias, float beta,
                    int M, int N, int K, uint16_t *work);
/* kern_matmul_forward/backward with bf16 products (same shapes and contract). */
void kern_matmul_forward_bf16(float *out, const float *inp, const float *weight,
                              const float *bias, int N, int C, int OC, uint16_t *work);
void kern_matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, int N, int C, int OC,
                               uint16_t *work);

#endif
