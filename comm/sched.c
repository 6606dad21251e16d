/*
 * sched.c - building schedules: append steps, then derive the per-peer queues.
 *
 * Invariant: after sched_finish succeeds, next_same/head_send/head_recv/locals/peers
 * describe exactly the steps array, and no step refers to a later step through dep or stream
 * (algorithms only depend backwards, which is what makes a schedule deadlock-free when
 * every peer's queues progress together).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "schedule.h"
#include "status.h"

void sched_init(sched_t *s, const char *algo, size_t chunk)
{
    memset(s, 0, sizeof(*s));
    s->algo = algo;
    s->chunk = chunk;
}

int sched_add(sched_t *s, sched_step_t step)
{
    if (s->oom)
        return -1;
    if (s->nsteps == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        sched_step_t *p = realloc(s->steps, (size_t)cap * sizeof(*p));
        if (p == NULL) {
            s->oom = 1;
            return -1;
        }
        s->steps = p;
        s->cap = cap;
    }
    s->steps[s->nsteps] = step;
    return s->nsteps++;
}

static sched_step_t step_new(int kind)
{
    sched_step_t st;
    memset(&st, 0, sizeof(st));
    st.kind = (uint8_t)kind;
    st.peer = -1;
    st.dep = -1;
    st.stream = -1;
    return st;
}

int sched_send(sched_t *s, int peer, int buf, size_t off, size_t len, int stream)
{
    sched_step_t st = step_new(STEP_SEND);
    st.peer = peer;
    st.src_buf = (uint8_t)buf;
    st.src_off = off;
    st.len = len;
    st.stream = stream;
    return sched_add(s, st);
}

int sched_recv(sched_t *s, int peer, int buf, size_t off, size_t len)
{
    sched_step_t st = step_new(STEP_RECV);
    st.peer = peer;
    st.dst_buf = (uint8_t)buf;
    st.dst_off = off;
    st.len = len;
    return sched_add(s, st);
}

int sched_recv_reduce(sched_t *s, int peer, int dst, size_t dst_off, int src, size_t src_off,
                      size_t len, int final)
{
    sched_step_t st = step_new(STEP_RECV_REDUCE);
    st.peer = peer;
    st.dst_buf = (uint8_t)dst;
    st.dst_off = dst_off;
    st.src_buf = (uint8_t)src;
    st.src_off = src_off;
    st.len = len;
    st.final = (uint8_t)final;
    return sched_add(s, st);
}

int sched_copy(sched_t *s, int dst, size_t dst_off, int src, size_t src_off, size_t len)
{
    sched_step_t st = step_new(STEP_COPY);
    st.dst_buf = (uint8_t)dst;
    st.dst_off = dst_off;
    st.src_buf = (uint8_t)src;
    st.src_off = src_off;
    st.len = len;
    return sched_add(s, st);
}

int sched_fold(sched_t *s, int dst, size_t dst_off, int src, size_t src_off, size_t len,
               int nslots, size_t slot_stride, int final)
{
    sched_step_t st = step_new(STEP_FOLD);
    st.dst_buf = (uint8_t)dst;
    st.dst_off = dst_off;
    st.src_buf = (uint8_t)src;
    st.src_off = src_off;
    st.len = len;
    st.nslots = nslots;
    st.slot_stride = slot_stride;
    st.final = (uint8_t)final;
    st.after_all = 1;
    return sched_add(s, st);
}

int sched_rget(sched_t *s, int peer, int dst, size_t dst_off, int rbuf, size_t roff,
               size_t len, int dep)
{
    sched_step_t st = step_new(STEP_RGET);
    st.peer = peer;
    st.dst_buf = (uint8_t)dst;
    st.dst_off = dst_off;
    st.rbuf = (uint8_t)rbuf;
    st.roff = roff;
    st.len = len;
    st.dep = dep;
    return sched_add(s, st);
}

int sched_rget_reduce(sched_t *s, int peer, int dst, size_t dst_off, int src, size_t src_off,
                      int rbuf, size_t roff, size_t len, int dep, int final)
{
    sched_step_t st = step_new(STEP_RGET_REDUCE);
    st.peer = peer;
    st.dst_buf = (uint8_t)dst;
    st.dst_off = dst_off;
    st.src_buf = (uint8_t)src;
    st.src_off = src_off;
    st.rbuf = (uint8_t)rbuf;
    st.roff = roff;
    st.len = len;
    st.dep = dep;
    st.final = (uint8_t)final;
    return sched_add(s, st);
}

static int is_local(int kind)
{
    return kind == STEP_COPY || kind == STEP_FOLD || kind == STEP_RGET ||
           kind == STEP_RGET_REDUCE;
}

static int is_recv(int kind)
{
    return kind == STEP_RECV || kind == STEP_RECV_REDUCE;
}

typedef struct {
    uint64_t key;   /* queue (peer, direction), turn, channel: the order on the connection */
    int step;
} queue_pos_t;

