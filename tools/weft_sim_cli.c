/*
 * weft_sim_cli.c - weft-sim: predicted time and bus bandwidth of weft's collectives on a
 * described cluster, per algorithm and size, in nccl-tests' table format.
 *
 *   weft-sim --hosts H --ranks-per-host R [--intra-bw GB/s --intra-lat us --inter-bw GB/s
 *            --inter-lat us --reduce-bw GB/s --copy-bw GB/s --nics N --chunk B --staging B
 *            | --model FILE] [-c allreduce] [-b 8] [-e 1G] [-f 2 | -i STEP] [-d float]
 *            [-o sum] [-r 0] [--algo NAME|all] [--inplace 0|1] [--root-check auto|0|1]
 *            [--write-model FILE] [-v]
 *
 * Every row replays the schedules weft's engine would run (algo_build over the registry,
 * comm/simtime.c), so algorithms registered later appear here without a change. The
 * model file is read first and flags given beside it override its keys, whatever their
 * order. Sizes, counts and bandwidth factors are nccl-tests' (bench/perf_colls.c), so a
 * row reads like a bench/<coll>_perf row of the same size; the #wrong columns print N/A
 * (no data is moved). docs/SCALE.md explains the model and the file format.
 *
 * Exit status: 0, 1 when a replay fails, 2 on bad input (said on stderr).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../bench/perf_common.h"
#include "algo.h"
#include "frame.h"
#include "simtime.h"

static const struct {
    const char *name;
    perf_kind_t kind;
    int coll;
} colls[] = {
    { "allreduce", PERF_COLL_ALLREDUCE, COLL_ALLREDUCE },
    { "reduce_scatter", PERF_COLL_REDUCE_SCATTER, COLL_REDUCE_SCATTER },
    { "allgather", PERF_COLL_ALLGATHER, COLL_ALLGATHER },
    { "broadcast", PERF_COLL_BROADCAST, COLL_BROADCAST },
    { "reduce", PERF_COLL_REDUCE, COLL_REDUCE },
    { "alltoall", PERF_COLL_ALLTOALL, COLL_ALLTOALL },
};
#define NCOLLS (int)(sizeof(colls) / sizeof(colls[0]))

static void usage(FILE *f)
{
    fprintf(f,
        "usage: weft-sim --hosts H --ranks-per-host R [cluster flags | --model FILE]\n"
        "                [-c COLL] [-b MIN] [-e MAX] [-f FACTOR | -i STEP] [-d TYPE] [-o OP]\n"
        "                [-r ROOT] [--algo NAME|all] [--inplace 0|1] [--root-check auto|0|1]\n"
        "                [--write-model FILE] [-v]\n"
        "Predicts weft's collectives on a described cluster by replaying the schedules the\n"
        "engine runs under an alpha-beta-gamma model; prints nccl-tests' table per algorithm.\n"
        "cluster (model file keys in brackets; flags override the file):\n"
        "  --hosts H            hosts [hosts]\n"
        "  --ranks-per-host R   ranks on each host, numbered host by host [ranks_per_host]\n"
        "  --nics N             NICs per host, rank r on NIC (r %% R) %% N [nics]\n"
        "  --intra-bw GB/s      per rank and direction inside a host [intra_bw]\n"
        "  --intra-lat us       latency inside a host [intra_lat]\n"
        "  --inter-bw GB/s      per NIC and direction between hosts [inter_bw]\n"
        "  --inter-lat us       latency between hosts [inter_lat]\n"
        "  --reduce-bw GB/s     a rank's reduction bandwidth [reduce_bw]\n"
        "  --copy-bw GB/s       a rank's local copy bandwidth [copy_bw]\n"
        "  --intra-overhead us  per frame a link inside a host is busy [intra_overhead]\n"
        "  --inter-overhead us  per frame a NIC is busy [inter_overhead]\n"
        "  --chunk BYTES        frame payload, 0: weft's (128K one host, 512K more) [chunk]\n"
        "  --staging BYTES      bytes a link holds, WEFT_BUFFSIZE (4M); 0: unbounded [staging]\n"
        "  --cores N            cores per host; fewer than its ranks time-share them [cores]\n"
        "  --shm-copies 0|1     frames inside a host moved by the ranks' CPUs, as weft's\n"
        "                       shm transport does (1), or by links of their own [shm_copies]\n"
        "  --net-copies 0|1     frames between hosts moved by the CPUs at both ends, as tcp\n"
        "                       does (1), or by NICs [net_copies]\n"
        "  --channels N         WEFT_NCHANNELS: rings (chains) over slices, 1-64 [channels]\n"
        "  --model FILE         key = value lines, '#' comments (docs/SCALE.md)\n"
        "  --write-model FILE   write the resulting model file ('-': stdout) and go on\n"
        "call (nccl-tests' flags):\n"
        "  -c COLL   allreduce (default), reduce_scatter, allgather, broadcast, reduce, alltoall\n"
        "  -b, -e    smallest and largest size in bytes, K/M/G suffixes (default 8, 1G)\n"
        "  -f, -i    size factor, or increment when the factor is 1 or less (default 1M);\n"
        "            a factor above 1 wins over -i; without -f: 2, or 1 with -i (default 2)\n"
        "  -d TYPE   float (default), half, bfloat16, double, int32, ...\n"
        "  -o OP     sum (default), prod, min, max, avg\n"
        "  -r ROOT   root of broadcast and reduce (default 0)\n"
        "  --algo    a registered algorithm, or all (default): every one that runs the call\n"
        "  --inplace 1 (default) also replays the in-place call; 0 prints N/A there\n"
        "  --root-check  WEFT_ROOT_CHECK (default auto: from 64K)\n"
        "  --max-frames N  rows that would replay more frames print N/A (default 200M; 0: no\n"
        "            limit), at once when ranks 0, 1, the middle and the last each cut\n"
        "            more than N / ranks; the replay takes about 0.3-4 us a frame\n"
        "  -v        per row on stderr: steps, frames, events, seconds and memory taken\n");
}

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "weft-sim: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (weft-sim --help)\n");
    return 2;
}

/* Long flags that set a cluster key of the same name with '-' for '_'. */
static const char *const cluster_flags[] = {
    "hosts", "ranks-per-host", "nics", "intra-bw", "intra-lat", "inter-bw", "inter-lat",
    "reduce-bw", "copy-bw", "intra-overhead", "inter-overhead", "chunk", "staging",
    "cores", "shm-copies", "net-copies", "channels",
};
#define NCLUSTER (int)(sizeof(cluster_flags) / sizeof(cluster_flags[0]))

