/*
 * test_algos.c - every registered algorithm against a reference, without transports.
 *
 * Each algorithm x every collective it supports x dtype (float32, float64, int32, int64,
 * bf16, fp16) x op (sum, prod, min, max, avg) x count (0, 1, 17, a few frames, more
 * than a link's staging) x in place or not runs among 1-9, 16, 31, 32 and 64 simulated
 * ranks (comm/simexec.c: the engine's step semantics and kernels, in-memory links with
 * small frames and staging, so pipelines wrap and fill). Every rank's output is compared
 * bit for bit with a reference computed here, and the send buffers of out-of-place
 * calls must come back untouched. At 16 ranks and more a subset (float32, bf16, int64 x
 * sum, avg, max) keeps the run short.
 *
 * The reference reduces in the order each algorithm promises, so random non-integer
 * data must match exactly (and every rank of an all-reduce therefore holds the same
 * bits): direct folds ranks 0, 1, ..., n-1; the ring reduces all-reduce block b from
 * rank b around the ring, reduce-scatter block b from rank b+1, and its chain reduce
 * from root+1; cma reduces block b from rank b; the tree reduces each half up its tree
 * (algo_tree_links: own data, then child 0's subtree, then child 1's); rhd folds pairs
 * into p = 2^k partials and combines partial v with v+d for d = p/2 down to 1. Operands are commuted freely: IEEE
 * addition, multiplication, min and max of non-NaN values are commutative, and fp16/
 * bf16 are widened, reduced and rounded once per step either way. AVG divides at the
 * last step, as the algorithms do.
 *
 * Also: the tuner's choice (algo_pick) against the table weft had before algorithms
 * registered themselves, at 1-64 ranks on one and on two hosts, under each knob, where
 * that table still holds (2 ranks, up to 4 on one host); beyond, against the model's
 * cheapest among the candidates each rule admits, and at fixed spots where today's
 * model puts direct, tree, rhd and ring (check_model_spots); and the double binary
 * tree's links (check_tree_links): two trees, complementary, the root on top.
 *
 * The matrix runs in two processes where there are two CPUs (half the runs each).
 *
 * Usage: test_algos [-v]; prints one summary line, exits 1 on failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "algo.h"
#include "frame.h"
#include "reduce.h"
#include "simexec.h"
#include "util.h"

static struct { int passed, failed, runs; } T;

#define CHUNK   256             /* frame payload: a multiple of 64 and of every dtype */
#define STAGING 2048            /* bytes a link holds: a frame and a wrap always fit */

