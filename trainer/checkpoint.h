/*
 * checkpoint.h - llm.c GPT-2 model files (magic 20240326, version 3, fp32).
 */
#ifndef WEFT_TRAIN_CHECKPOINT_H
#define WEFT_TRAIN_CHECKPOINT_H

#include "model.h"

/* Creates a model from FILE; on error nothing is created and weft_last_error() says why. */
weft_status_t train_checkpoint_read(train_gpt2_t **model_p, const char *path);
/* Writes the model's config and parameters (atomically, via FILE.tmp). */
weft_status_t train_checkpoint_write(const train_gpt2_t *model, const char *path);
/* fsync of a file or directory (a rename is durable once its directory is synced). */
weft_status_t train_fsync_path(const char *path);

#endif
