/*
 * overlap_perf - how much of a nonblocking all-gather hides behind matmuls.
 *
 *   weftrun -n 2 build/bin/overlap_perf [-C 256] [-r 1024] [-m qkv,fc] [-s MS] [-n 30] [-w 3]
 *
 * The FSDP pattern: while the layers of block i compute, the parameters of block i+1 are
 * all-gathered. One "unit" is one transformer block of width C, 12*C*C + 13*C floats
 * (789760 at C = 256), of which each rank holds 1/nranks; the compute is the block's
 * forward matmuls on r = B*T rows (OpenBLAS sgemm, one thread), chosen by -m from
 *   qkv  (r, C) x (C, 3C)     proj (r, C) x (C, C)
 *   fc   (r, C) x (C, 4C)     fcp  (r, 4C) x (4C, C)
 * or, with -s MS, a sleep of MS ms: compute that runs elsewhere (a GPU) and leaves the
 * core free, where sgemm keeps every core of a 1-rank-per-core job busy.
 * Each repetition times, in turn, with a barrier before each:
 *   t_comp     the matmuls alone
 *   t_comm     weft_iallgather + weft_wait alone
 *   t_overlap  weft_iallgather, the matmuls, then weft_wait (t_wait: that last wait)
 * each as the slowest rank's time; the table gives the medians over -n repetitions and
 *   hidden = (t_comp + t_comm - t_overlap) / t_comm
 * (1: the all-gather cost nothing on top of the compute; 0: nothing overlapped).
 * WEFT_PROGRESS_THREAD=0 shows the old behaviour, where the all-gather moves only inside
 * weft calls. The gathered unit is checked after every overlapped repetition; the
 * program exits non-zero when it is wrong.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

typedef struct { const char *name; int k_mult, n_mult; } mm_t;   /* (r, k*C) x (k*C, n*C) */
static const mm_t mms[] = { { "qkv", 1, 3 }, { "proj", 1, 1 }, { "fc", 1, 4 }, { "fcp", 4, 1 } };
#define NMM 4

typedef struct {
    int C, rows, reps, warmup;
    double sleep_ms;             /* > 0: the compute is a sleep */
    int use[NMM];
    float *x, *w, *y;            /* (rows, 4C), (4C, 4C), (rows, 4C): room for any shape */
} compute_t;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void compute(const compute_t *c)
{
    if (c->sleep_ms > 0) {
        struct timespec ts = { (time_t)(c->sleep_ms / 1e3),
                               (long)((c->sleep_ms - 1e3 * (long)(c->sleep_ms / 1e3)) * 1e6) };
        nanosleep(&ts, NULL);
        return;
    }
    for (int i = 0; i < NMM; i++) {
        if (!c->use[i])
            continue;
        int k = mms[i].k_mult * c->C, n = mms[i].n_mult * c->C;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->rows, n, k, 1.0f, c->x, k,
                    c->w, n, 0.0f, c->y, n);
    }
}

static double flops(const compute_t *c)
{
    double f = 0;
    for (int i = 0; i < NMM; i++)
        if (c->use[i])
            f += 2.0 * c->rows * mms[i].k_mult * c->C * mms[i].n_mult * c->C;
    return f;
}

static int parse_mms(const char *s, int *use)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", s);
    memset(use, 0, NMM * sizeof(int));
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < NMM; i++)
            if (!strcmp(t, mms[i].name) || !strcmp(t, "all"))
                use[i] = found = 1;
        if (!found)
            return -1;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what, weft_status_t st)
{
    fprintf(stderr, "overlap_perf: %s: %s: %s\n", what, weft_status_str(st), weft_last_error());
    exit(1);
}

#define CHECK(what, call) do { weft_status_t st_ = (call); if (st_) die(what, st_); } while (0)

/* Every element of the gathered unit: rank r's shard holds r*1e6 + i (exact in float). */
static int check_unit(const float *recv, size_t shard, int nranks)
{
    for (int r = 0; r < nranks; r++)
        for (size_t i = 0; i < shard; i += 97)
            if (recv[(size_t)r * shard + i] != (float)(r * 1000000 + (int)(i % 1000000)))
                return -1;
    return 0;
}

