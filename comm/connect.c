/*
 * connect.c - turns an address exchange into one endpoint per peer.
 *
 * Steps: every enabled transport of the registry (WEFT_TRANSPORT: all, or the one named)
 * prepares locally (listener, inbound segment) and writes its address blob into this
 * rank's peer_info; the infos are all-gathered; each peer gets the most preferred
 * transport that can reach it; a second exchange acts as a barrier; then transports drop
 * what no longer needs a name (shm unlinks its segments). No transport is named here.
 * The exchange is a parameter: the bootstrap store at init, the parent communicator at
 * split. Exactly CONNECT_EXCHANGES exchanges happen on every path, success or failure,
 * so ranks that take part only as helpers (split with WEFT_UNDEFINED) stay in step.
 *
 * TCP needs an order to avoid waiting in a circle: each rank first connects to every
 * higher rank, then accepts from the lower ones; the highest rank only accepts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_int.h"
#include "algo.h"
#include "auth.h"
#include "check.h"
#include "log.h"
#include "sock.h"
#include "status.h"
#include "topo.h"
#include "util.h"

static int transport_allowed(const weft_comm_t *comm, const tp_ops_t *t)
{
    return !strcmp(comm->cfg.transport, "auto") || !strcmp(comm->cfg.transport, t->name);
}

/* The enabled transports, most preferred first. */
static void enable_transports(weft_comm_t *comm)
{
    comm->ntransports = 0;
    for (int i = 0; tp_registry[i]; i++) {
        if (!transport_allowed(comm, tp_registry[i]))
            continue;
        int j = comm->ntransports++;
        for (; j > 0 && comm->transports[j - 1]->preference < tp_registry[i]->preference; j--)
            comm->transports[j] = comm->transports[j - 1];
        comm->transports[j] = tp_registry[i];
    }
}

static weft_status_t local_setup(weft_comm_t *comm, peer_info_t *self)
{
    memset(self, 0, sizeof(*self));
    self->rank = (uint32_t)comm->rank;
    self->pid = (uint32_t)getpid();
    self->pidns = pid_ns_id();
    self->host_id = topo_host_id(comm->cfg.hostid, self->hostname, sizeof(self->hostname));
    shm_remove_stale_segments();
    for (int i = 0; i < comm->ntransports; i++) {
        const tp_ops_t *t = comm->transports[i];
        RETURN_IF_ERR(t->local_setup(comm, &self->addr[tp_slot(t)]));
    }
    return WEFT_OK;
}

static void compute_local(weft_comm_t *comm)
{
    comm->local_rank = comm->local_size = 0;
    for (int p = 0; p < comm->nranks; p++)
        if (comm->peers[p].host_id == comm->peers[comm->rank].host_id) {
            if (p < comm->rank)
                comm->local_rank++;
            comm->local_size++;
        }
}

static weft_status_t pick(weft_comm_t *comm, int p, const tp_ops_t **t_p)
{
    for (int i = 0; i < comm->ntransports; i++)
        if (comm->transports[i]->can_connect(comm, &comm->peers[comm->rank], &comm->peers[p])) {
            *t_p = comm->transports[i];
            return WEFT_OK;
        }
    return weft_error(WEFT_ERR_UNSUPPORTED, "connect: no transport reaches rank %d on %s "
                      "from rank %d on %s (WEFT_TRANSPORT=%s; WEFT_DEBUG=INFO "
                      "WEFT_DEBUG_SUBSYS=NET says why each one is not used)", p,
                      comm->peers[p].hostname, comm->rank, comm->peers[comm->rank].hostname,
                      comm->cfg.transport);
}

