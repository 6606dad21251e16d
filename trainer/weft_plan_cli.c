/*
 * weft_plan_cli.c - weft-plan: per-rank memory and communication of each sharding
 * strategy, before launch.
 *
 *   weft-plan --params 70e9 --world 256 [--mem-gb 80] [--bytes-per-param 16]
 *             [--act-gb X] [--hosts H --per-host G] [--bw GB/s] [--json]
 *   weft-plan --layers 12 --dim 768 --heads 12 --ctx 1024 --vocab 50257 -b 8 -t 1024
 *             --world 8 [--prefetch 1] [--param-dtype bf16] [--reduce-dtype bf16] ...
 *
 * The first form applies the field's rules (shard/plan.c) to P parameters; the second
 * builds weft-train's model of those sizes and adds what a weft-train rank allocates:
 * shard/'s exact model states, the activations, the units in flight, and the peak RSS
 * that weft-train will report (see predict_rss for what it counts). GB are 1e9 bytes.
 * Exit status: 0, 2 on bad arguments.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "plan.h"

typedef struct {
    double params, bpp, mem_gb, act_gb, bw_gbs;
    int world, hosts, per_host, shard_group, json;
    // a weft-train model
    int layers, dim, heads, ctx, vocab, B, T, prefetch, param_bf16, reduce_bf16;
    double buffsize_mib;
    const char *data;          // weft-train's --data, whose tokens a rank holds
} plan_opts_t;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: weft-plan --params P --world N [options]      the field's sizing rules\n"
        "       weft-plan --layers L --dim C --heads H --ctx T --vocab V -b B [-t T]\n"
        "                 --world N [options]                 a weft-train run\n\n"
        "  --params P            parameters (70e9, 1.3e9, ...)\n"
        "  --world N             ranks (default 1; --hosts H --per-host G gives H*G)\n"
        "  --bytes-per-param K   model-state bytes per parameter (default 16: 2 fp16\n"
        "                        parameters + 2 fp16 gradients + 12 fp32 Adam states)\n"
        "  --mem-gb M            memory per accelerator; fits / fewest ranks are judged\n"
        "                        against it (default: no limit; for hybrid, the fewest\n"
        "                        ranks of a shard group, N/group: --shard-group sets it)\n"
        "  --act-gb X            activations and the rest per rank (default 0)\n"
        "  --hosts H             hosts the ranks span (default 1, or world/per-host)\n"
        "  --per-host G          ranks per host (default: world/hosts)\n"
        "  --shard-group G       the hybrid shard group, as weft-train's (default: per-host)\n"
        "  --bw GB/s             bytes/s each rank sends at: adds the time per step\n"
        "  --json                one JSON object per strategy instead of the table\n"
        "weft-train model (fp32 parameters, gradients and AdamW moments: 16 bytes each):\n"
        "  --layers --dim --heads --ctx --vocab -b -t   as weft-train's (vocab 256 default)\n"
        "  --prefetch N --param-dtype fp32|bf16 --reduce-dtype fp32|bf16   as weft-train's\n"
        "  --buffsize-mib M      WEFT_BUFFSIZE in MiB (default 4), for the shm rings\n"
        "  --data FILE           weft-train's --data: its tokens count in the RSS\n\n"
        "Communication is what a ring sends per rank and step: DDP 2x the parameter bytes,\n"
        "ZeRO-1/2 2x, FULL_SHARD 3x (times (N-1)/N); for hybrid only the replicas'\n"
        "all-reduce crosses hosts.\n");
}

static int parse(int argc, char **argv, plan_opts_t *o)
{
    struct { const char *name; int is_int; void *dst; } tab[] = {
        { "--params", 0, &o->params }, { "--bytes-per-param", 0, &o->bpp },
        { "--mem-gb", 0, &o->mem_gb }, { "--act-gb", 0, &o->act_gb },
        { "--bw", 0, &o->bw_gbs }, { "--buffsize-mib", 0, &o->buffsize_mib },
        { "--world", 1, &o->world }, { "--hosts", 1, &o->hosts },
        { "--per-host", 1, &o->per_host }, { "--shard-group", 1, &o->shard_group },
        { "--layers", 1, &o->layers },
        { "--dim", 1, &o->dim }, { "--heads", 1, &o->heads }, { "--ctx", 1, &o->ctx },
        { "--vocab", 1, &o->vocab }, { "-b", 1, &o->B }, { "-t", 1, &o->T },
        { "--prefetch", 1, &o->prefetch },
    };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            o->json = 1;
            continue;
        }
        if (!strcmp(argv[i], "--data") && i + 1 < argc) {
            o->data = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            exit(0);
        }
        if (i + 1 < argc && (!strcmp(argv[i], "--param-dtype") ||
                             !strcmp(argv[i], "--reduce-dtype"))) {
            int *d = argv[i][2] == 'p' ? &o->param_bf16 : &o->reduce_bf16;
            if (strcmp(argv[i + 1], "fp32") && strcmp(argv[i + 1], "bf16"))
                return fprintf(stderr, "weft-plan: %s takes fp32 or bf16\n", argv[i]), -1;
            *d = !strcmp(argv[++i], "bf16");
            continue;
        }
        size_t k = 0, n = sizeof(tab) / sizeof(tab[0]);
        while (k < n && strcmp(argv[i], tab[k].name))
            k++;
        if (k == n || i + 1 >= argc)
            return fprintf(stderr, "weft-plan: %s: unknown option or missing value (see "
                           "--help)\n", argv[i]), -1;
        char *end;
        errno = 0;
        double v = strtod(argv[++i], &end);
        int at_least_1 = tab[k].dst == &o->world || tab[k].dst == &o->hosts;
        if (end == argv[i] || *end || errno || !isfinite(v) || v < 0 ||
            (tab[k].is_int && (v != (int)v || v > 1e9)) || (at_least_1 && v < 1))
            return fprintf(stderr, "weft-plan: %s needs a %s %s, not '%s'\n", argv[i - 1],
                           at_least_1 ? "positive" : "non-negative",
                           tab[k].is_int ? "integer" : "finite number", argv[i]), -1;
        if (tab[k].is_int)
            *(int *)tab[k].dst = (int)v;
        else
            *(double *)tab[k].dst = v;
    }
    return 0;
}

/* The bytes of FILE's tokens in memory (uint16 each: a text file's bytes, or an llm.c
 * shard's body), 0 when there is no file. */
