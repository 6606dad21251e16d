/*
 * sample.c - text generation (the mean loss over held-out batches is train.c's run_val).
 *
 * Generation runs the full forward on the last min(len, T) tokens for every new token
 * (no KV cache: the models here are small) and draws from softmax(logits) at
 * temperature 1 with its own seeded stream, so samples are reproducible.
 */
#include <math.h>
#include <stdlib.h>

#include "nn.h"
#include "status.h"
#include "train.h"

static void put_token(FILE *out, int tok, int text)
{
    if (!text)
        fprintf(out, "%d ", tok);
    else if (tok == '\n' || tok == '\t' || (tok >= 32 && tok < 127) || tok >= 128)
        fputc(tok, out);       // bytes >= 128 pass through (UTF-8 text)
    else
        fputc('?', out);
}

weft_status_t train_sample(train_gpt2_t *m, const int *prompt, int np, int n, int text,
                           uint64_t seed, FILE *out)
{
    int T = m->T, V = m->cfg.vocab_size;
    int *ctx = malloc((size_t)(np + n + 1) * sizeof(int));
    if (!ctx)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "sample: out of memory");
    int len = 0;
    for (int i = 0; i < np; i++)
        ctx[len++] = prompt[i];
    if (len == 0)
        ctx[len++] = text ? '\n' : 0;
    train_rng_t rng;
    train_rng_seed(&rng, seed, TRAIN_RNG_SAMPLE);
    fprintf(out, "sample (%d %s after the prompt):\n---\n", n, text ? "bytes" : "tokens");
    for (int i = 0; i < len; i++)
        put_token(out, ctx[i], text);
    weft_status_t st = WEFT_OK;
    for (int i = 0; i < n; i++) {
        int w = len < T ? len : T;
        st = train_gpt2_forward(m, ctx + len - w, NULL, 1, w);
        if (st != WEFT_OK)
            break;
        const float *logits = m->acts.logits + (size_t)(w - 1) * V;   // (V)
        float mx = -INFINITY;
        for (int j = 0; j < V; j++)
            mx = logits[j] > mx ? logits[j] : mx;
        double sum = 0.0;
        for (int j = 0; j < V; j++)
            sum += exp((double)logits[j] - mx);
        double coin = train_rng_uniform(&rng) * sum, cdf = 0.0;
        int tok = V - 1;
        for (int j = 0; j < V; j++) {
            cdf += exp((double)logits[j] - mx);
            if (coin < cdf) {
                tok = j;
                break;
            }
        }
        ctx[len++] = tok;
        put_token(out, tok, text);
    }
    fprintf(out, "\n---\n");
    fflush(out);
    free(ctx);
    return st;
}