static weft_status_t connect_peer(weft_comm_t *comm, int p, unsigned *used)
{
    const tp_ops_t *t = NULL;
    RETURN_IF_ERR(pick(comm, p, &t));
    RETURN_IF_ERR(t->connect(comm, p, &comm->eps[p]));
    comm->eps[p]->ops = t;
    comm->eps[p]->peer = p;
    comm->eps[p]->bytes_tx = comm->eps[p]->bytes_rx = comm->eps[p]->frames_kept = 0;
    *used |= 1u << tp_slot(t);
    return WEFT_OK;
}

/* What the endpoints use: the name (one transport, "mixed", or "self" with no peer),
 * the tuner's default chunk, and the transports with a progress op of their own. */
static void note_used(weft_comm_t *comm, unsigned used)
{
    int n = 0;
    comm->chunk_default = 0;
    comm->nprogress = 0;
    snprintf(comm->transport_desc, sizeof(comm->transport_desc), "self");
    for (int i = 0; tp_registry[i]; i++) {
        const tp_ops_t *t = tp_registry[i];
        if (!(used & (1u << i)))
            continue;
        snprintf(comm->transport_desc, sizeof(comm->transport_desc), "%s",
                 n++ ? "mixed" : t->name);
        if (t->chunk > comm->chunk_default)
            comm->chunk_default = t->chunk;
        if (t->progress)
            comm->progress_tps[comm->nprogress++] = t;
        if (t->flush)
            comm->flush_eps = 1;
    }
}

static weft_status_t connect_peers(weft_comm_t *comm)
{
    unsigned used = 0;
    for (int p = comm->rank + 1; p < comm->nranks; p++)
        RETURN_IF_ERR(connect_peer(comm, p, &used));
    for (int p = 0; p < comm->rank; p++)
        RETURN_IF_ERR(connect_peer(comm, p, &used));
    note_used(comm, used);
    return WEFT_OK;
}

/* The transports' default single-copy threshold (tp_ops_t.cma_min) for this rank: the
 * largest of its endpoints' when every peer is on this host and served by a transport
 * that has one, else 0. The barrier agrees on it (0 on any rank: none, else the largest),
 * so the tuner picks the same algorithm on every rank. */
static size_t local_cma_min(const weft_comm_t *comm)
{
    size_t m = 0;
    for (int p = 0; p < comm->nranks; p++) {
        const tp_ep_t *ep = comm->eps[p];
        if (p == comm->rank)
            continue;
        if (ep == NULL || ep->ops->cma_min == 0 ||
            comm->peers[p].host_id != comm->peers[comm->rank].host_id)
            return 0;
        m = WEFT_MAX(m, ep->ops->cma_min);
    }
    return m;
}

/* 1 when some peer's transport reads one-sidedly more than ALGO_CMA_SLOW_RATIO times
 * slower than it copies on this host (tp_ops_t.get_cost); *ratio the largest known. */
static int local_slow(const weft_comm_t *comm, double *ratio)
{
    *ratio = 0;
    for (int p = 0; p < comm->nranks; p++)
        if (p != comm->rank && comm->eps[p] && comm->eps[p]->ops->get_cost)
            *ratio = WEFT_MAX(*ratio, comm->eps[p]->ops->get_cost());
    return *ratio > ALGO_CMA_SLOW_RATIO;
}

/* 1 when some peer's one-sided reads are emulated over a network (tp_ep_t.rma_net). */
static int local_net(const weft_comm_t *comm)
{
    for (int p = 0; p < comm->nranks; p++)
        if (p != comm->rank && comm->eps[p] && comm->eps[p]->rma_net)
            return 1;
    return 0;
}

/* 1 when every peer's endpoint reads one-sidedly in blocking calls (shm). */
static int local_blocks(const weft_comm_t *comm)
{
    for (int p = 0; p < comm->nranks; p++)
        if (p != comm->rank && !(comm->eps[p] && comm->eps[p]->ops->get_blocks))
            return 0;
    return 1;
}

/* 1 when this rank reaches every peer with one-sided reads (transport.h: get), over at
 * most SCHED_META_KEYS transports, which it lists in rma_tps: their keys are what its
 * calls' metadata carry. */
