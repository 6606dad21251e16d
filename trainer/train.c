/*
 * train.c - the weft-train job: model, data, the step loop, evaluation, save, sample.
 *
 * One step = zero_grad, then K = accum micro-batches of forward + backward (each
 * backward scaled by 1/K, so the gradient is that of the mean loss over all K*B*T
 * tokens), then clipping and one AdamW update. The step's loss is the mean of the K
 * micro-batch losses. Val data is --val, or else the last 10% of --data.
 *
 * On N ranks (a launcher's environment, dist.c): -b is the per-rank micro-batch; every
 * global batch is N*B windows of which rank r takes rows [r*B, (r+1)*B), each backward
 * is scaled by 1/(K*N) and the gradients summed, so N ranks compute what one rank with
 * -b N*B does. shard/ holds the model's states (--shard); rank 0 prints (all ranks with
 * --log-all) and writes the json, the checkpoint and the sample.
 *
 * --device cuda: the steps run on the GPU (gpt2_cuda.h) from the host model's parameters;
 * the host model keeps (B = 1) activations for sampling and gets the device state back
 * (train_cuda_download) before a checkpoint, the saved model and the sample. On several
 * ranks each rank's device model holds activations only and shard/ the state, in device
 * memory (train_cuda_shard_mem), on GPU local rank % visible GPUs.
 *
 * Invariants: every buffer is owned by this function and freed on every path (goto
 * cleanup); nothing here exits; --steps 0 --save-model F writes the initial model.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "checkpoint.h"
#include "config.h"
#include "ckpt_dir.h"
#include "dist.h"
#include "gpt2_cuda.h"
#include "status.h"
#include "train.h"
#include "util.h"

void train_opts_default(train_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->layers = 4;
    o->dim = 128;
    o->heads = 4;
    o->ctx = 128;
    o->seed = 1337;
    o->B = 8;
    o->accum = 1;
    o->shuffle = 1;
    o->steps = 100;
    o->schedule = TRAIN_SCHED_CONSTANT;
    o->lr = 3e-4f;
    o->wd = 0.0f;
    o->beta1 = 0.9f;
    o->beta2 = 0.95f;
    o->eps = 1e-8f;
    o->clip = 1.0f;
    o->val_every = 0;
    o->val_batches = 8;
    o->threads = 1;
    o->shard = -1;
    o->prefetch = TRAIN_PREFETCH_DEFAULT;
    o->ckpt_keep = TRAIN_CKPT_KEEP_DEFAULT;
}

float train_lr_at(const train_opts_t *o, int step)
{
    if (step <= o->warmup)
        return o->lr * (float)step / (float)o->warmup;
    if (o->schedule == TRAIN_SCHED_CONSTANT || o->steps <= o->warmup)
        return o->lr;
    double frac = (double)(step - o->warmup) / (double)(o->steps - o->warmup);
    double min_lr = 0.1 * o->lr;
    return (float)(min_lr + 0.5 * (o->lr - min_lr) * (1.0 + cos(M_PI * frac)));
}

/* The model the options describe (no --model); text data defaults to a byte vocabulary. */
static train_gpt2_cfg_t opts_cfg(const train_opts_t *o, int text)
{
    int V = o->vocab > 0 ? o->vocab : (text ? 256 : 50257);
    return (train_gpt2_cfg_t){ .max_seq_len = o->ctx, .vocab_size = V,
                               .padded_vocab_size = train_padded_vocab(V),
                               .num_layers = o->layers, .num_heads = o->heads,
                               .channels = o->dim };
}

static weft_status_t build_model(train_gpt2_t **m_p, const train_opts_t *o, int text)
{
    if (o->model_path)
        return train_checkpoint_read(m_p, o->model_path);
    // a resumed run's parameters come from its checkpoint: no GPT-2 init to draw
    // (seconds at 100M parameters); a failed resume ends the run
    train_gpt2_cfg_t cfg = opts_cfg(o, text);
    weft_status_t st = train_gpt2_create(m_p, &cfg);
    if (st == WEFT_OK && !o->resume && (st = train_gpt2_init(*m_p, o->seed)) != WEFT_OK) {
        train_gpt2_destroy(*m_p);
        *m_p = NULL;
    }
    return st;
}

