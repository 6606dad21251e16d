/*
 * comm.c - communicator lifecycle: init (explicit or from the launcher), split,
 * destroy, abort, and the accessors.
 *
 * Invariants: a communicator returned to the caller is fully connected to every peer;
 * destroy first stops its progress thread, then fails the ops still queued with
 * WEFT_ERR_ABORTED (their requests may still be waited on, which frees them);
 * on any failure init returns the error and frees everything it made (no segment, no
 * socket, no memory left behind). The communicator id is drawn by rank 0 at init and
 * derived deterministically at split, so every member agrees on it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algo.h"
#include "comm_int.h"
#include "check.h"
#include "sock.h"
#include "status.h"
#include "util.h"
#ifdef WEFT_HAVE_CUDA
#include "cuda_coll.h"
#endif

/* ---- fork: the process's live communicators, and a child's view of them ----------
 *
 * An application forks after init (PyTorch's data-loader workers). The child inherits
 * every communicator's sockets, mappings and state, but it is not the rank: before
 * 2026-11-27 a worker that outlived its rank kept the rank's tcp connections open (the
 * peers saw nothing die and waited until WEFT_TIMEOUT), and a weft_comm_destroy in the
 * child (an atexit handler) shut down the parent's sockets and told its peers it was
 * gone. Now the child closes its copies of the sockets at fork (the transports'
 * fork_child), every call there is refused, and destroy there frees memory only. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static weft_comm_t *live_comms;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) { pthread_mutex_lock(&live_lock); }
static void fork_parent(void)  { pthread_mutex_unlock(&live_lock); }

static void fork_child(void)
{
    for (weft_comm_t *c = live_comms; c != NULL; c = c->live_next) {
        c->forked = 1;
        for (int p = 0; c->eps && p < c->nranks; p++)
            if (c->eps[p] && c->eps[p]->ops->fork_child)
                c->eps[p]->ops->fork_child(c->eps[p]);
    }
    pthread_mutex_unlock(&live_lock);
}

static void atfork_install(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void live_add(weft_comm_t *c)
{
    pthread_once(&atfork_once, atfork_install);
    pthread_mutex_lock(&live_lock);
    c->live_next = live_comms;
    if (live_comms)
        live_comms->live_prev = c;
    live_comms = c;
    pthread_mutex_unlock(&live_lock);
}

static void live_remove(weft_comm_t *c)
{
    pthread_mutex_lock(&live_lock);
    if (c->live_prev)
        c->live_prev->live_next = c->live_next;
    else if (live_comms == c)
        live_comms = c->live_next;
    if (c->live_next)
        c->live_next->live_prev = c->live_prev;
    c->live_next = c->live_prev = NULL;
    pthread_mutex_unlock(&live_lock);
}

/* secret: the job's WEFT_SECRET (init: the environment's; split: the parent's, which an
 * application may have taken out of its environment since), NULL or "" for none; the
 * caller checked its length. */
static weft_status_t comm_alloc(int rank, int nranks, const weft_config_t *cfg,
                                const char *secret, weft_comm_t **comm_p)
{
    weft_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "comm_init: out of memory");
    if (progress_init(c) != WEFT_OK) {      /* before anything destroy would undo */
        free(c);
        return WEFT_ERR_SYSTEM;
    }
    c->rank = rank;
    c->nranks = nranks;
    c->cfg = *cfg;
    size_t n = (size_t)nranks;
    c->peers = calloc(n, sizeof(*c->peers));
    c->eps = calloc(n, sizeof(*c->eps));
    c->cursor = calloc(2 * n, sizeof(int));
    c->frame_tx = calloc(n, sizeof(uint32_t));
    c->frame_rx = calloc(n, sizeof(uint32_t));
    c->p2p_tx = calloc(n, sizeof(uint32_t));
    c->p2p_rx = calloc(n, sizeof(uint32_t));
    c->meta_in = calloc(n, sizeof(sched_meta_t));
    c->rma.rmem = calloc(2 * n, sizeof(*c->rma.rmem));
    if (secret && *secret) {
        snprintf(c->secret, sizeof(c->secret), "%s", secret);
        c->has_secret = 1;
    }
    snprintf(c->transport_desc, sizeof(c->transport_desc), "self");
    if (!c->peers || !c->eps || !c->cursor || !c->frame_tx || !c->frame_rx || !c->p2p_tx ||
        !c->p2p_rx || !c->meta_in || !c->rma.rmem) {
        weft_comm_destroy(c);
        return weft_error(WEFT_ERR_NO_MEMORY, "comm_init: out of memory");
    }
    for (size_t k = 0; k < 2 * n; k++)
        c->cursor[k] = -1;          /* no queue: the engine sets only its schedule's peers' */
    live_add(c);
    *comm_p = c;
    return WEFT_OK;
}

