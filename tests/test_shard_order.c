/*
 * test_shard_order.c - shard/ issues its collectives in the same order on every rank,
 * whatever the timing.
 *
 *   weftrun -n 4 build/tests/test_shard_order [STRATEGY] [fail|reload|misuse|create_fail]
 *                                                       (default hybrid, groups of 2)
 *
 * Each rank trains three steps of a 5-unit model through a table that wraps the host
 * table: its coll records (kind, communicator) in issue order, and its test answers "not
 * done" at random (a seed per rank) where the host says done, as a device table's event
 * query may by a few microseconds. Where calls block (the device table's), two ranks
 * that start two communicators' calls in different orders wait for each other in a
 * cycle, so the sequences must be equal: the ranks all-gather a hash of theirs and each
 * compares (hybrid: two communicators, where the order can differ; full and zero1 use
 * one each way, so there only the model is checked). Also: three forward-only
 * micro-batches after training (validation) find unit 0 gathered ahead of use (full,
 * hybrid; before 2026-11-27 only the first did), every rank exports the same model, and
 * shard_destroy gives back every buffer the table lent.
 * fail: bf16 gradient reductions, and the table's coll fails the 7th gradient collective
 * (step 2's backward), on every rank alike: training must stop with that error, and once
 * shard_destroy returns every buffer the shard took from the table must have been given
 * back (the table counts them), the failed reduction's transient ones among them.
 * reload: after the three steps, shard_ckpt_load of a one-process checkpoint of the
 * initial parameters (rank 0 writes it): the next forward must see those parameters in
 * every unit, the one gathered ahead by the last step's prefetch among them (before
 * 2026-11-27 it kept the trained ones), and the export must be them; a load while a
 * unit's parameters are in use is refused, naming it.
 * misuse: (every strategy) shard_create refuses unit descriptors it cannot honour (17
 * segments, overlapping ones, one past the unit) on every rank, and a unit's gradient
 * reported twice in one micro-batch is refused (none and zero1 keep the buffer, so
 * before 2026-11-27 the second report reduced it again); (full, hybrid) an update
 * refreshes the units an evaluation forward left held (before, the last unit kept its
 * old parameters into the next micro-batch), and a gather that could not start leaves
 * nothing that passes for gathered (before, asking again returned a stale buffer).
 * create_fail: rank 1 runs out of memory inside shard_create: the call fails on every
 * rank (before 2026-11-27 the others went on, to wait for its gathers), and each gives
 * back what it took.
 * Prints ok/FAIL lines and exits 0 when every check passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "shard.h"
#include "status.h"
#include "weft.h"

#define NUNITS 5
#define MAXLOG 4096

static const shard_mem_t *host;
static unsigned rnd;
static int nlog;
static uint32_t logv[MAXLOG];
static weft_comm_t *comms[8];
static int ncomms;
static int fail_at, ngrad;      /* fail mode: the gradient collective that fails (1-based) */
static int ngather;             /* all-gathers issued */
static int fail_gather_at;      /* misuse mode: the all-gather that fails (1-based; 0: none) */
static long live;               /* buffers taken from the table and not given back */
static int alloc_fail_at, nalloc;   /* create_fail: this rank's allocation that fails */

static void *count_alloc(void *ctx, size_t bytes)
{
    if (alloc_fail_at && ++nalloc == alloc_fail_at)
        return NULL;
    void *p = host->alloc(host->ctx, bytes);
    live += p != NULL;
    return p;
}

static void count_free(void *ctx, void *p)
{
    live -= p != NULL;
    host->free(host->ctx, p);
}

static weft_status_t rec_coll(void *ctx, shard_coll_t kind, const void *send, void *recv,
                              size_t count, weft_dtype_t dt, weft_comm_t *comm, void **req_p)
{
    int c = 0;
    while (c < ncomms && comms[c] != comm)
        c++;
    if (c == ncomms && ncomms < 8)
        comms[ncomms++] = comm;
    if (nlog < MAXLOG)
        logv[nlog++] = (uint32_t)kind << 16 | (uint32_t)c << 8 | (uint32_t)(count & 0xff);
    ngather += kind == SHARD_COLL_ALLGATHER;
    if (kind == SHARD_COLL_ALLGATHER && ngather == fail_gather_at)
        return weft_error(WEFT_ERR_INTERNAL, "test_shard_order: all-gather %d fails, as "
                          "asked", ngather);
    if (kind != SHARD_COLL_ALLGATHER && ++ngrad == fail_at)
        return weft_error(WEFT_ERR_INTERNAL, "test_shard_order: gradient collective %d "
                          "fails, as asked", ngrad);
    return host->coll(host->ctx, kind, send, recv, count, dt, comm, req_p);
}