typedef struct {
    train_tokens_t train, val;
    train_loader_t train_ld, val_ld;
    int have_data, have_val;
} run_data_t;

/* Reads --data and --val; without --val the last tenth of --data is held out, once the
 * window T is known (split_val: a --model's context when -t is not given). */
static weft_status_t load_data(run_data_t *d, const train_opts_t *o)
{
    if (!o->data_path)
        return WEFT_OK;
    RETURN_IF_ERR(train_tokens_read(&d->train, o->data_path));
    d->have_data = 1;
    if (o->val_path) {
        RETURN_IF_ERR(train_tokens_read(&d->val, o->val_path));
        d->have_val = 1;
        if (d->val.is_text != d->train.is_text)
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "--val %s is %s but --data %s is "
                                    "%s: both must be text or both llm.c token shards",
                                    o->val_path, d->val.is_text ? "text" : "an llm.c shard",
                                    o->data_path, d->train.is_text ? "text" : "an llm.c shard");
    }
    return WEFT_OK;
}

static weft_status_t split_val(run_data_t *d, int T)
{
    if (!d->have_data || d->have_val)
        return WEFT_OK;
    RETURN_IF_ERR(train_tokens_split(&d->train, &d->val, T));
    d->have_val = 1;
    return WEFT_OK;
}

/* A sample of the train set's tokens (every 4099th), to tell two data sets apart
 * cheaply: across ranks (check_same_config) and against a checkpoint's. */
static uint64_t data_sample(const run_data_t *d)
{
    uint64_t sum = 0;
    for (size_t i = 0; d->have_data && i < d->train.n; i += 4099)
        sum = sum * 1000003u + d->train.tokens[i];
    return sum;
}

static weft_status_t check_vocab(const run_data_t *d, int V)
{
    int mx = d->train.max_token > d->val.max_token ? d->train.max_token : d->val.max_token;
    if (d->have_data && mx >= V)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "data has token %d but the model's "
                                "vocabulary is %d%s", mx, V,
                                d->train.is_text ? " (text trains with --vocab 256)" : "");
    return WEFT_OK;
}

static void print_header(FILE *out, const train_gpt2_t *m, const train_opts_t *o,
                         const run_data_t *d, int T, const train_dist_t *dist)
{
    const train_gpt2_cfg_t *c = &m->cfg;
    fprintf(out, "weft-train: model L=%d C=%d NH=%d maxT=%d V=%d Vp=%d, %zu parameters "
            "(%s)\n", c->num_layers, c->channels, c->num_heads, c->max_seq_len,
            c->vocab_size, c->padded_vocab_size, m->num_params,
            o->model_path ? o->model_path : "initialised");
    if (d->have_data)
        fprintf(out, "weft-train: data %s (%s), %zu train tokens, %zu val tokens%s\n",
                o->data_path, d->train.is_text ? "text bytes" : "llm.c shard", d->train.n,
                d->val.n, o->val_path ? "" : " (last 10% held out)");
    /* a loader wraps around: data of fewer windows than a step takes repeats them in
     * every step (llm.c refuses a shard smaller than one batch; overfitting a tiny set on
     * purpose is allowed here, but said) */
    int N = dist->world ? dist->nranks : 1;
    size_t step_rows = (size_t)o->B * N * o->accum, val_rows = (size_t)o->B * N * o->val_batches;
    if (d->have_data && T > 0 && (d->train.n - 1) / (size_t)T < step_rows)
        fprintf(out, "weft-train: warning: %s has %zu train windows of %d tokens, fewer than "
                "a step's %zu rows (-b x ranks x --accum): windows repeat within every step\n",
                o->data_path, (d->train.n - 1) / (size_t)T, T, step_rows);
    if (d->have_data && T > 0 && o->val_every > 0 && (d->val.n - 1) / (size_t)T < val_rows)
        fprintf(out, "weft-train: warning: the val data has %zu windows of %d tokens, fewer "
                "than an evaluation's %zu rows (-b x ranks x --val-batches): windows repeat\n",
                (d->val.n - 1) / (size_t)T, T, val_rows);
    fprintf(out, "weft-train: B=%d T=%d accum=%d steps=%d lr=%g %s warmup=%d wd=%g "
            "clip=%g %s %s threads=%d seed=%llu\n", o->B, T, o->accum, o->steps, o->lr,
            o->schedule == TRAIN_SCHED_COSINE ? "cosine" : "constant", o->warmup, o->wd,
            o->clip, o->shuffle ? "shuffled" : "in-order", o->bf16 ? "bf16" : "fp32",
            o->threads, (unsigned long long)o->seed);
    const char *gpu = NULL;
    int flash = 0;
    if (o->device == TRAIN_DEVICE_CUDA && train_cuda_probe(&gpu) == WEFT_OK &&
        train_cuda_attention(c, o->bf16, &flash) == WEFT_OK)
        fprintf(out, "weft-train: device cuda (%s), matmuls cuBLAS %s, attention %s\n", gpu,
                o->bf16 ? "bf16 products, fp32 sums and master weights" : "fp32",
                flash ? "fused (bf16, no T x T matrices)" : "cuBLAS products and softmax");
    if (dist->world)
        fprintf(out, "weft-train: %d ranks (%s), --shard %s (group %d), prefetch %d, params "
                "%s, reduce %s, global batch %d\n", dist->nranks,
                weft_comm_transport(dist->world),
                shard_strategy_name(o->shard < 0 ? SHARD_NONE : (shard_strategy_t)o->shard),
                shard_group_size(dist->sh), o->prefetch, o->param_bf16 ? "bf16" : "fp32",
                o->reduce_bf16 ? "bf16" : "fp32", o->B * dist->nranks);
    fflush(out);
}

