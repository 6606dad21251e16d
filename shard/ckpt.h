/*
 * ckpt.h - sharded checkpoint files: one per writing rank, read back at any world size.
 *
 * A rank file holds, for each unit in order, three runs of n floats: this rank's
 * parameters (fp32 master), AdamW m and v, where n and the run's place in the unit
 * (offset) are the layout's: rank k of a shard group of G holds [k*sn, k*sn + sn) of a
 * unit padded to G*sn. One process writes whole units (G = 1, sn = the unit's length).
 * Replicas write nothing: the ranks of the first group (0 .. G-1) hold every shard once.
 *
 * File: 64-byte header { "WEFTSHRD", version 1, rank, nunits, step, payload bytes } and
 * the payload; a 64-bit hash of the whole file (ckpt.c) goes into the manifest (the trainer's),
 * which is what says a file is complete.
 *
 * Loading gathers a unit range [lo, lo + n) of p, m or v from whichever files hold it
 * (pread at computed offsets), so a checkpoint written by N ranks with one strategy loads
 * on M ranks with another.
 */
#ifndef WEFT_SHARD_CKPT_H
#define WEFT_SHARD_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "shard.h"

/* How a checkpoint's units were cut. */
typedef struct {
    int G;                  // shard group size; files 0 .. G-1 exist
    int nunits;
    const size_t *len;      // [nunits] floats in each unit
    const size_t *sn;       // [nunits] floats each file holds of it
} ckpt_layout_t;

/* What one rank writes: per unit, its runs of p, m and v (n[u] floats each). */
typedef struct {
    int nunits;
    const float *const *p, *const *m, *const *v;
    const size_t *n;
} ckpt_rank_data_t;

/* Writes path atomically enough for its caller (path is in a temporary directory):
 * create, write, fsync, close. Returns its size and hash. */
weft_status_t ckpt_file_write(const char *path, int rank, uint64_t step,
                              const ckpt_rank_data_t *d, uint64_t *hash_p, uint64_t *bytes_p);
/* Hashes a whole file (what the manifest recorded), and its size. */
weft_status_t ckpt_file_hash(const char *path, uint64_t *hash_p, uint64_t *bytes_p);
/* Checks a file's header against the layout (rank, nunits, step, payload size). */
weft_status_t ckpt_file_check(const char *path, const ckpt_layout_t *l, int rank,
                              uint64_t step);
/* Reads floats [lo, lo + n) of unit u's run `which` (0 p, 1 m, 2 v) into dst from the
 * files of directory dir (named by ckpt_file_name); floats past the unit's length read
 * as zero. */
weft_status_t ckpt_read_range(const char *dir, const ckpt_layout_t *l, int u, int which,
                              size_t lo, size_t n, float *dst);
/* The layout can describe a checkpoint: G >= 1 files, and in each unit G pieces of sn
 * floats cover its len (sn * G >= len, without overflow). Else WEFT_ERR_INVALID_ARG
 * naming dir and the unit (a crafted or damaged manifest would otherwise read as
 * zeros past G * sn). */
weft_status_t ckpt_layout_check(const ckpt_layout_t *l, const char *dir);
/* "rank-00003.bin" */
void ckpt_file_name(char *buf, size_t cap, int rank);

/* shard/'s side: whether this rank writes a file, its data (host pointers: a device
 * table's runs are downloaded into a copy shard/ keeps until the next call), its layout;
 * and filling its shards from a checkpoint of any layout (every rank, no communication;
 * between steps, refused while a unit's parameters are in use; units gathered ahead of
 * use are dropped and gathered again from the loaded shards). */
int shard_ckpt_writer(const shard_t *sh);
weft_status_t shard_ckpt_data(shard_t *sh, ckpt_rank_data_t *d, const float **p,
                              const float **m, const float **v, size_t *n);
void shard_ckpt_layout(const shard_t *sh, ckpt_layout_t *l, size_t *len, size_t *sn);
weft_status_t shard_ckpt_load(shard_t *sh, const char *dir, const ckpt_layout_t *old);

#endif
