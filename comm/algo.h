/*
 * algo.h - algorithms as plug-ins: what each one registers, and the cost model.
 *
 * An algorithm is one file (comm/algo_*.c) that defines an algo_t: its name, which calls
 * it can run (supports), what a call would cost by the model (cost), the knob that
 * reserves a size range for it (window), and its schedule builder (build). The registry
 * (algo.c) lists them; the tuner picks among those that support a call, WEFT_ALGO names
 * any of them, and the simulator (simexec.c) runs their schedules without transports.
 *
 * Invariant: supports, cost and window read only what every rank shares (the call's
 * arguments, the layout's shared fields, configuration), so every rank picks the same
 * algorithm; build is a pure function of its arguments.
 */
#ifndef WEFT_ALGO_H
#define WEFT_ALGO_H

#include <stdint.h>

#include "config.h"
#include "frame.h"
#include "schedule.h"

/* Link classes of the cost model: a hop inside a host or between hosts. */
enum { ALGO_LINK_SHM = 0, ALGO_LINK_NET = 1, ALGO_NLINKS };

/* alpha-beta-gamma: a hop costs alpha (s) plus beta (s/byte) per byte it moves, and a
 * reduction gamma (s/byte) per byte it reduces. overhead (s): what each frame beyond a
 * hop's one costs the rank that sends or receives it (its CPU's part: direct's one hop
 * passes n-1 frames each way through every rank). */
typedef struct algo_model {
    double alpha[ALGO_NLINKS];
    double beta[ALGO_NLINKS];
    double gamma;
    double overhead[ALGO_NLINKS];
} algo_model_t;

/* The defaults (algo.c says where the numbers come from). */
void algo_model_default(algo_model_t *m);

/* The slowest hop a call's ring or exchange crosses: NET when ranks span hosts. */
static inline int algo_link(const sched_layout_t *l)
{
    return l->nhosts > 1 ? ALGO_LINK_NET : ALGO_LINK_SHM;
}

/* hops, bytes moved over the busiest link and bytes reduced, in seconds */
static inline double algo_time(const algo_model_t *m, const sched_args_t *a, double hops,
                               double bytes, double reduced)
{
    int l = algo_link(&a->layout);
    return hops * m->alpha[l] + bytes * m->beta[l] + reduced * m->gamma;
}

/* A window from a knob that reserves sizes from `min` up; min 0 turns it off. */
static inline int algo_window_from(size_t min, size_t *lo, size_t *hi)
{
    *lo = min ? min : 1;
    *hi = min ? (size_t)-1 : 0;
    return 1;
}

typedef struct algo {
    const char *name;
    /* whether build handles this call on this layout (args: coll, nranks, reg, ...) */
    int (*supports)(const sched_args_t *a);
    /* seconds the model expects the call to take */
    double (*cost)(const sched_args_t *a, const algo_model_t *m);
    /* the per-rank byte range [*lo, *hi] a knob reserves for it (returns 1); or the range
     * outside which it must not run, the model deciding inside (returns 2); or 0 when
     * no knob governs it; lo > hi: the knob turned it off */
    int (*window)(const weft_config_t *cfg, const sched_args_t *a, size_t *lo, size_t *hi);
    weft_status_t (*build)(const sched_args_t *a, sched_t *s);
} algo_t;

/* All-gather by single copy (cma) where every peer is read that way and neither
 * WEFT_CMA_MIN nor a transport set a threshold: from 32K per rank where the reads block
 * (shm, measured below), else from 256K (ib), and direct's window then ends below. An all-gather moves each block once this way against two copies through
 * staging; on shm, 2 ranks bound, alternating launches, medians out of place (in place),
 * cma against the ring (direct at 32K): 3.3-4.0 (3.1-3.4) us against 4.1-4.3 (3.7-3.9) at
 * 32K per rank, 9.0 (7.5) against 9.9 (8.1) at 64K, 13.0 (10.0) against 18.9 (14.5) at
 * 128K, 21.1 (15.6) against 34.0 (27.9) at 256K; at 16K direct's one exchange is cheaper
 * (2.3 us against 2.4-2.9). All-reduce, reduce-scatter and broadcast stay faster on the
 * ring (docs/PERF.md, issue 20). */
