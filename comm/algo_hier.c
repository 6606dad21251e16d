/*
 * algo_hier.c - hierarchical collectives: rings inside each host, rings across hosts.
 *
 * Ranks on H hosts, host g holding P_g of them. "Rank (g, j)" is local rank j of host g:
 * hosts numbered as the layout numbers them, ranks of a host in rank order. The core of
 * each host is its first P = min P_g local ranks; rank (g, j)'s counterparts are the
 * ranks (*, j), one per host, joined by a ring across hosts, so the bytes between hosts
 * go over P rings of 1/P of the data each instead of one ring that moves all of it, and
 * intra-host hops (shm) carry the rest. Where hosts hold different numbers of ranks,
 * all-reduce folds each extra rank (g, j >= P) into core rank (g, j mod P) first and
 * sends it the result last; broadcast and reduce take every rank of a host into their
 * chains; reduce-scatter and all-gather need every host to hold as many (else the ring
 * runs them).
 *
 * allreduce      0. (extras) core rank (g, j) reduces (g, j+P), (g, j+2P), ... into RECV;
 *                1. reduce-scatter inside the core: the vector in P shards, shard j ends
 *                   host-reduced on local rank j-1 (in RECV), reduced from local rank j
 *                   around the core's ring;
 *                2. all-reduce of that shard among the counterparts: a ring across
 *                   hosts over H sub-blocks, sub-block t reduced from host t around;
 *                3. all-gather of the shards inside the core;
 *                4. (extras) the result from core rank (g, j mod P).
 * reduce_scatter 1. reduce-scatter inside the host where local rank j's shard is the
 *                   blocks of every rank (g, j), partial sums in TMP; 2. reduce-scatter of
 *                   those H blocks across hosts, block (g, j) ending on rank (g, j).
 *                   Block (g, j) is reduced from local rank j+1 on each host and the
 *                   host partials from host g+1 around.
 * allgather      1. all-gather among the counterparts; 2. all-gather inside the host,
 *                   local rank j's shard being the blocks of every rank (g, j).
 * broadcast      a chain across hosts among the heads (the root, and on host g local rank
 *                lroot mod P_g), then a chain inside each host from its head.
 * reduce         the reverse, in H pieces: a chain around each host ending at its head
 *                (from local rank head+1, partials in TMP), then a chain across the heads
 *                ending at the root (from host hroot+1); piece t crosses hosts while
 *                piece t+1 is still reduced inside them.
 * Pipelining: inside each phase as in the ring (stream dependencies, frame by frame),
 * and across phases too: every block a phase hands on is produced by one step, on which
 * the next phase's send streams (all-reduce therefore moves its shards in H pieces in
 * every phase: piece t of shard j is sub-block t of step 2). A receive that adds to a
 * block the previous phase produced waits for that step (dep). No phase waits for a
 * whole earlier one (but all-reduce's folds of extra ranks, which the core waits for);
 * a receive may overwrite a block an earlier send is still reading only where the
 * incoming bytes already depend on that send's (as in the ring).
 * The reduction order is fixed by the layout alone, so every rank of an all-reduce ends
 * with the same bits (tests/test_algos.c reproduces it).
 *
 * Invariant: pure functions of their arguments, like every algorithm; supports and cost
 * read only the layout's shared fields (nhosts, per_host, uniform, rank_host).
 */
#include <stdlib.h>

#include "algo.h"
#include "frame.h"
#include "status.h"
#include "util.h"

typedef struct {
    int H, P, h, l;     /* hosts, core ranks per host (the fewest any host holds), this
                           rank's host and local rank */
    int *hr;            /* [nranks] host-major: rank (g, j) is hr[base[g] + j] */
    int *base, *cnt;    /* [H] where host g's ranks start in hr, and how many it holds */
    size_t esz;
} hier_t;

/* Core rank (g, j), both taken around (j around the core's P). */
static int at(const hier_t *x, int g, int j)
{
    int G = SCHED_MOD(g, x->H);
    return x->hr[x->base[G] + SCHED_MOD(j, x->P)];
}