static void comm_set_id(weft_comm_t *c, uint64_t id)
{
    c->id = id;
    c->id32 = (uint32_t)(id ^ (id >> 32));
}

weft_status_t comm_local_addr(const weft_comm_t *c, struct sockaddr_in *out)
{
    const char *ifname = c->cfg.socket_ifname;
    if (ifname[strspn(ifname, ",")] == '\0')
        ifname = "";                /* only empty entries (","): as if unset */
    if (!*ifname && c->rdv_named_lo) {
        /* the route to a loopback rendezvous is the loopback: ranks on other hosts
         * could not reach an address on it. The first other interface instead. */
        weft_error_saved_t before;
        weft_error_save(&before);
        if (sock_local_addr(NULL, "^lo,docker,virbr", out) == WEFT_OK) {
            char as[64];
            LOG_INFO(LOG_NET, "the rendezvous resolves to a loopback address on this host: "
                     "data connections listen on %s (WEFT_SOCKET_IFNAME chooses)",
                     sock_addr_str(out, as, sizeof(as)));
            return WEFT_OK;
        }
        weft_error_restore(&before);   /* no other interface: a host on its own */
    }
    return sock_local_addr(&c->rdv_addr, ifname, out);
}

/* fold_t: rank 0's record, whatever the others' */
static void keep_rank0(void *acc, const void *rec, int r)
{
    if (r == 0)
        memcpy(acc, rec, sizeof(uint64_t));
}

