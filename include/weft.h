/*
 * weft.h - the public API of weft, a collective-communication microkernel.
 *
 * Conventions: every call returns weft_status_t (0 ok, >0 in progress, <0 error);
 * handles are opaque; outputs (the _p arguments) come last and are written only on
 * success. Counts, in-place rules and bus-bandwidth semantics follow NCCL:
 *   allreduce       in place when send == recv
 *   reduce_scatter  in place when send + rank*recvcount*size == recv
 *   allgather       in place when recv + rank*sendcount*size == send
 * count == 0 is legal and moves nothing, but is still a call: it takes its place in the
 * communicator's sequence (so a peer that called with a count meets a mismatch, not this
 * rank's next call); in weft_sendrecv a direction of count 0 is no direction at all. A call refused with WEFT_ERR_INVALID_ARG did not happen (as in
 * NCCL): where the other ranks made it, they take this rank's next call for it, so a
 * job goes on after a refusal only when every rank refused the same call. WEFT_AVG sums, then divides by the number of
 * ranks in the reduced type (integer types truncate toward zero); partial sums are kept
 * in the buffer's type, so a float16 average whose sum passes 65504 is inf (NCCL's
 * ncclAvg multiplies each float input by 1/nranks first, and so does the NCCL-API
 * shim's for float16; its other types are WEFT_AVG). WEFT_MIN and WEFT_MAX of floats return NaN where any rank has one (NCCL's
 * ncclMin/ncclMax, fmin/fmax, skip it).
 *
 * Threading: a communicator is used by one thread at a time, except weft_comm_abort,
 * which may be called from any thread (weft_comm_destroy waits for an abort in
 * progress; an abort must not start once destroy has). Its first nonblocking call may start one
 * progress thread of weft's own for it (WEFT_PROGRESS_THREAD, see below), which
 * weft_comm_destroy stops.
 *
 * fork(): a child of a rank (a data-loader worker) is not that rank. Its copies of the
 * communicators are unusable (every call, weft_test and weft_wait return
 * WEFT_ERR_INVALID_ARG; weft_comm_destroy there only forgets the copy and touches nothing
 * the parent and its peers share), its copies of the tcp connections are closed at the
 * fork (so that the peers see the rank's death even while the child lives), and memory
 * from weft_mem_alloc becomes copy-on-write there, as malloc'd memory is (the child still
 * sees the parent's later writes to pages it has not written itself); in the child's own
 * communicators such memory is plain memory, read by peers as any other (never shared
 * in place).
 */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libweft is built with hidden visibility (and a version script, weft.map): what this
 * header declares is all it exports, so its internals never collide with an
 * application's symbols (a PyTorch process, say). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0

typedef struct weft_comm weft_comm_t;
typedef struct weft_request weft_request_t;

typedef enum {
    WEFT_OK = 0,
    WEFT_IN_PROGRESS = 1,
    WEFT_ERR_INVALID_ARG = -1,
    WEFT_ERR_NO_MEMORY = -2,
    WEFT_ERR_SYSTEM = -3,
    WEFT_ERR_TIMEOUT = -4,
    WEFT_ERR_PEER_LOST = -5,
    WEFT_ERR_MISMATCH = -6,
    WEFT_ERR_ABORTED = -7,
    WEFT_ERR_AUTH = -8,
    WEFT_ERR_UNSUPPORTED = -9,
    WEFT_ERR_INTERNAL = -10
} weft_status_t;

typedef enum {
    WEFT_INT8, WEFT_UINT8, WEFT_INT32, WEFT_UINT32, WEFT_INT64, WEFT_UINT64,
    WEFT_FLOAT16, WEFT_BFLOAT16, WEFT_FLOAT32, WEFT_FLOAT64
} weft_dtype_t;
#define WEFT_NUM_DTYPES 10

typedef enum { WEFT_SUM, WEFT_PROD, WEFT_MIN, WEFT_MAX, WEFT_AVG } weft_op_t;
#define WEFT_NUM_OPS 5

