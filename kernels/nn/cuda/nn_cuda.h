/*
 * nn_cuda.h - the model kernels of weft-train on an NVIDIA GPU (nn_cuda.cu).
 *
 * The same functions as kernels/nn/nn.h, on device pointers, with the same shapes and the
 * same gradient contract (parameter gradients accumulate, activation gradients are
 * overwritten unless "accumulates" is said); the CPU kernels are the reference the GPU
 * test compares against. Activations and master weights are fp32; the matmuls are not
 * here (cuBLAS, in trainer/gpt2_cuda.c). Every launcher queues work on `stream` and
 * returns; launch errors surface at the caller's next cudaGetLastError/synchronize.
 * Callable from C.
 */
#ifndef WEFT_KERN_NN_CUDA_H
#define WEFT_KERN_NN_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

void kcu_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
                         int B, int T, int C, cudaStream_t s);
/* accumulates into dwte, dwpe, in a fixed order. tokens (device, 3*B*T + 1 ints) indexes
 * the batch's B*T inputs by token: order[B*T] (positions sorted by token, ascending
 * within one), starts[B*T + 1] (token u's positions are order[starts[u] .. starts[u+1])),
 * toks[B*T] (the ntok distinct tokens, ascending); trainer/gpt2_cuda.c builds it. */
void kcu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                          int ntok, int B, int T, int C, cudaStream_t s);
void kcu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C,
                           cudaStream_t s);
/* the same with out rounded to bf16 (kern_to_bf16's rounding): a product's operand */
void kcu_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp,
                                const float *weight, const float *bias, int N, int C,
                                cudaStream_t s);
/* dinp accumulates; dweight, dbias accumulate, summed in a fixed order through scratch
 * (device, scratch_floats >= 2C; up to 64C used) */
void kcu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C, float *scratch,
                            size_t scratch_floats, cudaStream_t s);
/* out (N, OC) += bias (OC) broadcast over rows */
void kcu_add_bias(float *out, const float *bias, int N, int OC, cudaStream_t s);
/* dbias (OC) += column sums of dout (N, OC), in a fixed order through scratch (device,
 * scratch_floats >= OC; up to 32 OC used) */
void kcu_bias_backward(float *dbias, const float *dout, int N, int OC, float *scratch,
                       size_t scratch_floats, cudaStream_t s);
void kcu_gelu_forward(float *out, const float *inp, size_t n, cudaStream_t s);
void kcu_gelu_forward_bf16(uint16_t *out, const float *inp, size_t n, cudaStream_t s);
/* dinp may alias dout */
void kcu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                       cudaStream_t s);
void kcu_residual_forward(float *out, const float *a, const float *b, size_t n,
                          cudaStream_t s);
/* qkv (B, T, 3C) -> q, k, v each (B, NH, T, hs) */
void kcu_qkv_split(float *q, float *k, float *v, const float *qkv, int B, int T, int C,
                   int NH, cudaStream_t s);
/* the inverse: dq, dk, dv (B, NH, T, hs) -> dqkv (B, T, 3C) */
void kcu_qkv_merge(float *dqkv, const float *dq, const float *dk, const float *dv, int B,
                   int T, int C, int NH, cudaStream_t s);
/* y (B, NH, T, hs) -> out (B, T, C) when to_btc, else the reverse */
void kcu_heads_permute(float *dst, const float *src, int B, int T, int C, int NH,
                       int to_btc, cudaStream_t s);
/* att (rows, T, T): causal softmax of preatt * scale in place (zero above the diagonal) */
void kcu_softmax_causal(float *att, float scale, int rows, int T, cudaStream_t s);
/* datt (rows, T, T) in place: att * (datt - rowsum(att * datt)) * scale, causal */
void kcu_softmax_causal_backward(float *datt, const float *att, float scale, int rows,
                                 int T, cudaStream_t s);
/* Causal self-attention without the (T, T) matrices (attn_cuda.cu; --dtype bf16: bf16
 * products, fp32 softmax and sums), for heads of C / NH = 16, 32, 64 or 128 channels
 * (kcu_attention_fits). Forward: out (B, T, C) and lse (B, NH, T), the log of each row's
 * softmax denominator, from qkv (B, T, 3C). Backward: dqkv (B, T, 3C) overwritten from
 * dout (B, T, C) and the forward's qkv, out, lse; dsum (B, NH, T) is scratch. The
 * backward's sums have a fixed order (no atomics). */
int kcu_attention_fits(int C, int NH);
void kcu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                           int NH, cudaStream_t s);
void kcu_attention_backward(float *dqkv, float *dsum, const float *dout, const float *qkv,
                            const float *out, const float *lse, int B, int T, int C, int NH,
                            cudaStream_t s);
/* losses (N), lse (N) from the first V columns of logits (N rows of ld >= V floats) */
void kcu_crossentropy_forward(float *losses, float *lse, const float *logits,
                              const int *targets, int N, int V, int ld, cudaStream_t s);
/* dlogits = (softmax - onehot) * dloss in the first V columns, 0 in [V, ld); dlogits may
 * alias logits */
void kcu_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                               const int *targets, float dloss, int N, int V, int ld,
                               cudaStream_t s);
/* kern_adamw's update (torch.optim.AdamW), element-wise */
void kcu_adamw(float *params, float *m, float *v, const float *grads, size_t n, float lr,
               float beta1, float beta2, float eps, float wd, int t, cudaStream_t s);
/* *out (one double, device) += sum of x^2, in a fixed order through scratch (device,
 * scratch_doubles >= 1; up to 8192 used) */
void kcu_sumsq(double *out, const float *x, size_t n, double *scratch,
               size_t scratch_doubles, cudaStream_t s);
/* x *= a */
void kcu_scale(float *x, float a, size_t n, cudaStream_t s);
/* out (one float, device) = sum of x (n floats) */
void kcu_sum(float *out, const float *x, int n, cudaStream_t s);
/* shard/'s conversions (kern_to_bf16's rounding: nearest even, NaN stays NaN) and its
 * sum of a reduced gradient shard into the step's: y += x, x fp32 or (bf16) bf16 */
void kcu_to_bf16(uint16_t *out, const float *x, size_t n, cudaStream_t s);
void kcu_from_bf16(float *out, const uint16_t *x, size_t n, cudaStream_t s);
void kcu_add(float *y, const void *x, size_t n, int bf16, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
