/*
 * algo.c - the registry of algorithms, the cost model's defaults, and the one function
 * that turns (algorithm, arguments) into a schedule for the engine or the simulator.
 *
 * Adding an algorithm: a file comm/algo_<name>.c defining its algo_t (algo.h says what
 * each member must do) and one line below; the tuner then weighs it, WEFT_ALGO accepts
 * its name and tests/test_algos.c runs it against the reference on 1-64 ranks.
 *
 * Invariant: nothing here depends on anything but its arguments (no I/O, no globals
 * beyond the constant registry).
 */
#include <stdio.h>
#include <string.h>

#include "algo.h"
#include "frame.h"
#include "status.h"

/* Order matters only where knob windows overlap and where the model ties: the first
 * one wins (direct over the probe over cma, as WEFT_DIRECT_MAX, WEFT_REG_MIN and
 * WEFT_CMA_MIN always ranked; the ring over the trees). */
const algo_t *const algo_registry[] = {
    &algo_local_def,
    &algo_p2p_def,
    &algo_direct_def,
    &algo_probe_def,
    &algo_cma_def,
    &algo_ring_def,
    &algo_tree_def,         /* after the ring: it keeps the ties of the model */
    &algo_rhd_def,
    &algo_hier_def,         /* last: the others keep its ties */
    NULL,
};

/*
 * The defaults. Latencies and bandwidths of this development VM (docs/PERF.md): a
 * shared-memory hop ~0.5 us (the 2-rank 8-byte all-reduce), copies through a shm ring
 * ~5 GB/s per rank, the veth between network namespaces 20 us and ~1.2 GB/s, reductions
 * ~10 GB/s. The tuner asks the model only where no knob reserved the size (tuner.c), so
 * these numbers change no choice the knobs make: every choice of the old table stays.
 */
void algo_model_default(algo_model_t *m)
{
    m->alpha[ALGO_LINK_SHM] = 0.5e-6;
    m->beta[ALGO_LINK_SHM] = 1.0 / 5e9;
    m->alpha[ALGO_LINK_NET] = 20e-6;
    m->beta[ALGO_LINK_NET] = 1.0 / 1.2e9;
    m->gamma = 1.0 / 10e9;
    /* Per frame a rank sends or receives beyond a hop's one, estimated, not measured:
     * a frame through a shm ring a tenth of its hop (half at each end); through tcp a
     * system call (a send or a receive) of about 1 us. It is what makes the direct
     * exchange, one hop whose n-1 frames each way pass through every rank, lose to
     * log2(n) rounds at many ranks: the barrier goes by dissemination (rhd) from 23
     * ranks of one host, from 53 with a rank per host, from 64 with 8 per host (their
     * frames at the shm rate), a 64-byte all-reduce by rhd at 64 ranks of one host
     * (test_algos.c's spots). Without it the model chose direct for
     * an 8-byte all-reduce of 512 ranks across hosts (1 hop of 20 us against rhd's 18),
     * an exchange that passes 511 frames each way through each rank. */
    m->overhead[ALGO_LINK_SHM] = 0.05e-6;
    m->overhead[ALGO_LINK_NET] = 1e-6;
}

int algo_no_window(const weft_config_t *cfg, const sched_args_t *a, size_t *lo, size_t *hi)
{
    return 0;
}

int algo_few_window(const weft_config_t *cfg, const sched_args_t *a, size_t *lo, size_t *hi)
{
    int off = algo_few_ranks(a);
    *lo = off ? 1 : 0;
    *hi = off ? 0 : (size_t)-1;
    return 2;
}

const algo_t *algo_find(const char *name)
{
    for (int i = 0; algo_registry[i]; i++)
        if (!strcmp(algo_registry[i]->name, name))
            return algo_registry[i];
    return NULL;
}

const char *algo_choices(char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "auto");
    for (int i = 0; algo_registry[i] && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "|%s", algo_registry[i]->name);
    return buf;
}

weft_status_t algo_check_config(const weft_config_t *cfg)
{
    char names[256];
    if (!strcmp(cfg->algo, "auto") || algo_find(cfg->algo) != NULL)
        return WEFT_OK;
    return weft_error(WEFT_ERR_INVALID_ARG, "config: WEFT_ALGO='%s' is not an algorithm; "
                      "one of %s", cfg->algo, algo_choices(names, sizeof(names)));
}

size_t algo_rank_bytes(const sched_args_t *a)
{
    return a->count * weft_dtype_size(a->dtype);
}

void algo_layout(const uint64_t *host_id, int n, int rank, int cma, sched_layout_t *l)
{
    memset(l, 0, sizeof(*l));
    l->cma = cma;
    for (int p = 0; p < n; p++) {
        int first = 1, size = 0;        /* p is its host's first rank; ranks on it */
        for (int q = 0; q < n; q++) {
            if (host_id[q] != host_id[p])
                continue;
            first &= q >= p;
            size++;
        }
        if (first && l->per_host < size)
            l->per_host = size;
        if (first && host_id[p] == host_id[rank])
            l->host = l->nhosts;
        l->nhosts += first;
        if (p < rank && host_id[p] == host_id[rank])
            l->local_rank++;
    }
    int ranks = 0;                      /* on hosts holding per_host ranks */
    for (int p = 0; p < n; p++) {
        int size = 0;
        for (int q = 0; q < n; q++)
            size += host_id[q] == host_id[p];
        ranks += size == l->per_host;
    }
    l->uniform = ranks == n;
}

