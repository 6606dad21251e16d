/*
 * algo_rhd.c - recursive halving and doubling (Rabenseifner): 2 log2(p) exchanges for
 * a ring's 2(n-1) steps, with the ring's bandwidth; mid sizes at many ranks.
 *
 * allreduce      on p = the largest power of two <= n ranks: a reduce-scatter by
 *                recursive halving (partners at distance p/2, p/4, ..., 1: each keeps
 *                the half of its segment its bit selects, sends the other half and
 *                reduces the partner's copy of its half into RECV), then an all-gather
 *                by recursive doubling (distances 1, 2, ..., p/2) in RECV. With n > p,
 *                the first 2(n-p) ranks pair up: the even one's data is reduced into
 *                the odd one's first, and the odd one sends it the result at the end.
 *                Virtual rank v (0..p-1) ends the halving with block v of p
 *                (sched_block), so every element is reduced once, at one rank, in the
 *                same tree for every block: partial[v] (x[2v] op x[2v+1] for a folded
 *                pair, else x[v + n - p]) combined with partial[v + d] for d = p/2 down
 *                to 1. Every rank holds the same bits.
 * reduce_scatter n a power of two: the halving alone, partials in TMP, rank r ending
 *                with its block r in RECV.
 * allgather      n a power of two: the doubling alone.
 * barrier        any n: dissemination, the doubling of empty frames (distances 1, 2,
 *                4, ... below n: round k sends to r + 2^k and receives from r - 2^k,
 *                and sends only once the frames of rounds 0..k-1 arrived (the receives
 *                chained: one that waited only for round k-1's let a rank leave before
 *                another entered, at 6-8 ranks and most n above), so after ceil(log2 n)
 *                rounds every rank has heard, through some chain, from every rank that
 *                entered). Each rank talks to 2 ceil(log2 n) peers, where direct's
 *                barrier talks to all n - 1 (and a transport that makes a peer's
 *                buffers at its first frame, ib, makes them for every peer).
 * Exchanges are not pipelined: a step starts once the previous one has completed
 * (dep, after_all), which is why the tuner keeps it to mid sizes (rhd_window).
 *
 * Invariant: pure functions of their arguments, like every algorithm.
 */
#include "algo.h"
#include "frame.h"
#include "util.h"

/* The per-rank byte ranges of p blocks: `blk` bytes each (reduce_scatter, allgather),
 * or count elements split as sched_block does (allreduce). */
typedef struct {
    size_t count, esz, blk;
    int p;
} rblocks_t;

static size_t rb_off(const rblocks_t *B, int b)
{
    if (B->blk || b == B->p)
        return B->blk ? (size_t)b * B->blk : B->count * B->esz;
    size_t off, len;
    sched_block(B->count, B->p, b, &off, &len);
    return off * B->esz;
}

static size_t rb_len(const rblocks_t *B, int lo, int hi)
{
    return rb_off(B, hi) - rb_off(B, lo);
}

static int pow2_below(int n)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

/* Virtual rank v's real rank when n - p pairs folded into their odd member. */
static int real_rank(int v, int n, int p)
{
    return v < n - p ? 2 * v + 1 : v + (n - p);
}

/* The halving among virtual ranks: `src` holds this rank's data (or the fold's
 * partial), partials go to `part` at the blocks' offsets, the last step (AVG's
 * division) to `fin` at fin_off (-1: the blocks' offset). Returns the last reduction;
 * tx[k] gets the send of the step at distance p >> (k+1), *lo, *hi the block left. */