enum { OPT_CLUSTER = 1000, OPT_MODEL = 1100, OPT_ALGO, OPT_INPLACE, OPT_ROOTCHECK,
       OPT_WRITE, OPT_MAXFRAMES, OPT_HELP };

typedef struct {
    perf_kind_t kind;
    int coll, type, op, root, inplace, root_check, verbose;
    long long max_frames;
    size_t min, max, step, factor;
    int factor_set;             /* -f given: otherwise 2, or 1 when -i is given */
    int step_set;
} sim_opts_t;

static void print_cluster(const simtime_cluster_t *c)
{
    printf("# weft-sim: predicted by replaying weft's schedules on a modelled cluster, "
           "not measured\n");
    printf("# Cluster: %d host(s) x %d rank(s) = %d ranks, %d NIC(s) per host", c->hosts,
           c->per_host, c->hosts * c->per_host, c->nics);
    if (c->nics > c->per_host)      /* rank r's is (r % per_host) % nics: the rest idle */
        printf(" (%d used: one per rank)", c->per_host);
    printf("\n");
    printf("#   intra-host %.4g GB/s, %.4g us (+%.4g us/frame); inter-host %.4g GB/s per NIC, "
           "%.4g us (+%.4g us/frame)\n", 1e-9 / c->m.beta[ALGO_LINK_SHM],
           c->m.alpha[ALGO_LINK_SHM] * 1e6, c->overhead[ALGO_LINK_SHM] * 1e6,
           1e-9 / c->m.beta[ALGO_LINK_NET], c->m.alpha[ALGO_LINK_NET] * 1e6,
           c->overhead[ALGO_LINK_NET] * 1e6);
    printf("#   reduce %.4g GB/s, copy %.4g GB/s; staging %zu bytes per link; %d channel(s)\n",
           1e-9 / c->m.gamma, 1e-9 / c->copy_beta, c->staging, c->channels);
}

/* One algorithm's table; returns 0, 1 when a replay failed, or -1 when it runs none of
 * the rows (skipped). */
