/*
 * activation.c - tanh-GELU and the fused softmax + cross-entropy of the output head.
 *
 * GELU is GPT-2's tanh approximation, 0.5 x (1 + tanh(s (x + 0.044715 x^3))), s =
 * sqrt(2/pi); tanh(u) is computed as sign(u) (1 - e) / (1 + e), e = exp(-2|u|), with
 * kern_expf_raw, so the loop vectorises (libm's tanhf does not), to a few ulp.
 *
 * Cross-entropy keeps one log-sum-exp per row from forward; backward turns logits into
 * dlogits in place as (exp(logit - lse) - onehot) * dloss, so the (N,V) probabilities are
 * never stored separately.
 */
#include "nn.h"

#include <math.h>

#define GELU_S 0.7978845608028654f   /* sqrt(2/pi) */

/* |u| <= 43.6 here (x is clamped to [-10, 10]), so -2|u| stays inside expf_raw's range */
static inline float tanh_fast(float u)
{
    float e = kern_expf_raw(-2.0f * fabsf(u));
    return copysignf((1.0f - e) / (1.0f + e), u);
}

/* x clamped to [-10, 10] inside the cubic: beyond it tanh is +-1 in fp32 anyway, and the
 * clamp keeps x^3 finite so huge inputs give 0 or x (and gradient 0 or 1), never NaN. */
static inline float gelu_clamp(float x)
{
    x = x < -10.0f ? -10.0f : x;
    return x > 10.0f ? 10.0f : x;
}

KERN_CLONES
void kern_gelu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], xc = gelu_clamp(x);
        float u = GELU_S * (xc + 0.044715f * xc * xc * xc);
        out[i] = 0.5f * x * (1.0f + tanh_fast(u));
    }
}

KERN_CLONES
void kern_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = gelu_clamp(inp[i]);
        float u = GELU_S * (x + 0.044715f * x * x * x);
        float th = tanh_fast(u);
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th)
                + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = g * dout[i];
    }
}

KERN_CLONES
void kern_crossentropy_forward(float *losses, float *lse, const float *logits,
                               const int *targets, int N, int V)
{
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * V;   // (V)
        float mx = -INFINITY;
        #pragma omp simd reduction(max:mx)
        for (int j = 0; j < V; j++)
            mx = l[j] > mx ? l[j] : mx;
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int j = 0; j < V; j++)
            sum += kern_expf(l[j] - mx);
        float s = mx + logf(sum);
        lse[i] = s;
        losses[i] = s - l[targets[i]];
    }
}

KERN_CLONES
void kern_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                const int *targets, float dloss, int N, int V)
{
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
        float s = lse[i];
        for (int j = 0; j < V; j++)
            d[j] = kern_expf(l[j] - s) * dloss;
        d[targets[i]] -= dloss;
    }
}
