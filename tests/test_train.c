/*
 * test_train.c - the trainer: checkpoints, data, determinism, accumulation, bf16 training,
 * and (with --ref) the whole model against a PyTorch reference state. The kernels one by
 * one are test_nn's.
 *
 * Usage: test_train                      C-only checks; ends "test_train: N passed, N failed"
 *        test_train --ref STATE MODEL    compare with tests/train_ref.py's STATE for MODEL
 *        test_train --write-state STATE MODEL [B T nsteps]
 *                                        write a STATE from weft's own forward/backward
 *                                        (tests the reader; not a reference)
 *
 * Errors are scale-aware: max |a - b| over a tensor divided by max |b| over it (see
 * ref_compare for why); the bar is 1e-4 for fp32.
 *
 * Invariants: exits non-zero when anything failed; temporary files live under TMPDIR.
 */
#include <cblas.h>
#include <math.h>
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
#include "train_check.h"

static FILE *rout;   /* where --ref tables go (stdout; /dev/null in the self-check) */

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
        padded_zero &= m->params_mem[i] == 0.0f;   // wte leads unit 0
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
    float *g = malloc(m->num_params * sizeof(float));   // llm.c order, as the state's
    train_layout_permute(g, m->grads_mem, &m->cfg, 1);
    size_t off = 0;
    for (int i = 0; i < TRAIN_NUM_PARAM_TENSORS; i++) {
        ref_row(train_param_names[i], g + off, s.grads + off, m->param_sizes[i], 1e-4);
        off += m->param_sizes[i];
    }
    free(g);
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
    float *g = malloc(m->num_params * sizeof(float));   // the state's grads: llm.c order
    train_layout_permute(g, m->grads_mem, &m->cfg, 1);
    fwrite(g, 4, m->num_params, f);
    free(g);
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

/* bf16 products in the model: refused without AVX512-BF16, else 20 steps track fp32 */
static void test_bf16(void)
{
    train_gpt2_t *m = tiny_model(2, 64, 4, 32, 256, 21);
    if (!kern_have_bf16()) {
        check(m && train_gpt2_set_bf16(m, 1) == WEFT_ERR_UNSUPPORTED && !m->bf16,
              "bf16 refused without AVX512-BF16");
        train_gpt2_destroy(m);
        return;
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
    openblas_set_num_threads(1);   /* one thread, as weft-train runs: no BLAS threads racing */
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