/* One optimisation step; fills s (except the derived rates). On several ranks the
 * gradient reductions run inside backward (shard/'s hooks) and the step's loss is the
 * mean over ranks. On the GPU (g) each phase waits for the device, so the split of the
 * step time is the device's. */
static weft_status_t train_step(train_gpt2_t *m, train_cuda_t *g, train_loader_t *ld,
                                const train_opts_t *o, int step, int *x, int *y,
                                train_stats_t *s, train_dist_t *dist)
{
    double t0, loss = 0.0;
    int N = dist->world ? dist->nranks : 1;
    if (dist->sh)
        shard_stats_reset(dist->sh);
    else if (g)
        RETURN_IF_ERR(train_cuda_zero_grad(g));
    else
        train_gpt2_zero_grad(m);
    for (int k = 0; k < o->accum; k++) {
        float l;
        t0 = time_s();
        train_loader_next(ld, x, y);
        s->ms_data += (time_s() - t0) * 1e3;
        if (dist->sh)
            RETURN_IF_ERR(shard_micro_begin(dist->sh, 1, k == o->accum - 1));
        t0 = time_s();
        if (g) {
            RETURN_IF_ERR(train_cuda_forward(g, x, y, ld->part_n, ld->T, &l));
        } else {
            RETURN_IF_ERR(train_gpt2_forward(m, x, y, ld->part_n, ld->T));
            l = m->mean_loss;
        }
        s->ms_fwd += (time_s() - t0) * 1e3;
        loss += l;
        t0 = time_s();
        if (g) {
            RETURN_IF_ERR(train_cuda_backward(g, 1.0f / (float)(o->accum * N)));
            RETURN_IF_ERR(train_cuda_sync(g));
        } else {
            RETURN_IF_ERR(train_gpt2_backward(m, 1.0f / (float)(o->accum * N)));
        }
        s->ms_bwd += (time_s() - t0) * 1e3;
    }
    t0 = time_s();
    s->lr = train_lr_at(o, step);
    if (dist->sh) {
        RETURN_IF_ERR(shard_clip(dist->sh, o->clip, &s->norm));
        RETURN_IF_ERR(shard_adamw(dist->sh, s->lr, o->beta1, o->beta2, o->eps, o->wd, step));
        if (g)
            RETURN_IF_ERR(train_cuda_sync(g));
        RETURN_IF_ERR(train_dist_sum(dist, &loss, 1));
        shard_stats_t ss;
        shard_stats(dist->sh, &ss);
        s->dist = 1;
        s->ms_comm = ss.exposed_ms;
        s->comm_mib = ss.comm_bytes / 1048576.0;
        s->state_mib = (double)ss.state_bytes / 1048576.0;
        s->inflight_mib = (double)ss.transient_peak / 1048576.0;
    } else if (g) {
        RETURN_IF_ERR(train_cuda_clip_grad(g, o->clip, &s->norm));
        RETURN_IF_ERR(train_cuda_update(g, s->lr, o->beta1, o->beta2, o->eps, o->wd, step));
        RETURN_IF_ERR(train_cuda_sync(g));
    } else {
        s->norm = train_gpt2_clip_grad(m, o->clip);
        RETURN_IF_ERR(train_gpt2_update(m, s->lr, o->beta1, o->beta2, o->eps, o->wd, step));
    }
    s->ms_opt = (time_s() - t0) * 1e3;
    s->loss = (float)(loss / (o->accum * N));
    s->step = step;
    return WEFT_OK;
}

