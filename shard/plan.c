/*
 * plan.c - per-rank memory and communication of each strategy (plan.h).
 *
 * The field's rules (P parameters; b, g, o bytes per parameter for parameters,
 * gradients and optimizer states; N ranks; hybrid groups of G, R = N/G replicas):
 *   state    none (b+g+o)P   zero1 (b+g)P + oP/N   grad_op bP + (g+o)P/N
 *            full (b+g+o)P/N   hybrid (b+g+o)P/G
 *   sent per rank and step, ring algorithms (f = (N-1)/N):
 *            none 2f gP (all-reduce)   zero1, grad_op f gP + f bP (reduce-scatter of the
 *            gradient, all-gather of the parameters)   full f gP + 2f bP (parameters
 *            gathered for forward and again for backward)   hybrid (G-1)/G (gP + 2bP)
 *            inside the group plus 2(R-1)/R gP/G across groups, the only part that
 *            crosses hosts when groups are hosts.
 * For P = 70e9, 16 bytes (2 + 2 + 12) and N = 256 that is the ZeRO paper's 1120 /
 * 283.28 / 143.83 / 4.38 GB.
 *
 * shard_plan_units mirrors shard.c's allocations unit by unit (padding to 16*G floats),
 * so its state bytes equal what a weft-train run reports.
 */
#include <math.h>

#include "plan.h"
#include "status.h"
#include "util.h"

static double state_of(shard_strategy_t s, const shard_plan_in_t *in, int G)
{
    double P = in->params, b = in->pbytes, g = in->gbytes, o = in->obytes, N = in->world;
    switch (s) {
    case SHARD_NONE:    return (b + g + o) * P;
    case SHARD_ZERO1:   return (b + g) * P + o * P / N;
    case SHARD_GRAD_OP: return b * P + (g + o) * P / N;
    case SHARD_FULL:    return (b + g + o) * P / N;
    case SHARD_HYBRID:  return (b + g + o) * P / G;
    }
    return 0.0;
}

/* fewest ranks whose share fits in avail bytes: the whole x must fit in avail * n */
static long ranks_for(double x, double avail)
{
    if (avail <= 0.0)
        return 0;
    double n = ceil(x / avail);
    return n < 1.0 ? 1 : n > 1e15 ? 0 : (long)n;
}

static long min_ranks(shard_strategy_t s, const shard_plan_in_t *in)
{
    if (in->mem_bytes <= 0.0)
        return 1;
    double P = in->params, b = in->pbytes, g = in->gbytes, o = in->obytes;
    double avail = in->mem_bytes - in->act_bytes;
    switch (s) {
    case SHARD_NONE:    return (b + g + o) * P <= avail ? 1 : 0;
    case SHARD_ZERO1:   return ranks_for(o * P, avail - (b + g) * P);
    case SHARD_GRAD_OP: return ranks_for((g + o) * P, avail - b * P);
    case SHARD_FULL:
    case SHARD_HYBRID:  return ranks_for((b + g + o) * P, avail);
    }
    return 0;
}

weft_status_t shard_plan(const shard_plan_in_t *in, shard_plan_row_t rows[SHARD_NUM_STRATEGIES])
{
    int N = in->world, G = in->group > 0 ? in->group : N;
    if (!(in->params > 0.0) || N < 1 || in->pbytes < 0 || in->gbytes < 0 || in->obytes < 0 ||
        in->mem_bytes < 0 || in->act_bytes < 0 || in->bw < 0 || in->hosts < 1)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "plan: parameters, world and hosts "
                                "must be positive, sizes not negative");
    if (G > N || N % G != 0)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "plan: a group of %d ranks does not "
                                "divide %d ranks", G, N);
    double P = in->params, pb = in->pbytes * P, gb = in->gbytes * P;
    double f = (double)(N - 1) / N, fg = (double)(G - 1) / G;
    int R = N / G;
    for (int i = 0; i < SHARD_NUM_STRATEGIES; i++) {
        shard_plan_row_t *r = &rows[i];
        shard_strategy_t s = (shard_strategy_t)i;
        r->strategy = s;
        r->state_bytes = state_of(s, in, G);
        switch (s) {
        case SHARD_NONE:    r->comm_bytes = 2 * f * gb; break;
        case SHARD_ZERO1:
        case SHARD_GRAD_OP: r->comm_bytes = f * (gb + pb); break;
        case SHARD_FULL:    r->comm_bytes = f * (gb + 2 * pb); break;
        case SHARD_HYBRID:  r->comm_bytes = fg * (gb + 2 * pb); break;
        }
        // bytes one rank's inter-host link carries: a flat ring crosses hosts with a
        // whole rank's volume; hybrid sends only its replica all-reduce across
        double inter = R > 1 ? 2.0 * (R - 1) / R * gb / G : 0.0;
        if (s == SHARD_HYBRID)
            r->comm_bytes += inter;
        r->comm_inter_bytes = in->hosts <= 1 ? 0.0 : s == SHARD_HYBRID ? inter : r->comm_bytes;
        r->comm_mult = pb > 0 ? r->comm_bytes / pb : 0.0;
        r->fits = in->mem_bytes <= 0.0 || r->state_bytes + in->act_bytes <= in->mem_bytes;
        r->min_ranks = min_ranks(s, in);
        r->comm_s = in->bw > 0 ? r->comm_bytes / in->bw : 0.0;
    }
    return WEFT_OK;
}

void shard_plan_units(const shard_opts_t *o, int N, int local_size, int nunits,
                      const size_t *len, double *state_bytes, double *inflight_bytes)
{
    int G = o->strategy == SHARD_NONE ? 1 : o->strategy == SHARD_HYBRID ?
            (o->group > 0 ? o->group : local_size) : N;
    int per_use = o->strategy == SHARD_FULL || o->strategy == SHARD_HYBRID;
    int rs_flow = o->strategy >= SHARD_GRAD_OP;
    int sep_master = per_use || o->param_bf16;
    double es = o->reduce_bf16 ? 2.0 : 4.0, state = 0.0;
    double big = 0.0, big_sn = 0.0, first = 0.0, last = 0.0;
    for (int i = 0; i < nunits; i++) {
        double pad = (double)align_up(len[i] ? len[i] : 1, 16 * (size_t)G), sn = pad / G;
        state += (per_use ? 0.0 : 4 * pad) + (sep_master ? 4 * sn : 0.0) +
                 (rs_flow ? 4 * sn : 4 * pad) + 8 * sn;
        if (i > 0 && i < nunits - 1 && pad > big) {
            big = pad;
            big_sn = sn;
        }
        if (i == 0)
            first = pad;
        if (i == nunits - 1)
            last = pad;
    }
    // the most in flight, in backward: the unit computing and those gathered ahead, the
    // held first and last units; the gradient being filled, the one being reduced and
    // its shard, and the first unit's (it fills at both ends of backward)
    double fly = 0.0;
    if (per_use)
        fly += 4 * ((1 + o->prefetch) * big + first + last);
    if (rs_flow)
        fly += 4 * (2 * big + first) + 2 * es * big_sn;
    if (o->param_bf16 && G > 1)
        fly += o->prefetch * 2 * (big + big_sn);
    if (o->reduce_bf16)
        fly += 2 * 2 * big;
    *state_bytes = state;
    *inflight_bytes = fly;
}
