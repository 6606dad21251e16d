/*
 * test_sim.c - weft-sim's timing executor (comm/simtime.c) against closed forms.
 *
 *   - one frame per step, unbounded staging: a ring all-reduce on n = 2..8 ranks of one
 *     host takes exactly the ring's alpha-beta-gamma cost (algo_ring_def.cost: 2(n-1)
 *     hops, 2(n-1)/n S bytes, (n-1)/n S reduced), and on 2 ranks the direct one its cost;
 *   - many frames: a pipelined ring is bound by its busiest port, 2(n-1)/n S beta, and
 *     comes within 2% of it at 64 MB; a chain broadcast within 2% of S beta; a direct
 *     all-gather of 8 ranks within 3% of 7 blocks through one port (the receiving port
 *     does not hold up the sending one);
 *   - hosts: NICs are shared by the ranks of a host (an all-gather across 2 hosts x 2
 *     ranks takes twice as long on one NIC as on two), and a 4 x 8 ring's busbw at 256 MB
 *     is the NIC's bandwidth within 3%;
 *   - every registered algorithm and collective it runs, in place or not, 2-8 ranks on
 *     one or two hosts, replays to the end;
 *   - channels: a 2-channel ring is two rings (twice the steps, sooner at 256K), none
 *     below 64K of the buffer, every collective replays on 3 channels across hosts;
 *   - the staging bound holds a sender until its receiver drains the link;
 *   - the layouts (host, rank on the host, ...) are algo_layout's for every rank;
 *   - bad input: unknown keys, bad values, a bad model file (file:line in the message,
 *     the cluster unchanged), a cluster of one rank, a chunk above a quarter of the staging;
 *   - schedules that do not fit (test algorithms here): a send nobody receives, a frame
 *     larger than the receive, a deadlock, each an error naming ranks and steps; a call
 *     past max_frames is refused before it is replayed, and before the schedules of all
 *     its ranks are built (judged from 4 ranks, or counted as they are built), while a
 *     fan-out whose rank 0 alone sends much replays;
 *   - net_copies: the CPUs move the frames between hosts, and the number of NICs
 *     changes nothing; NICs beyond a host's ranks take no memory;
 *   - a call of count 0 takes no time and no steps (the engine runs no schedule);
 *   - a model-file line of any length is one line (a long comment's tail is no key).
 *
 * Usage: test_sim [-v]; prints one summary line, exits 1 on failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algo.h"
#include "frame.h"
#include "simtime.h"

static int passed, failed, verbose;

#define CHECK(cond, ...) do {                                                 \
        if (cond) {                                                           \
            passed++;                                                         \
        } else {                                                              \
            failed++;                                                         \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
        }                                                                     \
    } while (0)

static sched_args_t call(int coll, size_t count, int nranks)
{
    sched_args_t a;
    memset(&a, 0, sizeof(a));
    a.coll = coll;
    a.count = count;
    a.dtype = WEFT_FLOAT32;
    a.op = WEFT_SUM;
    a.root = coll == COLL_BROADCAST || coll == COLL_REDUCE ? 0 : -1;
    a.peer2 = -1;
    a.nranks = nranks;
    a.reg = SCHED_REG_NONE;
    return a;
}

static double run(const simtime_cluster_t *c, const algo_t *al, int coll, size_t bytes,
                  weft_status_t want)
{
    sched_args_t a = call(coll, bytes / 4, c->hosts * c->per_host);
    simtime_result_t res;
    weft_status_t st = simtime_run(c, al, &a, 1, 0, &res);
    CHECK(st == want, "%s %s %zu bytes on %dx%d: status %d, want %d (%s)", al->name,
          coll_name(coll), bytes, c->hosts, c->per_host, st, want, weft_last_error());
    if (verbose && st == WEFT_OK)
        fprintf(stderr, "%s %s %zu B on %dx%d: %.3f us, %lld frames\n", al->name,
                coll_name(coll), bytes, c->hosts, c->per_host, res.seconds * 1e6, res.frames);
    return st == WEFT_OK ? res.seconds : -1;
}

static int near(double got, double want, double rel)
{
    return fabs(got - want) <= rel * fabs(want);
}

static void closed_forms(void)
{
    simtime_cluster_t c;
    simtime_cluster_default(&c);
    c.staging = 0;                      /* unbounded: one frame per step */
    c.chunk = (size_t)1 << 30;
    for (int n = 2; n <= 8; n++) {
        c.per_host = n;
        size_t bytes = (size_t)n * 1024 * 1024;     /* whole float blocks */
        sched_args_t a = call(COLL_ALLREDUCE, bytes / 4, n);
        simtime_layout(&c, 0, &a.layout);
        double want = algo_ring_def.cost(&a, &c.m);
        double got = run(&c, &algo_ring_def, COLL_ALLREDUCE, bytes, WEFT_OK);
        CHECK(near(got, want, 1e-6), "ring all-reduce, %d ranks, one frame a step: %.6g s, "
              "the alpha-beta-gamma form says %.6g", n, got, want);
    }
    c.per_host = 2;
    sched_args_t a = call(COLL_ALLREDUCE, (1 << 20) / 4, 2);
    simtime_layout(&c, 0, &a.layout);
    double got = run(&c, &algo_direct_def, COLL_ALLREDUCE, 1 << 20, WEFT_OK);
    double want = algo_direct_def.cost(&a, &c.m);
    CHECK(near(got, want, 1e-6), "direct all-reduce, 2 ranks: %.6g s, the form says %.6g",
          got, want);

    /* Pipelined: 128K frames, 4M staging; the busiest port bounds the time. */
    simtime_cluster_default(&c);
    for (int n = 2; n <= 8; n *= 2) {
        c.per_host = n;
        double S = 64.0 * 1024 * 1024, beta = c.m.beta[ALGO_LINK_SHM];
        double bound = 2.0 * (n - 1) / n * S * beta;
        got = run(&c, &algo_ring_def, COLL_ALLREDUCE, (size_t)S, WEFT_OK);
        CHECK(got >= bound && near(got, bound, 0.02), "pipelined ring all-reduce, %d ranks, "
              "64 MB: %.6g s, the port bound is %.6g", n, got, bound);
        got = run(&c, &algo_ring_def, COLL_BROADCAST, (size_t)S, WEFT_OK);
        CHECK(got >= S * beta && near(got, S * beta, 0.02), "chain broadcast, %d ranks, "
              "64 MB: %.6g s, S beta is %.6g", n, got, S * beta);
    }
    /* An all-to-all pattern runs at the ports' rate: a direct all-gather of 8 ranks
     * moves 7 blocks out of and into every port. */
    c.per_host = 8;
    double blk = 8.0 * 1024 * 1024;
    got = run(&c, &algo_direct_def, COLL_ALLGATHER, (size_t)blk, WEFT_OK);
    want = 7 * blk * c.m.beta[ALGO_LINK_SHM];
    CHECK(got >= want && near(got, want, 0.03), "direct all-gather, 8 ranks, 8 MB blocks: "
          "%.6g s, 7 blocks through a port take %.6g", got, want);
    /* Scale with ranks: with one frame a step the ring's latency term grows as 2(n-1). */
    c.per_host = 4;
    double t4 = run(&c, &algo_ring_def, COLL_ALLREDUCE, 64, WEFT_OK);
    c.per_host = 16;
    double t16 = run(&c, &algo_ring_def, COLL_ALLREDUCE, 64, WEFT_OK);
    CHECK(near(t16 / t4, 30.0 / 6.0, 0.05), "8-byte-ish ring all-reduce: 16 ranks take %.3g "
          "x 4 ranks' time, want 30/6", t16 / t4);
}

