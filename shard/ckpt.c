/*
 * ckpt.c - sharded checkpoint files (ckpt.h): write one, check one, read any range back.
 *
 * Invariants: a file is written whole and fsync'ed before its caller renames anything
 * (the trainer's directory protocol makes it visible); reads check every length against
 * the layout before touching memory, and a short or failed read is an error naming the
 * file; loading into shard/ reads everything into fresh buffers first and swaps them in
 * only when all reads succeeded, so a failed load changes nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "ckpt.h"
#include "nn.h"
#include "shard_int.h"
#include "status.h"
#include "util.h"

#define CKPT_MAGIC   "WEFTSHRD"
#define CKPT_VERSION 1
#define CKPT_HDR     64

typedef struct {
    char magic[8];
    uint32_t version;
    int32_t rank, nunits, pad0;
    uint64_t step, payload;
    char zero[CKPT_HDR - 40];
} file_hdr_t;
_Static_assert(sizeof(file_hdr_t) == CKPT_HDR, "checkpoint header is 64 bytes");

/* ---- the file hash: four FNV-style lanes over 64-bit words, so that hashing runs at
 * memory speed (byte-wise FNV-1a ran at ~0.7 GB/s, slower than the disk) ---- */

typedef struct {
    uint64_t lane[4], total;
    unsigned char tail[32];
    size_t ntail;
} hasher_t;

#define HPRIME 0x100000001b3ull

static void hasher_init(hasher_t *h)
{
    for (int i = 0; i < 4; i++)
        h->lane[i] = HASH_SEED + (uint64_t)i * 0x9e3779b97f4a7c15ull;
    h->total = 0;
    h->ntail = 0;
}

static void hasher_block(hasher_t *h, const unsigned char *p)
{
    for (int i = 0; i < 4; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        h->lane[i] = (h->lane[i] ^ w) * HPRIME;
        h->lane[i] ^= h->lane[i] >> 29;
    }
}

static void hasher_add(hasher_t *h, const void *data, size_t n)
{
    const unsigned char *p = data;
    h->total += n;
    if (h->ntail) {
        size_t k = 32 - h->ntail < n ? 32 - h->ntail : n;
        memcpy(h->tail + h->ntail, p, k);
        h->ntail += k;
        p += k;
        n -= k;
        if (h->ntail < 32)
            return;
        hasher_block(h, h->tail);
        h->ntail = 0;
    }
    for (; n >= 32; p += 32, n -= 32)
        hasher_block(h, p);
    memcpy(h->tail, p, n);
    h->ntail = n;
}

static uint64_t hasher_end(hasher_t *h)
{
    uint64_t x = hash_bytes(HASH_SEED, h->tail, h->ntail) ^ h->total;
    for (int i = 0; i < 4; i++)
        x = (x ^ h->lane[i]) * HPRIME;
    return x ^ (x >> 31);
}

void ckpt_file_name(char *buf, size_t cap, int rank)
{
    snprintf(buf, cap, "rank-%05d.bin", rank);
}

static weft_status_t write_all(int fd, const void *p, size_t n, const char *path,
                               hasher_t *hash)
{
    hasher_add(hash, p, n);
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: write failed: %s", path,
                                    w < 0 ? strerror(errno) : "no space");
        c += w;
        n -= (size_t)w;
    }
    return WEFT_OK;
}

weft_status_t ckpt_file_write(const char *path, int rank, uint64_t step,
                              const ckpt_rank_data_t *d, uint64_t *hash_p, uint64_t *bytes_p)
{
    file_hdr_t h = { .version = CKPT_VERSION, .rank = rank, .nunits = d->nunits,
                     .step = step };
    memcpy(h.magic, CKPT_MAGIC, 8);
    for (int u = 0; u < d->nunits; u++)
        h.payload += 3 * d->n[u] * sizeof(float);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: cannot create: %s", path,
                                strerror(errno));
    hasher_t hash;
    hasher_init(&hash);
    weft_status_t st = write_all(fd, &h, sizeof(h), path, &hash);
    for (int u = 0; st == WEFT_OK && u < d->nunits; u++) {
        size_t b = d->n[u] * sizeof(float);
        st = write_all(fd, d->p[u], b, path, &hash);
        if (st == WEFT_OK)
            st = write_all(fd, d->m[u], b, path, &hash);
        if (st == WEFT_OK)
            st = write_all(fd, d->v[u], b, path, &hash);
    }
    if (st == WEFT_OK && fsync(fd) != 0)
        st = weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: fsync failed: %s", path,
                              strerror(errno));
    if (close(fd) != 0 && st == WEFT_OK)
        st = weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: close failed: %s", path,
                              strerror(errno));
    if (st != WEFT_OK) {
        unlink(path);
        return st;
    }
    *hash_p = hasher_end(&hash);
    *bytes_p = CKPT_HDR + h.payload;
    return WEFT_OK;
}