static weft_status_t comm_init(int rank, int nranks, const char *rendezvous,
                               uint32_t job_tag, weft_comm_t **comm_p)
{
    weft_config_t cfg;
    weft_comm_t *c = NULL;
    bootstrap_t *bs = NULL;
    weft_status_t st;
    if (comm_p == NULL)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "comm_init_rank: comm_p is NULL");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "comm_init_rank: rank %d of %d is "
                                "not a rank", rank, nranks);
    if (rendezvous == NULL || strchr(rendezvous, ':') == NULL)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "comm_init: rendezvous '%s' is not "
                                "host:port (WEFT_ADDR, MASTER_ADDR and MASTER_PORT, or "
                                "weft_comm_init_rank's argument)",
                                rendezvous ? rendezvous : "(null)");
    /* kept whole: a longer one was cut to its first 255 bytes, and two jobs whose
     * secrets differed only past them authenticated each other */
    const char *secret = getenv("WEFT_SECRET");
    if (secret && strlen(secret) >= sizeof(((weft_comm_t *)0)->secret))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "comm_init: WEFT_SECRET is %zu bytes, "
                                "%zu at most", strlen(secret),
                                sizeof(((weft_comm_t *)0)->secret) - 1);
    RETURN_IF_ERR(cfg_load(&cfg));
    RETURN_IF_ERR(algo_check_config(&cfg));
    log_set_rank(rank);
    GOTO_IF_ERR(comm_alloc(rank, nranks, &cfg, secret, &c), st, fail);
    sock_fd_room(nranks);   /* a soft limit of 1024 met about 500 ranks over tcp */
    /* one WEFT_TIMEOUT for the whole of init: resolving, the rendezvous, connecting and
     * the cores' probe each wait until it, not a timeout of their own */
    c->setup_deadline = time_ns() + (uint64_t)(cfg.timeout_s * 1e9);
    /* a name may not resolve yet (rank 0's service name on Kubernetes) */
    GOTO_IF_ERR(sock_resolve_addr(rendezvous, c->setup_deadline, &c->rdv_addr), st, fail);
    c->rdv_named_lo = nranks > 1 && sock_named_loopback(rendezvous, &c->rdv_addr);
    /* without a secret, whoever reaches the rendezvous during init joins as a rank: said
     * once, by rank 0, where that can be more than this host's own processes */
    if (nranks > 1 && rank == 0 && !c->has_secret &&
        ((ntohl(c->rdv_addr.sin_addr.s_addr) >> 24) != 127 || c->rdv_named_lo))
        LOG_WARN(LOG_INIT, "no WEFT_SECRET: any process that reaches the rendezvous %s during "
                 "init can join this job as a rank and receive its data; export the same "
                 "WEFT_SECRET to every rank (e.g. openssl rand -hex 16; -x WEFT_SECRET, "
                 "-genvlist WEFT_SECRET, srun --export=ALL)", rendezvous);
    if (nranks > 1 && c->rdv_addr.sin_port == 0) {
        st = weft_error(WEFT_ERR_INVALID_ARG, "comm_init: rendezvous '%s' has port 0: rank 0 "
                        "would listen on a port of the kernel's choosing that no other rank "
                        "knows; name a port (WEFT_ADDR=host:port)", rendezvous);
        goto fail;
    }
    /* where this rank listens if it relays exchanges (a rank with children in the
     * bootstrap's tree): a failure here is told in the bootstrap (relay_setup), so that
     * the others hear of it at once, and returned */
    struct sockaddr_in relay;
    weft_status_t relay_st = WEFT_OK;
    char relay_why[512] = "";
    if (bootstrap_relays(rank, nranks) && (relay_st = comm_local_addr(c, &relay)) != WEFT_OK)
        snprintf(relay_why, sizeof(relay_why), "%s", weft_last_error());
    st = bootstrap_open(rank, nranks, rendezvous, &c->rdv_addr, c->rdv_named_lo,
                        relay_st == WEFT_OK ? &relay : NULL, c->has_secret ? c->secret : NULL,
                        job_tag, c->setup_deadline, &bs);
    if (st != WEFT_OK && relay_st != WEFT_OK)
        st = weft_error_quiet(relay_st, "bootstrap: no address to listen on for the ranks "
                              "this rank relays init's records to: %s", relay_why);
    if (st != WEFT_OK)
        goto fail;
    uint64_t id = 0, id0;
    if (rank == 0 && random_bytes(&id, sizeof(id)) != 0)
        id = time_ns() ^ ((uint64_t)getpid() << 32);
    fold_t f = { sizeof(id), sizeof(id0), keep_rank0 };
    GOTO_IF_ERR(bootstrap_reduce(bs, &id, &id0, &f), st, fail);    /* rank 0's, to all */
    comm_set_id(c, id0);
    GOTO_IF_ERR(connect_all(c, bootstrap_exchange, bootstrap_reduce, 1, bootstrap_watch,
                            bootstrap_failed, bs), st, fail);
    bootstrap_close(bs);
    bs = NULL;
    GOTO_IF_ERR(comm_bind(c), st, fail);
    GOTO_IF_ERR(connect_cores_far(c), st, fail);
    c->setup_deadline = 0;
    /* SIGUSR1 prints the recorders: set once an init succeeded (a refused or failed
     * one left it set before 2026-11-28, and SIGUSR1 no longer ended the process) */
    fr_install_signal();
    LOG_INFO(LOG_INIT, "comm %#x: rank %d of %d ready (local %d of %d, %s)", c->id32, rank,
             nranks, c->local_rank, c->local_size, c->transport_desc);
    *comm_p = c;
    return WEFT_OK;
fail:
    bootstrap_close(bs);
    if (c && c->bound_process)
        comm_unbind();      /* a failed init leaves the process where it ran */
    if (c)
        weft_comm_destroy(c);
    return st;
}

uint64_t comm_setup_deadline(const weft_comm_t *c)
{
    return c->setup_deadline ? c->setup_deadline
                             : time_ns() + (uint64_t)(c->cfg.timeout_s * 1e9);
}

weft_status_t weft_comm_init(weft_comm_t **comm_p)
{
    launch_env_t env;
    if (comm_p == NULL)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "comm_init: comm_p is NULL");
    RETURN_IF_ERR(env_detect(&env));
    LOG_INFO(LOG_INIT, "rank %d of %d from %s, rendezvous %s", env.rank, env.nranks,
             env.source, env.rendezvous);
    return comm_init(env.rank, env.nranks, env.rendezvous, env.job_tag, comm_p);
}

weft_status_t weft_comm_init_rank(int rank, int nranks, const char *rendezvous,
                                  weft_comm_t **comm_p)
{
    return comm_init(rank, nranks, rendezvous, 0, comm_p);
}

/* ---- split ---- */

typedef struct {
    weft_comm_t *parent;
    int *members;      /* parent ranks of the new communicator, in new-rank order */
    int n;             /* 0 for a rank that only helps (color < 0) */
    uint32_t split_no; /* the parent's count of splits before this one */
} split_ctx_t;

