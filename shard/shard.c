/*
 * shard.c - units, their shards and buffers, and the collectives that move them.
 *
 * Per unit, by strategy (G = shard group size, gr = this rank's place in it, sn = the
 * shard's floats = pad / G):
 *   full    (pad)  gathered parameters: persistent for none/zero1/grad_op, else alive
 *                  from shard_params (or a prefetch) to shard_params_done
 *   master  (sn)   fp32 master shard: the slice full + gr*sn where full is persistent and
 *                  fp32, else a buffer of its own (full/hybrid, or bf16 parameters)
 *   gfull   (pad)  gradient as backward accumulates it: persistent for none (all-reduced
 *                  in place) and zero1 (reduce-scattered in place: only this rank's slice
 *                  is reduced), else handed out per micro-batch and freed once
 *                  reduce-scattered
 *   gshard  (sn)   the step's reduced gradient: the slice of gfull (none/zero1), else a
 *                  buffer the reduce-scatters add into
 *   m, v    (sn)   AdamW moments
 *
 * Gradient reductions are jobs in a FIFO, started in unit order by shard_grads_done and
 * advanced (reduce-scatter -> all-reduce across replicas -> add into gshard) whenever a
 * hook or shard_clip looks at them; every rank starts every collective at the same point
 * of the same program, so the order on each communicator is the same everywhere.
 *
 * Parameter gathers follow the micro-batch's unit order (forward 0..n-1, then backward
 * n-2..1; units 0 and n-1 stay gathered across a training forward and backward): asking
 * for a unit waits for its gather and starts the next `prefetch` ones in that order.
 *
 * comm_bytes counts what a ring sends per rank: (G-1)*shard bytes for an all-gather or a
 * reduce-scatter, 2*(R-1)/R * bytes for an all-reduce over R ranks (nccl-tests' busbw).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nn.h"
#include "shard_int.h"
#include "status.h"
#include "util.h"


static const char *const strategy_names[SHARD_NUM_STRATEGIES] = {
    "none", "zero1", "grad_op", "full", "hybrid",
};

const char *shard_strategy_name(shard_strategy_t s)
{
    return (unsigned)s < SHARD_NUM_STRATEGIES ? strategy_names[s] : "?";
}

int shard_strategy_parse(const char *name, shard_strategy_t *s)
{
    for (int i = 0; i < SHARD_NUM_STRATEGIES; i++)
        if (!strcmp(name, strategy_names[i])) {
            *s = (shard_strategy_t)i;
            return 0;
        }
    return -1;
}

int shard_group_size(const shard_t *sh)
{
    return sh->G;
}

/* ---- the host table: host memory, weft's CPU kernels, weft.h's collectives ---- */

static void *host_alloc(void *ctx, size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return NULL;
    memset(p, 0, bytes);
    return p;
}

static void host_free(void *ctx, void *p)
{
    free(p);
}

static weft_status_t host_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
    return WEFT_OK;
}

static weft_status_t host_zero(void *ctx, void *p, size_t bytes)
{
    memset(p, 0, bytes);
    return WEFT_OK;
}

static weft_status_t host_to_bf16(void *ctx, uint16_t *dst, const float *src, size_t n)
{
    kern_to_bf16(dst, src, n);
    return WEFT_OK;
}

static inline float bf16_widen(uint16_t b)
{
    uint32_t w = (uint32_t)b << 16;
    float f;
    memcpy(&f, &w, 4);
    return f;
}

static weft_status_t host_from_bf16(void *ctx, float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_widen(src[i]);
    return WEFT_OK;
}

static weft_status_t host_add(void *ctx, float *y, const void *x, size_t n, int bf16)
{
    if (bf16) {
        const uint16_t *b = x;
        for (size_t i = 0; i < n; i++)
            y[i] += bf16_widen(b[i]);
    } else {
        const float *f = x;
        for (size_t i = 0; i < n; i++)
            y[i] += f[i];
    }
    return WEFT_OK;
}

static weft_status_t host_sumsq(void *ctx, const float *const *x, const size_t *n, int count,
                                double *sum_p)
{
    double ss = 0.0;
    for (int k = 0; k < count; k++)
        ss += kern_sumsq(x[k], n[k]);
    *sum_p = ss;
    return WEFT_OK;
}

static weft_status_t host_scale(void *ctx, float *x, float a, size_t n)
{
    kern_scale(x, a, n);
    return WEFT_OK;
}

static weft_status_t host_adamw(void *ctx, float *p, float *m, float *v, const float *g,
                                size_t n, float lr, float b1, float b2, float eps, float wd,
                                int t)
{
    kern_adamw(p, m, v, g, n, lr, b1, b2, eps, wd, t);
    return WEFT_OK;
}

static weft_status_t host_coll(void *ctx, shard_coll_t kind, const void *send, void *recv,
                               size_t count, weft_dtype_t dt, weft_comm_t *comm, void **req_p)
{
    weft_request_t **r = (weft_request_t **)req_p;
    switch (kind) {
    case SHARD_COLL_ALLGATHER:
        return weft_iallgather(send, recv, count, dt, comm, r);
    case SHARD_COLL_REDUCE_SCATTER:
        return weft_ireduce_scatter(send, recv, count, dt, WEFT_SUM, comm, r);
    default:
        return weft_iallreduce(send, recv, count, dt, WEFT_SUM, comm, r);
    }
}

static weft_status_t host_wait(void *ctx, void *req)
{
    return weft_wait(req);
}

static weft_status_t host_test(void *ctx, void *req, int *done_p)
{
    return weft_test(req, done_p);
}