static weft_status_t late_test(void *ctx, void *req, int *done_p)
{
    weft_status_t st = host->test(host->ctx, req, done_p);
    if (st == WEFT_OK && *done_p && rand_r(&rnd) % 2)
        *done_p = 0;
    return st;
}

/* A forward-only micro-batch whose every unit must hold want's floats (units at off[i],
 * len[i] long); *same drops to 0, with a FAIL line saying `what`, where one does not. */
static weft_status_t forward_sees(shard_t *sh, const float *want, const size_t *off,
                                  const size_t *len, int *same, int rank, const char *what)
{
    float *p;
    weft_status_t st = shard_micro_begin(sh, 0, 1);
    for (int i = 0; st == WEFT_OK && i < NUNITS; i++) {
        if ((st = shard_params(sh, i, 0, &p)) != WEFT_OK)
            break;
        if (memcmp(p, want + off[i], len[i] * sizeof(float))) {
            printf("FAIL rank %d: unit %d's parameters %s\n", rank, i, what);
            *same = 0;
        }
        st = shard_params_done(sh, i, 0);
    }
    return st;
}

/* reload: the initial parameters back from a checkpoint, after training. 1 when a
 * check failed. */
static int reload(weft_comm_t *world, shard_t *sh, const shard_unit_desc_t *units,
                  const float *params, size_t total, int rank, const char *sname)
{
    char dir[64] = "";
    size_t len[NUNITS], off[NUNITS];
    const float *pp[NUNITS], *zz[NUNITS];
    float *zero = calloc(total, sizeof(float)), *out = malloc(total * sizeof(float));
    int bad = !zero || !out;
    for (size_t i = 0, o = 0; i < NUNITS; o += units[i].len, i++) {
        len[i] = units[i].len;
        off[i] = o;
        pp[i] = params + o;
        zz[i] = zero;
    }
    if (rank == 0 && !bad) {   // one process's checkpoint of the initial parameters
        snprintf(dir, sizeof(dir), "/tmp/test_shard_order.XXXXXX");
        char path[128];
        uint64_t h, b;
        ckpt_rank_data_t d = { NUNITS, pp, zz, zz, len };
        bad = mkdtemp(dir) == NULL;
        snprintf(path, sizeof(path), "%s/rank-00000.bin", dir);
        if (!bad && ckpt_file_write(path, 0, 3, &d, &h, &b) != WEFT_OK) {
            printf("FAIL rank 0 write a checkpoint: %s\n", weft_last_error());
            bad = 1;
        }
    }
    if (weft_broadcast(dir, dir, sizeof(dir), WEFT_UINT8, 0, world) != WEFT_OK || !dir[0]) {
        printf("FAIL rank %d no checkpoint directory: %s\n", rank, weft_last_error());
        free(zero);
        free(out);
        return 1;
    }
    ckpt_layout_t l = { 1, NUNITS, len, len };
    float *p;
    /* layouts that cannot describe a checkpoint: no files, pieces short of a unit (the
     * floats past them read as zeros before 2026-11-27), pieces whose total wraps */
    size_t shortn[NUNITS], huge[NUNITS];
    for (int i = 0; i < NUNITS; i++) {
        shortn[i] = len[i] - (i == 3);
        huge[i] = i == 3 ? SIZE_MAX / 2 + 1 : len[i];
    }
    ckpt_layout_t bads[3] = { { 0, NUNITS, len, len }, { 1, NUNITS, len, shortn },
                              { 2, NUNITS, len, huge } };
    for (int k = 0; k < 3; k++) {
        weft_status_t b = shard_ckpt_load(sh, dir, &bads[k]);
        int said = b == WEFT_ERR_INVALID_ARG && (k == 0 || strstr(weft_last_error(), "unit 3"));
        printf("%s rank %d %s reload: a layout of %s is refused (%s)\n", said ? "ok" : "FAIL",
               rank, sname, k == 0 ? "no files" : k == 1 ? "pieces short of a unit" :
               "pieces that wrap", weft_last_error());
        bad |= !said;
    }
    weft_status_t st = shard_micro_begin(sh, 0, 1);
    if (st == WEFT_OK && (st = shard_params(sh, 1, 0, &p)) == WEFT_OK) {
        weft_status_t held = shard_ckpt_load(sh, dir, &l);
        int said = held == WEFT_ERR_INVALID_ARG && strstr(weft_last_error(), "unit 1");
        printf("%s rank %d %s reload: a load while unit 1 is in use is refused (%s)\n",
               said ? "ok" : "FAIL", rank, sname, weft_last_error());
        bad |= !said;
        st = shard_params_done(sh, 1, 0);
    }
    if (st == WEFT_OK)
        st = shard_ckpt_load(sh, dir, &l);
    int same = st == WEFT_OK;
    if (st == WEFT_OK)
        st = forward_sees(sh, params, off, len, &same, rank, "in the forward after the load "
                          "are not the checkpoint's");
    if (st == WEFT_OK)
        st = shard_export(sh, out);
    same &= st == WEFT_OK && !memcmp(out, params, total * sizeof(float));
    printf("%s rank %d %s reload: the forward after shard_ckpt_load sees the checkpoint's "
           "parameters in every unit, and exports them (%s)\n", same ? "ok" : "FAIL", rank,
           sname, st == WEFT_OK ? "ok" : weft_last_error());
    weft_barrier(world);
    if (rank == 0) {
        char path[128];
        snprintf(path, sizeof(path), "%s/rank-00000.bin", dir);
        unlink(path);
        rmdir(dir);
    }
    free(zero);
    free(out);
    return bad || !same;
}