static int halving(const rblocks_t *B, int v, int n, int src, int prev, int part, int fin,
                   long fin_off, int *tx, int *lo_p, int *hi_p, sched_t *s)
{
    int p = B->p, lo = 0, hi = p, k = 0;
    for (int d = p / 2; d >= 1; d /= 2, k++) {
        int partner = real_rank(v ^ d, n, p), mid = lo + d;
        int klo = v & d ? mid : lo, khi = v & d ? hi : mid;
        int glo = v & d ? lo : mid, ghi = v & d ? mid : hi;
        tx[k] = sched_send(s, partner, src, rb_off(B, glo), rb_len(B, glo, ghi), -1);
        int dst = d == 1 ? fin : part;
        size_t doff = d == 1 && fin_off >= 0 ? (size_t)fin_off : rb_off(B, klo);
        int rr = sched_recv_reduce(s, partner, dst, doff, src, rb_off(B, klo),
                                   rb_len(B, klo, khi), d == 1);
        if (tx[k] >= 0 && rr >= 0)
            s->steps[tx[k]].dep = s->steps[rr].dep = prev;
        prev = rr;
        src = part;
        lo = klo;
        hi = khi;
    }
    *lo_p = lo;
    *hi_p = hi;
    return prev;
}

/* The doubling in RECV from block range [lo, hi). A send waits for everything before
 * it (the segment it sends was assembled by the previous steps, from other peers);
 * the receive at distance d, where rs_tx[d's step] sent from RECV, waits for that send
 * (in place, that is where the halving's outgoing half was). */
static void doubling(const rblocks_t *B, int v, int n, int lo, int hi, const int *rs_tx,
                     sched_t *s)
{
    int p = B->p, k = 0;
    while (p >> (k + 1) > 1)
        k++;                                /* rs_tx index of distance 1 */
    for (int d = 1; d < p; d *= 2, k--) {
        int partner = real_rank(v ^ d, n, p);
        int plo = v & d ? lo - d : hi, phi = plo + d;
        int i = sched_send(s, partner, BUF_RECV, rb_off(B, lo), rb_len(B, lo, hi), -1);
        if (i >= 0)
            s->steps[i].after_all = 1;
        int j = sched_recv(s, partner, BUF_RECV, rb_off(B, plo), rb_len(B, plo, phi));
        if (j >= 0 && rs_tx)
            s->steps[j].dep = rs_tx[k];
        lo = v & d ? plo : lo;
        hi = v & d ? hi : phi;
    }
}

static void rhd_allreduce(const sched_args_t *a, size_t esz, sched_t *s)
{
    int r = a->rank, n = a->nranks, p = pow2_below(n), extra = n - p;
    size_t len = a->count * esz;
    rblocks_t B = { a->count, esz, 0, p };
    int tx[32], lo, hi, src = BUF_SEND, prev = -1;
    if (r < 2 * extra && r % 2 == 0) {      /* folded: its pair partner does the work */
        int i = sched_send(s, r + 1, BUF_SEND, 0, len, -1);
        int j = sched_recv(s, r + 1, BUF_RECV, 0, len);
        if (j >= 0)
            s->steps[j].stream = i;     /* in place: the result lands where data left */
        return;
    }
    if (r < 2 * extra) {
        prev = sched_recv_reduce(s, r - 1, BUF_RECV, 0, BUF_SEND, 0, len, 0);
        src = BUF_RECV;
    }
    int v = r < 2 * extra ? r / 2 : r - extra;
    halving(&B, v, n, src, prev, BUF_RECV, BUF_RECV, -1, tx, &lo, &hi, s);
    doubling(&B, v, n, lo, hi, tx, s);
    if (r < 2 * extra) {
        int i = sched_send(s, r - 1, BUF_RECV, 0, len, -1);
        if (i >= 0)
            s->steps[i].after_all = 1;
    }
}

/* n a power of two: rank r ends with block r (v = r, halving from the top bit). */
static void rhd_reduce_scatter(const sched_args_t *a, size_t esz, sched_t *s)
{
    int n = a->nranks, tx[32], lo, hi;
    rblocks_t B = { a->count, esz, a->count * esz, n };
    if (n > 2)
        s->tmp_bytes = B.blk * (size_t)n;
    halving(&B, a->rank, n, BUF_SEND, -1, BUF_TMP, BUF_RECV, 0, tx, &lo, &hi, s);
}