static const shard_mem_t host_mem = {
    .alloc = host_alloc, .free = host_free, .upload = host_copy, .download = host_copy,
    .copy = host_copy, .zero = host_zero, .to_bf16 = host_to_bf16,
    .from_bf16 = host_from_bf16, .add = host_add, .sumsq = host_sumsq, .scale = host_scale,
    .adamw = host_adamw, .coll = host_coll, .wait = host_wait, .test = host_test,
};

const shard_mem_t *shard_host_mem(void)
{
    return &host_mem;
}

/* a collective through the table; the time its start takes is exposed (a device table's
 * calls may block until the collective is done) */
static weft_status_t coll_start(shard_t *sh, shard_coll_t kind, const void *send, void *recv,
                                size_t count, weft_dtype_t dt, weft_comm_t *comm,
                                void **req_p)
{
    double t0 = time_s();
    weft_status_t st = sh->mem->coll(sh->mem->ctx, kind, send, recv, count, dt, comm, req_p);
    sh->st.exposed_ms += (time_s() - t0) * 1e3;
    return st;
}

/* ---- memory: persistent buffers count as model states, transient ones as in flight ----
 *
 * Transient buffers (gathered units, gradients being reduced, bf16 copies) come from a
 * pool of freed ones of the same size: a step frees and takes the same few sizes again
 * and again, and going through malloc each time faulted their pages in anew and left the
 * heap fragmented, so a rank's resident memory grew past what was in use (by 4x the
 * model's parameter bytes at L=12 C=768 on 2 ranks). The pool holds at most what was in
 * flight at the peak. */

static void *alloc_state(shard_t *sh, size_t bytes)
{
    void *p = sh->mem->alloc(sh->mem->ctx, bytes);
    if (p)
        sh->st.state_bytes += bytes;
    return p;
}

static void mem_free(shard_t *sh, void *p)
{
    if (p)
        sh->mem->free(sh->mem->ctx, p);
}

/* A transient buffer of bytes, zero-filled when zero is set (NULL when out of memory). */
static void *take_transient(shard_t *sh, size_t bytes, int zero)
{
    void *p = NULL;
    for (int i = sh->npool - 1; i >= 0 && !p; i--)
        if (sh->pool[i].bytes == bytes) {
            p = sh->pool[i].p;
            sh->pool[i] = sh->pool[--sh->npool];
        }
    if (!p && !(p = sh->mem->alloc(sh->mem->ctx, bytes)))
        return NULL;
    else if (zero && sh->mem->zero(sh->mem->ctx, p, bytes) != WEFT_OK) {
        mem_free(sh, p);
        return NULL;
    }
    sh->transient += bytes;
    if (sh->transient > sh->st.transient_peak)
        sh->st.transient_peak = sh->transient;
    return p;
}

static void free_transient(shard_t *sh, void *p, size_t bytes)
{
    if (!p)
        return;
    sh->transient -= bytes;
    if (sh->npool == sh->pool_cap) {
        int cap = sh->pool_cap ? 2 * sh->pool_cap : 16;
        pooled_t *np = realloc(sh->pool, (size_t)cap * sizeof(*np));
        if (!np) {
            mem_free(sh, p);   // no room to keep it: give it back
            return;
        }
        sh->pool = np;
        sh->pool_cap = cap;
    }
    sh->pool[sh->npool++] = (pooled_t){ p, bytes };
}

static weft_status_t oom(const char *what, size_t bytes)
{
    return weft_error(WEFT_ERR_NO_MEMORY, "shard: cannot allocate %zu bytes for %s", bytes,
                      what);
}

/* ---- waits: the time the caller spends in them is exposed communication ---- */

static weft_status_t timed_wait(shard_t *sh, void *req)
{
    double t0 = time_s();
    weft_status_t st = sh->mem->wait(sh->mem->ctx, req);
    sh->st.exposed_ms += (time_s() - t0) * 1e3;
    return st;
}

/* x rounded to bf16 (nearest even) and back, in place, through a transient bf16 copy of
 * at most 1M elements: what a bf16 gather delivers */
static weft_status_t round_bf16(shard_t *sh, float *x, size_t n)
{
    size_t chunk = n < ((size_t)1 << 20) ? n : (size_t)1 << 20;
    uint16_t *t = take_transient(sh, chunk * 2, 0);
    if (!t)
        return oom("a bf16 copy", chunk * 2);
    weft_status_t st = WEFT_OK;
    for (size_t i = 0; st == WEFT_OK && i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        st = sh->mem->to_bf16(sh->mem->ctx, t, x + i, k);
        if (st == WEFT_OK)
            st = sh->mem->from_bf16(sh->mem->ctx, x + i, t, k);
    }
    free_transient(sh, t, chunk * 2);
    return st;
}

static double ar_bytes(const shard_t *sh, int R, size_t n, size_t es)
{
    return R > 1 ? 2.0 * (R - 1) / R * (double)n * (double)es : 0.0;
}

/* ---- parameter gathers ---- */

/* A gather that could not start leaves nothing behind that looks gathered: a later
 * shard_params would otherwise skip the gather and hand out what the buffer held. */
static weft_status_t gather_failed(shard_t *sh, unit_t *u, weft_status_t st)
{
    free_transient(sh, u->full16, u->pad * 2);
    free_transient(sh, u->master16, u->sn * 2);
    u->full16 = NULL;
    u->master16 = NULL;
    if (sh->per_use) {
        free_transient(sh, u->full, u->pad * 4);
        u->full = NULL;
    }
    return st;
}

