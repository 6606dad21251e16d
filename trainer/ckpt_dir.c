/*
 * ckpt_dir.c - training checkpoints as directories: DIR/step-NNNNNNNN/{manifest,
 * rank-KKKKK.bin}, and DIR/latest naming the newest complete one.
 *
 * Save protocol (every step of it fsync'ed before the next makes it visible): rank 0
 * makes DIR/.step-N.tmp; every writing rank (shard/ckpt.h: the first shard group, or
 * the one process) writes its file there; the ranks share each file's size and hash;
 * rank 0 writes the manifest (format, model, strategy, layout, progress, every file's
 * size and hash, a hash of the manifest's own text, then "end"), renames the directory
 * to step-N (an earlier copy of step-N stays whole until then: install_dir), then writes
 * `latest`, then prunes (older steps beyond --ckpt-keep; never `latest`'s). A crash at
 * any point leaves `latest` on a complete checkpoint; a .tmp directory is ignored and
 * removed by the next save.
 *
 * Resume reads `latest`, the manifest (refused when its hash does not match: an edited
 * data position would otherwise resume silently elsewhere), checks the model and the
 * data stream (seq, seed, shuffling) against it and every file against the manifest
 * (size, header, hash; each rank a share of the files) before any rank loads anything; shard/ then reads
 * the ranges this rank needs from whichever files hold them, so any world size and any
 * strategy loads any checkpoint. Every collective step ends with all ranks sharing their
 * status, so all fail together, with the failing rank's message.
 */
#define _GNU_SOURCE /* renameat2 */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "checkpoint.h"
#include "ckpt.h"
#include "ckpt_dir.h"
#include "status.h"
#include "train_int.h"
#include "util.h"

/* 2: a manifest_hash line (FNV-1a of everything before it) ahead of "end", nothing else
 * after it, and every progress and data-stream line required; 1 (weft before 2026-11-26,
 * without that protection) is still read */
#define MANIFEST_FORMAT 2

/* ---- every rank's status, shared ---- */

typedef struct {
    int32_t status, writer;
    uint64_t hash, bytes;
    char msg[240];
} rank_report_t;

/* Collective: all ranks' reports into all (nranks entries); returns this rank's failure,
 * else the first other rank's (naming it), else WEFT_OK. */
static weft_status_t share(train_dist_t *d, weft_status_t st, rank_report_t *mine,
                           rank_report_t *all)
{
    mine->status = st;
    if (st != WEFT_OK)
        snprintf(mine->msg, sizeof(mine->msg), "%s", weft_last_error());
    if (!d->world) {
        all[0] = *mine;
    } else {
        RETURN_IF_ERR(weft_allgather(mine, all, sizeof(*mine), WEFT_UINT8, d->world));
    }
    int n = d->world ? d->nranks : 1;
    if (st != WEFT_OK)   // this rank's own failure, its message already set
        return weft_error_quiet(st, "%s", mine->msg);
    for (int r = 0; r < n; r++)
        if (all[r].status != WEFT_OK)
            return weft_error_quiet(all[r].status, "rank %d failed: %s", r, all[r].msg);
    return WEFT_OK;
}

/* ---- files and directories ---- */

/* path's content becomes text, or stays what it was: tmp, fsync, rename, fsync dir */
static weft_status_t write_text(const char *dir, const char *name, const char *text)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: cannot create: %s", tmp,
                                strerror(errno));
    int ok = fputs(text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: write failed: %s", path,
                                strerror(e));
    }
    return train_fsync_path(dir);
}

