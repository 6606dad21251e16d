/*
 * test_nn.c - every model kernel of kernels/nn: forward against a double-precision
 * reference written here (sharing no code with kernels/nn), backward against central
 * differences of that reference, AdamW against torch's formula, and weft's own bf16 GEMM.
 *
 * Usage: test_nn      ends "test_nn: N passed, N failed"
 *
 * The numeric gradient uses h = 1e-5 on the double reference, so it is exact to ~1e-9.
 * Errors are scale-aware: max |a - b| over a tensor divided by max |b| over it (see
 * test_train's ref_compare for why); the bar is 1e-4 for fp32.
 *
 * Invariants: exits non-zero when anything failed.
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"
#include "train_check.h"

/* ---- the finite-difference harness: x holds every input, L(x) = sum(out(x) * w) ---- */

typedef double (*loss_fn_t)(const double *x, const void *dims);

static void fd_grad(double *g, loss_fn_t f, double *x, int n, const void *dims)
{
    for (int i = 0; i < n; i++) {
        double x0 = x[i], h = 1e-5;
        x[i] = x0 + h;
        double lp = f(x, dims);
        x[i] = x0 - h;
        double lm = f(x, dims);
        x[i] = x0;
        g[i] = (lp - lm) / (2 * h);
    }
}

static void to_float(float *y, const double *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] = (float)x[i];
}

#define MAXW 4096
static double W[MAXW];   /* the output weights w of L = sum(out * w) */

/* checks the float gradient ga (n) against the FD gradient of f at x */
static void grad_check(const char *name, const float *ga, loss_fn_t f, double *x, int n,
                       const void *dims)
{
    double *g = malloc(n * sizeof(double));
    fd_grad(g, f, x, n, dims);
    double e = scaled_err(ga, g, n);
    check(e < 1e-4, "%s backward: scaled error %.3g", name, e);
    free(g);
}

/* layernorm: x = inp (N,C) | weight (C) | bias (C) */
typedef struct { int N, C; } ln_dims_t;
static void ref_layernorm(double *out, const double *x, const ln_dims_t *d)
{
    const double *w = x + d->N * d->C, *b = w + d->C;
    for (int i = 0; i < d->N; i++) {
        const double *r = x + i * d->C;
        double m = 0, v = 0;
        for (int c = 0; c < d->C; c++)
            m += r[c] / d->C;
        for (int c = 0; c < d->C; c++)
            v += (r[c] - m) * (r[c] - m) / d->C;
        for (int c = 0; c < d->C; c++)
            out[i * d->C + c] = (r[c] - m) / sqrt(v + 1e-5) * w[c] + b[c];
    }
}
static double loss_layernorm(const double *x, const void *dims)
{
    const ln_dims_t *d = dims;
    double out[MAXW], s = 0;
    ref_layernorm(out, x, d);
    for (int i = 0; i < d->N * d->C; i++)
        s += out[i] * W[i];
    return s;
}
static void test_layernorm(void)
{
    ln_dims_t d = { 3, 8 };
    int N = d.N, C = d.C, n = N * C + 2 * C;
    double x[MAXW], ref[MAXW];
    float xf[MAXW], out[MAXW], mean[8], rstd[8], wf[MAXW], g[MAXW] = { 0 };
    for (int i = 0; i < n; i++)
        x[i] = urand() * 2 + (i < N * C ? 0.5 : 0);
    for (int i = 0; i < N * C; i++)
        W[i] = urand();
    to_float(xf, x, n);
    to_float(wf, W, N * C);
    kern_layernorm_forward(out, mean, rstd, xf, xf + N * C, xf + N * C + C, N, C);
    ref_layernorm(ref, x, &d);
    check(scaled_err(out, ref, N * C) < 1e-5, "layernorm forward");
    kern_layernorm_backward(g, g + N * C, g + N * C + C, wf, xf, xf + N * C, mean, rstd, N, C);
    grad_check("layernorm", g, loss_layernorm, x, n, &d);
}