static int run_algo(const simtime_cluster_t *c, const algo_t *al, const sim_opts_t *o,
                    int named)
{
    int n = c->hosts * c->per_host, ntypes, rows = 0, rows_bw = 0;
    const perf_type_t *t = &perf_types(&ntypes)[o->type];
    double bw_sum = 0;
    for (size_t size = o->min; size <= o->max;
         size = o->factor > 1 ? size * o->factor : size + o->step) {
        perf_counts_t pc;
        perf_coll_counts(o->kind, size / t->size, t->size, n, 0, &pc);
        double sec[2] = { -1, -1 };
        for (int ip = 0; ip < 2; ip++) {
            if (ip && !o->inplace)
                continue;
            sched_args_t a;
            memset(&a, 0, sizeof(a));
            a.coll = o->coll;
            a.count = pc.paramcount;
            a.dtype = t->dtype;
            a.op = (weft_op_t)o->op;
            a.root = o->coll == COLL_BROADCAST || o->coll == COLL_REDUCE ? o->root : -1;
            a.peer2 = -1;
            a.inplace = ip;
            a.reg = SCHED_REG_NONE;
            a.nranks = n;
            simtime_layout(c, 0, &a.layout);
            if (!al->supports(&a)) {
                if (named) {
                    fprintf(stderr, "weft-sim: %s does not run %s on %d ranks here\n",
                            al->name, coll_name(o->coll), n);
                    return 1;
                }
                return -1;
            }
            if (rows == 0 && ip == 0) {
                printf("#\n# Algorithm: %s\n", al->name);
                perf_print_header(0);
            }
            simtime_result_t res;
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            weft_status_t st = simtime_run(c, al, &a, o->root_check, o->max_frames, &res);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (st == WEFT_ERR_UNSUPPORTED) {   /* past --max-frames: this row says N/A */
                fprintf(stderr, "%s at %zu bytes (--max-frames): N/A\n", weft_last_error(),
                        size);
                continue;
            }
            if (st != WEFT_OK) {
                fflush(stdout);
                fprintf(stderr, "%s (%s, %zu bytes)\n", weft_last_error(), al->name, size);
                return 1;
            }
            sec[ip] = res.seconds;
            if (o->verbose)
                fprintf(stderr, "weft-sim: %s %zu bytes%s: %lld steps, %lld frames, %lld "
                        "events; %.2f s, %.1f MB\n", al->name, size, ip ? " in place" : "",
                        res.steps, res.frames, res.events,
                        (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
                        (double)res.peak_bytes / 1e6);
        }
        perf_print_row_start(t->size * (pc.sendcount > pc.recvcount ? pc.sendcount : pc.recvcount),
                             pc.paramcount,
                             t->name, (perf_coll_flags(o->kind) & PERF_OP) ?
                             perf_op_str((weft_op_t)o->op) : "none", (perf_coll_flags(o->kind) &
                             PERF_ROOT) ? o->root : -1);
        for (int ip = 0; ip < 2; ip++) {
            if (sec[ip] < 0) {
                perf_print_na();
                continue;
            }
            double algbw, busbw, s = sec[ip] > 0 ? sec[ip] : 1e-12;
            perf_coll_bw(o->kind, pc.paramcount, t->size, s, n, &algbw, &busbw);
            perf_print_result(sec[ip] * 1e6, algbw, busbw, -1);
            bw_sum += busbw, rows_bw++;     /* both columns, as nccl-tests averages */
        }
        printf("\n");
        fflush(stdout);
        rows++;
        if (size == o->max || (o->factor > 1 ? size > o->max / o->factor
                                             : size > o->max - o->step))
            break;
    }
    if (rows)
        printf("# Avg bus bandwidth    : %g \n", rows_bw ? bw_sum / rows_bw : 0.0);
    return 0;
}

static int parse_opts(int argc, char **argv, simtime_cluster_t *c, sim_opts_t *o,
                      const char **algo, const char **write_model)
{
    static struct option longs[NCLUSTER + 8];
    for (int k = 0; k < NCLUSTER; k++)
        longs[k] = (struct option){ cluster_flags[k], required_argument, NULL, OPT_CLUSTER + k };
    longs[NCLUSTER + 0] = (struct option){ "model", required_argument, NULL, OPT_MODEL };
    longs[NCLUSTER + 1] = (struct option){ "algo", required_argument, NULL, OPT_ALGO };
    longs[NCLUSTER + 2] = (struct option){ "inplace", required_argument, NULL, OPT_INPLACE };
    longs[NCLUSTER + 3] = (struct option){ "root-check", required_argument, NULL,
                                           OPT_ROOTCHECK };
    longs[NCLUSTER + 4] = (struct option){ "write-model", required_argument, NULL, OPT_WRITE };
    longs[NCLUSTER + 5] = (struct option){ "help", no_argument, NULL, OPT_HELP };
    longs[NCLUSTER + 6] = (struct option){ "max-frames", required_argument, NULL,
                                           OPT_MAXFRAMES };
    longs[NCLUSTER + 7] = (struct option){ NULL, 0, NULL, 0 };
    const char *shorts = "c:b:e:f:i:d:o:r:vh";
    int ch;
    /* Pass 1: the model file, so that flags override it wherever they stand. */
    opterr = 0;
    while ((ch = getopt_long(argc, argv, shorts, longs, NULL)) != -1)
        if (ch == OPT_MODEL && simtime_cluster_load(c, optarg) != WEFT_OK) {
            fprintf(stderr, "weft-sim: %s\n", weft_last_error());
            return 2;
        }
    optind = 1;
    opterr = 1;
    while ((ch = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
        double v;
        int k;
        switch (ch) {
        case 'c':
            for (k = 0; k < NCOLLS && strcmp(colls[k].name, optarg) != 0; k++)
                ;
            if (k == NCOLLS)
                return bad("-c %s: not a collective weft-sim replays (allreduce, "
                           "reduce_scatter, allgather, broadcast, reduce, alltoall)", optarg);
            o->kind = colls[k].kind;
            o->coll = colls[k].coll;
            break;
        case 'b': case 'e': case 'i':
            v = perf_parse_size(optarg);
            if (v < 0 || v > 9.2e18 || (ch != 'i' && v < 1))
                return bad(ch == 'b' ? "-b %s: not a size (bytes with K, M or G, 1 to 8E)"
                           : ch == 'e' ? "-e %s: not a size (bytes with K, M or G, 1 to 8E)"
                           : "-i %s: not a size (bytes with K, M or G, up to 8E)", optarg);
            *(ch == 'b' ? &o->min : ch == 'e' ? &o->max : &o->step) = (size_t)v;
            o->step_set |= ch == 'i';
            break;
        case 'f':
            /* nccl-tests' and the perf tools' (bench/perf_common.h): 0 and 1 step by -i */
            if (perf_parse_int(optarg, 0, 1 << 20, &k) != 0)
                return bad("-f %s: want a whole factor, 0 to 1048576", optarg);
            o->factor = (size_t)k;
            o->factor_set = 1;
            break;
        case 'd':
            if ((o->type = perf_type_index(optarg)) < 0)
                return bad("-d %s: not a type (float, half, bfloat16, double, int32, ...)",
                           optarg);
            break;
        case 'o':
            if ((o->op = perf_op_index(optarg)) < 0)
                return bad("-o %s: not an op (sum, prod, min, max, avg)", optarg);
            break;
        case 'r':
            if (perf_parse_int(optarg, 0, SIMTIME_MAX_RANKS, &o->root) != 0)
                return bad("-r %s: want a rank", optarg);
            break;
        case 'v': o->verbose = 1; break;
        case 'h': case OPT_HELP: usage(stdout); exit(0);
        case OPT_MODEL: break;
        case OPT_ALGO: *algo = optarg; break;
        case OPT_WRITE: *write_model = optarg; break;
        case OPT_MAXFRAMES:
            v = perf_parse_size(optarg);
            if (v < 0 || v > 9.2e18)
                return bad("--max-frames %s: want a count (0: no limit)", optarg);
            o->max_frames = (long long)v;
            break;
        case OPT_ROOTCHECK:
            if (!strcmp(optarg, "auto")) {
                o->root_check = -1;
                break;
            }
            /* fall through */
        case OPT_INPLACE:
            if (perf_parse_int(optarg, 0, 1, &k) != 0)
                return bad(ch == OPT_INPLACE ? "--inplace: want 0 or 1, got '%s'"
                                             : "--root-check: want auto, 0 or 1, got '%s'",
                           optarg);
            *(ch == OPT_INPLACE ? &o->inplace : &o->root_check) = k;
            break;
        default:
            if (ch >= OPT_CLUSTER && ch < OPT_CLUSTER + NCLUSTER) {
                char key[32];
                snprintf(key, sizeof(key), "%s", cluster_flags[ch - OPT_CLUSTER]);
                for (char *p = key; *p; p++)
                    *p = *p == '-' ? '_' : *p;
                if (simtime_cluster_set(c, key, optarg) != WEFT_OK) {
                    fprintf(stderr, "weft-sim: --%s: %s\n", cluster_flags[ch - OPT_CLUSTER],
                            weft_last_error());
                    return 2;
                }
                break;
            }
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc)
        return bad("unexpected argument '%s'", argv[optind]);
    if (o->min > o->max)
        return bad("-b is above -e%s", "");
    /* nccl-tests' rule, as the perf tools': a factor above 1 steps by it whatever -i
     * says, and -f 1 steps by -i (1M unless given). weft-sim's sweep doubles by default,
     * and -i alone steps by it (before, -i set the factor to 1 wherever it stood, so
     * "-f 2 -i 1M" stepped by 1M, and "-f 1" alone was refused as "-i 0 with -f 1") */
    if (!o->factor_set)
        o->factor = o->step_set ? 1 : 2;
    if (o->factor <= 1 && o->step == 0 && o->min < o->max)
        return bad("-i 0 with a factor of %s (-f) never reaches -e", o->factor ? "1" : "0");
    return 0;
}

int main(int argc, char **argv)
{
    simtime_cluster_t c;
    sim_opts_t o = { .kind = PERF_COLL_ALLREDUCE, .coll = COLL_ALLREDUCE, .op = WEFT_SUM,
                     .inplace = 1, .root_check = -1, .max_frames = 200000000, .min = 8, .max = 1u << 30,
                     .step = 1u << 20, .factor = 2 };
    const char *algo = "all", *write_model = NULL;
    o.type = perf_type_index("float");
    simtime_cluster_default(&c);
    int rc = parse_opts(argc, argv, &c, &o, &algo, &write_model);
    if (rc)
        return rc;
    if (simtime_cluster_check(&c) != WEFT_OK) {
        fprintf(stderr, "weft-sim: %s\n", weft_last_error());
        return 2;
    }
    int n = c.hosts * c.per_host;
    if ((o.coll == COLL_BROADCAST || o.coll == COLL_REDUCE) && o.root >= n)
        return bad("-r: the root must be a rank of the cluster%s", "");
    const algo_t *named = strcmp(algo, "all") ? algo_find(algo) : NULL;
    if (strcmp(algo, "all") && named == NULL) {
        char names[256];
        fprintf(stderr, "weft-sim: --algo %s: not a registered algorithm; all or one of %s\n",
                algo, algo_choices(names, sizeof(names)) + strlen("auto|"));
        return 2;
    }
    if (write_model) {
        FILE *f = strcmp(write_model, "-") ? fopen(write_model, "w") : stdout;
        if (f == NULL)
            return bad("cannot write %s", write_model);
        simtime_cluster_write(&c, f);
        if (f != stdout && fclose(f) != 0)
            return bad("cannot write %s", write_model);
    }
    int *map = malloc((size_t)n * sizeof(int));     /* the host map the engine has */
    if (map == NULL)
        return bad("out of memory%s", "");
    simtime_host_map(&c, map);
    c.rank_host = map;
    print_cluster(&c);
    int ntypes;
    sched_args_t dt = { .dtype = perf_types(&ntypes)[o.type].dtype };
    printf("# Collective: %s; chunk %zu bytes per frame\n", coll_name(o.coll),
           simtime_chunk(&c, &dt));
    rc = 0;
    int ran = 0;
    for (int k = 0; algo_registry[k]; k++) {
        const algo_t *al = algo_registry[k];
        if (named && al != named)
            continue;
        int r = run_algo(&c, al, &o, named != NULL);
        if (r > 0)
            rc = 1;
        ran += r >= 0;
    }
    free(map);
    if (!ran) {
        fprintf(stderr, "weft-sim: no registered algorithm runs %s on %d ranks\n",
                coll_name(o.coll), n);
        return 1;
    }
    printf("#\n");
    return rc;
}