/* removes a checkpoint directory (its files, then itself) */
static void remove_dir(const char *path)
{
    DIR *dh = opendir(path);
    if (!dh)
        return;
    struct dirent *e;
    char p[4400];
    while ((e = readdir(dh)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
        unlink(p);
    }
    closedir(dh);
    rmdir(path);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* After `cur` (step-N) became `latest`: removes what earlier saves left unfinished
 * (.step-*.tmp, and .step-*.old from a replaced copy), and with keep > 0 keeps the newest
 * `keep` step directories up to cur, cur among them. Directories above cur (a run that
 * crashed after saving them, before `latest` named them, or another run's) are left
 * alone: nothing names them, and a save of that step later replaces its copy. */
static void prune(const char *dir, int keep, const char *cur)
{
    DIR *dh = opendir(dir);
    if (!dh)
        return;
    char *names[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dh)) != NULL) {
        size_t len = strlen(e->d_name);
        if (!strncmp(e->d_name, ".step-", 6) && len > 4 &&
            (!strcmp(e->d_name + len - 4, ".tmp") || !strcmp(e->d_name + len - 4, ".old"))) {
            char p[4200];
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            remove_dir(p);
        } else if (n < 4096 && !strncmp(e->d_name, "step-", 5) && len == 13 &&
                   strcmp(e->d_name, cur) <= 0 && (names[n] = strdup(e->d_name)) != NULL) {
            n++;    /* out of memory: that one is kept (cmp_str takes no NULL) */
        }
    }
    closedir(dh);
    qsort(names, (size_t)n, sizeof(char *), cmp_str);
    for (int i = 0; i < n; i++) {
        if (keep > 0 && i < n - keep) {
            char p[4200];
            snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
            remove_dir(p);
        }
        free(names[i]);
    }
}

/* tmp becomes final. A copy of final already there (an earlier run's save of this
 * step, perhaps the one `latest` names) stays whole until the new one has its name:
 * the two are swapped in one step (RENAME_EXCHANGE) where the filesystem can, else the
 * old one is renamed aside first (`*old_p`, removed once `latest` is written; a crash
 * between the two renames leaves it there). */
static weft_status_t install_dir(const char *tmp, const char *final, char *old, size_t cap,
                                 int *old_p)
{
    *old_p = 0;
    struct stat sb;
    if (stat(final, &sb) == 0) {
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            snprintf(old, cap, "%s", tmp);       // the old copy now lies at tmp
            *old_p = 1;
            return WEFT_OK;
        }
        snprintf(old, cap, "%s.old", tmp);
        remove_dir(old);
        if (rename(final, old) != 0)
            return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: cannot move the "
                                    "earlier copy aside: %s", final, strerror(errno));
        *old_p = 1;
    }
    if (rename(tmp, final) != 0) {
        int e = errno;
        if (*old_p && rename(old, final) == 0)      // the earlier copy goes back
            *old_p = 0;
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: rename failed: %s", final,
                                strerror(e));
    }
    return WEFT_OK;
}

/* ---- the manifest ---- */