/* exchange_fn_t over the parent: all parent ranks take part; each keeps its group's
 * (all NULL: keeps nothing). */
static weft_status_t split_exchange(void *vctx, const void *mine, void *all, size_t len)
{
    split_ctx_t *x = vctx;
    weft_comm_t *p = x->parent;
    char *every = malloc(len * (size_t)p->nranks);
    if (every == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "comm_split: out of memory");
    weft_status_t st = weft_allgather(mine, every, len, WEFT_UINT8, p);
    for (int i = 0; st == WEFT_OK && all != NULL && i < x->n; i++)
        memcpy((char *)all + (size_t)i * len, every + (size_t)x->members[i] * len, len);
    free(every);
    return st;
}

/* connect_all's watch: while this rank waits for a member to connect, the members'
 * states on the parent's endpoints say whether one is gone (it would never connect, and
 * the wait would last WEFT_TIMEOUT) or could not connect this split (split_failed). */
static weft_status_t split_watch(void *vctx)
{
    split_ctx_t *x = vctx;
    weft_comm_t *p = x->parent;
    weft_status_t st = WEFT_OK;
    int entered = comm_enter(p);
    for (int i = 0; st == WEFT_OK && i < x->n; i++) {
        int r = x->members[i];
        tp_ep_t *ep = r == p->rank ? NULL : p->eps[r];
        if (ep == NULL)
            continue;
        tp_state_t s;
        weft_status_t ps = ep->ops->peer_state(ep, &s);
        if (ps == WEFT_OK && s.kind != TP_STATE_SPLIT_FAILED)
            ps = ep->ops->check_alive(ep);  /* shm: a member that exited */
        if (s.kind == TP_STATE_SPLIT_FAILED && (uint32_t)s.other == x->split_no)
            st = weft_error(WEFT_ERR_PEER_LOST, "comm_split: rank %d of the parent could not "
                            "connect the new communicator (%s; its own error says why)", r,
                            weft_status_str(s.status));
        else if (s.kind == TP_STATE_FAILED)     /* the parent failed: it will not connect */
            st = weft_error(WEFT_ERR_PEER_LOST, "comm_split: rank %d of the parent failed "
                            "(%s) while the new communicator connected", r,
                            weft_status_str(s.status));
        else if (ps < 0)
            st = weft_error(WEFT_ERR_PEER_LOST, "comm_split: rank %d of the parent was lost "
                            "while the new communicator connected: %s", r, weft_last_error());
    }
    comm_leave(p, entered);
    return st;
}

/* connect_all's failed: tells the members that this rank will not connect (its state on
 * the parent's endpoints), and holds back the parent's WAITING posts, which would
 * replace that state, until the split is over. */
static void split_failed(void *vctx, weft_status_t why)
{
    split_ctx_t *x = vctx;
    weft_comm_t *p = x->parent;
    tp_state_t s = { .kind = TP_STATE_SPLIT_FAILED, .status = why, .origin = p->rank,
                     .other = (int32_t)x->split_no };
    int entered = comm_enter(p);
    __atomic_store_n(&p->hold_state, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < x->n; i++)
        if (x->members[i] != p->rank && p->eps[x->members[i]])
            p->eps[x->members[i]]->ops->post_state(p->eps[x->members[i]], &s);
    comm_leave(p, entered);
}

typedef struct { int color, key, rank; } split_entry_t;

static int cmp_entry(const void *a, const void *b)
{
    const split_entry_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->rank - y->rank;
}

