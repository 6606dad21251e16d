/*
 * emu_cudart.c - the CUDA runtime calls weft's GPU-side host code makes, emulated on the
 * host, and weft_cuda.h's stream calls as weft.h's blocking calls, for the tests that run
 * that code where no GPU is: test_train_gpu_emu and probe_train_emu (with
 * tests/emu_cuda_host.c's cuBLAS and kernels) and test_nccl_shim_emu (the NCCL-API shim's
 * groups, point-to-point plans, PreMulSum and ncclAvg over real weft collectives).
 *
 * "Device" memory is host memory, and cudaPointerGetAttributes calls every pointer host
 * memory, so weft and the shim take their host paths on it; streams are synchronous, so
 * events are always complete. Linked ahead of libweft.a's static cudart (Makefile:
 * EMU_LINK): what is not here is the real runtime's, which fails without a driver. Never
 * linked into a program a user runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "weft_cuda.h"
#include "status.h"

cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
/* the stream a late failure (WEFT_EMU_QUEUE_FAIL, below) was enqueued on, and whether a
 * synchronisation has passed it since: only then does weft_stream_error know */
static cudaStream_t q_failed_stream;
static int q_known;
cudaError_t cudaDeviceSynchronize(void) { q_known = q_failed_stream != NULL; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (s != NULL && s == q_failed_stream)
        q_known = 1;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { free(s); return cudaSuccess; }

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    memset(p, 0, sizeof(*p));
    strcpy(p->name, "host emulation (tests/emu_cudart.c)");
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    *free_b = *total_b = (size_t)1 << 32;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    *s = malloc(64);
    return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    // garbage, not zeros, so that a buffer used before it is written shows
    *p = malloc(n ? n : 1);
    if (*p)
        memset(*p, 0x7f, n);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) { memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) { memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaMemset(void *d, int v, size_t n) { memset(d, v, n); return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) { memset(d, v, n); return cudaSuccess; }

struct CUevent_st { int recorded; };
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    *e = calloc(1, sizeof(**e));
    return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { e->recorded = 1; return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) { return cudaSuccess; }

cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

/* every pointer is host memory: weft's host calls take it, and the shim scales a PreMulSum
 * input on the host (its device path, cuda_kern_premul, runs only on a GPU) */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    memset(a, 0, sizeof(*a));
    a->type = cudaMemoryTypeHost;
    return cudaSuccess;
}

/* ---- weft_cuda.h: the blocking host collectives ---- */

/* A stream queue's late failure (kernels/cuda/queue.c), for tests: WEFT_EMU_QUEUE_FAIL=N
 * makes this process's N-th all-reduce, reduce-scatter or all-gather stream call return
 * WEFT_OK having done nothing (its output keeps what it held, as the queue's emptied
 * kernels leave it), and every later call on that communicator fail with it;
 * weft_stream_error says so once the call's stream was synchronised (the queue knows
 * the failure by the time the stream passes the call, not before). Every rank counts
 * the same calls, so all of them skip the same one. WEFT_EMU_STREAM_TRACE=1 prints each
 * such call's number to stderr. */
static long q_calls;
static weft_comm_t *q_failed;

static int q_skip(const char *what, weft_comm_t *comm, cudaStream_t stream,
                  weft_status_t *st)
{
    const char *f = getenv("WEFT_EMU_QUEUE_FAIL"), *t = getenv("WEFT_EMU_STREAM_TRACE");
    long n = ++q_calls;
    if (t && strcmp(t, "1") == 0)
        fprintf(stderr, "emu: stream call %ld: %s\n", n, what);
    if (q_failed == comm) {
        *st = weft_error(WEFT_ERR_PEER_LOST, "%s_stream: an earlier stream call failed: the "
                         "emulated queue's (WEFT_EMU_QUEUE_FAIL)", what);
        return 1;
    }
    if (f && atol(f) == n) {
        fprintf(stderr, "emu: stream call %ld (%s) fails after returning "
                "(WEFT_EMU_QUEUE_FAIL)\n", n, what);
        q_failed = comm;
        q_failed_stream = stream;
        *st = WEFT_OK;
        return 1;
    }
    return 0;
}

weft_status_t weft_allreduce_stream(const void *send, void *recv, size_t count,
                                    weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm,
                                    cudaStream_t stream)
{
    weft_status_t st;
    if (q_skip("allreduce", comm, stream, &st))
        return st;
    return weft_allreduce(send, recv, count, dtype, op, comm);
}

weft_status_t weft_reduce_scatter_stream(const void *send, void *recv, size_t recvcount,
                                         weft_dtype_t dtype, weft_op_t op, weft_comm_t *comm,
                                         cudaStream_t stream)
{
    weft_status_t st;
    if (q_skip("reduce_scatter", comm, stream, &st))
        return st;
    return weft_reduce_scatter(send, recv, recvcount, dtype, op, comm);
}

weft_status_t weft_allgather_stream(const void *send, void *recv, size_t sendcount,
                                    weft_dtype_t dtype, weft_comm_t *comm,
                                    cudaStream_t stream)
{
    weft_status_t st;
    if (q_skip("allgather", comm, stream, &st))
        return st;
    return weft_allgather(send, recv, sendcount, dtype, comm);
}

weft_status_t weft_broadcast_stream(const void *send, void *recv, size_t count,
                                    weft_dtype_t dtype, int root, weft_comm_t *comm,
                                    cudaStream_t stream)
{
    return weft_broadcast(send, recv, count, dtype, root, comm);
}

weft_status_t weft_reduce_stream(const void *send, void *recv, size_t count,
                                 weft_dtype_t dtype, weft_op_t op, int root,
                                 weft_comm_t *comm, cudaStream_t stream)
{
    return weft_reduce(send, recv, count, dtype, op, root, comm);
}

weft_status_t weft_sendrecv_stream(const void *sendbuf, size_t sendcount, int dst,
                                   void *recvbuf, size_t recvcount, int src,
                                   weft_dtype_t dtype, weft_comm_t *comm, cudaStream_t stream)
{
    return weft_sendrecv(sendbuf, sendcount, dst, recvbuf, recvcount, src, dtype, comm);
}

/* nothing is queued, but a late failure is emulated (WEFT_EMU_QUEUE_FAIL) */
weft_status_t weft_stream_error(weft_comm_t *comm)
{
    if (comm != NULL && comm == q_failed && q_known)
        return weft_error(WEFT_ERR_PEER_LOST, "a stream call failed after it returned: the "
                          "emulated queue's (WEFT_EMU_QUEUE_FAIL)");
    return WEFT_OK;
}
