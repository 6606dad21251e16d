/*
 * gpt2_cuda.h - weft-train's GPT-2 on an NVIDIA GPU (--device cuda), next to the CPU model.
 *
 * A train_cuda_t is a device copy of a train_gpt2_t: the same configuration, the same
 * block-major parameter layout in one contiguous device buffer (and gradients, AdamW
 * moments mirroring it, so shard/'s units map onto it unchanged), and activations carved
 * by the CPU model's own split (train_gpt2_act_carve) plus the attention scratch of
 * train_cuda_extra_floats. Forward, backward, clipping and AdamW compute what
 * train_gpt2_forward/backward/clip_grad/update compute (the CPU path is the reference:
 * tests/test_train_gpu.c); the matmuls are cuBLAS, fp32 (no TF32) or, with bf16 = 1,
 * bf16 products summed in fp32 (CUBLAS_COMPUTE_32F_FAST_16BF) with fp32 master weights.
 *
 * The host model stays the owner of the run's state between steps: train_cuda_download
 * copies parameters, moments (and gradients) back into it for checkpoints, sampling and
 * saving; train_cuda_create uploads what the host holds (a resumed run's moments too).
 *
 * Built without CUDA (make CUDA=0, or no nvcc) every call but train_cuda_built and the
 * sizing functions returns WEFT_ERR_UNSUPPORTED with a message saying so; with CUDA but
 * no visible device, train_cuda_probe and train_cuda_create say that instead.
 */
#ifndef WEFT_TRAIN_GPT2_CUDA_H
#define WEFT_TRAIN_GPT2_CUDA_H

#include "model.h"
#include "shard.h"

typedef struct train_cuda train_cuda_t;

/* 1 when this build has the CUDA path */
int train_cuda_built(void);
/* WEFT_OK when a CUDA device is visible (*name_p, if not NULL, gets its name, static);
 * else WEFT_ERR_UNSUPPORTED saying why (not built, no device, driver error). */
weft_status_t train_cuda_probe(const char **name_p);
/* How the model at cfg computes attention: *flash = 1 for kcu_attention_* (bf16 products,
 * no (T, T) matrices), 0 for cuBLAS products and a materialised softmax. WEFT_TRAIN_ATTN:
 * auto (default: flash with --dtype bf16 where the head size C/NH is 16, 32, 64 or 128),
 * flash (an error where it does not apply), matmul. WEFT_ERR_INVALID_ARG for a bad value;
 * WEFT_ERR_UNSUPPORTED in a build without CUDA. */
weft_status_t train_cuda_attention(const train_gpt2_cfg_t *cfg, int bf16, int *flash);
/* For tests: the fused attention's forward and backward on host arrays (through device
 * buffers, on the default stream): out (B, T, C) and dqkv (B, T, 3C) from qkv (B, T, 3C)
 * and dout (B, T, C). WEFT_ERR_INVALID_ARG where no kernel fits (kcu_attention_fits). */
weft_status_t train_cuda_attention_run(const float *qkv, const float *dout, float *out,
                                       float *dqkv, int B, int T, int C, int NH);
/* floats of device scratch beyond the CPU split, for attention at (B, T): q, k, v, their
 * gradients, one head-major y (7 regions of B*T*C) and one layer's dP (B*NH*T*T), each
 * rounded up to 16 floats. */
size_t train_cuda_extra_floats(const train_gpt2_cfg_t *cfg, int B, int T);
/* Device bytes train_cuda_create allocates at (B, T): parameters, gradients, moments,
 * activations, scratch, tokens. */
size_t train_cuda_bytes(const train_gpt2_cfg_t *cfg, int B, int T);

/* Uploads m's parameters (and its AdamW moments when m has them) to a new device model
 * for batches up to (B, T). Checks that the device has the memory first. */
weft_status_t train_cuda_create(train_cuda_t **g_p, const train_gpt2_t *m, int B, int T,
                                int bf16);
void train_cuda_destroy(train_cuda_t *g);

/* Several ranks (--shard on the GPU): a device model of activations only. Its parameters
 * and gradients are shard/'s, asked for unit by unit through hooks (train_cuda_set_hooks,
 * model.h's contract, as the CPU model does), and shard/ keeps them in device memory
 * through the table train_cuda_shard_mem returns (shard.h's shard_mem_t: its arithmetic on
 * the model's stream, its collectives weft_cuda.h's stream calls on a second stream,
 * ordered by events). zero_grad, clip_grad, update and download are shard/'s then and
 * refuse. The table lives as long as g. The GPU: local_rank modulo the visible ones. */
weft_status_t train_cuda_create_sharded(train_cuda_t **g_p, const train_gpt2_t *m, int B,
                                        int T, int bf16, int local_rank);
const shard_mem_t *train_cuda_shard_mem(train_cuda_t *g);
void train_cuda_set_hooks(train_cuda_t *g, const train_hooks_t *hooks);

/* As train_gpt2_forward (host token arrays, checked the same way); *loss_p gets the mean
 * loss when targets is not NULL (else -1). */
weft_status_t train_cuda_forward(train_cuda_t *g, const int *inputs, const int *targets,
                                 int B, int T, float *loss_p);
weft_status_t train_cuda_zero_grad(train_cuda_t *g);
weft_status_t train_cuda_backward(train_cuda_t *g, float loss_scale);
weft_status_t train_cuda_clip_grad(train_cuda_t *g, float clip, float *norm_p);
weft_status_t train_cuda_update(train_cuda_t *g, float lr, float beta1, float beta2,
                                float eps, float wd, int t);
/* Copies the device parameters into m->params_mem, the moments (once an update ran) into
 * m->m_mem/v_mem (allocated if needed) and, with grads, the gradient into m->grads_mem
 * (which must exist). Waits for the device. */
weft_status_t train_cuda_download(train_cuda_t *g, train_gpt2_t *m, int grads);
/* Waits for the queued work; per-phase timings stay honest with it. */
weft_status_t train_cuda_sync(train_cuda_t *g);

#endif
