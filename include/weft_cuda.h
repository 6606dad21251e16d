/*
 * weft_cuda.h - weft's collectives on CUDA device buffers, ordered on a CUDA stream.
 *
 * Built into libweft when the build has CUDA (make with /usr/local/cuda present and not
 * CUDA=0; weft_cuda_available() then says whether a GPU is visible at run time). Each
 * call has the arguments of its weft.h form plus the stream it is ordered on: it runs
 * after the work already enqueued on stream and before the work enqueued after it. The
 * buffers may be device memory (cudaMalloc, ncclMemAlloc) or host memory, mixed.
 *
 * How a call runs (docs/GPU.md): on 1 rank with device buffers it only enqueues a copy on
 * stream; with every rank on one host and device buffers, GPU to GPU through CUDA IPC
 * (weft's kernels read the peers' buffers; no host staging), blocking the caller until
 * the collective is complete (WEFT_CUDA_ASYNC=0, the default), or, with every rank its
 * own process (WEFT_CUDA_ASYNC=1; auto: and no two ranks on one GPU; rank 0's setting
 * counts), enqueued on stream
 * and run by a thread of the communicator, a failure then returned by the next call
 * (every buffer must then be cudaMalloc memory); otherwise (several hosts, host buffers) staged through pinned host
 * memory and the host collectives, blocking. Reductions follow weft.h's semantics
 * (fp16/bf16 accumulated in fp32). Without a visible GPU every call fails with
 * WEFT_ERR_UNSUPPORTED and a message saying so.
 */
#ifndef WEFT_CUDA_H
#define WEFT_CUDA_H

#include <cuda_runtime_api.h>

#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* 1 when this libweft has CUDA and a GPU is visible; 0 otherwise (the reason is then in
 * weft_last_error()). */
int weft_cuda_available(void);

/* The first failure of a stream call on comm that had returned before it ran
 * (the stream queue, WEFT_CUDA_ASYNC: the call was only enqueued; every later call
 * fails with it too),
 * with its message in weft_last_error(); WEFT_OK when there was none. NCCL's
 * ncclCommGetAsyncError. */
weft_status_t weft_stream_error(weft_comm_t *comm);

weft_status_t weft_allreduce_stream(const void *send, void *recv, size_t count,
                                    weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm,
                                    cudaStream_t stream);
weft_status_t weft_reduce_scatter_stream(const void *send, void *recv, size_t recvcount,
                                         weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm,
                                         cudaStream_t stream);
weft_status_t weft_allgather_stream(const void *send, void *recv, size_t sendcount,
                                    weft_dtype_t dtype, weft_comm_t *comm,
                                    cudaStream_t stream);
/* send is read on root only, recv written on every rank (as ncclBroadcast) */
weft_status_t weft_broadcast_stream(const void *send, void *recv, size_t count,
                                    weft_dtype_t dtype, int root, weft_comm_t *comm,
                                    cudaStream_t stream);
/* recv is written on root only */
weft_status_t weft_reduce_stream(const void *send, void *recv, size_t count,
                                 weft_dtype_t dtype, weft_op_t op, int root,
                                 weft_comm_t *comm, cudaStream_t stream);
/* Both directions at once (weft_sendrecv); a NULL buffer with count 0 skips its side. */
weft_status_t weft_sendrecv_stream(const void *sendbuf, size_t sendcount, int dst,
                                   void *recvbuf, size_t recvcount, int src,
                                   weft_dtype_t dtype, weft_comm_t *comm, cudaStream_t stream);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* WEFT_CUDA_H */