static size_t put(char *buf, size_t cap, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t put(char *buf, size_t cap, size_t at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = at < cap ? vsnprintf(buf + at, cap - at, fmt, ap) : 0;
    va_end(ap);
    return at + (n > 0 ? (size_t)n : 0);
}

/* llm.c tensor t's shape for one layer, "(rows, cols)" or "(n)" */
static const char *tensor_shape(int t, const train_gpt2_cfg_t *c, size_t len)
{
    static __thread char buf[48];
    int C = c->channels;
    int rows = t == 0 ? c->padded_vocab_size : t == 1 ? c->max_seq_len : t == 4 ? 3 * C :
               t == 6 || t == 12 ? C : t == 10 ? 4 * C : 0;
    if (rows)
        snprintf(buf, sizeof(buf), "(%d, %zu)", rows, len / (size_t)rows);
    else
        snprintf(buf, sizeof(buf), "(%zu)", len);
    return buf;
}

static char *manifest_text(const train_gpt2_t *m, const train_dist_t *d,
                           const train_opts_t *o, const train_progress_t *pr,
                           const ckpt_layout_t *l, const rank_report_t *rep)
{
    size_t cap = 4096 + (size_t)l->nunits * (64 + 16 * 96) + (size_t)l->G * 96, at = 0;
    char *b = malloc(cap);
    if (!b)
        return NULL;
    const train_gpt2_cfg_t *c = &m->cfg;
    at = put(b, cap, at, "weft-checkpoint %d\nstep %llu\ntokens %llu\n", MANIFEST_FORMAT,
             (unsigned long long)pr->step, (unsigned long long)pr->tokens);
    at = put(b, cap, at, "loader_epoch %zu\nloader_cursor %zu\nseed %llu\nshuffle %d\n",
             pr->epoch, pr->cursor, (unsigned long long)o->seed, o->shuffle);
    at = put(b, cap, at, "layers %d\nchannels %d\nheads %d\nmax_seq_len %d\nvocab %d\n"
             "padded_vocab %d\n", c->num_layers, c->channels, c->num_heads, c->max_seq_len,
             c->vocab_size, c->padded_vocab_size);
    at = put(b, cap, at, "world %d\nstrategy %s\ngroup %d\nglobal_batch %d\nseq %d\n"
             "dtype fp32 (parameters, AdamW m and v)\n", d->world ? d->nranks : 1,
             d->sh ? shard_strategy_name(o->shard < 0 ? SHARD_NONE : (shard_strategy_t)o->shard)
                   : "single", l->G, o->B * (d->world ? d->nranks : 1), m->T);
    at = put(b, cap, at, "lr_schedule %s lr %.9g warmup %d steps %d (position: step)\n"
             "data_rng seed %llu, shuffles replayed over loader_epoch\n",
             o->schedule == TRAIN_SCHED_COSINE ? "cosine" : "constant", o->lr, o->warmup,
             o->steps, (unsigned long long)o->seed);
    at = put(b, cap, at, "data tokens %llu sample %016llx\n",
             (unsigned long long)pr->data_tokens, (unsigned long long)pr->data_sample);
    at = put(b, cap, at, "units %d\n", l->nunits);
    for (int u = 0; u < l->nunits; u++)
        at = put(b, cap, at, "unit %d %zu %zu\n", u, l->len[u], l->sn[u]);
    // every tensor: its llm.c name, layer, global offset (block-major) and floats
    for (int u = 0; u < l->nunits; u++) {
        train_seg_t segs[TRAIN_BLOCK_TENSORS];
        int ns = train_unit_segs(c, u, segs), L = c->num_layers;
        for (int j = 0; j < ns; j++) {
            int t = u == TRAIN_UNIT_EMB ? j : u == TRAIN_UNIT_LNF(L) ? 14 + j : 2 + j;
            at = put(b, cap, at, "tensor %s layer %d offset %zu shape %s\n",
                     train_param_names[t], u == TRAIN_UNIT_EMB || u == TRAIN_UNIT_LNF(L) ?
                     -1 : u - 1, train_unit_off(c, u) + segs[j].off,
                     tensor_shape(t, c, segs[j].len));
        }
    }
    at = put(b, cap, at, "files %d\n", l->G);
    for (int k = 0; k < l->G; k++) {
        char name[64];
        ckpt_file_name(name, sizeof(name), k);
        at = put(b, cap, at, "file %d %s %llu %016llx\n", k, name,
                 (unsigned long long)rep[k].bytes, (unsigned long long)rep[k].hash);
    }
    if (at < cap)
        at = put(b, cap, at, "manifest_hash %016llx\n",
                 (unsigned long long)hash_bytes(HASH_SEED, b, at));
    at = put(b, cap, at, "end\n");
    if (at >= cap) {
        free(b);
        return NULL;
    }
    return b;
}

typedef struct {
    int format, G, nunits, files, ended;
    long long step, tokens, epoch, cursor;
    long long seq, shuffle;
    unsigned long long seed;
    unsigned long long data_tokens, data_sample;    /* MF_DATA: since 2026-11-27 */
    char sched[16];             /* MF_SCHED: the lr_schedule line's */
    float lr;
    int warmup, steps;
    int have;                   /* MF_* bits: the lines format 2 requires */
    int layers, channels, heads, maxT, vocab, Vp;
    size_t *len, *sn;
    uint64_t *bytes, *hash;
} manifest_t;

static void manifest_free(manifest_t *mf)
{
    free(mf->len);
    free(mf->sn);
    free(mf->bytes);
    free(mf->hash);
    mf->len = mf->sn = NULL;
    mf->bytes = mf->hash = NULL;
}

enum { MF_STEP = 1, MF_TOKENS = 2, MF_EPOCH = 4, MF_CURSOR = 8, MF_SEQ = 16, MF_SEED = 32,
       MF_SHUFFLE = 64, MF_HASH_OK = 128, MF_ALL = 255,
       MF_DATA = 256, MF_SCHED = 512 };   /* optional: older manifests lack them */

static weft_status_t manifest_read(const char *path, manifest_t *mf)
{
    memset(mf, 0, sizeof(*mf));
    FILE *f = fopen(path, "r");
    if (!f)
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: cannot open: %s", path,
                                strerror(errno));
    char line[512];
    weft_status_t st = WEFT_OK;
    uint64_t sum = HASH_SEED;       /* of the text before the manifest_hash line */
    int hashed = 0;
    while (st == WEFT_OK && fgets(line, sizeof(line), f)) {
        long long v;
        int a, k;
        size_t x, y;
        unsigned long long bb, hh;
        char name[64];
        if (hashed && strcmp(line, "end\n") != 0) {
            mf->have &= ~MF_HASH_OK;    /* nothing but "end" may follow the hash */
            continue;
        }
        if (sscanf(line, "manifest_hash %llx", &hh) == 1) {
            hashed = 1;
            if (hh == sum)
                mf->have |= MF_HASH_OK;
            continue;
        }
        sum = hash_bytes(sum, line, strlen(line));
        if (sscanf(line, "weft-checkpoint %d", &a) == 1) mf->format = a;
        else if (sscanf(line, "step %lld", &v) == 1) mf->step = v, mf->have |= MF_STEP;
        else if (sscanf(line, "tokens %lld", &v) == 1) mf->tokens = v, mf->have |= MF_TOKENS;
        else if (sscanf(line, "loader_epoch %lld", &v) == 1) mf->epoch = v, mf->have |= MF_EPOCH;
        else if (sscanf(line, "loader_cursor %lld", &v) == 1)
            mf->cursor = v, mf->have |= MF_CURSOR;
        else if (sscanf(line, "seq %lld", &v) == 1) mf->seq = v, mf->have |= MF_SEQ;
        else if (sscanf(line, "seed %llu", &bb) == 1) mf->seed = bb, mf->have |= MF_SEED;
        else if (sscanf(line, "shuffle %lld", &v) == 1) mf->shuffle = v, mf->have |= MF_SHUFFLE;
        else if (sscanf(line, "data tokens %llu sample %llx", &bb, &hh) == 2)
            mf->data_tokens = bb, mf->data_sample = hh, mf->have |= MF_DATA;
        else if (sscanf(line, "lr_schedule %15s lr %g warmup %d steps %d", mf->sched,
                        &mf->lr, &mf->warmup, &mf->steps) == 4)
            mf->have |= MF_SCHED;
        else if (sscanf(line, "layers %d", &a) == 1) mf->layers = a;
        else if (sscanf(line, "channels %d", &a) == 1) mf->channels = a;
        else if (sscanf(line, "heads %d", &a) == 1) mf->heads = a;
        else if (sscanf(line, "max_seq_len %d", &a) == 1) mf->maxT = a;
        else if (sscanf(line, "vocab %d", &a) == 1) mf->vocab = a;
        else if (sscanf(line, "padded_vocab %d", &a) == 1) mf->Vp = a;
        else if (sscanf(line, "group %d", &a) == 1) mf->G = a;
        else if (sscanf(line, "units %d", &a) == 1 && a > 0 && a <= 4098 && !mf->len) {
            mf->nunits = a;
            mf->len = calloc((size_t)a, sizeof(size_t));
            mf->sn = calloc((size_t)a, sizeof(size_t));
        } else if (sscanf(line, "unit %d %zu %zu", &k, &x, &y) == 3 && mf->len && k >= 0 &&
                   k < mf->nunits) {
            mf->len[k] = x;
            mf->sn[k] = y;
        } else if (sscanf(line, "files %d", &a) == 1 && a > 0 && a <= 65536 && !mf->bytes) {
            mf->files = a;
            mf->bytes = calloc((size_t)a, sizeof(uint64_t));
            mf->hash = calloc((size_t)a, sizeof(uint64_t));
        } else if (sscanf(line, "file %d %63s %llu %llx", &k, name, &bb, &hh) == 4 &&
                   mf->bytes && k >= 0 && k < mf->files) {
            mf->bytes[k] = bb;
            mf->hash[k] = hh;
        } else if (!strcmp(line, "end\n")) {
            mf->ended = 1;
        }
        if ((mf->nunits && !mf->len) || (mf->files && !mf->bytes))
            st = weft_error_quiet(WEFT_ERR_NO_MEMORY, "out of memory");
    }
    fclose(f);
    if (st == WEFT_OK && (mf->format < 1 || mf->format > MANIFEST_FORMAT))
        st = weft_error_quiet(mf->format ? WEFT_ERR_UNSUPPORTED : WEFT_ERR_INVALID_ARG,
                              "checkpoint %s: format %d, this weft reads 1 to %d", path,
                              mf->format, MANIFEST_FORMAT);
    else if (st == WEFT_OK && (mf->format >= 2 || hashed) && !(mf->have & MF_HASH_OK))
        st = weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: the manifest's %s "
                              "(edited or corrupted)", path, hashed ? "text does not match "
                              "its manifest_hash" : "manifest_hash line is missing");
    else if (st == WEFT_OK && mf->format >= 2 && (mf->have & MF_ALL) != MF_ALL)
        st = weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: incomplete manifest (a "
                              "step, tokens, loader, seq, seed or shuffle line is missing)",
                              path);
    else if (st == WEFT_OK && (!mf->ended || !mf->len || !mf->bytes || mf->G != mf->files))
        st = weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: incomplete manifest "
                              "(no end line, units or files)", path);
    if (st != WEFT_OK)
        manifest_free(mf);
    return st;
}