static double data_bytes(const char *path)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f)
        return 0.0;
    int32_t magic = 0;
    size_t got = fread(&magic, sizeof(magic), 1, f);
    fseek(f, 0, SEEK_END);
    double n = (double)ftell(f);
    fclose(f);
    return got == 1 && magic == 20240520 && n >= 1024 ? n - 1024 : 2.0 * n;
}

/* The shm rings a rank touches: on every communicator, its inbound ring from each peer
 * on its host and its outbound one in that peer's segment. weft-train's communicators:
 * the world, shard/'s group (G > 1) and its replicas (N/G > 1); groups are consecutive
 * ranks, so a host holds min(G, local) of a group and local/G of a replica set. */
static double ring_bytes(const shard_opts_t *so, int N, int local, double buffsize)
{
    int G = so->strategy == SHARD_NONE ? 1 : so->strategy == SHARD_HYBRID ?
            (so->group > 0 ? so->group : local) : N;
    int peers = local - 1;
    if (G > 1)
        peers += (G < local ? G : local) - 1;
    if (N / G > 1)
        peers += (local / G > 1 ? local / G : 1) - 1;
    return 2.0 * peers * buffsize;
}

/* Peak RSS a weft-train rank reports (bytes): the process and its libraries (6 MiB
 * measured), the data's tokens and the shm rings, then the largest of: init (the model
 * and its llm.c-order draw, 8 bytes a parameter), handing it to shard/ (the model plus
 * the states), and training (states, activations, units in flight). One process:
 * parameters, gradients and moments (16 bytes a parameter) and activations. */
static double predict_rss(double P, double state, double acts, double fly, int N,
                          double rings, double data)
{
    const double MiB = 1048576.0, base = 6 * MiB + data;
    if (N <= 1)
        return base + (8 * P > 16 * P + acts ? 8 * P : 16 * P + acts);
    double comm = rings;
    double peak = 8 * P;
    if (4 * P + state > peak)
        peak = 4 * P + state;
    if (state + acts + fly > peak)
        peak = state + acts + fly;
    return base + comm + peak;
}