static void fail(const char *what, const sim_call_t *c, const char *detail)
{
    if (T.failed++ < 200)
        fprintf(stderr, "FAIL %s: %s %s on %d ranks, %s %s, count %zu%s, root %d: %s\n", what,
                c->algo->name, coll_name(c->args.coll), c->args.nranks,
                weft_dtype_name(c->args.dtype), c->args.op == WEFT_SUM ? "sum" :
                c->args.op == WEFT_PROD ? "prod" : c->args.op == WEFT_MIN ? "min" :
                c->args.op == WEFT_MAX ? "max" : "avg", c->args.count,
                c->args.inplace ? " in place" : "", c->args.root, detail);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int is_reduction(int coll);

/* Random values with full mantissas (so order matters), no NaN, no infinity in sums;
 * products stay near 1 so 64 factors neither overflow nor underflow fp16. */
static void fill(void *p, size_t n, weft_dtype_t dt, weft_op_t op)
{
    for (size_t i = 0; i < n; i++) {
        double u = (double)(rnd() >> 11) / 9007199254740992.0;   /* [0, 1) */
        double v = op == WEFT_PROD ? (rnd() & 1 ? -1 : 1) * (0.9 + 0.2 * u) : 4 * u - 2;
        uint64_t r = rnd();
        switch (dt) {
        case WEFT_FLOAT32:  ((float *)p)[i] = (float)v; break;
        case WEFT_FLOAT64:  ((double *)p)[i] = v; break;
        case WEFT_FLOAT16:  ((uint16_t *)p)[i] = kern_float_to_half((float)v); break;
        case WEFT_BFLOAT16: ((uint16_t *)p)[i] = kern_float_to_bf16((float)v); break;
        case WEFT_INT32:    ((uint32_t *)p)[i] = (uint32_t)r; break;
        default:            ((uint64_t *)p)[i] = r; break;
        }
    }
}

/* The layout the simulator gives c's ranks (rank 0's: the shared fields, the map) and
 * the ring order: map and order hold nranks entries. */
static void call_layout(const sim_call_t *c, sched_layout_t *l, int *map, int *order)
{
    int n = c->args.nranks;
    *l = (sched_layout_t){ .nhosts = 1, .per_host = n, .cma = c->cma, .uniform = 1 };
    if (c->host_id) {
        algo_layout(c->host_id, n, 0, c->cma, l);
        algo_host_map(c->host_id, n, map);
        l->rank_host = map;
    }
    algo_ring_order(l, n, order);
}

/* The position in order[] (the ring's rank order, or the identity) whose contribution
 * an algorithm's reduction of block b starts from: the ring reduces all-reduce block b
 * (blocks by ring position) from position b, reduce-scatter block b from the position
 * after rank b's, the chain reduce from the position after the root's. */
static int fold_start(const sim_call_t *c, const int *order, int b)
{
    const char *name = c->algo->name;
    int n = c->args.nranks, pos = 0;
    if (!strcmp(name, "ring") && c->args.coll == COLL_ALLREDUCE)
        return b;
    for (int i = 0; i < n; i++)
        if (order[i] == (c->args.coll == COLL_REDUCE_SCATTER ? b : c->args.root))
            pos = i;
    if (!strcmp(name, "ring"))
        return (pos + 1) % n;       /* reduce-scatter, the chain reduce */
    if (!strcmp(name, "cma"))
        return b;
    return 0;                                   /* direct, local */
}

/* out[0, len) = the reduction of in[q] + off over q, ranks taken in order[] from
 * position `start` around. */
static void fold(char *out, char *const *in, size_t off, size_t len, const sim_call_t *c,
                 const int *order, int start)
{
    int n = c->args.nranks;
    size_t esz = weft_dtype_size(c->args.dtype);
    memcpy(out, in[order[start]] + off, len * esz);
    for (int j = 1; j < n; j++)
        kern_reduce(out, out, in[order[(start + j) % n]] + off, len, c->args.dtype,
                    c->args.op, j == n - 1 ? n : 0);
}

/* hier's hosts: host g's ranks are hr[base[g] .. base[g] + cnt[g]) of the host-major
 * order hr; core: the fewest any host holds. */
typedef struct { int H, core, base[64], cnt[64]; const int *hr; } hosts_t;

static void hier_hosts(const sched_layout_t *l, int n, const int *hr, hosts_t *x)
{
    x->H = l->nhosts;
    x->hr = hr;
    x->core = n;
    memset(x->cnt, 0, sizeof(x->cnt));
    for (int q = 0; q < n; q++)
        x->cnt[l->rank_host[q]]++;
    for (int g = 0, b = 0; g < x->H; b += x->cnt[g++]) {
        x->base[g] = b;
        x->core = x->cnt[g] < x->core ? x->cnt[g] : x->core;
    }
}

/* out = host g's ranks reduced as hier reduces them: P positions from l0 around, position
 * j's value being rank (g, j)'s data with its extras (g, j+P), (g, j+2P), ... folded in
 * (P = the host's count: every rank a position). */
static void hier_host(char *out, char *const *in, size_t off, size_t len, const sim_call_t *c,
                      const hosts_t *x, int g, int P, int l0)
{
    size_t esz = weft_dtype_size(c->args.dtype);
    char *v = malloc(len * esz + 1);
    for (int i = 0; i < P; i++) {
        int j = (l0 + i) % P;
        memcpy(v, in[x->hr[x->base[g] + j]] + off, len * esz);
        for (int e = j + P; e < x->cnt[g]; e += P)
            kern_reduce(v, v, in[x->hr[x->base[g] + e]] + off, len, c->args.dtype,
                        c->args.op, 0);
        if (i)
            kern_reduce(out, out, v, len, c->args.dtype, c->args.op, 0);
        else
            memcpy(out, v, len * esz);
    }
    free(v);
}

/* out = hier's reduction: each host's value (hier_host, P positions, host g's from
 * l0[g]; P 0: all of the host's ranks), then the host values from host h0 around. */
static void hier_fold(char *out, char *const *in, size_t off, size_t len, const sim_call_t *c,
                      const hosts_t *x, int P, int h0, const int *l0)
{
    size_t esz = weft_dtype_size(c->args.dtype);
    char *tmp = malloc(len * esz + 1);
    for (int i = 0; i < x->H; i++) {
        int g = (h0 + i) % x->H;
        hier_host(i ? tmp : out, in, off, len, c, x, g, P ? P : x->cnt[g], l0[g]);
        if (i)
            kern_reduce(out, out, tmp, len, c->args.dtype, c->args.op,
                        i == x->H - 1 ? c->args.nranks : 0);
    }
    free(tmp);
}

/* ref[q] of hier's all-reduce (shard j of the core's P, its sub-block t of H: from local
 * rank j, from host t), reduce-scatter (rank (h, l)'s block: from local rank l+1, host
 * h+1) and reduce (in H pieces: around each host from local rank head+1, the heads from
 * host hroot+1, a host's head being its local rank lroot mod its count). */
static void hier_reference(const sim_call_t *c, char *const *in, char **ref, const int *hr,
                           const sched_layout_t *l)
{
    int n = c->args.nranks, l0[64];
    hosts_t x;
    hier_hosts(l, n, hr, &x);
    int H = x.H, P = x.core;
    size_t cnt = c->args.count, esz = weft_dtype_size(c->args.dtype);
    if (c->args.coll == COLL_REDUCE) {
        int hroot = l->rank_host[c->args.root], lroot = 0;
        while (hr[x.base[hroot] + lroot] != c->args.root)
            lroot++;
        for (int g = 0; g < H; g++)
            l0[g] = (lroot % x.cnt[g] + 1) % x.cnt[g];
        for (int t = 0; t < H; t++) {
            size_t o, len;
            sched_block(cnt, H, t, &o, &len);
            hier_fold(ref[c->args.root] + o * esz, in, o * esz, len, c, &x, 0, hroot + 1, l0);
        }
        return;
    }
    for (int q = 0; q < n; q++) {
        if (c->args.coll == COLL_ALLREDUCE) {
            for (int j = 0; j < P; j++) {
                size_t so, sl, o, len;
                sched_block(cnt, P, j, &so, &sl);
                for (int g = 0; g < H; g++)
                    l0[g] = j;
                for (int t = 0; t < H; t++) {
                    sched_block(sl, H, t, &o, &len);
                    hier_fold(ref[q] + (so + o) * esz, in, (so + o) * esz, len, c, &x, P, t,
                              l0);
                }
            }
        } else {
            int i = 0;
            while (hr[i] != q)
                i++;
            for (int g = 0; g < H; g++)
                l0[g] = (i % P + 1) % P;
            hier_fold(ref[q], in, (size_t)q * cnt * esz, cnt, c, &x, P, i / P + 1, l0);
        }
    }
}

/* out[0, len) = the value of `node`'s subtree in tree t (root -1: an all-reduce's):
 * its own data, then child 0's value, then child 1's reduced in; AVG divides at the
 * top's last reduction. */
static void tree_value(const sim_call_t *c, char *const *in, int t, int node, size_t off,
                       size_t len, char *out)
{
    int n = c->args.nranks, parent, child[2], root = c->args.coll == COLL_ALLREDUCE ? -1 :
                                                      c->args.root;
    size_t esz = weft_dtype_size(c->args.dtype);
    algo_tree_links_root(node, n, t, root, &parent, child);
    memcpy(out, in[node] + off, len * esz);
    char *sub = malloc(len * esz + 1);
    for (int k = 0; k < 2; k++) {
        if (child[k] < 0)
            continue;
        tree_value(c, in, t, child[k], off, len, sub);
        int last = parent < 0 && (k == 1 || child[1] < 0);
        kern_reduce(out, out, sub, len, c->args.dtype, c->args.op, last ? n : 0);
    }
    free(sub);
}

/* out[0, len) = the tree's result: half t from tree t's top. */
static void tree_result(const sim_call_t *c, char *const *in, char *out)
{
    int n = c->args.nranks;
    size_t esz = weft_dtype_size(c->args.dtype);
    for (int t = 0; t < 2; t++) {
        size_t off, len;
        int top = c->args.root;
        sched_block(c->args.count, 2, t, &off, &len);
        for (int q = 0; c->args.coll == COLL_ALLREDUCE && q < n; q++) {
            int parent, child[2];
            algo_tree_links(q, n, t, &parent, child);
            if (parent < 0)
                top = q;
        }
        tree_value(c, in, t, top, off * esz, len, out + off * esz);
    }
}

/* out[0, len) = rhd's reduction of in[q] + off: the ranks past 2(n-p) and the folded
 * pairs (x[2v] op x[2v+1]) make p partials; partial[v] op= partial[v + d] for d = p/2
 * down to 1 (AVG divides at the last). */
static void rhd_result(const sim_call_t *c, char *const *in, size_t off, size_t len,
                       char *out)
{
    int n = c->args.nranks, p = 1;
    size_t esz = weft_dtype_size(c->args.dtype);
    while (p * 2 <= n)
        p *= 2;
    char *part[64] = { 0 };
    for (int v = 0; v < p; v++) {
        part[v] = malloc(len * esz + 1);
        if (v < n - p)
            kern_reduce(part[v], in[2 * v] + off, in[2 * v + 1] + off, len, c->args.dtype,
                        c->args.op, 0);
        else
            memcpy(part[v], in[v + n - p] + off, len * esz);
    }
    for (int d = p / 2; d >= 1; d /= 2)
        for (int v = 0; v < d; v++)
            kern_reduce(part[v], part[v], part[v + d], len, c->args.dtype, c->args.op,
                        d == 1 ? n : 0);
    memcpy(out, part[0], len * esz);
    for (int v = 0; v < p; v++)
        free(part[v]);
}

/* ref[q]: what rank q's receive buffer must hold (NULL: not checked). */
/* The ring with channels (algo_ring.c): channel ch reduces its slice of the buffer (of
 * every rank's block, for reduce-scatter) around the ring order, reversed on odd
 * channels, each block from the position the one-channel ring starts it at. */
static void ring_channels_reference(const sim_call_t *c, char *const *in, char **ref)
{
    int n = c->args.nranks, root = c->args.root, nch = ring_channels(&c->args);
    int map[64], ring[64], rev[64];
    size_t cnt = c->args.count, esz = weft_dtype_size(c->args.dtype), blk = cnt * esz;
    sched_layout_t l;
    call_layout(c, &l, map, ring);
    for (int i = 0; i < n; i++)
        rev[i] = ring[n - 1 - i];
    for (int ch = 0; ch < nch; ch++) {
        const int *o = ch % 2 ? rev : ring;
        size_t eoff, elen;
        sched_block(cnt, nch, ch, &eoff, &elen);
        for (int q = 0; q < n; q++) {
            int pq = 0, pr = 0;
            for (int i = 0; i < n; i++) {
                pq = o[i] == q ? i : pq;
                pr = o[i] == root ? i : pr;
            }
            if (c->args.coll == COLL_ALLREDUCE) {
                for (int b = 0; b < n; b++) {
                    size_t off, len;
                    sched_block(elen, n, b, &off, &len);
                    fold(ref[q] + (eoff + off) * esz, in, (eoff + off) * esz, len, c, o, b);
                }
            } else if (c->args.coll == COLL_REDUCE_SCATTER) {
                fold(ref[q] + eoff * esz, in, (size_t)q * blk + eoff * esz, elen, c, o,
                     (pq + 1) % n);
            } else if (c->args.coll == COLL_REDUCE && q == root) {
                fold(ref[q] + eoff * esz, in, eoff * esz, elen, c, o, (pr + 1) % n);
            }
        }
    }
}

static void reference(const sim_call_t *c, char *const *in, char **ref)
{
    if (!strcmp(c->algo->name, "ring") && ring_channels(&c->args) > 1 &&
        is_reduction(c->args.coll)) {
        ring_channels_reference(c, in, ref);
        return;
    }
    int n = c->args.nranks, root = c->args.root, map[64], ring[64], ident[64];
    size_t cnt = c->args.count, esz = weft_dtype_size(c->args.dtype), blk = cnt * esz;
    sched_layout_t l;
    call_layout(c, &l, map, ring);
    for (int q = 0; q < n; q++)
        ident[q] = q;
    const int *order = strcmp(c->algo->name, "ring") ? ident : ring;
    if (!strcmp(c->algo->name, "hier") && is_reduction(c->args.coll)) {
        hier_reference(c, in, ref, ring, &l);   /* the ring order is hier's host-major */
        return;
    }
    int tree = !strcmp(c->algo->name, "tree"), rhd = !strcmp(c->algo->name, "rhd");
    for (int q = 0; q < n; q++) {
        switch (c->args.coll) {
        case COLL_ALLREDUCE:
            if ((tree || rhd) && q > 0) {       /* the same bits on every rank */
                memcpy(ref[q], ref[0], blk);
                break;
            }
            if (tree)
                tree_result(c, in, ref[q]);
            if (rhd)
                rhd_result(c, in, 0, cnt, ref[q]);
            for (int b = 0; b < n && !tree && !rhd; b++) {
                size_t off, len;
                sched_block(cnt, n, b, &off, &len);
                fold(ref[q] + off * esz, in, off * esz, len, c, order,
                     fold_start(c, order, b));
            }
            break;
        case COLL_REDUCE_SCATTER:
            if (rhd)
                rhd_result(c, in, (size_t)q * blk, cnt, ref[q]);
            else
                fold(ref[q], in, (size_t)q * blk, cnt, c, order, fold_start(c, order, q));
            break;
        case COLL_REDUCE:
            if (q == root && tree)
                tree_result(c, in, ref[q]);
            else if (q == root)
                fold(ref[q], in, 0, cnt, c, order, fold_start(c, order, 0));
            break;
        case COLL_ALLGATHER:
            for (int p = 0; p < n; p++)
                memcpy(ref[q] + (size_t)p * blk, in[p], blk);
            break;
        case COLL_BROADCAST: memcpy(ref[q], in[root], blk); break;
        case COLL_ALLTOALL:
            for (int p = 0; p < n; p++)
                memcpy(ref[q] + (size_t)p * blk, in[p] + (size_t)q * blk, blk);
            break;
        default: break;
        }
    }
}

/* Bytes of rank q's input and output buffers as the API lays them out. */
static void sizes(const sim_call_t *c, size_t *in_b, size_t *out_b)
{
    size_t blk = c->args.count * weft_dtype_size(c->args.dtype), n = (size_t)c->args.nranks;
    int coll = c->args.coll;
    *in_b = coll == COLL_REDUCE_SCATTER || coll == COLL_ALLTOALL ? n * blk : blk;
    *out_b = coll == COLL_ALLGATHER || coll == COLL_ALLTOALL ? n * blk : blk;
}

/* Runs c on fresh data and checks every rank's output. */
static void run_one(sim_call_t *c)
{
    int n = c->args.nranks, coll = c->args.coll;
    size_t in_b, out_b, blk = c->args.count * weft_dtype_size(c->args.dtype);
    sizes(c, &in_b, &out_b);
    /* a spare byte past the larger buffer, and recvp (mem + cap) aligned like malloc's */
    size_t cap = ((in_b > out_b ? in_b : out_b) + 1 + 63) / 64 * 64;
    char *in[64], *ref[64], *sendp[64], *recvp[64], *mem[64];
    for (int q = 0; q < n; q++) {
        in[q] = malloc(cap);
        ref[q] = malloc(cap);
        mem[q] = malloc(2 * cap);
        fill(in[q], in_b / weft_dtype_size(c->args.dtype), c->args.dtype, c->args.op);
        memset(mem[q], 0xa5, 2 * cap);
        sendp[q] = mem[q];
        recvp[q] = mem[q] + cap;
        if (c->args.inplace && coll == COLL_REDUCE_SCATTER)
            recvp[q] = sendp[q] + (size_t)q * blk;
        else if (c->args.inplace && coll == COLL_ALLGATHER)
            sendp[q] = (recvp[q] = mem[q]) + (size_t)q * blk;
        else if (c->args.inplace)
            recvp[q] = sendp[q];
        memcpy(sendp[q], in[q], in_b);
        if (coll != COLL_REDUCE && coll != COLL_BARRIER)
            memcpy(ref[q], recvp[q], out_b);    /* what is not written must stay */
    }
    if (strcmp(c->algo->name, "probe") != 0)  /* the probe only exchanges addresses */
        reference(c, in, ref);
    T.runs++;
    weft_status_t st = simexec_run(c, (const void *const *)sendp, (void *const *)recvp);
    if (st != WEFT_OK) {
        fail("run", c, weft_last_error());
    } else {
        int ok = 1;
        for (int q = 0; q < n && ok; q++) {
            int checked = coll != COLL_BARRIER && (coll != COLL_REDUCE || q == c->args.root);
            if (checked && memcmp(recvp[q], ref[q], out_b) != 0) {
                char d[64];
                snprintf(d, sizeof(d), "rank %d's result differs from the reference", q);
                fail("result", c, d);
                ok = 0;
            } else if (!c->args.inplace && memcmp(sendp[q], in[q], in_b) != 0) {
                char d[64];
                snprintf(d, sizeof(d), "rank %d's send buffer was written", q);
                fail("send buffer", c, d);
                ok = 0;
            }
        }
        T.passed += ok;
    }
    for (int q = 0; q < n; q++) {
        free(in[q]);
        free(ref[q]);
        free(mem[q]);
    }
}

/* Point-to-point, whose calls differ by rank: send/recv pairs (even ranks send to the
 * next, which receives; even rank counts), or sendrecv around a ring. from[q]: whose
 * data rank q receives, or -1. */
static void run_send_recv(sim_call_t *c)
{
    int n = c->args.nranks, from[64];
    sched_args_t ra[64];
    for (int q = 0; q < n; q++) {
        ra[q] = c->args;
        ra[q].count2 = c->args.count;
        if (c->args.coll == COLL_SENDRECV) {
            ra[q].root = (q + 1) % n;
            ra[q].peer2 = from[q] = (q + n - 1) % n;
        } else {
            ra[q].coll = q % 2 ? COLL_RECV : COLL_SEND;
            ra[q].root = q % 2 ? q - 1 : q + 1;
            from[q] = q % 2 ? q - 1 : -1;
        }
    }
    c->rank_args = ra;
    size_t blk = c->args.count * weft_dtype_size(c->args.dtype);
    char *buf[64], *out[64];
    for (int q = 0; q < n; q++) {
        buf[q] = malloc(blk + 1);
        out[q] = calloc(1, blk + 1);
        fill(buf[q], c->args.count, c->args.dtype, WEFT_SUM);
    }
    T.runs++;
    weft_status_t st = simexec_run(c, (const void *const *)buf, (void *const *)out);
    int ok = st == WEFT_OK;
    if (!ok)
        fail("run", c, weft_last_error());
    for (int q = 0; ok && q < n; q++) {
        if (from[q] >= 0 && memcmp(out[q], buf[from[q]], blk) != 0) {
            fail("result", c, "a receive differs from what was sent");
            ok = 0;
        }
    }
    T.passed += ok;
    c->rank_args = NULL;
    for (int q = 0; q < n; q++) {
        free(buf[q]);
        free(out[q]);
    }
}

static const weft_dtype_t DTYPES[] = { WEFT_FLOAT32, WEFT_FLOAT64, WEFT_INT32, WEFT_INT64,
                                       WEFT_BFLOAT16, WEFT_FLOAT16 };
static const weft_op_t OPS[] = { WEFT_SUM, WEFT_PROD, WEFT_MIN, WEFT_MAX, WEFT_AVG };
static const int RANKS[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 31, 32, 64 };
static int NCHANNELS = 1;       /* the ring's channels in run_algo (main sets them) */

static int is_reduction(int coll)
{
    return coll == COLL_ALLREDUCE || coll == COLL_REDUCE_SCATTER || coll == COLL_REDUCE;
}

/* The subset at 16 ranks and more. */
static int in_subset(int n, weft_dtype_t dt, weft_op_t op)
{
    return n < 16 || ((dt == WEFT_FLOAT32 || dt == WEFT_BFLOAT16 || dt == WEFT_INT64) &&
                      (op == WEFT_SUM || op == WEFT_AVG || op == WEFT_MAX));
}

/* Every count of the matrix for one call shape. */
static void run_counts(sim_call_t *c, int p2p)
{
    size_t esz = weft_dtype_size(c->args.dtype);
    size_t counts[] = { 0, 1, 17, 3 * CHUNK / esz + 5, 2 * STAGING / esz + 7 };
    for (size_t k = 0; k < WEFT_ARRAY_LEN(counts); k++) {
        c->args.count = counts[k];
        c->args.root = (int)(k * 7 + 1) % c->args.nranks;
        c->root_check = (int)(k & 1);   /* rooted schedules with and without the check (the
                                           default, auto, leaves these sizes unchecked) */
        if (p2p)
            run_send_recv(c);
        else
            run_one(c);
    }
}

/* al on n ranks on one host (host_id NULL) or on the hosts host_id[0..n-1] says. */
static void run_algo(const algo_t *al, int n, const uint64_t *host_id)
{
    sim_call_t c = { .algo = al, .cma = !host_id, .root_check = 1, .staging = STAGING,
                     .host_id = host_id, .check_keep = 1 };
    int map[64], order[64];
    c.args.nranks = n;
    c.args.chunk = CHUNK;
    c.args.nchannels = NCHANNELS;
    call_layout(&c, &c.args.layout, map, order);    /* what supports() sees */
    for (int coll = COLL_ALLREDUCE; coll < COLL_NUM; coll++) {
        int p2p = coll == COLL_SEND || coll == COLL_RECV || coll == COLL_SENDRECV;
        if (coll == COLL_RECV || (coll == COLL_SEND && n % 2))
            continue;                           /* run with its sends; pairs */
        for (int reg = SCHED_REG_ASK; reg <= SCHED_REG_ALL; reg++) {
            c.args.coll = coll;
            c.args.reg = reg;
            if (!al->supports(&c.args) || (reg != SCHED_REG_ASK && strcmp(al->name, "cma")))
                continue;
            for (size_t d = 0; d < WEFT_ARRAY_LEN(DTYPES); d++)
                for (size_t o = 0; o < WEFT_ARRAY_LEN(OPS); o++)
                    for (int inplace = 0; inplace < 2; inplace++) {
                        c.args.dtype = DTYPES[d];
                        c.args.op = OPS[o];
                        c.args.inplace = inplace && !p2p;
                        if ((!is_reduction(coll) && o > 0) || (c.args.inplace != inplace) ||
                            !in_subset(n, DTYPES[d], OPS[o]))
                            continue;
                        run_counts(&c, p2p);
                    }
        }
    }
}

/* ---- the tuner's choice against its documented table (tuner.c) ---- */

static const char *table_pick(const weft_config_t *cfg, const sched_args_t *a)
{
    size_t bytes = algo_rank_bytes(a);
    if (a->nranks == 1)
        return "local";
    if (a->coll == COLL_SEND || a->coll == COLL_RECV || a->coll == COLL_SENDRECV)
        return "p2p";
    if (a->coll == COLL_ALLTOALL || (a->coll == COLL_BARRIER && algo_few_ranks(a)))
        return "direct";
    if (a->coll == COLL_BARRIER) {
        /* beyond few ranks the model weighs direct against rhd's dissemination, each
         * within its window: direct up to WEFT_DIRECT_MAX, rhd up to 1M per rank (a real
         * barrier's count is 0, but check_tuner's loop gives every call every count);
         * outside both, the cheaper of the two */
        algo_model_t m;
        algo_model_default(&m);
        double d = algo_direct_def.cost(a, &m), r = algo_rhd_def.cost(a, &m);
        int din = bytes <= cfg->direct_max, rin = bytes <= (1u << 20);
        if (din && (!rin || d <= r))
            return "direct";
        if (rin)
            return "rhd";
        return d <= r ? "direct" : "rhd";
    }
    int cma = a->layout.cma && (a->coll == COLL_ALLREDUCE || a->coll == COLL_REDUCE_SCATTER ||
                                a->coll == COLL_ALLGATHER || a->coll == COLL_BROADCAST);
    if (a->reg == SCHED_REG_ALL)
        return "cma";
    size_t ag_cma = cma && a->coll == COLL_ALLGATHER && !cfg->cma_min && !a->layout.cma_min
                        ? (a->layout.cma_slow ? 0 : a->layout.cma_blocks ? 32u << 10
                                                                         : 256u << 10)
                        : 0;    /* all-gather: single copy from 32K (shm), else 256K;
                                   never where reads are slow or emulated over a network */
    if (bytes <= cfg->direct_max && algo_few_ranks(a) && !(ag_cma && bytes >= ag_cma))
        return "direct";
    if (a->reg == SCHED_REG_ASK && cma && a->coll != COLL_BROADCAST && cfg->reg_min &&
        bytes >= cfg->reg_min)
        return "probe";
    /* 2 ranks whose cores share no cache: all-reduce from 512K, reduce-scatter from 64K
     * per rank, unless WEFT_CMA_MIN or a transport set a threshold */
    size_t far_cma = cma && a->layout.far && a->nranks == 2 && !cfg->cma_min &&
                     !a->layout.cma_min ? (a->coll == COLL_ALLREDUCE ? 512u << 10 :
                                           a->coll == COLL_REDUCE_SCATTER ? 64u << 10 : 0)
                                        : 0;
    size_t cma_min = cfg->cma_min ? cfg->cma_min : a->layout.cma_min ? a->layout.cma_min
                                                 : ag_cma ? ag_cma : far_cma;
    if (cma && cma_min && bytes >= cma_min)
        return "cma";
    if (algo_few_ranks(a))
        return "ring";
    /* beyond few ranks the model weighs direct (up to WEFT_DIRECT_MAX), the tree
     * (all-reduce, reduce, broadcast), rhd (all-reduce; reduce-scatter and all-gather at
     * a power of two; up to 1M) and the ring */
    algo_model_t m;
    algo_model_default(&m);
    int pow2 = (a->nranks & (a->nranks - 1)) == 0;
    int rooted = a->coll == COLL_REDUCE || a->coll == COLL_BROADCAST;
    const char *best = "ring";
    double best_cost = algo_ring_def.cost(a, &m);
    if ((a->coll == COLL_ALLREDUCE || rooted) && algo_tree_def.cost(a, &m) < best_cost)
        best = "tree", best_cost = algo_tree_def.cost(a, &m);
    if ((a->coll == COLL_ALLREDUCE || (pow2 && !rooted)) && bytes <= (1u << 20) &&
        algo_rhd_def.cost(a, &m) < best_cost)
        best = "rhd", best_cost = algo_rhd_def.cost(a, &m);
    if (algo_hier_def.supports(a) && algo_hier_def.cost(a, &m) < best_cost)
        best = "hier", best_cost = algo_hier_def.cost(a, &m);
    if (bytes <= cfg->direct_max && algo_direct_def.cost(a, &m) <= best_cost)
        best = "direct";
    return best;
}

/* Where the model's choices fall today, so a change to a cost function shows: one
 * host unless said, 1-byte elements. */
static void check_model_spots(void)
{
    static const struct { int coll, n, hosts; size_t bytes; const char *want; } spots[] = {
        /* direct's 63 frames each way through every rank cost more than rhd's 12 hops
         * (the model's overhead; "direct" before 2026-11-28) */
        { COLL_ALLREDUCE, 64, 1, 64, "rhd" },
        { COLL_ALLREDUCE, 512, 64, 8, "rhd" },              /* direct: 511 frames */
        { COLL_BARRIER, 5, 1, 0, "direct" },
        { COLL_BARRIER, 64, 1, 0, "rhd" },                  /* dissemination */
        { COLL_BARRIER, 16, 4, 0, "direct" },
        { COLL_BARRIER, 64, 8, 0, "rhd" },
        { COLL_ALLREDUCE, 64, 1, 4096, "rhd" },
        { COLL_ALLREDUCE, 64, 1, 4 << 20, "tree" },
        { COLL_ALLREDUCE, 64, 1, 64 << 20, "ring" },
        { COLL_ALLREDUCE, 5, 1, 8192, "tree" },
        { COLL_ALLREDUCE, 5, 1, 1 << 20, "ring" },
        { COLL_ALLREDUCE, 8, 2, 65536, "rhd" },
        { COLL_ALLREDUCE, 4, 1, 8192, "direct" },           /* few ranks: as before */
        { COLL_ALLREDUCE, 4, 1, 65536, "ring" },
        { COLL_ALLREDUCE, 2, 2, 65536, "ring" },
        { COLL_REDUCE, 16, 1, 1 << 20, "tree" },
        { COLL_BROADCAST, 8, 2, 16384, "tree" },
        { COLL_REDUCE_SCATTER, 16, 1, 1 << 16, "rhd" },
        { COLL_REDUCE_SCATTER, 12, 1, 1 << 16, "ring" },    /* not a power of two */
        { COLL_ALLGATHER, 8, 1, 4 << 20, "ring" },
    };
    weft_config_t cfg;
    algo_model_t m;
    cfg_defaults(&cfg);
    cfg.cma_min = 1u << 30;         /* the model's choices, not the single-copy window */
    algo_model_default(&m);
    for (size_t i = 0; i < WEFT_ARRAY_LEN(spots); i++) {
        sched_args_t a = { .coll = spots[i].coll, .nranks = spots[i].n, .count = spots[i].bytes,
                           .dtype = WEFT_UINT8, .reg = SCHED_REG_NONE };
        a.layout = (sched_layout_t){ .nhosts = spots[i].hosts,
                                     .per_host = spots[i].n / spots[i].hosts };
        double cost;
        const algo_t *al = algo_pick(&cfg, &m, &a, &cost);
        if (al && !strcmp(al->name, spots[i].want)) {
            T.passed++;
        } else if (T.failed++ < 20) {
            fprintf(stderr, "FAIL model: %s on %d ranks (%d hosts), %zu bytes: %s, want %s\n",
                    coll_name(a.coll), a.nranks, spots[i].hosts, a.count,
                    al ? al->name : "none", spots[i].want);
        }
    }
}

/* The same with a host map (hosts of ranks in blocks, as many on each): hier wherever
 * the model gives it the size, the others keep theirs. */
static void check_hier_spots(void)
{
    static const struct { int coll, n, hosts; size_t bytes; const char *want; } spots[] = {
        { COLL_ALLREDUCE, 8, 2, 1024, "direct" },
        { COLL_ALLREDUCE, 8, 2, 65536, "hier" },
        { COLL_ALLREDUCE, 64, 8, 4096, "rhd" },
        { COLL_ALLREDUCE, 64, 8, 64 << 20, "hier" },
        { COLL_REDUCE_SCATTER, 4, 2, 1 << 20, "hier" },
        { COLL_ALLGATHER, 16, 4, 1 << 20, "hier" },
        { COLL_BROADCAST, 8, 2, 1 << 20, "hier" },
        { COLL_BROADCAST, 64, 8, 1 << 20, "tree" },
        { COLL_REDUCE, 8, 2, 65536, "hier" },
        { COLL_REDUCE, 8, 2, 1 << 20, "tree" },     /* a third of the tree's hops cross */
    };
    weft_config_t cfg;
    algo_model_t m;
    int map[64];
    cfg_defaults(&cfg);
    algo_model_default(&m);
    for (size_t i = 0; i < WEFT_ARRAY_LEN(spots); i++) {
        sched_args_t a = { .coll = spots[i].coll, .nranks = spots[i].n, .count = spots[i].bytes,
                           .dtype = WEFT_UINT8, .reg = SCHED_REG_NONE };
        int per = spots[i].n / spots[i].hosts;
        for (int p = 0; p < spots[i].n; p++)
            map[p] = p / per;
        a.layout = (sched_layout_t){ .nhosts = spots[i].hosts, .per_host = per, .uniform = 1,
                                     .rank_host = map };
        double cost;
        const algo_t *al = algo_pick(&cfg, &m, &a, &cost);
        if (al && !strcmp(al->name, spots[i].want)) {
            T.passed++;
        } else if (T.failed++ < 20) {
            fprintf(stderr, "FAIL model (mapped): %s on %d ranks (%d hosts), %zu bytes: %s, "
                    "want %s\n", coll_name(a.coll), a.nranks, spots[i].hosts, a.count,
                    al ? al->name : "none", spots[i].want);
        }
    }
}

static void check_tuner(void)
{
    weft_config_t cfgs[6];      /* 4: the defaults again, on a host whose reads are slow;
                                   5: on cores that share no cache (so 1 and 2 too) */
    algo_model_t m;
    algo_model_default(&m);
    for (int k = 0; k < 6; k++)
        cfg_defaults(&cfgs[k]);
    cfgs[1].cma_min = 1 << 20;
    cfgs[2].direct_max = 0;
    cfgs[2].reg_min = 4 << 20;
    cfgs[3].direct_max = 1 << 20;
    cfgs[3].cma_min = 256 << 10;
    int map[64];                /* with a map: hosts of ranks in blocks of per_host */
    for (int k = 0; k < 6; k++)
        for (int n = 1; n <= 64; n++)
            for (int hosts = 1; hosts <= 4; hosts++)
                for (int withmap = 0; withmap < 2; withmap++)
                for (int coll = COLL_ALLREDUCE; coll < COLL_NUM; coll++)
                    for (int reg = SCHED_REG_ASK; reg <= SCHED_REG_NONE; reg++)
                        for (int sh = -1; sh <= 30; sh++) {
                            sched_args_t a = { .coll = coll, .nranks = n, .reg = reg,
                                               .dtype = WEFT_UINT8 };
                            a.count = sh < 0 ? 0 : (size_t)1 << sh;
                            int per = (n + hosts - 1) / hosts;
                            if (hosts > n || (hosts > 2 && !withmap))
                                continue;
                            a.layout = (sched_layout_t){ .nhosts = hosts, .cma = hosts == 1,
                                                         .cma_blocks = hosts == 1 && withmap,
                                                         /* slow reads: shm's (with a
                                                            map) or a network's (ucx) */
                                                         .cma_slow = hosts == 1 && k == 4,
                                                         /* set for any n: only 2 count */
                                                         .far = hosts == 1 && withmap &&
                                                                (k == 5 || k == 1 || k == 2),
                                                         .per_host = per,
                                                         .uniform = n % hosts == 0,
                                                         .cma_min = hosts == 1 && k == 2 ?
                                                                    512u << 10 : 0 };
                            for (int p = 0; p < n; p++)
                                map[p] = p / per;
                            a.layout.rank_host = withmap ? map : NULL;
                            double cost;
                            int probed = a.layout.cma && (coll == COLL_ALLREDUCE ||
                                         coll == COLL_REDUCE_SCATTER || coll == COLL_ALLGATHER);
                            if (reg == SCHED_REG_ALL && !probed)
                                continue;       /* only a probe's answer sets it */
                            const algo_t *al = algo_pick(&cfgs[k], &m, &a, &cost);
                            const char *want = table_pick(&cfgs[k], &a);
                            if (al == NULL || strcmp(al->name, want) != 0) {
                                if (T.failed++ < 20)
                                    fprintf(stderr, "FAIL tuner: config %d, %s on %d ranks "
                                            "(%d hosts%s), reg %d, %zu bytes: %s, want %s\n",
                                            k, coll_name(coll), n, hosts,
                                            withmap ? ", mapped" : "", reg, a.count,
                                            al ? al->name : "none", want);
                            } else {
                                T.passed++;
                            }
                        }
}

/* sched_mark_keep where the answer is known (simexec's check_keep only sees flags that
 * are wrongly set, not ones wrongly left off): rank 0's sends, and how many may keep. */
static void keep_count(const char *name, int coll, int n, int inplace, int *sends, int *keeps)
{
    sched_args_t a = { .coll = coll, .rank = 0, .nranks = n, .count = 4096, .root = -1,
                       .dtype = WEFT_FLOAT32, .op = WEFT_SUM, .inplace = inplace,
                       .chunk = CHUNK, .reg = SCHED_REG_NONE, .nchannels = 1 };
    a.layout = (sched_layout_t){ .nhosts = 1, .per_host = n, .uniform = 1 };
    sched_t s;
    *sends = *keeps = -1;
    if (algo_build(algo_find(name), &a, 0, &s) != WEFT_OK)
        return;
    sched_mark_keep(&s, inplace);
    *sends = *keeps = 0;
    for (int i = 0; i < s.nsteps; i++)
        if (s.steps[i].kind == STEP_SEND) {
            (*sends)++;
            *keeps += s.steps[i].keep;
        }
    sched_free(&s);
}

/* Every knob's default in common/config.c parses (WEFT_IB_GID_INDEX's "-1" did not, and
 * the auto GID choice never ran), and the GID index is auto. */
static void check_config_defaults(void)
{
    weft_config_t cfg;
    const char *bad = cfg_defaults(&cfg);
    if (bad == NULL && cfg.ib_gid_index == -1) {
        T.passed++;
    } else {
        T.failed++;
        fprintf(stderr, "FAIL config defaults: %s%s; WEFT_IB_GID_INDEX %ld (want -1, auto)\n",
                bad ? bad : "every default parses", bad ? "'s default does not parse" : "",
                cfg.ib_gid_index);
    }
}

/* The knobs every rank must set alike (connect_all compares their hashes): each names a
 * row of the table; one value spelled two ways hashes alike, two values differently. */
static void check_config_agree(void)
{
    weft_config_t a, b;
    cfg_agree_t ha, hb;
    char val[64];
    cfg_defaults(&a);
    int n = cfg_agree_hash(&a, &ha), bad = n < 7 || n > CFG_AGREE_MAX;
    for (int i = 0; i < n && !bad; i++)
        bad = cfg_agree_name(i, &a, val, sizeof(val)) == NULL || ha.h[i] == 0;
    bad |= cfg_agree_name(n, &a, val, sizeof(val)) != NULL;
    b = a;
    b.cma_min = 65536;      /* WEFT_CMA_MIN=64K on one rank, 65536 on the other */
    a.cma_min = 64 << 10;
    cfg_agree_hash(&a, &ha);
    cfg_agree_hash(&b, &hb);
    bad |= memcmp(&ha, &hb, sizeof(ha)) != 0;
    snprintf(b.algo, sizeof(b.algo), "ring");
    b.nchannels = 2;
    cfg_agree_hash(&b, &hb);
    int differ = 0;
    for (int i = 0; i < n; i++)
        if (ha.h[i] != hb.h[i]) {
            const char *name = cfg_agree_name(i, &a, val, sizeof(val));
            differ += name && (!strcmp(name, "WEFT_ALGO") || !strcmp(name, "WEFT_NCHANNELS"));
        }
    bad |= differ != 2;
    if (!bad) {
        T.passed++;
    } else {
        T.failed++;
        fprintf(stderr, "FAIL config agreement: %d knobs, %d of WEFT_ALGO/WEFT_NCHANNELS "
                "seen to differ\n", n, differ);
    }
}

/* WEFT_ROOT_CHECK=auto: a rooted call of fewer than ALGO_ROOT_CHECK_AUTO_MIN bytes is
 * built as with 0 (no empty check frames), one of that many as with 1, on every rank of
 * every algorithm that runs it; other collectives never get the check. */
static int empty_frames(const algo_t *al, const sched_args_t *a, int root_check, int *nsteps)
{
    sched_t s;
    if (algo_build(al, a, root_check, &s) != WEFT_OK)
        return -1;
    int k = 0;
    for (int i = 0; i < s.nsteps; i++)
        k += (s.steps[i].kind == STEP_SEND || s.steps[i].kind == STEP_RECV) &&
             s.steps[i].len == 0;
    *nsteps = s.nsteps;
    sched_free(&s);
    return k;
}

static void check_root_check_auto(void)
{
    static const int colls[] = { COLL_BROADCAST, COLL_REDUCE, COLL_ALLREDUCE };
    int bad = 0, runs = 0;
    for (int k = 0; algo_registry[k]; k++)
        for (size_t ci = 0; ci < WEFT_ARRAY_LEN(colls); ci++)
            for (int n = 2; n <= 5; n++)
                for (int rank = 0; rank < n; rank++)
                    for (int big = 0; big < 2; big++) {
                        sched_args_t a = { .coll = colls[ci], .rank = rank, .nranks = n,
                                           .dtype = WEFT_FLOAT32, .op = WEFT_SUM,
                                           .root = colls[ci] == COLL_ALLREDUCE ? -1 : n - 1,
                                           .peer2 = -1, .chunk = CHUNK, .nchannels = 1 };
                        a.count = ALGO_ROOT_CHECK_AUTO_MIN / 4 - (big ? 0 : 1);
                        static const uint64_t one_host[5] = { 7, 7, 7, 7, 7 };
                        algo_layout(one_host, n, rank, 0, &a.layout);
                        if (!algo_registry[k]->supports(&a))
                            continue;
                        int s0 = 0, s1 = 0, sa = 0;
                        int e0 = empty_frames(algo_registry[k], &a, 0, &s0);
                        int e1 = empty_frames(algo_registry[k], &a, 1, &s1);
                        int ea = empty_frames(algo_registry[k], &a, -1, &sa);
                        int rooted = colls[ci] != COLL_ALLREDUCE;
                        int want = big ? e1 : e0, want_steps = big ? s1 : s0;
                        runs++;
                        if (e0 < 0 || ea != want || sa != want_steps ||
                            (rooted ? e1 <= e0 : e1 != e0) ||
                            algo_root_checked(-1, &a) != (rooted && big)) {
                            bad = 1;
                            fprintf(stderr, "FAIL root check auto: %s %s, rank %d of %d, %zu "
                                    "bytes: empty frames %d (auto) against %d (0) and %d (1)\n",
                                    algo_registry[k]->name, coll_name(colls[ci]), rank, n,
                                    a.count * 4, ea, e0, e1);
                        }
                    }
    if (!bad && runs > 50) {
        T.passed++;
    } else {
        T.failed++;
        fprintf(stderr, "FAIL root check auto: %d builds compared\n", runs);
    }
}

/* sched_t.peers, which the engine's passes visit in place of every rank: exactly the
 * ranks with a send or receive queue, ascending, for every algorithm, collective and rank
 * (a peer left out would never progress: its call would hang), on hosts of 1-3 ranks and
 * with single copy everywhere (cma and its probe, hier); a probe's are every other rank
 * (the op after it carries its frame numbers on, and its end flushes every peer). */
static void check_sched_peers(void)
{
    static const uint64_t hosts[9] = { 1, 1, 2, 2, 3, 3, 3, 4, 4 };
    int rank_host[9], bad = 0, runs = 0, probes = 0;
    for (int k = 0; algo_registry[k]; k++)
        for (int coll = COLL_ALLREDUCE; coll < COLL_NUM; coll++)
            for (int n = 2; n <= 9; n++)
                for (int rank = 0; rank < n * 2 && !bad; rank++) {
                    int cma = rank >= n, r = rank % n;
                    int p2p = coll == COLL_SEND || coll == COLL_RECV || coll == COLL_SENDRECV;
                    sched_args_t a = { .coll = coll, .rank = r, .nranks = n,
                                       .count = 3 * CHUNK + 5, .dtype = WEFT_FLOAT32,
                                       .op = WEFT_SUM, .chunk = CHUNK, .nchannels = 2,
                                       .reg = SCHED_REG_ASK };
                    a.root = coll == COLL_BROADCAST || coll == COLL_REDUCE || p2p
                             ? (r + 1) % n : -1;
                    a.peer2 = coll == COLL_SENDRECV ? (r + n - 1) % n : -1;
                    a.count2 = coll == COLL_SENDRECV ? a.count : 0;
                    algo_layout(hosts, n, r, cma, &a.layout);
                    algo_host_map(hosts, n, rank_host);
                    a.layout.rank_host = rank_host;
                    if (!algo_registry[k]->supports(&a))
                        continue;
                    sched_t s;
                    if (algo_build(algo_registry[k], &a, 1, &s) != WEFT_OK) {
                        bad = 1;
                        fprintf(stderr, "FAIL sched peers: %s %s: %s\n", algo_registry[k]->name,
                                coll_name(coll), weft_last_error());
                        break;
                    }
                    runs++;
                    int j = 0;
                    for (int p = 0; p < n; p++) {
                        int has = s.head_send[p] >= 0 || s.head_recv[p] >= 0;
                        if (has && (j >= s.npeers || s.peers[j] != p))
                            bad = 1;
                        j += has;
                    }
                    probes += s.probe;
                    if (j != s.npeers || bad || (s.probe && s.npeers != n - 1)) {
                        bad = 1;
                        fprintf(stderr, "FAIL sched peers: %s %s, rank %d of %d%s: %d listed, "
                                "%d with queues\n", algo_registry[k]->name, coll_name(coll),
                                r, n, s.probe ? " (a probe)" : "", s.npeers, j);
                    }
                    sched_free(&s);
                }
    if (!bad && runs > 100 && probes > 0) {
        T.passed++;
    } else {
        T.failed++;
        fprintf(stderr, "FAIL sched peers: %d schedules checked, %d probes\n", runs, probes);
    }
}

static void check_keep_flags(void)
{
    static const struct { const char *algo; int coll, n, inplace, sends, keeps; } K[] = {
        /* out of place: nothing writes the input, nor a result after it is sent */
        { "ring", COLL_ALLREDUCE, 2, 0, 2, 2 },
        { "direct", COLL_ALLGATHER, 3, 0, 2, 2 },
        { "ring", COLL_ALLGATHER, 4, 0, 3, 3 },
        /* 4 ranks: the input and the final blocks keep; the reduce-scatter's partial sums
         * are sent from the output, where the all-gather later lands the final ones */
        { "ring", COLL_ALLREDUCE, 4, 0, 6, 3 },
        /* in place, 2 ranks: the reduce-scatter sends the half that the all-gather then
         * receives into; this rank's reduced half stays */
        { "ring", COLL_ALLREDUCE, 2, 1, 2, 1 },
        /* in place: the forwarded blocks keep; the first send reads the input, which is
         * the output's own block, and any write to the output counts against it */
        { "ring", COLL_ALLGATHER, 4, 1, 3, 2 },
    };
    for (size_t k = 0; k < WEFT_ARRAY_LEN(K); k++) {
        int sends, keeps;
        keep_count(K[k].algo, K[k].coll, K[k].n, K[k].inplace, &sends, &keeps);
        if (sends == K[k].sends && keeps == K[k].keeps) {
            T.passed++;
        } else if (T.failed++ < 20) {
            fprintf(stderr, "FAIL keep flags: %s %s on %d ranks%s: %d sends, %d kept (want "
                    "%d, %d)\n", K[k].algo, coll_name(K[k].coll), K[k].n,
                    K[k].inplace ? " in place" : "", sends, keeps, K[k].sends, K[k].keeps);
        }
    }
}

/* The double binary tree's links at 2-64 ranks, for an all-reduce and rooted at each
 * root: each tree is one tree (children name their parent back, one top, every rank
 * reached from it), the root on top of both when rooted, and a rank interior in one tree
 * is a leaf in the other (n even: every rank; n odd, all-reduce: all but rank 0). */
static void check_tree_links(void)
{
    for (int n = 2; n <= 64; n++) {
        for (int root = -1; root < n; root++) {
            int interior[2][64] = { { 0 } }, ok = 1;
            for (int t = 0; t < 2 && ok; t++) {
                int parent[64], child[64][2], tops = 0, top = -1, seen = 0, stack[64], sp = 0;
                for (int r = 0; r < n; r++) {
                    if (root < 0)
                        algo_tree_links(r, n, t, &parent[r], child[r]);
                    else
                        algo_tree_links_root(r, n, t, root, &parent[r], child[r]);
                    interior[t][r] = child[r][0] >= 0 || child[r][1] >= 0;
                    if (parent[r] < 0)
                        tops++, top = r;
                }
                ok = tops == 1 && (root < 0 || top == root);
                for (int r = 0; r < n && ok; r++)
                    for (int k = 0; k < 2; k++)
                        ok &= child[r][k] < 0 || (child[r][k] < n && child[r][k] != r &&
                                                  parent[child[r][k]] == r);
                if (ok)
                    stack[sp++] = top;
                while (ok && sp > 0) {          /* a walk down from the top */
                    int r = stack[--sp];
                    seen++;
                    for (int k = 0; k < 2; k++)
                        if (child[r][k] >= 0 && sp < 64)
                            stack[sp++] = child[r][k];
                    ok &= seen <= n;
                }
                ok &= seen == n;
            }
            int both = 0;
            for (int r = 0; r < n && ok; r++)
                both += interior[0][r] && interior[1][r];
            if (ok && root < 0)
                ok = both == (n % 2 ? 1 : 0) && (both == 0 || (interior[0][0] && interior[1][0]));
            T.passed += ok;
            if (!ok && T.failed++ < 20)
                fprintf(stderr, "FAIL tree links: %d ranks, root %d: not two complementary "
                        "trees (%d ranks interior in both)\n", n, root, both);
        }
    }
}

/* The layout of ranks on hosts 7, 7, 9, 7, 9 (host ids in rank order). */
static void check_layout(void)
{
    const uint64_t ids[] = { 7, 7, 9, 7, 9 };
    const int host[] = { 0, 0, 1, 0, 1 }, local[] = { 0, 1, 0, 2, 1 };
    const int ring[] = { 0, 1, 3, 2, 4 };
    int map[5], order[5];
    algo_host_map(ids, 5, map);
    for (int r = 0; r < 5; r++) {
        sched_layout_t l;
        algo_layout(ids, 5, r, 0, &l);
        int ok = l.nhosts == 2 && l.per_host == 3 && l.host == host[r] &&
                 l.local_rank == local[r] && !l.uniform && map[r] == host[r];
        T.passed += ok;
        if (!ok && T.failed++ < 20)
            fprintf(stderr, "FAIL layout: rank %d: %d hosts, %d per host, host %d, local "
                    "rank %d, uniform %d, map %d\n", r, l.nhosts, l.per_host, l.host,
                    l.local_rank, l.uniform, map[r]);
        l.rank_host = map;
        algo_ring_order(&l, 5, order);
        ok = !memcmp(order, ring, sizeof(ring));
        T.passed += ok;
        if (!ok && T.failed++ < 20)
            fprintf(stderr, "FAIL ring order: rank %d: %d %d %d %d %d\n", r, order[0],
                    order[1], order[2], order[3], order[4]);
    }
    /* host-contiguous ranks: the identity; round robin over 2 hosts: evens, then odds */
    const uint64_t blocks[] = { 5, 5, 5, 8, 8, 8 }, rr[] = { 5, 8, 5, 8, 5, 8 };
    const int want_rr[] = { 0, 2, 4, 1, 3, 5 }, want_id[] = { 0, 1, 2, 3, 4, 5 };
    for (int k = 0; k < 2; k++) {
        sched_layout_t l;
        int m[6], o[6];
        algo_layout(k ? rr : blocks, 6, 0, 0, &l);
        algo_host_map(k ? rr : blocks, 6, m);
        l.rank_host = m;
        algo_ring_order(&l, 6, o);
        int ok = l.uniform && l.nhosts == 2 && l.per_host == 3 &&
                 !memcmp(o, k ? want_rr : want_id, sizeof(o));
        T.passed += ok;
        if (!ok && T.failed++ < 20)
            fprintf(stderr, "FAIL ring order (%s): %d %d %d %d %d %d\n", k ? "round robin" :
                    "blocks", o[0], o[1], o[2], o[3], o[4], o[5]);
    }
}

/* Multi-host layouts (host ids in rank order): host-contiguous, round robin, mixed, and
 * hosts with unequal rank counts. hier: 2 where hier runs every collective it has, 1
 * where only all-reduce, broadcast and reduce (unequal hosts), 0 where none (one rank on
 * every host). */
static const struct { int n; uint64_t id[16]; int hier; } HOSTS[] = {
    { 4, { 1, 1, 2, 2 }, 2 },
    { 6, { 1, 2, 1, 2, 1, 2 }, 2 },
    { 6, { 1, 2, 3, 1, 2, 3 }, 2 },
    { 8, { 1, 1, 1, 1, 2, 2, 2, 2 }, 2 },
    { 9, { 3, 1, 1, 2, 3, 2, 1, 3, 2 }, 2 },
    { 5, { 1, 1, 1, 2, 2 }, 1 },
    { 5, { 1, 2, 1, 2, 1 }, 1 },
    { 4, { 1, 1, 1, 2 }, 1 },                   /* a core of one rank, two extras on it */
    { 7, { 2, 1, 2, 2, 1, 2, 1 }, 1 },
    { 3, { 1, 2, 3 }, 0 },
    { 16, { 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4 }, 2 },
};

/* Which collectives hier runs on a layout (only multi-host ones with a map). */
static void check_hier_supports(void)
{
    for (size_t i = 0; i <= WEFT_ARRAY_LEN(HOSTS); i++) {
        int n = i < WEFT_ARRAY_LEN(HOSTS) ? HOSTS[i].n : 8, map[64], order[64];
        int want = i < WEFT_ARRAY_LEN(HOSTS) ? HOSTS[i].hier : 0;
        sim_call_t c = { .algo = &algo_hier_def };
        c.host_id = i < WEFT_ARRAY_LEN(HOSTS) ? HOSTS[i].id : NULL;   /* last: one host */
        c.args.nranks = n;
        call_layout(&c, &c.args.layout, map, order);
        int ok = 1;
        for (int coll = COLL_ALLREDUCE; coll < COLL_NUM; coll++) {
            c.args.coll = coll;
            int all = coll == COLL_REDUCE_SCATTER || coll == COLL_ALLGATHER;
            int some = coll == COLL_ALLREDUCE || coll == COLL_BROADCAST || coll == COLL_REDUCE;
            int got = algo_hier_def.supports(&c.args);
            c.args.layout.rank_host = NULL;     /* no map: declines */
            ok &= got == ((all && want == 2) || (some && want >= 1)) &&
                  !algo_hier_def.supports(&c.args);
            c.args.layout.rank_host = c.host_id ? map : NULL;
            if (!ok && T.failed++ < 20)
                fprintf(stderr, "FAIL hier supports %s on layout %zu: %d, want %d\n",
                        coll_name(coll), i, got, want);
            if (!ok)
                break;
        }
        T.passed += ok;
    }
}

/* One run_algo of the matrix: an algorithm at n ranks (host ids, or none), channels. */
typedef struct {
    const algo_t *al;
    int n, channels;
    const uint64_t *host_id;
} job_t;

/* The matrix's runs are shared between two processes where the machine has two CPUs or
 * more (each process the jobs j % workers == index; the child reports its counts through
 * a pipe), so the test takes half the time; failures print from whichever ran them. */
static void run_jobs(const job_t *jobs, size_t njobs, int verbose)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int workers = cpus >= 2 ? 2 : 1, index = 0, fds[2] = { -1, -1 };
    pid_t child = -1;
    fflush(stdout);
    fflush(stderr);
    if (workers == 2 && pipe(fds) == 0 && (child = fork()) == 0) {
        index = 1;
        close(fds[0]);
        memset(&T, 0, sizeof(T));   /* the child counts its own runs only */
    } else if (child > 0) {
        close(fds[1]);
    } else {
        workers = 1;            /* no pipe or no fork: all of it here */
    }
    clock_t t0 = clock();
    for (size_t j = (size_t)index; j < njobs; j += (size_t)workers) {
        NCHANNELS = jobs[j].channels;
        run_algo(jobs[j].al, jobs[j].n, jobs[j].host_id);
        if (verbose && (j + (size_t)workers >= njobs || jobs[j + (size_t)workers].n != jobs[j].n))
            fprintf(stderr, "[%d] %d ranks: %d runs, %.1f s\n", index, jobs[j].n, T.runs,
                    (double)(clock() - t0) / CLOCKS_PER_SEC);
    }
    if (index == 1) {           /* the child: its counts to the parent, and go */
        fflush(stdout);
        ssize_t w = write(fds[1], &T, sizeof(T));
        _exit(w == (ssize_t)sizeof(T) ? 0 : 1);
    }
    if (child > 0) {
        __typeof__(T) c = { 0, 0, 0 };
        ssize_t r = read(fds[0], &c, sizeof(c));
        int status = 0;
        waitpid(child, &status, 0);
        close(fds[0]);
        if (r != (ssize_t)sizeof(c) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("FAIL: the second worker process did not report (status %d)\n", status);
            T.failed++;
        }
        T.passed += c.passed;
        T.failed += c.failed;
        T.runs += c.runs;
    }
}

