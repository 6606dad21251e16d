/*
 * simexec.c - the transport-free executor: N ranks' schedules, one process, one thread.
 *
 * Every rank gets the state the engine keeps (per-step bytes and frames, a cursor per
 * peer and direction, the local cursor) and its own scratch and address buffers; a link
 * (sender, receiver) is a FIFO of frames whose payloads were copied when sent, as a
 * transport's staging copies them. Passes visit every rank in turn and move whatever
 * can move, in the engine's order; the call ends when every step of every rank is
 * complete. Frames are cut at the schedule's chunk and a stream source's progress, and
 * a link holding `staging` bytes takes no more until its receiver drains it, so a
 * schedule that would deadlock on a real staging ring deadlocks here too.
 *
 * With check_keep, the bytes of every frame a `keep` send step sent (schedule.h) must be
 * unchanged when the call ends, where a transport may still be reading them.
 *
 * Invariants: a step runs with the engine's semantics (engine.c: progress_send,
 * progress_recv, run_local, run_rget) and the engine's kernels; a frame is checked
 * against the receiving step (room, whole elements) before its payload is touched.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frame.h"
#include "reduce.h"
#include "simexec.h"
#include "status.h"
#include "util.h"

typedef struct sim_frame {
    struct sim_frame *next;
    size_t len;
    size_t channel;             /* the sending step's; the receiving step's must match (a
                                   size_t: data[] stays 8-byte aligned for the kernels) */
    char data[];
} sim_frame_t;

/* A frame of a `keep` send (check_keep): its source and the bytes it had when sent. */
typedef struct sim_kept {
    struct sim_kept *next;
    int rank, step;
    const char *src;
    size_t off, len;
    char data[];
} sim_kept_t;

typedef struct sim_link {
    sim_frame_t *head, *tail;
    size_t bytes;
} sim_link_t;

typedef struct sim_rank {
    sched_args_t a;
    sched_t s;
    int built;
    const char *send;
    char *recv, *tmp;
    sched_meta_t meta_out, *meta_in;    /* meta_in: [nranks] */
    size_t *done;                       /* [nsteps] bytes moved / produced */
    uint32_t *frames;                   /* [nsteps] */
    uint8_t *complete;                  /* [nsteps] */
    int *cursor;                        /* [2 * nranks]: send, recv queue per peer */
    int local_cursor, ncomplete;
} sim_rank_t;

typedef struct sim {
    int n;
    size_t staging;
    sim_rank_t *r;      /* [n] */
    sim_link_t *link;   /* [n * n], link[from * n + to] */
    int *rank_host;     /* [n] each rank's host (what every layout points to), or NULL */
    int check_keep;
    sim_kept_t *kept;
} sim_t;

static char *buf_at(sim_rank_t *r, int buf, size_t off, size_t len)
{
    char *base;
    switch (buf) {
    case BUF_SEND:     base = (char *)r->send; break;
    case BUF_RECV:     base = r->recv; break;
    case BUF_TMP:      base = r->tmp; break;
    case BUF_META_OUT: base = (char *)&r->meta_out; break;
    case BUF_META_IN:  base = (char *)r->meta_in; break;
    default:           base = NULL; break;
    }
    return base && len ? base + off : NULL;
}

static weft_status_t rank_init(sim_t *sim, const sim_call_t *c, int rank, const void *send,
                               void *recv)
{
    sim_rank_t *r = &sim->r[rank];
    int n = sim->n;
    r->a = c->rank_args ? c->rank_args[rank] : c->args;
    r->a.rank = rank;
    if (c->host_id) {
        algo_layout(c->host_id, n, rank, c->cma, &r->a.layout);
        r->a.layout.rank_host = sim->rank_host;
    } else {
        r->a.layout = (sched_layout_t){ .nhosts = 1, .per_host = n, .local_rank = rank,
                                        .cma = c->cma, .uniform = 1 };
    }
    RETURN_IF_ERR(algo_build(c->algo, &r->a, c->root_check, &r->s));
    r->built = 1;
    if (sim->check_keep)
        sched_mark_keep(&r->s, r->a.inplace);
    r->send = send;
    r->recv = recv;
    size_t ns = (size_t)(r->s.nsteps ? r->s.nsteps : 1);
    r->tmp = r->s.tmp_bytes ? malloc(r->s.tmp_bytes) : NULL;
    r->meta_in = calloc((size_t)n, sizeof(sched_meta_t));
    r->done = calloc(ns, sizeof(size_t));
    r->frames = calloc(ns, sizeof(uint32_t));
    r->complete = calloc(ns, 1);
    r->cursor = malloc(2 * (size_t)n * sizeof(int));
    if ((r->s.tmp_bytes && !r->tmp) || !r->meta_in || !r->done || !r->frames ||
        !r->complete || !r->cursor)
        return weft_error(WEFT_ERR_NO_MEMORY, "simexec: out of memory");
    for (int p = 0; p < n; p++) {
        r->cursor[2 * p] = r->s.head_send[p];
        r->cursor[2 * p + 1] = r->s.head_recv[p];
    }
    memset(&r->meta_out, 0, sizeof(r->meta_out));
    r->meta_out.send = (uint64_t)(uintptr_t)send;
    r->meta_out.recv = (uint64_t)(uintptr_t)recv;
    r->meta_out.inplace = (uint32_t)r->a.inplace;
    return WEFT_OK;
}