static int model_mode(plan_opts_t *o, shard_plan_in_t *in, double model_rows[][4])
{
    int V = o->vocab > 0 ? o->vocab : 256, T = o->T > 0 ? o->T : o->ctx;
    train_gpt2_cfg_t cfg = { .max_seq_len = o->ctx, .vocab_size = V,
                             .padded_vocab_size = train_padded_vocab(V),
                             .num_layers = o->layers, .num_heads = o->heads,
                             .channels = o->dim };
    if (train_gpt2_cfg_check(&cfg) != WEFT_OK || o->B < 1 || T < 1 || T > o->ctx) {
        fprintf(stderr, "weft-plan: the model needs --layers --dim --heads --ctx and -b "
                "(-t <= --ctx): %s\n", weft_last_error());
        return -1;
    }
    size_t sizes[TRAIN_NUM_PARAM_TENSORS], len[4096 + 2];
    double P = (double)train_param_sizes(sizes, &cfg);
    int n = cfg.num_layers + 2;
    for (int u = 0; u < n; u++)
        len[u] = train_unit_len(&cfg, u);
    double acts = 4.0 * (double)train_gpt2_act_floats(&cfg, o->B, T);
    int local = o->world / o->hosts;
    in->params = P;
    in->pbytes = in->gbytes = 4;
    in->obytes = 8;
    in->act_bytes = acts;
    for (int s = 0; s < SHARD_NUM_STRATEGIES; s++) {
        shard_opts_t so = { .strategy = (shard_strategy_t)s, .group = in->group,
                            .prefetch = o->prefetch, .param_bf16 = o->param_bf16,
                            .reduce_bf16 = o->reduce_bf16 };
        double state = 16 * P, fly = 0;
        if (o->world > 1)
            shard_plan_units(&so, o->world, local, n, len, &state, &fly);
        model_rows[s][0] = state;
        model_rows[s][1] = acts;
        model_rows[s][2] = fly;
        double rings = ring_bytes(&so, o->world, local, o->buffsize_mib * 1048576.0);
        model_rows[s][3] = predict_rss(P, state, acts, fly, o->world, rings,
                                       data_bytes(o->data));
    }
    return 0;
}

static void print(const plan_opts_t *o, const shard_plan_in_t *in,
                  const shard_plan_row_t *rows, double model_rows[][4], int model)
{
    static const char *const names[] = { "DDP (none)", "ZeRO-1 (zero1)",
                                         "ZeRO-2 (grad_op)", "ZeRO-3/FULL_SHARD (full)",
                                         "HYBRID (hybrid)" };
    const double GB = 1e9, MiB = 1048576.0;
    if (!o->json) {
        printf("weft-plan: %.4g parameters, %g bytes each (%g + %g + %g), %d ranks on %d "
               "host(s), hybrid groups of %d%s\n", in->params, in->pbytes + in->gbytes +
               in->obytes, in->pbytes, in->gbytes, in->obytes, in->world, in->hosts,
               in->group, in->mem_bytes > 0 ? "" : ", no memory limit");
        printf("%-26s %12s %12s %8s %12s %5s %10s%s\n", "strategy", "state GB/rank",
               "sent GB/step", "x params", "inter-host GB", "fits", "min ranks",
               in->bw > 0 ? "   comm s/step" : "");
    }
    for (int s = 0; s < SHARD_NUM_STRATEGIES; s++) {
        const shard_plan_row_t *r = &rows[s];
        char minr[32];
        if (r->min_ranks > 0)   /* hybrid: the smallest shard group that fits */
            snprintf(minr, sizeof(minr), r->strategy == SHARD_HYBRID ? "%ld/group" : "%ld",
                     r->min_ranks);
        else
            snprintf(minr, sizeof(minr), "never");
        if (o->json) {
            printf("{\"strategy\": \"%s\", \"state_bytes\": %.0f, \"comm_bytes\": %.0f, "
                   "\"comm_inter_bytes\": %.0f, \"comm_x_params\": %.4f, \"fits\": %s, "
                   "\"min_ranks\": %ld, \"comm_s\": %.6g", shard_strategy_name(r->strategy),
                   r->state_bytes, r->comm_bytes, r->comm_inter_bytes, r->comm_mult,
                   r->fits ? "true" : "false", r->min_ranks, r->comm_s);
            if (model)
                printf(", \"weft_state_bytes\": %.0f, \"activation_bytes\": %.0f, "
                       "\"inflight_bytes\": %.0f, \"peak_rss_bytes\": %.0f",
                       model_rows[s][0], model_rows[s][1], model_rows[s][2],
                       model_rows[s][3]);
            printf("}\n");
            continue;
        }
        printf("%-26s %12.2f %12.2f %8.2f %12.2f %5s %10s", names[s], r->state_bytes / GB,
               r->comm_bytes / GB, r->comm_mult, r->comm_inter_bytes / GB,
               r->fits ? "yes" : "no", minr);
        if (in->bw > 0)
            printf("   %12.4f", r->comm_s);
        printf("\n");
    }
    if (model && !o->json) {
        printf("\nweft-train per rank (MiB): shard/'s model states, activations, in flight, "
               "predicted peak RSS\n");
        for (int s = 0; s < SHARD_NUM_STRATEGIES; s++)
            printf("  %-10s %10.2f %10.2f %10.2f %10.1f\n",
                   shard_strategy_name((shard_strategy_t)s), model_rows[s][0] / MiB,
                   model_rows[s][1] / MiB, model_rows[s][2] / MiB, model_rows[s][3] / MiB);
    }
}