static int local_rma(weft_comm_t *comm)
{
    comm->nrma_tps = 0;
    for (int p = 0; p < comm->nranks; p++) {
        const tp_ep_t *ep = comm->eps[p];
        if (p == comm->rank)
            continue;
        if (!(ep && ep->ops->get && (!ep->ops->rma_reach || ep->ops->rma_reach(ep))))
            return 0;
        int k = 0;
        while (k < comm->nrma_tps && comm->rma_tps[k] != ep->ops)
            k++;
        if (k == SCHED_META_KEYS)
            return 0;
        if (k == comm->nrma_tps)
            comm->rma_tps[comm->nrma_tps++] = ep->ops;
    }
    return 1;
}

/* "rank P", or in a split "rank R of the parent (P here)": the rank the user knows. */
static const char *rank_label(const weft_comm_t *comm, int p, char *buf, size_t n)
{
    if (comm->parent_ranks)
        snprintf(buf, n, "rank %d of the parent (%d here)", comm->parent_ranks[p], p);
    else
        snprintf(buf, n, "rank %d", p);
    return buf;
}

/* Two ranks of one host that read each other by single copy at about a copy's speed
 * (cma_blocks, not cma_slow): whether their cores share no cache (WEFT_SHM_FAR). Once
 * connected and bound (the cores it times are those the ranks will run on). The
 * transport times a cache line's round trips between them (tp_ops_t.core_rtt) and both
 * take the lower rank's word, so they agree even where their settings differ. Far, the
 * shm ring's copies wait on the other core's cache and single copy moves all-reduce and
 * reduce-scatter faster (algo.h: algo_cma_far_min). Both ranks probe or neither: every
 * condition is agreed at the barrier (cma_blocks means shm on both sides, and a transport
 * with get_blocks has core_rtt: transport.h). */
weft_status_t connect_cores_far(weft_comm_t *comm)
{
    comm->cores_far = comm->layout.far = 0;
    if (comm->nranks != 2 || comm->local_size != 2)
        return WEFT_OK;
    tp_ep_t *ep = comm->eps[1 - comm->rank];
    if (!comm->cma_blocks || comm->cma_slow || ep == NULL || ep->ops->core_rtt == NULL) {
        LOG_INFO(LOG_TUNE, "cores: not timed (single-copy reads %s)%s: all-reduce and "
                 "reduce-scatter keep the ring", !comm->cma_all ? "not possible here" :
                 !comm->cma_blocks ? "not by shm" : "slow here",
                 comm->cfg.shm_far == 1 ? ", WEFT_SHM_FAR=1 ignored" : "");
        return WEFT_OK;
    }
    long want = comm->cfg.shm_far;
    uint32_t rtt = want < 0 ? TP_RTT_MEASURE : want ? ALGO_FAR_FORCED : 0;
    weft_status_t st = ep->ops->core_rtt(comm, ep, &rtt);
    if (st != WEFT_OK) {
        char who[64];
        return weft_error_quiet(st, "connect: timing the cores' round trip with %s failed: "
                                "%s", rank_label(comm, ep->peer, who, sizeof(who)),
                                weft_last_error());
    }
    comm->cores_far = rtt == ALGO_FAR_FORCED ||
                      (rtt >= ALGO_FAR_RTT_MIN && rtt <= ALGO_FAR_RTT_MAX);
    comm->layout.far = comm->cores_far;
    char how[64];
    if (rtt == ALGO_FAR_FORCED || rtt == 0)
        snprintf(how, sizeof(how), "%s", rtt ? "far (WEFT_SHM_FAR=1" : "near (WEFT_SHM_FAR=0 "
                 "or not measured");
    else
        snprintf(how, sizeof(how), "%s (a round trip of %u ns", comm->cores_far ? "far" :
                 "near", rtt);
    if (comm->cores_far)
        LOG_INFO(LOG_TUNE, "cores: %s on rank 0): all-reduce by single copy from %uK, "
                 "reduce-scatter from %uK per rank", how, ALGO_CMA_FAR_ALLREDUCE_MIN >> 10,
                 ALGO_CMA_FAR_REDUCE_SCATTER_MIN >> 10);
    else
        LOG_INFO(LOG_TUNE, "cores: %s on rank 0): all-reduce and reduce-scatter keep the "
                 "ring", how);
    return WEFT_OK;
}

