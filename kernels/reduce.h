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
 * truncating toward zero); when avg_div == 0, it is a plain SUM (an intermediate step). */
void kern_reduce(void *dst, const void *a, const void *b, size_t n, weft_dtype_t dtype,
                 weft_op_t op, int avg_div);

/* dst[i] = src[i] / div in the reduced type, for AVG when there is nothing to add
 * (one rank, or a fold of one slot). */
void kern_divide(void *dst, const void *src, size_t n, weft_dtype_t dtype, int div);

/* Conversions, exposed for tests and tools. */
float kern_half_to_float(uint16_t h);
uint16_t kern_float_to_half(float f);       /* round to nearest even */
float kern_bf16_to_float(uint16_t h);
uint16_t kern_float_to_bf16(float f);       /* round to nearest even */

#endif