static weft_status_t gather_start(shard_t *sh, int i)
{
    unit_t *u = &sh->u[i];
    weft_status_t st = WEFT_OK;
    if (u->gather)
        return WEFT_OK;
    if (sh->per_use && !u->full) {
        if (!(u->full = take_transient(sh, u->pad * 4, 0)))
            return oom("a gathered unit", u->pad * 4);
    }
    if (sh->G == 1) {   // nothing to gather: the compute copy of the master
        if (u->full != u->master)
            st = sh->mem->copy(sh->mem->ctx, u->full, u->master, u->sn * 4);
        if (st == WEFT_OK && sh->o.param_bf16)
            st = round_bf16(sh, u->full, u->sn);
        return st == WEFT_OK ? st : gather_failed(sh, u, st);
    }
    if (sh->o.param_bf16) {
        u->master16 = take_transient(sh, u->sn * 2, 0);
        u->full16 = take_transient(sh, u->pad * 2, 0);
        if (!u->master16 || !u->full16)
            return gather_failed(sh, u, oom("a bf16 gather", u->pad * 2));
        st = sh->mem->to_bf16(sh->mem->ctx, u->master16, u->master, u->sn);
        if (st == WEFT_OK)
            st = coll_start(sh, SHARD_COLL_ALLGATHER, u->master16, u->full16, u->sn,
                            WEFT_BFLOAT16, sh->gcomm, &u->gather);
        if (st != WEFT_OK)
            return gather_failed(sh, u, st);
        sh->st.comm_bytes += (double)(sh->G - 1) * u->sn * 2;
        return WEFT_OK;
    }
    st = coll_start(sh, SHARD_COLL_ALLGATHER, u->master, u->full, u->sn, WEFT_FLOAT32,
                    sh->gcomm, &u->gather);
    if (st != WEFT_OK)
        return gather_failed(sh, u, st);
    sh->st.comm_bytes += (double)(sh->G - 1) * u->sn * 4;
    return WEFT_OK;
}

static weft_status_t gather_wait(shard_t *sh, int i)
{
    unit_t *u = &sh->u[i];
    if (!u->gather)
        return WEFT_OK;
    void *r = u->gather;
    u->gather = NULL;
    RETURN_IF_ERR(timed_wait(sh, r));
    if (u->full16) {
        RETURN_IF_ERR(sh->mem->from_bf16(sh->mem->ctx, u->full, u->full16, u->pad));
        free_transient(sh, u->full16, u->pad * 2);
        free_transient(sh, u->master16, u->sn * 2);
        u->full16 = NULL;
        u->master16 = NULL;
    }
    return WEFT_OK;
}

/* A unit used again within the next prefetch + 1 uses stays gathered (the last block,
 * from the end of forward to the start of backward). */
static int needed_soon(const shard_t *sh, int i)
{
    for (int k = sh->pos; k < sh->norder && k <= sh->pos + sh->o.prefetch; k++)
        if (sh->order[k] == i)
            return 1;
    return 0;
}

static void release(shard_t *sh, int i)
{
    unit_t *u = &sh->u[i];
    if (sh->per_use && u->full && !u->gather && !u->held && !needed_soon(sh, i)) {
        free_transient(sh, u->full, u->pad * 4);
        u->full = NULL;
    }
}

/* ---- gradient reductions ---- */

static weft_status_t job_advance(shard_t *sh, int wait, int *moved);

/* Gives back what job_push took for a job it could not start: the job is not queued. */
static void job_unpush(shard_t *sh, job_t *j, unit_t *u)
{
    size_t es = sh->o.reduce_bf16 ? 2 : 4;
    free_transient(sh, j->g16, u->pad * 2);
    if (sh->rs_flow) {
        free_transient(sh, j->buf, u->sn * es);
        if (j->gfull)
            u->gfull = j->gfull;   // the gradient stays the unit's, freed with it
    }
    memset(j, 0, sizeof(*j));
}

static weft_status_t job_push(shard_t *sh, int unit)
{
    unit_t *u = &sh->u[unit];
    for (int moved = 1; sh->jcount == 2 * sh->nunits && moved;)
        RETURN_IF_ERR(job_advance(sh, 1, &moved));
    job_t *j = &sh->jobs[(sh->jhead + sh->jcount) % (2 * sh->nunits)];
    memset(j, 0, sizeof(*j));
    j->unit = unit;
    j->epoch = sh->hook;
    int bf = sh->o.reduce_bf16;
    size_t es = bf ? 2 : 4;
    weft_dtype_t dt = bf ? WEFT_BFLOAT16 : WEFT_FLOAT32;
    void *src = u->gfull;
    weft_status_t st = WEFT_OK;
    if (bf) {
        if (!(j->g16 = take_transient(sh, u->pad * 2, 0)))
            return oom("a bf16 gradient", u->pad * 2);
        st = sh->mem->to_bf16(sh->mem->ctx, j->g16, u->gfull, u->pad);
        src = j->g16;
    }
    if (st == WEFT_OK && !sh->rs_flow) {   // reduced in place on gfull (or g16)
        j->stage = JOB_AR;
        j->buf = src;
        if (sh->shard_grads) {   // zero1: only this rank's slice is needed
            char *mine = (char *)src + (size_t)sh->gr * u->sn * es;
            st = coll_start(sh, SHARD_COLL_REDUCE_SCATTER, src, mine, u->sn, dt, sh->gcomm,
                            &j->req);
            sh->st.comm_bytes += (double)(sh->G - 1) * u->sn * es;
        } else {                 // none: all-reduce the whole unit
            weft_comm_t *c = sh->R > 1 ? sh->rcomm : sh->gcomm;
            int n = sh->R > 1 ? sh->R : sh->G;
            if (n > 1)
                st = coll_start(sh, SHARD_COLL_ALLREDUCE, src, src, u->len, dt, c, &j->req);
            sh->st.comm_bytes += ar_bytes(sh, n, u->len, es);
        }
    } else if (st == WEFT_OK) {   // reduce-scatter into a shard, then across replicas
        if (!(j->buf = take_transient(sh, u->sn * es, 0))) {
            st = oom("a gradient shard", u->sn * es);
        } else {
            j->gfull = u->gfull;
            u->gfull = NULL;
            j->stage = JOB_RS;
            if (sh->G > 1) {
                st = coll_start(sh, SHARD_COLL_REDUCE_SCATTER, src, j->buf, u->sn, dt,
                                sh->gcomm, &j->req);
                sh->st.comm_bytes += (double)(sh->G - 1) * u->sn * es;
            } else {
                st = sh->mem->copy(sh->mem->ctx, j->buf, src, u->sn * es);
            }
        }
    }
    if (st != WEFT_OK) {
        job_unpush(sh, j, u);
        return st;
    }
    sh->jcount++;
    return WEFT_OK;
}