static weft_status_t run_val(train_gpt2_t *m, train_cuda_t *g, run_data_t *d,
                             const train_opts_t *o, int step, int *x, int *y, FILE *out,
                             FILE *json, train_dist_t *dist)
{
    size_t fit = d->val_ld.nwin / (size_t)d->val_ld.B;
    int nb = o->val_batches;
    if ((size_t)nb > fit)
        nb = fit > 0 ? (int)fit : 1;
    double sum = 0.0;
    train_loader_reset(&d->val_ld);
    for (int i = 0; i < nb; i++) {   // the mean loss over nb batches, no gradients
        float l;
        /* each forward-only batch is a micro-batch of its own: its first units' gathers
         * start here, ahead of use (one call for all batches left every batch after the
         * first waiting for each unit's gather) */
        if (dist->sh)
            RETURN_IF_ERR(shard_micro_begin(dist->sh, 0, 0));
        train_loader_next(&d->val_ld, x, y);
        if (g) {
            RETURN_IF_ERR(train_cuda_forward(g, x, y, d->val_ld.part_n, d->val_ld.T, &l));
        } else {
            RETURN_IF_ERR(train_gpt2_forward(m, x, y, d->val_ld.part_n, d->val_ld.T));
            l = m->mean_loss;
        }
        sum += l;
    }
    float vl = (float)(sum / nb);
    if (dist->world) {   // each rank evaluated its rows of the same global batches
        double v = vl;
        RETURN_IF_ERR(train_dist_sum(dist, &v, 1));
        vl = (float)(v / dist->nranks);
    }
    train_log_val(out, json, step, vl, nb);
    return WEFT_OK;
}

/* Every rank must run the same job: the fields a difference in which would make the
 * ranks compute different things or issue different collectives. */
static weft_status_t check_same_config(train_dist_t *dist, const train_opts_t *o,
                                       const train_gpt2_t *m, const run_data_t *d, int T)
{
    const train_gpt2_cfg_t *c = &m->cfg;
#define I(name, v) { name, (int64_t)(v), 0 }
#define F(name, v) { name, train_dist_float(v), 1 }
    train_dist_field_t f[] = {
        I("model layers (--layers or --model)", c->num_layers),
        I("model channels (--dim or --model)", c->channels),
        I("model heads (--heads or --model)", c->num_heads),
        I("model context (--ctx or --model)", c->max_seq_len),
        I("model vocabulary (--vocab or --model)", c->vocab_size),
        I("--shard", o->shard), I("--shard-group", o->shard_group),
        I("--prefetch", o->prefetch), I("--param-dtype", o->param_bf16),
        I("--reduce-dtype", o->reduce_bf16), I("--dtype", o->bf16),
        I("--device", o->device),
        I("--batch", o->B), I("--seq", T), I("--accum", o->accum),
        I("--steps", o->steps), I("--seed", o->seed), I("--no-shuffle", o->shuffle),
        F("--lr", o->lr), F("--wd", o->wd), F("--clip", o->clip),
        F("--beta1", o->beta1), F("--beta2", o->beta2), F("AdamW eps", o->eps),
        I("--warmup", o->warmup),
        I("--schedule", o->schedule), I("--val-every", o->val_every),
        I("--val-batches", o->val_batches), I("--sample", o->sample),
        I("--data (its token count)", d->train.n),
        I("--data (a sample of its tokens)", data_sample(d)),
        I("--val (its token count)", d->val.n),
        // checkpoints and the model's export are collective: a rank that saves, resumes
        // or exports alone waits forever
        I("--resume", o->resume), I("--ckpt-every", o->ckpt_every),
        I("--ckpt-keep", o->ckpt_keep), I("--ckpt-fail", o->ckpt_fail_stop),
        I("--ckpt-dir (its path)", o->ckpt_dir ? hash_bytes(HASH_SEED, o->ckpt_dir,
                                                            strlen(o->ckpt_dir)) : 0),
        I("--save-model (set or not)", o->save_path != NULL),
    };
#undef I
#undef F
    return train_dist_agree(dist, f, (int)(sizeof(f) / sizeof(f[0])));
}