/* CPU-moved frames: shm_copies (a rank's core copies a frame in, the peer's copies or
 * reduces it out), net_copies (the same at both ends of a host-to-host hop), and cores
 * (ranks beyond them time-share). Closed forms for a pipelined 2-rank ring all-reduce
 * of S bytes: each rank's core does S/2 copy in + S/2 reduce out (reduce-scatter), S/2
 * copy in + S/2 copy out (all-gather), one after the other. */
static void cpu_moved(void)
{
    simtime_cluster_t c;
    simtime_cluster_default(&c);
    c.copy_beta = 1.0 / 10e9;
    c.m.gamma = 1.0 / 6e9;
    double S = 64.0 * 1024 * 1024;
    double ports = run(&c, &algo_ring_def, COLL_ALLREDUCE, (size_t)S, WEFT_OK);
    CHECK(simtime_cluster_set(&c, "shm_copies", "1") == WEFT_OK, "shm_copies = 1");
    double cpu = run(&c, &algo_ring_def, COLL_ALLREDUCE, (size_t)S, WEFT_OK);
    double want = S / 2 * (3 * c.copy_beta + c.m.gamma);
    CHECK(cpu >= want * (1 - 1e-9) && near(cpu, want, 0.02), "shm_copies: 2-rank ring all-reduce of 64 "
          "MB takes %.6g s, its cores' work is %.6g (ports alone: %.6g)", cpu, want, ports);
    /* 4 ranks on 2 cores: every cost on the cores doubles */
    c.per_host = 4;
    double own = run(&c, &algo_ring_def, COLL_ALLREDUCE, (size_t)S, WEFT_OK);
    CHECK(simtime_cluster_set(&c, "cores", "2") == WEFT_OK, "cores = 2");
    double shared = run(&c, &algo_ring_def, COLL_ALLREDUCE, (size_t)S, WEFT_OK);
    CHECK(near(shared / own, 2.0, 0.02), "4 ranks on 2 cores take %.4g x the time on 4",
          shared / own);
    CHECK(simtime_cluster_set(&c, "cores", "8") == WEFT_OK, "cores = 8");
    double spare = run(&c, &algo_ring_def, COLL_ALLREDUCE, (size_t)S, WEFT_OK);
    CHECK(near(spare, own, 1e-9), "spare cores change nothing: %.6g s, %.6g", spare, own);
    /* net_copies: 2 hosts x 1 rank, a host-to-host hop costs S/2 inter beta on each end
     * and the reduction follows the copy out */
    simtime_cluster_default(&c);
    c.hosts = 2;
    c.per_host = 1;
    c.m.beta[ALGO_LINK_NET] = 1.0 / 3e9;
    c.m.gamma = 1.0 / 6e9;
    CHECK(simtime_cluster_set(&c, "net_copies", "1") == WEFT_OK, "net_copies = 1");
    cpu = run(&c, &algo_ring_def, COLL_ALLREDUCE, (size_t)S, WEFT_OK);
    want = S / 2 * (4 * c.m.beta[ALGO_LINK_NET] + c.m.gamma);
    CHECK(cpu >= want * (1 - 1e-9) && near(cpu, want, 0.02), "net_copies: 2-host ring all-reduce of 64 "
          "MB takes %.6g s, both ends' work is %.6g", cpu, want);
    /* net_copies moves frames with the CPUs, not the NICs: their number changes nothing.
     * A direct all-to-all of 2 x 2 ranks, a block B to each peer: each rank's CPU copies
     * out 2 blocks to the other host and copies in 2 (4 B inter beta); the block inside
     * the host goes by its ports meanwhile. Before, a frame held its NIC's sending port from when it
     * asked for it until its CPU had copied it (after the CPU's other work), so the two
     * ranks of a host waited for each other's CPUs: one NIC took 86 ms at 64 MB, two 69. */
    simtime_cluster_default(&c);
    c.hosts = 2;
    c.per_host = 2;
    c.m.beta[ALGO_LINK_NET] = 1.0 / 1e9;
    c.m.alpha[ALGO_LINK_NET] = c.m.alpha[ALGO_LINK_SHM] = 0;
    c.net_copies = 1;
    double B = 16.0 * 1024 * 1024;
    double nic1 = run(&c, &algo_direct_def, COLL_ALLTOALL, (size_t)B, WEFT_OK);
    c.nics = 2;
    double nic2 = run(&c, &algo_direct_def, COLL_ALLTOALL, (size_t)B, WEFT_OK);
    want = 4 * B * c.m.beta[ALGO_LINK_NET];
    CHECK(nic1 == nic2 && nic1 >= want * (1 - 1e-9) && near(nic1, want, 0.05), "net_copies: "
          "2x2 direct all-to-all of 16 MB blocks takes %.6g s on one NIC, %.6g on two; the "
          "CPUs' copies take %.6g", nic1, nic2, want);
    /* bad values change nothing */
    simtime_cluster_t before = c;
    CHECK(simtime_cluster_set(&c, "shm_copies", "2") == WEFT_ERR_INVALID_ARG &&
          simtime_cluster_set(&c, "net_copies", "yes") == WEFT_ERR_INVALID_ARG &&
          simtime_cluster_set(&c, "cores", "0") == WEFT_ERR_INVALID_ARG &&
          !memcmp(&before, &c, sizeof(c)), "shm_copies 2, net_copies yes, cores 0 refused");
}

