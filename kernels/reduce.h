/*
 * reduce.h - elementwise reduction kernels, the only arithmetic the collectives do.
 *
 * Contract: n is a count of elements; dst may alias a or b exactly (not partially);
 * dtype and op are valid (callers check). fp16 and bf16 are widened to fp32, reduced,
 * and rounded back with round-to-nearest-even (NaN stays NaN).
 */
#ifndef WEFT_KERN_REDUCE_H
#define WEFT_KERN_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* dst[i] = a[i] op b[i]. For WEFT_AVG: when avg_div > 0, dst[i] = (a[i] + b[i]) / avg_div
 * computed in the reduced type (fp16/bf16: in fp32, rounded once; integers: C division,
 * truncating toward zero); when avg_div == 0, it is a plain SUM (an intermediate step).
 * Integer SUM and PROD wrap modulo 2^bits, signed ones included, and AVG divides that
 * wrapped sum. Floating MIN/MAX return NaN when either input is NaN. */
void kern_reduce(void *dst, const void *a, const void *b, size_t n, weft_dtype_t dtype,
                 weft_op_t op, int avg_div);

/* dst[i] = src[i] / div in the reduced type, for AVG when there is nothing to add
 * (one rank, or a fold of one slot). dst may alias src exactly; div <= 1 copies. */
void kern_divide(void *dst, const void *src, size_t n, weft_dtype_t dtype, int div);

/* dst[i] = src[i] * *scalar (scalar: one element of dtype), NCCL's PreMulSum before its
 * SUM: fp16/bf16 multiplied in fp32 and rounded once, integers wrap modulo 2^bits.
 * dst may alias src exactly. Not a hot path: one plain loop per dtype. */
void kern_premul(void *dst, const void *src, size_t n, weft_dtype_t dtype, const void *scalar);

/* Instruction-set levels. kern_reduce and kern_divide run at kern_isa_best(); the _isa
 * forms run at a given level (clamped to kern_isa_best()) so tests and benchmarks can
 * compare the paths. Every level gives bit-identical results except NaN payloads.
 * Non-x86 builds have only KERN_ISA_SCALAR (portable C the compiler vectorizes). */
typedef enum { KERN_ISA_SCALAR = 0, KERN_ISA_AVX2 = 1, KERN_ISA_AVX512 = 2 } kern_isa_t;
#define KERN_ISA_COUNT 3
kern_isa_t kern_isa_best(void);
const char *kern_isa_name(kern_isa_t isa);      /* "scalar", "avx2", "avx512" */
void kern_reduce_isa(void *dst, const void *a, const void *b, size_t n, weft_dtype_t dtype,
                     weft_op_t op, int avg_div, kern_isa_t isa);
void kern_divide_isa(void *dst, const void *src, size_t n, weft_dtype_t dtype, int div,
                     kern_isa_t isa);

/* Streaming forms, for writes into buffers larger than the caches: whole 64-byte lines
 * of dst are written with non-temporal stores (no read for ownership, nothing left in the
 * cache), the unaligned head and tail with plain stores, and a store fence ends the call.
 * Results are bit-identical to memcpy / kern_reduce. kern_copy_nt: dst and src must not
 * overlap (as memcpy); kern_reduce_nt: dst may alias a or b exactly, as kern_reduce. */
void kern_copy_nt(void *dst, const void *src, size_t bytes);
void kern_reduce_nt(void *dst, const void *a, const void *b, size_t n, weft_dtype_t dtype,
                    weft_op_t op, int avg_div);
void kern_copy_nt_isa(void *dst, const void *src, size_t bytes, kern_isa_t isa);
void kern_reduce_nt_isa(void *dst, const void *a, const void *b, size_t n, weft_dtype_t dtype,
                        weft_op_t op, int avg_div, kern_isa_t isa);

/* Conversions, exposed for tests and tools. */
float kern_half_to_float(uint16_t h);
uint16_t kern_float_to_half(float f);       /* round to nearest even */
float kern_bf16_to_float(uint16_t h);
uint16_t kern_float_to_bf16(float f);       /* round to nearest even */

#endif