/* ---- save ---- */

/* Fault injection for tests/test_ckpt_faults.sh: WEFT_TEST_CKPT_KILL=STEP:RANK makes that
 * rank kill itself (SIGKILL) in the middle of the save of STEP, its file written and the
 * checkpoint not yet complete. */
static void kill_point(int rank, uint64_t step)
{
    const char *k = getenv("WEFT_TEST_CKPT_KILL");
    unsigned long long ks;
    int kr;
    if (k && sscanf(k, "%llu:%d", &ks, &kr) == 2 && ks == step && kr == rank)
        raise(SIGKILL);
}

weft_status_t train_ckpt_save(const char *dir, int keep, train_gpt2_t *m, train_dist_t *d,
                              const train_opts_t *o, const train_progress_t *pr,
                              uint64_t *bytes_p)
{
    int n = d->world ? d->nranks : 1, rank = d->world ? d->rank : 0;
    rank_report_t mine = { 0 }, *all = calloc((size_t)n, sizeof(*all));
    size_t nu = (size_t)m->nunits;
    size_t *len = calloc(nu, sizeof(size_t)), *sn = calloc(nu, sizeof(size_t));
    const float **pp = calloc(nu, sizeof(float *)), **mm = calloc(nu, sizeof(float *));
    const float **vv = calloc(nu, sizeof(float *));
    char tmp[4096], final[4096], name[64];
    weft_status_t st = WEFT_OK;
    if (!all || !len || !sn || !pp || !mm || !vv) {
        st = weft_error_quiet(WEFT_ERR_NO_MEMORY, "checkpoint: out of memory");
        goto out;
    }
    snprintf(name, sizeof(name), "step-%08llu", (unsigned long long)pr->step);
    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
    snprintf(final, sizeof(final), "%s/%s", dir, name);
    if (rank == 0) {
        mkdir(dir, 0755);
        remove_dir(tmp);
        if (mkdir(tmp, 0755) != 0)
            st = weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: cannot create: %s", tmp,
                                  strerror(errno));
    }
    GOTO_IF_ERR(share(d, st, &mine, all), st, out);
    // this rank's file
    ckpt_layout_t l;
    ckpt_rank_data_t data;
    if (d->sh) {
        shard_ckpt_layout(d->sh, &l, len, sn);
        mine.writer = shard_ckpt_writer(d->sh);
        if (mine.writer)   // device state comes down to the host here
            st = shard_ckpt_data(d->sh, &data, pp, mm, vv, sn);
    } else {   // one process: whole units, the moments zero before the first step
        if (!m->m_mem && !(m->m_mem = train_alloc_floats(m->num_params)))
            st = weft_error_quiet(WEFT_ERR_NO_MEMORY, "checkpoint: out of memory");
        if (!m->v_mem && !(m->v_mem = train_alloc_floats(m->num_params)))
            st = weft_error_quiet(WEFT_ERR_NO_MEMORY, "checkpoint: out of memory");
        for (int u = 0; st == WEFT_OK && u < m->nunits; u++) {
            size_t off = train_unit_off(&m->cfg, u);
            len[u] = sn[u] = train_unit_len(&m->cfg, u);
            pp[u] = m->params_mem + off;
            mm[u] = m->m_mem + off;
            vv[u] = m->v_mem + off;
        }
        l = (ckpt_layout_t){ 1, m->nunits, len, sn };
        data = (ckpt_rank_data_t){ m->nunits, pp, mm, vv, sn };
        mine.writer = 1;
    }
    if (st == WEFT_OK && mine.writer) {
        char path[4200], fname[64];
        ckpt_file_name(fname, sizeof(fname), rank);
        snprintf(path, sizeof(path), "%s/%s", tmp, fname);
        st = ckpt_file_write(path, rank, pr->step, &data, &mine.hash, &mine.bytes);
    }
    kill_point(rank, pr->step);
    st = share(d, st, &mine, all);
    if (st != WEFT_OK) {   // a rank could not write (a full disk): nothing of it stays
        if (rank == 0)
            remove_dir(tmp);
        goto out;
    }
    if (rank == 0) {
        char *text = manifest_text(m, d, o, pr, &l, all);
        st = text ? write_text(tmp, "manifest", text) :
                    weft_error_quiet(WEFT_ERR_NO_MEMORY, "checkpoint: out of memory");
        free(text);
        char old[4200];
        int have_old = 0;
        if (st == WEFT_OK)
            st = install_dir(tmp, final, old, sizeof(old), &have_old);
        if (st == WEFT_OK)
            st = train_fsync_path(dir);
        if (st == WEFT_OK) {
            char text2[80];
            snprintf(text2, sizeof(text2), "%s\n", name);
            st = write_text(dir, "latest", text2);
        }
        if (st == WEFT_OK && have_old)
            remove_dir(old);
        if (st == WEFT_OK)
            prune(dir, keep, name);
        else if (!have_old)
            remove_dir(tmp);
    }
    st = share(d, st, &mine, all);
    for (int r = 0; st == WEFT_OK && bytes_p && r < n; r++)
        *bytes_p += all[r].bytes;
