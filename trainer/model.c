/*
 * model.c - the GPT-2 parameter layout, initialisation and buffer management.
 *
 * Invariants: params_mem holds exactly num_params floats in the block-major unit layout
 * (model.h; the checkpoint body is its llm.c permutation); grads_mem, m_mem and v_mem
 * mirror that layout; the padded rows
 * [V, Vp) of wte are zero after init and receive zero gradient, so they stay zero under
 * AdamW (decay of zero is zero). Activations are carved for the (B, T) given to
 * train_gpt2_prepare; smaller batches reuse the front of each region.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "rng.h"
#include "status.h"
#include "train_int.h"

const char *const train_param_names[TRAIN_NUM_PARAM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb",
};

int train_padded_vocab(int vocab_size)
{
    return (vocab_size + 127) / 128 * 128;
}

int train_param_decays(int i)
{
    // wte, wpe, qkvw, attprojw, fcw, fcprojw
    return i == 0 || i == 1 || i == 4 || i == 6 || i == 10 || i == 12;
}

weft_status_t train_gpt2_cfg_check(const train_gpt2_cfg_t *c)
{
    if (c->max_seq_len <= 0 || c->vocab_size <= 0 || c->num_layers <= 0 ||
        c->num_heads <= 0 || c->channels <= 0)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG,
                                "model sizes must be positive (maxT %d V %d L %d NH %d C %d)",
                                c->max_seq_len, c->vocab_size, c->num_layers,
                                c->num_heads, c->channels);
    if (c->channels % c->num_heads != 0)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "channels %d not divisible by heads %d",
                                c->channels, c->num_heads);
    if (c->padded_vocab_size < c->vocab_size)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "padded vocab %d < vocab %d",
                                c->padded_vocab_size, c->vocab_size);
    // every tensor, and the whole model, must fit comfortably in memory indexes
    if (c->channels > (1 << 16) || c->max_seq_len > (1 << 20) || c->num_layers > 4096 ||
        c->padded_vocab_size > (1 << 24) || c->num_heads > c->channels)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "model sizes out of range");
    return WEFT_OK;
}

size_t train_param_sizes(size_t s[TRAIN_NUM_PARAM_TENSORS], const train_gpt2_cfg_t *cfg)
{
    size_t Vp = cfg->padded_vocab_size, C = cfg->channels, maxT = cfg->max_seq_len;
    size_t L = cfg->num_layers;
    s[0] = Vp * C;             // wte
    s[1] = maxT * C;           // wpe
    s[2] = L * C;              // ln1w
    s[3] = L * C;              // ln1b
    s[4] = L * 3 * C * C;      // qkvw
    s[5] = L * 3 * C;          // qkvb
    s[6] = L * C * C;          // attprojw
    s[7] = L * C;              // attprojb
    s[8] = L * C;              // ln2w
    s[9] = L * C;              // ln2b
    s[10] = L * 4 * C * C;     // fcw
    s[11] = L * 4 * C;         // fcb
    s[12] = L * C * 4 * C;     // fcprojw
    s[13] = L * C;             // fcprojb
    s[14] = C;                 // lnfw
    s[15] = C;                 // lnfb
    size_t total = 0;
    for (int i = 0; i < TRAIN_NUM_PARAM_TENSORS; i++)
        total += s[i];
    return total;
}

/* floats in one block unit: its 12 tensors */
static size_t block_len(size_t C)
{
    return 12 * C * C + 13 * C;
}

size_t train_unit_len(const train_gpt2_cfg_t *c, int u)
{
    size_t C = c->channels;
    if (u == TRAIN_UNIT_EMB)
        return ((size_t)c->padded_vocab_size + c->max_seq_len) * C;
    return u == TRAIN_UNIT_LNF(c->num_layers) ? 2 * C : block_len(C);
}

size_t train_unit_off(const train_gpt2_cfg_t *c, int u)
{
    if (u == TRAIN_UNIT_EMB)
        return 0;
    return train_unit_len(c, TRAIN_UNIT_EMB) + (size_t)(u - 1) * block_len(c->channels);
}