/* Moves the head job on as far as it goes; *moved = 0 when it must wait. */
static weft_status_t job_advance(shard_t *sh, int wait, int *moved)
{
    job_t *j = &sh->jobs[sh->jhead];
    unit_t *u = &sh->u[j->unit];
    int bf = sh->o.reduce_bf16;
    *moved = 0;
    if (j->req) {
        int done = 0;
        /* Hybrid: a reduce-scatter's end starts an all-reduce on the other communicator,
         * so it must come at the same point of the program on every rank, not when a
         * test happens to say done: with blocking calls (the device table's) ranks that
         * started the two communicators' next calls in different orders would wait for
         * each other in a cycle. A job moves on at the first hook after the one that
         * started its collective, waiting for it there. */
        if (!wait && sh->rs_flow && sh->R > 1) {
            if (j->epoch == sh->hook)
                return WEFT_OK;
        } else if (!wait) {
            RETURN_IF_ERR(sh->mem->test(sh->mem->ctx, j->req, &done));
            if (!done)
                return WEFT_OK;
        }
        void *r = j->req;
        j->req = NULL;
        RETURN_IF_ERR(timed_wait(sh, r));
    }
    *moved = 1;
    if (j->stage == JOB_RS) {
        free_transient(sh, j->gfull, u->pad * 4);
        free_transient(sh, j->g16, u->pad * 2);
        j->gfull = NULL;
        j->g16 = NULL;
        j->stage = JOB_ADD;
        if (sh->R > 1) {
            j->stage = JOB_AR;
            j->epoch = sh->hook;
            RETURN_IF_ERR(coll_start(sh, SHARD_COLL_ALLREDUCE, j->buf, j->buf, u->sn,
                                     bf ? WEFT_BFLOAT16 : WEFT_FLOAT32, sh->rcomm, &j->req));
            sh->st.comm_bytes += ar_bytes(sh, sh->R, u->sn, bf ? 2 : 4);
            return WEFT_OK;
        }
    }
    if (!sh->rs_flow) {   // reduced in place on gfull (or its bf16 copy)
        if (j->g16) {
            size_t lo = sh->shard_grads ? (size_t)sh->gr * u->sn : 0;
            RETURN_IF_ERR(sh->mem->from_bf16(sh->mem->ctx, u->gfull + lo, j->g16 + lo,
                                             sh->shard_grads ? u->sn : u->len));
            free_transient(sh, j->g16, u->pad * 2);
        }
    } else {              // add the reduced shard into the step's gradient
        RETURN_IF_ERR(sh->mem->add(sh->mem->ctx, u->gshard, j->buf, u->sn, bf));
        free_transient(sh, j->buf, u->sn * (bf ? 2 : 4));
    }
    sh->jhead = (sh->jhead + 1) % (2 * sh->nunits);
    sh->jcount--;
    return WEFT_OK;
}

static weft_status_t jobs_poll(shard_t *sh, int wait)
{
    int moved = 1;
    while (sh->jcount > 0 && moved)
        RETURN_IF_ERR(job_advance(sh, wait, &moved));
    return WEFT_OK;
}

weft_status_t shard_errors(shard_t *sh)
{
    if (sh->mem->errors == NULL)
        return WEFT_OK;
    if (sh->gcomm)
        RETURN_IF_ERR(sh->mem->errors(sh->mem->ctx, sh->gcomm));
    if (sh->rcomm)
        RETURN_IF_ERR(sh->mem->errors(sh->mem->ctx, sh->rcomm));
    return WEFT_OK;
}

weft_status_t shard_quiesce(shard_t *sh)
{
    RETURN_IF_ERR(jobs_poll(sh, 1));
    for (int i = 0; i < sh->nunits; i++)
        RETURN_IF_ERR(gather_wait(sh, i));
    return WEFT_OK;
}

void shard_drop_gathered(shard_t *sh)
{
    for (int i = 0; sh->per_use && i < sh->nunits; i++) {
        unit_t *u = &sh->u[i];
        if (u->full && !u->gather && !u->held) {
            free_transient(sh, u->full, u->pad * 4);
            u->full = NULL;
        }
    }
}

weft_status_t shard_round_bf16(shard_t *sh, float *x, size_t n)
{
    return round_bf16(sh, x, n);
}