#define ALGO_CMA_ALLGATHER_MIN (32u << 10)
#define ALGO_CMA_ALLGATHER_MIN_ASYNC (256u << 10)
/* The figures above are an Intel Xeon host's, where a 256K process_vm_readv ran near a
 * copy's speed. On an AMD EPYC host (2026-11-26) it ran at 14 GB/s against 50 GB/s for a
 * cached memcpy (3.2-4.5x slower from 64K to 4M), and the single copy lost to direct and
 * the ring out of place from 32K to 256K per rank (8.3 -> 4.8 us at 32K per rank, 27.6 ->
 * 20.5 at 128K), in place up to 2M per rank (1.3-2x; docs/PERF.md). Where any rank's
 * host reads that much slower than it copies (tp_ops_t.get_cost, agreed at connect),
 * or where some rank's reads are emulated over a network (tp_ep_t.rma_net: ucx held
 * to tcp), all-gather keeps the ring and direct unless WEFT_CMA_MIN says otherwise. */
#define ALGO_CMA_SLOW_RATIO 2.5
static inline size_t algo_cma_allgather_min(const weft_config_t *cfg, const sched_args_t *a)
{
    if (a->coll != COLL_ALLGATHER || !a->layout.cma || cfg->cma_min || a->layout.cma_min)
        return 0;
    if (a->layout.cma_slow)
        return 0;
    return a->layout.cma_blocks ? ALGO_CMA_ALLGATHER_MIN : ALGO_CMA_ALLGATHER_MIN_ASYNC;
}

/* Two ranks of one host whose cores share no cache (sched_layout_t.far, agreed at connect:
 * WEFT_SHM_FAR, by default a cache line's round trip between them from ALGO_FAR_RTT_MIN
 * to ALGO_FAR_RTT_MAX ns; more is a scheduler's, not the caches'). There every line the
 * shm ring hands over waits on the other core's cache, while single copy reads the
 * peer's buffer where it lies, and moves each byte across fewer times: all-reduce by
 * single copy from 512K, reduce-scatter from 64K per rank (where WEFT_CMA_MIN and the
 * transports set none). Measured on an Intel Xeon VM whose two vCPUs read 213-260 ns
 * (5 alternating launches, medians, us, out of place / in place, this default against
 * WEFT_SHM_FAR=0, the ring; docs/PERF.md, 2026-11-27): all-reduce 512K 184 / 148
 * against 217 / 153, 1M 390 / 301 against 437 / 346, 4M 1556 / 1282 against 1951 /
 * 1403, 64M 22675 / 19775 against 31695 / 22844 (at 256K single copy was 9% faster out
 * of place and 11% slower in place); reduce-scatter 64K per rank 29.6 / 22.6 against
 * 30.9 / 23.6, 32M in all 6802 / 5116 against 8695 / 5316. Near (62-130 ns on an AMD
 * EPYC host; 170-179 ns on a 16-core Xeon, where the two were level) the ring stays:
 * there it was faster (a 64M all-reduce 8.9-12.2 ms on the ring against 15.2-22.0 by
 * single copy on the EPYC host). */
#define ALGO_FAR_RTT_MIN 180
#define ALGO_FAR_RTT_MAX 2000
#define ALGO_FAR_FORCED  (UINT32_MAX - 1)   /* WEFT_SHM_FAR=1 on the lower rank */
#define ALGO_CMA_FAR_ALLREDUCE_MIN (512u << 10)
#define ALGO_CMA_FAR_REDUCE_SCATTER_MIN (64u << 10)
static inline size_t algo_cma_far_min(const weft_config_t *cfg, const sched_args_t *a)
{
    if (!a->layout.far || a->nranks != 2 || !a->layout.cma || cfg->cma_min ||
        a->layout.cma_min)
        return 0;
    return a->coll == COLL_ALLREDUCE ? ALGO_CMA_FAR_ALLREDUCE_MIN
         : a->coll == COLL_REDUCE_SCATTER ? ALGO_CMA_FAR_REDUCE_SCATTER_MIN : 0;
}

/* The window of an algorithm no knob governs (the ring takes what the others leave). */
int algo_no_window(const weft_config_t *cfg, const sched_args_t *a, size_t *lo, size_t *hi);

/* Where the tuned table of old stays as it was: 2 ranks, or at most 4 on one host
 * (direct's window reserves, the ring takes the rest; the shm benchmarks are tuned
 * there). Elsewhere the model weighs the algorithms added since (tree, rhd). */
static inline int algo_few_ranks(const sched_args_t *a)
{
    return a->nranks == 2 || (a->layout.nhosts == 1 && a->nranks <= 4);
}

