/*
 * train.h - the training run behind weft-train: options, and the run itself.
 */
#ifndef WEFT_TRAIN_H
#define WEFT_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "data.h"
#include "model.h"

enum { TRAIN_SCHED_CONSTANT = 0, TRAIN_SCHED_COSINE = 1 };
enum { TRAIN_DEVICE_CPU = 0, TRAIN_DEVICE_CUDA = 1 };

typedef struct {
    // model: a checkpoint, or a fresh GPT-2 of these sizes
    const char *model_path;
    int layers, dim, heads, ctx, vocab;     // vocab 0: 256 for text, 50257 for shards
    uint64_t seed;
    // data
    const char *data_path, *val_path;
    int B, T, accum;                         // T 0: the model's context length
    int shuffle;
    // optimisation
    int steps, warmup, schedule;
    float lr, wd, beta1, beta2, eps, clip;
    int bf16;
    int device;                              // TRAIN_DEVICE_*: where the steps run
    // data parallel (several ranks from a launcher)
    int shard;                               // shard_strategy_t; -1: none
    int shard_group, prefetch;               // hybrid group size (0: a host); units ahead
#define TRAIN_PREFETCH_DEFAULT 1
    int param_bf16, reduce_bf16;             // --param-dtype, --reduce-dtype bf16
    int log_all;                             // every rank prints (else rank 0)
    // training checkpoints (ckpt_dir.c)
    const char *ckpt_dir;
    int ckpt_every, ckpt_keep, resume;
#define TRAIN_CKPT_KEEP_DEFAULT 2
    int ckpt_fail_stop;                      // --ckpt-fail stop: a failed save ends the run
    const char *export_path;                 // --export-model: convert and stop
    // outputs
    const char *save_path, *json_path;
    int sample, val_every, val_batches;
    int threads;
} train_opts_t;

/* The defaults weft-train documents in --help. */
void train_opts_default(train_opts_t *o);
/* Runs the whole job: build/load the model, train, evaluate, save, sample. Progress goes
 * to out (one line per step); errors are returned with weft_last_error() set. */
weft_status_t train_run(const train_opts_t *o, FILE *out);
/* The options' own consistency (train_run checks it first): WEFT_ERR_INVALID_ARG with the
 * reason, for a CLI to report as a usage error before reading data or starting ranks. */
weft_status_t train_opts_check(const train_opts_t *o);

/* lr at step (1-based): linear warmup over `warmup` steps, then constant or a cosine
 * from lr down to lr/10 at step `steps`. */
float train_lr_at(const train_opts_t *o, int step);

/* telemetry.c: one step's measurements, printed as a log line and a JSON line */
typedef struct {
    int step;
    float loss, lr, norm;
    double tokens_per_s, ms_fwd, ms_bwd, ms_opt, ms_data, rss_mib, flops_per_s;
    int dist;                                // the fields below are set (several ranks)
    double ms_comm, comm_mib, state_mib, inflight_mib;
} train_stats_t;

double train_peak_rss_mib(void);
void train_log_step(FILE *out, FILE *json, const train_stats_t *s);
void train_log_val(FILE *out, FILE *json, int step, float val_loss, int batches);

/* Generates n tokens after `prompt` (np tokens) and prints prompt and continuation to
 * out: bytes when text, else token ids. */
weft_status_t train_sample(train_gpt2_t *m, const int *prompt, int np, int n, int text,
                           uint64_t seed, FILE *out);

#endif
