/*
 * model.h - GPT-2 exactly as llm.c lays it out, on the CPU.
 *
 * Learned positions, pre-LayerNorm blocks, tanh-GELU MLP, biases everywhere, the token
 * embedding tied to the output head, vocabulary padded to Vp. All parameters live in one
 * flat buffer carved into the 16 tensors below in llm.c's order (which is also the order
 * of the checkpoint file); gradients and AdamW moments are flat buffers of the same layout.
 *
 * Lifecycle: train_gpt2_create (parameters only; a checkpoint reader fills them) ->
 * train_gpt2_init (GPT-2 initialisation) or a checkpoint load -> train_gpt2_prepare(B, T)
 * (activations, gradients, scratch) -> forward / zero_grad / backward / update ... ->
 * train_gpt2_destroy. The model owns every buffer it points to.
 */
#ifndef WEFT_TRAIN_MODEL_H
#define WEFT_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

typedef struct {
    int max_seq_len;        // maxT
    int vocab_size;         // V
    int padded_vocab_size;  // Vp
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} train_gpt2_cfg_t;

#define TRAIN_NUM_PARAM_TENSORS 16
/* bf16 workspace in uint16s: KERN_GEMM_BF16_WORK of nn.h (asserted in gpt2_bf16.c), kept
 * in the model so that the linear layers never allocate. */
#define TRAIN_BF16_WORK (96 * 256 + 256 * 512)

typedef struct {
    float *wte;       // (Vp, C)
    float *wpe;       // (maxT, C)
    float *ln1w;      // (L, C)
    float *ln1b;      // (L, C)
    float *qkvw;      // (L, 3*C, C)
    float *qkvb;      // (L, 3*C)
    float *attprojw;  // (L, C, C)
    float *attprojb;  // (L, C)
    float *ln2w;      // (L, C)
    float *ln2b;      // (L, C)
    float *fcw;       // (L, 4*C, C)
    float *fcb;       // (L, 4*C)
    float *fcprojw;   // (L, C, 4*C)
    float *fcprojb;   // (L, C)
    float *lnfw;      // (C)
    float *lnfb;      // (C)
} train_params_t;

/* Forward activations for a (B, T) batch, kept for backward. The attention and MLP
 * projections are written straight into residual2/residual3 and the residual added in
 * place, so they need no buffers of their own. */
typedef struct {
    float *encoded;    // (B, T, C)
    float *ln1;        // (L, B, T, C)
    float *ln1_mean;   // (L, B, T)
    float *ln1_rstd;   // (L, B, T)
    float *qkv;        // (L, B, T, 3*C)
    float *atty;       // (L, B, T, C)
    float *att;        // (L, B, NH, T, T)
    float *residual2;  // (L, B, T, C)
    float *ln2;        // (L, B, T, C)
    float *ln2_mean;   // (L, B, T)
    float *ln2_rstd;   // (L, B, T)
    float *fch;        // (L, B, T, 4*C)
    float *fch_gelu;   // (L, B, T, 4*C)
    float *residual3;  // (L, B, T, C)
    float *lnf;        // (B, T, C)
    float *lnf_mean;   // (B, T)
    float *lnf_rstd;   // (B, T)
    float *logits;     // (B, T, V)  becomes dlogits in backward
    float *lse;        // (B, T)
    float *losses;     // (B, T)
} train_acts_t;

/* One layer's activation gradients, reused layer after layer in backward. */
typedef struct {
    float *dresidual;  // (B, T, C)
    float *dln;        // (B, T, C)   also the gradient of atty
    float *dqkv;       // (B, T, 3*C)
    float *dfch;       // (B, T, 4*C)
    float *datt;       // (T, T)
} train_scratch_t;

typedef struct {
    train_gpt2_cfg_t cfg;
    size_t param_sizes[TRAIN_NUM_PARAM_TENSORS];
    size_t num_params;
    float *params_mem;
    train_params_t params;
    // allocated by train_gpt2_prepare
    int B, T;
    float *grads_mem;
    train_params_t grads;
    float *m_mem, *v_mem;          // AdamW moments (zero at first)
    float *acts_mem;
    train_acts_t acts;
    float *scratch_mem;
    train_scratch_t scratch;
    // state of the last forward
    int last_B, last_T;
    const int *last_inputs, *last_targets;
    float mean_loss;               // -1 when the last forward had no targets
    // --dtype bf16 (gpt2_bf16.c): matmul products in bf16, everything else fp32
    int bf16;
    uint16_t bf16_work[TRAIN_BF16_WORK];   // operand panels of kern_gemm_bf16
} train_gpt2_t;

/* Vp: the vocabulary rounded up to a multiple of 128 (50257 -> 50304, 256 -> 256). */
int train_padded_vocab(int vocab_size);
/* Checks the config (positive sizes, C % NH == 0, Vp >= V, no overflow). */
weft_status_t train_gpt2_cfg_check(const train_gpt2_cfg_t *cfg);
/* Tensor sizes in llm.c order and their total; the names for reports. */
size_t train_param_sizes(size_t sizes[TRAIN_NUM_PARAM_TENSORS], const train_gpt2_cfg_t *cfg);
extern const char *const train_param_names[TRAIN_NUM_PARAM_TENSORS];
/* Carves a flat buffer into tensor pointers. */
void train_params_carve(train_params_t *p, float *mem,
                        const size_t sizes[TRAIN_NUM_PARAM_TENSORS]);
/* Whether tensor i gets weight decay (the 2D+ matrices and embeddings). */
int train_param_decays(int i);

weft_status_t train_gpt2_create(train_gpt2_t **model_p, const train_gpt2_cfg_t *cfg);
void train_gpt2_destroy(train_gpt2_t *model);
/* GPT-2 init: N(0, 0.02), attprojw/fcprojw N(0, 0.02/sqrt(2L)), biases 0, LN weights 1,
 * padded rows of wte 0. Deterministic in seed. */
void train_gpt2_init(train_gpt2_t *model, uint64_t seed);
/* Allocates activations, gradients and scratch for batches up to (B, T), T <= maxT. */
weft_status_t train_gpt2_prepare(train_gpt2_t *model, int B, int T);
/* Parameter count with the true (unpadded) vocabulary, for FLOP accounting. */
size_t train_gpt2_true_params(const train_gpt2_t *model);

/* inputs, targets: (B, T) token ids < V; targets may be NULL (no loss). Sets
 * model->mean_loss. The arrays must stay alive until backward. */
weft_status_t train_gpt2_forward(train_gpt2_t *model, const int *inputs,
                                 const int *targets, int B, int T);
void train_gpt2_zero_grad(train_gpt2_t *model);
/* Accumulates d(loss_scale * mean loss)/dparams into grads; needs a forward with targets.
 * loss_scale is 1/K for K accumulated micro-batches. */
weft_status_t train_gpt2_backward(train_gpt2_t *model, float loss_scale);
/* Global L2 norm of the gradient; when clip > 0 and the norm exceeds it, scales the
 * gradient by clip / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_. Returns the norm. */
float train_gpt2_clip_grad(train_gpt2_t *model, float clip);
/* One AdamW step (t >= 1) with decay on the train_param_decays tensors only. */
weft_status_t train_gpt2_update(train_gpt2_t *model, float lr, float beta1, float beta2,
                                float eps, float wd, int t);
/* bf16 matmul products with fp32 master weights (see gpt2_bf16.c); on = 0 goes back to
 * fp32. WEFT_ERR_UNSUPPORTED on a CPU without AVX512-BF16, and then nothing changes. */
weft_status_t train_gpt2_set_bf16(train_gpt2_t *model, int on);

#endif