/* Rank (g, j), j taken around all of host g's ranks. */
static int at_all(const hier_t *x, int g, int j)
{
    int G = SCHED_MOD(g, x->H);
    return x->hr[x->base[G] + SCHED_MOD(j, x->cnt[G])];
}

/* The local rank of host g that a rooted call's chains enter and leave it by: the root's
 * local rank, taken around the host's count. */
static int head(const hier_t *x, int g, int lroot)
{
    return SCHED_MOD(lroot, x->cnt[SCHED_MOD(g, x->H)]);
}

static void set_dep(sched_t *s, int step, int dep)
{
    if (step >= 0)
        s->steps[step].dep = dep;
}

/* Part i of n of elements [base, base + count): byte offset and length. */
static void part(const hier_t *x, size_t base, size_t count, int n, int i, size_t *off,
                 size_t *len)
{
    size_t o, l;
    sched_block(count, n, SCHED_MOD(i, n), &o, &l);
    *off = (base + o) * x->esz;
    *len = l * x->esz;
}

/* Piece (m, t): part t of H of shard m of P: byte offset and length. */
static void piece(const hier_t *x, size_t count, int m, int t, size_t *off, size_t *len)
{
    size_t so, sl;
    sched_block(count, x->P, SCHED_MOD(m, x->P), &so, &sl);
    part(x, so, sl, x->H, t, off, len);
}

/* Every phase moves pieces, so each piece's next phase streams on the step that
 * produced it. last[t]: the latest producer of piece (*, t) on this rank. */
static weft_status_t hier_allreduce(const sched_args_t *a, const hier_t *x, sched_t *s)
{
    int H = x->H, P = x->P, h = x->h, l = x->l, j = SCHED_MOD(l + 1, P), prev = -1;
    int right = at(x, h, l + 1), left = at(x, h, l - 1);
    int nr = at(x, h + 1, l), nl = at(x, h - 1, l);
    size_t o, n, c = a->count, all = c * x->esz;
    if (l >= P) {       /* an extra rank: its data to core rank (h, l mod P), the result back */
        sched_send(s, at(x, h, l), BUF_SEND, 0, all, -1);
        sched_recv(s, at(x, h, l), BUF_RECV, 0, all);
        return WEFT_OK;
    }
    /* 0. this rank's extras (h, l+P), (h, l+2P), ... reduced into RECV, one after the
     * other: the core's input is then RECV, ready when step `ready` completed */
    int in = BUF_SEND, ready = -1;
    for (int e = l + P; e < x->cnt[h]; e += P) {
        int i = sched_recv_reduce(s, at_all(x, h, e), BUF_RECV, 0, in, 0, all, 0);
        set_dep(s, i, ready);
        in = BUF_RECV, ready = i;
    }
    int *last = malloc((size_t)H * sizeof(int));
    if (last == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "hier: out of memory");
    /* 1. shard j ends host-reduced in RECV on local rank j-1 */
    for (int k = 0; k < P - 1; k++) {
        for (int t = 0; t < H; t++) {
            piece(x, c, l - k, t, &o, &n);
            int i = sched_send(s, right, k ? BUF_RECV : in, o, n, k ? last[t] : -1);
            if (k == 0)
                set_dep(s, i, ready);
        }
        for (int t = 0; t < H; t++) {
            piece(x, c, l - k - 1, t, &o, &n);
            last[t] = sched_recv_reduce(s, left, BUF_RECV, o, in, o, n, 0);
            set_dep(s, last[t], ready);
        }
    }
    /* 2. a ring all-reduce of shard j's pieces among the counterparts, in RECV; the host
     * partial is in RECV after step 1, or still the input where the core is one rank */
    int part_buf = P > 1 ? BUF_RECV : in;
    for (int k = 0; k < H - 1; k++) {
        int ts = SCHED_MOD(h - k, H), tr = SCHED_MOD(h - k - 1, H);
        piece(x, c, j, ts, &o, &n);
        int i = sched_send(s, nr, k ? BUF_RECV : part_buf, o, n,
                           k ? prev : P > 1 ? last[ts] : -1);
        if (k == 0 && P == 1)
            set_dep(s, i, ready);
        piece(x, c, j, tr, &o, &n);
        i = sched_recv_reduce(s, nl, BUF_RECV, o, part_buf, o, n, k == H - 2);
        set_dep(s, i, P > 1 ? last[tr] : ready);    /* adds to this host's partial */
        prev = i;
    }
    last[SCHED_MOD(h + 1, H)] = prev;
    for (int k = 0; k < H - 1; k++) {
        int ts = SCHED_MOD(h + 1 - k, H), tr = SCHED_MOD(h - k, H);
        piece(x, c, j, ts, &o, &n);
        sched_send(s, nr, BUF_RECV, o, n, prev);
        piece(x, c, j, tr, &o, &n);
        prev = last[tr] = sched_recv(s, nl, BUF_RECV, o, n);
    }
    /* 3. the shards around the core, piece by piece as they are done */
    for (int k = 0; k < P - 1; k++) {
        for (int t = 0; t < H; t++) {
            piece(x, c, j - k, t, &o, &n);
            sched_send(s, right, BUF_RECV, o, n, last[t]);
        }
        for (int t = 0; t < H; t++) {
            piece(x, c, j - k - 1, t, &o, &n);
            last[t] = sched_recv(s, left, BUF_RECV, o, n);
        }
    }
    /* 4. the result to the extras, once every piece of it is in */
    for (int e = l + P; e < x->cnt[h]; e += P) {
        int i = sched_send(s, at_all(x, h, e), BUF_RECV, 0, all, -1);
        if (i >= 0)
            s->steps[i].after_all = 1;
    }
    free(last);
    return WEFT_OK;
}

