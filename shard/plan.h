/*
 * plan.h - what each sharding strategy costs per rank: memory and communication.
 *
 * Two views, both pure arithmetic:
 *   - the field's sizing rules (ZeRO paper, FSDP): P parameters at b bytes each for the
 *     parameters, g for gradients and o for optimizer states (classic mixed precision:
 *     2 + 2 + 12 = 16), on N ranks (hybrid: groups of G);
 *   - shard/'s own allocations for a list of units (exactly what shard_create and a
 *     step allocate), for predicting a weft-train run.
 * weft-plan (trainer/weft_plan_cli.c) prints them.
 */
#ifndef WEFT_SHARD_PLAN_H
#define WEFT_SHARD_PLAN_H

#include <stddef.h>

#include "shard.h"

typedef struct {
    double params;            // P
    double pbytes, gbytes, obytes;   // bytes per parameter: parameters, gradients, optimizer
    int world;                // N
    int group;                // hybrid shard group G (ranks per host); 0 = N
    int hosts;                // hosts the world spans (1 = one host)
    double mem_bytes;         // per accelerator; 0 = no limit
    double act_bytes;         // activations and the rest, per rank
    double bw;                // bytes/s per rank for the time column; 0 = none
} shard_plan_in_t;

typedef struct {
    shard_strategy_t strategy;
    double state_bytes;       // model states per rank
    double comm_bytes;        // sent per rank and step (ring count)
    double comm_inter_bytes;  // of which crosses hosts
    double comm_mult;         // comm_bytes in parameter bytes (P*pbytes), N large: 2, 3
    int fits;                 // state + act <= mem (1 with no limit)
    long min_ranks;           // fewest ranks with which it fits; 0: never
    double comm_s;            // comm_bytes / bw (0 without bw)
} shard_plan_row_t;

/* One row per strategy, in shard_strategy_t order. INVALID_ARG when the input is not
 * sane (nothing written). */
weft_status_t shard_plan(const shard_plan_in_t *in, shard_plan_row_t rows[SHARD_NUM_STRATEGIES]);

/* shard/'s own bytes per rank for units of these lengths (floats): the model states
 * shard_create allocates (what weft-train reports as model_state_bytes) and an upper
 * estimate of the transient buffers in flight during a step. */
void shard_plan_units(const shard_opts_t *o, int nranks, int local_size, int nunits,
                      const size_t *unit_len, double *state_bytes, double *inflight_bytes);

#endif