/* sizes of a block's tensors in unit order (= llm.c tensors 2..13 for one layer) */
static void block_sizes(size_t s[TRAIN_BLOCK_TENSORS], size_t C)
{
    size_t v[TRAIN_BLOCK_TENSORS] = { C, C, 3 * C * C, 3 * C, C * C, C,
                                      C, C, 4 * C * C, 4 * C, 4 * C * C, C };
    memcpy(s, v, sizeof(v));
}

int train_unit_segs(const train_gpt2_cfg_t *c, int u, train_seg_t segs[TRAIN_BLOCK_TENSORS])
{
    size_t C = c->channels;
    if (u == TRAIN_UNIT_EMB) {
        segs[0] = (train_seg_t){ 0, (size_t)c->padded_vocab_size * C, train_param_decays(0) };
        segs[1] = (train_seg_t){ segs[0].len, (size_t)c->max_seq_len * C,
                                 train_param_decays(1) };
        return 2;
    }
    if (u == TRAIN_UNIT_LNF(c->num_layers)) {
        segs[0] = (train_seg_t){ 0, C, train_param_decays(14) };
        segs[1] = (train_seg_t){ C, C, train_param_decays(15) };
        return 2;
    }
    size_t s[TRAIN_BLOCK_TENSORS], off = 0;
    block_sizes(s, C);
    for (int j = 0; j < TRAIN_BLOCK_TENSORS; j++) {
        segs[j] = (train_seg_t){ off, s[j], train_param_decays(2 + j) };
        off += s[j];
    }
    return TRAIN_BLOCK_TENSORS;
}

void train_emb_carve(train_emb_t *e, float *unit, const train_gpt2_cfg_t *c)
{
    e->wte = unit;
    e->wpe = unit + (size_t)c->padded_vocab_size * c->channels;
}

void train_block_carve(train_block_t *b, float *unit, const train_gpt2_cfg_t *c)
{
    float **ptrs[TRAIN_BLOCK_TENSORS] = {
        &b->ln1w, &b->ln1b, &b->qkvw, &b->qkvb, &b->attprojw, &b->attprojb,
        &b->ln2w, &b->ln2b, &b->fcw, &b->fcb, &b->fcprojw, &b->fcprojb,
    };
    size_t s[TRAIN_BLOCK_TENSORS];
    block_sizes(s, c->channels);
    for (int j = 0; j < TRAIN_BLOCK_TENSORS; j++) {
        *ptrs[j] = unit;
        unit += s[j];
    }
}

void train_lnf_carve(train_lnf_t *f, float *unit, const train_gpt2_cfg_t *c)
{
    f->lnfw = unit;
    f->lnfb = unit + c->channels;
}

void train_layout_permute(float *dst, const float *src, const train_gpt2_cfg_t *c,
                          int to_file)
{
    size_t sizes[TRAIN_NUM_PARAM_TENSORS], file_off = 0;
    train_param_sizes(sizes, c);
    int L = c->num_layers;
    for (int i = 0; i < TRAIN_NUM_PARAM_TENSORS; i++) {
        int per_layer = i >= 2 && i < 14;
        int nparts = per_layer ? L : 1;
        size_t len = sizes[i] / (size_t)nparts;
        for (int l = 0; l < nparts; l++) {
            size_t unit_pos;
            if (!per_layer) {
                int u = i < 2 ? TRAIN_UNIT_EMB : TRAIN_UNIT_LNF(L);
                train_seg_t segs[TRAIN_BLOCK_TENSORS];
                train_unit_segs(c, u, segs);
                unit_pos = train_unit_off(c, u) + segs[i < 2 ? i : i - 14].off;
            } else {
                train_seg_t segs[TRAIN_BLOCK_TENSORS];
                train_unit_segs(c, TRAIN_UNIT_BLOCK(l), segs);
                unit_pos = train_unit_off(c, TRAIN_UNIT_BLOCK(l)) + segs[i - 2].off;
            }
            if (to_file)
                memcpy(dst + file_off, src + unit_pos, len * sizeof(float));
            else
                memcpy(dst + unit_pos, src + file_off, len * sizeof(float));
            file_off += len;
        }
    }
}

