/*
 * perf_weft.c - the perf driver's weft backend: the job is a weft communicator, the
 * measured calls are weft_allreduce, weft_reduce_scatter, weft_allgather, weft_broadcast,
 * weft_reduce, weft_alltoall and weft_sendrecv, in place as NCCL defines it.
 *
 * A failing weft call is reported the way nccl-tests reports an NCCL failure; then the
 * communicator is aborted and the process exits 1.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf_common.h"

typedef struct {
    weft_comm_t *comm;
    int rank;
    const char *prog;
} pw_ctx_t;

#define PW_CHECK(w, call)                                                     \
    do {                                                                      \
        weft_status_t st_ = (call);                                           \
        if (st_ != WEFT_OK)                                                   \
            pw_fail((w), st_, __FILE__, __LINE__);                            \
    } while (0)

static void pw_fail(pw_ctx_t *w, weft_status_t st, const char *file, int line)
{
    char host[256];
    perf_hostname(host, sizeof(host));
    fflush(stdout);
    printf("%s: Test weft failure %s:%d '%s / %s'\n", host, file, line, weft_status_str(st),
           weft_last_error());
    printf(" .. %s pid %d: Test failure (rank %d)\n", host, (int)getpid(), w->rank);
    fflush(stdout);
    if (w->comm)
        weft_comm_abort(w->comm);
    exit(1);
}

/* ---- the job ---- */

static int pw_init(void *ctx, int *argc, char ***argv, const perf_opts_t *o, perf_job_t *job)
{
    pw_ctx_t *w = ctx;
    char num[32];

    if (o->timeout > 0) {
        snprintf(num, sizeof(num), "%d", o->timeout);
        setenv("WEFT_TIMEOUT", num, 1);
    }
    weft_status_t st = weft_comm_init(&w->comm);
    if (st != WEFT_OK) {
        fprintf(stderr, "%s: weft_comm_init failed: %s: %s\n", w->prog, weft_status_str(st),
                weft_last_error());
        return 1;
    }
    job->rank = w->rank = weft_comm_rank(w->comm);
    job->nranks = weft_comm_size(w->comm);
    job->local_rank = weft_comm_local_rank(w->comm);
    job->local_size = weft_comm_local_size(w->comm);
    snprintf(job->desc, sizeof(job->desc), "weft %s", weft_comm_transport(w->comm));
    return 0;
}

static void pw_finalize(void *ctx)
{
    pw_ctx_t *w = ctx;
    weft_comm_destroy(w->comm);
}

static void pw_abort(void *ctx)
{
    pw_ctx_t *w = ctx;
    weft_comm_abort(w->comm);
}

static void pw_notes(void *ctx, const perf_opts_t *o, perf_kind_t kind)
{
    pw_ctx_t *w = ctx;
    if (o->graph)
        fprintf(stderr, "%s: ignoring -G %d: weft has no CUDA graphs\n", w->prog, o->graph);
}

static const char *pw_error(void *ctx)
{
    return weft_last_error();
}

/* ---- the driver's own communication ---- */

static void pw_barrier(void *ctx)
{
    pw_ctx_t *w = ctx;
    PW_CHECK(w, weft_barrier(w->comm));
}

static double pw_allreduce_f64(void *ctx, double x, weft_op_t op)
{
    pw_ctx_t *w = ctx;
    double v = 0.0;
    PW_CHECK(w, weft_allreduce(&x, &v, 1, WEFT_FLOAT64, op, w->comm));
    return v;
}

static uint64_t pw_allreduce_u64(void *ctx, uint64_t x, weft_op_t op)
{
    pw_ctx_t *w = ctx;
    uint64_t v = 0;
    PW_CHECK(w, weft_allreduce(&x, &v, 1, WEFT_UINT64, op, w->comm));
    return v;
}

static void pw_gather(void *ctx, const void *mine, void *all, size_t len)
{
    pw_ctx_t *w = ctx;
    PW_CHECK(w, weft_allgather(mine, all, len, WEFT_UINT8, w->comm));
}

/* ---- buffers: -R takes them from weft_mem_alloc (registered: peers on this host read
 *      them through mappings) ---- */

static void *pw_alloc(void *ctx, size_t bytes, int reg)
{
    void *p = NULL;
    if (reg ? weft_mem_alloc(&p, bytes) != WEFT_OK : posix_memalign(&p, 4096, bytes) != 0)
        return NULL;
    return p;
}

static void pw_free(void *ctx, void *p, int reg)
{
    if (reg)
        weft_mem_free(p);
    else
        free(p);
}

/* ---- the measured calls ---- */

static void pw_run(void *ctx, perf_kind_t kind, const void *send, void *recv,
                     const perf_args_t *a, int in_place)
{
    pw_ctx_t *w = ctx;
    size_t n = a->c.paramcount;
    weft_dtype_t t = a->type->dtype;

    switch (kind) {
    case PERF_COLL_ALLREDUCE:
        PW_CHECK(w, weft_allreduce(send, recv, n, t, a->op, w->comm));
        break;
    case PERF_COLL_REDUCE_SCATTER:
        PW_CHECK(w, weft_reduce_scatter(send, recv, n, t, a->op, w->comm));
        break;
    case PERF_COLL_ALLGATHER:
        PW_CHECK(w, weft_allgather(send, recv, n, t, w->comm));
        break;
    case PERF_COLL_BROADCAST:
        PW_CHECK(w, weft_broadcast(send, recv, n, t, a->root, w->comm));
        break;
    case PERF_COLL_REDUCE:
        PW_CHECK(w, weft_reduce(send, recv, n, t, a->op, a->root, w->comm));
        break;
    case PERF_COLL_ALLTOALL:
        PW_CHECK(w, weft_alltoall(send, recv, n, t, w->comm));
        break;
    case PERF_COLL_SENDRECV:
        PW_CHECK(w, weft_sendrecv(send, n, (a->rank + 1) % a->nranks, recv, n,
                                    (a->rank - 1 + a->nranks) % a->nranks, t, w->comm));
        break;
    }
}

static const perf_backend_t pw_backend = {
    /* the job */
    .check = NULL,                              /* the tool names the collective */
    .init = pw_init,
    .finalize = pw_finalize,
    .abort = pw_abort,
    .notes = pw_notes,
    .last_error = pw_error,
    /* the driver's own communication */
    .barrier = pw_barrier,
    .allreduce_f64 = pw_allreduce_f64,
    .allreduce_u64 = pw_allreduce_u64,
    .gather = pw_gather,
    /* buffers */
    .alloc = pw_alloc,
    .free = pw_free,
    .reg_alloc = "weft_mem_alloc",
    /* the measured calls */
    .row = NULL,                                /* weft runs every dtype and op */
    .run = pw_run,
    .scatter_at_start = 0,                      /* rank r's result at recv + r*recvcount */
};

int perf_weft_main(int argc, char **argv, perf_kind_t kind)
{
    pw_ctx_t w = { .comm = NULL, .rank = 0, .prog = NULL };
    w.prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    return perf_main(argc, argv, (int)kind, &pw_backend, &w);
}