weft_status_t weft_comm_split(weft_comm_t *comm, int color, int key, weft_comm_t **comm_p)
{
    if (comm == NULL || comm_p == NULL)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "comm_split: %s is NULL",
                                comm ? "comm_p" : "comm");
    int mine[2] = { color < 0 ? -1 : color, key }, n = comm->nranks, newrank = -1, m = 0;
    int *all = malloc(2 * (size_t)n * sizeof(int));
    split_entry_t *grp = malloc((size_t)n * sizeof(*grp));
    int *members = malloc((size_t)n * sizeof(int));
    weft_comm_t *c = NULL;
    weft_status_t st = WEFT_OK;
    if (!all || !grp || !members) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "comm_split: out of memory");
        goto out;   /* the peers will fail their exchange with us: a timeout, not a hang */
    }
    st = weft_allgather(mine, all, 2, WEFT_INT32, comm);
    if (st != WEFT_OK) {    /* the call that failed is the split, not an allgather */
        st = weft_error_quiet(st, "comm_split: exchanging colors and keys failed: %s",
                              weft_last_error());
        goto out;
    }
    for (int r = 0; mine[0] >= 0 && r < n; r++)
        if (all[2 * r] == mine[0])
            grp[m++] = (split_entry_t){ all[2 * r], all[2 * r + 1], r };
    qsort(grp, (size_t)m, sizeof(*grp), cmp_entry);
    for (int i = 0; i < m; i++) {
        members[i] = grp[i].rank;
        if (grp[i].rank == comm->rank)
            newrank = i;
    }
    uint32_t split_no = comm->nsplits++;
    split_ctx_t x = { comm, members, m, split_no };
    /* where the parent's shm rings shrank to fit /dev/shm, the split's are no larger:
     * its pairs are the parent's, so it takes no more than the parent did, and the
     * groups of a split set up at once (each sees the same free space) fit together */
    weft_config_t ccfg = comm->cfg;
    if (comm->buffsize_shm && comm->buffsize_shm < ccfg.buffsize)
        ccfg.buffsize = comm->buffsize_shm;
    if (mine[0] >= 0)
        st = comm_alloc(newrank, m, &ccfg, comm->has_secret ? comm->secret : NULL, &c);
    if (mine[0] < 0 || st != WEFT_OK) {
        /* take part in the exchanges connect_all makes, with nothing to connect: a rank
         * left out, or a member that could not allocate its communicator, which says so
         * (setup_failed), so that no member waits for it */
        char why[512];
        snprintf(why, sizeof(why), "%s", st != WEFT_OK ? weft_last_error() : "");
        peer_info_t dummy;
        connect_agree_t flags = { 0 };
        memset(&dummy, 0, sizeof(dummy));
        dummy.rank = (uint32_t)newrank;
        dummy.pid = (uint32_t)getpid();
        dummy.pidns = pid_ns_id();
        (void)gethostname(dummy.hostname, sizeof(dummy.hostname) - 1);
        dummy.setup_failed = st != WEFT_OK;
        weft_status_t xs = split_exchange(&x, &dummy, NULL, sizeof(dummy));
        if (xs == WEFT_OK)
            xs = split_exchange(&x, &flags, NULL, sizeof(flags));
        if (st != WEFT_OK)
            st = weft_error_quiet(st, "%s", why);
        else
            st = xs;
        if (st == WEFT_OK)
            *comm_p = NULL;
        goto out;
    }
    c->rdv_addr = comm->rdv_addr;
    c->rdv_named_lo = comm->rdv_named_lo;
    uint64_t h = hash_bytes(HASH_SEED, &comm->id, sizeof(comm->id));
    h = hash_bytes(h, &split_no, sizeof(split_no));
    comm_set_id(c, hash_bytes(h, &mine[0], sizeof(mine[0])));
    c->parent_ranks = members;
    /* connecting and the cores' probe: one WEFT_TIMEOUT (the exchanges on the parent are
     * its collectives, each with its own) */
    c->setup_deadline = time_ns() + (uint64_t)(c->cfg.timeout_s * 1e9);
    sock_fd_room(c->nranks);
    st = connect_all(c, split_exchange, NULL, 0, split_watch, split_failed, &x);
    if (st == WEFT_OK)
        st = connect_cores_far(c);      /* its errors name parent ranks too */
    c->parent_ranks = NULL;
    c->setup_deadline = 0;
    __atomic_store_n(&comm->hold_state, 0, __ATOMIC_RELAXED);
    if (st != WEFT_OK) {
        weft_comm_destroy(c);
        goto out;
    }
    *comm_p = c;
out:
    free(all);
    free(grp);
    free(members);
    return st;
}

/* ---- teardown and accessors ---- */

/* One INFO line (NET): the endpoints' byte counters summed by transport, every enabled
 * transport named (0 where no peer used it); tests read it to see which transport carried
 * a job's traffic (tests/test_multihost.sh). */