/* ---- setup ---- */

static weft_status_t check_opts(const shard_opts_t *o, int N, int local_size, int *G_p)
{
    if ((unsigned)o->strategy >= SHARD_NUM_STRATEGIES)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: unknown strategy %d", o->strategy);
    if (o->prefetch < 0)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: prefetch %d < 0", o->prefetch);
    int G = N;
    if (o->strategy == SHARD_NONE)
        G = 1;
    else if (o->strategy == SHARD_HYBRID)
        G = o->group > 0 ? o->group : local_size;
    if (o->group != 0 && o->strategy != SHARD_HYBRID)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: a shard group size is for "
                          "--shard hybrid only");
    if (G < 1 || G > N || N % G != 0)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: shard group of %d ranks does not "
                          "divide the %d ranks", G, N);
    *G_p = G;
    return WEFT_OK;
}

static weft_status_t setup_unit(shard_t *sh, int i, const shard_unit_desc_t *d,
                                const float *params)
{
    unit_t *u = &sh->u[i];
    u->len = d->len;
    u->pad = align_up(d->len ? d->len : 1, 16 * (size_t)sh->G);
    u->sn = u->pad / sh->G;
    u->nsegs = d->nsegs;
    memcpy(u->segs, d->segs, sizeof(u->segs));
    size_t lo = (size_t)sh->gr * u->sn;
    if (!sh->per_use && !(u->full = alloc_state(sh, u->pad * 4)))
        return oom("a unit", u->pad * 4);
    if (sh->sep_master) {
        if (!(u->master = alloc_state(sh, u->sn * 4)))
            return oom("a master shard", u->sn * 4);
    } else {
        u->master = u->full + lo;
    }
    if (lo < u->len)   // params: this unit's; the shard's tail past len stays zero
        RETURN_IF_ERR(sh->mem->upload(sh->mem->ctx, u->master, params + lo,
                                      (u->len - lo < u->sn ? u->len - lo : u->sn) * 4));
    if (!sh->per_use) {
        if (sh->sep_master)
            RETURN_IF_ERR(gather_start(sh, i));   // the bf16 compute copy, as after a step
        else
            RETURN_IF_ERR(sh->mem->upload(sh->mem->ctx, u->full, params, u->len * 4));
    }
    if (!sh->rs_flow) {
        if (!(u->gfull = alloc_state(sh, u->pad * 4)))
            return oom("a gradient", u->pad * 4);
        u->gshard = u->gfull + lo;
    } else if (!(u->gshard = alloc_state(sh, u->sn * 4))) {
        return oom("a gradient shard", u->sn * 4);
    }
    u->m = alloc_state(sh, u->sn * 4);
    u->v = alloc_state(sh, u->sn * 4);
    if (!u->m || !u->v)
        return oom("AdamW moments", u->sn * 8);
    return WEFT_OK;
}

/* Each unit's AdamW runs: within the unit, in order, not overlapping (a float updated
 * twice a step, or one past the unit's parameters, would be wrong without a word). */
static weft_status_t check_units(int nunits, const shard_unit_desc_t *units)
{
    for (int i = 0; i < nunits; i++) {
        const shard_unit_desc_t *d = &units[i];
        if (d->nsegs < 0 || d->nsegs > SHARD_MAX_SEGS)
            return weft_error(WEFT_ERR_INVALID_ARG, "shard: unit %d has %d segments "
                              "(0-%d)", i, d->nsegs, SHARD_MAX_SEGS);
        size_t end = 0;
        for (int k = 0; k < d->nsegs; k++) {
            const shard_seg_t *g = &d->segs[k];
            if (g->off < end || g->len > d->len || g->off > d->len - g->len)
                return weft_error(WEFT_ERR_INVALID_ARG, "shard: unit %d's segment %d "
                                  "(floats %zu + %zu) is not within its %zu floats after "
                                  "the segment before it", i, k, g->off, g->len, d->len);
            end = g->off + g->len;
        }
    }
    return WEFT_OK;
}