/* misuse, before the model: descriptors shard_create must refuse, on every rank. */
static int bad_units(weft_comm_t *world, const shard_opts_t *o, const shard_unit_desc_t *good,
                     const float *params, int rank, const char *sname)
{
    static const char *what[3] = { "17 segments", "overlapping segments",
                                   "a segment past the unit" };
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        shard_unit_desc_t u[NUNITS];
        memcpy(u, good, sizeof(u));
        if (k == 0) {
            u[2].nsegs = SHARD_MAX_SEGS + 1;
        } else if (k == 1) {
            u[2].nsegs = 2;
            u[2].segs[0] = (shard_seg_t){ 0, 600, 1 };
            u[2].segs[1] = (shard_seg_t){ 500, u[2].len - 500, 0 };
        } else {
            u[2].segs[0] = (shard_seg_t){ 10, u[2].len, 1 };
        }
        shard_t *sh = NULL;
        weft_status_t st = shard_create(&sh, world, o, NUNITS, u, params);
        int said = st == WEFT_ERR_INVALID_ARG && strstr(weft_last_error(), "unit 2") != NULL;
        printf("%s rank %d %s misuse: shard_create refuses %s (%s)\n", said ? "ok" : "FAIL",
               rank, sname, what[k], weft_last_error());
        if (st == WEFT_OK)
            shard_destroy(sh);
        bad |= !said;
    }
    return bad;
}

/* misuse, after training: an evaluation forward's held units refreshed by the update, a
 * failed gather retried, and (every strategy) a gradient reported twice. */
