/*
 * matmul.c - the linear layer through OpenBLAS: out = inp @ weight^T + bias.
 *
 * Row-major throughout, weight stored (OC, C) as in llm.c and PyTorch. The three products
 * are each one sgemm with the transposes folded into the call, so nothing is copied:
 *   forward  out  (N,OC)  = inp (N,C)   . weight^T
 *   backward dinp (N,C)   = dout (N,OC) . weight       (overwrites)
 *            dW   (OC,C) += dout^T      . inp          (accumulates, beta = 1)
 * The bias is added in a separate vectorised pass; its gradient is a column sum.
 */
#include "nn.h"

#include <cblas.h>

KERN_CLONES
static void add_bias(float *out, const float *bias, int N, int OC)
{
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * OC;
        for (int j = 0; j < OC; j++)
            o[j] += bias[j];
    }
}

KERN_CLONES
static void bias_backward(float *dbias, const float *dout, int N, int OC)
{
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * OC;
        for (int j = 0; j < OC; j++)
            dbias[j] += d[j];
    }
}

void kern_matmul_forward(float *out, const float *inp, const float *weight,
                         const float *bias, int N, int C, int OC)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C,
                1.0f, inp, C, weight, C, 0.0f, out, OC);
    if (bias)
        add_bias(out, bias, N, OC);
}

void kern_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, int N, int C, int OC)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC,
                1.0f, dout, OC, weight, C, 0.0f, dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N,
                1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias)
        bias_backward(dbias, dout, N, OC);
}
