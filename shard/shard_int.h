/*
 * shard_int.h - shard/'s state, shared by shard.c (the collectives) and ckpt.c (its
 * checkpoint files). Not an interface: see shard.h.
 */
#ifndef WEFT_SHARD_INT_H
#define WEFT_SHARD_INT_H

#include <stdint.h>

#include "shard.h"

typedef struct {
    size_t len, pad, sn;
    int nsegs;
    shard_seg_t segs[SHARD_MAX_SEGS];
    float *full, *master, *gfull, *gshard, *m, *v;
    uint16_t *full16, *master16;   // bf16 gather buffers while a gather is in flight
    void *gather;                  // in flight (mem->coll's request)
    int held;                      // between shard_params and shard_params_done
    unsigned grads_micro;          // the micro-batch (shard.micro) of its last grads_done
} unit_t;

enum { JOB_RS, JOB_AR, JOB_ADD };

typedef struct {    // a free transient buffer (shard.c's memory section)
    void *p;
    size_t bytes;
} pooled_t;

typedef struct {
    int unit, stage;
    void *req;          // mem->coll's request
    float *gfull;       // (pad) the gradient being reduce-scattered, freed after
    void *buf;          // (pad or sn) the reduction's output: fp32 or bf16
    uint16_t *g16;      // (pad) bf16 copy of gfull being reduced (reduce_bf16)
    unsigned epoch;     // the hook its collective started at (hybrid: job_advance)
} job_t;

struct shard {
    shard_opts_t o;
    const shard_mem_t *mem;   // o.mem, or the host table
    float *ckpt_host;   // a device table's master, m and v, downloaded for a checkpoint
    int nranks, rank, G, R, gr;
    int per_use;        // parameters gathered per use (full, hybrid)
    int rs_flow;        // gradients reduce-scattered into shards (grad_op, full, hybrid)
    int shard_grads;    // the step's gradient is a shard per rank (rs_flow, zero1 on G > 1)
    int sep_master;     // master shards apart from the full buffers
    weft_comm_t *gcomm; // the shard group (G > 1)
    weft_comm_t *rcomm; // across groups (R > 1)
    int nunits;
    unit_t *u;
    job_t *jobs;        // FIFO of 2*nunits slots (a micro-batch's reductions, and the last's)
    int jhead, jcount;
    unsigned hook;      // hooks so far (shard_micro_begin, shard_params, shard_grads_done)
    int *order, norder, pos;
    int training, sync;
    unsigned micro;     // shard_micro_begin calls so far (from 1: 0 means none yet)
    int step_micro;     // training micro-batches since the last update
    int step_synced;    // one of them reduced its gradients (none, zero1: the last may)
    shard_stats_t st;
    size_t transient;   // bytes of transient buffers alive now
    pooled_t *pool;     // freed transient buffers, for reuse
    int npool, pool_cap;
};

/* shard.c: waits for every gather and reduction in flight */
weft_status_t shard_quiesce(shard_t *sh);
/* shard.c: gives back the units gathered ahead of use (full, hybrid: a prefetch, units
 * kept from forward to backward), once quiesced: their parameters are the masters' of
 * before a load; the next use gathers again */
void shard_drop_gathered(shard_t *sh);
/* x (sh's memory) rounded to bf16 (nearest even) and back, in place: what a bf16
 * gather delivers */
weft_status_t shard_round_bf16(shard_t *sh, float *x, size_t n);

#endif