out:
    free(all);
    free(len);
    free(sn);
    free(pp);
    free(mm);
    free(vv);
    return st;
}

/* ---- resume ---- */

static weft_status_t check_model(const manifest_t *mf, const train_gpt2_t *m, const char *path)
{
    const train_gpt2_cfg_t *c = &m->cfg;
    struct { const char *what; long long ck, mine; } f[] = {
        { "layers", mf->layers, c->num_layers }, { "channels", mf->channels, c->channels },
        { "heads", mf->heads, c->num_heads }, { "max_seq_len", mf->maxT, c->max_seq_len },
        { "vocab", mf->vocab, c->vocab_size }, { "padded_vocab", mf->Vp, c->padded_vocab_size },
        { "units", mf->nunits, m->nunits },
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (f[i].ck != f[i].mine)
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: a model with %s "
                                    "%lld, this run's has %lld", path, f[i].what, f[i].ck,
                                    f[i].mine);
    for (int u = 0; u < m->nunits; u++)
        if (mf->len[u] != train_unit_len(&m->cfg, u))
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: unit %d has %zu "
                                    "floats, this model's %zu", path, u, mf->len[u],
                                    train_unit_len(&m->cfg, u));
    ckpt_layout_t l = { mf->G, mf->nunits, mf->len, mf->sn };
    return ckpt_layout_check(&l, path);
}