static void rhd_allgather(const sched_args_t *a, size_t esz, sched_t *s)
{
    int r = a->rank;
    rblocks_t B = { a->count, esz, a->count * esz, a->nranks };
    if (!a->inplace)
        sched_copy(s, BUF_RECV, rb_off(&B, r), BUF_SEND, 0, B.blk);
    doubling(&B, r, a->nranks, r, r + 1, NULL, s);
}

static void rhd_barrier(const sched_args_t *a, sched_t *s)
{
    int r = a->rank, n = a->nranks, prev = -1;
    for (int d = 1; d < n; d *= 2) {
        int i = sched_send(s, (r + d) % n, BUF_NONE, 0, 0, -1);
        int j = sched_recv(s, (r - d + n) % n, BUF_NONE, 0, 0);
        /* round k's send after every earlier round's frame: the receives complete in
         * round order (a frame that comes early waits), and the send after the last */
        if (i >= 0)
            s->steps[i].dep = prev;
        if (j >= 0)
            s->steps[j].dep = prev;
        prev = j;
    }
}

static weft_status_t rhd_build(const sched_args_t *a, sched_t *s)
{
    size_t esz = weft_dtype_size(a->dtype);
    switch (a->coll) {
    case COLL_ALLREDUCE:      rhd_allreduce(a, esz, s); break;
    case COLL_REDUCE_SCATTER: rhd_reduce_scatter(a, esz, s); break;
    case COLL_ALLGATHER:      rhd_allgather(a, esz, s); break;
    case COLL_BARRIER:        rhd_barrier(a, s); break;
    default:                  return WEFT_ERR_INTERNAL;
    }
    return WEFT_OK;
}

static int rhd_supports(const sched_args_t *a)
{
    int pow2 = (a->nranks & (a->nranks - 1)) == 0;
    return a->nranks > 1 && (a->coll == COLL_ALLREDUCE || a->coll == COLL_BARRIER ||
                             (pow2 && (a->coll == COLL_REDUCE_SCATTER ||
                                       a->coll == COLL_ALLGATHER)));
}

/* log2(p) exchanges each way moving S/2, S/4, ...: the ring's bytes in fewer hops; a
 * fold adds two hops and S each way at the odd ranks. */
static double rhd_cost(const sched_args_t *a, const algo_model_t *m)
{
    double n = a->nranks, p = pow2_below(a->nranks), S = (double)algo_rank_bytes(a);
    double lg = 0, f = n > p;
    while ((1 << (int)lg) < p)
        lg++;
    switch (a->coll) {
    case COLL_ALLREDUCE:
        return algo_time(m, a, 2 * lg + 2 * f, (2 * (p - 1) / p + 2 * f) * S,
                         ((p - 1) / p + f) * S);
    case COLL_REDUCE_SCATTER:
        return algo_time(m, a, lg, (n - 1) * S, (n - 1) * S);
    case COLL_BARRIER:
        while ((1 << (int)lg) < n)
            lg++;                                               /* ceil(log2 n) rounds */
        return algo_time(m, a, lg, 0, 0);
    default:
        return algo_time(m, a, lg, (n - 1) * S, 0);            /* allgather */
    }
}

/*
 * Mid sizes only (per-rank bytes up to RHD_MAX), and only beyond few ranks (algo.h).
 * By alpha-beta alone recursive halving/doubling never loses to the ring (the same
 * bytes in fewer hops), but its steps are not pipelined: each exchange lands whole
 * before the next starts, so a large one runs at the pace of one transfer then one
 * reduction, where the ring overlaps frames of both. The bound stands in for that
 * until the many-rank benchmarks say where the crossover is.
 */
#define RHD_MAX ((size_t)1 << 20)

static int rhd_window(const weft_config_t *cfg, const sched_args_t *a, size_t *lo,
                      size_t *hi)
{
    algo_few_window(cfg, a, lo, hi);
    if (*lo <= *hi)
        *hi = RHD_MAX;
    return 2;
}

const algo_t algo_rhd_def = {
    .name = "rhd", .supports = rhd_supports, .cost = rhd_cost, .window = rhd_window,
    .build = rhd_build,
};
