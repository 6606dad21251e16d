/*
 * checkpoint.c - llm.c's GPT-2 model file: read and write.
 *
 * Format (little-endian): int32 header[256] = { 20240326 magic, 3 version (fp32),
 * maxT, V, L, NH, C, Vp, 0... }, then every parameter as fp32 in llm.c's tensor order,
 * which the model's block-major units are a permutation of (train_layout_permute).
 * Version 5 (bf16 parameters) and anything else are refused as unsupported.
 *
 * Invariants: the reader validates the header (magic, version, sizes through
 * train_gpt2_cfg_check) and that the file holds exactly 256*4 + num_params*4 bytes before
 * allocating or reading the body, so a truncated, padded or lying file is an error with a
 * message, never a crash or a huge allocation. On error nothing is returned. The writer
 * writes to FILE.tmp, fsyncs it, renames it and fsyncs the directory, so a crash never
 * leaves a half-written checkpoint.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "status.h"
#include "train_int.h"

#define CKPT_MAGIC   20240326
#define CKPT_VERSION 3

weft_status_t train_checkpoint_read(train_gpt2_t **model_p, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: cannot open: %s", path,
                                strerror(errno));
    weft_status_t st = WEFT_OK;
    train_gpt2_t *m = NULL;
    float *body = NULL;
    int32_t h[256];
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || fread(h, sizeof(int32_t), 256, f) != 256) {
        st = weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: shorter than its "
                              "1024-byte header", path);
        goto out_close;
    }
    if (h[0] != CKPT_MAGIC) {
        st = weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: bad magic %d (expected "
                              "%d, an llm.c GPT-2 model file)", path, h[0], CKPT_MAGIC);
        goto out_close;
    }
    if (h[1] != CKPT_VERSION) {
        st = weft_error_quiet(h[1] == 5 ? WEFT_ERR_UNSUPPORTED : WEFT_ERR_INVALID_ARG,
                              "checkpoint %s: version %d not supported (only %d, fp32)",
                              path, h[1], CKPT_VERSION);
        goto out_close;
    }
    train_gpt2_cfg_t cfg = { .max_seq_len = h[2], .vocab_size = h[3], .num_layers = h[4],
                             .num_heads = h[5], .channels = h[6], .padded_vocab_size = h[7] };
    if (train_gpt2_cfg_check(&cfg) != WEFT_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", weft_last_error());
        st = weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: inconsistent header: %s",
                              path, why);
        goto out_close;
    }
    size_t sizes[TRAIN_NUM_PARAM_TENSORS];
    size_t n = train_param_sizes(sizes, &cfg);
    unsigned long long want = 1024ull + 4ull * n;
    if ((unsigned long long)sb.st_size != want) {
        st = weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: %lld bytes, but its "
                              "header (maxT %d V %d L %d NH %d C %d Vp %d) needs %llu%s",
                              path, (long long)sb.st_size, cfg.max_seq_len, cfg.vocab_size,
                              cfg.num_layers, cfg.num_heads, cfg.channels,
                              cfg.padded_vocab_size, want,
                              (unsigned long long)sb.st_size < want ? " (truncated)" : "");
        goto out_close;
    }
    st = train_gpt2_create(&m, &cfg);
    if (st != WEFT_OK)
        goto out_close;
    body = train_alloc_floats(n);
    if (!body) {
        st = weft_error_quiet(WEFT_ERR_NO_MEMORY, "checkpoint %s: out of memory", path);
        goto out_free;
    }
    if (fread(body, sizeof(float), n, f) != n) {
        st = weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: short read", path);
        goto out_free;
    }
    train_layout_permute(m->params_mem, body, &cfg, 0);   // llm.c order -> units
    free(body);
    fclose(f);
    *model_p = m;
    return WEFT_OK;
out_free:
    free(body);
    train_gpt2_destroy(m);
out_close:
    fclose(f);
    return st;
}

weft_status_t train_checkpoint_write(const train_gpt2_t *m, const char *path)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint path too long");
    int32_t h[256] = { 0 };
    h[0] = CKPT_MAGIC;
    h[1] = CKPT_VERSION;
    h[2] = m->cfg.max_seq_len;
    h[3] = m->cfg.vocab_size;
    h[4] = m->cfg.num_layers;
    h[5] = m->cfg.num_heads;
    h[6] = m->cfg.channels;
    h[7] = m->cfg.padded_vocab_size;
    if (!m->params_mem)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: the model holds no "
                                "parameters (sharded)", path);
    float *body = train_alloc_floats(m->num_params);
    if (!body)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "checkpoint %s: out of memory", path);
    train_layout_permute(body, m->params_mem, &m->cfg, 1);   // units -> llm.c order
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(body);
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: cannot create: %s", tmp,
                                strerror(errno));
    }
    int ok = fwrite(h, sizeof(int32_t), 256, f) == 256 &&
             fwrite(body, sizeof(float), m->num_params, f) == m->num_params &&
             fflush(f) == 0 && fsync(fileno(f)) == 0;   // the bytes before the name
    free(body);
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: write failed: %s", path,
                                strerror(e));
    }
    /* the rename itself: the directory's entry */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    return train_fsync_path(dir);
}

weft_status_t train_fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: fsync failed: %s", path,
                                strerror(e));
    }
    close(fd);
    return WEFT_OK;
}