/* WEFT_OK unless a rank said in the address exchange that its setup failed: then no
 * rank connects (it would wait for that one until WEFT_TIMEOUT). */
static weft_status_t check_setups(const weft_comm_t *comm)
{
    char who[64];
    for (int p = 0; p < comm->nranks; p++)
        if (p != comm->rank && comm->peers[p].setup_failed)
            return weft_error(WEFT_ERR_PEER_LOST, "connect: %s on %.64s could not set up "
                              "its side of the communicator (its own error says why)",
                              rank_label(comm, p, who, sizeof(who)), comm->peers[p].hostname);
    return WEFT_OK;
}

/* connect_all's watch, noting whether it ended a wait (the failure is then another
 * rank's, which that rank knows). */
typedef struct {
    weft_status_t (*fn)(void *ctx);
    void *ctx;
    int said;
} watch_rec_t;

static weft_status_t watched(void *vrec)
{
    watch_rec_t *w = vrec;
    weft_status_t st = w->fn(w->ctx);
    if (st != WEFT_OK)
        w->said = 1;
    return st;
}

weft_status_t exchange_reduce(exchange_fn_t exchange, reduce_fn_t reduce, void *ctx, int n,
                              const void *mine, void *acc, const fold_t *f)
{
    if (reduce)
        return reduce(ctx, mine, acc, f);
    char *all = malloc((size_t)n * f->rec_len);
    if (all == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "connect: out of memory");
    weft_status_t st = exchange(ctx, mine, all, f->rec_len);
    memset(acc, 0, f->acc_len);
    for (int r = 0; st == WEFT_OK && r < n; r++)
        f->fold(acc, all + (size_t)r * f->rec_len, r);
    free(all);
    return st;
}

/* The packed records' lengths, folded: the longest, and the first rank whose record is
 * longer than this build takes (+1; 0: none) with its length. */
typedef struct {
    uint32_t max, bad_rank1, bad_len;
} lens_acc_t;

static void lens_fold(void *vacc, const void *rec, int r)
{
    lens_acc_t *a = vacc;
    uint32_t len;
    memcpy(&len, rec, sizeof(len));
    if (len > PEER_PACK_MAX && a->bad_rank1 == 0) {
        a->bad_rank1 = (uint32_t)r + 1;
        a->bad_len = len;
    }
    a->max = len > a->max ? len : a->max;
}

/* The address exchange with every record packed (peer_pack) to the longest one's
 * length: the longest length first (a fold: through rank 0, one number to each rank,
 * not n), and then the records. */