void algo_host_map(const uint64_t *host_id, int n, int *rank_host)
{
    int nhosts = 0;
    for (int p = 0; p < n; p++) {
        rank_host[p] = nhosts;          /* a new host unless an earlier rank is on it */
        for (int q = 0; q < p; q++)
            if (host_id[q] == host_id[p]) {
                rank_host[p] = rank_host[q];
                break;
            }
        nhosts += rank_host[p] == nhosts;
    }
}

const algo_t *algo_pick(const weft_config_t *cfg, const algo_model_t *m,
                        const sched_args_t *a, double *cost_p)
{
    const algo_t *named = algo_find(cfg->algo), *best = NULL, *any = NULL;
    double best_cost = 0, any_cost = 0;
    size_t bytes = algo_rank_bytes(a), lo, hi;
    if (a->reg == SCHED_REG_ALL)        /* after a probe that found registered buffers */
        named = &algo_cma_def;
    if (named && named->supports(a)) {
        *cost_p = named->cost(a, m);
        return named;
    }
    for (int i = 0; algo_registry[i]; i++) {
        const algo_t *al = algo_registry[i];
        if (!al->supports(a))
            continue;
        double c = al->cost(a, m);
        if (any == NULL || c < any_cost)
            any = al, any_cost = c;
        int w = al->window(cfg, a, &lo, &hi);
        if (w == 1 && bytes >= lo && bytes <= hi) {
            *cost_p = c;
            return al;              /* a knob reserved this size for it */
        }
        if (w == 1 || (w == 2 && (bytes < lo || bytes > hi)))
            continue;               /* its knob keeps it off this size */
        if (best == NULL || c < best_cost)
            best = al, best_cost = c;
    }
    *cost_p = best ? best_cost : any_cost;
    return best ? best : any;       /* any: only knob-governed ones run this call */
}

/*
 * Root agreement (WEFT_ROOT_CHECK; under auto, for calls of ALGO_ROOT_CHECK_AUTO_MIN
 * bytes and more: below, a root may finish once its frames are queued, as an MPI eager
 * send does, and learns of a disagreement on its next call). Ranks that disagree only
 * about a rooted collective's root must all fail in that call, so no rank may finish
 * before every rank has shown the root it believes in:
 *   broadcast  every other rank first sends the root an empty frame; the root moves
 *              no data until it has one from each (one extra hop, before the data);
 *   reduce     the root, once it has everything, sends every other rank an empty
 *              frame that rank waits for (one extra hop, after the data).
 * Each empty frame's header names the sender's root and is checked like any frame. A
 * rank that believes in another root sends to, or waits on, a different rank: whoever
 * reads its frames fails with WEFT_ERR_MISMATCH, and when nobody does, every rank is
 * left waiting and the stall probe compares their calls (comm/fail.c).
 * With two ranks the extra hop overlaps the data instead of preceding or following it:
 * the only other rank's frames show its root to the root and the root's frames show the
 * root to it, so neither can finish unconvinced. A broadcast's root sends at once and
 * waits for the empty frame too; a reduce's root sends its empty frame at once. A call
 * then costs one hop, like an exchange, where it cost two.
 */
static int root_guard_before(const sched_args_t *a, sched_t *s)
{
    if (a->coll != COLL_BROADCAST)
        return -1;
    if (a->rank != a->root) {
        sched_send(s, a->root, BUF_NONE, 0, 0, -1);
        return -1;
    }
    SCHED_FOR_PEERS(p, k, a->rank, a->nranks)
        sched_recv(s, p, BUF_NONE, 0, 0);
    if (a->nranks == 2)
        return -1;                  /* no gate: the data goes out alongside */
    int gate = sched_copy(s, BUF_NONE, 0, BUF_NONE, 0, 0);   /* done when all arrived */
    if (gate >= 0)
        s->steps[gate].after_all = 1;
    return gate;
}

static void root_guard_after(const sched_args_t *a, sched_t *s, int gate)
{
    for (int i = gate + 1; gate >= 0 && i < s->nsteps; i++) {
        sched_step_t *st = &s->steps[i];
        if (st->dep < 0 && st->kind != STEP_COPY && st->kind != STEP_FOLD)
            st->dep = gate;    /* the root's transfers wait for every rank's frame */
    }
    if (a->coll != COLL_REDUCE)
        return;
    if (a->rank != a->root) {
        sched_recv(s, a->root, BUF_NONE, 0, 0);
        return;
    }
    SCHED_FOR_PEERS(p, k, a->rank, a->nranks) {
        int i = sched_send(s, p, BUF_NONE, 0, 0, -1);
        if (i >= 0 && a->nranks > 2)
            s->steps[i].after_all = 1;
    }
}

int algo_root_checked(int root_check, const sched_args_t *a)
{
    if (root_check == 0 || a->nranks < 2 ||
        (a->coll != COLL_BROADCAST && a->coll != COLL_REDUCE))
        return 0;
    return root_check > 0 || algo_rank_bytes(a) >= ALGO_ROOT_CHECK_AUTO_MIN;
}

weft_status_t algo_build(const algo_t *al, const sched_args_t *a, int root_check,
                         sched_t *s)
{
    sched_init(s, al->name, a->chunk);
    int guard = algo_root_checked(root_check, a);
    int gate = guard ? root_guard_before(a, s) : -1;
    weft_status_t st = al->build(a, s);
    if (st == WEFT_OK && guard)
        root_guard_after(a, s, gate);
    if (st != WEFT_OK) {
        sched_free(s);
        return st;
    }
    return sched_finish(s, a->nranks);
}