/* Several ranks: the launcher's world, the same job everywhere, the model into shard/
 * (on the GPU: a device model of activations, *g_p, and shard/'s state in device memory
 * behind its hooks), and each rank's rows of the global batches. */
static weft_status_t setup_dist(train_dist_t *dist, train_gpt2_t *m, run_data_t *d,
                                const train_opts_t *o, int T, train_cuda_t **g_p)
{
    RETURN_IF_ERR(check_same_config(dist, o, m, d, T));
    // after the check, which every rank makes: all refuse together
    if ((int64_t)o->B * dist->nranks > INT_MAX / 2)    // rows of a global batch: int
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "-b %d on %d ranks is a global batch "
                                "of %lld rows: too many", o->B, dist->nranks,
                                (long long)o->B * dist->nranks);
    shard_opts_t so = { .strategy = o->shard < 0 ? SHARD_NONE : (shard_strategy_t)o->shard,
                        .group = o->shard_group, .prefetch = o->prefetch,
                        .param_bf16 = o->param_bf16, .reduce_bf16 = o->reduce_bf16 };
    if (o->device == TRAIN_DEVICE_CUDA) {
        RETURN_IF_ERR(train_cuda_create_sharded(g_p, m, o->B, T, o->bf16,
                                                weft_comm_local_rank(dist->world)));
        so.mem = train_cuda_shard_mem(*g_p);
    }
    RETURN_IF_ERR(train_dist_shard(dist, m, &so));
    if (*g_p)
        train_cuda_set_hooks(*g_p, &dist->hooks);
    if (d->have_data) {
        int N = dist->nranks, r = dist->rank;
        RETURN_IF_ERR(train_loader_init(&d->train_ld, &d->train, o->B * N, T, o->shuffle,
                                        o->seed));
        RETURN_IF_ERR(train_loader_set_part(&d->train_ld, r * o->B, o->B));
        RETURN_IF_ERR(train_loader_init(&d->val_ld, &d->val, o->B * N, T, 0, o->seed));
        RETURN_IF_ERR(train_loader_set_part(&d->val_ld, r * o->B, o->B));
    }
    return WEFT_OK;
}

/* The options alone, before anything is read or started: what a usage error is. */
weft_status_t train_opts_check(const train_opts_t *o)
{
    if (o->steps > 0 && !o->data_path)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "training needs --data FILE");
    if (o->B <= 0 || o->accum <= 0 || o->steps < 0 || o->T < 0 || o->val_batches <= 0)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "-b, --accum, --val-batches must be "
                                "positive and --steps, -t not negative");
    if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f && o->beta2 >= 0.0f && o->beta2 < 1.0f))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "--beta1 %g and --beta2 %g must be in "
                                "[0, 1) (AdamW divides by 1 - beta^step)", o->beta1, o->beta2);
    if (o->prefetch < 0 || o->shard_group < 0)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "--prefetch and --shard-group must "
                                "not be negative");
    if (o->shard_group > 0 && o->shard != SHARD_HYBRID)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "--shard-group is for --shard hybrid");
    if ((o->resume || o->ckpt_every > 0) && !o->ckpt_dir)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "--resume and --ckpt-every need "
                                "--ckpt-dir DIR");
    if (o->ckpt_every < 0 || o->ckpt_keep < 0)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "--ckpt-every and --ckpt-keep must "
                                "not be negative");
    if (!o->model_path) {   // the model the options describe (a --model file has its own)
        train_gpt2_cfg_t cfg = opts_cfg(o, 1);
        RETURN_IF_ERR(train_gpt2_cfg_check(&cfg));
        if (o->T > o->ctx)
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "-t %d is above --ctx %d", o->T,
                                    o->ctx);
    }
    return WEFT_OK;
}

