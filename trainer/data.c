/*
 * data.c - reading shards and text, the train/val split, and the batch loader.
 *
 * Invariants: tokens are validated once at load (shard size against its header); the
 * loader never reads past n (every window start is <= n - T - 1); the batch stream
 * depends only on (data, B, T, shuffle, seed).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"
#include "status.h"

#define SHARD_MAGIC 20240520

static weft_status_t read_all(const char *path, unsigned char **buf_p, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return weft_error_quiet(WEFT_ERR_SYSTEM, "data %s: cannot open: %s", path,
                                strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "data %s: not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    unsigned char *buf = malloc(len ? len : 1);
    if (!buf || fread(buf, 1, len, f) != len) {
        free(buf);
        fclose(f);
        return weft_error_quiet(WEFT_ERR_SYSTEM, "data %s: cannot read %zu bytes", path, len);
    }
    fclose(f);
    *buf_p = buf;
    *len_p = len;
    return WEFT_OK;
}

weft_status_t train_tokens_read(train_tokens_t *out, const char *path)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    weft_status_t st = read_all(path, &buf, &len);
    if (st != WEFT_OK)
        return st;
    train_tokens_t t = { 0 };
    int32_t h[3] = { 0 };
    if (len >= 1024)
        memcpy(h, buf, sizeof(h));
    if (len >= 1024 && h[0] == SHARD_MAGIC) {
        if (h[1] != 1 || h[2] < 0 || (size_t)h[2] * 2 + 1024 != len) {
            free(buf);
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "data %s: shard header (version "
                                    "%d, %d tokens) disagrees with its %zu bytes", path,
                                    h[1], h[2], len);
        }
        t.n = (size_t)h[2];
        t.tokens = malloc((t.n ? t.n : 1) * sizeof(uint16_t));
        if (t.tokens)
            memcpy(t.tokens, buf + 1024, t.n * sizeof(uint16_t));
    } else {
        t.is_text = 1;
        t.n = len;
        t.tokens = malloc((t.n ? t.n : 1) * sizeof(uint16_t));
        for (size_t i = 0; t.tokens && i < len; i++)
            t.tokens[i] = buf[i];
    }
    free(buf);
    if (!t.tokens)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "data %s: out of memory", path);
    for (size_t i = 0; i < t.n; i++)
        if (t.tokens[i] > t.max_token)
            t.max_token = t.tokens[i];
    *out = t;
    return WEFT_OK;
}

void train_tokens_free(train_tokens_t *t)
{
    free(t->tokens);
    t->tokens = NULL;
    t->n = 0;
}

weft_status_t train_tokens_split(train_tokens_t *train, train_tokens_t *val, int T)
{
    size_t nval = train->n / 10;
    if (nval < (size_t)T + 1)
        nval = (size_t)T + 1;
    if (train->n < nval + (size_t)T + 1)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "data: %zu tokens are too few to "
                                "split into train and val windows of %d", train->n, T + 1);
    *val = *train;
    val->n = nval;
    val->tokens = malloc(nval * sizeof(uint16_t));
    if (!val->tokens)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "data: out of memory");
    memcpy(val->tokens, train->tokens + train->n - nval, nval * sizeof(uint16_t));
    train->n -= nval;
    return WEFT_OK;
}

static void shuffle_epoch(train_loader_t *ld)
{
    for (size_t i = 0; i < ld->nwin; i++)
        ld->order[i] = i;
    for (size_t i = ld->nwin - 1; i > 0; i--) {
        size_t j = (size_t)train_rng_below(&ld->rng, i + 1);
        size_t tmp = ld->order[i];
        ld->order[i] = ld->order[j];
        ld->order[j] = tmp;
    }
}

weft_status_t train_loader_init(train_loader_t *ld, const train_tokens_t *data, int B,
                                int T, int shuffle, uint64_t seed)
{
    memset(ld, 0, sizeof(*ld));
    if (data->n < (size_t)T + 1)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "data: %zu tokens, fewer than one "
                                "window of %d", data->n, T + 1);
    ld->data = data;
    ld->B = B;
    ld->T = T;
    ld->part_lo = 0;
    ld->part_n = B;
    ld->shuffle = shuffle;
    ld->nwin = (data->n - 1) / (size_t)T;
    ld->seed = seed;
    train_rng_seed(&ld->rng, seed, TRAIN_RNG_SHUFFLE);
    if (shuffle) {
        ld->order = malloc(ld->nwin * sizeof(size_t));
        if (!ld->order)
            return weft_error_quiet(WEFT_ERR_NO_MEMORY, "data: out of memory");
        shuffle_epoch(ld);
    }
    return WEFT_OK;
}

weft_status_t train_loader_seek(train_loader_t *ld, size_t epoch, size_t cursor)
{
    if (cursor > ld->nwin)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "data: window %zu of %zu", cursor,
                                ld->nwin);
    if (ld->shuffle) {   // replay the shuffles: the order is a function of the seed
        train_rng_seed(&ld->rng, ld->seed, TRAIN_RNG_SHUFFLE);
        shuffle_epoch(ld);
        for (size_t e = 0; e < epoch; e++)
            shuffle_epoch(ld);
    }
    ld->epoch = epoch;
    ld->cursor = cursor;
    return WEFT_OK;
}

void train_loader_reset(train_loader_t *ld)
{
    ld->cursor = 0;
}

weft_status_t train_loader_set_part(train_loader_t *ld, int lo, int n)
{
    if (lo < 0 || n < 1 || lo + n > ld->B)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "data: rows [%d, %d) of a batch of %d",
                                lo, lo + n, ld->B);
    ld->part_lo = lo;
    ld->part_n = n;
    return WEFT_OK;
}

void train_loader_next(train_loader_t *ld, int *inputs, int *targets)
{
    int T = ld->T;
    for (int b = 0; b < ld->B; b++) {
        if (ld->cursor == ld->nwin) {
            ld->cursor = 0;
            ld->epoch++;
            if (ld->shuffle)
                shuffle_epoch(ld);
        }
        size_t w = ld->shuffle ? ld->order[ld->cursor] : ld->cursor;
        ld->cursor++;
        int row = b - ld->part_lo;
        if (row < 0 || row >= ld->part_n)
            continue;   // another rank's row
        const uint16_t *src = ld->data->tokens + w * (size_t)T;
        for (int t = 0; t < T; t++) {
            inputs[row * T + t] = src[t];
            targets[row * T + t] = src[t + 1];
        }
    }
}

void train_loader_free(train_loader_t *ld)
{
    free(ld->order);
    ld->order = NULL;
}
