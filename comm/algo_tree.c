/*
 * algo_tree.c - the double binary tree: all-reduce, reduce and broadcast in O(log n) hops
 * instead of a ring's 2(n-1), for latency-bound sizes at many ranks (all-reduce about
 * 4 log2(n) - 1: the two trees share links and a rank's sends to a peer go in order, so
 * one tree's upward send waits behind the other's downward one; docs/SCALE.md).
 *
 * Two binary trees over the same ranks (algo_tree_links): tree 0 over positions
 * 0..n-1 where the position's lowest set bit is its height (odd positions are leaves,
 * position 0 the top, with one child), tree 1 the same shape with positions mirrored
 * (p -> n-1-p, n even) or shifted (p -> p+1, n odd), so a leaf of one tree is interior
 * in the other (n odd: all but one rank). The data is split in two halves
 * (sched_block(count, 2, t)); half t travels tree t.
 *   allreduce  each rank reduces its children's halves into its own, child 0 then
 *              child 1, and passes the result up; the top applies the last reduction
 *              (AVG's division) and the result comes back down. Frame by frame: a
 *              child's frame is reduced as soon as the other child's same frame is, the
 *              partial goes up as it is produced, and the result goes down as it lands
 *              (`stream`), so up and down overlap. Every element is reduced once, at
 *              one rank, in the shape of its tree, so every rank holds the same bits:
 *              value(node) = ((own op value(child 0)) op value(child 1)).
 *   reduce     the same up phase, rotated so that `root` is position 0 of both trees
 *              (in tree 1 the root swaps places with the rank the shift put on top).
 *   broadcast  the down phase alone, from the root, both trees the same way.
 * Tree 0's steps are emitted before tree 1's: where two ranks are linked in both trees
 * their FIFOs hold tree 0's frames first, and tree 0 never waits on tree 1, so neither
 * deadlocks (the halves overlap wherever the trees' links differ).
 *
 * Invariant: pure functions of their arguments, like every algorithm; the links depend
 * only on (rank, nranks, tree, root).
 */
#include "algo.h"
#include "frame.h"
#include "util.h"

/* Links of position `pos` among n in the bit tree (parent -1 at the top, children -1
 * where none): pos's parent is pos +- lowbit, the one whose lowest bit is twice pos's
 * (the other when that one is past the end); its children pos -+ lowbit/2, the upper
 * one lowered to the largest pos + 2^k inside. Position 0 has the largest power of two
 * below n as its only child. */
static void bit_tree(int pos, int n, int *parent, int child[2])
{
    int bit = 1;
    while (bit < n && !(bit & pos))
        bit <<= 1;
    child[0] = child[1] = -1;
    if (pos == 0) {
        *parent = -1;
    } else {
        *parent = (pos ^ bit) | (bit << 1);
        if (*parent >= n)
            *parent = pos ^ bit;
    }
    if (pos != 0 && bit > 1)
        child[0] = pos - bit / 2;
    for (int low = bit / 2; low > 0; low >>= 1) {
        if (pos + low < n) {
            child[1] = pos + low;
            break;
        }
    }
}

/* Tree t's position of virtual rank v (rank - root), and back, before a rooted call's
 * swap (algo_tree_links_root). */
static int tree_pos(int v, int n, int t)
{
    if (t == 0)
        return v;
    return n % 2 == 0 ? n - 1 - v : SCHED_MOD(v - 1, n);
}

static int tree_rank(int pos, int n, int t)
{
    if (t == 0)
        return pos;
    return n % 2 == 0 ? n - 1 - pos : SCHED_MOD(pos + 1, n);
}

void algo_tree_links_root(int rank, int nranks, int tree, int root, int *parent, int child[2])
{
    int n = nranks, rooted = root >= 0, base = rooted ? root : 0;
    int v = SCHED_MOD(rank - base, n);
    /* rooted: virtual rank 0 (the root) and whichever sits at tree 1's top (`top`)
     * trade places: the root takes position 0, `top` the root's old position `at0` */
    int top = tree_rank(0, n, tree), at0 = tree_pos(0, n, tree);
    int pos = !rooted || tree == 0 ? tree_pos(v, n, tree) :
              v == 0 ? 0 : v == top ? at0 : tree_pos(v, n, tree);
    int p, c[2];
    bit_tree(pos, n, &p, c);
    int links[3] = { p, c[0], c[1] };
    for (int k = 0; k < 3; k++) {
        int q = links[k];
        if (q < 0)
            continue;
        int w = !rooted || tree == 0 ? tree_rank(q, n, tree) :
                q == 0 ? 0 : q == at0 ? top : tree_rank(q, n, tree);
        links[k] = SCHED_MOD(w + base, n);
    }
    *parent = links[0];
    child[0] = links[1];
    child[1] = links[2];
}

void algo_tree_links(int rank, int nranks, int tree, int *parent, int child[2])
{
    algo_tree_links_root(rank, nranks, tree, -1, parent, child);
}

/* Half t of the call's elements, in bytes. */
static void half(const sched_args_t *a, size_t esz, int t, size_t *off, size_t *len)
{
    sched_block(a->count, 2, t, off, len);
    *off *= esz;
    *len *= esz;
}