static weft_status_t exchange_packed(weft_comm_t *comm, exchange_fn_t exchange,
                                     reduce_fn_t reduce, void *ctx, const peer_info_t *self)
{
    int n = comm->nranks;
    uint8_t mine[PEER_PACK_MAX];
    memset(mine, 0, sizeof(mine));
    uint32_t len = (uint32_t)peer_pack(self, mine), max = 0;
    lens_acc_t lens;
    fold_t f = { sizeof(len), sizeof(lens), lens_fold };
    weft_status_t st = exchange_reduce(exchange, reduce, ctx, n, &len, &lens, &f);
    if (st == WEFT_OK && lens.bad_rank1)
        st = weft_error(WEFT_ERR_MISMATCH, "connect: rank %u's address record is %u bytes, "
                        "at most %zu here (different weft versions?)", lens.bad_rank1 - 1,
                        lens.bad_len, (size_t)PEER_PACK_MAX);
    max = lens.max;
    uint8_t *all = st == WEFT_OK ? malloc((size_t)n * max) : NULL;
    if (st == WEFT_OK && all == NULL)
        st = weft_error(WEFT_ERR_NO_MEMORY, "connect: out of memory");
    if (st == WEFT_OK)
        st = exchange(ctx, mine, all, max);
    if (st == WEFT_OK && comm->rank == 0)
        LOG_INFO(LOG_INIT, "address records: %u bytes each, packed (%zu unpacked), %d ranks",
                 max, sizeof(peer_info_t), n);
    for (int r = 0; st == WEFT_OK && r < n; r++)
        if (peer_unpack(all + (size_t)r * max, max, &comm->peers[r]) != 0)
            st = weft_error(WEFT_ERR_MISMATCH, "connect: rank %d's address record (%u bytes "
                            "with padding) does not parse (different weft versions?)", r, max);
    free(all);
    return st;
}

/* The closing barrier's records folded: what every rank must agree on (connect_all). */
typedef struct {
    int32_t all_ok, first_bad, cma, blocks, slow, net, cma_min_k, knob_rank, knob, pad;
    uint64_t buffsize_min;      /* the smallest WEFT_BUFFSIZE (0: a rank left out) */
    cfg_agree_t cfg0;           /* rank 0's knobs, which every rank's must equal */
} agree_acc_t;

static void agree_fold(void *vacc, const void *rec, int r)
{
    agree_acc_t *s = vacc;
    connect_agree_t a;
    memcpy(&a, rec, sizeof(a));
    if (r == 0) {
        s->all_ok = s->cma = s->blocks = 1;
        s->first_bad = s->knob_rank = s->knob = -1;
        s->cma_min_k = a.cma_min_k;
        s->cfg0 = a.cfg;
    }
    s->all_ok &= a.ok;
    if (!a.ok && s->first_bad < 0)
        s->first_bad = r;
    s->cma &= a.rma;
    s->blocks &= a.blocks;
    s->slow |= a.slow;
    s->net |= a.net;
    if (a.buffsize > 0 && (s->buffsize_min == 0 || a.buffsize < s->buffsize_min))
        s->buffsize_min = a.buffsize;
    for (int k = 0; s->knob_rank < 0 && k < CFG_AGREE_MAX; k++)
        if (a.cfg.h[k] != s->cfg0.h[k]) {
            s->knob_rank = r;
            s->knob = k;
        }
    s->cma_min_k = a.cma_min_k && s->cma_min_k ? WEFT_MAX(s->cma_min_k, a.cma_min_k) : 0;
}

