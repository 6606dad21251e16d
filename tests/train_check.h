/*
 * train_check.h - the check harness of test_nn and test_train: pass/fail counts, the
 * scale-aware error both use as their bar, and a fixed-seed uniform generator.
 *
 * Included after model.h it also gives tiny_model (a GPT-2-initialised model of given sizes).
 *
 * Invariants: test-only; each binary that includes it gets its own counters.
 */
#ifndef WEFT_TRAIN_CHECK_H
#define WEFT_TRAIN_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

static struct { int passed, failed; } R;

static inline void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int quiet;     /* set while a failure is provoked on purpose */
static inline void check(int ok, const char *fmt, ...)
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
static inline double scaled_err(const float *a, const double *b, int n)
{
    double num = 0.0, den = 1e-30;
    for (int i = 0; i < n; i++) {
        num = fmax(num, fabs(a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    return num / den;
}

static unsigned long long lcg_state = 42;
static inline double urand(void)   /* uniform [-1, 1) */
{
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

#ifdef WEFT_TRAIN_MODEL_H
/* A GPT-2-initialised model of these sizes (what test_train and test_train_gpu train);
 * NULL when out of memory or the sizes are refused. */
static inline train_gpt2_t *tiny_model(int L, int C, int NH, int maxT, int V, uint64_t seed)
{
    train_gpt2_cfg_t cfg = { .max_seq_len = maxT, .vocab_size = V,
                             .padded_vocab_size = train_padded_vocab(V), .num_layers = L,
                             .num_heads = NH, .channels = C };
    train_gpt2_t *m = NULL;
    if (train_gpt2_create(&m, &cfg) != WEFT_OK)
        return NULL;
    if (train_gpt2_init(m, seed) != WEFT_OK) {
        train_gpt2_destroy(m);
        return NULL;
    }
    return m;
}
#endif

#endif