weft_status_t shard_create(shard_t **sh_p, weft_comm_t *world, const shard_opts_t *o,
                           int nunits, const shard_unit_desc_t *units, const float *params)
{
    if (!sh_p || !world || !o || !units || !params)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: shard_create given a NULL %s",
                          !sh_p ? "sh_p" : !world ? "world" : !o ? "o" : !units ? "units"
                                                                              : "params");
    int N = weft_comm_size(world), r = weft_comm_rank(world), G = 1;
    if (nunits < 2)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: %d units (need at least 2)", nunits);
    /* every rank must reach the same G (hybrid's default is a host's ranks, which
     * differ where hosts hold different numbers of ranks): agreed before anything else,
     * so that all fail together instead of splitting differently and waiting */
    weft_status_t ck = check_opts(o, N, weft_comm_local_size(world), &G);
    if (ck == WEFT_OK)
        ck = check_units(nunits, units);
    /* hybrid's default groups (ranks r / G) are hosts only where each host's ranks are
     * consecutive: a launcher that deals ranks out cyclically (srun --distribution=cyclic,
     * mpirun --map-by node) would make every group span hosts, silently */
    int lr = weft_comm_local_rank(world);
    int placed = !(o->strategy == SHARD_HYBRID && o->group == 0 && G > 1) || lr == r % G;
    /* agg[2]: the first rank out of place (N where none is), so every rank names it */
    int32_t mine[3] = { ck == WEFT_OK ? G : -1, ck == WEFT_OK ? -G : 1, placed ? N : r };
    int32_t agg[3];
    weft_status_t as = weft_allreduce(mine, agg, 3, WEFT_INT32, WEFT_MIN, world);
    if (ck != WEFT_OK)
        return ck;
    RETURN_IF_ERR(as);
    if (agg[0] < 1)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: another rank refused the shard "
                          "options (its own error says why)");
    if (agg[0] != -agg[1])
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: the ranks reach different shard "
                          "group sizes (%d to %d): with --shard hybrid the default group is "
                          "a host's ranks, and the hosts hold different numbers; give "
                          "--shard-group", agg[0], -agg[1]);
    if (agg[2] < N) {
        int f = agg[2];
        char who[160];
        if (f == r)   // the rank named knows where it is
            snprintf(who, sizeof(who), "rank %d is not local rank %d on its host but %d: its "
                     "group %d would span hosts", f, f % G, lr, f / G);
        else
            snprintf(who, sizeof(who), "rank %d is not local rank %d on its host: its "
                     "group %d would span hosts", f, f % G, f / G);
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: --shard hybrid's default group is "
                          "a host's ranks, but the ranks are not placed in blocks per host "
                          "(%s); place them in blocks (srun --distribution=block, mpirun "
                          "--map-by slot) or give --shard-group", who);
    }
    shard_t *sh = calloc(1, sizeof(*sh));
    if (!sh)
        return oom("the shard state", sizeof(*sh));
    weft_status_t st = WEFT_OK;
    sh->o = *o;
    sh->mem = o->mem ? o->mem : &host_mem;
    sh->nranks = N;
    sh->rank = r;
    sh->G = G;
    sh->R = N / G;
    sh->gr = r % G;
    sh->per_use = o->strategy == SHARD_FULL || o->strategy == SHARD_HYBRID;
    sh->rs_flow = o->strategy >= SHARD_GRAD_OP;
    sh->shard_grads = sh->rs_flow || (o->strategy == SHARD_ZERO1 && G > 1);
    sh->sep_master = sh->per_use || o->param_bf16;
    sh->nunits = nunits;
    sh->u = calloc((size_t)nunits, sizeof(unit_t));
    sh->jobs = calloc(2 * (size_t)nunits, sizeof(job_t));
    sh->order = calloc(2 * (size_t)nunits, sizeof(int));
    if (!sh->u || !sh->jobs || !sh->order) {
        st = oom("the shard state", (size_t)nunits * sizeof(unit_t));
        goto fail;
    }
    // the group: ranks r / G; the replicas: ranks r % G (split keeps world order)
    if (G > 1)
        GOTO_IF_ERR(weft_comm_split(world, r / G, r, &sh->gcomm), st, fail);
    if (sh->R > 1)
        GOTO_IF_ERR(weft_comm_split(world, r % G, r, &sh->rcomm), st, fail);
    size_t off = 0;
    for (int i = 0; st == WEFT_OK && i < nunits; i++) {
        st = setup_unit(sh, i, &units[i], params + off);
        off += units[i].len;
    }
    /* every rank set up, or none goes on: a rank that ran out of memory here would never
     * start the gathers the others would soon wait for */
    int32_t ok = st == WEFT_OK, all_ok = 0;
    weft_status_t agreed = weft_allreduce(&ok, &all_ok, 1, WEFT_INT32, WEFT_MIN, world);
    if (st == WEFT_OK && agreed != WEFT_OK)
        st = agreed;
    else if (st == WEFT_OK && !all_ok)
        st = weft_error(WEFT_ERR_PEER_LOST, "shard: another rank could not set up its shards "
                        "(its own error says why)");
    if (st != WEFT_OK) {
        /* gathers setup_unit started (bf16 parameters) wait for the failed rank's part:
         * the abort ends them at once, so shard_destroy does not wait WEFT_TIMEOUT; the
         * error said first is the one the caller gets */
        char why[512];
        snprintf(why, sizeof(why), "%s", weft_last_error());
        if (sh->gcomm)
            weft_comm_abort(sh->gcomm);
        if (sh->rcomm)
            weft_comm_abort(sh->rcomm);
        shard_destroy(sh);
        return weft_error_quiet(st, "%s", why);
    }
    *sh_p = sh;
    return WEFT_OK;
fail:
    shard_destroy(sh);
    return st;
}

void shard_destroy(shard_t *sh)
{
    if (!sh)
        return;
    // requests still in flight complete (or fail) before their buffers go
    const shard_mem_t *mm = sh->mem;
    for (int i = 0; i < sh->jcount; i++) {
        job_t *j = &sh->jobs[(sh->jhead + i) % (2 * sh->nunits)];
        if (j->req)
            mm->wait(mm->ctx, j->req);
        mem_free(sh, j->gfull);
        mem_free(sh, j->g16);
        if (sh->rs_flow)
            mem_free(sh, j->buf);   // else it is gfull or g16
    }
    for (int i = 0; sh->u && i < sh->nunits; i++) {
        unit_t *u = &sh->u[i];
        if (u->gather)
            mm->wait(mm->ctx, u->gather);
        mem_free(sh, u->full16);
        mem_free(sh, u->master16);
        if (sh->sep_master)
            mem_free(sh, u->master);
        mem_free(sh, u->full);
        if (sh->rs_flow)
            mem_free(sh, u->gshard);
        mem_free(sh, u->gfull);
        mem_free(sh, u->m);
        mem_free(sh, u->v);
    }
    if (sh->gcomm)
        weft_comm_destroy(sh->gcomm);
    if (sh->rcomm)
        weft_comm_destroy(sh->rcomm);
    for (int i = 0; i < sh->npool; i++)
        mem_free(sh, sh->pool[i].p);
    free(sh->ckpt_host);
    free(sh->pool);
    free(sh->u);
    free(sh->jobs);
    free(sh->order);
    free(sh);
}