/* one process: whole units into fresh p, m, v, swapped in when all reads worked */
static weft_status_t load_whole(train_gpt2_t *m, const char *dir, const ckpt_layout_t *l)
{
    float *b[3] = { train_alloc_floats(m->num_params), train_alloc_floats(m->num_params),
                    train_alloc_floats(m->num_params) };
    weft_status_t st = (b[0] && b[1] && b[2]) ? WEFT_OK :
                       weft_error_quiet(WEFT_ERR_NO_MEMORY, "checkpoint: out of memory");
    for (int u = 0; st == WEFT_OK && u < m->nunits; u++)
        for (int w = 0; st == WEFT_OK && w < 3; w++)
            st = ckpt_read_range(dir, l, u, w, 0, l->len[u],
                                 b[w] + train_unit_off(&m->cfg, u));
    if (st == WEFT_OK) {
        memcpy(m->params_mem, b[0], m->num_params * sizeof(float));
        free(m->m_mem);
        free(m->v_mem);
        m->m_mem = b[1];
        m->v_mem = b[2];
        b[1] = b[2] = NULL;
    }
    free(b[0]);
    free(b[1]);
    free(b[2]);
    return st;
}

/* Reads latest and its manifest, checks the model, and checks this rank's share of the
 * files (rank r: files k with k % nranks == r; all of them together cover every file
 * once, in parallel) against the manifest: size, header, hash. */