/* Channels (WEFT_NCHANNELS): the replay runs the ring's channels as the engine gets them
 * (the tuner's rule, algo_channels: none below 64K of the buffer). A 4-rank ring
 * all-reduce of 256K on 2 channels is two rings of half the blocks: twice the steps, and
 * sooner (each hop's frame is half as long, so the pipeline fills sooner); 4 channels
 * offered at 64K give one. Every collective the ring runs replays on 3 channels across 2
 * hosts x 3 ranks. channels 0 and 65 are refused. */
static void channels(void)
{
    simtime_cluster_t c;
    simtime_cluster_default(&c);
    c.per_host = 4;
    sched_args_t a = call(COLL_ALLREDUCE, 65536, 4);
    simtime_result_t one, two, small1, small4;
    CHECK(simtime_run(&c, &algo_ring_def, &a, 1, 0, &one) == WEFT_OK, "1 channel");
    CHECK(simtime_cluster_set(&c, "channels", "2") == WEFT_OK, "channels = 2");
    CHECK(simtime_run(&c, &algo_ring_def, &a, 1, 0, &two) == WEFT_OK, "2 channels");
    CHECK(two.steps == 2 * one.steps && two.seconds < one.seconds, "2 channels: %lld steps "
          "(1: %lld), %.4g us (1: %.4g)", two.steps, one.steps, two.seconds * 1e6,
          one.seconds * 1e6);
    a = call(COLL_ALLREDUCE, 16384, 4);
    CHECK(simtime_cluster_set(&c, "channels", "4") == WEFT_OK, "channels = 4");
    CHECK(simtime_run(&c, &algo_ring_def, &a, 1, 0, &small4) == WEFT_OK, "64K, 4 channels");
    c.channels = 1;
    CHECK(simtime_run(&c, &algo_ring_def, &a, 1, 0, &small1) == WEFT_OK, "64K, 1 channel");
    CHECK(small4.steps == small1.steps && small4.seconds == small1.seconds,
          "64K offered 4 channels runs one: %lld steps, %lld", small4.steps, small1.steps);
    c.hosts = 2;
    c.per_host = 3;
    c.channels = 3;
    for (int coll = COLL_ALLREDUCE; coll < COLL_NUM; coll++) {
        sched_args_t b = call(coll, 1 << 20, 6);
        if (algo_ring_def.supports(&b))
            run(&c, &algo_ring_def, coll, 4 << 20, WEFT_OK);
    }
    simtime_cluster_t before = c;
    CHECK(simtime_cluster_set(&c, "channels", "0") == WEFT_ERR_INVALID_ARG &&
          simtime_cluster_set(&c, "channels", "65") == WEFT_ERR_INVALID_ARG &&
          !memcmp(&before, &c, sizeof(c)), "channels 0 and 65 refused");
}

