/*
 * attention.c - causal multi-head self-attention, forward and backward.
 *
 * For each (batch b, head h) the head's q, k, v are strided views into qkv (B,T,3C): row t
 * of q is qkv[b,t,h*hs : (h+1)*hs], k is C further along, v 2C further; the row stride is
 * 3C. So every product is one sgemm on those views, with no gather or transpose copies:
 *   S   (T,T)  = q . k^T * 1/sqrt(hs)          P = softmax(S) over j <= t, zero above
 *   out (T,hs) = P . v          (written into out (B,T,C) at column h*hs, stride C)
 * Backward, with dP and dS sharing one (T,T) scratch:
 *   dP = dout . v^T;   dv = P^T . dout;   dS = P * (dP - rowsum(P * dP)) / sqrt(hs)
 *   dq = dS . k;       dk = dS^T . q
 * The full (T,T) products waste the masked half, as PyTorch's eager attention does too;
 * the masked entries are exactly zero in P so they contribute nothing.
 */
#include "nn.h"

#include <cblas.h>
#include <math.h>

/* P[t, 0..t] = softmax(S[t, 0..t]); P[t, t+1..T) = 0. In place on S (T,T). */
KERN_CLONES
static void causal_softmax(float *S, int T)
{
    for (int t = 0; t < T; t++) {
        float *row = S + (size_t)t * T;
        float mx = -INFINITY;
        #pragma omp simd reduction(max:mx)
        for (int j = 0; j <= t; j++)
            mx = row[j] > mx ? row[j] : mx;
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int j = 0; j <= t; j++) {
            row[j] = kern_expf(row[j] - mx);
            sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j <= t; j++)
            row[j] *= inv;
        for (int j = t + 1; j < T; j++)
            row[j] = 0.0f;
    }
}

/* dS = P * (dP - rowsum(P * dP)) * scale, in place on dP (T,T); causal rows only. */
KERN_CLONES
static void softmax_backward(float *dP, const float *P, float scale, int T)
{
    for (int t = 0; t < T; t++) {
        float *d = dP + (size_t)t * T;
        const float *p = P + (size_t)t * T;
        float dot = 0.0f;
        #pragma omp simd reduction(+:dot)
        for (int j = 0; j <= t; j++)
            dot += p[j] * d[j];
        for (int j = 0; j <= t; j++)
            d[j] = p[j] * (d[j] - dot) * scale;
        for (int j = t + 1; j < T; j++)
            d[j] = 0.0f;
    }
}

void kern_attention_forward(float *out, float *att, const float *qkv,
                            int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs;  // (T,hs) stride 3C
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *P = att + ((size_t)b * NH + h) * T * T;       // (T,T)
            float *o = out + (size_t)b * T * C + h * hs;         // (T,hs) stride C
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs,
                        scale, q, C3, k, C3, 0.0f, P, T);
            causal_softmax(P, T);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T,
                        1.0f, P, T, v, C3, 0.0f, o, C);
        }
}

void kern_attention_backward(float *dqkv, float *scratch, const float *dout,
                             const float *qkv, const float *att, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs;
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *dq = dqkv + (size_t)b * T * C3 + h * hs;
            float *dk = dq + C;
            float *dv = dq + 2 * C;
            const float *P = att + ((size_t)b * NH + h) * T * T;
            const float *dO = dout + (size_t)b * T * C + h * hs;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs,
                        1.0f, dO, C, v, C3, 0.0f, scratch, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T,
                        1.0f, P, T, dO, C, 0.0f, dv, C3);
            softmax_backward(scratch, P, scale, T);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T,
                        1.0f, scratch, T, k, C3, 0.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T,
                        1.0f, scratch, T, q, C3, 0.0f, dk, C3);
        }
}