static void rank_free(sim_rank_t *r)
{
    if (r->built)
        sched_free(&r->s);
    free(r->tmp);
    free(r->meta_in);
    free(r->done);
    free(r->frames);
    free(r->complete);
    free(r->cursor);
}

static int deps_met(const sim_rank_t *r, int i)
{
    const sched_step_t *st = &r->s.steps[i];
    if (st->dep >= 0 && !r->complete[st->dep])
        return 0;
    for (int j = 0; st->after_all && j < i; j++)
        if (!r->complete[j])
            return 0;
    return 1;
}

static void complete(sim_rank_t *r, int i)
{
    r->complete[i] = 1;
    r->ncomplete++;
}

/* Frames of send step i onto its link, until done, blocked, or the stream runs dry. */
static weft_status_t run_send(sim_t *sim, int rank, int i, int *moved)
{
    sim_rank_t *r = &sim->r[rank];
    const sched_step_t *st = &r->s.steps[i];
    sim_link_t *l = &sim->link[rank * sim->n + st->peer];
    for (;;) {
        size_t avail = st->stream >= 0 ? r->done[st->stream] : st->len;
        if (r->done[i] == st->len && r->frames[i] > 0)
            return WEFT_OK;
        size_t len = WEFT_MIN(r->s.chunk, avail - r->done[i]);
        if (len == 0 && st->len != 0)
            return WEFT_IN_PROGRESS;            /* waiting for the stream source */
        if (sim->staging && l->head && l->bytes + len > sim->staging)
            return WEFT_IN_PROGRESS;            /* the link is full */
        sim_frame_t *f = malloc(sizeof(*f) + len);
        if (f == NULL)
            return weft_error(WEFT_ERR_NO_MEMORY, "simexec: out of memory");
        f->next = NULL;
        f->len = len;
        f->channel = st->channel;
        const char *src = buf_at(r, st->src_buf, st->src_off + r->done[i], len);
        if (len)
            memcpy(f->data, src, len);
        if (len && st->keep && sim->check_keep) {
            sim_kept_t *k = malloc(sizeof(*k) + len);
            if (k == NULL) {
                free(f);
                return weft_error(WEFT_ERR_NO_MEMORY, "simexec: out of memory");
            }
            *k = (sim_kept_t){ .next = sim->kept, .rank = rank, .step = i, .src = src,
                               .off = st->src_off + r->done[i], .len = len };
            memcpy(k->data, src, len);
            sim->kept = k;
        }
        if (l->tail)
            l->tail->next = f;
        else
            l->head = f;
        l->tail = f;
        l->bytes += len;
        r->done[i] += len;
        r->frames[i]++;
        *moved = 1;
    }
}