/* The window of the algorithms the model weighs only beyond few ranks: off there (they
 * run when WEFT_ALGO names them), else every size (returns 2). */
int algo_few_window(const weft_config_t *cfg, const sched_args_t *a, size_t *lo, size_t *hi);

/* The registry, NULL-terminated, in order of preference between knob windows. */
extern const algo_t *const algo_registry[];
const algo_t *algo_find(const char *name);
/* "auto|local|p2p|..." for messages and --print-config */
const char *algo_choices(char *buf, size_t cap);
/* WEFT_ALGO names "auto" or a registered algorithm; else WEFT_ERR_INVALID_ARG saying
 * which names are. */
weft_status_t algo_check_config(const weft_config_t *cfg);

/* The tuner's choice for a call (tuner.c's banner says the rules); *cost_p gets the
 * model's estimate for it. Depends only on what every rank shares. */
const algo_t *algo_pick(const weft_config_t *cfg, const algo_model_t *m,
                        const sched_args_t *a, double *cost_p);

/* WEFT_ROOT_CHECK=auto checks the rooted calls of at least this many bytes (count x the
 * dtype's size): below it the extra hop is most of a call's time (docs/FAILURES.md). */
#define ALGO_ROOT_CHECK_AUTO_MIN ((size_t)64 * 1024)

/* Whether a's call gets the root check under root_check (WEFT_ROOT_CHECK: 1, 0, or -1
 * for auto): a rooted collective of more than one rank, of ALGO_ROOT_CHECK_AUTO_MIN
 * bytes and more under auto. Depends only on what every rank shares. */
int algo_root_checked(int root_check, const sched_args_t *a);

/* Builds a's schedule with algorithm `al`, the root check included where
 * algo_root_checked says: what the engine runs and the simulator replays. On error s is
 * freed. */
weft_status_t algo_build(const algo_t *al, const sched_args_t *a, int root_check,
                         sched_t *s);

/* The layout of rank `rank` among n ranks whose host ids are host_id[0..n-1] (ranks of a
 * host are numbered in rank order, hosts in order of their first rank); cma: every rank
 * reaches every other with single-copy reads. */
void algo_layout(const uint64_t *host_id, int n, int rank, int cma, sched_layout_t *l);
/* rank_host[p] = rank p's host index as algo_layout numbers hosts (the map a layout's
 * rank_host points to; the same on every rank). */
void algo_host_map(const uint64_t *host_id, int n, int *rank_host);

/* The ring's rank order (algo_ring.c): order[i] = the rank at position i, host-major
 * (hosts in order of their first rank, ranks of a host in rank order), so a ring crosses
 * each host boundary once. The identity when the ranks of each host are contiguous or the
 * layout has no rank_host map. */
void algo_ring_order(const sched_layout_t *l, int n, int *order);
/* How many channels the ring (and chain) split a call into: a->nchannels, at most one per
 * element and FRAME_CHANNELS (algo_ring.c). */
int ring_channels(const sched_args_t *a);
/* The channels a call is offered (sched_args_t.nchannels): `want` (WEFT_NCHANNELS, or
 * weft-sim's channels), but none below ALGO_CHANNEL_MIN bytes of the sliced buffer (a
 * rank's block for reduce-scatter and all-gather, else the whole buffer), so small calls
 * keep their one frame per hop. Shared arguments only: the tuner and weft-sim. */
#define ALGO_CHANNEL_MIN (64 * 1024)
int algo_channels(const sched_args_t *a, long want);

/* Bytes one rank contributes: every count is per rank. */
size_t algo_rank_bytes(const sched_args_t *a);

extern const algo_t algo_local_def, algo_p2p_def, algo_direct_def, algo_probe_def,
    algo_cma_def, algo_tree_def, algo_rhd_def, algo_ring_def, algo_hier_def;

/* The double binary tree (algo_tree.c): rank's parent (-1 at the top) and children (-1
 * where none) in tree 0 or 1 of an all-reduce among nranks; _root: of a reduce or
 * broadcast rooted at `root`, which is the top of both trees. For printing (weft-topo)
 * and the tests' references; the schedules use the same links. */
void algo_tree_links(int rank, int nranks, int tree, int *parent, int child[2]);
void algo_tree_links_root(int rank, int nranks, int tree, int root, int *parent,
                          int child[2]);

#endif