/* ---- the micro-batch and the hooks ---- */

weft_status_t shard_micro_begin(shard_t *sh, int training, int sync)
{
    /* none and zero1 reduce gfull in place, where the step's micro-batches add up: a
     * micro-batch after the reduced one would be reduced again with it */
    if (training && sh->step_synced && !sh->rs_flow && sh->nranks > 1)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: a training micro-batch after this "
                          "step's synchronized one (sync = 1 goes on the step's last "
                          "micro-batch only; shard_adamw ends the step)");
    sh->micro++;
    sh->step_micro += training;
    sh->step_synced |= training && sync;
    sh->training = training;
    sh->sync = sync || sh->rs_flow;
    int n = sh->nunits;
    sh->norder = 0;
    for (int i = 0; i < n; i++)
        sh->order[sh->norder++] = i;
    if (training)
        for (int i = n - 2; i >= 1; i--)
            sh->order[sh->norder++] = i;
    sh->pos = 0;
    sh->hook++;
    RETURN_IF_ERR(jobs_poll(sh, 0));
    /* the first units' gathers start now (the update started them for the step's first
     * micro-batch; not for the next ones, or for validation batches) */
    for (int k = 0; sh->per_use && k < sh->o.prefetch && k < sh->norder; k++)
        if (!sh->u[sh->order[k]].full)
            RETURN_IF_ERR(gather_start(sh, sh->order[k]));
    return WEFT_OK;
}

static weft_status_t prefetch_after(shard_t *sh, int unit)
{
    int i = sh->pos;
    while (i < sh->norder && sh->order[i] != unit)
        i++;
    if (i == sh->norder)
        return WEFT_OK;   // a unit that stays gathered (0 or n-1 in backward)
    sh->pos = i + 1;
    for (int k = 0; k < sh->o.prefetch && sh->pos + k < sh->norder; k++) {
        unit_t *u = &sh->u[sh->order[sh->pos + k]];
        if (!u->full || u->gather)
            RETURN_IF_ERR(gather_start(sh, sh->order[sh->pos + k]));
    }
    return WEFT_OK;
}

weft_status_t shard_params(shard_t *sh, int i, int pass, float **params_p)
{
    if (i < 0 || i >= sh->nunits)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: no unit %d", i);
    unit_t *u = &sh->u[i];
    sh->hook++;
    RETURN_IF_ERR(jobs_poll(sh, 0));
    if (sh->per_use && !u->full)
        RETURN_IF_ERR(gather_start(sh, i));
    RETURN_IF_ERR(gather_wait(sh, i));
    u->held = 1;
    if (sh->per_use)
        RETURN_IF_ERR(prefetch_after(sh, i));
    *params_p = u->full;
    return WEFT_OK;
}

weft_status_t shard_params_done(shard_t *sh, int i, int pass)
{
    if (i < 0 || i >= sh->nunits)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: no unit %d", i);
    sh->u[i].held = 0;
    release(sh, i);
    return WEFT_OK;
}

weft_status_t shard_grads(shard_t *sh, int i, float **grads_p)
{
    if (i < 0 || i >= sh->nunits)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: no unit %d", i);
    unit_t *u = &sh->u[i];
    if (!u->gfull && !(u->gfull = take_transient(sh, u->pad * 4, 1)))
        return oom("a gradient", u->pad * 4);
    *grads_p = u->gfull;
    return WEFT_OK;
}

weft_status_t shard_grads_done(shard_t *sh, int i)
{
    if (i < 0 || i >= sh->nunits || !sh->u[i].gfull)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: unit %d has no gradient", i);
    /* none and zero1 keep gfull, so the check above passes a second report, which would
     * reduce (and add up) the unit's gradient twice */
    if (sh->micro != 0 && sh->u[i].grads_micro == sh->micro)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: unit %d's gradient was already "
                          "reported in this micro-batch (shard_grads_done once per unit "
                          "after each shard_micro_begin)", i);
    sh->u[i].grads_micro = sh->micro;
    sh->hook++;
    if (sh->sync)
        RETURN_IF_ERR(job_push(sh, i));
    return jobs_poll(sh, 0);
}

/* ---- the step ---- */

/* A step's gradients that were never reduced would update each rank its own way (one
 * rank has nothing to reduce). */
static weft_status_t check_reduced(const shard_t *sh, const char *what)
{
    if (sh->step_micro > 0 && !sh->step_synced && !sh->rs_flow && sh->nranks > 1)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: %s after %d training micro-batch(es) "
                          "none of which reduced its gradients (give sync = 1 to the "
                          "step's last shard_micro_begin)", what, sh->step_micro);
    return WEFT_OK;
}