/* matmul: x = inp (N,C) | weight (OC,C) | bias (OC) */
typedef struct { int N, C, OC; } mm_dims_t;
static double loss_matmul(const double *x, const void *dims)
{
    const mm_dims_t *d = dims;
    const double *w = x + d->N * d->C, *b = w + d->OC * d->C;
    double s = 0;
    for (int i = 0; i < d->N; i++)
        for (int o = 0; o < d->OC; o++) {
            double acc = b[o];
            for (int c = 0; c < d->C; c++)
                acc += x[i * d->C + c] * w[o * d->C + c];
            s += acc * W[i * d->OC + o];
        }
    return s;
}
static void test_matmul(void)
{
    mm_dims_t d = { 5, 7, 6 };
    int N = d.N, C = d.C, OC = d.OC, n = N * C + OC * C + OC;
    double x[MAXW], ref[MAXW];
    float xf[MAXW], out[MAXW], wf[MAXW], g[MAXW] = { 0 };
    for (int i = 0; i < n; i++)
        x[i] = urand();
    for (int i = 0; i < N * OC; i++)
        W[i] = urand();
    to_float(xf, x, n);
    to_float(wf, W, N * OC);
    kern_matmul_forward(out, xf, xf + N * C, xf + N * C + OC * C, N, C, OC);
    for (int i = 0; i < N * OC; i++) {   // forward through the loss with one-hot weights
        double save[MAXW];
        memcpy(save, W, sizeof(save));
        memset(W, 0, sizeof(W));
        W[i] = 1;
        ref[i] = loss_matmul(x, &d);
        memcpy(W, save, sizeof(save));
    }
    check(scaled_err(out, ref, N * OC) < 1e-5, "matmul forward");
    kern_matmul_backward(g, g + N * C, g + N * C + OC * C, wf, xf, xf + N * C, N, C, OC);
    grad_check("matmul", g, loss_matmul, x, n, &d);
}

/* attention: x = qkv (B,T,3C) */
typedef struct { int B, T, C, NH; } att_dims_t;
static void ref_attention(double *out, const double *qkv, const att_dims_t *d)
{
    int B = d->B, T = d->T, C = d->C, NH = d->NH, hs = C / NH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + (b * T + t) * 3 * C + h * hs;
                double p[64], mx = -1e300, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + (b * T + j) * 3 * C + C + h * hs;
                    p[j] = 0;
                    for (int i = 0; i < hs; i++)
                        p[j] += q[i] * k[i] / sqrt(hs);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= t; j++)
                    sum += (p[j] = exp(p[j] - mx));
                for (int i = 0; i < hs; i++) {
                    double acc = 0;
                    for (int j = 0; j <= t; j++)
                        acc += p[j] / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + i];
                    out[(b * T + t) * C + h * hs + i] = acc;
                }
            }
}
static double loss_attention(const double *x, const void *dims)
{
    const att_dims_t *d = dims;
    double out[MAXW], s = 0;
    ref_attention(out, x, d);
    for (int i = 0; i < d->B * d->T * d->C; i++)
        s += out[i] * W[i];
    return s;
}
static void test_attention(void)
{
    att_dims_t d = { 2, 5, 8, 2 };
    int B = d.B, T = d.T, C = d.C, NH = d.NH, n = B * T * 3 * C, no = B * T * C;
    double x[MAXW], ref[MAXW];
    float xf[MAXW], out[MAXW], att[MAXW], wf[MAXW], g[MAXW], scratch[64];
    for (int i = 0; i < n; i++)
        x[i] = urand() * 1.5;
    for (int i = 0; i < no; i++)
        W[i] = urand();
    to_float(xf, x, n);
    to_float(wf, W, no);
    kern_attention_forward(out, att, xf, B, T, C, NH);
    ref_attention(ref, x, &d);
    check(scaled_err(out, ref, no) < 1e-5, "attention forward");
    kern_attention_backward(g, scratch, wf, xf, att, B, T, C, NH);
    grad_check("attention", g, loss_attention, x, n, &d);
}