weft_status_t train_run(const train_opts_t *o, FILE *out)
{
    weft_status_t st = WEFT_OK;
    train_gpt2_t *m = NULL;
    run_data_t d = { 0 };
    train_dist_t dist = { 0 };
    train_cuda_t *g = NULL;
    FILE *json = NULL, *devnull = NULL;
    int *x = NULL, *y = NULL;

    if (o->export_path) {   // a conversion, no training
        if (!o->ckpt_dir)
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "--export-model needs --ckpt-dir");
        /* every rank of a job would write the same file at once (each rename publishing
         * a file another rank is still rewriting) */
        if (train_dist_launched_size() > 1)     /* (-1: a batch script's own process) */
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "--export-model is a conversion "
                                    "for one process: run weft-train --ckpt-dir %s "
                                    "--export-model %s without a launcher", o->ckpt_dir,
                                    o->export_path);
        RETURN_IF_ERR(train_ckpt_export(o->ckpt_dir, o->export_path));
        fprintf(out, "weft-train: exported %s/latest to %s (llm.c GPT-2, fp32)\n",
                o->ckpt_dir, o->export_path);
        return WEFT_OK;
    }
    RETURN_IF_ERR(train_opts_check(o));
    if (o->device == TRAIN_DEVICE_CUDA)   // say it before reading any data
        RETURN_IF_ERR(train_cuda_probe(NULL));
    // every buffer of the device collectives is cudaMalloc'd (shard/'s device table), so
    // they may only enqueue where each rank has a GPU of its own (weft_cuda.h): this
    // library's default, before the first communicator (the environment still wins)
    if (o->device == TRAIN_DEVICE_CUDA)
        RETURN_IF_ERR(cfg_set_default("WEFT_CUDA_ASYNC", "auto"));
    if (train_dist_launched_size() != 1) {   // a job's rank, or init's error why not
        GOTO_IF_ERR(train_dist_init(&dist), st, cleanup);
        if (dist.rank != 0 && !o->log_all) {
            if (!(devnull = fopen("/dev/null", "w"))) {
                st = weft_error_quiet(WEFT_ERR_SYSTEM, "cannot open /dev/null");
                goto cleanup;
            }
            out = devnull;
        }
    }
    /* where checkpoints go, made and checked by every rank now (each writes there), not
     * at step N; a rank that cannot stops here, and the others at their next collective */
    if (o->ckpt_every > 0)
        GOTO_IF_ERR(train_ckpt_prepare(o->ckpt_dir), st, cleanup);
    int lead = dist.rank == 0;   // writes the json, the checkpoint and the sample
    // the data first (its kind picks the default vocabulary), then the model
    GOTO_IF_ERR(load_data(&d, o), st, cleanup);
    GOTO_IF_ERR(build_model(&m, o, d.have_data ? d.train.is_text : 1), st, cleanup);
    int T = o->T > 0 ? o->T : m->cfg.max_seq_len;
    GOTO_IF_ERR(split_val(&d, T), st, cleanup);
    GOTO_IF_ERR(check_vocab(&d, m->cfg.vocab_size), st, cleanup);
    if (dist.world)
        GOTO_IF_ERR(setup_dist(&dist, m, &d, o, T, &g), st, cleanup);
    // on the GPU the host model only samples: one row of activations is enough
    GOTO_IF_ERR(train_gpt2_prepare(m, o->device == TRAIN_DEVICE_CUDA ? 1 : o->B, T), st,
                cleanup);
    if (o->bf16 && o->device == TRAIN_DEVICE_CPU)
        GOTO_IF_ERR(train_gpt2_set_bf16(m, 1), st, cleanup);
    x = malloc((size_t)o->B * T * sizeof(int));
    y = malloc((size_t)o->B * T * sizeof(int));
    if (!x || !y) {
        st = weft_error_quiet(WEFT_ERR_NO_MEMORY, "out of memory");
        goto cleanup;
    }
    if (d.have_data && !dist.world) {
        GOTO_IF_ERR(train_loader_init(&d.train_ld, &d.train, o->B, T, o->shuffle, o->seed),
                    st, cleanup);
        GOTO_IF_ERR(train_loader_init(&d.val_ld, &d.val, o->B, T, 0, o->seed), st, cleanup);
    }
    /* a resumed run continues the log it resumes (as llm.c's), a new one starts it */
    if (lead && o->json_path && !(json = fopen(o->json_path, o->resume ? "a" : "w"))) {
        st = weft_error_quiet(WEFT_ERR_SYSTEM, "cannot create %s", o->json_path);
        goto cleanup;
    }
    print_header(out, m, o, &d, T, &dist);
    if (!dist.world && (o->shard >= 0 || o->shard_group > 0 || o->param_bf16 ||
                        o->reduce_bf16 || o->prefetch != TRAIN_PREFETCH_DEFAULT))
        fprintf(out, "weft-train: one process: --shard, --shard-group, --param-dtype, "
                "--reduce-dtype and --prefetch have nothing to split or gather, and are "
                "ignored (start several ranks: weftrun -n N weft-train ..., mpirun, srun)\n");
    if (o->ckpt_every == 0 && (o->ckpt_keep != TRAIN_CKPT_KEEP_DEFAULT || o->ckpt_fail_stop))
        fprintf(out, "weft-train: --ckpt-keep and --ckpt-fail apply to checkpoints saved by "
                "--ckpt-every, which is not set: ignored\n");

    const train_gpt2_cfg_t *c = &m->cfg;
    double flops_per_token = 6.0 * (double)train_gpt2_true_params(m) +
                             12.0 * c->num_layers * c->channels * (double)T;
    train_progress_t pr = { 0 };
    pr.data_tokens = d.have_data ? d.train.n : 0;
    pr.data_sample = data_sample(&d);
    if (o->resume) {
        char name[64];
        double r0 = time_s();
        GOTO_IF_ERR(train_ckpt_resume(o->ckpt_dir, m, &dist, o, &pr, name, sizeof(name)), st,
                    cleanup);
        double rsecs = time_s() - r0;
        if (d.have_data)
            GOTO_IF_ERR(train_loader_seek(&d.train_ld, pr.epoch, pr.cursor), st, cleanup);
        fprintf(out, "weft-train: resumed from %s/%s: step %llu, %llu tokens (%.2f s)\n",
                o->ckpt_dir, name, (unsigned long long)pr.step,
                (unsigned long long)pr.tokens, rsecs);
        if (pr.sched_note[0])
            fprintf(out, "weft-train: note: %s\n", pr.sched_note);
    }
    if (o->device == TRAIN_DEVICE_CUDA && !g)   // after a resume: the device gets its state
        GOTO_IF_ERR(train_cuda_create(&g, m, o->B, T, o->bf16), st, cleanup);
    for (int step = (int)pr.step + 1; step <= o->steps; step++) {
        train_stats_t s = { 0 };
        double t0 = time_s();
        GOTO_IF_ERR(train_step(m, g, &d.train_ld, o, step, x, y, &s, &dist), st, cleanup);
        double secs = time_s() - t0;
        double tokens = (double)o->B * T * o->accum * (dist.world ? dist.nranks : 1);
        s.tokens_per_s = tokens / secs;
        s.flops_per_s = flops_per_token * tokens / secs;
        s.rss_mib = train_peak_rss_mib();
        train_log_step(out, json, &s);
        pr.step = (uint64_t)step;
        pr.tokens += (uint64_t)tokens;
        if (d.have_data)
            train_loader_tell(&d.train_ld, &pr.epoch, &pr.cursor);
        /* every N steps and at the last one (as llm.c): a run's end is never lost */
        if (o->ckpt_dir && o->ckpt_every > 0 && (step % o->ckpt_every == 0 ||
                                                 step == o->steps)) {
            double c0 = time_s();
            uint64_t cbytes = 0;
            // a collective of the step that failed after its call returned (the device's
            // queued calls): its state must not be saved; every rank sees the failure
            if (dist.sh)
                GOTO_IF_ERR(shard_errors(dist.sh), st, cleanup);
            if (g && !dist.sh)   // sharded, shard/ brings its device state down itself
                GOTO_IF_ERR(train_cuda_download(g, m, 0), st, cleanup);
            weft_status_t cs = train_ckpt_save(o->ckpt_dir, o->ckpt_keep, m, &dist, o, &pr,
                                               &cbytes);
            /* out of memory stops too: a rank short of it before the save's first exchange
             * cannot take part, and going on would leave the others waiting in it; its
             * exit fails their save (PEER_LOST), so every rank stops */
            if (cs != WEFT_OK && (o->ckpt_fail_stop || cs == WEFT_ERR_PEER_LOST ||
                                  cs == WEFT_ERR_TIMEOUT || cs == WEFT_ERR_ABORTED ||
                                  cs == WEFT_ERR_NO_MEMORY)) {
                st = cs;   // --ckpt-fail stop, or the ranks themselves failed
                goto cleanup;
            }
            if (cs != WEFT_OK)
                fprintf(out, "weft-train: checkpoint of step %d failed, training goes on "
                        "(--ckpt-fail stop ends the run instead): %s\n", step,
                        weft_last_error());
            else
                fprintf(out, "weft-train: checkpoint %s/step-%08d: %.1f MB in %.2f s "
                        "(%.2f GB/s)\n", o->ckpt_dir, step, cbytes / 1e6, time_s() - c0,
                        cbytes / 1e9 / (time_s() - c0));
        }
        if (o->val_every > 0 && (step % o->val_every == 0 || step == o->steps))
            GOTO_IF_ERR(run_val(m, g, &d, o, step, x, y, out, json, &dist), st, cleanup);
    }
    if (g && !dist.sh && (o->save_path || o->sample > 0))
        GOTO_IF_ERR(train_cuda_download(g, m, 0), st, cleanup);
    if (dist.sh && (o->save_path || o->sample > 0))
        GOTO_IF_ERR(train_dist_export(&dist, m), st, cleanup);   // the whole model, again
    /* the last collective: what follows is rank 0's alone (the model is whole there), and
     * the others must not wait for it at a barrier, where a long --sample outlasted
     * WEFT_TIMEOUT and failed them. Rank 0 lets go of the communicator too. */
    if (dist.world) {
        GOTO_IF_ERR(weft_barrier(dist.world), st, cleanup);
        train_dist_destroy(&dist);
    }
    if (o->save_path && lead) {
        GOTO_IF_ERR(train_checkpoint_write(m, o->save_path), st, cleanup);
        fprintf(out, "weft-train: saved %s\n", o->save_path);
    }
    if (o->sample > 0 && lead) {
        int np = 0;
        if (d.have_val)
            for (; np < 16 && (size_t)np < d.val.n && np < T; np++)
                x[np] = d.val.tokens[np];
        int text = d.have_data ? d.train.is_text : m->cfg.vocab_size == 256;
        GOTO_IF_ERR(train_sample(m, x, np, o->sample, text,
                                 o->seed, out), st, cleanup);
    }
cleanup:;
    // the cause, kept: tearing down a failed communicator records errors of its own
    char why[1024];
    if (st != WEFT_OK)
        snprintf(why, sizeof(why), "%s", weft_last_error());
    if (json)
        fclose(json);
    if (devnull)
        fclose(devnull);
    free(x);
    free(y);
    train_loader_free(&d.train_ld);
    train_loader_free(&d.val_ld);
    train_tokens_free(&d.train);
    train_tokens_free(&d.val);
    train_dist_destroy(&dist);   // first: a sharded device state is freed through g
    train_cuda_destroy(g);
    train_gpt2_destroy(m);
    if (st != WEFT_OK)
        weft_error_quiet(st, "%s", why);
    return st;
}
