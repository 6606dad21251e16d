/*
 * gpt2_bf16.c - the model's linear layers and the compute-dtype switch.
 *
 * Every matmul of the model goes through train_mm_forward/backward, so a lower-precision
 * product is switched in at one place. With --dtype bf16 (mixed precision, as PyTorch's
 * CPU autocast): the products of the forward and backward matmuls use weft's own bf16
 * GEMM (kernels/nn/bf16.c; Debian's OpenBLAS 0.3.21 has no cblas_sbgemm), operands
 * rounded to bf16 and summed in fp32. Master weights, gradients, AdamW state and every
 * other op stay fp32. A CPU without AVX512-BF16 gets WEFT_ERR_UNSUPPORTED, not fp32.
 */
#include "nn.h"
#include "status.h"
#include "train_int.h"

_Static_assert(TRAIN_BF16_WORK == KERN_GEMM_BF16_WORK, "model.h bf16 workspace size");

weft_status_t train_gpt2_set_bf16(train_gpt2_t *m, int on)
{
    if (on && !kern_have_bf16())
        return weft_error_quiet(WEFT_ERR_UNSUPPORTED,
                                "--dtype bf16 needs a CPU with AVX512-BF16 (vdpbf16ps)");
    m->bf16 = on ? 1 : 0;
    return WEFT_OK;
}

void train_mm_forward(train_gpt2_t *m, float *out, const float *inp, const float *weight,
                      const float *bias, int N, int C, int OC)
{
    if (m->bf16)
        kern_matmul_forward_bf16(out, inp, weight, bias, N, C, OC, m->bf16_work);
    else
        kern_matmul_forward(out, inp, weight, bias, N, C, OC);
}

void train_mm_backward(train_gpt2_t *m, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight,
                       int N, int C, int OC)
{
    if (m->bf16)
        kern_matmul_backward_bf16(dinp, dweight, dbias, dout, inp, weight, N, C, OC,
                                  m->bf16_work);
    else
        kern_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