weft_status_t ckpt_file_hash(const char *path, uint64_t *hash_p, uint64_t *bytes_p)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: cannot open: %s", path,
                                strerror(errno));
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    hasher_t hash;
    hasher_init(&hash);
    uint64_t bytes = 0;
    ssize_t r;
    while ((r = read(fd, buf, CHUNK)) > 0 || (r < 0 && errno == EINTR)) {
        if (r > 0) {
            hasher_add(&hash, buf, (size_t)r);
            bytes += (uint64_t)r;
        }
    }
    int e = errno;
    free(buf);
    close(fd);
    if (r < 0)
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: read failed: %s", path,
                                strerror(e));
    *hash_p = hasher_end(&hash);
    *bytes_p = bytes;
    return WEFT_OK;
}

static uint64_t file_payload(const ckpt_layout_t *l)
{
    uint64_t b = 0;
    for (int u = 0; u < l->nunits; u++)
        b += 3 * l->sn[u] * sizeof(float);
    return b;
}

weft_status_t ckpt_file_check(const char *path, const ckpt_layout_t *l, int rank,
                              uint64_t step)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: cannot open: %s", path,
                                strerror(errno));
    file_hdr_t h;
    struct stat sb;
    ssize_t r = pread(fd, &h, sizeof(h), 0);
    int ok_stat = fstat(fd, &sb) == 0;
    close(fd);
    if (r != (ssize_t)sizeof(h) || memcmp(h.magic, CKPT_MAGIC, 8) != 0)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: not a weft shard file",
                                path);
    if (h.version != CKPT_VERSION)
        return weft_error_quiet(WEFT_ERR_UNSUPPORTED, "checkpoint %s: format version %u, "
                                "this weft reads %d", path, h.version, CKPT_VERSION);
    uint64_t want = file_payload(l);
    if (h.rank != rank || h.nunits != l->nunits || h.step != step || h.payload != want ||
        !ok_stat || (uint64_t)sb.st_size != CKPT_HDR + want)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: rank %d, %d units, "
                                "step %llu, a payload of %llu bytes in a file of %llu; the "
                                "manifest says rank %d, %d units, step %llu, a payload of "
                                "%llu bytes in a file of %llu", path, h.rank, h.nunits,
                                (unsigned long long)h.step, (unsigned long long)h.payload,
                                (unsigned long long)(ok_stat ? sb.st_size : 0), rank,
                                l->nunits, (unsigned long long)step, (unsigned long long)want,
                                (unsigned long long)(CKPT_HDR + want));
    return WEFT_OK;
}

weft_status_t ckpt_read_range(const char *dir, const ckpt_layout_t *l, int u, int which,
                              size_t lo, size_t n, float *dst)
{
    size_t sn = l->sn[u], len = l->len[u];
    uint64_t unit_off = CKPT_HDR;
    for (int i = 0; i < u; i++)
        unit_off += 3 * l->sn[i] * sizeof(float);
    unit_off += (uint64_t)which * sn * sizeof(float);
    size_t pos = lo, end = lo + n;
    while (pos < end) {
        size_t k = sn ? pos / sn : 0, stop = (k + 1) * sn < end ? (k + 1) * sn : end;
        if (pos >= len || (int)k >= l->G || sn == 0) {   // padding: zero
            size_t z = pos >= len ? end - pos : stop - pos;
            memset(dst + (pos - lo), 0, z * sizeof(float));
            pos += z;
            continue;
        }
        if (stop > len)
            stop = len;
        char name[64], path[4096];
        ckpt_file_name(name, sizeof(name), (int)k);
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return weft_error_quiet(WEFT_ERR_SYSTEM, "checkpoint %s: cannot open: %s", path,
                                    strerror(errno));
        size_t bytes = (stop - pos) * sizeof(float), got = 0;
        uint64_t off = unit_off + (pos - k * sn) * sizeof(float);
        char *d = (char *)(dst + (pos - lo));
        while (got < bytes) {
            ssize_t r = pread(fd, d + got, bytes - got, (off_t)(off + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                close(fd);
                return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: short read "
                                        "at byte %llu (truncated?)", path,
                                        (unsigned long long)(off + got));
            }
            got += (size_t)r;
        }
        close(fd);
        pos = stop;
    }
    return WEFT_OK;
}

/* ---- shard/'s side ---- */

int shard_ckpt_writer(const shard_t *sh)
{
    return sh->rank < sh->G;   // the first group holds every shard once
}