/* gelu: x = inp (n) */
typedef struct { int n; } n_dims_t;
static double ref_gelu(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double loss_gelu(const double *x, const void *dims)
{
    double s = 0;
    for (int i = 0; i < ((const n_dims_t *)dims)->n; i++)
        s += ref_gelu(x[i]) * W[i];
    return s;
}
static void test_gelu(void)
{
    n_dims_t d = { 64 };
    double x[MAXW], ref[MAXW];
    float xf[MAXW], out[MAXW], wf[MAXW], g[MAXW];
    for (int i = 0; i < d.n; i++) {
        x[i] = (i - 32) * 0.19 + urand() * 0.05;   // covers -6..6 and the kink near 0
        W[i] = urand();
        ref[i] = ref_gelu(x[i]);
    }
    to_float(xf, x, d.n);
    to_float(wf, W, d.n);
    kern_gelu_forward(out, xf, d.n);
    check(scaled_err(out, ref, d.n) < 1e-6, "gelu forward");
    kern_gelu_backward(g, xf, wf, d.n);
    grad_check("gelu", g, loss_gelu, x, d.n, &d);
    float big[4] = { -100.0f, 100.0f, -1e30f, 1e30f }, gb[4], ones[4] = { 1, 1, 1, 1 };
    kern_gelu_forward(out, big, 4);
    kern_gelu_backward(gb, big, ones, 4);
    check(out[0] == 0.0f && out[1] == 100.0f && isfinite(gb[2]) && gb[3] == 1.0f,
          "gelu saturates without NaN/inf");
}

/* cross-entropy: x = logits (N,V); targets fixed; L = sum(losses * w) */
typedef struct { int N, V; const int *tgt; } ce_dims_t;
static double loss_ce(const double *x, const void *dims)
{
    const ce_dims_t *d = dims;
    double s = 0;
    for (int i = 0; i < d->N; i++) {
        const double *l = x + i * d->V;
        double mx = -1e300, sum = 0;
        for (int j = 0; j < d->V; j++)
            mx = fmax(mx, l[j]);
        for (int j = 0; j < d->V; j++)
            sum += exp(l[j] - mx);
        s += (mx + log(sum) - l[d->tgt[i]]) * W[0];
    }
    return s;
}
static void test_crossentropy(void)
{
    int tgt[4] = { 3, 0, 6, 2 };
    ce_dims_t d = { 4, 7, tgt };
    int n = d.N * d.V;
    double x[MAXW];
    float xf[MAXW], losses[4], lse[4], g[MAXW];
    for (int i = 0; i < n; i++)
        x[i] = urand() * 4;
    W[0] = 0.37;
    to_float(xf, x, n);
    kern_crossentropy_forward(losses, lse, xf, tgt, d.N, d.V);
    double total = 0;
    for (int i = 0; i < d.N; i++)
        total += losses[i] * W[0];
    check(fabs(total - loss_ce(x, &d)) < 1e-5 * fabs(total), "crossentropy forward");
    kern_crossentropy_backward(g, xf, lse, tgt, (float)W[0], d.N, d.V);
    grad_check("crossentropy", g, loss_ce, x, n, &d);
}

static void test_encoder_adamw(void)
{
    int B = 2, T = 3, C = 4, V = 5, inp[6] = { 4, 0, 2, 2, 2, 1 };
    float wte[20], wpe[12], out[24], dwte[20] = { 0 }, dwpe[12] = { 0 }, dout[24];
    for (int i = 0; i < 20; i++)
        wte[i] = (float)urand();
    for (int i = 0; i < 12; i++)
        wpe[i] = (float)urand();
    for (int i = 0; i < 24; i++)
        dout[i] = (float)urand();
    kern_encoder_forward(out, inp, wte, wpe, B, T, C);
    int ok = 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                ok &= out[(b * T + t) * C + c] == wte[inp[b * T + t] * C + c] + wpe[t * C + c];
    check(ok, "encoder forward");
    kern_encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    double ew = 0, ep = 0;
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int i = 0; i < B * T; i++)
                s += inp[i] == v ? dout[i * C + c] : 0;
            ew = fmax(ew, fabs(s - dwte[v * C + c]));
        }
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            ep = fmax(ep, fabs(dout[t * C + c] + dout[(T + t) * C + c] - dwpe[t * C + c]));
    check(ew < 1e-6 && ep < 1e-6, "encoder backward (%g %g)", ew, ep);

    // AdamW against torch's formula in double, three steps
    enum { n = 37 };
    float p[n], m[n] = { 0 }, v[n] = { 0 }, g[n];
    double pd[n], md[n] = { 0 }, vd[n] = { 0 };
    double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    for (int i = 0; i < n; i++)
        pd[i] = p[i] = (float)urand();
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < n; i++)
            g[i] = (float)(urand() * (i % 5 == 0 ? 1e-6 : 1.0));
        kern_adamw(p, m, v, g, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, t);
        for (int i = 0; i < n; i++) {
            pd[i] *= 1 - lr * wd;
            md[i] = b1 * md[i] + (1 - b1) * g[i];
            vd[i] = b2 * vd[i] + (1 - b2) * (double)g[i] * g[i];
            double mh = md[i] / (1 - pow(b1, t)), vh = vd[i] / (1 - pow(b2, t));
            pd[i] -= lr * mh / (sqrt(vh) + eps);
        }
    }
    check(scaled_err(p, pd, n) < 1e-6, "adamw vs torch formula (%g)", scaled_err(p, pd, n));
    float x[5] = { 1, -2, 3, -4, 0.5f };
    check(fabs(kern_sumsq(x, 5) - 30.25) < 1e-9, "sumsq");
}

/* weft's AVX512-BF16 GEMM against fp64 (bar: bf16 input rounding) and against fp64 of the
 * bf16-rounded inputs (bar: fp32 accumulation), every transpose, beta and bias; the padding
 * columns of C are never written. */