/* regions start on 64-byte boundaries */
static size_t align_floats(size_t n)
{
    return (n + 15) / 16 * 16;
}

float *train_alloc_floats(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)) != 0)
        return NULL;
    memset(p, 0, (n ? n : 1) * sizeof(float));
    return p;
}

weft_status_t train_gpt2_create(train_gpt2_t **model_p, const train_gpt2_cfg_t *cfg)
{
    weft_status_t st = train_gpt2_cfg_check(cfg);
    if (st != WEFT_OK)
        return st;
    train_gpt2_t *m = calloc(1, sizeof(*m));
    if (!m)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "model: out of memory");
    m->cfg = *cfg;
    m->num_params = train_param_sizes(m->param_sizes, cfg);
    m->params_mem = train_alloc_floats(m->num_params);
    if (!m->params_mem) {
        size_t n = m->num_params;
        free(m);
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "model: cannot allocate %zu parameters",
                                n);
    }
    m->nunits = cfg->num_layers + 2;
    m->mean_loss = -1.0f;
    *model_p = m;
    return WEFT_OK;
}

void train_gpt2_destroy(train_gpt2_t *m)
{
    if (!m)
        return;
    free(m->params_mem);
    free(m->grads_mem);
    free(m->m_mem);
    free(m->v_mem);
    free(m->acts_mem);
    free(m->scratch_mem);
    free(m);
}

static void fill_normal(float *x, size_t n, double std, train_rng_t *rng)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(train_rng_normal(rng) * std);
}

/* GPT-2 init, drawn in llm.c's tensor order (so a seed gives the same weights as before
 * the block-major layout), then permuted into units. */
weft_status_t train_gpt2_init(train_gpt2_t *m, uint64_t seed)
{
    const train_gpt2_cfg_t *c = &m->cfg;
    size_t C = c->channels, L = c->num_layers;
    const size_t *s = m->param_sizes;
    train_rng_t rng;
    train_rng_seed(&rng, seed, TRAIN_RNG_INIT);
    float *f = train_alloc_floats(m->num_params);   // llm.c order, zeroed
    if (!f)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "model: cannot allocate %zu floats to "
                                "initialise", m->num_params);
    float *t[TRAIN_NUM_PARAM_TENSORS];
    t[0] = f;
    for (int i = 1; i < TRAIN_NUM_PARAM_TENSORS; i++)
        t[i] = t[i - 1] + s[i - 1];
    double resid_std = 0.02 / sqrt(2.0 * (double)L);
    fill_normal(t[0], (size_t)c->vocab_size * C, 0.02, &rng);   // rows [V, Vp) stay 0
    fill_normal(t[1], s[1], 0.02, &rng);
    fill_normal(t[4], s[4], 0.02, &rng);        // qkvw
    fill_normal(t[6], s[6], resid_std, &rng);   // attprojw
    fill_normal(t[10], s[10], 0.02, &rng);      // fcw
    fill_normal(t[12], s[12], resid_std, &rng); // fcprojw
    for (size_t i = 0; i < L * C; i++) {
        t[2][i] = 1.0f;                         // ln1w
        t[8][i] = 1.0f;                         // ln2w
    }
    for (size_t i = 0; i < C; i++)
        t[14][i] = 1.0f;                        // lnfw
    train_layout_permute(m->params_mem, f, c, 0);
    free(f);
    return WEFT_OK;
}

size_t train_gpt2_true_params(const train_gpt2_t *m)
{
    size_t pad = (size_t)(m->cfg.padded_vocab_size - m->cfg.vocab_size) * m->cfg.channels;
    return m->num_params - pad;
}