int main(int argc, char **argv)
{
    plan_opts_t o = { .bpp = 16, .world = 0, .hosts = 0, .prefetch = 1, .buffsize_mib = 4 };
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (parse(argc, argv, &o) != 0)
        return 2;
    /* --per-host is ranks per host: with --world and no --hosts, the hosts follow (before
     * 2026-11-27 they stayed 1: "16 ranks on 1 host, hybrid groups of 4", no inter-host
     * traffic); all three given must agree */
    int hosts_given = o.hosts > 0;
    if (!hosts_given && o.world > 0 && o.per_host > 0) {
        if (o.world % o.per_host != 0) {
            fprintf(stderr, "weft-plan: --per-host %d does not divide --world %d\n",
                    o.per_host, o.world);
            return 2;
        }
        o.hosts = o.world / o.per_host;
    } else if (!hosts_given) {
        o.hosts = 1;
    }
    if (hosts_given && o.world > 0 && o.per_host > 0 &&
        (long long)o.hosts * o.per_host != o.world) {
        fprintf(stderr, "weft-plan: --hosts %d x --per-host %d is %lld ranks, not --world %d\n",
                o.hosts, o.per_host, (long long)o.hosts * o.per_host, o.world);
        return 2;
    }
    if (o.world == 0 && (long long)o.hosts * o.per_host > 1000000000) {
        fprintf(stderr, "weft-plan: --hosts %d x --per-host %d is over 1e9 ranks\n", o.hosts,
                o.per_host);
        return 2;
    }
    if (o.world == 0)
        o.world = o.per_host > 0 ? o.hosts * o.per_host : 1;
    if (o.data && access(o.data, R_OK) != 0) {
        fprintf(stderr, "weft-plan: --data %s: %s\n", o.data, strerror(errno));
        return 2;
    }
    if (o.hosts < 1 || o.world % o.hosts != 0) {
        fprintf(stderr, "weft-plan: --hosts %d does not divide --world %d\n", o.hosts, o.world);
        return 2;
    }
    shard_plan_in_t in = { .params = o.params, .pbytes = 2, .gbytes = 2, .obytes = o.bpp - 4,
                           .world = o.world, .hosts = o.hosts,
                           .group = o.shard_group > 0 ? o.shard_group :
                                    o.per_host > 0 ? o.per_host : o.world / o.hosts,
                           .mem_bytes = o.mem_gb * 1e9, .act_bytes = o.act_gb * 1e9,
                           .bw = o.bw_gbs * 1e9 };
    if (o.bpp < 4) {
        fprintf(stderr, "weft-plan: --bytes-per-param must be at least 4 (2 + 2 + optimizer)\n");
        return 2;
    }
    double model_rows[SHARD_NUM_STRATEGIES][4];
    int model = o.layers > 0;
    if (model && model_mode(&o, &in, model_rows) != 0)
        return 2;
    if (!model && o.params <= 0) {
        fprintf(stderr, "weft-plan: give --params P or a model (--layers ...); see --help\n");
        return 2;
    }
    if (model && o.act_gb > 0)
        in.act_bytes = o.act_gb * 1e9;
    shard_plan_row_t rows[SHARD_NUM_STRATEGIES];
    if (shard_plan(&in, rows) != WEFT_OK) {
        fprintf(stderr, "weft-plan: %s\n", weft_last_error());
        return 2;
    }
    print(&o, &in, rows, model_rows, model);
    return 0;
}