static void hosts(void)
{
    simtime_cluster_t c;
    simtime_cluster_default(&c);
    c.hosts = 2;
    c.per_host = 2;
    c.nics = 1;
    double one = run(&c, &algo_direct_def, COLL_ALLGATHER, 16 << 20, WEFT_OK);
    c.nics = 2;
    double two = run(&c, &algo_direct_def, COLL_ALLGATHER, 16 << 20, WEFT_OK);
    CHECK(near(one / two, 2.0, 0.05), "direct all-gather across 2 hosts: one NIC %.4g s, "
          "two NICs %.4g s; want a ratio of 2", one, two);
    /* NICs beyond a host's ranks carry nothing and take no memory (32768 hosts of 65536
     * NICs asked for 51 GB of ports before; here 2 x 65536 took 4 MB) */
    c.nics = 65536;
    sched_args_t ag = call(COLL_ALLGATHER, (16 << 20) / 4, 4);
    simtime_result_t many;
    CHECK(simtime_run(&c, &algo_direct_def, &ag, 1, 0, &many) == WEFT_OK &&
          many.seconds == two && many.peak_bytes < (1u << 20), "65536 NICs on hosts of 2 "
          "ranks: %.4g s (two NICs: %.4g), %zu bytes of memory", many.seconds, two,
          many.peak_bytes);

    c.hosts = 4;
    c.per_host = 8;
    c.nics = 8;
    double S = 256.0 * 1024 * 1024, n = 32;
    double t = run(&c, &algo_ring_def, COLL_ALLREDUCE, (size_t)S, WEFT_OK);
    double busbw = S / t * 2 * (n - 1) / n, nic = 1.0 / c.m.beta[ALGO_LINK_NET];
    CHECK(busbw <= nic * 1.0001 && near(busbw, nic, 0.03), "4x8 ring all-reduce, 256 MB: "
          "busbw %.4g GB/s, the NIC gives %.4g", busbw / 1e9, nic / 1e9);
}

