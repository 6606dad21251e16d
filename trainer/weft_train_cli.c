/*
 * weft_train_cli.c - weft-train: GPT-2 training on the CPU (llm.c formats).
 *
 * Options come from one table {name, kind, field offset, help}; --help prints it. The
 * parsed train_opts_t goes to train_run(); this file only parses, sets the OpenBLAS
 * thread count and turns an error status into a message and exit status 1.
 *
 * OpenBLAS kernel choice: OpenBLAS 0.3.21 does not know AMD Zen 4 and runs its AVX2
 * (Haswell) sgemm there although the CPU has AVX-512, at ~55% of the speed. OpenBLAS
 * picks its kernels when it is loaded, from OPENBLAS_CORETYPE, so when that is unset,
 * the CPU has AVX512F/BW/DQ/VL and OpenBLAS chose Haswell or Zen, weft-train re-executes
 * itself once with OPENBLAS_CORETYPE=SkylakeX. Setting OPENBLAS_CORETYPE (to anything)
 * turns this off.
 */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "dist.h"
#include "train.h"

enum { OPT_INT, OPT_U64, OPT_FLOAT, OPT_STR, OPT_SET, OPT_CLEAR, OPT_SCHED, OPT_DTYPE,
       OPT_SHARD, OPT_FAIL, OPT_DEVICE };

typedef struct {
    const char *name, *alias;
    int kind;
    size_t offset;
    const char *help;
} cli_opt_t;

#define F(field) offsetof(train_opts_t, field)
static const cli_opt_t opts[] = {
    { "--model", NULL, OPT_STR, F(model_path), "start from this llm.c GPT-2 checkpoint "
      "(magic 20240326, version 3); else a fresh model of the sizes below" },
    { "--layers", NULL, OPT_INT, F(layers), "layers L (default 4)" },
    { "--dim", NULL, OPT_INT, F(dim), "channels C (default 128)" },
    { "--heads", NULL, OPT_INT, F(heads), "attention heads NH, dividing C (default 4)" },
    { "--ctx", NULL, OPT_INT, F(ctx), "maximum sequence length maxT (default 128)" },
    { "--vocab", NULL, OPT_INT, F(vocab), "vocabulary V (default 256 for text, 50257 for "
      "shards); padded to Vp = V rounded up to a multiple of 128" },
    { "--seed", NULL, OPT_U64, F(seed), "seed of init, shuffling and sampling (default "
      "1337)" },
    { "--data", NULL, OPT_STR, F(data_path), "training data: an llm.c token shard (magic "
      "20240520) or else raw text as bytes (V = 256)" },
    { "--val", NULL, OPT_STR, F(val_path), "val data; default: the last 10% of --data" },
    { "-b", "--batch", OPT_INT, F(B), "micro-batch size B (default 8)" },
    { "-t", "--seq", OPT_INT, F(T), "sequence length T <= maxT (default maxT)" },
    { "--accum", NULL, OPT_INT, F(accum), "micro-batches per step, loss and gradient "
      "averaged (default 1)" },
    { "--steps", NULL, OPT_INT, F(steps), "optimizer steps (default 100); 0 with "
      "--save-model writes the initial model" },
    { "--lr", NULL, OPT_FLOAT, F(lr), "peak learning rate (default 3e-4)" },
    { "--schedule", NULL, OPT_SCHED, F(schedule), "constant | cosine (cosine decays to "
      "lr/10 at the last step; default constant)" },
    { "--warmup", NULL, OPT_INT, F(warmup), "linear warmup steps (default 0)" },
    { "--wd", NULL, OPT_FLOAT, F(wd), "AdamW weight decay, on wte wpe qkvw attprojw fcw "
      "fcprojw only (default 0)" },
    { "--beta1", NULL, OPT_FLOAT, F(beta1), "AdamW beta1 (default 0.9)" },
    { "--beta2", NULL, OPT_FLOAT, F(beta2), "AdamW beta2 (default 0.95); eps is 1e-8" },
    { "--clip", NULL, OPT_FLOAT, F(clip), "global grad-norm clip as "
      "torch.nn.utils.clip_grad_norm_, 0 = off (default 1.0)" },
    { "--no-shuffle", NULL, OPT_CLEAR, F(shuffle), "take batches in order from the start "
      "(default: a shuffle of the T+1-token windows drawn from --seed)" },
    { "--dtype", NULL, OPT_DTYPE, F(bf16), "fp32 | bf16 (bf16 matmul products, fp32 "
      "master weights; on the CPU needs AVX512-BF16; default fp32)" },
    { "--device", NULL, OPT_DEVICE, F(device), "cpu | cuda: where the steps run (cuda: "
      "weft's CUDA kernels and cuBLAS on GPU 0, or on several ranks GPU local rank % "
      "visible GPUs with --shard's state in device memory; a build without CUDA or a "
      "machine without a visible GPU stops with an error; default cpu)" },
    { "--shard", NULL, OPT_SHARD, F(shard), "on several ranks: none (DDP: gradients "
      "all-reduced per unit as backward ends) | zero1 (optimizer state sharded) | grad_op "
      "(ZeRO-2: gradients reduce-scattered, parameters gathered once per step) | full "
      "(ZeRO-3: parameters gathered before forward and backward, freed after) | hybrid "
      "(full inside a shard group, all-reduce across groups); default none" },
    { "--shard-group", NULL, OPT_INT, F(shard_group), "hybrid: ranks per shard group, "
      "dividing the world (default: the ranks of one host)" },
    { "--prefetch", NULL, OPT_INT, F(prefetch), "full/hybrid: units gathered ahead of the "
      "one computing (default 1; 0 = gather on use)" },
    { "--param-dtype", NULL, OPT_DTYPE, F(param_bf16), "fp32 | bf16: gathered parameters "
      "and their all-gather (fp32 master shards; default fp32)" },
    { "--reduce-dtype", NULL, OPT_DTYPE, F(reduce_bf16), "fp32 | bf16: gradient "
      "reductions (default fp32)" },
    { "--log-all", NULL, OPT_SET, F(log_all), "every rank prints its step lines (default: "
      "rank 0 only)" },
    { "--ckpt-dir", NULL, OPT_STR, F(ckpt_dir), "training checkpoints go to DIR/step-N "
      "(a file per writing rank and a manifest; DIR/latest names the newest complete one)" },
    { "--ckpt-every", NULL, OPT_INT, F(ckpt_every), "save one every N steps and at the "
      "last step (default 0 = never)" },
    { "--ckpt-keep", NULL, OPT_INT, F(ckpt_keep), "keep the newest K (default 2; 0 = all)" },
    { "--ckpt-fail", NULL, OPT_FAIL, F(ckpt_fail_stop), "continue | stop: what a failed "
      "save (a full disk) does; the previous checkpoint stays either way (default "
      "continue)" },
    { "--resume", NULL, OPT_SET, F(resume), "continue from DIR/latest: parameters, AdamW "
      "state, step, data position; any world size and --shard may load any checkpoint" },
    { "--export-model", NULL, OPT_STR, F(export_path), "with --ckpt-dir: write the model "
      "of DIR/latest (any world size, any --shard) as an llm.c checkpoint FILE, and stop" },
    { "--save-model", NULL, OPT_STR, F(save_path), "write the final model (llm.c "
      "format) to FILE" },
    { "--sample", NULL, OPT_INT, F(sample), "generate N bytes/tokens at the end and print "
      "them (default 0)" },
    { "--val-every", NULL, OPT_INT, F(val_every), "val loss every N steps and at the end "
      "(default 0 = never)" },
    { "--val-batches", NULL, OPT_INT, F(val_batches), "batches per val loss (default 8)" },
    { "--json", NULL, OPT_STR, F(json_path), "also write each step's and val's fields as "
      "JSON lines to FILE" },
    { "--threads", NULL, OPT_INT, F(threads), "OpenBLAS threads (default 1). On an "
      "AVX-512 CPU that OpenBLAS runs with AVX2 kernels (Zen 4), weft-train re-runs itself "
      "with OPENBLAS_CORETYPE=SkylakeX unless OPENBLAS_CORETYPE is set" },
};
#undef F