/* Status and error detail. weft_last_error() is this thread's message for its last
 * failed call (empty string when none); it stays valid until the next failing call. */
const char *weft_status_str(weft_status_t s);
const char *weft_last_error(void);

/* Names and sizes, for tools ("float", "sum", ...). Unknown values give NULL / 0. */
const char *weft_dtype_name(weft_dtype_t dtype);
size_t weft_dtype_size(weft_dtype_t dtype);
const char *weft_op_name(weft_op_t op);

/* Communicators. weft_comm_init reads the launcher's environment (weftrun, torchrun,
 * Open MPI, PMI, Slurm; see README). weft_comm_init_rank takes the rendezvous "host:port"
 * of rank 0's bootstrap store explicitly. Both are collective over all ranks. */
weft_status_t weft_comm_init(weft_comm_t **comm_p);
weft_status_t weft_comm_init_rank(int rank, int nranks, const char *rendezvous,
                                  weft_comm_t **comm_p);
/* The job's size as weft_comm_init would read it from the launcher's environment,
 * without starting anything or touching weft_last_error: 0 where no launcher's
 * variables (rank and size both) are found, -1 where they are but weft_comm_init would
 * refuse them (a rank out of range, a size of 0, a value that is not a number, a Slurm
 * batch script's own process in a job of more than one task; it says why),
 * so a program can tell a lone process from a rank of a job before it calls
 * weft_comm_init. Only the rank and size are read: a job whose rendezvous (WEFT_ADDR,
 * the launcher's address variables) or WEFT_* settings are wrong reports its size, and
 * weft_comm_init then fails saying what is wrong. */
int weft_launch_size(void);
/* Like MPI_Comm_split: ranks with the same color form a communicator, ordered by key
 * then by rank in comm. A negative color (WEFT_UNDEFINED) yields *comm_p = NULL. */
#define WEFT_UNDEFINED (-1)
weft_status_t weft_comm_split(weft_comm_t *comm, int color, int key, weft_comm_t **comm_p);
weft_status_t weft_comm_destroy(weft_comm_t *comm);
weft_status_t weft_comm_abort(weft_comm_t *comm);
int weft_comm_rank(const weft_comm_t *comm);
int weft_comm_size(const weft_comm_t *comm);
/* The local (same-host) rank and size, from the launcher or from the bootstrap. */
int weft_comm_local_rank(const weft_comm_t *comm);
int weft_comm_local_size(const weft_comm_t *comm);
/* Prints this rank's flight recorder to stderr: its last 64 calls on comm (sequence,
 * collective, count, dtype, op, root, algorithm, state, timing). Also printed on a
 * timeout, on a lost peer, and when the process receives SIGUSR1 while waiting in weft
 * (unless the application installed its own SIGUSR1 handler). */
weft_status_t weft_comm_dump(weft_comm_t *comm);
/* The transport this communicator's connections use: "shm", "tcp", "ucx" or "ib"; "mixed"
 * when they use several (shm within hosts, a network transport between them); "self" for
 * a communicator of one rank, which has no connection. */
const char *weft_comm_transport(const weft_comm_t *comm);

/* Collectives (blocking). */
weft_status_t weft_allreduce(const void *send, void *recv, size_t count,
                             weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm);
weft_status_t weft_reduce_scatter(const void *send, void *recv, size_t recvcount,
                                  weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm);
weft_status_t weft_allgather(const void *send, void *recv, size_t sendcount,
                             weft_dtype_t dtype, weft_comm_t *comm);
weft_status_t weft_broadcast(const void *send, void *recv, size_t count,
                             weft_dtype_t dtype, int root, weft_comm_t *comm);
weft_status_t weft_reduce(const void *send, void *recv, size_t count, weft_dtype_t dtype,
                          weft_op_t op, int root, weft_comm_t *comm);
weft_status_t weft_alltoall(const void *send, void *recv, size_t count,
                            weft_dtype_t dtype, weft_comm_t *comm);
