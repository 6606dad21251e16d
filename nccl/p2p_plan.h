/*
 * p2p_plan.h - the order in which the NCCL shim runs a group's sends and receives on one
 * communicator (nccl_shim.c's ncclGroupEnd), as pairs for weft_sendrecv.
 *
 * NCCL runs a group's point-to-point calls together; weft_sendrecv runs one send and one
 * receive at a time. So that ranks never wait on each other in a cycle, the calls are
 * run in steps s = 0 .. n-1 as NCCL schedules them: at step s rank r sends to r+s and
 * receives from r-s (mod n), every rank in the same order, so each send meets the
 * receive its peer runs at the same step. Within a step the j-th send to r+s pairs with
 * the j-th receive from r-s (the calls' own order per peer is kept); what is left over
 * goes one way. Step 0 pairs sends to self with receives from self.
 */
#ifndef WEFT_NCCL_P2P_PLAN_H
#define WEFT_NCCL_P2P_PLAN_H

#include <stddef.h>

typedef struct {
    int send, recv;             /* indices into the calls; -1: none on that side */
} p2p_pair_t;

/* Pairs the calls (is_send[i]: a send, else a receive; peer[i] in [0, n)) of rank `rank`
 * of n into out (room for ncalls pairs: there are never more) and returns how many, in
 * the order to run them. A peer out of range is left out (callers check peers first). */
size_t p2p_plan(int rank, int n, const int *is_send, const int *peer, size_t ncalls,
                p2p_pair_t *out);

#endif