static weft_status_t run_recv(sim_t *sim, int rank, int i, int *moved)
{
    sim_rank_t *r = &sim->r[rank];
    const sched_step_t *st = &r->s.steps[i];
    sim_link_t *l = &sim->link[st->peer * sim->n + rank];
    size_t esz = weft_dtype_size(r->a.dtype);
    while (!(r->done[i] == st->len && r->frames[i] > 0)) {
        sim_frame_t *f = l->head;
        if (f == NULL)
            return WEFT_IN_PROGRESS;
        if (f->channel != st->channel)
            return weft_error(WEFT_ERR_MISMATCH, "simexec: rank %d step %d (%s) is on channel "
                              "%u; rank %d sent a frame of channel %zu", rank, i, r->s.algo,
                              st->channel, st->peer, f->channel);
        if (f->len > st->len - r->done[i] || f->len % esz != 0)
            return weft_error(WEFT_ERR_MISMATCH, "simexec: rank %d step %d (%s) has room for "
                              "%zu bytes; rank %d sent a frame of %zu", rank, i, r->s.algo,
                              st->len - r->done[i], st->peer, f->len);
        if (st->stream >= 0 && r->done[st->stream] < r->done[i] + f->len)
            return WEFT_IN_PROGRESS;            /* its bytes are not sent yet (in place) */
        char *dst = buf_at(r, st->dst_buf, st->dst_off + r->done[i], f->len);
        if (st->kind == STEP_RECV && f->len) {
            memcpy(dst, f->data, f->len);
        } else if (f->len) {
            const char *src = buf_at(r, st->src_buf, st->src_off + r->done[i], f->len);
            const void *x = st->swap ? f->data : src, *y = st->swap ? src : f->data;
            kern_reduce(dst, x, y, f->len / esz, r->a.dtype, r->a.op,
                        st->final ? r->a.nranks : 0);
        }
        l->head = f->next;
        if (l->head == NULL)
            l->tail = NULL;
        l->bytes -= f->len;
        r->done[i] += f->len;
        r->frames[i]++;
        free(f);
        *moved = 1;
    }
    return WEFT_OK;
}

/* A single-copy read of the peer's buffer, at the address its META frame gave. */
static void run_rget(sim_rank_t *r, const sched_step_t *st)
{
    const sched_meta_t *m = &r->meta_in[st->peer];
    const char *rp = (const char *)(uintptr_t)(st->rbuf == BUF_SEND ? m->send : m->recv) +
                     st->roff;
    char *dst = buf_at(r, st->dst_buf, st->dst_off, st->len);
    if (st->kind == STEP_RGET) {
        memcpy(dst, rp, st->len);
        return;
    }
    kern_reduce(dst, buf_at(r, st->src_buf, st->src_off, st->len), rp,
                st->len / weft_dtype_size(r->a.dtype), r->a.dtype, r->a.op,
                st->final ? r->a.nranks : 0);
}

static void run_local(sim_rank_t *r, const sched_step_t *st)
{
    const sched_args_t *a = &r->a;
    size_t esz = weft_dtype_size(a->dtype), n = st->len / esz;
    int div = st->final && a->op == WEFT_AVG ? a->nranks : 0;
    if (st->len == 0)
        return;
    if (st->kind == STEP_RGET || st->kind == STEP_RGET_REDUCE) {
        run_rget(r, st);
        return;
    }
    char *dst = buf_at(r, st->dst_buf, st->dst_off, st->len);
    const char *src = buf_at(r, st->src_buf, st->src_off, st->len);
    if (st->kind == STEP_COPY || st->nslots == 1) {
        if (st->kind == STEP_FOLD && div)
            kern_divide(dst, src, n, a->dtype, div);
        else if (dst != src)
            memmove(dst, src, st->len);
        return;
    }
    for (int k = 1; k < st->nslots; k++)
        kern_reduce(dst, k == 1 ? src : dst, src + (size_t)k * st->slot_stride, n, a->dtype,
                    a->op, k == st->nslots - 1 ? div : 0);
}

/* One queue of one rank as far as it goes. */
static weft_status_t run_queue(sim_t *sim, int rank, int *cursor, int send, int *moved)
{
    sim_rank_t *r = &sim->r[rank];
    while (*cursor >= 0) {
        int i = *cursor;
        if (!deps_met(r, i))
            return WEFT_OK;
        weft_status_t st = send ? run_send(sim, rank, i, moved)
                                : run_recv(sim, rank, i, moved);
        if (st == WEFT_IN_PROGRESS)
            return WEFT_OK;
        RETURN_IF_ERR(st);
        complete(r, i);
        *cursor = r->s.next_same[i];
        *moved = 1;
    }
    return WEFT_OK;
}