static void usage(FILE *f)
{
    fprintf(f, "usage: weft-train [options]   GPT-2 (llm.c layout) training on the CPU or a GPU\n"
               "       weftrun -n N weft-train --shard full [options]   (or mpirun, srun)\n\n");
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        char name[40];
        snprintf(name, sizeof(name), "%s%s%s", opts[i].name, opts[i].alias ? ", " : "",
                 opts[i].alias ? opts[i].alias : "");
        fprintf(f, "  %-18s %s\n", name, opts[i].help);
    }
    fprintf(f, "  %-18s %s\n", "--help", "this text");
    fprintf(f,
        "\nEach step prints one line:\n"
        "  step N | loss X.XXXXXX | lr | grad norm (before clipping) | tok/s |\n"
        "  ms fwd/bwd/opt/data | rss (peak resident, getrusage) | GFLOP/s\n"
        "FLOP/s counts 6*N + 12*L*C*T FLOPs per trained token (PaLM-style; N = parameter\n"
        "count with the unpadded vocabulary), whatever the hardware did. Val lines read\n"
        "  val step N | val loss X.XXXXXX | K batches\n"
        "Init (no --model): weights N(0, 0.02), attprojw/fcprojw N(0, 0.02/sqrt(2L)),\n"
        "biases 0, layernorm weights 1, padded wte rows 0.\n"
        "\nOn N ranks (started by weftrun, torchrun, mpirun or srun: weft_comm_init's\n"
        "environment), -b is per rank: each global batch is N*B windows, rank r takes rows\n"
        "[r*B, (r+1)*B), and N ranks compute what one rank with -b N*B computes. Ranks\n"
        "whose configurations differ stop at start naming the field; a lost rank stops the\n"
        "others with its number. Step lines add: comm exposed (ms this rank waited on\n"
        "communication), MiB it sent (ring count), state (persistent parameters, gradients\n"
        "and AdamW moments on this rank) + the most in flight (gathered units, gradients).\n"
        "tok/s counts the global batch.\n");
}

