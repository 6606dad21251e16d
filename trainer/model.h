/*
 * model.h - GPT-2 exactly as llm.c lays it out, on the CPU.
 *
 * Learned positions, pre-LayerNorm blocks, tanh-GELU MLP, biases everywhere, the token
 * embedding tied to the output head, vocabulary padded to Vp.
 *
 * Layout, block-major (what shard/ slices): all parameters live in one flat buffer of
 * L + 2 contiguous *units*: unit 0 the embeddings (wte, wpe), unit 1 + l transformer block
 * l (its 12 tensors in llm.c's order), unit L + 1 the final layernorm. Gradients and AdamW
 * moments mirror that layout. llm.c's tensor-major order (16 tensors, each (L, ...)) is
 * only the checkpoint file's: train_layout_permute converts at I/O, so llm.c files load
 * and save unchanged.
 *
 * Units and hooks: forward and backward ask for each unit's parameters and gradient
 * buffer when they reach it, and say when they are done with it. Without hooks these are
 * the model's own buffers; a sharding layer (shard/) sets hooks that gather a unit's
 * parameters (and prefetch the next), hand out gradient buffers and start a unit's
 * gradient reduction as soon as its backward ends. The tied wte gradient accumulates in
 * unit 0 at both ends of backward and is declared done once, after the encoder.
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

/* The units. TRAIN_UNIT_EMB = 0, block l = 1 + l, TRAIN_UNIT_LNF(L) = L + 1. */
#define TRAIN_UNIT_EMB 0
#define TRAIN_UNIT_BLOCK(l) (1 + (l))
#define TRAIN_UNIT_LNF(L) (1 + (L))
#define TRAIN_BLOCK_TENSORS 12

typedef struct {
    float *wte;       // (Vp, C)
    float *wpe;       // (maxT, C)
} train_emb_t;

typedef struct {      // one transformer block's unit, in this order
    float *ln1w;      // (C)
    float *ln1b;      // (C)
    float *qkvw;      // (3*C, C)
    float *qkvb;      // (3*C)
    float *attprojw;  // (C, C)
    float *attprojb;  // (C)
    float *ln2w;      // (C)
    float *ln2b;      // (C)
    float *fcw;       // (4*C, C)
    float *fcb;       // (4*C)
    float *fcprojw;   // (C, 4*C)
    float *fcprojb;   // (C)
} train_block_t;

typedef struct {
    float *lnfw;      // (C)
    float *lnfb;      // (C)
} train_lnf_t;

/* A run of one tensor inside a unit, and whether AdamW decays it. */
typedef struct {
    size_t off, len;
    int decays;
} train_seg_t;

/* What forward and backward ask of whoever owns the parameters (see the banner). pass is
 * 0 in forward, 1 in backward. A unit's parameters are asked for and released once per
 * pass, except that units 0 and L + 1 asked for in a forward with targets stay in use
 * until backward releases them (the tied head, the final norm). */
typedef struct {
    void *ctx;
    weft_status_t (*params)(void *ctx, int unit, int pass, float **params_p);
    weft_status_t (*params_done)(void *ctx, int unit, int pass);
    weft_status_t (*grads)(void *ctx, int unit, float **grads_p);
    weft_status_t (*grads_done)(void *ctx, int unit);
} train_hooks_t;

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
    float *logits;     // (B, T, V)  becomes dlogits in backward (room for (B, T, Vp):
                       // the GPU path's rows are Vp long)
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
    size_t param_sizes[TRAIN_NUM_PARAM_TENSORS];   // llm.c's tensors, for the file
    size_t num_params;
    int nunits;                    // L + 2
    float *params_mem;             // (num_params) block-major; NULL while shard/ owns them
    // allocated by train_gpt2_prepare
    int B, T;
    float *grads_mem;              // (num_params) block-major; not allocated under hooks
    float *m_mem, *v_mem;          // AdamW moments (zero at first)
    const train_hooks_t *hooks;    // NULL: the model's own buffers
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
/* Whether llm.c tensor i gets weight decay (the 2D+ matrices and embeddings). */
int train_param_decays(int i);

/* Units: floats in unit u, its offset in the block-major buffer, its tensors as runs. */
size_t train_unit_len(const train_gpt2_cfg_t *cfg, int unit);
size_t train_unit_off(const train_gpt2_cfg_t *cfg, int unit);
int train_unit_segs(const train_gpt2_cfg_t *cfg, int unit, train_seg_t segs[TRAIN_BLOCK_TENSORS]);
/* Carve a unit's buffer into its tensors. */
void train_emb_carve(train_emb_t *e, float *unit, const train_gpt2_cfg_t *cfg);
void train_block_carve(train_block_t *b, float *unit, const train_gpt2_cfg_t *cfg);
void train_lnf_carve(train_lnf_t *f, float *unit, const train_gpt2_cfg_t *cfg);
/* Copies num_params floats between llm.c's tensor-major order (the file's) and the
 * block-major layout; to_file = 1 goes block-major -> llm.c. src and dst do not overlap. */
void train_layout_permute(float *dst, const float *src, const train_gpt2_cfg_t *cfg,
                          int to_file);

weft_status_t train_gpt2_create(train_gpt2_t **model_p, const train_gpt2_cfg_t *cfg);
void train_gpt2_destroy(train_gpt2_t *model);
/* GPT-2 init: N(0, 0.02), attprojw/fcprojw N(0, 0.02/sqrt(2L)), biases 0, LN weights 1,
 * padded rows of wte 0. Deterministic in seed (drawn in llm.c's tensor order). On error
 * (out of memory) the parameters are unchanged. */
weft_status_t train_gpt2_init(train_gpt2_t *model, uint64_t seed);
/* Allocates activations, gradients (unless hooks are set) and scratch for batches up to
 * (B, T), T <= maxT. */
weft_status_t train_gpt2_prepare(train_gpt2_t *model, int B, int T);
/* Floats train_gpt2_prepare allocates for activations and scratch at (B, T) (what
 * weft-plan predicts from). */
size_t train_gpt2_act_floats(const train_gpt2_cfg_t *cfg, int B, int T);
/* The same split for any memory (the GPU path carves device buffers with it): floats of
 * the activation and the scratch region at (B, T), and their carving into a and s. */
void train_gpt2_act_split(const train_gpt2_cfg_t *cfg, int B, int T, size_t *nacts,
                          size_t *nscratch);
void train_gpt2_act_carve(train_acts_t *a, train_scratch_t *s, float *acts, float *scratch,
                          const train_gpt2_cfg_t *cfg, int B, int T);
/* Parameter count with the true (unpadded) vocabulary, for FLOP accounting. */
size_t train_gpt2_true_params(const train_gpt2_t *model);

/* inputs, targets: (B, T) token ids < V; targets may be NULL (no loss). Sets
 * model->mean_loss. The arrays must stay alive until backward. */
weft_status_t train_gpt2_forward(train_gpt2_t *model, const int *inputs,
                                 const int *targets, int B, int T);
void train_gpt2_zero_grad(train_gpt2_t *model);
/* Accumulates d(loss_scale * mean loss)/dparams into the gradient buffers; needs a
 * forward with targets. loss_scale is 1/K for K accumulated micro-batches (1/(K*N) on N
 * data-parallel ranks). */
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