int main(int argc, char **argv)
{
    int verbose = argc > 1 && !strcmp(argv[1], "-v");
    check_layout();
    check_hier_supports();
    check_hier_spots();
    check_tuner();
    check_model_spots();
    check_tree_links();
    check_keep_flags();
    check_root_check_auto();
    check_sched_peers();
    check_config_defaults();
    check_config_agree();
    static job_t jobs[1024];
    size_t nj = 0;
#define JOB(...) do { if (nj < WEFT_ARRAY_LEN(jobs)) jobs[nj++] = (job_t){ __VA_ARGS__ }; \
                      else T.failed++, printf("FAIL: more than %zu jobs\n", nj); } while (0)
    for (size_t i = 0; i < WEFT_ARRAY_LEN(RANKS); i++)
        for (int k = 0; algo_registry[k]; k++)
            JOB(algo_registry[k], RANKS[i], 1, NULL);
    for (size_t i = 0; i < WEFT_ARRAY_LEN(HOSTS); i++)
        for (int k = 0; algo_registry[k]; k++)
            JOB(algo_registry[k], HOSTS[i].n, 1, HOSTS[i].id);
    /* the ring with channels: turns on each connection, reversed odd rings */
    static const int CH_RANKS[] = { 2, 3, 4, 5, 8 };
    for (int ch = 2; ch <= 4; ch++) {
        for (size_t i = 0; i < WEFT_ARRAY_LEN(CH_RANKS); i++)
            JOB(&algo_ring_def, CH_RANKS[i], ch, NULL);
        for (size_t i = 0; i < 3; i++)
            JOB(&algo_ring_def, HOSTS[i].n, ch, HOSTS[i].id);
    }
#undef JOB
    run_jobs(jobs, nj, verbose);
    printf("test_algos: %d passed, %d failed (%d simulated calls)\n", T.passed, T.failed,
           T.runs);
    return T.failed ? 1 : 0;
}
