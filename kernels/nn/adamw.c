/*
 * adamw.c - the optimizer step and the helpers of gradient-norm clipping.
 *
 * kern_adamw follows torch.optim.AdamW (PyTorch 1.13, the single-tensor path) operation
 * for operation, so a trajectory matches PyTorch's to rounding: decoupled decay first,
 * then the moments, then p -= step_size * m / (sqrt(v) / sqrt(bc2) + eps).
 */
#include "nn.h"

#include <math.h>

KERN_CLONES
void kern_adamw(float *params, float *m, float *v, const float *grads, size_t n,
                float lr, float beta1, float beta2, float eps, float wd, int t)
{
    // the scalars in double, as Python computes them, then rounded once
    double bc1 = 1.0 - pow(beta1, t);
    double bc2 = 1.0 - pow(beta2, t);
    float step_size = (float)(lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float decay = (float)(1.0 - (double)lr * wd);
    for (size_t i = 0; i < n; i++) {
        float g = grads[i];
        float p = params[i] * decay;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        params[i] = p - step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
    }
}

KERN_CLONES
double kern_sumsq(const float *x, size_t n)
{
    // fp32 partial sums over blocks (vectorised), summed in double
    double total = 0.0;
    for (size_t i = 0; i < n; i += 4096) {
        size_t e = i + 4096 < n ? i + 4096 : n;
        float s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (size_t j = i; j < e; j++)
            s += x[j] * x[j];
        total += s;
    }
    return total;
}

KERN_CLONES
void kern_scale(float *x, float s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}