/* The up phase of one tree: own data from SEND, children's partials reduced into
 * `acc` (RECV at the top and in an all-reduce, else TMP at the same offset), the
 * partial passed up as it is produced. Returns the index of the step that produced
 * acc's last bytes, or -1 (a leaf: its partial is SEND itself); *tx the send up. */
static int tree_up(const sched_args_t *a, int parent, const int child[2], size_t off,
                   size_t len, int acc, int *tx, sched_t *s)
{
    int src = BUF_SEND, prod = -1;
    for (int k = 0; k < 2; k++) {
        if (child[k] < 0)
            continue;
        int last = k == 1 || child[1] < 0;
        int i = sched_recv_reduce(s, child[k], acc, off, src, off, len, last && parent < 0);
        if (i >= 0 && prod >= 0)
            s->steps[i].stream = prod;      /* child 1's frame after child 0's */
        prod = i;
        src = acc;
    }
    *tx = -1;
    if (parent >= 0)
        *tx = sched_send(s, parent, src, off, len, prod);
    return prod;
}

/* The down phase: the result in RECV[off, off+len) from the parent (or produced by step
 * `prod` at the top) goes to the children as it lands. */
static void tree_down(int parent, const int child[2], size_t off, size_t len, int prod,
                      int tx, sched_t *s)
{
    int src = prod;
    if (parent >= 0) {
        src = sched_recv(s, parent, BUF_RECV, off, len);
        if (src >= 0 && tx >= 0)
            s->steps[src].stream = tx;   /* in place: lands where the partial has left */
    }
    for (int k = 0; k < 2; k++)
        if (child[k] >= 0)
            sched_send(s, child[k], BUF_RECV, off, len, src);
}

static void tree_allreduce(const sched_args_t *a, size_t esz, sched_t *s)
{
    for (int t = 0; t < 2; t++) {
        int parent, child[2], tx;
        size_t off, len;
        algo_tree_links(a->rank, a->nranks, t, &parent, child);
        half(a, esz, t, &off, &len);
        int prod = tree_up(a, parent, child, off, len, BUF_RECV, &tx, s);
        tree_down(parent, child, off, len, prod, tx, s);
    }
}

static void tree_reduce(const sched_args_t *a, size_t esz, sched_t *s)
{
    for (int t = 0; t < 2; t++) {
        int parent, child[2], tx;
        size_t off, len;
        algo_tree_links_root(a->rank, a->nranks, t, a->root, &parent, child);
        half(a, esz, t, &off, &len);
        if (parent >= 0 && child[0] + child[1] > -2)
            s->tmp_bytes = a->count * esz;      /* partials of interior ranks */
        tree_up(a, parent, child, off, len, parent < 0 ? BUF_RECV : BUF_TMP, &tx, s);
    }
}

static void tree_broadcast(const sched_args_t *a, size_t esz, sched_t *s)
{
    if (a->rank == a->root && !a->inplace)
        sched_copy(s, BUF_RECV, 0, BUF_SEND, 0, a->count * esz);
    for (int t = 0; t < 2; t++) {
        int parent, child[2];
        size_t off, len;
        algo_tree_links_root(a->rank, a->nranks, t, a->root, &parent, child);
        half(a, esz, t, &off, &len);
        if (parent >= 0) {
            tree_down(parent, child, off, len, -1, -1, s);
            continue;
        }
        for (int k = 0; k < 2; k++)     /* the root sends from SEND: no wait on the copy */
            if (child[k] >= 0)
                sched_send(s, child[k], BUF_SEND, off, len, -1);
    }
}

static weft_status_t tree_build(const sched_args_t *a, sched_t *s)
{
    size_t esz = weft_dtype_size(a->dtype);
    switch (a->coll) {
    case COLL_ALLREDUCE: tree_allreduce(a, esz, s); break;
    case COLL_REDUCE:    tree_reduce(a, esz, s); break;
    case COLL_BROADCAST: tree_broadcast(a, esz, s); break;
    default:             return WEFT_ERR_INTERNAL;
    }
    return WEFT_OK;
}

static int tree_supports(const sched_args_t *a)
{
    return a->nranks > 1 && (a->coll == COLL_ALLREDUCE || a->coll == COLL_REDUCE ||
                             a->coll == COLL_BROADCAST);
}

/* h = ceil(log2 n) levels below the top: each half climbs h hops and comes down h.
 * Pipelined, the busiest rank (interior in one tree, a leaf in the other) moves 2S
 * each way in an all-reduce (its interior half from two children up, and to two
 * children down; its leaf half once each way) and reduces S; S each way in a reduce or
 * a broadcast: a chain's bytes in log2(n) hops instead of n-1, a ring's all-reduce
 * bytes times n/(n-1) in 2 log2(n) hops instead of 2(n-1). */
static double tree_cost(const sched_args_t *a, const algo_model_t *m)
{
    double S = (double)algo_rank_bytes(a), h = 0;
    while ((1 << (int)h) < a->nranks)
        h++;
    switch (a->coll) {
    case COLL_ALLREDUCE: return algo_time(m, a, 2 * h, 2 * S, S);
    case COLL_REDUCE:    return algo_time(m, a, h, S, S);
    default:             return algo_time(m, a, h, S, 0);        /* broadcast */
    }
}

const algo_t algo_tree_def = {
    .name = "tree", .supports = tree_supports, .cost = tree_cost, .window = algo_few_window,
    .build = tree_build,
};
