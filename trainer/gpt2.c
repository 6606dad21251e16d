/*
 * gpt2.c - GPT-2 forward, backward and the optimizer step.
 *
 * Forward is llm.c's train_gpt2.c forward; backward is forward reversed, with one layer's
 * activation gradients in train_scratch_t reused layer after layer (the residual stream's
 * gradient runs through scratch.dresidual). Both walk the units (model.h): each block
 * runs from the unit buffer it is handed, and the per-unit calls into the hooks are the
 * points where a sharding layer waits for a gather, starts the next one and starts a
 * gradient reduction. The output head uses only the first V rows
 * of wte, so logits are (B, T, V) and the padded rows get no gradient.
 *
 * Invariants: forward leaves everything backward needs in model->acts and remembers its
 * inputs/targets; backward overwrites acts.logits with dlogits, so a second backward
 * without a new forward is refused.
 */
#include <math.h>
#include <string.h>

#include "model.h"
#include "nn.h"
#include "check.h"
#include "status.h"
#include "train_int.h"

weft_status_t train_check_tokens(const int *inputs, const int *targets, int n, int V)
{
    for (int i = 0; i < n; i++)
        if (inputs[i] < 0 || inputs[i] >= V || (targets && (targets[i] < 0 || targets[i] >= V)))
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "forward: token out of range "
                                    "[0, %d) at position %d", V, i);
    return WEFT_OK;
}

/* ---- the units, from the hooks or the model's own buffers ---- */

weft_status_t train_unit_params(const train_hooks_t *h, float *base,
                                const train_gpt2_cfg_t *c, int u, int pass, float **p)
{
    if (h)
        return h->params(h->ctx, u, pass, p);
    *p = base + train_unit_off(c, u);
    return WEFT_OK;
}

weft_status_t train_unit_params_done(const train_hooks_t *h, int u, int pass)
{
    return h ? h->params_done(h->ctx, u, pass) : WEFT_OK;
}

weft_status_t train_unit_grads(const train_hooks_t *h, float *base,
                               const train_gpt2_cfg_t *c, int u, float **g)
{
    if (h)
        return h->grads(h->ctx, u, g);
    *g = base + train_unit_off(c, u);
    return WEFT_OK;
}

weft_status_t train_unit_grads_done(const train_hooks_t *h, int u)
{
    return h ? h->grads_done(h->ctx, u) : WEFT_OK;
}

static weft_status_t unit_params(train_gpt2_t *m, int u, int pass, float **p)
{
    return train_unit_params(m->hooks, m->params_mem, &m->cfg, u, pass, p);
}

static weft_status_t unit_params_done(train_gpt2_t *m, int u, int pass)
{
    return train_unit_params_done(m->hooks, u, pass);
}

static weft_status_t unit_grads(train_gpt2_t *m, int u, float **g)
{
    return train_unit_grads(m->hooks, m->grads_mem, &m->cfg, u, g);
}

static weft_status_t unit_grads_done(train_gpt2_t *m, int u)
{
    return train_unit_grads_done(m->hooks, u);
}

/* One block's forward; residual (B, T, C) in, l's activations out (residual3 is its
 * output). */
