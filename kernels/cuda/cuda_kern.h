/*
 * cuda_kern.h - weft's CUDA copy, reduction and division kernels, callable from C
 * (kernels/cuda/reduce.cu builds them with nvcc; only builds with WEFT_HAVE_CUDA have them).
 *
 * Contract: the same arguments and results as kernels/reduce.h (kern_reduce,
 * kern_divide): n counts elements, dst may alias a or b exactly, fp16/bf16 are reduced
 * in fp32 and rounded once to nearest even, integer SUM/PROD wrap, AVG with div > 1
 * divides (integers truncate toward zero), MIN/MAX propagate NaN. Every pointer is
 * device memory (or memory the device can address). The calls only enqueue on stream
 * (a cudaStream_t, passed as void * so C callers need no CUDA header) and never wait;
 * they return 0 or the cudaError_t of the launch. dtype and op are checked by the caller.
 */
#ifndef WEFT_CUDA_KERN_H
#define WEFT_CUDA_KERN_H

#include <stddef.h>

#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuda_kern_multi's work: each of dst[0..ndst) gets src[0] op src[1] ... op
 * src[nsrc-1], n elements (AVG: the sum divided by div when div > 1, once). nsrc == 1
 * copies (one destination: a cudaMemcpyAsync). Up to CUDA_MULTI_MAX of each: passed by
 * value as the kernel's argument. */
#define CUDA_MULTI_MAX 16
typedef struct cuda_multi {
    void *dst[CUDA_MULTI_MAX];
    const void *src[CUDA_MULTI_MAX];
    int ndst, nsrc;
    size_t n;
    int div;
} cuda_multi_t;

int cuda_kern_multi(const cuda_multi_t *m, weft_dtype_t dtype, weft_op_t op, void *stream);
/* The same kernel with its work read, when it runs, from ind (device memory, or memory
 * the device reads; each block reads it once: put mapped host memory in device memory
 * with cuda_kern_fetch first), which the host fills after enqueueing; n (the elements
 * ind will hold, or more) sizes the grid. ind's ndst 0 makes it do nothing. */
int cuda_kern_multi_ind(const cuda_multi_t *ind, size_t n, weft_dtype_t dtype, weft_op_t op,
                        void *stream);
/* Copies bytes (a multiple of 4, both ends 4-byte aligned) from src (memory the device
 * reads: mapped pinned host memory, read when the kernel runs) to device memory dst, in
 * one block: a cuda_multi_t the host fills late goes to device memory once, so that
 * cuda_kern_multi_ind's many blocks read it there rather than each across PCIe. */
int cuda_kern_fetch(void *dst, const void *src, size_t bytes, void *stream);
/* Runs every dtype x op of that kernel once on stream (ind's ndst 0: nothing done),
 * loads cuda_kern_premul's and cuda_kern_fetch's kernels too, and waits: CUDA loads a kernel at its first launch (lazy loading, the default), and a load
 * waits for the context's streams, so a first launch behind a stream wait on a flag that
 * only a later host step sets would never return. */
int cuda_kern_multi_preload(const cuda_multi_t *ind, void *stream);
int cuda_kern_reduce(void *dst, const void *a, const void *b, size_t n, weft_dtype_t dtype,
                     weft_op_t op, int avg_div, void *stream);
int cuda_kern_divide(void *dst, const void *src, size_t n, weft_dtype_t dtype, int div,
                     void *stream);
/* dst = src * the scalar (one element of dtype: read from device memory scalar_dev when
 * the kernel runs, else the value at host address scalar_host, read now; exactly one of
 * the two is given), as kern_premul: NCCL's PreMulSum before its SUM. */
int cuda_kern_premul(void *dst, const void *src, size_t n, weft_dtype_t dtype,
                    const void *scalar_dev, const void *scalar_host, void *stream);

#ifdef __cplusplus
}
#endif
#endif