weft_status_t connect_all(weft_comm_t *comm, exchange_fn_t exchange, reduce_fn_t reduce,
                          int packed,
                          weft_status_t (*watch)(void *ctx),
                          void (*failed)(void *ctx, weft_status_t st), void *ctx)
{
    peer_info_t self;
    enable_transports(comm);
    weft_status_t st = local_setup(comm, &self);
    int setup_own = self.setup_failed = st != WEFT_OK;
    if (packed)
        RETURN_IF_ERR(exchange_packed(comm, exchange, reduce, ctx, &self));
    else
        RETURN_IF_ERR(exchange(ctx, &self, comm->peers, sizeof(self)));
    compute_local(comm);
    int others = 0;     /* the failure is another rank's: it knows, nobody waits for us */
    if (st == WEFT_OK) {
        st = check_setups(comm);
        others = st != WEFT_OK;
    }
    if (st == WEFT_OK) {
        watch_rec_t rec = { watch, ctx, 0 };
        comm->setup_watch = (sock_watch_t){ watch ? watched : NULL, &rec };
        st = connect_peers(comm);
        comm->setup_watch = (sock_watch_t){ NULL, NULL };
        others = st != WEFT_OK && rec.said;
    }
    /* only a failure of this rank's own is told (its local setup, or no fd or memory
     * while connecting), so that the others name the rank to blame: a connection the
     * peer dropped or that timed out is mostly a consequence of that peer's state,
     * which that peer tells, or which WEFT_TIMEOUT reports as a timeout */
    int told = st != WEFT_OK && !others && failed &&
               (setup_own || st == WEFT_ERR_SYSTEM || st == WEFT_ERR_NO_MEMORY);
    if (told)
        failed(ctx, st);
    /* barrier, which also agrees on what every rank can do: nobody drops names before
     * everyone has connected, single copy is used only if all ranks have it, and the
     * ranks' schedule knobs match (else each would wait for frames the others never
     * send: a hang, or a frame's length refused) */
    double ratio = 0;
    connect_agree_t mine = { st == WEFT_OK, st == WEFT_OK && local_rma(comm),
                             (int)(local_cma_min(comm) >> 10),
                             st == WEFT_OK && local_blocks(comm),
                             st == WEFT_OK && local_slow(comm, &ratio),
                             st == WEFT_OK && local_net(comm), { { 0 } },
                             comm->buffsize_shm ? comm->buffsize_shm : comm->cfg.buffsize };
    cfg_agree_hash(&comm->cfg, &mine.cfg);
    /* which failure to report: this rank's own where it told the others it was this
     * rank's, or where the watch or the address exchange named another rank; else the
     * barrier's when it says who was lost (this rank's own connect error is then mostly
     * a consequence, "connection reset"), but never the barrier's timeout (a connect
     * that took the whole timeout leaves the bootstrap's deadline spent, and that
     * timeout would name rank 0 instead of the connection) */
    char why[512] = "";
    if (st != WEFT_OK)
        snprintf(why, sizeof(why), "%s", weft_last_error());
    agree_acc_t agree;
    fold_t f = { sizeof(mine), sizeof(agree), agree_fold };
    weft_status_t xs = exchange_reduce(exchange, reduce, ctx, comm->nranks, &mine, &agree, &f);
    uint64_t buffsize_min = agree.buffsize_min ? agree.buffsize_min : mine.buffsize;
    if (xs != WEFT_OK && (st == WEFT_OK || (xs != WEFT_ERR_TIMEOUT && !others && !told)))
        return xs;
    if (st != WEFT_OK)
        return weft_error_quiet(st, "%s", why);
    if (!agree.all_ok) {
        char who[64];
        return weft_error(WEFT_ERR_PEER_LOST, "connect: %s failed to connect (its own error "
                          "says why)", rank_label(comm, agree.first_bad, who, sizeof(who)));
    }
    if (agree.knob_rank >= 0) {
        char val[64], r0[64], rp[64];
        const char *name = cfg_agree_name(agree.knob, &comm->cfg, val, sizeof(val));
        name = name ? name : "a schedule knob";
        return weft_error(WEFT_ERR_MISMATCH, "config: %s differs between %s and %s "
                          "(this rank, %d, has %s=%s): each rank picks the algorithm of "
                          "every call from it, so set it alike on every rank (or on none)",
                          name, rank_label(comm, 0, r0, sizeof(r0)),
                          rank_label(comm, agree.knob_rank, rp, sizeof(rp)), comm->rank, name,
                          val);
    }
    comm->cma_all = agree.cma && comm->nranks > 1;
    comm->buffsize_min = (size_t)buffsize_min;
    if (buffsize_min < comm->cfg.buffsize)
        LOG_INFO(LOG_TUNE, "WEFT_BUFFSIZE: %zu here, %llu on another rank: frames fit the "
                 "smaller", comm->cfg.buffsize, (unsigned long long)buffsize_min);
    /* single copy by default only where no rank's reads are emulated over a network
     * (ucx held to tcp: the ring was 1.3-2x faster, docs/PERF.md) */
    comm->cma_min_default = comm->cma_all && !agree.net ? (size_t)agree.cma_min_k << 10 : 0;
    comm->cma_blocks = comm->cma_all && agree.blocks;
    comm->cma_slow = (comm->cma_blocks && agree.slow) || (comm->cma_all && agree.net);
    if (comm->cma_all && agree.net)
        LOG_INFO(LOG_TUNE, "single-copy reads: emulated over a network%s: single copy only "
                 "by WEFT_ALGO=cma or WEFT_CMA_MIN", mine.net ? "" :
                 " on another rank");
    if (comm->cma_blocks)
        LOG_INFO(LOG_TUNE, "single-copy reads: %.1fx a copy's time here (256K; 0: not "
                 "measured)%s: all-gather %s", ratio, agree.slow && !mine.slow ?
                 ", more on another rank" : "", comm->cma_slow ?
                 "keeps the ring and direct by default (over 2.5x)" :
                 "reads by single copy from 32K per rank by default");
    RETURN_IF_ERR(tuner_setup(comm));
    if (comm->cfg.spin < 0)     /* spinning only helps when every rank has a core */
        comm->cfg.spin = comm->local_size > sysconf(_SC_NPROCESSORS_ONLN) ? 0 : 2000;
    for (int i = 0; i < comm->ntransports; i++)
        RETURN_IF_ERR(comm->transports[i]->post_connect(comm));
    return WEFT_OK;
}