static weft_status_t resume_check(const char *dir, train_gpt2_t *m, int rank, int nranks,
                                  manifest_t *mf, char *name, size_t name_cap,
                                  char *sdir, size_t sdir_cap)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/latest", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: cannot open: %s (no "
                                "checkpoint saved there yet?)", path, strerror(errno));
    int got = fgets(name, (int)name_cap, f) != NULL;
    fclose(f);
    name[strcspn(name, "\n")] = '\0';
    if (!got || strncmp(name, "step-", 5) != 0 || strchr(name, '/'))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: does not name a "
                                "step directory", path);
    snprintf(sdir, sdir_cap, "%s/%s", dir, name);
    snprintf(path, sizeof(path), "%s/manifest", sdir);
    RETURN_IF_ERR(manifest_read(path, mf));
    weft_status_t st = check_model(mf, m, path);
    ckpt_layout_t l = { mf->G, mf->nunits, mf->len, mf->sn };
    for (int k = rank; st == WEFT_OK && k < mf->G; k += nranks) {
        char fname[64], fpath[4200];
        uint64_t h, b;
        ckpt_file_name(fname, sizeof(fname), k);
        snprintf(fpath, sizeof(fpath), "%s/%s", sdir, fname);
        st = ckpt_file_check(fpath, &l, k, (uint64_t)mf->step);
        if (st == WEFT_OK)
            st = ckpt_file_hash(fpath, &h, &b);
        if (st == WEFT_OK && (h != mf->hash[k] || b != mf->bytes[k]))
            st = weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: %llu bytes, hash "
                                  "%016llx; the manifest says %llu bytes, %016llx (corrupted)",
                                  fpath, (unsigned long long)b, (unsigned long long)h,
                                  (unsigned long long)mf->bytes[k],
                                  (unsigned long long)mf->hash[k]);
    }
    return st;
}

static weft_status_t resume_load(train_gpt2_t *m, train_dist_t *d, const manifest_t *mf,
                                 const char *sdir)
{
    ckpt_layout_t l = { mf->G, mf->nunits, mf->len, mf->sn };
    return d->sh ? shard_ckpt_load(d->sh, sdir, &l) : load_whole(m, sdir, &l);
}

/* The data stream's position carries over only to the same stream: the loader's cursor
 * counts windows of seq tokens of the same data, and a shuffled order is a function of
 * the seed and of how many windows there are. */
static weft_status_t check_stream(const manifest_t *mf, const train_gpt2_t *m,
                                  const train_opts_t *o, const train_progress_t *pr,
                                  const char *sdir)
{
    if (!(mf->have & MF_SEQ))
        return WEFT_OK;         /* format 1 without it: as before */
    if (mf->seq != m->T)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: trained with --seq "
                                "%lld, this run has %d: its data position (window %lld of "
                                "epoch %lld) means other tokens here", sdir, mf->seq, m->T,
                                mf->cursor, mf->epoch);
    if ((mf->have & MF_SHUFFLE) && (mf->shuffle != 0) != (o->shuffle != 0))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: trained %s, this run "
                                "%s: the data order would change", sdir, mf->shuffle ?
                                "with shuffling" : "with --no-shuffle", o->shuffle ?
                                "shuffles" : "has --no-shuffle");
    if (o->shuffle && (mf->have & MF_SEED) && mf->seed != o->seed)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: trained with --seed "
                                "%llu, this run has %llu: the shuffled data order would "
                                "change", sdir, mf->seed, (unsigned long long)o->seed);
    if ((mf->have & MF_DATA) && (mf->data_tokens != pr->data_tokens ||
                                 mf->data_sample != pr->data_sample))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: trained on %llu train "
                                "tokens (sample %016llx), this run has %llu (sample "
                                "%016llx): its data position (window %lld of epoch %lld) "
                                "means other tokens here; resume with the same --data and "
                                "--val (without --val, the last tenth of --data is held "
                                "out)", sdir, mf->data_tokens, mf->data_sample,
                                (unsigned long long)pr->data_tokens,
                                (unsigned long long)pr->data_sample, mf->cursor, mf->epoch);
    return WEFT_OK;
}

/* The saved run's learning-rate schedule against this one's: a resume may change it on
 * purpose (a longer run), so it is said, not refused. */
static void sched_note(const manifest_t *mf, const train_opts_t *o, char *note, size_t cap)
{
    const char *now = o->schedule == TRAIN_SCHED_COSINE ? "cosine" : "constant";
    note[0] = '\0';
    /* (manifests before 2026-11-27 wrote the lr with 6 digits: equal within those) */
    int same_lr = fabsf(mf->lr - o->lr) <= 1e-5f * fabsf(o->lr);
    if (!(mf->have & MF_SCHED) || (!strcmp(mf->sched, now) && same_lr &&
                                    mf->warmup == o->warmup &&
                                    (o->schedule != TRAIN_SCHED_COSINE ||
                                     mf->steps == o->steps)))
        return;
    snprintf(note, cap, "the checkpoint's run had --schedule %s --lr %g --warmup %d "
             "--steps %d, this one --schedule %s --lr %g --warmup %d --steps %d: the "
             "learning rate follows this run's schedule from step %lld", mf->sched,
             (double)mf->lr, mf->warmup, mf->steps, now, (double)o->lr, o->warmup, o->steps,
             mf->step + 1);
}