static void block_forward(train_gpt2_t *m, const train_block_t *p, int l,
                          const float *residual, int B, int T)
{
    const train_gpt2_cfg_t *c = &m->cfg;
    int NH = c->num_heads, C = c->channels, BT = B * T;
    train_acts_t *a = &m->acts;
    size_t btc = (size_t)BT * C;
    float *ln1 = a->ln1 + l * btc;                          // (B, T, C)
    float *ln1_mean = a->ln1_mean + (size_t)l * BT;         // (B, T)
    float *ln1_rstd = a->ln1_rstd + (size_t)l * BT;
    float *qkv = a->qkv + l * btc * 3;                      // (B, T, 3C)
    float *atty = a->atty + l * btc;                        // (B, T, C)
    float *att = a->att + (size_t)l * B * NH * T * T;       // (B, NH, T, T)
    float *residual2 = a->residual2 + l * btc;              // (B, T, C)
    float *ln2 = a->ln2 + l * btc;
    float *ln2_mean = a->ln2_mean + (size_t)l * BT;
    float *ln2_rstd = a->ln2_rstd + (size_t)l * BT;
    float *fch = a->fch + l * btc * 4;                      // (B, T, 4C)
    float *fch_gelu = a->fch_gelu + l * btc * 4;
    float *residual3 = a->residual3 + l * btc;              // (B, T, C)

    kern_layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p->ln1w, p->ln1b, BT, C);
    train_mm_forward(m, qkv, ln1, p->qkvw, p->qkvb, BT, C, 3 * C);
    kern_attention_forward(atty, att, qkv, B, T, C, NH);
    train_mm_forward(m, residual2, atty, p->attprojw, p->attprojb, BT, C, C);
    kern_residual_forward(residual2, residual, residual2, btc);
    kern_layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, p->ln2w, p->ln2b, BT, C);
    train_mm_forward(m, fch, ln2, p->fcw, p->fcb, BT, C, 4 * C);
    kern_gelu_forward(fch_gelu, fch, btc * 4);
    train_mm_forward(m, residual3, fch_gelu, p->fcprojw, p->fcprojb, BT, 4 * C, C);
    kern_residual_forward(residual3, residual2, residual3, btc);
}

weft_status_t train_gpt2_forward(train_gpt2_t *m, const int *inputs, const int *targets,
                                 int B, int T)
{
    const train_gpt2_cfg_t *c = &m->cfg;
    if (!m->acts_mem || B > m->B || T > m->T || B <= 0 || T <= 0)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "forward: batch %d x %d exceeds "
                                "the prepared %d x %d", B, T, m->B, m->T);
    int V = c->vocab_size, L = c->num_layers, C = c->channels;
    int BT = B * T;
    RETURN_IF_ERR(train_check_tokens(inputs, targets, BT, V));
    train_acts_t *a = &m->acts;
    size_t btc = (size_t)BT * C;
    float *u;
    train_emb_t emb;
    train_block_t blk;
    train_lnf_t lnf;

    m->last_targets = NULL;   // a failure below leaves nothing for backward
    RETURN_IF_ERR(unit_params(m, TRAIN_UNIT_EMB, 0, &u));
    train_emb_carve(&emb, u, c);
    kern_encoder_forward(a->encoded, inputs, emb.wte, emb.wpe, B, T, C);
    const float *residual = a->encoded;
    for (int l = 0; l < L; l++) {
        RETURN_IF_ERR(unit_params(m, TRAIN_UNIT_BLOCK(l), 0, &u));
        train_block_carve(&blk, u, c);
        block_forward(m, &blk, l, residual, B, T);
        RETURN_IF_ERR(unit_params_done(m, TRAIN_UNIT_BLOCK(l), 0));
        residual = a->residual3 + l * btc;
    }
    RETURN_IF_ERR(unit_params(m, TRAIN_UNIT_LNF(L), 0, &u));
    train_lnf_carve(&lnf, u, c);
    kern_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, residual, lnf.lnfw, lnf.lnfb,
                           BT, C);
    train_mm_forward(m, a->logits, a->lnf, emb.wte, NULL, BT, C, V);   // (B, T, V)
    if (!targets) {   // no backward follows: the head and the final norm are done
        RETURN_IF_ERR(unit_params_done(m, TRAIN_UNIT_LNF(L), 0));
        RETURN_IF_ERR(unit_params_done(m, TRAIN_UNIT_EMB, 0));
    }

    m->last_B = B;
    m->last_T = T;
    m->last_inputs = inputs;
    m->last_targets = targets;
    m->mean_loss = -1.0f;
    if (targets) {
        kern_crossentropy_forward(a->losses, a->lse, a->logits, targets, BT, V);
        double sum = 0.0;
        for (int i = 0; i < BT; i++)
            sum += a->losses[i];
        m->mean_loss = (float)(sum / BT);
    }
    return WEFT_OK;
}