/* One engine pass of one rank. */
static weft_status_t pass(sim_t *sim, int rank, int *moved)
{
    sim_rank_t *r = &sim->r[rank];
    for (int p = 0; p < sim->n; p++) {
        RETURN_IF_ERR(run_queue(sim, rank, &r->cursor[2 * p], 1, moved));
        RETURN_IF_ERR(run_queue(sim, rank, &r->cursor[2 * p + 1], 0, moved));
    }
    while (r->local_cursor < r->s.nlocals) {
        int i = r->s.locals[r->local_cursor];
        if (!deps_met(r, i))
            break;
        run_local(r, &r->s.steps[i]);
        complete(r, i);
        r->local_cursor++;
        *moved = 1;
    }
    return WEFT_OK;
}

/* Names the first rank that cannot finish, and the step it waits in. */
static weft_status_t stuck(const sim_t *sim)
{
    for (int q = 0; q < sim->n; q++) {
        const sim_rank_t *r = &sim->r[q];
        for (int i = 0; i < r->s.nsteps; i++)
            if (!r->complete[i])
                return weft_error(WEFT_ERR_INTERNAL, "simexec: %s on %d ranks: no rank can "
                                  "move; rank %d waits in step %d (kind %d, peer %d)",
                                  r->s.algo, sim->n, q, i, r->s.steps[i].kind,
                                  r->s.steps[i].peer);
    }
    return WEFT_ERR_INTERNAL;
}

static weft_status_t run_all(sim_t *sim)
{
    for (;;) {
        int moved = 0, left = 0;
        for (int q = 0; q < sim->n; q++) {
            RETURN_IF_ERR(pass(sim, q, &moved));
            left += sim->r[q].ncomplete < sim->r[q].s.nsteps;
        }
        if (!left)
            break;
        if (!moved)
            return stuck(sim);
    }
    for (int k = 0; k < sim->n * sim->n; k++)
        if (sim->link[k].head)
            return weft_error(WEFT_ERR_INTERNAL, "simexec: rank %d sent rank %d frames no "
                              "step received", k / sim->n, k % sim->n);
    /* a transport may read a kept frame's bytes until the call ends: they must not have
     * changed since it was sent */
    for (const sim_kept_t *k = sim->kept; k; k = k->next)
        if (memcmp(k->src, k->data, k->len) != 0)
            return weft_error(WEFT_ERR_INTERNAL, "simexec: %s on %d ranks: rank %d step %d "
                              "is marked keep, but its source bytes at %zu (%zu) changed "
                              "before the call ended", sim->r[k->rank].s.algo, sim->n,
                              k->rank, k->step, k->off, k->len);
    return WEFT_OK;
}

/* After a probe (reg == SCHED_REG_ALL) every rank already has every rank's addresses. */
static void share_meta(sim_t *sim)
{
    for (int q = 0; q < sim->n; q++)
        for (int p = 0; p < sim->n; p++)
            sim->r[q].meta_in[p] = sim->r[p].meta_out;
}

weft_status_t simexec_run(const sim_call_t *c, const void *const *send, void *const *recv)
{
    sim_t sim = { .n = c->args.nranks, .staging = c->staging, .check_keep = c->check_keep };
    weft_status_t st = WEFT_OK;
    sim.r = calloc((size_t)sim.n, sizeof(*sim.r));
    sim.link = calloc((size_t)sim.n * (size_t)sim.n, sizeof(*sim.link));
    if (c->host_id && (sim.rank_host = malloc((size_t)sim.n * sizeof(int))) != NULL)
        algo_host_map(c->host_id, sim.n, sim.rank_host);
    if (sim.r == NULL || sim.link == NULL || (c->host_id && sim.rank_host == NULL))
        st = weft_error(WEFT_ERR_NO_MEMORY, "simexec: out of memory");
    for (int q = 0; st == WEFT_OK && q < sim.n; q++)
        st = rank_init(&sim, c, q, send[q], recv[q]);
    if (st == WEFT_OK && c->args.reg == SCHED_REG_ALL)
        share_meta(&sim);
    if (st == WEFT_OK)
        st = run_all(&sim);
    for (int k = 0; sim.link && k < sim.n * sim.n; k++)
        while (sim.link[k].head) {
            sim_frame_t *f = sim.link[k].head;
            sim.link[k].head = f->next;
            free(f);
        }
    while (sim.kept) {
        sim_kept_t *k = sim.kept;
        sim.kept = k->next;
        free(k);
    }
    for (int q = 0; sim.r && q < sim.n; q++)
        rank_free(&sim.r[q]);
    free(sim.r);
    free(sim.link);
    free(sim.rank_host);
    return st;
}