void connect_close_all(weft_comm_t *comm)
{
    /* every endpoint's close started first: a rank waits for all its peers' answers at
     * once, not one peer after the other (ib: 0.54 s each for peers already gone) */
    for (int p = 0; comm->eps && p < comm->nranks; p++)
        if (comm->eps[p] && comm->eps[p]->ops->close_start)
            comm->eps[p]->ops->close_start(comm->eps[p]);
    for (int p = 0; comm->eps && p < comm->nranks; p++)
        if (comm->eps[p]) {
            comm->eps[p]->ops->close(comm->eps[p]);
            comm->eps[p] = NULL;
        }
    for (int i = 0; i < comm->ntransports; i++)
        comm->transports[i]->local_cleanup(comm);
}

weft_status_t connect_accept(weft_comm_t *comm, int lfd, uint64_t deadline, const char *tp,
                             int (*taken)(void *ctx, int who), void *ctx, int *fd_p,
                             int *who_p)
{
    for (;;) {
        int fd, who;
        RETURN_IF_ERR(sock_accept_watched(lfd, deadline, &comm->setup_watch, &fd));
        /* as in bootstrap.c: a silent stranger holds the accept loop 2 s at most */
        uint64_t hello_deadline = WEFT_MIN(deadline, time_ns() + 2000000000ull);
        weft_status_t st = auth_handshake_watched(fd, comm->has_secret ? comm->secret : NULL,
                                                  AUTH_DATA, comm->id, comm->rank,
                                                  hello_deadline, &comm->setup_watch, &who);
        if (st == WEFT_OK && (who < 0 || who >= comm->rank || taken(ctx, who))) {
            LOG_WARN(LOG_NET, "%s: dropped a connection claiming rank %d", tp, who);
            st = WEFT_ERR_AUTH;
        }
        if (st == WEFT_OK) {
            *fd_p = fd;
            *who_p = who;
            return WEFT_OK;
        }
        close(fd);
        if ((st == WEFT_ERR_TIMEOUT && time_ns() >= deadline) || st == WEFT_ERR_SYSTEM ||
            st == WEFT_ERR_NO_MEMORY)
            return st;      /* this rank's own failure (out of fds, memory), not a stranger */
        if (comm->setup_watch.fn)   /* the watch's news ended it: not a stranger */
            RETURN_IF_ERR(comm->setup_watch.fn(comm->setup_watch.ctx));
    }
}