/* Every registered algorithm x collective it runs x in place or not, on 1-2 hosts, with
 * the root check: each replays to the end (no deadlock, no frame left over), and takes
 * at least one hop's latency; with a count of 0 it takes no time and no steps, as the
 * engine runs no schedule then (coll_run; a barrier, count 0 always, runs). */
static void every_algorithm(void)
{
    static const int coll[] = { COLL_ALLREDUCE, COLL_REDUCE_SCATTER, COLL_ALLGATHER,
                                COLL_BROADCAST, COLL_REDUCE, COLL_ALLTOALL, COLL_BARRIER };
    static const size_t counts[] = { 0, 1, 17, 300000 };
    simtime_cluster_t c;
    simtime_cluster_default(&c);
    int runs = 0;
    for (int k = 0; algo_registry[k]; k++)
        for (size_t ci = 0; ci < sizeof(coll) / sizeof(coll[0]); ci++)
            for (int shape = 0; shape < 6; shape++) {
                c.hosts = shape < 3 ? 1 : 2;
                c.per_host = (int[]){ 2, 3, 8, 1, 2, 3 }[shape];
                for (size_t ni = 0; ni < sizeof(counts) / sizeof(counts[0]); ni++)
                    for (int ip = 0; ip < 2; ip++) {
                        int n = c.hosts * c.per_host;
                        sched_args_t a = call(coll[ci], counts[ni], n);
                        a.inplace = ip;
                        a.root = coll[ci] == COLL_BROADCAST || coll[ci] == COLL_REDUCE ? n - 1
                                                                                      : -1;
                        simtime_layout(&c, 0, &a.layout);
                        if (!algo_registry[k]->supports(&a))
                            continue;
                        simtime_result_t res;
                        weft_status_t st = simtime_run(&c, algo_registry[k], &a, 1, 0, &res);
                        runs++;
                        int noop = counts[ni] == 0 && coll[ci] != COLL_BARRIER;
                        CHECK(st == WEFT_OK && (noop ? res.seconds == 0 && res.steps == 0 &&
                                                       res.frames == 0
                                                     : res.seconds >= c.m.alpha[ALGO_LINK_SHM]),
                              "%s %s on %dx%d, count %zu%s: status %d, %g s, %lld steps (%s)",
                              algo_registry[k]->name, coll_name(coll[ci]), c.hosts, c.per_host,
                              counts[ni], ip ? " in place" : "", st, res.seconds, res.steps,
                              weft_last_error());
                    }
            }
    CHECK(runs > 200, "only %d replays ran", runs);
}

/* The replay's layouts are the engine's (algo_layout over the ranks' host ids): a field
 * added to sched_layout_t that simtime_layout does not fill shows here. */
static void layouts(void)
{
    simtime_cluster_t c;
    simtime_cluster_default(&c);
    for (int h = 1; h <= 3; h++)
        for (int p = 1; p <= 4; p++) {
            c.hosts = h;
            c.per_host = p;
            uint64_t ids[12];
            for (int q = 0; q < h * p; q++)
                ids[q] = 1000 + (uint64_t)(q / p);
            for (int q = 0; q < h * p; q++) {
                sched_layout_t want, got;
                algo_layout(ids, h * p, q, 0, &want);
                simtime_layout(&c, q, &got);
                CHECK(memcmp(&want, &got, sizeof(want)) == 0, "layout of rank %d on %dx%d "
                      "differs from algo_layout's", q, h, p);
            }
        }
}