void train_gpt2_zero_grad(train_gpt2_t *m)
{
    if (m->grads_mem)
        memset(m->grads_mem, 0, m->num_params * sizeof(float));
}

/* One block's backward: scratch.dresidual holds d(residual3) on entry and d(residual)
 * on exit; parameter gradients accumulate into g. */
static void block_backward(train_gpt2_t *m, const train_block_t *p, const train_block_t *g,
                           int l, const float *residual, int B, int T)
{
    const train_gpt2_cfg_t *c = &m->cfg;
    int NH = c->num_heads, C = c->channels, BT = B * T;
    train_acts_t *a = &m->acts;
    train_scratch_t *s = &m->scratch;
    size_t btc = (size_t)BT * C;
    float *ln1 = a->ln1 + l * btc;
    float *qkv = a->qkv + l * btc * 3;
    float *atty = a->atty + l * btc;
    float *att = a->att + (size_t)l * B * NH * T * T;
    float *residual2 = a->residual2 + l * btc;
    float *ln2 = a->ln2 + l * btc;
    float *fch = a->fch + l * btc * 4;
    float *fch_gelu = a->fch_gelu + l * btc * 4;

    // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
    train_mm_backward(m, s->dfch, g->fcprojw, g->fcprojb, s->dresidual, fch_gelu,
                      p->fcprojw, BT, 4 * C, C);
    kern_gelu_backward(s->dfch, fch, s->dfch, btc * 4);
    train_mm_backward(m, s->dln, g->fcw, g->fcb, s->dfch, ln2, p->fcw, BT, C, 4 * C);
    kern_layernorm_backward(s->dresidual, g->ln2w, g->ln2b, s->dln, residual2, p->ln2w,
                            a->ln2_mean + (size_t)l * BT, a->ln2_rstd + (size_t)l * BT,
                            BT, C);
    // attention: residual2 = residual + attproj(attention(qkv(ln1(residual))))
    train_mm_backward(m, s->dln, g->attprojw, g->attprojb, s->dresidual, atty, p->attprojw,
                      BT, C, C);
    kern_attention_backward(s->dqkv, s->datt, s->dln, qkv, att, B, T, C, NH);
    train_mm_backward(m, s->dln, g->qkvw, g->qkvb, s->dqkv, ln1, p->qkvw, BT, C, 3 * C);
    kern_layernorm_backward(s->dresidual, g->ln1w, g->ln1b, s->dln, residual, p->ln1w,
                            a->ln1_mean + (size_t)l * BT, a->ln1_rstd + (size_t)l * BT,
                            BT, C);
}