weft_status_t train_ckpt_resume(const char *dir, train_gpt2_t *m, train_dist_t *d,
                                const train_opts_t *o, train_progress_t *pr, char *name,
                                size_t name_cap)
{
    manifest_t mf = { 0 };
    int n = d->world ? d->nranks : 1;
    rank_report_t mine = { 0 }, *all = calloc((size_t)n, sizeof(*all));
    if (!all)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "checkpoint: out of memory");
    char sdir[4096];
    int rank = d->world ? d->rank : 0;
    // every file checked (by some rank) before any rank loads anything
    weft_status_t st = resume_check(dir, m, rank, n, &mf, name, name_cap, sdir, sizeof(sdir));
    if (st == WEFT_OK)
        st = check_stream(&mf, m, o, pr, sdir);
    st = share(d, st, &mine, all);
    if (st == WEFT_OK)
        st = share(d, resume_load(m, d, &mf, sdir), &mine, all);
    if (st == WEFT_OK) {
        pr->step = (uint64_t)mf.step;
        pr->tokens = (uint64_t)mf.tokens;
        pr->epoch = (size_t)mf.epoch;
        pr->cursor = (size_t)mf.cursor;
        sched_note(&mf, o, pr->sched_note, sizeof(pr->sched_note));
    }
    manifest_free(&mf);
    free(all);
    return st;
}

weft_status_t train_ckpt_prepare(const char *dir)
{
    char path[PATH_MAX];
    struct stat sb;
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "--ckpt-dir: path too long");
    for (char *p = path + 1; *p; p++) {   // each parent, then the directory itself
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return weft_error_quiet(WEFT_ERR_SYSTEM, "--ckpt-dir %s: cannot create %s: %s",
                                    dir, path, strerror(errno));
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return weft_error_quiet(WEFT_ERR_SYSTEM, "--ckpt-dir %s: cannot create it: %s", dir,
                                strerror(errno));
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "--ckpt-dir %s: not a directory", dir);
    if (access(path, W_OK | X_OK) != 0)
        return weft_error_quiet(WEFT_ERR_SYSTEM, "--ckpt-dir %s: cannot write there: %s",
                                dir, strerror(errno));
    return WEFT_OK;
}

weft_status_t train_ckpt_export(const char *dir, const char *path)
{
    // the model's sizes from the manifest that latest names, then an ordinary resume
    char name[64], lpath[4200], mpath[4300];
    snprintf(lpath, sizeof(lpath), "%s/latest", dir);
    FILE *f = fopen(lpath, "r");
    if (!f)
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: cannot open: %s", lpath,
                                strerror(errno));
    int got = fgets(name, sizeof(name), f) != NULL;
    fclose(f);
    name[strcspn(name, "\n")] = '\0';
    if (!got || strchr(name, '/'))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: does not name a "
                                "step directory", lpath);
    snprintf(mpath, sizeof(mpath), "%s/%s/manifest", dir, name);
    manifest_t mf;
    RETURN_IF_ERR(manifest_read(mpath, &mf));
    train_gpt2_cfg_t cfg = { .max_seq_len = mf.maxT, .vocab_size = mf.vocab,
                             .padded_vocab_size = mf.Vp, .num_layers = mf.layers,
                             .num_heads = mf.heads, .channels = mf.channels };
    manifest_free(&mf);
    train_gpt2_t *m = NULL;
    weft_status_t st = train_gpt2_create(&m, &cfg);
    if (st != WEFT_OK)
        return weft_error_quiet(st, "checkpoint %s: %s", mpath, weft_last_error());
    train_dist_t none = { 0 };
    manifest_t mf2 = { 0 };
    char sdir[4096];
    st = resume_check(dir, m, 0, 1, &mf2, name, sizeof(name), sdir, sizeof(sdir));
    if (st == WEFT_OK)
        st = resume_load(m, &none, &mf2, sdir);
    manifest_free(&mf2);
    if (st == WEFT_OK)
        st = train_checkpoint_write(m, path);
    train_gpt2_destroy(m);
    return st;
}