static weft_status_t hier_reduce_scatter(const sched_args_t *a, const hier_t *x, sched_t *s)
{
    int H = x->H, P = x->P, h = x->h, l = x->l, prev = -1;
    int right = at(x, h, l + 1), left = at(x, h, l - 1);
    int nr = at(x, h + 1, l), nl = at(x, h - 1, l);
    size_t blk = a->count * x->esz;
    int *part1 = malloc(2 * (size_t)H * sizeof(int)), *last = part1 + H;
    if (part1 == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "hier: out of memory");
    s->tmp_bytes = blk * (size_t)(H * P);
    /* 1. around the host: local rank j's shard is blocks (*, j); partial sums in TMP.
     * part1[g]: the step that produced block (g, l)'s host partial, last[g] block
     * (g, l-k-2)'s latest. */
    for (int k = 0; k < P - 1; k++) {
        for (int g = 0; g < H; g++)
            sched_send(s, right, k ? BUF_TMP : BUF_SEND, (size_t)at(x, g, l - k - 1) * blk,
                       blk, k ? last[g] : -1);
        for (int g = 0; g < H; g++) {
            size_t q = (size_t)at(x, g, l - k - 2) * blk;
            last[g] = sched_recv_reduce(s, left, BUF_TMP, q, BUF_SEND, q, blk, 0);
        }
    }
    for (int g = 0; g < H; g++)
        part1[g] = last[g];
    /* 2. across hosts: blocks (*, l), block (g, l) ending in RECV on rank (g, l) */
    for (int k = 0; k < H - 1; k++) {
        int gs = SCHED_MOD(h - k - 1, H), gr = SCHED_MOD(h - k - 2, H);
        size_t qs = (size_t)at(x, gs, l) * blk, qr = (size_t)at(x, gr, l) * blk;
        sched_send(s, nr, BUF_TMP, qs, blk, k ? prev : part1[gs]);
        int i = k == H - 2 ? sched_recv_reduce(s, nl, BUF_RECV, 0, BUF_TMP, qr, blk, 1)
                           : sched_recv_reduce(s, nl, BUF_TMP, qr, BUF_TMP, qr, blk, 0);
        if (i >= 0)
            s->steps[i].dep = part1[gr];    /* adds to this host's partial */
        prev = i;
    }
    free(part1);
    return WEFT_OK;
}