weft_status_t shard_ckpt_data(shard_t *sh, ckpt_rank_data_t *d, const float **p,
                              const float **m, const float **v, size_t *n)
{
    for (int u = 0; u < sh->nunits; u++) {
        p[u] = sh->u[u].master;
        m[u] = sh->u[u].m;
        v[u] = sh->u[u].v;
        n[u] = sh->u[u].sn;
    }
    *d = (ckpt_rank_data_t){ sh->nunits, p, m, v, n };
    if (!sh->o.mem)
        return WEFT_OK;
    // another table's memory: the runs come through a host copy, kept until the next one
    size_t total = 0;
    for (int u = 0; u < sh->nunits; u++)
        total += 3 * n[u];
    free(sh->ckpt_host);
    if (!(sh->ckpt_host = malloc((total ? total : 1) * sizeof(float))))
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "checkpoint: out of memory for a host "
                                "copy of %zu bytes", total * sizeof(float));
    float *h = sh->ckpt_host;
    for (int u = 0; u < sh->nunits; u++) {
        const float **run[3] = { &p[u], &m[u], &v[u] };
        for (int w = 0; w < 3; w++, h += n[u]) {
            RETURN_IF_ERR(sh->mem->download(sh->mem->ctx, h, *run[w], n[u] * sizeof(float)));
            *run[w] = h;
        }
    }
    return WEFT_OK;
}

void shard_ckpt_layout(const shard_t *sh, ckpt_layout_t *l, size_t *len, size_t *sn)
{
    for (int u = 0; u < sh->nunits; u++) {
        len[u] = sh->u[u].len;
        sn[u] = sh->u[u].sn;
    }
    *l = (ckpt_layout_t){ sh->G, sh->nunits, len, sn };
}

weft_status_t ckpt_layout_check(const ckpt_layout_t *l, const char *dir)
{
    if (l == NULL || l->G < 1 || l->nunits < 0 || (l->nunits > 0 && (!l->len || !l->sn)))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: no layout (%d files)",
                                dir, l ? l->G : 0);
    for (int u = 0; u < l->nunits; u++)
        if (l->sn[u] > SIZE_MAX / (size_t)l->G || l->sn[u] * (size_t)l->G < l->len[u])
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: unit %d's %zu "
                                    "floats do not fit in %d pieces of %zu", dir, u,
                                    l->len[u], l->G, l->sn[u]);
    return WEFT_OK;
}

weft_status_t shard_ckpt_load(shard_t *sh, const char *dir, const ckpt_layout_t *old)
{
    RETURN_IF_ERR(ckpt_layout_check(old, dir));
    if (old->nunits != sh->nunits)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: %d units, this model "
                                "has %d", dir, old->nunits, sh->nunits);
    for (int u = 0; u < sh->nunits; u++)
        if (old->len[u] != sh->u[u].len)
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: unit %d has %zu "
                                    "floats, this model's %zu", dir, u, old->len[u],
                                    sh->u[u].len);
    for (int u = 0; u < sh->nunits; u++)
        if (sh->u[u].held)
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "checkpoint %s: unit %d's "
                                    "parameters are in use (shard_params without "
                                    "shard_params_done): load between steps", dir, u);
    RETURN_IF_ERR(shard_quiesce(sh));
    /* units gathered ahead of use hold the old masters: dropped on every rank whatever
     * the load does here (a cache, gathered again at the next use), so that all ranks
     * issue the same gathers next */
    shard_drop_gathered(sh);
    // everything into fresh buffers first: a failed read changes nothing
    size_t total = 0;
    for (int u = 0; u < sh->nunits; u++)
        total += (sh->per_use ? 0 : sh->u[u].pad) + 3 * sh->u[u].sn;
    float *buf = malloc((total ? total : 1) * sizeof(float)), *b = buf;
    if (!buf)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "checkpoint: out of memory");
    weft_status_t st = WEFT_OK;
    for (int u = 0; st == WEFT_OK && u < sh->nunits; u++) {
        unit_t *x = &sh->u[u];
        size_t lo = (size_t)sh->gr * x->sn;
        if (!sh->per_use) {
            st = ckpt_read_range(dir, old, u, 0, 0, x->pad, b);
            b += x->pad;
        }
        for (int w = 0; st == WEFT_OK && w < 3; w++, b += x->sn)
            st = ckpt_read_range(dir, old, u, w, lo, x->sn, b);
    }
    if (st != WEFT_OK) {
        free(buf);
        return st;
    }
    b = buf;
    const shard_mem_t *mm = sh->mem;
    for (int u = 0; st == WEFT_OK && u < sh->nunits; u++) {
        unit_t *x = &sh->u[u];
        if (!sh->per_use) {   // the compute copy: fp32, or as a bf16 gather makes it
            st = mm->upload(mm->ctx, x->full, b, x->pad * sizeof(float));
            if (st == WEFT_OK && sh->o.param_bf16)
                st = shard_round_bf16(sh, x->full, x->pad);
            b += x->pad;
        }
        float *dst[3] = { x->master, x->m, x->v };
        for (int w = 0; st == WEFT_OK && w < 3; w++, b += x->sn)
            st = mm->upload(mm->ctx, dst[w], b, x->sn * sizeof(float));
    }
    free(buf);
    return st;
}
