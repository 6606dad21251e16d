/*
 * train_check.h - the check harness of test_nn and test_train: pass/fail counts, the
 * scale-aware error both use as their bar, and a fixed-seed uniform generator.
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

#endif