static int misuse(shard_t *sh, const shard_unit_desc_t *units, size_t total, int per_use,
                  int rank, const char *sname)
{
    float *want = malloc(total * sizeof(float)), *p, *g, norm;
    size_t off[NUNITS], lens[NUNITS];
    int bad = want == NULL;
    for (size_t i = 0, o = 0; i < NUNITS; o += units[i].len, i++) {
        off[i] = o;
        lens[i] = units[i].len;
    }
    weft_status_t st = bad ? WEFT_ERR_NO_MEMORY : WEFT_OK;
    if (per_use && st == WEFT_OK) {
        /* a training micro-batch, then an evaluation forward that keeps units 0 and 4
         * (the trainer's forward with targets does), then the update */
        st = shard_micro_begin(sh, 1, 1);
        for (int i = 0; st == WEFT_OK && i < NUNITS; i++)
            if ((st = shard_params(sh, i, 0, &p)) == WEFT_OK)
                st = shard_params_done(sh, i, 0);
        for (int i = NUNITS - 1; st == WEFT_OK && i >= 0; i--) {
            if ((st = shard_params(sh, i, 1, &p)) == WEFT_OK && (st = shard_grads(sh, i, &g)) == WEFT_OK)
                for (size_t k = 0; k < units[i].len; k++)
                    g[k] = 0.02f * p[k] - 0.003f * (float)(rank + 1);
            if (st == WEFT_OK && (st = shard_grads_done(sh, i)) == WEFT_OK)
                st = shard_params_done(sh, i, 1);
        }
        if (st == WEFT_OK)
            st = shard_micro_begin(sh, 0, 0);
        for (int i = 0; st == WEFT_OK && i < NUNITS; i++)
            if ((st = shard_params(sh, i, 0, &p)) == WEFT_OK && i != 0 && i != NUNITS - 1)
                st = shard_params_done(sh, i, 0);
        if (st == WEFT_OK && (st = shard_clip(sh, 1.0f, &norm)) == WEFT_OK)
            st = shard_adamw(sh, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 4);
        if (st == WEFT_OK)
            st = shard_export(sh, want);
        int fresh = st == WEFT_OK;
        if (st == WEFT_OK)
            st = forward_sees(sh, want, off, lens, &fresh, rank, "after the update are the "
                              "ones from before it");
        printf("%s rank %d %s misuse: the update refreshes the units an evaluation "
               "forward left held (%s)\n", fresh ? "ok" : "FAIL", rank, sname,
               st == WEFT_OK ? "ok" : weft_last_error());
        bad |= !fresh;
        /* a forward whose second gather fails to start (every rank alike), then unit 1
         * asked for again: the gather runs now, and its parameters are the model's */
        int retried = 0;
        if (st == WEFT_OK)
            st = shard_micro_begin(sh, 0, 0);
        if (st == WEFT_OK) {
            fail_gather_at = ngather + 1;   /* the prefetch of unit 1, from unit 0's call */
            weft_status_t f = shard_params(sh, 0, 0, &p);
            fail_gather_at = 0;
            int failed = f == WEFT_ERR_INTERNAL && strstr(weft_last_error(), "as asked");
            if (f == WEFT_OK || failed)
                st = shard_params(sh, 1, 0, &p);
            retried = failed && st == WEFT_OK &&
                      !memcmp(p, want + off[1], units[1].len * sizeof(float));
            if (st == WEFT_OK)
                st = shard_params_done(sh, 1, 0);
            for (int i = 2; st == WEFT_OK && i < NUNITS; i++)
                if ((st = shard_params(sh, i, 0, &p)) == WEFT_OK)
                    st = shard_params_done(sh, i, 0);
            if (st == WEFT_OK)
                st = shard_params_done(sh, 0, 0);
        }
        printf("%s rank %d %s misuse: after a gather that could not start, unit 1 asked "
               "again is gathered afresh (%s)\n", retried ? "ok" : "FAIL", rank, sname,
               st == WEFT_OK ? "ok" : weft_last_error());
        bad |= !retried;
    }
    /* a unit's gradient reported twice in one micro-batch */
    if (st == WEFT_OK)
        st = shard_micro_begin(sh, 1, 1);
    if (st == WEFT_OK && (st = shard_params(sh, NUNITS - 1, 1, &p)) == WEFT_OK &&
        (st = shard_grads(sh, NUNITS - 1, &g)) == WEFT_OK)
        st = shard_grads_done(sh, NUNITS - 1);
    int twice = 0;
    if (st == WEFT_OK) {
        weft_status_t t = shard_grads_done(sh, NUNITS - 1);
        twice = t == WEFT_ERR_INVALID_ARG;
        printf("%s rank %d %s misuse: a gradient reported twice in one micro-batch is "
               "refused (%s)\n", twice ? "ok" : "FAIL", rank, sname, weft_last_error());
    } else {
        printf("FAIL rank %d %s misuse: %s\n", rank, sname, weft_last_error());
    }
    free(want);
    return bad || !twice;
}

