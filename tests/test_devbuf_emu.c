/*
 * test_devbuf_emu.c - weft.h's host calls given a buffer the CUDA runtime calls device
 * memory: refused with WEFT_ERR_INVALID_ARG before the call takes its number, in the
 * blocking and the nonblocking form (*req_p left alone), and the communicator goes on;
 * a call of count 0 touches no buffer and stays a no-op.
 * Before 2026-11-27 the call was queued, failed when it started (UNSUPPORTED), and that
 * failed the communicator on every rank, as a lost peer would.
 *
 *   weftrun -n 2 build/tests/test_devbuf_emu
 *
 * Where no GPU is, this file is the runtime's cudaGetDeviceCount (one GPU) and
 * cudaPointerGetAttributes (`dev` below is its memory, everything else host memory),
 * linked ahead of libweft.a's static cudart as tests/emu_cuda_host.c is (Makefile:
 * EMU_LINK); weft never touches `dev` through CUDA here, since every call on it must be
 * refused first. Each rank prints one ok/FAIL line per check; exit 0 when all passed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "weft.h"

static float dev[1024];     /* "device memory" */

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    memset(a, 0, sizeof(*a));
    const char *c = p, *d = (const char *)dev;
    a->type = c >= d && c < d + sizeof(dev) ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    return cudaSuccess;
}

static int bad;

static void check(int rank, int ok, const char *what, weft_status_t st)
{
    printf("%s rank %d %s: %s%s%s\n", ok ? "ok" : "FAIL", rank, what, weft_status_str(st),
           st != WEFT_OK ? ": " : "", st != WEFT_OK ? weft_last_error() : "");
    bad |= !ok;
}

/* A host all-reduce on c gives the right sum. */
static void host_sum(weft_comm_t *c, int rank, int nranks, const char *what)
{
    float x[1024];
    for (int i = 0; i < 1024; i++)
        x[i] = (float)(rank + 1);
    weft_status_t st = weft_allreduce(x, x, 1024, WEFT_FLOAT32, WEFT_SUM, c);
    int right = 1;
    for (int i = 0; i < 1024; i++)
        right &= x[i] == (float)(nranks * (nranks + 1) / 2);
    check(rank, st == WEFT_OK && right, what, st);
}

int main(void)
{
    weft_comm_t *c;
    weft_status_t st = weft_comm_init(&c);
    if (st != WEFT_OK) {
        printf("FAIL init: %s\n", weft_last_error());
        return 1;
    }
    int rank = weft_comm_rank(c), nranks = weft_comm_size(c);
    float host[1024];
    memset(host, 0, sizeof(host));
    st = weft_allreduce(dev, dev, 1024, WEFT_FLOAT32, WEFT_SUM, c);
    check(rank, st == WEFT_ERR_INVALID_ARG && strstr(weft_last_error(), "cuda memory"),
          "allreduce on a device buffer refused", st);
    host_sum(c, rank, nranks, "a host allreduce after it");
    weft_request_t *req = (weft_request_t *)&host;     /* must stay as it is */
    st = weft_iallgather(host, dev, 256, WEFT_FLOAT32, c, &req);
    check(rank, st == WEFT_ERR_INVALID_ARG && req == (weft_request_t *)&host &&
          strstr(weft_last_error(), "receive buffer is cuda memory"),
          "iallgather into a device buffer refused, request untouched", st);
    host_sum(c, rank, nranks, "a host allreduce after that");
    /* count 0 touches no buffer: a stream call passes its device pointers on as they
     * are (kernels/cuda/stream.c), and that call is a no-op, not a refusal */
    st = weft_allreduce(dev, dev, 0, WEFT_FLOAT32, WEFT_SUM, c);
    check(rank, st == WEFT_OK, "an allreduce of count 0 on a device buffer is a no-op", st);
    host_sum(c, rank, nranks, "a host allreduce after it");
    /* to self weft_sendrecv copies without the engine: refused the same (before
     * 2026-11-27 it was a memcpy of the device pointer) */
    st = weft_sendrecv(dev, 16, rank, host, 16, rank, WEFT_FLOAT32, c);
    check(rank, st == WEFT_ERR_INVALID_ARG && strstr(weft_last_error(), "send buffer is cuda"),
          "sendrecv to self from a device buffer refused", st);
    st = weft_sendrecv(host, 16, rank, dev, 16, rank, WEFT_FLOAT32, c);
    check(rank, st == WEFT_ERR_INVALID_ARG &&
          strstr(weft_last_error(), "receive buffer is cuda"),
          "sendrecv to self into a device buffer refused", st);
    float one[16], got[16];
    for (int i = 0; i < 16; i++)
        one[i] = (float)(rank * 16 + i), got[i] = -1.f;
    st = weft_sendrecv(one, 16, rank, got, 16, rank, WEFT_FLOAT32, c);
    check(rank, st == WEFT_OK && !memcmp(one, got, sizeof(one)),
          "sendrecv to self of host buffers copies", st);
    host_sum(c, rank, nranks, "a host allreduce after them");
    weft_comm_destroy(c);
    return bad;
}