static void log_bytes(const weft_comm_t *comm)
{
    if (!log_enabled(LOG_LVL_INFO, LOG_NET) || comm->eps == NULL)
        return;
    char line[256];
    size_t n = 0;
    line[0] = '\0';
    for (int i = 0; i < comm->ntransports; i++) {
        const tp_ops_t *t = comm->transports[i];
        uint64_t tx = 0, rx = 0;
        for (int p = 0; p < comm->nranks; p++)
            if (comm->eps[p] && comm->eps[p]->ops == t) {
                tx += comm->eps[p]->bytes_tx;
                rx += comm->eps[p]->bytes_rx;
            }
        n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%s sent %" PRIu64 " recv %" PRIu64,
                              i ? ", " : "", t->name, tx, rx);
        if (n >= sizeof(line))
            break;
    }
    LOG_INFO(LOG_NET, "comm %#x: rank %d of %d bytes by transport: %s", comm->id32, comm->rank,
             comm->nranks, line[0] ? line : "none");
}

weft_status_t weft_comm_destroy(weft_comm_t *comm)
{
    if (comm == NULL)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "comm_destroy: comm is NULL");
    live_remove(comm);
    if (comm->forked) {
        /* the parent's communicator: no thread to stop here, no peer to tell, no socket to
         * shut down, no segment flag to set; what it holds goes with this process */
        return WEFT_OK;
    }
    /* an abort from another thread (a watchdog) may still be telling the peers: the call
     * it ended returned as soon as it saw the flag, and its caller destroys at once */
    while (__atomic_load_n(&comm->abort_busy, __ATOMIC_ACQUIRE) > 0)
        sched_yield();
#ifdef WEFT_HAVE_CUDA
    cuda_queue_free(comm);          /* runs what is queued on the GPU streams first */
#endif
    progress_fini(comm);            /* joins the thread; nothing runs the engine now */
    engine_cancel_all(comm);
    log_bytes(comm);
    connect_close_all(comm);
#ifdef WEFT_HAVE_CUDA
    cuda_ipc_free(comm);
#endif
    tuner_cache_clear(comm);
    free(comm->peers);
    free(comm->eps);
    free(comm->cursor);
    free(comm->frame_tx);
    free(comm->frame_rx);
    free(comm->p2p_tx);
    free(comm->p2p_rx);
    free(comm->meta_in);
    free(comm->rma.rmem);
    free(comm->st);
    free(comm->tmp);
    free(comm->rank_host);
    free(comm);
    return WEFT_OK;
}

weft_status_t weft_comm_abort(weft_comm_t *comm)
{
    if (comm == NULL)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "comm_abort: comm is NULL");
    /* counted before the flag: a call that sees the flag and returns, and a destroy
     * that follows, find this abort in progress and wait for it */
    if (comm->forked)           /* the parent's peers are not this process's to tell */
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "comm_abort: the communicator "
                                "belongs to the parent of this process (made by fork)");
    __atomic_add_fetch(&comm->abort_busy, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&comm->aborted, 1, __ATOMIC_RELEASE);
    fail_abort_peers(comm);     /* they see WEFT_ERR_PEER_LOST; a pending call here ends */
#ifdef WEFT_HAVE_CUDA
    /* and the stream queue's communicator: its thread may wait in a collective there,
     * and destroy joins that thread (ncclCommAbort hung for good, under the NCCL shim's
     * endless WEFT_TIMEOUT, where a peer never came: WEFT_CUDA_ASYNC=1) */
    cuda_queue_abort(comm);
#endif
    __atomic_sub_fetch(&comm->abort_busy, 1, __ATOMIC_ACQ_REL);
    return WEFT_OK;
}

weft_status_t weft_comm_dump(weft_comm_t *comm)
{
    if (comm == NULL)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "comm_dump: comm is NULL");
    if (comm->forked)           /* its lock may have been held by a thread the fork left */
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "comm_dump: the communicator "
                                "belongs to the parent of this process (made by fork)");
    int entered = comm_enter(comm);
    fr_dump(&comm->flight, stderr, comm->rank, comm->nranks, comm->id32, "weft_comm_dump");
    comm_leave(comm, entered);
    return WEFT_OK;
}

int weft_comm_rank(const weft_comm_t *comm)        { return comm ? comm->rank : -1; }
int weft_comm_size(const weft_comm_t *comm)        { return comm ? comm->nranks : -1; }
int weft_comm_local_rank(const weft_comm_t *comm)  { return comm ? comm->local_rank : -1; }
int weft_comm_local_size(const weft_comm_t *comm)  { return comm ? comm->local_size : -1; }
const char *weft_comm_transport(const weft_comm_t *comm)
{
    return comm ? comm->transport_desc : NULL;
}
