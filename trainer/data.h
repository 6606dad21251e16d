/*
 * data.h - training data: llm.c token shards or raw text bytes, and the batch loader.
 */
#ifndef WEFT_TRAIN_DATA_H
#define WEFT_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h"
#include "weft.h"

/* A token sequence read whole into memory. */
typedef struct {
    uint16_t *tokens;    // (n)
    size_t n;
    int is_text;         // 1: raw bytes (vocabulary 256); 0: an llm.c shard
    int max_token;       // the largest token id present
} train_tokens_t;

/* Reads FILE: an llm.c shard (int32 header[256] = {20240520, 1, ntok}, then ntok uint16)
 * if the magic matches, else raw bytes. A shard whose size disagrees with its header is
 * an error. */
weft_status_t train_tokens_read(train_tokens_t *out, const char *path);
void train_tokens_free(train_tokens_t *t);
/* Splits off the last 10% (at least T+1 tokens) of train into val (a copy). */
weft_status_t train_tokens_split(train_tokens_t *train, train_tokens_t *val, int T);

/* Batches of B windows of T+1 consecutive tokens (inputs = first T, targets = last T).
 * The data is cut into nwin = (n-1)/T non-overlapping windows. In order: windows
 * 0, 1, 2, ... wrapping around. Shuffled: each epoch visits every window once in a
 * Fisher-Yates order drawn from the seed, so the stream is a function of the seed. */
typedef struct {
    const train_tokens_t *data;
    int B, T, shuffle;
    int part_lo, part_n;   // the rows of each batch this rank takes (all by default)
    size_t nwin, cursor, epoch;
    size_t *order;       // (nwin) when shuffled
    train_rng_t rng;
    uint64_t seed;
} train_loader_t;

weft_status_t train_loader_init(train_loader_t *ld, const train_tokens_t *data, int B,
                                int T, int shuffle, uint64_t seed);
/* Data parallel: each batch of B windows is a global batch, of which this rank takes
 * rows [lo, lo + n) (0 <= lo, n >= 1, lo + n <= B); the stream of windows is the same on
 * every rank. INVALID_ARG (nothing changed) when the rows do not fit. */
weft_status_t train_loader_set_part(train_loader_t *ld, int lo, int n);
/* inputs, targets: (part_n, T), the rows of the next batch this rank takes */
void train_loader_next(train_loader_t *ld, int *inputs, int *targets);
/* Where the stream is: epochs completed and the next window of this epoch. */
static inline void train_loader_tell(const train_loader_t *ld, size_t *epoch, size_t *cursor)
{
    *epoch = ld->epoch;
    *cursor = ld->cursor;
}
/* Back to where train_loader_tell was (a resumed run): the stream continues exactly as
 * it would have. INVALID_ARG (nothing changed) when cursor is past the data. */
weft_status_t train_loader_seek(train_loader_t *ld, size_t epoch, size_t cursor);
/* Back to the first batch (val evaluation restarts at the same windows each time). */
void train_loader_reset(train_loader_t *ld);
void train_loader_free(train_loader_t *ld);

#endif