static void bad_input(void)
{
    simtime_cluster_t c, keep;
    simtime_cluster_default(&c);
    keep = c;
    CHECK(simtime_cluster_set(&c, "hostz", "2") == WEFT_ERR_INVALID_ARG &&
          strstr(weft_last_error(), "hostz") && strstr(weft_last_error(), "ranks_per_host"),
          "unknown key: %s", weft_last_error());
    CHECK(simtime_cluster_set(&c, "hosts", "0") == WEFT_ERR_INVALID_ARG, "hosts = 0");
    CHECK(simtime_cluster_set(&c, "hosts", "2x") == WEFT_ERR_INVALID_ARG, "hosts = 2x");
    CHECK(simtime_cluster_set(&c, "intra_bw", "-5") == WEFT_ERR_INVALID_ARG, "intra_bw < 0");
    CHECK(simtime_cluster_set(&c, "inter_bw", "0") == WEFT_ERR_INVALID_ARG, "inter_bw = 0");
    CHECK(simtime_cluster_set(&c, "inter_lat", "nan") == WEFT_ERR_INVALID_ARG, "latency nan");
    CHECK(simtime_cluster_set(&c, "chunk", "12Q") == WEFT_ERR_INVALID_ARG, "chunk 12Q");
    CHECK(memcmp(&c, &keep, sizeof(c)) == 0, "a refused key changed the cluster");

    char path[] = "/tmp/test_sim_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) {
        FILE *f = fdopen(fd, "w");
        fprintf(f, "# a model\nhosts = 4   # four\n\nranks_per_host = 8\nintra_bw = fast\n");
        fclose(f);
        CHECK(simtime_cluster_load(&c, path) == WEFT_ERR_INVALID_ARG &&
              strstr(weft_last_error(), ":5:") && strstr(weft_last_error(), "intra_bw"),
              "bad model file line: %s", weft_last_error());
        CHECK(memcmp(&c, &keep, sizeof(c)) == 0, "a bad model file changed the cluster");
        f = fopen(path, "w");
        fprintf(f, "hosts = 4\nranks_per_host 8\n");
        fclose(f);
        CHECK(simtime_cluster_load(&c, path) == WEFT_ERR_INVALID_ARG &&
              strstr(weft_last_error(), ":2:"), "line without '=': %s", weft_last_error());
        /* a line of any length is one line: fgets into 512 bytes read the tail of a long
         * comment as a line of its own (here "hosts = 3"), and numbered the lines after
         * it one too high */
        f = fopen(path, "w");
        fprintf(f, "#%0510d", 0);
        fprintf(f, "hosts = 3\nranks_per_host = 4\n");
        fclose(f);
        simtime_cluster_t longc;
        simtime_cluster_default(&longc);
        CHECK(simtime_cluster_load(&longc, path) == WEFT_OK && longc.hosts == 1 &&
              longc.per_host == 4, "a 520-byte comment line: hosts %d, ranks per host %d "
              "(%s)", longc.hosts, longc.per_host, weft_last_error());
        f = fopen(path, "w");
        fprintf(f, "#%0510d%100s\nintra_bw = fast\n", 0, "");    /* its tail: blanks */
        fclose(f);
        CHECK(simtime_cluster_load(&longc, path) == WEFT_ERR_INVALID_ARG &&
              strstr(weft_last_error(), ":2:"), "a bad line after a long one: %s",
              weft_last_error());
        /* a written model reads back the same */
        f = fopen(path, "w");
        c.hosts = 3;
        c.nics = 2;
        c.chunk = 256 * 1024;
        simtime_cluster_write(&c, f);
        fclose(f);
        simtime_cluster_t back;
        simtime_cluster_default(&back);
        CHECK(simtime_cluster_load(&back, path) == WEFT_OK && back.hosts == 3 &&
              back.nics == 2 && back.chunk == c.chunk &&
              near(back.m.beta[ALGO_LINK_NET], c.m.beta[ALGO_LINK_NET], 1e-5) &&
              near(back.m.alpha[ALGO_LINK_NET], c.m.alpha[ALGO_LINK_NET], 1e-5),
              "write then load: %s", weft_last_error());
        unlink(path);
        CHECK(simtime_cluster_load(&c, path) == WEFT_ERR_INVALID_ARG &&
              strstr(weft_last_error(), path), "missing file: %s", weft_last_error());
    }
    simtime_cluster_default(&c);
    c.per_host = 1;
    CHECK(simtime_cluster_check(&c) == WEFT_ERR_INVALID_ARG &&
          strstr(weft_last_error(), "1 ranks"), "one rank: %s", weft_last_error());
    run(&c, &algo_ring_def, COLL_ALLREDUCE, 1024, WEFT_ERR_INVALID_ARG);
    simtime_cluster_default(&c);
    c.chunk = 2u << 20;                 /* above a quarter of 4M staging (as WEFT_CHUNK) */
    CHECK(simtime_cluster_check(&c) == WEFT_ERR_INVALID_ARG, "chunk above staging / 4");
    c.chunk = 1u << 20;
    CHECK(simtime_cluster_check(&c) == WEFT_OK, "chunk of staging / 4: %s", weft_last_error());
    simtime_cluster_default(&c);
    run(&c, &algo_ring_def, COLL_ALLTOALL, 1024, WEFT_ERR_UNSUPPORTED);
    sched_args_t a = call(COLL_ALLREDUCE, 1 << 20, 2);
    simtime_result_t res;
    CHECK(simtime_run(&c, &algo_ring_def, &a, 1, 4, &res) == WEFT_ERR_UNSUPPORTED &&
          strstr(weft_last_error(), "limit"), "max_frames: %s", weft_last_error());
}