int main(int argc, char **argv)
{
    const char *sname = argc > 1 ? argv[1] : "hybrid";
    int fail = argc > 2 && !strcmp(argv[2], "fail");
    int reloading = argc > 2 && !strcmp(argv[2], "reload");
    int misusing = argc > 2 && !strcmp(argv[2], "misuse");
    int create_fail = argc > 2 && !strcmp(argv[2], "create_fail");
    weft_comm_t *world;
    if (weft_comm_init(&world) != WEFT_OK) {
        printf("FAIL init: %s\n", weft_last_error());
        return 1;
    }
    int rank = weft_comm_rank(world), n = weft_comm_size(world), bad = 0;
    host = shard_host_mem();
    shard_mem_t mem = *host;
    mem.coll = rec_coll;
    mem.test = late_test;
    mem.alloc = count_alloc;
    mem.free = count_free;
    rnd = 12345u + 7919u * (unsigned)rank;
    shard_opts_t o = { .prefetch = 1, .mem = &mem, .reduce_bf16 = fail };
    fail_at = fail ? 7 : 0;
    if (shard_strategy_parse(sname, &o.strategy) != 0) {
        printf("FAIL unknown strategy %s\n", sname);
        return 2;
    }
    if (o.strategy == SHARD_HYBRID)
        o.group = 2;
    shard_unit_desc_t units[NUNITS];
    size_t total = 0;
    for (int i = 0; i < NUNITS; i++) {
        units[i] = (shard_unit_desc_t){ .len = 1000 + 37 * (size_t)i, .nsegs = 1 };
        units[i].segs[0] = (shard_seg_t){ 0, units[i].len, 1 };
        total += units[i].len;
    }
    float *params = malloc(total * sizeof(float)), *out = malloc(total * sizeof(float));
    float *ref = malloc(total * sizeof(float) * (size_t)n);
    if (!params || !out || !ref)
        return 1;
    for (size_t k = 0; k < total; k++)
        params[k] = (float)((k * 2654435761u) % 1000) / 1000.0f - 0.5f;
    if (misusing && bad_units(world, &o, units, params, rank, sname))
        bad = 1;
    if (create_fail) {   /* rank 1 runs out of memory setting up its shards */
        o.param_bf16 = 1;   /* zero1: setup starts the bf16 gathers the others then wait on */
        alloc_fail_at = rank == 1 ? 6 : 0;
        shard_t *sh = NULL;
        weft_status_t cs = shard_create(&sh, world, &o, NUNITS, units, params);
        int said = rank == 1 ? cs == WEFT_ERR_NO_MEMORY
                             : cs != WEFT_OK && strstr(weft_last_error(), "another rank");
        printf("%s rank %d %s create_fail: shard_create fails on every rank when rank 1 "
               "cannot set up (%s), and gives back what it took (%ld not)\n",
               said && live == 0 ? "ok" : "FAIL", rank, sname, weft_last_error(), live);
        if (cs == WEFT_OK)
            shard_destroy(sh);
        weft_comm_destroy(world);
        free(params);
        free(out);
        free(ref);
        return !said || live != 0;
    }
    shard_t *sh;
    if (shard_create(&sh, world, &o, NUNITS, units, params) != WEFT_OK) {
        printf("FAIL rank %d shard_create: %s\n", rank, weft_last_error());
        return 1;
    }
    weft_status_t st = WEFT_OK;
    for (int step = 1; st == WEFT_OK && step <= 3; step++) {
        float *p, *g, norm;
        st = shard_micro_begin(sh, 1, 1);
        for (int i = 0; st == WEFT_OK && i < NUNITS; i++) {
            st = shard_params(sh, i, 0, &p);
            if (st == WEFT_OK)
                st = shard_params_done(sh, i, 0);
        }
        for (int i = NUNITS - 1; st == WEFT_OK && i >= 0; i--) {
            st = shard_params(sh, i, 1, &p);
            if (st == WEFT_OK)
                st = shard_grads(sh, i, &g);
            for (size_t k = 0; st == WEFT_OK && k < units[i].len; k++)
                g[k] = 0.01f * p[k] + 0.001f * (float)(rank + 1);   // each rank its own
            if (st == WEFT_OK)
                st = shard_grads_done(sh, i);
            if (st == WEFT_OK)
                st = shard_params_done(sh, i, 1);
        }
        if (st == WEFT_OK)
            st = shard_clip(sh, 1.0f, &norm);
        if (st == WEFT_OK)
            st = shard_adamw(sh, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    }
    if (fail) {
        int said = st == WEFT_ERR_INTERNAL && strstr(weft_last_error(), "as asked") != NULL;
        printf("%s rank %d %s fail: training stops at the failed gradient collective %d "
               "(%s)\n", said ? "ok" : "FAIL", rank, sname, fail_at, weft_last_error());
        shard_destroy(sh);
        printf("%s rank %d %s fail: every buffer given back after shard_destroy (%ld "
               "not)\n", live == 0 ? "ok" : "FAIL", rank, sname, live);
        bad = !said || live != 0;
        weft_comm_destroy(world);
        free(params);
        free(out);
        free(ref);
        return bad;
    }
    if ((misusing || reloading) && st == WEFT_OK) {
        if (misusing)
            bad |= misuse(sh, units, total,
                          o.strategy == SHARD_FULL || o.strategy == SHARD_HYBRID, rank, sname);
        else
            bad = reload(world, sh, units, params, total, rank, sname);
        shard_destroy(sh);
        weft_comm_destroy(world);
        free(params);
        free(out);
        free(ref);
        return bad;
    }
    /* none, zero1 (gradients reduced in place, where the micro-batches add up): a step
     * whose micro-batches never synchronized, and a micro-batch after the synchronized
     * one, are refused, changing nothing; the update after a synchronized one goes */
    if (st == WEFT_OK && (o.strategy == SHARD_NONE || o.strategy == SHARD_ZERO1)) {
        weft_status_t a = shard_micro_begin(sh, 1, 0), b = WEFT_OK, c = WEFT_OK, d;
        if (a == WEFT_OK)
            a = shard_adamw(sh, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 4);
        int ok1 = a == WEFT_ERR_INVALID_ARG && strstr(weft_last_error(), "none of which");
        if ((b = shard_micro_begin(sh, 1, 1)) == WEFT_OK)
            c = shard_micro_begin(sh, 1, 1);
        int ok2 = b == WEFT_OK && c == WEFT_ERR_INVALID_ARG &&
                  strstr(weft_last_error(), "after this step's synchronized");
        d = shard_adamw(sh, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 4);
        printf("%s rank %d %s: an update after unsynchronized micro-batches is refused\n",
               ok1 ? "ok" : "FAIL", rank, sname);
        printf("%s rank %d %s: a micro-batch after the step's synchronized one is refused, "
               "and the update then goes (%s)\n", ok2 && d == WEFT_OK ? "ok" : "FAIL", rank,
               sname, weft_status_str(d));
        bad |= !ok1 || !ok2 || d != WEFT_OK;
        st = d;
    }
    /* three forward-only micro-batches (validation): where units are gathered per use,
     * unit 0's gather (prefetch 1) is issued before the batch asks for it, by the last
     * step's update for the first, by shard_micro_begin for the others */
    int per_use = o.strategy == SHARD_FULL || o.strategy == SHARD_HYBRID, ahead = 0;
    for (int b = 0; st == WEFT_OK && b < 3; b++) {
        float *p;
        int before = ngather;
        st = shard_micro_begin(sh, 0, 0);
        ahead += ngather > before || b == 0;
        for (int i = 0; st == WEFT_OK && i < NUNITS; i++) {
            st = shard_params(sh, i, 0, &p);
            if (st == WEFT_OK)
                st = shard_params_done(sh, i, 0);
        }
    }
    if (per_use) {
        printf("%s rank %d %s: unit 0 gathered ahead of use in %d of 3 forward-only "
               "micro-batches\n", ahead == 3 ? "ok" : "FAIL", rank, sname, ahead);
        bad |= ahead != 3;
    }
    if (st == WEFT_OK)
        st = shard_export(sh, out);
    if (st != WEFT_OK) {
        printf("FAIL rank %d training: %s\n", rank, weft_last_error());
        return 1;
    }
    // every rank's issue order, as a hash, and the exported model
    uint64_t h = 1469598103934665603ull, all[64];
    for (int i = 0; i < nlog; i++)
        h = (h ^ logv[i]) * 1099511628211ull;
    if (n > 64 || weft_allgather(&h, all, 1, WEFT_UINT64, world) != WEFT_OK ||
        weft_allgather(out, ref, total, WEFT_FLOAT32, world) != WEFT_OK) {
        printf("FAIL rank %d all-gather: %s\n", rank, weft_last_error());
        return 1;
    }
    int same = 1, equal = 1;
    for (int r = 0; r < n; r++) {
        same &= all[r] == h;
        equal &= memcmp(ref + (size_t)r * total, out, total * sizeof(float)) == 0;
    }
    printf("%s rank %d %s: %d collectives on %d communicators, issued in the same order "
           "on every rank\n", same ? "ok" : "FAIL", rank, sname, nlog, ncomms);
    printf("%s rank %d %s: every rank exported the same model\n", equal ? "ok" : "FAIL",
           rank, sname);
    bad |= !same || !equal;
    shard_destroy(sh);
    printf("%s rank %d %s: every buffer given back after shard_destroy (%ld not)\n",
           live == 0 ? "ok" : "FAIL", rank, sname, live);
    bad |= live != 0;
    weft_comm_destroy(world);
    free(params);
    free(out);
    free(ref);
    return bad;
}