static weft_status_t hier_allgather(const sched_args_t *a, const hier_t *x, sched_t *s)
{
    int H = x->H, P = x->P, h = x->h, l = x->l, prev = -1;
    int right = at(x, h, l + 1), left = at(x, h, l - 1);
    int nr = at(x, h + 1, l), nl = at(x, h - 1, l);
    size_t blk = a->count * x->esz;
    int *rx = malloc((size_t)H * sizeof(int));  /* producer of block (g, l-k) in RECV */
    if (rx == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "hier: out of memory");
    if (!a->inplace)
        sched_copy(s, BUF_RECV, (size_t)a->rank * blk, BUF_SEND, 0, blk);
    /* 1. among the counterparts: blocks (*, l) */
    rx[h] = -1;
    for (int k = 0; k < H - 1; k++) {
        int gs = SCHED_MOD(h - k, H), gr = SCHED_MOD(h - k - 1, H);
        if (k == 0)
            sched_send(s, nr, BUF_SEND, 0, blk, -1);
        else
            sched_send(s, nr, BUF_RECV, (size_t)at(x, gs, l) * blk, blk, prev);
        prev = rx[gr] = sched_recv(s, nl, BUF_RECV, (size_t)at(x, gr, l) * blk, blk);
    }
    /* 2. around the host: local rank j's shard is blocks (*, j) */
    for (int k = 0; k < P - 1; k++) {
        for (int g = 0; g < H; g++) {
            if (k == 0 && g == h)
                sched_send(s, right, BUF_SEND, 0, blk, -1);
            else
                sched_send(s, right, BUF_RECV, (size_t)at(x, g, l - k) * blk, blk, rx[g]);
        }
        for (int g = 0; g < H; g++)
            rx[g] = sched_recv(s, left, BUF_RECV, (size_t)at(x, g, l - k - 1) * blk, blk);
    }
    free(rx);
    return WEFT_OK;
}

/* The root's host and local rank. */
static void root_at(const sched_args_t *a, const hier_t *x, int *hroot, int *lroot)
{
    *hroot = *lroot = 0;
    for (int g = 0; g < x->H; g++)
        for (int i = 0; i < x->cnt[g]; i++)
            if (x->hr[x->base[g] + i] == a->root)
                *hroot = g, *lroot = i;
}

static void hier_broadcast(const sched_args_t *a, const hier_t *x, sched_t *s)
{
    int H = x->H, h = x->h, l = x->l, hroot, lroot, rx = -1;
    size_t len = a->count * x->esz;
    root_at(a, x, &hroot, &lroot);
    int root = a->rank == a->root, hd = head(x, h, lroot);
    if (root && !a->inplace)
        sched_copy(s, BUF_RECV, 0, BUF_SEND, 0, len);
    if (l == hd) {      /* 1. the chain across the hosts' heads */
        int pos = SCHED_MOD(h - hroot, H);
        if (pos > 0)
            rx = sched_recv(s, at_all(x, h - 1, head(x, h - 1, lroot)), BUF_RECV, 0, len);
        if (pos < H - 1)
            sched_send(s, at_all(x, h + 1, head(x, h + 1, lroot)), root ? BUF_SEND : BUF_RECV,
                       0, len, rx);
    }
    /* 2. the chain inside the host from its head */
    int pos = SCHED_MOD(l - hd, x->cnt[h]);
    if (pos > 0)
        rx = sched_recv(s, at_all(x, h, l - 1), BUF_RECV, 0, len);
    if (pos < x->cnt[h] - 1)
        sched_send(s, at_all(x, h, l + 1), root ? BUF_SEND : BUF_RECV, 0, len, rx);
}