/* floats of each activation (train_acts_t order) and scratch buffer for (B, T) */
enum { NUM_ACTS = 20, NUM_SCRATCH = 5 };
static void act_sizes(size_t sizes[NUM_ACTS], size_t ssizes[NUM_SCRATCH],
                      const train_gpt2_cfg_t *c, int B, int T)
{
    // logits: (B, T, V) on the CPU, rows of Vp on the GPU (aligned for cuBLAS): room for Vp
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T;
    size_t a[NUM_ACTS] = {
        BT * C, L * BT * C, L * BT, L * BT, L * BT * 3 * C, L * BT * C,
        L * B * NH * T * T, L * BT * C, L * BT * C, L * BT, L * BT, L * BT * 4 * C,
        L * BT * 4 * C, L * BT * C, BT * C, BT, BT, BT * Vp, BT, BT,
    };
    size_t sc[NUM_SCRATCH] = { BT * C, BT * C, BT * 3 * C, BT * 4 * C, (size_t)T * T };
    memcpy(sizes, a, sizeof(a));
    memcpy(ssizes, sc, sizeof(sc));
}

size_t train_gpt2_act_floats(const train_gpt2_cfg_t *c, int B, int T)
{
    size_t nacts, nscratch;
    train_gpt2_act_split(c, B, T, &nacts, &nscratch);
    return nacts + nscratch;
}

void train_gpt2_act_split(const train_gpt2_cfg_t *c, int B, int T, size_t *nacts,
                          size_t *nscratch)
{
    size_t sizes[NUM_ACTS], ssizes[NUM_SCRATCH];
    act_sizes(sizes, ssizes, c, B, T);
    *nacts = *nscratch = 0;
    for (size_t i = 0; i < NUM_ACTS; i++)
        *nacts += align_floats(sizes[i]);
    for (size_t i = 0; i < NUM_SCRATCH; i++)
        *nscratch += align_floats(ssizes[i]);
}

void train_gpt2_act_carve(train_acts_t *a, train_scratch_t *s, float *acts, float *scratch,
                          const train_gpt2_cfg_t *c, int B, int T)
{
    size_t sizes[NUM_ACTS], ssizes[NUM_SCRATCH];
    act_sizes(sizes, ssizes, c, B, T);
    float **ptrs[] = {
        &a->encoded, &a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->atty, &a->att,
        &a->residual2, &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fch, &a->fch_gelu,
        &a->residual3, &a->lnf, &a->lnf_mean, &a->lnf_rstd, &a->logits, &a->lse, &a->losses,
    };
    float **sptrs[] = { &s->dresidual, &s->dln, &s->dqkv, &s->dfch, &s->datt };
    _Static_assert(sizeof(ptrs) / sizeof(ptrs[0]) == NUM_ACTS, "train_acts_t");
    _Static_assert(sizeof(sptrs) / sizeof(sptrs[0]) == NUM_SCRATCH, "train_scratch_t");
    for (size_t i = 0; i < NUM_ACTS; i++) {
        *ptrs[i] = acts;
        acts += align_floats(sizes[i]);
    }
    for (size_t i = 0; i < NUM_SCRATCH; i++) {
        *sptrs[i] = scratch;
        scratch += align_floats(ssizes[i]);
    }
}

weft_status_t train_gpt2_prepare(train_gpt2_t *m, int B, int T)
{
    const train_gpt2_cfg_t *c = &m->cfg;
    if (B <= 0 || T <= 0 || T > c->max_seq_len)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG,
                                "batch %d x %d invalid (sequence length must be 1..%d)",
                                B, T, c->max_seq_len);
    size_t nacts, nscratch;
    train_gpt2_act_split(c, B, T, &nacts, &nscratch);
    free(m->acts_mem);
    free(m->scratch_mem);
    m->scratch_mem = NULL;
    m->acts_mem = train_alloc_floats(nacts);
    if (m->acts_mem)
        m->scratch_mem = train_alloc_floats(nscratch);
    if (!m->grads_mem && !m->hooks)
        m->grads_mem = train_alloc_floats(m->num_params);
    if (!m->acts_mem || !m->scratch_mem || (!m->grads_mem && !m->hooks))
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "model: cannot allocate activations "
                                "for batch %d x %d (%zu floats)", B, T, nacts);
    train_gpt2_act_carve(&m->acts, &m->scratch, m->acts_mem, m->scratch_mem, c, B, T);
    m->B = B;
    m->T = T;
    return WEFT_OK;
}
