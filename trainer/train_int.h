/*
 * train_int.h - cross-file internals of the trainer (not a public interface).
 */
#ifndef WEFT_TRAIN_INT_H
#define WEFT_TRAIN_INT_H

#include "model.h"

/* Every input (and target, unless NULL) of a batch of n tokens is in [0, V); else
 * WEFT_ERR_INVALID_ARG naming the first position that is not (gpt2.c). */
weft_status_t train_check_tokens(const int *inputs, const int *targets, int n, int V);

/* A unit's parameters and gradient buffer, for the CPU and the GPU model alike (gpt2.c):
 * from the hooks when h is set, else unit u of the block-major buffer base. */
weft_status_t train_unit_params(const train_hooks_t *h, float *base,
                                const train_gpt2_cfg_t *c, int u, int pass, float **p);
weft_status_t train_unit_params_done(const train_hooks_t *h, int u, int pass);
weft_status_t train_unit_grads(const train_hooks_t *h, float *base,
                               const train_gpt2_cfg_t *c, int u, float **g);
weft_status_t train_unit_grads_done(const train_hooks_t *h, int u);

/* 64-byte aligned, zeroed; NULL when out of memory. */
float *train_alloc_floats(size_t n);

/* The model's linear layers (gpt2_bf16.c): the one place a lower-precision product
 * would be switched in; today kern_matmul_* in fp32. */
void train_mm_forward(train_gpt2_t *m, float *out, const float *inp, const float *weight,
                      const float *bias, int N, int C, int OC);
void train_mm_backward(train_gpt2_t *m, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight,
                       int N, int C, int OC);

#endif