/* Piece t of H: a chain around host h ends at its head with the host's partial (TMP, or
 * the input where the host holds one rank), then a chain across the heads ends at the
 * root, each head adding its partial (dep: the whole piece reduced in the host). */
static weft_status_t hier_reduce(const sched_args_t *a, const hier_t *x, sched_t *s)
{
    int H = x->H, h = x->h, l = x->l, P = x->cnt[h], hroot, lroot;
    root_at(a, x, &hroot, &lroot);
    int hd = head(x, h, lroot), pos = SCHED_MOD(l - hd - 1, P), hbuf = P > 1 ? BUF_TMP : BUF_SEND;
    int right = at_all(x, h, l + 1), left = at_all(x, h, l - 1);
    int *hp = malloc((size_t)H * sizeof(int));   /* producer of this host's piece t */
    if (hp == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "hier: out of memory");
    s->tmp_bytes = a->count * x->esz;
    for (int t = 0; t < H; t++) {       /* 1. around the host, to its head */
        size_t o, n;
        part(x, 0, a->count, H, t, &o, &n);
        hp[t] = -1;
        if (P == 1)
            continue;
        if (pos == 0) {
            sched_send(s, right, BUF_SEND, o, n, -1);
            continue;
        }
        int rx = sched_recv_reduce(s, left, BUF_TMP, o, BUF_SEND, o, n, 0);
        if (pos < P - 1)
            sched_send(s, right, BUF_TMP, o, n, rx);
        hp[t] = rx;
    }
    if (l == hd) {      /* 2. across the heads, to the root */
        int hpos = SCHED_MOD(h - hroot - 1, H);
        int to = at_all(x, h + 1, head(x, h + 1, lroot));
        int from = at_all(x, h - 1, head(x, h - 1, lroot));
        for (int t = 0; t < H; t++) {
            size_t o, n;
            part(x, 0, a->count, H, t, &o, &n);
            if (hpos == 0) {
                sched_send(s, to, hbuf, o, n, hp[t]);
                continue;
            }
            int last = hpos == H - 1;
            int i = sched_recv_reduce(s, from, last ? BUF_RECV : BUF_TMP, o, hbuf, o, n, last);
            set_dep(s, i, hp[t]);       /* adds to this host's partial */
            if (!last)
                sched_send(s, to, BUF_TMP, o, n, i);
        }
    }
    free(hp);
    return WEFT_OK;
}

/* cnt[g] = the ranks host g holds; returns the fewest any host holds (the core's size),
 * at least 1. */
static int host_counts(const sched_layout_t *l, int nranks, int *cnt)
{
    int least = l->per_host;
    for (int g = 0; g < l->nhosts; g++)
        cnt[g] = 0;
    for (int r = 0; r < nranks; r++)
        cnt[l->rank_host[r]]++;
    for (int g = 0; g < l->nhosts; g++)
        least = cnt[g] < least ? cnt[g] : least;
    return least > 0 ? least : 1;
}

/* The core's size for the model: per_host where every host holds as many. */
static int fewest(const sched_layout_t *l, int nranks)
{
    if (l->uniform)
        return l->per_host;
    int *cnt = malloc((size_t)l->nhosts * sizeof(int));
    if (cnt == NULL)
        return 1;       /* the model's input only (build counts again) */
    int least = host_counts(l, nranks, cnt);
    free(cnt);
    return least;
}

