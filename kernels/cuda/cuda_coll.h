/*
 * cuda_coll.h - one stream call of include/weft_cuda.h as kernels/cuda/ passes it around
 * (stream.c checks and routes it; ipc.c runs it GPU to GPU inside a host).
 */
#ifndef WEFT_CUDA_COLL_H
#define WEFT_CUDA_COLL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "weft.h"

typedef enum { S_ALLREDUCE, S_REDUCE_SCATTER, S_ALLGATHER, S_BROADCAST, S_REDUCE,
               S_SENDRECV } scoll_t;

typedef struct {
    scoll_t coll;
    const char *fn;
    const void *send;
    void *recv;
    size_t count, count2;       /* count2: sendrecv's recvcount */
    weft_dtype_t dtype;
    weft_op_t op;
    int root, peer2;            /* root: also sendrecv's dst; peer2 its src */
} scall_t;

/* One rank's part of a call on the GPU-to-GPU path, as the ranks all-gather it: what the
 * call is, whether this rank can take the path, and how its buffers are reached. */
typedef struct {
    cudaIpcMemHandle_t h;
    uint64_t ptr;               /* the owner's pointer */
    uint64_t off;               /* ptr - the allocation's base (for the handle) */
    uint32_t has, pad;
} ipc_buf_t;

typedef struct {
    int32_t ok, pid, dev, coll;     /* dev: the rank's device ordinal (its process's) */
    int32_t dtype, op, root, peer2;
    int64_t gpu;                    /* cuda_gpu_key of that device */
    uint64_t count, count2;
    ipc_buf_t b[2];             /* send, recv */
} ipc_rec_t;

struct cuda_multi;

/* Fills this rank's record (handles when a peer is another process); returns rec->ok. */
int cuda_ipc_record(const scall_t *c, weft_comm_t *comm, size_t sb, size_t rb, int dev,
                    ipc_rec_t *rec);
/* Checks every rank's record against this one's (WEFT_ERR_MISMATCH naming both); *all_ok:
 * every rank can take the path; *lead: rank 0 runs every share (all on one GPU, some in
 * other processes). */
weft_status_t cuda_ipc_agree(const scall_t *c, const weft_comm_t *comm, const ipc_rec_t *recs,
                             int *all_ok, int *lead);
/* Every rank's send and receive buffers as this process reaches them. */
weft_status_t cuda_ipc_map(const scall_t *c, weft_comm_t *comm, const ipc_rec_t *recs,
                           char **S, char **R);
/* Share r of c's work among n ranks, as cuda_kern_multi takes it (S, R NULL: the sizes
 * only, pointers NULL). */
void cuda_ipc_share(const scall_t *c, int n, char **S, char **R, int r, struct cuda_multi *m,
                    weft_dtype_t *dt, weft_op_t *op);

/* Runs c with every rank's GPU buffers mapped into every other (CUDA IPC; the pointers
 * themselves between threads of one process) when the communicator's ranks are all on
 * this host and WEFT_CUDA_IPC is 1. sb and rb are this rank's send and receive bytes,
 * dev 1 when every non-empty buffer of this rank is device memory. On return *done is 1
 * when the call ran (or failed) here; 0 when the ranks agreed that one of them cannot
 * (host buffers, no handle, too many ranks) and the caller must stage: nothing changed. */
weft_status_t cuda_ipc_run(const scall_t *c, size_t sb, size_t rb, int dev, weft_comm_t *comm,
                           cudaStream_t stream, int *done);
/* Enqueues c for comm's stream queue (queue.c) and returns: *done 0 when the queue is
 * off (WEFT_CUDA_ASYNC=0, sendrecv, no stream memory operations on this GPU: agreed by
 * every rank at the first call), and the caller runs c itself. dev: some buffer of this
 * rank is device memory; all_dev: every non-empty one is. A failure found after a call
 * returned is reported by the next call on comm (and sticks). */
weft_status_t cuda_queue_run(const scall_t *c, size_t sb, size_t rb, int dev, int all_dev,
                             weft_comm_t *comm, cudaStream_t stream, int *done);
/* 1 when comm's stream calls go through a queue (decided at its first stream call). */
int cuda_queue_on(const weft_comm_t *comm);
/* The queue's first failure (its message in weft_last_error()), WEFT_OK when none or
 * when comm has no queue. */
weft_status_t cuda_queue_error(weft_comm_t *comm);
/* Runs what is queued, stops the queue's thread, frees it (weft_comm_destroy). */
void cuda_queue_free(weft_comm_t *comm);
/* weft_comm_abort: aborts the queue's own communicator too, whose collectives the queue's
 * thread may be waiting in, so that the destroy that follows can join the thread. */
void cuda_queue_abort(weft_comm_t *comm);

/* The GPU dev as processes compare it: its PCI domain, bus and device (two processes'
 * ordinals name different GPUs under different CUDA_VISIBLE_DEVICES), else -1 - dev. */
int64_t cuda_gpu_key(int dev);
/* WEFT_TEST_CUDA_SHARES=each (tests only): ranks of several processes on one GPU each run
 * their own share, as ranks on several GPUs do, rather than rank 0 running them all. */
int cuda_test_each_share(void);
/* Whether comm's stream calls should go through the queue, from WEFT_CUDA_ASYNC (-1 auto,
 * 0, 1: rank 0's) and every rank's GPU key (n of them; whether every rank is its own
 * process and can run a queue is checked after): 1 queues them, auto only where no two
 * ranks share a GPU (there the waiting processes' contexts slowed training 2.8x:
 * docs/GPU.md). *lead: rank
 * 0 runs every share (all on one GPU, more than one rank, each 0: rank 0's
 * WEFT_TEST_CUDA_SHARES was not "each"). */
int cuda_queue_choose(long async, int each, int n, const int64_t *gpu, int *lead);
/* Whether cuda_ipc_run may take calls of this communicator (the same on every rank). */
int cuda_ipc_wanted(const weft_comm_t *comm);
/* Closes the peers' mappings of comm (weft_comm_destroy). */
void cuda_ipc_free(weft_comm_t *comm);

#endif
