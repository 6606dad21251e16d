/*
 * ckpt_dir.h - weft-train's training checkpoints: a directory per step, a manifest,
 * resume at any world size and strategy.
 */
#ifndef WEFT_TRAIN_CKPT_DIR_H
#define WEFT_TRAIN_CKPT_DIR_H

#include <stdint.h>
#include <stdio.h>

#include "dist.h"
#include "model.h"
#include "train.h"

/* Where a run is: the last completed step, and the data stream's position after it.
 * data_tokens and data_sample say which data that position is in (the train set's token
 * count and a sample of its tokens; 0 and 0 without data): the caller sets them before
 * a save or a resume, which refuses another data set. A resume whose learning-rate
 * schedule differs from the saved run's (it goes on, from the new one) says so in
 * sched_note ("" when the same). */
typedef struct {
    uint64_t step, tokens;
    size_t epoch, cursor;
    uint64_t data_tokens, data_sample;
    char sched_note[256];
} train_progress_t;

/* Collective: writes DIR/step-NNNNNNNN (every writing rank its file, rank 0 the
 * manifest), then points DIR/latest at it, then keeps the newest `keep` (0: all) up to
 * this step. On error the previous checkpoint and `latest` are untouched. */
weft_status_t train_ckpt_save(const char *dir, int keep, train_gpt2_t *m, train_dist_t *d,
                              const train_opts_t *o, const train_progress_t *pr,
                              uint64_t *bytes_p);
/* Collective: loads DIR/latest into the model (one process) or shard/ (several ranks),
 * whatever world size and strategy wrote it; fills pr. The manifest (its own hash) and
 * every file (size, header, hash) are checked, and the run's data stream (o's seed and
 * shuffling, the model's seq, pr's data_tokens and data_sample) against the one saved,
 * before anything is loaded; on a failed check nothing changed. */
weft_status_t train_ckpt_resume(const char *dir, train_gpt2_t *m, train_dist_t *d,
                                const train_opts_t *o, train_progress_t *pr, char *name,
                                size_t name_cap);

/* One process: the model of DIR/latest (any world size and strategy) as an llm.c GPT-2
 * checkpoint at path (what llm.c's train_gpt2.c loads). */
weft_status_t train_ckpt_export(const char *dir, const char *path);
/* At start, where checkpoints will be saved: dir and its missing parents are made, and
 * it must be a directory this process can write (else a clear error now, not a failed
 * save at step N). */
weft_status_t train_ckpt_prepare(const char *dir);

#endif