weft_status_t train_gpt2_backward(train_gpt2_t *m, float loss_scale)
{
    if (!m->last_targets)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG,
                                "backward: needs a forward with targets first");
    const train_gpt2_cfg_t *c = &m->cfg;
    int B = m->last_B, T = m->last_T, BT = B * T;
    int V = c->vocab_size, L = c->num_layers, C = c->channels;
    train_acts_t *a = &m->acts;
    train_scratch_t *s = &m->scratch;
    size_t btc = (size_t)BT * C;
    float *u, *gu;
    train_emb_t emb, gemb;
    train_lnf_t lnf, glnf;
    train_block_t blk, gblk;
    const int *targets = m->last_targets;
    m->last_targets = NULL;   // logits are about to hold dlogits

    // loss -> logits -> final layernorm; dresidual starts at zero
    RETURN_IF_ERR(unit_params(m, TRAIN_UNIT_EMB, 1, &u));
    RETURN_IF_ERR(unit_grads(m, TRAIN_UNIT_EMB, &gu));
    train_emb_carve(&emb, u, c);
    train_emb_carve(&gemb, gu, c);
    kern_crossentropy_backward(a->logits, a->logits, a->lse, targets,
                               loss_scale / (float)BT, BT, V);
    train_mm_backward(m, s->dln, gemb.wte, NULL, a->logits, a->lnf, emb.wte, BT, C, V);
    memset(s->dresidual, 0, btc * sizeof(float));
    const float *res_last = L > 0 ? a->residual3 + (L - 1) * btc : a->encoded;
    RETURN_IF_ERR(unit_params(m, TRAIN_UNIT_LNF(L), 1, &u));
    RETURN_IF_ERR(unit_grads(m, TRAIN_UNIT_LNF(L), &gu));
    train_lnf_carve(&lnf, u, c);
    train_lnf_carve(&glnf, gu, c);
    kern_layernorm_backward(s->dresidual, glnf.lnfw, glnf.lnfb, s->dln, res_last, lnf.lnfw,
                            a->lnf_mean, a->lnf_rstd, BT, C);
    RETURN_IF_ERR(unit_grads_done(m, TRAIN_UNIT_LNF(L)));
    RETURN_IF_ERR(unit_params_done(m, TRAIN_UNIT_LNF(L), 1));

    for (int l = L - 1; l >= 0; l--) {
        const float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * btc;
        RETURN_IF_ERR(unit_params(m, TRAIN_UNIT_BLOCK(l), 1, &u));
        RETURN_IF_ERR(unit_grads(m, TRAIN_UNIT_BLOCK(l), &gu));
        train_block_carve(&blk, u, c);
        train_block_carve(&gblk, gu, c);
        block_backward(m, &blk, &gblk, l, residual, B, T);
        RETURN_IF_ERR(unit_grads_done(m, TRAIN_UNIT_BLOCK(l)));
        RETURN_IF_ERR(unit_params_done(m, TRAIN_UNIT_BLOCK(l), 1));
    }
    // the tied wte: its gradient from the head and from the encoder, reduced once
    kern_encoder_backward(gemb.wte, gemb.wpe, s->dresidual, m->last_inputs, B, T, C);
    RETURN_IF_ERR(unit_grads_done(m, TRAIN_UNIT_EMB));
    RETURN_IF_ERR(unit_params_done(m, TRAIN_UNIT_EMB, 1));
    return WEFT_OK;
}

float train_gpt2_clip_grad(train_gpt2_t *m, float clip)
{
    float norm = (float)sqrt(kern_sumsq(m->grads_mem, m->num_params));
    if (clip > 0.0f) {
        float coef = clip / (norm + 1e-6f);
        if (coef < 1.0f)
            kern_scale(m->grads_mem, coef, m->num_params);
    }
    return norm;
}

weft_status_t train_gpt2_update(train_gpt2_t *m, float lr, float beta1, float beta2,
                                float eps, float wd, int t)
{
    if (!m->grads_mem || t < 1)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "update: no gradients or step < 1");
    if (!m->m_mem) {
        m->m_mem = train_alloc_floats(m->num_params);
        m->v_mem = train_alloc_floats(m->num_params);
        if (!m->m_mem || !m->v_mem)
            return weft_error_quiet(WEFT_ERR_NO_MEMORY, "update: cannot allocate AdamW state");
    }
    for (int u = 0; u < m->nunits; u++) {
        train_seg_t segs[TRAIN_BLOCK_TENSORS];
        int ns = train_unit_segs(&m->cfg, u, segs);
        size_t base = train_unit_off(&m->cfg, u);
        for (int j = 0; j < ns; j++) {
            size_t o = base + segs[j].off;
            kern_adamw(m->params_mem + o, m->m_mem + o, m->v_mem + o, m->grads_mem + o,
                       segs[j].len, lr, beta1, beta2, eps, segs[j].decays ? wd : 0.0f, t);
        }
    }
    return WEFT_OK;
}