static void test_bf16_gemm(void)
{
    if (!kern_have_bf16()) {
        printf("test_nn: no AVX512-BF16 on this CPU; bf16 GEMM not checked\n");
        return;
    }
    static uint16_t work[KERN_GEMM_BF16_WORK];
    const int shapes[][3] = { { 1, 1, 1 }, { 7, 33, 5 }, { 37, 45, 67 }, { 9, 17, 2 },
                              { 131, 529, 301 }, { 97, 31, 513 } };
    for (int si = 0; si < (int)(sizeof(shapes) / sizeof(shapes[0])); si++) {
        int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        for (int v = 0; v < 4; v++) {
            int ta = v & 1, tb = v >> 1;
            float beta = (float[]){ 0.0f, 1.0f, 0.5f, 0.0f }[(si + v) % 4];
            int use_bias = (si + v) % 2;
            int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
            size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb;
            size_t nc = (size_t)M * ldc;
            float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4);
            float *c0 = malloc(nc * 4), *bias = malloc((size_t)N * 4);
            float *got = malloc((size_t)M * N * 4);
            double *ref = malloc((size_t)M * N * 8), *refr = malloc((size_t)M * N * 8);
            uint16_t h;
            for (size_t i = 0; i < na; i++)
                a[i] = (float)urand();
            for (size_t i = 0; i < nb; i++)
                b[i] = (float)urand() * 3.0f;
            for (int j = 0; j < N; j++)
                bias[j] = (float)urand();
            for (size_t i = 0; i < nc; i++)
                c0[i] = beta == 0.0f ? NAN : (float)urand();   // beta = 0 must not read C
            memcpy(c, c0, nc * 4);
            kern_gemm_bf16(c, ldc, a, lda, ta, b, ldb, tb, use_bias ? bias : NULL, beta,
                           M, N, K, work);
            double scale = 0.0;   // max over C of the sum of |terms|: fp32 rounding bound
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double s = 0.0, sr = 0.0, mag = 0.0;
                    for (int k = 0; k < K; k++) {
                        float x = ta ? a[(size_t)k * lda + i] : a[(size_t)i * lda + k];
                        float y = tb ? b[(size_t)j * ldb + k] : b[(size_t)k * ldb + j];
                        s += (double)x * y;
                        float xr, yr;
                        uint32_t u;
                        kern_to_bf16(&h, &x, 1);
                        u = (uint32_t)h << 16;
                        memcpy(&xr, &u, 4);
                        kern_to_bf16(&h, &y, 1);
                        u = (uint32_t)h << 16;
                        memcpy(&yr, &u, 4);
                        sr += (double)xr * yr;
                        mag += fabs((double)xr * yr);
                    }
                    double extra = (use_bias ? bias[j] : 0.0) +
                                   (beta != 0.0f ? (double)beta * c0[(size_t)i * ldc + j] : 0.0);
                    ref[(size_t)i * N + j] = s + extra;
                    refr[(size_t)i * N + j] = sr + extra;
                    scale = fmax(scale, mag + fabs(extra));
                    got[(size_t)i * N + j] = c[(size_t)i * ldc + j];
                }
            int pad_ok = 1;   // the columns between N and ldc are never written
            for (int i = 0; i < M; i++)
                for (int j = N; j < ldc; j++)
                    pad_ok &= isnan(c0[(size_t)i * ldc + j]) ?
                              isnan(c[(size_t)i * ldc + j]) :
                              c[(size_t)i * ldc + j] == c0[(size_t)i * ldc + j];
            double err = scaled_err(got, ref, M * N), errr = 0.0;
            for (int i = 0; i < M * N; i++)
                errr = fmax(errr, fabs(got[i] - refr[i]) / scale);
            check(err < 1e-2 && errr < 2e-6 && pad_ok,
                  "bf16 gemm M=%d N=%d K=%d transA=%d transB=%d beta=%g bias=%d: error %.2e "
                  "(vs fp64), %.2e (vs fp64 of bf16 inputs), padding %s", M, N, K, ta, tb,
                  beta, use_bias, err, errr, pad_ok ? "kept" : "written");
            free(a), free(b), free(c), free(c0), free(bias), free(got), free(ref), free(refr);
        }
    }
}

int main(void)
{
    openblas_set_num_threads(1);   /* one thread, as weft-train runs: no BLAS threads racing */
    test_layernorm();
    test_matmul();
    test_attention();
    test_gelu();
    test_crossentropy();
    test_encoder_adamw();
    test_bf16_gemm();
    fflush(stderr);
    printf("test_nn: %d passed, %d failed\n", R.passed, R.failed);
    return R.failed ? 1 : 0;
}
