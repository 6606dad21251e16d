/*
 * test_train.c - the trainer: every model kernel, checkpoints, data, determinism, and
 * (with --ref) the whole model against a PyTorch reference state.
 *
 * Usage: test_train                      C-only checks; ends "test_train: N passed, N failed"
 *        test_train --ref STATE MODEL    compare with tests/train_ref.py's STATE for MODEL
 *        test_train --write-state STATE MODEL [B T nsteps]
 *                                        write a STATE from weft's own forward/backward
 *                                        (tests the reader; not a reference)
 *
 * Kernel checks: each kernel's forward against a double-precision reference written here
 * (sharing no code with kernels/nn), and its backward against central differences of that
 * double reference (h = 1e-5, so the numeric gradient is exact to ~1e-9). Errors are
 * scale-aware: max |a - b| over a tensor divided by max |b| over it (see ref_compare for
 * why); the bar is 1e-4 for fp32.
 *
 * Invariants: exits non-zero when anything failed; temporary files live under TMPDIR.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "data.h"
#include "model.h"
#include "nn.h"
#include "status.h"

static struct { int passed, failed; } R;
static FILE *rout;   /* where --ref tables go (stdout; /dev/null in the self-check) */

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int quiet;     /* set while a failure is provoked on purpose */
static void check(int ok, const char *fmt, ...)
{
    if (ok) {
        R.passed++;
        return;
    }
    R.failed++;
    if (quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* max |a - b| / max |b|: the error on the tensor's own scale */
static double scaled_err(const float *a, const double *b, int n)
{
    double num = 0.0, den = 1e-30;
    for (int i = 0; i < n; i++) {
        num = fmax(num, fabs(a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    return num / den;
}

static unsigned long long lcg_state = 42;
static double urand(void)   /* uniform [-1, 1) */
{
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

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

/* ---- model-level checks ---- */

static char tmpdir[256];

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", tmpdir, name);
    return buf[k];
}

static train_gpt2_t *tiny_model(int L, int C, int NH, int maxT, int V, uint64_t seed)
{
    train_gpt2_cfg_t cfg = { .max_seq_len = maxT, .vocab_size = V,
                             .padded_vocab_size = train_padded_vocab(V), .num_layers = L,
                             .num_heads = NH, .channels = C };
    train_gpt2_t *m = NULL;
    if (train_gpt2_create(&m, &cfg) != WEFT_OK)
        return NULL;
    train_gpt2_init(m, seed);
    return m;
}

static int write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    if (b && fread(b, 1, *n, f) != *n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static void expect_reject(const char *what, const unsigned char *bytes, size_t n)
{
    const char *p = tmp_path("bad.bin");
    write_bytes(p, bytes, n);
    train_gpt2_t *m = NULL;
    weft_error_clear();
    weft_status_t st = train_checkpoint_read(&m, p);
    check(st != WEFT_OK && m == NULL && weft_last_error()[0] != '\0',
          "corrupt checkpoint (%s) not rejected", what);
    if (st != WEFT_OK && getenv("TEST_TRAIN_VERBOSE"))
        printf("  %s -> %s\n", what, weft_last_error());
    train_gpt2_destroy(m);
}

static void test_checkpoint(void)
{
    train_gpt2_t *m = tiny_model(2, 16, 2, 8, 100, 7), *r = NULL;
    const char *p = tmp_path("ck.bin"), *p2 = tmp_path("ck2.bin");
    check(m && m->cfg.padded_vocab_size == 128, "Vp of 100 is 128");
    check(train_checkpoint_write(m, p) == WEFT_OK, "checkpoint write");
    check(train_checkpoint_read(&r, p) == WEFT_OK, "checkpoint read: %s", weft_last_error());
    if (!r)
        return;
    check(!memcmp(&r->cfg, &m->cfg, sizeof(m->cfg)) && r->num_params == m->num_params &&
          !memcmp(r->params_mem, m->params_mem, m->num_params * 4), "round trip bit-exact");
    int padded_zero = 1;
    for (size_t i = (size_t)100 * 16; i < (size_t)128 * 16; i++)
        padded_zero &= m->params.wte[i] == 0.0f;
    check(padded_zero, "padded wte rows are zero");
    train_checkpoint_write(r, p2);
    size_t n1, n2;
    unsigned char *b1 = read_bytes(p, &n1), *b2 = read_bytes(p2, &n2);
    check(b1 && b2 && n1 == n2 && n1 == 1024 + 4 * m->num_params && !memcmp(b1, b2, n1),
          "rewritten file identical");
    int32_t *h = (int32_t *)b1;
    check(h[0] == 20240326 && h[1] == 3 && h[2] == 8 && h[3] == 100 && h[4] == 2 &&
          h[5] == 2 && h[6] == 16 && h[7] == 128, "llm.c header fields");
    // corruptions
    unsigned char *c = malloc(n1 + 8);
    int32_t *ch = (int32_t *)c;
    memcpy(c, b1, n1);
    ch[0] = 20240327;
    expect_reject("bad magic", c, n1);
    memcpy(c, b1, n1);
    ch[1] = 5;
    expect_reject("version 5 (bf16)", c, n1);
    ch[1] = 1;
    expect_reject("version 1", c, n1);
    memcpy(c, b1, n1);
    expect_reject("truncated body", c, n1 - 4);
    expect_reject("header only", c, 1024);
    expect_reject("half a header", c, 500);
    expect_reject("empty file", c, 0);
    memset(c + n1, 0, 8);
    expect_reject("trailing bytes", c, n1 + 8);
    ch[6] = 15;
    expect_reject("C not divisible by NH", c, n1);
    memcpy(c, b1, n1);
    ch[7] = 64;
    expect_reject("Vp < V", c, n1);
    memcpy(c, b1, n1);
    ch[4] = -2;
    expect_reject("negative L", c, n1);
    memcpy(c, b1, n1);
    ch[4] = 3;
    expect_reject("L disagrees with the size", c, n1);
    memcpy(c, b1, n1);
    ch[6] = 1 << 30;
    expect_reject("huge C", c, n1);
    train_gpt2_t *none = NULL;
    check(train_checkpoint_read(&none, tmp_path("does-not-exist")) != WEFT_OK && !none,
          "missing checkpoint rejected");
    free(c);
    free(b1);
    free(b2);
    train_gpt2_destroy(m);
    train_gpt2_destroy(r);
}

static void test_data(void)
{
    // a shard of 300 tokens, a text file, and a shard that lies about its length
    int32_t h[256] = { 20240520, 1, 300 };
    unsigned char buf[1024 + 600];
    memcpy(buf, h, 1024);
    for (int i = 0; i < 300; i++) {
        uint16_t t = (uint16_t)(i * 7 % 1000);
        memcpy(buf + 1024 + 2 * i, &t, 2);
    }
    write_bytes(tmp_path("s.bin"), buf, sizeof(buf));
    train_tokens_t t = { 0 }, v = { 0 };
    check(train_tokens_read(&t, tmp_path("s.bin")) == WEFT_OK && !t.is_text && t.n == 300 &&
          t.tokens[299] == 299 * 7 % 1000 && t.max_token == 995, "shard read");
    check(train_tokens_split(&t, &v, 8) == WEFT_OK && t.n == 270 && v.n == 30 &&
          v.tokens[0] == 270 * 7 % 1000, "train/val split: last 10%% is val");
    train_tokens_free(&t);
    train_tokens_free(&v);
    write_bytes(tmp_path("s.bin"), buf, sizeof(buf) - 2);
    check(train_tokens_read(&t, tmp_path("s.bin")) != WEFT_OK, "short shard rejected");
    write_bytes(tmp_path("t.txt"), "hello, world\n", 13);
    check(train_tokens_read(&t, tmp_path("t.txt")) == WEFT_OK && t.is_text && t.n == 13 &&
          t.tokens[1] == 'e', "text read as bytes");
    train_loader_t ld;
    int x[8], y[8];
    check(train_loader_init(&ld, &t, 2, 4, 0, 1) == WEFT_OK, "loader init");
    train_loader_next(&ld, x, y);
    check(x[0] == 'h' && y[0] == 'e' && x[4] == 'o' && y[7] == 'o', "in-order batches");
    train_loader_next(&ld, x, y);   // window 2, then wraps to window 0
    check(x[0] == 'o' && y[3] == '\n' && x[4] == 'h', "loader wraps");
    train_loader_free(&ld);
    train_tokens_free(&t);
}

/* K steps of training on a fixed synthetic text; losses into out */
static void run_steps(float *out, int K, uint64_t seed, int accum)
{
    train_tokens_t t = { 0 };
    char text[2048];
    for (int i = 0; i < (int)sizeof(text); i++)
        text[i] = "the quick brown fox jumps over the lazy dog. "[i % 45];
    t.tokens = malloc(sizeof(text) * 2);
    for (int i = 0; i < (int)sizeof(text); i++)
        t.tokens[i] = (uint16_t)text[i];
    t.n = sizeof(text);
    train_gpt2_t *m = tiny_model(2, 32, 4, 16, 256, seed);
    train_loader_t ld;
    int x[64], y[64];
    train_gpt2_prepare(m, 4, 16);
    train_loader_init(&ld, &t, 4, 16, 1, seed);
    for (int k = 0; k < K; k++) {
        train_gpt2_zero_grad(m);
        double loss = 0;
        for (int a = 0; a < accum; a++) {
            train_loader_next(&ld, x, y);
            train_gpt2_forward(m, x, y, 4, 16);
            loss += m->mean_loss;
            train_gpt2_backward(m, 1.0f / accum);
        }
        train_gpt2_clip_grad(m, 1.0f);
        train_gpt2_update(m, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, k + 1);
        out[k] = (float)(loss / accum);
    }
    train_loader_free(&ld);
    train_tokens_free(&t);
    train_gpt2_destroy(m);
}

static void test_determinism(void)
{
    float a[6], b[6], c[6];
    run_steps(a, 6, 5, 2);
    run_steps(b, 6, 5, 2);
    run_steps(c, 6, 6, 2);
    check(!memcmp(a, b, sizeof(a)), "same seed, same losses bit for bit");
    check(memcmp(a, c, sizeof(a)) != 0, "another seed, other losses");
    check(a[5] < a[0] - 0.5f, "loss falls on repetitive text (%.3f -> %.3f)", a[0], a[5]);
}

/* accumulating two half-batches gives the gradient of the whole batch */
static void test_accumulation(void)
{
    train_gpt2_t *m = tiny_model(1, 16, 2, 8, 64, 3);
    int x[32], y[32];
    for (int i = 0; i < 32; i++) {
        x[i] = (i * 13 + 5) % 64;
        y[i] = (i * 29 + 1) % 64;
    }
    train_gpt2_prepare(m, 4, 8);
    train_gpt2_zero_grad(m);
    train_gpt2_forward(m, x, y, 4, 8);
    float whole = m->mean_loss;
    train_gpt2_backward(m, 1.0f);
    float *g1 = malloc(m->num_params * 4);
    memcpy(g1, m->grads_mem, m->num_params * 4);
    train_gpt2_zero_grad(m);
    train_gpt2_forward(m, x, y, 2, 8);
    float l1 = m->mean_loss;
    train_gpt2_backward(m, 0.5f);
    train_gpt2_forward(m, x + 16, y + 16, 2, 8);
    float l2 = m->mean_loss;
    check(train_gpt2_backward(m, 0.5f) == WEFT_OK, "backward");
    check(train_gpt2_backward(m, 0.5f) != WEFT_OK, "second backward without forward refused");
    double *gd = malloc(m->num_params * sizeof(double));
    for (size_t i = 0; i < m->num_params; i++)
        gd[i] = g1[i];
    double e = scaled_err(m->grads_mem, gd, (int)m->num_params);
    check(fabsf((l1 + l2) / 2 - whole) < 1e-5f && e < 1e-5, "accumulation (%g)", e);
    int bad[32];
    memcpy(bad, x, sizeof(bad));
    bad[3] = 64;
    check(train_gpt2_forward(m, bad, y, 4, 8) != WEFT_OK, "out-of-range token refused");
    free(g1);
    free(gd);
    train_gpt2_destroy(m);
}

/* ---- the reference state file (llm.c debug state v2, extended) ----
 * int32 header[256] = {20240327, 2, B, T, V, nsteps}; int32 x[B*T], y[B*T];
 * float logits[B*T*V]; float loss; float grads[num_params] (padded layout);
 * float hyper[8] = {lr, beta1, beta2, eps, wd, clip, 0, 0}; float losses[nsteps]. */

typedef struct {
    int B, T, V, nsteps;
    int *x, *y;
    float *logits, loss, *grads, hyper[8], *losses;
} ref_state_t;

static void ref_free(ref_state_t *s)
{
    free(s->x);
    free(s->y);
    free(s->logits);
    free(s->grads);
    free(s->losses);
}

static int ref_read(ref_state_t *s, const char *path, size_t num_params)
{
    memset(s, 0, sizeof(*s));
    size_t n;
    unsigned char *b = read_bytes(path, &n);
    if (!b || n < 1024) {
        fprintf(stderr, "state %s: cannot read a 1024-byte header\n", path);
        free(b);
        return -1;
    }
    int32_t h[256];
    memcpy(h, b, 1024);
    s->B = h[2], s->T = h[3], s->V = h[4], s->nsteps = h[5];
    if (h[0] != 20240327 || h[1] != 2 || s->B <= 0 || s->T <= 0 || s->V <= 0 ||
        s->nsteps < 0 || s->B * s->T > (1 << 20) || s->V > (1 << 24)) {
        fprintf(stderr, "state %s: bad header (magic %d version %d)\n", path, h[0], h[1]);
        free(b);
        return -1;
    }
    size_t BT = (size_t)s->B * s->T;
    size_t want = 1024 + 8 * BT + 4 * (BT * s->V + 1 + num_params + 8 + s->nsteps);
    if (n != want) {
        fprintf(stderr, "state %s: %zu bytes, expected %zu (does it match the model?)\n",
                path, n, want);
        free(b);
        return -1;
    }
    size_t off = 1024;
#define TAKE(dst, count, size) do { dst = malloc((count) * (size) + 1);        \
        memcpy(dst, b + off, (count) * (size)); off += (count) * (size); } while (0)
    TAKE(s->x, BT, 4);
    TAKE(s->y, BT, 4);
    TAKE(s->logits, BT * s->V, 4);
    memcpy(&s->loss, b + off, 4);
    off += 4;
    TAKE(s->grads, num_params, 4);
    memcpy(s->hyper, b + off, 32);
    off += 32;
    TAKE(s->losses, (size_t)s->nsteps, 4);
#undef TAKE
    free(b);
    return 0;
}

/* err = max|a-b| / max|b| over a tensor. Why this metric: an fp32 gradient entry is a
 * sum over B*T positions (and C or 4C channels) of products; its rounding error is about
 * eps * sum of |terms|, which follows the tensor's overall magnitude, not the entry's
 * (entries that cancel to near zero keep the absolute error of their big terms). So the
 * error is judged against the tensor's scale. The elementwise relative error with a floor
 * of 1e-3 * max|b| is printed alongside for information. */
static double tensor_err(const float *a, const float *b, size_t n, double *maxabs,
                         double *elemrel)
{
    double num = 0, den = 0, rel = 0;
    for (size_t i = 0; i < n; i++)
        den = fmax(den, fabs(b[i]));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        num = fmax(num, d);
        rel = fmax(rel, d / fmax(fabs(b[i]), 1e-3 * den + 1e-30));
    }
    *maxabs = num;
    *elemrel = rel;
    return den > 0 ? num / den : num;
}

static int ref_row(const char *name, const float *a, const float *b, size_t n, double bar)
{
    double abs_err, rel;
    double e = tensor_err(a, b, n, &abs_err, &rel);
    int ok = e <= bar;
    fprintf(rout, "  %-10s %10zu  max_abs %9.3e  scaled %9.3e  elem_rel %9.3e  %s\n", name, n,
           abs_err, e, rel, ok ? "ok" : "FAIL");
    check(ok, "ref: %s scaled error %.3g > %.1g", name, e, bar);
    return ok;
}

/* Compares weft's forward, backward and an AdamW trajectory with the state file. */
static int ref_compare(const char *state_path, const char *model_path)
{
    train_gpt2_t *m = NULL;
    ref_state_t s;
    if (train_checkpoint_read(&m, model_path) != WEFT_OK) {
        fprintf(stderr, "%s\n", weft_last_error());
        return -1;
    }
    if (ref_read(&s, state_path, m->num_params) != 0 || s.V != m->cfg.vocab_size ||
        train_gpt2_prepare(m, s.B, s.T) != WEFT_OK) {
        fprintf(stderr, "state does not fit the model (V %d vs %d)\n", s.V, m->cfg.vocab_size);
        train_gpt2_destroy(m);
        return -1;
    }
    fprintf(rout, "ref: B=%d T=%d V=%d nsteps=%d hyper lr=%g b1=%g b2=%g eps=%g wd=%g clip=%g\n",
           s.B, s.T, s.V, s.nsteps, s.hyper[0], s.hyper[1], s.hyper[2], s.hyper[3],
           s.hyper[4], s.hyper[5]);
    fprintf(rout, "  %-10s %10s  (scaled = max_abs / max|ref| over the tensor; bar 1e-4)\n",
           "tensor", "n");
    train_gpt2_zero_grad(m);
    check(train_gpt2_forward(m, s.x, s.y, s.B, s.T) == WEFT_OK, "ref forward");
    ref_row("logits", m->acts.logits, s.logits, (size_t)s.B * s.T * s.V, 1e-4);
    double lerr = fabs(m->mean_loss - s.loss) / fabs(s.loss);
    fprintf(rout, "  %-10s weft %.6f ref %.6f rel %.3e %s\n", "loss", m->mean_loss, s.loss, lerr,
           lerr <= 1e-5 ? "ok" : "FAIL");
    check(lerr <= 1e-5, "ref: loss rel error %.3g", lerr);
    train_gpt2_backward(m, 1.0f);
    size_t off = 0;
    for (int i = 0; i < TRAIN_NUM_PARAM_TENSORS; i++) {
        ref_row(train_param_names[i], m->grads_mem + off, s.grads + off, m->param_sizes[i],
                1e-4);
        off += m->param_sizes[i];
    }
    // the trajectory from the checkpoint weights, constant lr
    train_gpt2_destroy(m);
    m = NULL;
    train_checkpoint_read(&m, model_path);
    train_gpt2_prepare(m, s.B, s.T);
    for (int i = 0; i < s.nsteps; i++) {
        train_gpt2_zero_grad(m);
        train_gpt2_forward(m, s.x, s.y, s.B, s.T);
        float l = m->mean_loss;
        train_gpt2_backward(m, 1.0f);
        if (s.hyper[5] > 0)
            train_gpt2_clip_grad(m, s.hyper[5]);
        train_gpt2_update(m, s.hyper[0], s.hyper[1], s.hyper[2], s.hyper[3], s.hyper[4], i + 1);
        double e = fabs(l - s.losses[i]) / fmax(fabs(s.losses[i]), 1e-6);
        fprintf(rout, "  step %-5d weft %.6f ref %.6f rel %.3e %s\n", i + 1, l, s.losses[i], e,
               e <= 1e-4 ? "ok" : "FAIL");
        check(e <= 1e-4, "ref: step %d loss rel error %.3g", i + 1, e);
    }
    ref_free(&s);
    train_gpt2_destroy(m);
    return 0;
}

/* Writes a state file from weft itself (the comparison's self-test, not a reference). */
static int write_state(const char *state_path, const char *model_path, int B, int T,
                       int nsteps)
{
    train_gpt2_t *m = NULL;
    if (train_checkpoint_read(&m, model_path) != WEFT_OK ||
        train_gpt2_prepare(m, B, T) != WEFT_OK) {
        fprintf(stderr, "%s\n", weft_last_error());
        train_gpt2_destroy(m);
        return -1;
    }
    int V = m->cfg.vocab_size, BT = B * T;
    int32_t h[256] = { 20240327, 2, B, T, V, nsteps };
    int *x = malloc(BT * sizeof(int)), *y = malloc(BT * sizeof(int));
    for (int i = 0; i < BT; i++) {
        x[i] = (int)((urand() + 1) / 2 * V) % V;
        y[i] = (int)((urand() + 1) / 2 * V) % V;
    }
    float hyper[8] = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0 };
    FILE *f = fopen(state_path, "wb");
    if (!f) {
        train_gpt2_destroy(m);
        return -1;
    }
    train_gpt2_zero_grad(m);
    train_gpt2_forward(m, x, y, B, T);
    fwrite(h, 4, 256, f);
    fwrite(x, 4, BT, f);
    fwrite(y, 4, BT, f);
    fwrite(m->acts.logits, 4, (size_t)BT * V, f);
    fwrite(&m->mean_loss, 4, 1, f);
    train_gpt2_backward(m, 1.0f);
    fwrite(m->grads_mem, 4, m->num_params, f);
    fwrite(hyper, 4, 8, f);
    for (int i = 0; i < nsteps; i++) {
        if (i > 0) {
            train_gpt2_zero_grad(m);
            train_gpt2_forward(m, x, y, B, T);
            train_gpt2_backward(m, 1.0f);
        }
        fwrite(&m->mean_loss, 4, 1, f);
        train_gpt2_clip_grad(m, hyper[5]);
        train_gpt2_update(m, hyper[0], hyper[1], hyper[2], hyper[3], hyper[4], i + 1);
    }
    int rc = fclose(f) == 0 ? 0 : -1;
    free(x);
    free(y);
    train_gpt2_destroy(m);
    return rc;
}

/* The comparator on its own output passes, and catches one perturbed gradient. */
static void test_ref_selfcheck(void)
{
    train_gpt2_t *m = tiny_model(2, 16, 4, 8, 100, 11);
    const char *mp = tmp_path("ref_model.bin"), *sp = tmp_path("ref_state.bin");
    train_checkpoint_write(m, mp);
    train_gpt2_destroy(m);
    check(write_state(sp, mp, 2, 8, 3) == 0, "write state");
    int before = R.failed;
    rout = fopen("/dev/null", "w");
    if (!rout)
        rout = stdout;
    ref_compare(sp, mp);
    check(R.failed == before, "ref comparison of weft against itself passes");
    size_t n;
    unsigned char *b = read_bytes(sp, &n);
    float g;
    size_t goff = 1024 + 8 * 16 + 4 * (16 * 100 + 1) + 4 * (128 * 16 + 8 * 16 + 5);
    memcpy(&g, b + goff, 4);
    g = g * 1.01f + 1e-3f;
    memcpy(b + goff, &g, 4);
    write_bytes(sp, b, n);
    int passed = R.passed, failed = R.failed;
    quiet = 1;
    ref_compare(sp, mp);
    quiet = 0;
    int caught = R.failed > failed;
    R.passed = passed;          // the deliberate failure is not a test failure
    R.failed = failed;
    if (rout != stdout)
        fclose(rout);
    rout = stdout;
    check(caught, "ref comparison catches a perturbed ln1w gradient");
    free(b);
}

/* --dtype bf16: the bf16 GEMM against double references on odd shapes (every transpose,
 * bias, beta = 0 / 1 / 0.5, tails past each block size), then fp32 vs bf16 training */
static void test_bf16(void)
{
    train_gpt2_t *m = tiny_model(2, 64, 4, 32, 256, 21);
    if (!kern_have_bf16()) {
        check(m && train_gpt2_set_bf16(m, 1) == WEFT_ERR_UNSUPPORTED && !m->bf16,
              "bf16 refused without AVX512-BF16");
        train_gpt2_destroy(m);
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

    // 20 steps on the KJV text (or the synthetic text when the data is not built):
    // bf16 products track the fp32 losses
    train_tokens_t t = { 0 };
    if (train_tokens_read(&t, "build/data/kjv.txt") != WEFT_OK) {
        static const char txt[] = "in the beginning god created the heaven and the earth. ";
        t.tokens = malloc(4096 * sizeof(*t.tokens));
        for (int i = 0; i < 4096; i++)
            t.tokens[i] = (uint16_t)txt[i % (sizeof(txt) - 1)];
        t.n = 4096;
    }
    enum { B = 4, T = 32, STEPS = 20 };
    float loss[2][STEPS];
    int x[B * T], y[B * T];
    for (int d = 0; d < 2; d++) {
        train_gpt2_t *mm = tiny_model(2, 64, 4, T, 256, 21);
        train_loader_t ld;
        train_gpt2_prepare(mm, B, T);
        check(train_gpt2_set_bf16(mm, d) == WEFT_OK && mm->bf16 == d, "set_bf16(%d)", d);
        train_loader_init(&ld, &t, B, T, 1, 7);
        for (int k = 0; k < STEPS; k++) {
            train_loader_next(&ld, x, y);
            train_gpt2_zero_grad(mm);
            train_gpt2_forward(mm, x, y, B, T);
            loss[d][k] = mm->mean_loss;
            train_gpt2_backward(mm, 1.0f);
            train_gpt2_clip_grad(mm, 1.0f);
            train_gpt2_update(mm, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, k + 1);
        }
        train_loader_free(&ld);
        train_gpt2_destroy(mm);
    }
    double worst = 0.0;
    for (int k = 0; k < STEPS; k++)
        worst = fmax(worst, fabs(loss[1][k] - loss[0][k]) / loss[0][k]);
    // within 2% at the end; a loss spike on an odd batch (KJV step 17: 7.8 vs 7.3) is
    // where bf16 rounding shows most, so single steps get 10%
    double last = fabs(loss[1][STEPS - 1] - loss[0][STEPS - 1]) / loss[0][STEPS - 1];
    check(last < 0.02 && worst < 0.1 && loss[1][STEPS - 1] < loss[1][0] - 0.5f,
          "bf16 training tracks fp32: last step %.2e, worst step %.2e relative, loss %.3f "
          "-> %.3f (fp32 %.3f -> %.3f)", last, worst, loss[1][0], loss[1][STEPS - 1],
          loss[0][0], loss[0][STEPS - 1]);
    train_tokens_free(&t);
    check(train_gpt2_set_bf16(m, 0) == WEFT_OK && !m->bf16, "set_bf16(0) goes back to fp32");
    train_gpt2_destroy(m);
}

int main(int argc, char **argv)
{
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/test_train.%d", t ? t : "/tmp", (int)getpid());
    rout = stdout;
    if (argc == 4 && !strcmp(argv[1], "--ref")) {
        if (ref_compare(argv[2], argv[3]) != 0)
            return 2;
        printf("test_train --ref: %d passed, %d failed\n", R.passed, R.failed);
        return R.failed ? 1 : 0;
    }
    if (argc >= 4 && !strcmp(argv[1], "--write-state")) {
        int B = argc > 4 ? atoi(argv[4]) : 2, T = argc > 5 ? atoi(argv[5]) : 16;
        int n = argc > 6 ? atoi(argv[6]) : 3;
        return write_state(argv[2], argv[3], B, T, n) == 0 ? 0 : 1;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: test_train [--ref STATE MODEL | --write-state STATE MODEL "
                "[B T nsteps]]\n");
        return 2;
    }
    if (mkdir(tmpdir, 0700) != 0) {
        perror(tmpdir);
        return 2;
    }
    test_layernorm();
    test_matmul();
    test_attention();
    test_gelu();
    test_crossentropy();
    test_encoder_adamw();
    test_checkpoint();
    test_data();
    test_determinism();
    test_accumulation();
    test_ref_selfcheck();
    test_bf16();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_train: could not remove %s\n", tmpdir);
    fflush(stderr);
    printf("test_train: %d passed, %d failed\n", R.passed, R.failed);
    return R.failed ? 1 : 0;
}