weft_status_t weft_send(const void *buf, size_t count, weft_dtype_t dtype, int peer,
                        weft_comm_t *comm);
weft_status_t weft_recv(void *buf, size_t count, weft_dtype_t dtype, int peer,
                        weft_comm_t *comm);
/* Sends to dst and receives from src at the same time (MPI_Sendrecv): the pair that
 * rings and halo exchanges need, which a blocking send then recv would serialize or
 * deadlock. dst and src may be the same rank. */
weft_status_t weft_sendrecv(const void *sendbuf, size_t sendcount, int dst, void *recvbuf,
                            size_t recvcount, int src, weft_dtype_t dtype, weft_comm_t *comm);
weft_status_t weft_barrier(weft_comm_t *comm);

/* Memory that the other ranks on this host can map (ncclMemAlloc, MPI_Alloc_mem). A
 * collective whose buffers on every rank come from here runs single-copy: each rank reads
 * its peers' buffers directly instead of passing the data through the shm rings. Calls
 * of WEFT_REG_MIN bytes or more on a communicator whose ranks all share one host first
 * exchange their buffer addresses to find out (one small message each way); where any
 * rank's buffers are ordinary memory, or any rank's call is in place and smaller than
 * twice WEFT_REG_MIN, the call runs as it would otherwise. All-reduce, reduce-scatter and
 * all-gather only. Ranks may differ about in place. Buffers may be
 * any part of an allocation. weft_mem_alloc gives zero-filled, page-aligned memory;
 * weft_mem_free takes exactly a pointer weft_mem_alloc returned (NULL does nothing) and
 * must not be called while a call that uses the memory is in progress; a peer that has
 * read the memory keeps it mapped (its pages alive) until it maps 8 newer regions of
 * this rank or destroys the communicator. */
weft_status_t weft_mem_alloc(void **ptr_p, size_t size);
weft_status_t weft_mem_free(void *ptr);

/* Nonblocking forms. Operations on one communicator complete in the order they were
 * issued. They progress in the background while the caller computes: the first
 * nonblocking call on a communicator starts a progress thread for it, which moves queued
 * operations and sleeps while none is queued; a call of 64 KB or less (count times the
 * dtype's size) makes its first pass on the caller's thread, where its latency is lowest,
 * and the thread does the rest (WEFT_PROGRESS_THREAD=0: no thread, and
 * operations progress only inside weft_test, weft_wait and later calls on the same
 * communicator). A blocking call on the same communicator first completes every earlier
 * operation. A failure met in the background (a lost peer, WEFT_TIMEOUT, an abort) fails
 * the request and every later call, as it would in the foreground. The buffers belong to
 * weft until the request completes. weft_comm_destroy with requests still pending fails
 * them with WEFT_ERR_ABORTED; they must still be passed to weft_wait to be freed. */
weft_status_t weft_iallreduce(const void *send, void *recv, size_t count,
                              weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm,
                              weft_request_t **req_p);
weft_status_t weft_ireduce_scatter(const void *send, void *recv, size_t recvcount,
                                   weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm,
                                   weft_request_t **req_p);
weft_status_t weft_iallgather(const void *send, void *recv, size_t sendcount,
                              weft_dtype_t dtype, weft_comm_t *comm, weft_request_t **req_p);
weft_status_t weft_ibroadcast(const void *send, void *recv, size_t count,
                              weft_dtype_t dtype, int root, weft_comm_t *comm,
                              weft_request_t **req_p);
/* *done_p = 1 once complete; the request then still needs weft_wait to be freed. Never
 * waits: it makes one progress pass unless the progress thread is in one. Returns the
 * operation's status once complete (its message in weft_last_error), else WEFT_OK. */
weft_status_t weft_test(weft_request_t *req, int *done_p);
/* Completes and frees req, driving the remaining work on the calling thread (the
 * progress thread stands aside meanwhile); returns the operation's status. */
weft_status_t weft_wait(weft_request_t *req);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* WEFT_H */