/* Test algorithms whose schedules do not fit together. */
static int any(const sched_args_t *a)
{
    return a->nranks == 2;
}

static weft_status_t build_unreceived(const sched_args_t *a, sched_t *s)
{
    if (a->rank == 0)
        sched_send(s, 1, BUF_SEND, 0, 64, -1);
    return WEFT_OK;
}

static weft_status_t build_too_big(const sched_args_t *a, sched_t *s)
{
    if (a->rank == 0)
        sched_send(s, 1, BUF_SEND, 0, 64, -1);
    else
        sched_recv(s, 0, BUF_RECV, 0, 32);
    return WEFT_OK;
}

static weft_status_t build_deadlock(const sched_args_t *a, sched_t *s)
{
    int rx = sched_recv(s, 1 - a->rank, BUF_RECV, 0, 64);
    int tx = sched_send(s, 1 - a->rank, BUF_SEND, 0, 64, -1);
    if (tx >= 0)
        s->steps[tx].dep = rx;          /* each waits for the other's frame first */
    return WEFT_OK;
}

/* The staging bound: rank 1 receives rank 0's 16 MB only after a 10 ms local copy; rank
 * 0 then sends an empty frame to rank 2. Unbounded, rank 0's send is done long before;
 * with 4M of staging it waits for rank 1 to drain 12 MB after the copy. */
#define STAGED_S ((size_t)16 << 20)
#define STAGED_COPY ((size_t)100000000)
static int three(const sched_args_t *a)
{
    return a->nranks == 3;
}

static weft_status_t build_staged(const sched_args_t *a, sched_t *s)
{
    if (a->rank == 0) {
        int tx = sched_send(s, 1, BUF_SEND, 0, STAGED_S, -1);
        int e = sched_send(s, 2, BUF_NONE, 0, 0, -1);
        if (e >= 0)
            s->steps[e].dep = tx;
    } else if (a->rank == 1) {
        int l = sched_copy(s, BUF_TMP, 0, BUF_SEND, 0, STAGED_COPY);
        int rx = sched_recv(s, 0, BUF_RECV, 0, STAGED_S);
        if (rx >= 0)
            s->steps[rx].dep = l;
    } else {
        sched_recv(s, 0, BUF_NONE, 0, 0);
    }
    return WEFT_OK;
}

static void staging(void)
{
    algo_t al = { .name = "staged", .supports = three, .window = algo_no_window,
                  .build = build_staged };
    simtime_cluster_t c;
    simtime_cluster_default(&c);
    c.per_host = 3;
    double copy = STAGED_COPY * c.copy_beta, beta = c.m.beta[ALGO_LINK_SHM];
    double bounded = run(&c, &al, COLL_ALLREDUCE, 64, WEFT_OK);
    double want = copy + (double)(STAGED_S - c.staging) * beta;
    CHECK(near(bounded, want, 0.02), "a full link holds its sender: %.6g s, want %.6g "
          "(the copy, then all but the staging through the port)", bounded, want);
    c.staging = 0;
    double free_ = run(&c, &al, COLL_ALLREDUCE, 64, WEFT_OK);
    CHECK(near(free_, copy, 0.01), "unbounded staging: %.6g s, want the copy's %.6g", free_,
          copy);
}

