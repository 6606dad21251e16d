/*
 * dist.h - weft-train on several ranks: the world communicator, the configuration check,
 * and the model handed to shard/.
 */
#ifndef WEFT_TRAIN_DIST_H
#define WEFT_TRAIN_DIST_H

#include <stdint.h>

#include "model.h"
#include "shard.h"

typedef struct {
    weft_comm_t *world;      // NULL: one process, no communicator
    int rank, nranks;
    shard_t *sh;             // the model's states, once train_dist_shard ran
    train_hooks_t hooks;
} train_dist_t;

/* The world size the launcher's environment announces (weftrun, torchrun, Open MPI,
 * PMI, Slurm), or 1 when there is none. */
int train_dist_launched_size(void);
/* weft_comm_init from the launcher's environment. */
weft_status_t train_dist_init(train_dist_t *d);
void train_dist_destroy(train_dist_t *d);

/* One configuration field as every rank must see it. */
typedef struct {
    const char *name;        // as the user spells it ("--batch", "model layers", ...)
    int64_t value;
    int is_float;            // value is train_dist_float's: printed as the float
} train_dist_field_t;
/* A float as a field's value (its bits: -0 and 0 differ, as they would in the run). */
static inline int64_t train_dist_float(float x)
{
    union { float f; int32_t i; } u = { x };
    return u.i;
}
/* Collective: every rank's fields against every other's. On a difference every rank
 * returns INVALID_ARG with the same message, naming the first field that differs, its
 * value on rank 0 and on the first rank that disagrees (and how many ranks do). */
weft_status_t train_dist_agree(train_dist_t *d, const train_dist_field_t *f, int n);

/* Collective: hands the model's parameters to shard/ (then frees them from the model)
 * and points the model's hooks at it. */
weft_status_t train_dist_shard(train_dist_t *d, train_gpt2_t *m, const shard_opts_t *o);
/* Collective: the parameters back into the model (allocated again), hooks off; the
 * shard state stays (export again after more steps). */
weft_status_t train_dist_export(train_dist_t *d, train_gpt2_t *m);
/* Collective: x[i] = sum over ranks of x[i] (doubles, world). */
weft_status_t train_dist_sum(train_dist_t *d, double *x, int n);

#endif