static int cmp_queue_pos(const void *x, const void *y)
{
    const queue_pos_t *a = x, *b = y;
    return a->key < b->key ? -1 : a->key > b->key;
}

/* With several channels: each (peer, direction) queue takes the channels' steps in turns
 * (schedule.h), the k-th step of every channel before the (k+1)-th of any. */
static weft_status_t link_channel_queues(sched_t *s)
{
    int nch = s->nchannels, nq = 2 * s->nranks;
    int *turns = calloc((size_t)nq * (size_t)nch, sizeof(int));
    queue_pos_t *pos = malloc((size_t)(s->nsteps ? s->nsteps : 1) * sizeof(*pos));
    if (!turns || !pos) {
        free(turns);
        free(pos);
        return weft_error(WEFT_ERR_NO_MEMORY, "schedule %s: out of memory", s->algo);
    }
    int n = 0;
    for (int i = 0; i < s->nsteps; i++) {
        const sched_step_t *st = &s->steps[i];
        if (st->kind != STEP_SEND && !is_recv(st->kind))
            continue;
        int q = 2 * st->peer + (st->kind != STEP_SEND);
        uint64_t turn = (uint64_t)turns[q * nch + st->channel]++;
        pos[n].key = (uint64_t)q << 40 | turn << 8 | st->channel;
        pos[n++].step = i;
    }
    qsort(pos, (size_t)n, sizeof(*pos), cmp_queue_pos);
    for (int k = n - 1; k >= 0; k--) {
        const sched_step_t *st = &s->steps[pos[k].step];
        int *head = st->kind == STEP_SEND ? &s->head_send[st->peer] : &s->head_recv[st->peer];
        s->next_same[pos[k].step] = *head;
        *head = pos[k].step;
    }
    free(turns);
    free(pos);
    return WEFT_OK;
}

/* Links each step to the next one on the same peer and direction. */
static weft_status_t link_queues(sched_t *s)
{
    for (int p = 0; p < s->nranks; p++)
        s->head_send[p] = s->head_recv[p] = -1;
    s->nchannels = 1;
    for (int i = 0; i < s->nsteps; i++) {
        s->next_same[i] = -1;
        if (s->steps[i].channel >= s->nchannels)
            s->nchannels = s->steps[i].channel + 1;
    }
    if (s->nchannels > 1) {
        RETURN_IF_ERR(link_channel_queues(s));
    } else {
        for (int i = s->nsteps - 1; i >= 0; i--) {
            sched_step_t *st = &s->steps[i];
            if (st->kind == STEP_SEND) {
                s->next_same[i] = s->head_send[st->peer];
                s->head_send[st->peer] = i;
            } else if (is_recv(st->kind)) {
                s->next_same[i] = s->head_recv[st->peer];
                s->head_recv[st->peer] = i;
            }
        }
    }
    s->nlocals = 0;
    for (int i = 0; i < s->nsteps; i++)
        if (is_local(s->steps[i].kind))
            s->locals[s->nlocals++] = i;
    s->npeers = 0;
    for (int p = 0; p < s->nranks; p++)
        if (s->head_send[p] >= 0 || s->head_recv[p] >= 0)
            s->peers[s->npeers++] = p;
    return WEFT_OK;
}

static weft_status_t check_steps(const sched_t *s)
{
    for (int i = 0; i < s->nsteps; i++) {
        const sched_step_t *st = &s->steps[i];
        if (st->dep >= i || st->stream >= i ||
            (st->stream >= 0 && s->steps[st->stream].len != st->len))
            return weft_error(WEFT_ERR_INTERNAL, "schedule %s: step %d has a bad dependency",
                              s->algo, i);
        if ((st->kind == STEP_SEND || is_recv(st->kind) || st->kind == STEP_RGET ||
             st->kind == STEP_RGET_REDUCE) &&
            (st->peer < 0 || st->peer >= s->nranks))
            return weft_error(WEFT_ERR_INTERNAL, "schedule %s: step %d has peer %d",
                              s->algo, i, st->peer);
    }
    return WEFT_OK;
}

