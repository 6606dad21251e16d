#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "weft.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    weft_comm_t *c;
    if (weft_comm_init(&c) != WEFT_OK) return 1;
    float x[2] = { 1, 2 };
    double med[5];
    for (int r = 0; r < 5; r++) {
        for (int i = 0; i < 1000; i++) { weft_request_t *q; weft_iallreduce(x, x, 2, WEFT_FLOAT32, WEFT_SUM, c, &q); weft_wait(q); }
        double t0 = now();
        for (int i = 0; i < iters; i++) {
            weft_request_t *q;
            if (weft_iallreduce(x, x, 2, WEFT_FLOAT32, WEFT_SUM, c, &q) != WEFT_OK || weft_wait(q) != WEFT_OK) return 1;
        }
        med[r] = (now() - t0) / iters * 1e6;
    }
    qsort(med, 5, sizeof(double), cmp);
    if (weft_comm_rank(c) == 0) printf("8-byte iallreduce+wait: median %.2f us (min %.2f, max %.2f)\n", med[2], med[0], med[4]);
    weft_comm_destroy(c);
    return 0;
}
