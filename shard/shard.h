/*
 * shard.h - data-parallel training state over weft's collectives: FSDP / ZeRO units.
 *
 * A model is a list of *units* (flat fp32 buffers: one per transformer block, the
 * embeddings, the final norm). shard/ owns every unit's parameters, gradients and AdamW
 * moments on this rank, sliced as the strategy says, and the collectives that move them:
 *
 *   strategy  params between uses   gradients                    optimizer state
 *   none      full on every rank    all-reduce (bucket = unit)   full (DDP)
 *   zero1     full on every rank    reduce-scatter (in place)    1/N; params all-gathered
 *   grad_op   full, gathered once   reduce-scatter               1/N (ZeRO-2, SHARD_GRAD_OP)
 *             per step
 *   full      1/N; gathered before  reduce-scatter               1/N (ZeRO-3, FULL_SHARD)
 *             forward and backward
 *   hybrid    1/G inside a group    reduce-scatter in the group, 1/G (HSDP)
 *             of G ranks (as full)  all-reduce of the shard across groups
 *
 * Each unit is padded to a multiple of 16*G floats so that every shard is G-th of it and
 * 64-byte aligned; the padding is zero and never updated. Collectives are nonblocking and
 * issued in the same order on every rank (the order of the hook calls, which is the
 * model's), on communicators split from the world for shard/'s own use, so the trainer's
 * blocking calls on the world never queue behind them.
 *
 * Use, per optimizer step: shard_micro_begin for each micro-batch (sync = 1 on the last,
 * or always where the strategy reduces every micro-batch; with none and zero1 on more than
 * one rank, a training micro-batch after a synchronized one in the same step, and a step
 * none of whose micro-batches synchronized, are refused), the model's forward/backward
 * calling shard_params / shard_params_done / shard_grads / shard_grads_done, then
 * shard_clip (waits for the reductions, global norm) and shard_adamw (updates the shards
 * and starts the gathers the next step needs).
 *
 * Errors: every call returns a status with weft_last_error() set; after an error the
 * state is undefined except for shard_destroy.
 */
#ifndef WEFT_SHARD_H
#define WEFT_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

typedef enum {
    SHARD_NONE, SHARD_ZERO1, SHARD_GRAD_OP, SHARD_FULL, SHARD_HYBRID
} shard_strategy_t;
#define SHARD_NUM_STRATEGIES 5

/* Where shard/'s buffers live and who works on them (shard_opts_t.mem). NULL: host
 * memory, weft's CPU kernels and weft.h's nonblocking collectives. weft-train --device
 * cuda passes a device table (trainer/gpt2_cuda.c): every buffer is device memory, the
 * arithmetic runs as kernels queued on the model's stream in call order, and the
 * collectives are weft_cuda.h's stream calls on a stream of their own, ordered after the
 * work queued so far; wait makes the work queued after it wait for the collective.
 * A table's calls return a status with weft_last_error() set, except alloc (NULL). */
typedef enum { SHARD_COLL_ALLGATHER, SHARD_COLL_REDUCE_SCATTER, SHARD_COLL_ALLREDUCE }
    shard_coll_t;

