/*
 * gpt2.c - GPT-2 forward, backward and the optimizer step.
 *
 * Forward is llm.c's train_gpt2.c forward; backward is forward reversed, with one layer's
 * activation gradients in train_scratch_t reused layer after layer (the residual stream's
 * gradient runs through scratch.dresidual). The output head uses only the first V rows
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
#include "status.h"
#include "train_int.h"

weft_status_t train_gpt2_forward(train_gpt2_t *m, const int *inputs, const int *targets,
                                 int B, int T)
{
    const train_gpt2_cfg_t *c = &m->cfg;
    if (!m->acts_mem || B > m->B || T > m->T || B <= 0 || T <= 0)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "forward: batch %d x %d exceeds "
                                "the prepared %d x %d", B, T, m->B, m->T);
    int V = c->vocab_size, L = c->num_layers, NH = c->num_heads, C = c->channels;
    int BT = B * T;
    for (int i = 0; i < BT; i++)
        if (inputs[i] < 0 || inputs[i] >= V || (targets && (targets[i] < 0 || targets[i] >= V)))
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "forward: token out of range "
                                    "[0, %d) at position %d", V, i);
    train_params_t *p = &m->params;
    train_acts_t *a = &m->acts;
    size_t btc = (size_t)BT * C;

    kern_encoder_forward(a->encoded, inputs, p->wte, p->wpe, B, T, C);
    const float *residual = a->encoded;
    for (int l = 0; l < L; l++) {
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
        size_t cc = (size_t)C * C;

        kern_layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p->ln1w + l * C,
                               p->ln1b + l * C, BT, C);
        train_mm_forward(m, qkv, ln1, p->qkvw + l * 3 * cc, p->qkvb + l * 3 * C,
                         BT, C, 3 * C);
        kern_attention_forward(atty, att, qkv, B, T, C, NH);
        train_mm_forward(m, residual2, atty, p->attprojw + l * cc, p->attprojb + l * C,
                         BT, C, C);
        kern_residual_forward(residual2, residual, residual2, btc);
        kern_layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, p->ln2w + l * C,
                               p->ln2b + l * C, BT, C);
        train_mm_forward(m, fch, ln2, p->fcw + l * 4 * cc, p->fcb + l * 4 * C,
                         BT, C, 4 * C);
        kern_gelu_forward(fch_gelu, fch, btc * 4);
        train_mm_forward(m, residual3, fch_gelu, p->fcprojw + l * 4 * cc,
                         p->fcprojb + l * C, BT, 4 * C, C);
        kern_residual_forward(residual3, residual2, residual3, btc);
        residual = residual3;
    }
    kern_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, residual, p->lnfw, p->lnfb,
                           BT, C);
    train_mm_forward(m, a->logits, a->lnf, p->wte, NULL, BT, C, V);   // (B, T, V)

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

weft_status_t train_gpt2_backward(train_gpt2_t *m, float loss_scale)
{
    if (!m->last_targets)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG,
                                "backward: needs a forward with targets first");
    const train_gpt2_cfg_t *c = &m->cfg;
    int B = m->last_B, T = m->last_T, BT = B * T;
    int V = c->vocab_size, L = c->num_layers, NH = c->num_heads, C = c->channels;
    train_params_t *p = &m->params, *g = &m->grads;
    train_acts_t *a = &m->acts;
    train_scratch_t *s = &m->scratch;
    size_t btc = (size_t)BT * C, cc = (size_t)C * C;

    // loss -> logits -> final layernorm; dresidual starts at zero
    kern_crossentropy_backward(a->logits, a->logits, a->lse, m->last_targets,
                               loss_scale / (float)BT, BT, V);
    train_mm_backward(m, s->dln, g->wte, NULL, a->logits, a->lnf, p->wte, BT, C, V);
    memset(s->dresidual, 0, btc * sizeof(float));
    const float *res_last = L > 0 ? a->residual3 + (L - 1) * btc : a->encoded;
    kern_layernorm_backward(s->dresidual, g->lnfw, g->lnfb, s->dln, res_last, p->lnfw,
                            a->lnf_mean, a->lnf_rstd, BT, C);

    for (int l = L - 1; l >= 0; l--) {
        const float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * btc;
        float *ln1 = a->ln1 + l * btc;
        float *qkv = a->qkv + l * btc * 3;
        float *atty = a->atty + l * btc;
        float *att = a->att + (size_t)l * B * NH * T * T;
        float *residual2 = a->residual2 + l * btc;
        float *ln2 = a->ln2 + l * btc;
        float *fch = a->fch + l * btc * 4;
        float *fch_gelu = a->fch_gelu + l * btc * 4;

        // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        train_mm_backward(m, s->dfch, g->fcprojw + l * 4 * cc, g->fcprojb + l * C,
                          s->dresidual, fch_gelu, p->fcprojw + l * 4 * cc, BT, 4 * C, C);
        kern_gelu_backward(s->dfch, fch, s->dfch, btc * 4);
        train_mm_backward(m, s->dln, g->fcw + l * 4 * cc, g->fcb + l * 4 * C, s->dfch, ln2,
                          p->fcw + l * 4 * cc, BT, C, 4 * C);
        kern_layernorm_backward(s->dresidual, g->ln2w + l * C, g->ln2b + l * C, s->dln,
                                residual2, p->ln2w + l * C, a->ln2_mean + (size_t)l * BT,
                                a->ln2_rstd + (size_t)l * BT, BT, C);
        // attention: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        train_mm_backward(m, s->dln, g->attprojw + l * cc, g->attprojb + l * C,
                          s->dresidual, atty, p->attprojw + l * cc, BT, C, C);
        kern_attention_backward(s->dqkv, s->datt, s->dln, qkv, att, B, T, C, NH);
        train_mm_backward(m, s->dln, g->qkvw + l * 3 * cc, g->qkvb + l * 3 * C, s->dqkv,
                          ln1, p->qkvw + l * 3 * cc, BT, C, 3 * C);
        kern_layernorm_backward(s->dresidual, g->ln1w + l * C, g->ln1b + l * C, s->dln,
                                residual, p->ln1w + l * C, a->ln1_mean + (size_t)l * BT,
                                a->ln1_rstd + (size_t)l * BT, BT, C);
    }
    kern_encoder_backward(g->wte, g->wpe, s->dresidual, m->last_inputs, B, T, C);
    m->last_targets = NULL;   // logits now hold dlogits
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
    size_t off = 0;
    for (int i = 0; i < TRAIN_NUM_PARAM_TENSORS; i++) {
        size_t n = m->param_sizes[i];
        kern_adamw(m->params_mem + off, m->m_mem + off, m->v_mem + off, m->grads_mem + off,
                   n, lr, beta1, beta2, eps, train_param_decays(i) ? wd : 0.0f, t);
        off += n;
    }
    return WEFT_OK;
}