weft_status_t sched_finish(sched_t *s, int nranks)
{
    if (s->oom)
        return weft_error(WEFT_ERR_NO_MEMORY, "schedule %s: out of memory", s->algo);
    s->nranks = nranks;
    size_t n = (size_t)(s->nsteps ? s->nsteps : 1);
    s->next_same = malloc(n * sizeof(int));
    s->locals = malloc(n * sizeof(int));
    s->head_send = malloc((size_t)nranks * sizeof(int));
    s->head_recv = malloc((size_t)nranks * sizeof(int));
    s->peers = malloc((size_t)nranks * sizeof(int));
    if (!s->next_same || !s->locals || !s->head_send || !s->head_recv || !s->peers) {
        sched_free(s);
        return weft_error(WEFT_ERR_NO_MEMORY, "schedule %s: out of memory", s->algo);
    }
    weft_status_t st = check_steps(s);
    if (st == WEFT_OK)
        st = link_queues(s);
    if (st != WEFT_OK)
        sched_free(s);
    return st;
}

/* The buffer a step's bytes live in, as far as aliasing goes: SEND and RECV are one
 * when the call is in place; -1 for the metadata buffers (written before any step). */
static int buf_class(int buf, int inplace)
{
    switch (buf) {
    case BUF_SEND: return inplace ? BUF_RECV : BUF_SEND;
    case BUF_RECV: return BUF_RECV;
    case BUF_TMP:  return BUF_TMP;
    default:       return -1;
    }
}

/* Whether step w may write bytes that SEND step s reads. RGET_REDUCE also stages its
 * chunks in TMP (engine_rma.c), anywhere in it. */
static int may_clobber(const sched_step_t *w, const sched_step_t *s, int inplace)
{
    int cls = buf_class(s->src_buf, inplace);
    if (w->kind == STEP_RGET_REDUCE && cls == BUF_TMP)
        return 1;
    if (w->kind == STEP_SEND || w->len == 0 || buf_class(w->dst_buf, inplace) != cls)
        return 0;
    if (w->dst_buf != s->src_buf)
        return 1;   /* SEND and RECV of an in-place call: offsets do not compare */
    return w->dst_off < s->src_off + s->len && s->src_off < w->dst_off + w->len;
}

void sched_mark_keep(sched_t *s, int inplace)
{
    int n = s->nsteps;
    for (int i = 0; i < n; i++)
        s->steps[i].keep = 0;
    if (n <= 0 || n > SCHED_KEEP_MAX)
        return;
    size_t un = (size_t)n;
    uint8_t *anc = malloc(un);
    int *stack = malloc(un * sizeof(int));
    for (int i = 0; anc && stack && i < n; i++) {
        sched_step_t *st = &s->steps[i];
        if (st->kind != STEP_SEND || st->len == 0 || buf_class(st->src_buf, inplace) < 0)
            continue;
        /* the steps that finish before this one starts (or, a stream source, before it
         * sends the bytes they produce): every step below `lo`, and those marked */
        memset(anc, 0, un);
        int sp = 0, lo = 0;
        stack[sp++] = i;
        anc[i] = 1;
        while (sp > 0) {
            const sched_step_t *x = &s->steps[stack[--sp]];
            if (x->after_all && stack[sp] > lo)
                lo = stack[sp];
            int next[2] = { x->dep, x->stream };
            for (int k = 0; k < 2; k++)
                if (next[k] >= 0 && !anc[next[k]]) {
                    anc[next[k]] = 1;
                    stack[sp++] = next[k];
                }
        }
        int keep = 1;
        for (int w = lo; w < n && keep; w++)
            if (!anc[w] && may_clobber(&s->steps[w], st, inplace))
                keep = 0;
        st->keep = (uint8_t)keep;
    }
    free(anc);
    free(stack);
}

void sched_free(sched_t *s)
{
    free(s->steps);
    free(s->next_same);
    free(s->locals);
    free(s->head_send);
    free(s->head_recv);
    free(s->peers);
    s->steps = NULL;
    s->next_same = s->locals = s->head_send = s->head_recv = s->peers = NULL;
    s->nsteps = s->cap = s->npeers = 0;
}

void sched_dump(const sched_t *s, int rank)
{
    static const char *kinds[] = { "send", "recv", "recv_reduce", "copy", "fold", "rget",
                                   "rget_reduce" };
    static const char *bufs[] = { "-", "send", "recv", "tmp", "meta_out", "meta_in" };
    fprintf(stderr, "schedule %s rank %d: %d steps, chunk %zu, tmp %zu\n", s->algo, rank,
            s->nsteps, s->chunk, s->tmp_bytes);
    for (int i = 0; i < s->nsteps; i++) {
        const sched_step_t *st = &s->steps[i];
        fprintf(stderr, "  %3d %-11s peer %2d dst %s+%zu src %s+%zu len %zu dep %d stream %d%s%s%s%s\n",
                i, kinds[st->kind], st->peer, bufs[st->dst_buf], st->dst_off, bufs[st->src_buf],
                st->src_off, st->len, st->dep, st->stream, st->final ? " final" : "",
                st->after_all ? " after_all" : "", st->swap ? " swap" : "",
                st->keep ? " keep" : "");
    }
}