/* Every number weft-train takes is a count, a size or a rate: an empty value (an unset
 * shell variable), a negative one, or a float that is not finite is refused, not read
 * as 0 or as "never". */
static int parse_value(const cli_opt_t *o, const char *v, train_opts_t *t)
{
    char *end = NULL;
    void *p = (char *)t + o->offset;
    errno = 0;
    int number = o->kind == OPT_INT || o->kind == OPT_U64 || o->kind == OPT_FLOAT;
    if (number && (*v == '\0' || (strchr(v, '-') != NULL && o->kind != OPT_FLOAT)))
        return -1;
    switch (o->kind) {
    case OPT_INT: {
        long x = strtol(v, &end, 10);
        if (*end || errno || x < 0 || x > 2147483647L)
            return -1;
        *(int *)p = (int)x;
        return 0;
    }
    case OPT_U64:
        *(uint64_t *)p = strtoull(v, &end, 10);
        return (*end || errno) ? -1 : 0;
    case OPT_FLOAT: {
        float x = strtof(v, &end);
        if (*end || errno || !isfinite(x) || x < 0.0f)
            return -1;
        *(float *)p = x;
        return 0;
    }
    case OPT_STR:
        *(const char **)p = v;
        return 0;
    case OPT_SCHED:
        if (!strcmp(v, "constant") || !strcmp(v, "cosine")) {
            *(int *)p = !strcmp(v, "cosine") ? TRAIN_SCHED_COSINE : TRAIN_SCHED_CONSTANT;
            return 0;
        }
        return -1;
    case OPT_SHARD: {
        shard_strategy_t st;
        if (shard_strategy_parse(v, &st) != 0)
            return -1;
        *(int *)p = (int)st;
        return 0;
    }
    case OPT_FAIL:
        if (!strcmp(v, "continue") || !strcmp(v, "stop")) {
            *(int *)p = !strcmp(v, "stop");
            return 0;
        }
        return -1;
    case OPT_DEVICE:
        if (!strcmp(v, "cpu") || !strcmp(v, "cuda")) {
            *(int *)p = !strcmp(v, "cuda") ? TRAIN_DEVICE_CUDA : TRAIN_DEVICE_CPU;
            return 0;
        }
        return -1;
    case OPT_DTYPE:
        if (!strcmp(v, "fp32") || !strcmp(v, "bf16")) {
            *(int *)p = !strcmp(v, "bf16");
            return 0;
        }
        return -1;
    }
    return -1;
}

static void maybe_pick_avx512_blas(char **argv)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (getenv("OPENBLAS_CORETYPE"))
        return;
    const char *core = openblas_get_corename();
    if (!core || (strcasecmp(core, "haswell") != 0 && strcasecmp(core, "zen") != 0))
        return;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl"))
        return;
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    execv("/proc/self/exe", argv);   // returns only on failure: carry on as we are
#else
    (void)argv;
#endif
}

int main(int argc, char **argv)
{
    maybe_pick_avx512_blas(argv);
    train_opts_t t;
    train_opts_default(&t);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        const cli_opt_t *o = NULL;
        for (size_t j = 0; j < sizeof(opts) / sizeof(opts[0]) && !o; j++)
            if (!strcmp(argv[i], opts[j].name) ||
                (opts[j].alias && !strcmp(argv[i], opts[j].alias)))
                o = &opts[j];
        if (!o) {
            fprintf(stderr, "weft-train: unknown option %s (see --help)\n", argv[i]);
            return 2;
        }
        if (o->kind == OPT_SET || o->kind == OPT_CLEAR) {
            *(int *)((char *)&t + o->offset) = o->kind == OPT_SET;
            continue;
        }
        if (i + 1 >= argc || parse_value(o, argv[i + 1], &t) != 0) {
            fprintf(stderr, "weft-train: %s needs a valid value (see --help)%s%s%s\n",
                    argv[i], i + 1 < argc ? ": got '" : "", i + 1 < argc ? argv[i + 1] : "",
                    i + 1 < argc ? "'" : "");
            return 2;
        }
        i++;
    }
    if (t.threads < 1) {
        fprintf(stderr, "weft-train: --threads must be >= 1\n");
        return 2;
    }
    /* options that do not fit together are a usage error (2), said before any data is
     * read or any rank started; what fails later (data, files, peers) exits 1 */
    if (!t.export_path && train_opts_check(&t) != WEFT_OK) {
        fprintf(stderr, "weft-train: %s (see --help)\n", weft_last_error());
        return 2;
    }
    openblas_set_num_threads(t.threads);
    weft_status_t st = train_run(&t, stdout);
    if (st != WEFT_OK) {
        const char *r = getenv("WEFT_RANK"), *e = weft_last_error();
        if (train_dist_launched_size() > 1 && r && strncmp(e, "rank ", 5) != 0)
            fprintf(stderr, "weft-train: rank %s: %s\n", r, e);
        else
            fprintf(stderr, "weft-train: %s\n", e);
        return 1;
    }
    return 0;
}