static void mismatches(void)
{
    algo_t al = { .name = "test", .supports = any, .window = algo_no_window };
    simtime_cluster_t c;
    simtime_cluster_default(&c);
    al.build = build_unreceived;
    run(&c, &al, COLL_ALLREDUCE, 64, WEFT_ERR_MISMATCH);
    CHECK(strstr(weft_last_error(), "rank 0 step 0 sends to rank 1") != NULL, "%s",
          weft_last_error());
    al.build = build_too_big;
    run(&c, &al, COLL_ALLREDUCE, 64, WEFT_ERR_MISMATCH);
    CHECK(strstr(weft_last_error(), "room for 32") != NULL, "%s", weft_last_error());
    al.build = build_deadlock;
    run(&c, &al, COLL_ALLREDUCE, 64, WEFT_ERR_INTERNAL);
    CHECK(strstr(weft_last_error(), "no rank can move") != NULL, "%s", weft_last_error());
}

/* max_frames is judged while the schedules are built, not after all are: every rank
 * built is kept (12.5 MB a rank for a ring of 65536), so a 65536-rank ring of 8 bytes
 * asked for 825 GB before it was refused. Test algorithms on 64 ranks count the
 * schedules built: a shift (rank q sends frames to q + 1) of one frame a rank over a
 * limit of 10 is refused from 4 ranks' schedules (0, 1, 33, 63); one where rank 0 sends
 * one frame and the others 2 (127 frames, 64 projected from rank 0) over a limit of 100
 * is refused when the count passes it, at rank 50; and a broadcast's fan-out (rank 0
 * sends a frame to each, 63 frames, 4032 projected from rank 0) under a limit of 100
 * replays. */
static int limit_builds, limit_mode;
static int sixty_four(const sched_args_t *a)
{
    return a->nranks == 64;
}

static weft_status_t build_limit(const sched_args_t *a, sched_t *s)
{
    int n = a->nranks, q = a->rank;
    limit_builds++;
    if (limit_mode == 2) {                      /* fan-out from rank 0 */
        for (int p = 1; q == 0 && p < n; p++)
            sched_send(s, p, BUF_NONE, 0, 0, -1);
        if (q != 0)
            sched_recv(s, 0, BUF_NONE, 0, 0);
        return WEFT_OK;
    }
    size_t mine = limit_mode == 1 && q > 0 ? 2 : 1;
    size_t left = limit_mode == 1 && (q + n - 1) % n > 0 ? 2 : 1;
    sched_send(s, (q + 1) % n, BUF_SEND, 0, mine * a->chunk, -1);
    sched_recv(s, (q + n - 1) % n, BUF_RECV, 0, left * a->chunk);
    return WEFT_OK;
}

static void frame_limit(void)
{
    algo_t al = { .name = "limit", .supports = sixty_four, .window = algo_no_window,
                  .build = build_limit };
    simtime_cluster_t c;
    simtime_cluster_default(&c);
    c.per_host = 64;
    sched_args_t a = call(COLL_ALLREDUCE, 1024, 64);
    simtime_result_t res;
    limit_mode = 0;
    limit_builds = 0;
    CHECK(simtime_run(&c, &al, &a, 1, 10, &res) == WEFT_ERR_UNSUPPORTED &&
          strstr(weft_last_error(), "limit of 10") && limit_builds <= 4,
          "a shift of 64 frames over a limit of 10: %d schedules built (%s)", limit_builds,
          weft_last_error());
    limit_mode = 1;
    limit_builds = 0;
    CHECK(simtime_run(&c, &al, &a, 1, 100, &res) == WEFT_ERR_UNSUPPORTED &&
          strstr(weft_last_error(), "limit of 100") && limit_builds == 51,
          "127 frames over a limit of 100: %d schedules built, want 51 (%s)", limit_builds,
          weft_last_error());
    CHECK(simtime_run(&c, &al, &a, 1, 127, &res) == WEFT_OK && res.frames == 127,
          "127 frames at a limit of 127: %lld frames (%s)", res.frames, weft_last_error());
    limit_mode = 2;
    CHECK(simtime_run(&c, &al, &a, 1, 100, &res) == WEFT_OK && res.frames == 63,
          "a fan-out of 63 frames under a limit of 100: %lld frames (%s)", res.frames,
          weft_last_error());
}

int main(int argc, char **argv)
{
    verbose = argc > 1 && !strcmp(argv[1], "-v");
    closed_forms();
    cpu_moved();
    channels();
    hosts();
    every_algorithm();
    layouts();
    staging();
    bad_input();
    mismatches();
    frame_limit();
    printf("test_sim: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