int main(int argc, char **argv)
{
    compute_t c = { .C = 256, .rows = 1024, .reps = 30, .warmup = 3 };
    const char *mm_list = "qkv,fc";
    int opt;
    while ((opt = getopt(argc, argv, "C:r:m:s:n:w:h")) != -1) {
        switch (opt) {
        case 'C': c.C = atoi(optarg); break;
        case 'r': c.rows = atoi(optarg); break;
        case 'm': mm_list = optarg; break;
        case 's': c.sleep_ms = atof(optarg); break;
        case 'n': c.reps = atoi(optarg); break;
        case 'w': c.warmup = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: overlap_perf [-C width] [-r rows] [-m qkv,proj,fc,fcp|all] "
                    "[-s sleep_ms] [-n reps] [-w warmup]\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    if (c.C < 1 || c.rows < 1 || c.reps < 1 || c.warmup < 0 || parse_mms(mm_list, c.use)) {
        fprintf(stderr, "overlap_perf: bad arguments\n");
        return 2;
    }
    openblas_set_num_threads(1);
    weft_comm_t *comm;
    CHECK("comm_init", weft_comm_init(&comm));
    int rank = weft_comm_rank(comm), nranks = weft_comm_size(comm);
    size_t unit = 12 * (size_t)c.C * c.C + 13 * (size_t)c.C;
    size_t shard = (unit + (size_t)nranks - 1) / (size_t)nranks;
    size_t C4 = 4 * (size_t)c.C;
    float *send = malloc(shard * sizeof(float));
    float *recv = malloc(shard * (size_t)nranks * sizeof(float));
    c.x = malloc((size_t)c.rows * C4 * sizeof(float));
    c.w = malloc(C4 * C4 * sizeof(float));
    c.y = malloc((size_t)c.rows * C4 * sizeof(float));
    double *t = malloc(4 * (size_t)c.reps * sizeof(double));
    if (!send || !recv || !c.x || !c.w || !c.y || !t) {
        fprintf(stderr, "overlap_perf: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < shard; i++)
        send[i] = (float)(rank * 1000000 + (int)(i % 1000000));
    for (size_t i = 0; i < (size_t)c.rows * C4; i++)
        c.x[i] = (float)((i * 7) % 13) * 0.01f;
    for (size_t i = 0; i < C4 * C4; i++)
        c.w[i] = (float)((i * 5) % 11) * 0.01f;

    const char *pt = getenv("WEFT_PROGRESS_THREAD");
    if (rank == 0) {
        printf("# overlap_perf: %d ranks (%s), all-gather of one C=%d unit: %zu floats "
               "(%.2f MB, %.2f MB per rank)\n", nranks, weft_comm_transport(comm), c.C,
               unit, unit * 4e-6, shard * 4e-6);
        if (c.sleep_ms > 0)
            printf("# compute: a sleep of %.3f ms (the core stays free)", c.sleep_ms);
        else
            printf("# compute: sgemm %s on %d rows (%.2f GFLOP, 1 thread)", mm_list, c.rows,
                   flops(&c) * 1e-9);
        printf("; progress thread: %s (WEFT_PROGRESS_THREAD=%s); %d reps after %d warm-up\n",
               pt && !strcmp(pt, "0") ? "off" : "on", pt ? pt : "default", c.reps, c.warmup);
    }
    int bad = 0;
    for (int it = -c.warmup; it < c.reps; it++) {
        double mine[4], all[4];
        weft_request_t *req;
        CHECK("barrier", weft_barrier(comm));
        double t0 = now_s();
        compute(&c);
        mine[0] = now_s() - t0;

        CHECK("barrier", weft_barrier(comm));
        t0 = now_s();
        CHECK("iallgather", weft_iallgather(send, recv, shard, WEFT_FLOAT32, comm, &req));
        CHECK("wait", weft_wait(req));
        mine[1] = now_s() - t0;

        memset(recv, 0, shard * (size_t)nranks * sizeof(float));
        CHECK("barrier", weft_barrier(comm));
        t0 = now_s();
        CHECK("iallgather", weft_iallgather(send, recv, shard, WEFT_FLOAT32, comm, &req));
        compute(&c);
        double t1 = now_s();
        CHECK("wait", weft_wait(req));
        double t2 = now_s();
        mine[2] = t2 - t0;
        mine[3] = t2 - t1;
        bad |= check_unit(recv, shard, nranks);

        for (int k = 0; k < 4; k++)   /* the slowest rank's times (a max, via -x) */
            mine[k] = -mine[k];
        CHECK("allreduce", weft_allreduce(mine, all, 4, WEFT_FLOAT64, WEFT_MIN, comm));
        if (it >= 0)
            for (int k = 0; k < 4; k++)
                t[k * c.reps + it] = -all[k];
    }
    int bad_any = 0;
    CHECK("allreduce", weft_allreduce(&bad, &bad_any, 1, WEFT_INT32, WEFT_MIN, comm));
    if (rank == 0) {
        double comp = median(t, c.reps), comm_t = median(t + c.reps, c.reps);
        double ov = median(t + 2 * c.reps, c.reps), wait = median(t + 3 * c.reps, c.reps);
        printf("# %10s %12s %12s %12s %10s\n", "t_comp(ms)", "t_comm(ms)", "t_overlap(ms)",
               "t_wait(ms)", "hidden");
        printf("  %10.3f %12.3f %12.3f %12.3f %10.2f\n", comp * 1e3, comm_t * 1e3, ov * 1e3,
               wait * 1e3, (comp + comm_t - ov) / comm_t);
        printf("# gathered unit %s\n", bad_any ? "WRONG" : "correct");
    }
    weft_comm_destroy(comm);
    free(send);
    free(recv);
    free(c.x);
    free(c.w);
    free(c.y);
    free(t);
    return bad_any ? 1 : 0;
}
