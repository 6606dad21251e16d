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

int cuda_kern_reduce(void *dst, const void *a, const void *b, size_t n, weft_dtype_t dtype,
                     weft_op_t op, int avg_div, void *stream);
int cuda_kern_divide(void *dst, const void *src, size_t n, weft_dtype_t dtype, int div,
                     void *stream);

#ifdef __cplusplus
}
#endif
#endif
