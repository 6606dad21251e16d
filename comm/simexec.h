/*
 * simexec.h - runs one call's schedules among N simulated ranks in one process.
 *
 * Each rank's schedule comes from the builder the engine uses (algo_build); frames
 * between ranks go through in-memory queues; the steps (send, recv, recv_reduce, copy,
 * fold, rget, rget_reduce) are interpreted as the engine runs them, with the same
 * kernels. No sockets, no shared memory, no threads: the unit test of every algorithm
 * (tests/test_algos.c) and the simulator run schedules here.
 */
#ifndef WEFT_SIMEXEC_H
#define WEFT_SIMEXEC_H

#include <stdint.h>

#include "algo.h"

typedef struct sim_call {
    const algo_t *algo;         /* the algorithm every rank runs */
    sched_args_t args;          /* the call; rank and layout are set per rank */
    const sched_args_t *rank_args;  /* [nranks] where ranks' calls differ (send/recv
                                       pairs), else NULL: args on every rank */
    const uint64_t *host_id;    /* [nranks] each rank's host, or NULL: one host */
    int cma;                    /* ranks may read each other's buffers (cma, probe) */
    int root_check;             /* WEFT_ROOT_CHECK */
    size_t staging;             /* bytes a link holds before its sender waits (the shm
                                   ring's WEFT_BUFFSIZE); 0: unbounded */
    int check_keep;             /* fail a call where a `keep` send's source bytes changed
                                   before the call ended (simexec.c); copies each such
                                   frame, so for tests */
} sim_call_t;

/* Runs the call on ranks 0..args.nranks-1 with rank r's buffers send[r], recv[r] (as
 * the API takes them: in place is the same pointer, or the API's offset). Returns
 * WEFT_OK once every rank's schedule completed and every frame sent was received; else
 * an error (with check_keep, also a kept frame whose source changed) that names the rank and step: a frame a step has no room for
 * (WEFT_ERR_MISMATCH), a deadlock or frames left over (WEFT_ERR_INTERNAL). */
weft_status_t simexec_run(const sim_call_t *c, const void *const *send, void *const *recv);

#endif