typedef struct shard_mem {
    void *ctx;
    void *(*alloc)(void *ctx, size_t bytes);         // zero-filled
    void (*free)(void *ctx, void *p);
    weft_status_t (*upload)(void *ctx, void *dst, const void *host, size_t bytes);
    weft_status_t (*download)(void *ctx, void *host, const void *src, size_t bytes);
    weft_status_t (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    weft_status_t (*zero)(void *ctx, void *p, size_t bytes);
    weft_status_t (*to_bf16)(void *ctx, uint16_t *dst, const float *src, size_t n);
    weft_status_t (*from_bf16)(void *ctx, float *dst, const uint16_t *src, size_t n);
    /* y[i] += x[i], x fp32 or (bf16 = 1) bf16 */
    weft_status_t (*add)(void *ctx, float *y, const void *x, size_t n, int bf16);
    /* *sum_p = sum over k < count of the squares of x[k][0 .. n[k]) (waits for it) */
    weft_status_t (*sumsq)(void *ctx, const float *const *x, const size_t *n, int count,
                           double *sum_p);
    weft_status_t (*scale)(void *ctx, float *x, float a, size_t n);
    weft_status_t (*adamw)(void *ctx, float *p, float *m, float *v, const float *g,
                           size_t n, float lr, float beta1, float beta2, float eps,
                           float wd, int t);
    /* starts a collective (recvcount for reduce-scatter; sendcount for all-gather;
     * count for all-reduce; sums); *req_p is what wait and test take */
    weft_status_t (*coll)(void *ctx, shard_coll_t kind, const void *send, void *recv,
                          size_t count, weft_dtype_t dtype, weft_comm_t *comm,
                          void **req_p);
    weft_status_t (*wait)(void *ctx, void *req);
    weft_status_t (*test)(void *ctx, void *req, int *done_p);
    /* a failure of a collective on comm that its start and wait did not report (a
     * device's stream calls that only enqueue: weft_stream_error); NULL: none can be */
    weft_status_t (*errors)(void *ctx, weft_comm_t *comm);
} shard_mem_t;

/* The host table (what opts.mem NULL means), for tables that wrap it. */
const shard_mem_t *shard_host_mem(void);

typedef struct {
    shard_strategy_t strategy;
    int group;              // hybrid: ranks per shard group; 0 = the ranks of one host
    int prefetch;           // units gathered ahead of use (full, hybrid); 0 = none
    int param_bf16;         // gathered parameters (and their all-gather) in bf16
    int reduce_bf16;        // gradient reductions in bf16
    const shard_mem_t *mem; // NULL: host memory (see shard_mem_t)
} shard_opts_t;

/* A run of one tensor in a unit, and whether AdamW decays it. */
typedef struct {
    size_t off, len;
    int decays;
} shard_seg_t;

#define SHARD_MAX_SEGS 16
typedef struct {
    size_t len;             // floats
    int nsegs;
    shard_seg_t segs[SHARD_MAX_SEGS];
} shard_unit_desc_t;

typedef struct shard shard_t;

/* Counters since the last shard_stats_reset, on this rank. */
typedef struct {
    double exposed_ms;      // time the caller spent starting and waiting for
                            // communication (a device table's calls that block count)
    double comm_bytes;      // bytes this rank sent (ring algorithms' count, see shard.c)
    size_t state_bytes;     // persistent parameters, gradients and moments (model states)
    size_t transient_peak;  // the most bytes of gathered units and gradients in flight
} shard_stats_t;

const char *shard_strategy_name(shard_strategy_t s);
/* "none" ... "hybrid" -> 0; else -1 */
int shard_strategy_parse(const char *name, shard_strategy_t *s);

/* Collective over world. params: the whole model, units concatenated in order, in host
 * memory (every rank passes the same values); shard/ copies what this rank keeps (into
 * opts->mem's memory), so the caller may free them afterwards. The pointers the hooks
 * hand out are opts->mem's memory. Each unit's AdamW segments (0 to SHARD_MAX_SEGS) must
 * lie within it, in order, without overlap; options or units refused on any rank, or a
 * rank that cannot set up (out of memory), fail the call on every rank. */
weft_status_t shard_create(shard_t **sh_p, weft_comm_t *world, const shard_opts_t *opts,
                           int nunits, const shard_unit_desc_t *units, const float *params);
void shard_destroy(shard_t *sh);
/* The shard group size G (1 for none) and the number of replicas N/G. */
int shard_group_size(const shard_t *sh);

/* A micro-batch starts. training: a backward follows the forward (units 0 and the last
 * stay gathered until backward releases them); sync: this micro-batch's gradients are
 * reduced (the strategies that reduce-scatter always do). */
weft_status_t shard_micro_begin(shard_t *sh, int training, int sync);

/* The hooks (model.h's contract): pass 0 forward, 1 backward. shard_grads_done once per
 * unit and micro-batch (a second report is refused). */
weft_status_t shard_params(shard_t *sh, int unit, int pass, float **params_p);
weft_status_t shard_params_done(shard_t *sh, int unit, int pass);
weft_status_t shard_grads(shard_t *sh, int unit, float **grads_p);
weft_status_t shard_grads_done(shard_t *sh, int unit);

/* Waits for every gradient reduction of the step; the global L2 norm of the gradient
 * (one all-reduce of local sums of squares); when clip > 0 and the norm exceeds it,
 * scales the gradient by clip / (norm + 1e-6). */
weft_status_t shard_clip(shard_t *sh, float clip, float *norm_p);
/* AdamW (t >= 1) on this rank's shards, then starts the gathers the next forward needs,
 * and gathers again every unit still gathered (one a forward without its backward left
 * held), so no unit hands out parameters from before the update. */
weft_status_t shard_adamw(shard_t *sh, float lr, float beta1, float beta2, float eps,
                          float wd, int t);
/* Collective: the whole model's parameters, units concatenated, into params (host
 * memory, every rank). */
weft_status_t shard_export(shard_t *sh, float *params);
/* The first failure of a collective that was reported late (the table's errors: a
 * device's queued calls), WEFT_OK when none. shard_clip (after the step's reductions)
 * and shard_export check it themselves; a checkpoint should too, first, on every rank:
 * state updated from a reduction that failed must not be saved. */
weft_status_t shard_errors(shard_t *sh);

void shard_stats(const shard_t *sh, shard_stats_t *s);
void shard_stats_reset(shard_t *sh);

#endif