static weft_status_t hier_build(const sched_args_t *a, sched_t *s)
{
    const sched_layout_t *ly = &a->layout;
    hier_t x = { .H = ly->nhosts, .esz = weft_dtype_size(a->dtype) };
    x.hr = malloc((size_t)(a->nranks + 2 * x.H) * sizeof(int));
    if (x.hr == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "hier: out of memory");
    x.base = x.hr + a->nranks;
    x.cnt = x.base + x.H;
    algo_ring_order(ly, a->nranks, x.hr);       /* host-major, hosts in the layout's order */
    x.P = host_counts(ly, a->nranks, x.cnt);
    for (int g = 0, b = 0; g < x.H; b += x.cnt[g++])
        x.base[g] = b;
    for (int i = 0; i < a->nranks; i++)
        if (x.hr[i] == a->rank)
            x.h = ly->rank_host[a->rank], x.l = i - x.base[ly->rank_host[a->rank]];
    weft_status_t st = WEFT_OK;
    switch (a->coll) {
    case COLL_ALLREDUCE:      st = hier_allreduce(a, &x, s); break;
    case COLL_REDUCE_SCATTER: st = hier_reduce_scatter(a, &x, s); break;
    case COLL_ALLGATHER:      st = hier_allgather(a, &x, s); break;
    case COLL_BROADCAST:      hier_broadcast(a, &x, s); break;
    case COLL_REDUCE:         st = hier_reduce(a, &x, s); break;
    default:                  st = WEFT_ERR_INTERNAL; break;
    }
    free(x.hr);
    return st;
}

/* Ranks on more than one host and more than one on some host: where there is a hierarchy
 * to use and the layout says which rank is where. Reduce-scatter and all-gather also need
 * as many ranks on every host (their blocks are owned rank by rank). */
static int hier_supports(const sched_args_t *a)
{
    const sched_layout_t *l = &a->layout;
    if (l->rank_host == NULL || l->nhosts < 2 || l->per_host < 2)
        return 0;
    switch (a->coll) {
    case COLL_ALLREDUCE:
    case COLL_BROADCAST:
    case COLL_REDUCE:         return 1;
    case COLL_REDUCE_SCATTER:
    case COLL_ALLGATHER:      return l->uniform && l->nhosts * l->per_host == a->nranks;
    default:                  return 0;
    }
}

/* Each phase at its own link class: intra-host hops at SHM, inter-host at NET (the ring's
 * model charges every hop at NET once ranks span hosts). Broadcast's chains pipeline: the
 * data crosses the slowest link once; reduce's pieces cross hosts while the next is
 * reduced inside them. Reductions add up to the ring's (n-1)/n S. All-reduce's core is
 * the fewest ranks a host holds; an extra rank's fold and result add E transfers of S
 * each way on the host (E: extras per core rank). */
static double hier_cost(const sched_args_t *a, const algo_model_t *m)
{
    double H = a->layout.nhosts, P = a->layout.per_host, n = a->nranks;
    double S = (double)algo_rank_bytes(a), g = m->gamma;
    double as = m->alpha[ALGO_LINK_SHM], bs = m->beta[ALGO_LINK_SHM];
    double an = m->alpha[ALGO_LINK_NET], bn = m->beta[ALGO_LINK_NET];
    double lo = bs < bn ? bs : bn, hi = bs < bn ? bn : bs;
    switch (a->coll) {
    case COLL_ALLREDUCE: {
        double L = fewest(&a->layout, a->nranks), E = (double)((int)(P + L - 1) / (int)L - 1);
        return 2 * (L - 1) * as + 2 * (L - 1) / L * S * bs + 2 * (H - 1) * an +
               2 * (H - 1) / H * (S / L) * bn + (n - 1) / n * S * g +
               E * (2 * as + 2 * S * bs + S * g);
    }
    case COLL_REDUCE_SCATTER:
        return (P - 1) * as + (P - 1) * H * S * bs + (H - 1) * an + (H - 1) * S * bn +
               (n - 1) * S * g;
    case COLL_ALLGATHER:
        return (P - 1) * as + (P - 1) * H * S * bs + (H - 1) * an + (H - 1) * S * bn;
    case COLL_REDUCE:
        return (P - 1) * as + (H - 1) * an + S * hi + S / H * lo + S * g;
    default:            /* broadcast */
        return (P - 1) * as + (H - 1) * an + S * bn;
    }
}

const algo_t algo_hier_def = {
    .name = "hier", .supports = hier_supports, .cost = hier_cost, .window = algo_no_window,
    .build = hier_build,
};
