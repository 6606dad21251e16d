/*
 * dist.c - weft-train's ranks: the world, the configuration check, the model's hooks
 * into shard/.
 *
 * Invariants: every function here that is collective is called by every rank at the
 * same point of the run; on error it returns a status, and a rank that dies makes the
 * others' next collective fail with WEFT_ERR_PEER_LOST naming it (comm/), never a hang.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "status.h"
#include "train_int.h"

int train_dist_launched_size(void)
{
    int n = weft_launch_size();   // weft_comm_init's own reading of the launcher
    return n == 0 ? 1 : n;        // -1: launched, but init will refuse it and say why
}

weft_status_t train_dist_init(train_dist_t *d)
{
    memset(d, 0, sizeof(*d));
    weft_status_t st = weft_comm_init(&d->world);
    if (st != WEFT_OK)
        return st;
    d->rank = weft_comm_rank(d->world);
    d->nranks = weft_comm_size(d->world);
    return WEFT_OK;
}

void train_dist_destroy(train_dist_t *d)
{
    shard_destroy(d->sh);
    d->sh = NULL;
    if (d->world)
        weft_comm_destroy(d->world);
    d->world = NULL;
}

static void field_str(const train_dist_field_t *f, int64_t v, char *buf, size_t cap)
{
    union { int32_t i; float f; } u = { (int32_t)v };
    if (f->is_float)
        snprintf(buf, cap, "%g", (double)u.f);
    else
        snprintf(buf, cap, "%lld", (long long)v);
}

weft_status_t train_dist_agree(train_dist_t *d, const train_dist_field_t *f, int n)
{
    int N = d->nranks;
    int64_t *all = malloc((size_t)N * n * sizeof(int64_t));
    int64_t *mine = calloc((size_t)n + 1, sizeof(int64_t));
    if (!all || !mine) {
        free(all);
        free(mine);
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < n; i++)
        mine[i] = f[i].value;
    weft_status_t st = weft_allgather(mine, all, (size_t)n, WEFT_INT64, d->world);
    for (int i = 0; st == WEFT_OK && i < n; i++) {
        int first = -1, count = 0;
        for (int r = 1; r < N; r++)
            if (all[(size_t)r * n + i] != all[i]) {
                if (first < 0)
                    first = r;
                count++;
            }
        if (first >= 0) {
            char v0[32], vf[32];
            field_str(&f[i], all[i], v0, sizeof(v0));
            field_str(&f[i], all[(size_t)first * n + i], vf, sizeof(vf));
            st = weft_error_quiet(WEFT_ERR_INVALID_ARG, "ranks disagree on %s: rank 0 has "
                                  "%s, rank %d has %s (%d of %d ranks differ from rank 0); "
                                  "every rank must run the same configuration", f[i].name,
                                  v0, first, vf, count, N);
        }
    }
    free(all);
    free(mine);
    return st;
}

/* the model's hooks, forwarded to shard/ */
static weft_status_t hk_params(void *ctx, int u, int pass, float **p)
{
    return shard_params(ctx, u, pass, p);
}
static weft_status_t hk_params_done(void *ctx, int u, int pass)
{
    return shard_params_done(ctx, u, pass);
}
static weft_status_t hk_grads(void *ctx, int u, float **g)
{
    return shard_grads(ctx, u, g);
}
static weft_status_t hk_grads_done(void *ctx, int u)
{
    return shard_grads_done(ctx, u);
}

weft_status_t train_dist_shard(train_dist_t *d, train_gpt2_t *m, const shard_opts_t *o)
{
    int n = m->nunits;
    shard_unit_desc_t *desc = calloc((size_t)n, sizeof(*desc));
    if (!desc)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "out of memory");
    for (int u = 0; u < n; u++) {
        train_seg_t segs[TRAIN_BLOCK_TENSORS];
        desc[u].len = train_unit_len(&m->cfg, u);
        desc[u].nsegs = train_unit_segs(&m->cfg, u, segs);
        for (int j = 0; j < desc[u].nsegs; j++)
            desc[u].segs[j] = (shard_seg_t){ segs[j].off, segs[j].len, segs[j].decays };
    }
    weft_status_t st = shard_create(&d->sh, d->world, o, n, desc, m->params_mem);
    free(desc);
    if (st != WEFT_OK)
        return st;
    free(m->params_mem);   // shard/ keeps what this rank needs
    m->params_mem = NULL;
    free(m->grads_mem);
    m->grads_mem = NULL;
    d->hooks = (train_hooks_t){ .ctx = d->sh, .params = hk_params,
                                .params_done = hk_params_done, .grads = hk_grads,
                                .grads_done = hk_grads_done };
    m->hooks = &d->hooks;
    return WEFT_OK;
}

weft_status_t train_dist_export(train_dist_t *d, train_gpt2_t *m)
{
    float *p = m->params_mem ? m->params_mem : train_alloc_floats(m->num_params);
    if (!p)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "out of memory for the whole model");
    weft_status_t st = shard_export(d->sh, p);
    if (st != WEFT_OK) {
        if (p != m->params_mem)
            free(p);
        return st;
    }
    m->params_mem = p;
    m->hooks = NULL;
    return WEFT_OK;
}

weft_status_t train_dist_sum(train_dist_t *d, double *x, int n)
{
    return weft_allreduce(x, x, (size_t)n, WEFT_FLOAT64, WEFT_SUM, d->world);
}