weft_status_t shard_clip(shard_t *sh, float clip, float *norm_p)
{
    RETURN_IF_ERR(check_reduced(sh, "shard_clip"));
    RETURN_IF_ERR(jobs_poll(sh, 1));
    double ss = 0.0;
    const float **x = malloc((size_t)sh->nunits * sizeof(*x));
    size_t *n = malloc((size_t)sh->nunits * sizeof(*n));
    weft_status_t st = x && n ? WEFT_OK : oom("the norm's list", (size_t)sh->nunits * 16);
    for (int i = 0; st == WEFT_OK && i < sh->nunits; i++) {
        unit_t *u = &sh->u[i];
        x[i] = sh->shard_grads ? u->gshard : u->gfull;
        n[i] = sh->shard_grads ? u->sn : u->len;
    }
    if (st == WEFT_OK)
        st = sh->mem->sumsq(sh->mem->ctx, x, n, sh->nunits, &ss);
    free(x);
    free(n);
    RETURN_IF_ERR(st);
    // the reductions are done (sumsq waited): one that failed late must stop the update
    RETURN_IF_ERR(shard_errors(sh));
    if (sh->shard_grads && sh->G > 1) {   // each group holds the gradient once, in shards
        double t0 = time_s();
        RETURN_IF_ERR(weft_allreduce(&ss, &ss, 1, WEFT_FLOAT64, WEFT_SUM, sh->gcomm));
        sh->st.exposed_ms += (time_s() - t0) * 1e3;
        sh->st.comm_bytes += ar_bytes(sh, sh->G, 1, 8);
    }
    float norm = (float)sqrt(ss);
    if (clip > 0.0f) {
        float coef = clip / (norm + 1e-6f);
        for (int i = 0; coef < 1.0f && i < sh->nunits; i++)   // what the update reads
            RETURN_IF_ERR(sh->mem->scale(sh->mem->ctx, sh->u[i].gshard, coef, sh->u[i].sn));
    }
    *norm_p = norm;
    return WEFT_OK;
}

static weft_status_t adamw_unit(shard_t *sh, unit_t *u, float lr, float b1, float b2,
                                float eps, float wd, int t)
{
    size_t lo = (size_t)sh->gr * u->sn, hi = lo + u->sn;
    for (int s = 0; s < u->nsegs; s++) {
        size_t a = u->segs[s].off, b = a + u->segs[s].len;
        if (a < lo)
            a = lo;
        if (b > hi)
            b = hi;
        if (a >= b)
            continue;
        RETURN_IF_ERR(sh->mem->adamw(sh->mem->ctx, u->master + (a - lo), u->m + (a - lo),
                                     u->v + (a - lo), u->gshard + (a - lo), b - a, lr, b1, b2,
                                     eps, u->segs[s].decays ? wd : 0.0f, t));
    }
    return WEFT_OK;
}

weft_status_t shard_adamw(shard_t *sh, float lr, float beta1, float beta2, float eps,
                          float wd, int t)
{
    if (t < 1)
        return weft_error(WEFT_ERR_INVALID_ARG, "shard: AdamW step %d < 1", t);
    RETURN_IF_ERR(check_reduced(sh, "shard_adamw"));
    RETURN_IF_ERR(jobs_poll(sh, 1));
    for (int i = 0; i < sh->nunits; i++)   // a gather in flight reads the master we update
        RETURN_IF_ERR(gather_wait(sh, i));
    sh->step_micro = 0;
    sh->step_synced = 0;
    for (int i = 0; i < sh->nunits; i++) {
        unit_t *u = &sh->u[i];
        RETURN_IF_ERR(adamw_unit(sh, u, lr, beta1, beta2, eps, wd, t));
        if (sh->rs_flow)
            RETURN_IF_ERR(sh->mem->zero(sh->mem->ctx, u->gshard, u->sn * 4));
        else
            RETURN_IF_ERR(sh->mem->zero(sh->mem->ctx, u->gfull, u->pad * 4));
    }
    // what the next forward needs: every unit again (persistent), or the first ones
    if (!sh->per_use) {
        for (int i = 0; i < sh->nunits; i++) {
            if (sh->G > 1 || sh->u[i].full != sh->u[i].master)
                RETURN_IF_ERR(gather_start(sh, i));
        }
    } else {
        /* the first units for the next forward, and any unit still gathered (a forward
         * without its backward, such as an evaluation, leaves the first and last held):
         * what they hold predates this update */
        for (int i = 0; i < sh->nunits; i++)
            if (i < sh->o.prefetch || sh->u[i].full)
                RETURN_IF_ERR(gather_start(sh, i));
    }
    return WEFT_OK;
}

weft_status_t shard_export(shard_t *sh, float *params)
{
    RETURN_IF_ERR(jobs_poll(sh, 1));
    size_t off = 0;
    for (int i = 0; i < sh->nunits; i++) {
        unit_t *u = &sh->u[i];
        RETURN_IF_ERR(gather_wait(sh, i));   // queued gathers first, in order
        float *all = take_transient(sh, u->pad * 4, 0);
        if (!all)
            return oom("an exported unit", u->pad * 4);
        weft_status_t st = WEFT_OK;
        void *req = NULL;
        if (sh->G > 1 && (st = coll_start(sh, SHARD_COLL_ALLGATHER, u->master, all, u->sn,
                                          WEFT_FLOAT32, sh->gcomm, &req)) == WEFT_OK)
            st = timed_wait(sh, req);
        else if (sh->G == 1)
            st = sh->mem->copy(sh->mem->ctx, all, u->master, u->sn * 4);
        if (st == WEFT_OK)
            st = sh->mem->download(sh->mem->ctx, params + off, all, u->len * 4);
        free_transient(sh, all, u->pad * 4);
        RETURN_IF_ERR(st);
        release(sh, i);
        off += u->len;
    }
    return shard_errors(sh);   // the downloads waited for the gathers
}

void shard_stats(const shard_t *sh, shard_stats_t *s)
{
    *s = sh->st;
}

void shard_stats_reset(shard_t *sh)
{
    sh->st.exposed_ms = 0.0;
    sh->st.comm_bytes = 0.0;
    sh->st.transient_peak = sh->transient;
}
