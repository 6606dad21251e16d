/*
 * memtype.c - copy and reduce by memory type (memtype.h): host memory through the
 * kernels (kernels/reduce.h), CUDA memory through weft's CUDA kernels (kernels/cuda/)
 * in a build with WEFT_HAVE_CUDA, refused otherwise.
 *
 * The host table is on every frame's path (the engine's receive steps), so its
 * functions are the kernels' calls and nothing more. Whether a GPU is visible is asked
 * once (pthread_once): cudaGetDeviceCount loads the driver, which a host-only process on
 * a machine without one must not pay for on every call, and which must never crash it
 * (libcudart_static dlopens libcuda and reports cudaErrorInsufficientDriver /
 * cudaErrorNoDevice when it is missing). WEFT_CUDA=0 skips the question: no CUDA call
 * at all, for host-only jobs on GPU machines.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "memtype.h"
#include "reduce.h"
#include "status.h"

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda_kern.h"
#endif

static weft_status_t host_copy(void *dst, const void *src, size_t n, int nt)
{
    if (nt)
        kern_copy_nt(dst, src, n);
    else
        memmove(dst, src, n);
    return WEFT_OK;
}

static weft_status_t host_reduce(void *dst, const void *x, const void *y, size_t n,
                                 weft_dtype_t dtype, weft_op_t op, int div, int nt)
{
    if (nt)
        kern_reduce_nt(dst, x, y, n, dtype, op, div);
    else
        kern_reduce(dst, x, y, n, dtype, op, div);
    return WEFT_OK;
}

static weft_status_t host_divide(void *dst, const void *src, size_t n, weft_dtype_t dtype,
                                 int div)
{
    kern_divide(dst, src, n, dtype, div);
    return WEFT_OK;
}

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static int cuda_ndev;
static char cuda_why[160] = "this build of weft has no CUDA (built with CUDA=0 or without "
                            "/usr/local/cuda)";

static void cuda_probe(void)
{
#ifdef WEFT_HAVE_CUDA
    weft_config_t cfg;
    if (cfg_load(&cfg) == WEFT_OK && cfg.cuda == 0) {  /* a bad knob fails init anyway */
        snprintf(cuda_why, sizeof(cuda_why), "no GPU visible: CUDA is off (WEFT_CUDA=0)");
        return;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(cuda_why, sizeof(cuda_why), "no GPU visible: %s (%s)", cudaGetErrorName(e),
                 cudaGetErrorString(e));
        cudaGetLastError();                 /* not sticky: leave no error behind */
        n = 0;
    } else if (n == 0) {
        snprintf(cuda_why, sizeof(cuda_why), "no GPU visible: the CUDA runtime counts 0 "
                 "devices");
    }
    cuda_ndev = n;
#endif
}

int mem_cuda_visible(const char **why_p)
{
    pthread_once(&cuda_once, cuda_probe);
    if (cuda_ndev <= 0 && why_p)
        *why_p = cuda_why;
    return cuda_ndev > 0;
}

static weft_status_t cuda_refuse(const char *what)
{
    const char *why = "";
    mem_cuda_visible(&why);
    return weft_error(WEFT_ERR_UNSUPPORTED, "memory type cuda: cannot %s device memory: %s",
                      what, why);
}

#ifdef WEFT_HAVE_CUDA
/* The operation's launch status, then the stream's: either failing names the call. */
static weft_status_t cuda_done(const char *what, int launched)
{
    cudaError_t e = (cudaError_t)launched;
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(cudaStreamPerThread);
    if (e == cudaSuccess)
        return WEFT_OK;
    cudaGetLastError();
    return weft_error(WEFT_ERR_SYSTEM, "memory type cuda: %s failed: %s (%s)", what,
                      cudaGetErrorName(e), cudaGetErrorString(e));
}
#endif

static weft_status_t cuda_copy(void *dst, const void *src, size_t n, int nt)
{
    if (!mem_cuda_visible(NULL))
        return cuda_refuse("copy");
#ifdef WEFT_HAVE_CUDA
    return cuda_done("copy", n ? (int)cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault,
                                                      cudaStreamPerThread) : 0);
#else
    return WEFT_ERR_INTERNAL;
#endif
}

static weft_status_t cuda_reduce(void *dst, const void *x, const void *y, size_t n,
                                 weft_dtype_t dtype, weft_op_t op, int div, int nt)
{
    if (!mem_cuda_visible(NULL))
        return cuda_refuse("reduce");
#ifdef WEFT_HAVE_CUDA
    return cuda_done("reduce", cuda_kern_reduce(dst, x, y, n, dtype, op, div,
                                                cudaStreamPerThread));
#else
    return WEFT_ERR_INTERNAL;
#endif
}

static weft_status_t cuda_divide(void *dst, const void *src, size_t n, weft_dtype_t dtype,
                                 int div)
{
    if (!mem_cuda_visible(NULL))
        return cuda_refuse("divide");
#ifdef WEFT_HAVE_CUDA
    return cuda_done("divide", cuda_kern_divide(dst, src, n, dtype, div,
                                                cudaStreamPerThread));
#else
    return WEFT_ERR_INTERNAL;
#endif
}

static const mem_ops_t mem_tables[MEM_TYPES] = {
    [MEM_HOST] = { .type = MEM_HOST, .name = "host", .usable = 1,
                   .copy = host_copy, .reduce = host_reduce, .divide = host_divide },
    [MEM_CUDA] = { .type = MEM_CUDA, .name = "cuda", .usable = 0,
                   .copy = cuda_copy, .reduce = cuda_reduce, .divide = cuda_divide },
};

const mem_ops_t *mem_ops_for(mem_type_t t)
{
    return (unsigned)t < MEM_TYPES ? &mem_tables[t] : &mem_tables[MEM_CUDA];
}

mem_type_t mem_type_of(const void *ptr)
{
#ifdef WEFT_HAVE_CUDA
    if (ptr == NULL || !mem_cuda_visible(NULL))
        return MEM_HOST;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
        cudaGetLastError();                 /* an unknown pointer is host memory */
        return MEM_HOST;
    }
    return a.type == cudaMemoryTypeDevice ? MEM_CUDA : MEM_HOST;
#else
    return MEM_HOST;
#endif
}

const char *mem_type_name(mem_type_t t)
{
    return mem_ops_for(t)->name;
}
