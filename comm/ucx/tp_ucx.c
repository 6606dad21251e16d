/*
 * tp_ucx.c - the UCX transport: setup, liveness and teardown (the frames and peer
 * states are in ucx_data.c).
 *
 * The process has one ucp_context and one ucp_worker, shared by its communicators (see
 * `shared` below for why); each communicator's tp_ctx holds its endpoints and its id,
 * which every tag carries. UCX is configured from the UCX_* environment as every UCX
 * program is (ucp_config_read, default prefix): UCX_TLS, UCX_NET_DEVICES,
 * UCX_RNDV_THRESH... work as UCX users expect. The worker's address is this rank's
 * address blob; connect creates one ucp_ep per peer from the peer's blob, in error mode
 * PEER, with a callback that marks the endpoint lost. UCX wires endpoints up lazily, so
 * connect never waits for a peer. The progress op drives the worker once per engine pass.
 *
 * Selection: WEFT_TRANSPORT=ucx forces it for every peer (UCX then moves data within a
 * host over its own shared memory and cma). In auto mode it is set up only when UCX
 * reports an RDMA device (an "ib" memory domain), and then ranks it between shm and
 * tcp: on a host without one nothing changes for users.
 *
 * Liveness: a peer is lost when its endpoint's error callback ran (a reset connection,
 * a keepalive timeout), when it said goodbye (abort, destroy: a GONE message, sent to
 * every peer at the first close so that no two ranks' teardowns wait on each other),
 * or, on this host, when its process has exited; in the last two cases only once every
 * frame it sent before is read.
 *
 * Invariants: the worker runs in UCS_THREAD_MODE_MULTI, because abort may come from any
 * thread; every other op runs under the communicator's lock. Teardown flushes each
 * endpoint (the peer may still have to read frames that send already reported taken)
 * until the peer read them, left, said goodbye or WEFT_TIMEOUT passed, then force-closes
 * it; the worker is destroyed only after every endpoint is closed.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ucx_int.h"
#include "check.h"
#include "log.h"
#include "status.h"
#include "util.h"

/* Whether the kernel lists an RDMA device (InfiniBand, RoCE, soft-RoCE): where it lists
 * none, UCX's "ib" component has none either, and UCX is not loaded at all. */
static int rdma_device_listed(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    int found = 0;
    if (d == NULL)
        return 0;
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;)
        found = e->d_name[0] != '.';
    closedir(d);
    return found;
}

/* Whether UCX sees an RDMA device: a memory domain of its "ib" component (InfiniBand,
 * RoCE). Asked in auto mode only, before any context exists; loads UCX only where the
 * kernel lists a device. */
static int rdma_device_present(void)
{
    if (!rdma_device_listed())
        return 0;
    if (ucx_api_load() != WEFT_OK) {
        LOG_INFO(LOG_NET, "an RDMA device is listed, but %s; no ucx transport", weft_last_error());
        return 0;
    }
    uct_component_h *comps;
    unsigned n;
    int found = 0;
    if (uct_query_components(&comps, &n) != UCS_OK)
        return 0;
    for (unsigned i = 0; i < n && !found; i++) {
        uct_component_attr_t a = { .field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                 UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT };
        found = uct_component_query(comps[i], &a) == UCS_OK && !strcmp(a.name, "ib") &&
                a.md_resource_count > 0;
    }
    uct_release_component_list(comps);
    return found;
}

/* Writes the worker's address into the blob: the whole one if it fits, else the one
 * with network devices only (which still reaches every peer, within a host too). */
static weft_status_t put_address(ucx_ctx_t *x, tp_addr_t *addr)
{
    const unsigned flags[2] = { 0, UCP_WORKER_ADDRESS_FLAG_NET_ONLY };
    size_t n = 0;
    for (int i = 0; i < 2; i++) {
        ucp_worker_attr_t a = { .field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS |
                                              UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS,
                                .address_flags = flags[i] };
        if (ucp_worker_query(x->worker, &a) != UCS_OK)
            continue;
        n = a.address_length;
        if (n <= TP_ADDR_BYTES) {
            memcpy(addr->blob, a.address, n);
            addr->len = (uint16_t)n;
        }
        ucp_worker_release_address(x->worker, a.address);
        if (addr->len) {
            if (i > 0)
                LOG_INFO(LOG_NET, "ucx: the worker address is too large for the exchange; "
                         "publishing its network devices only (%zu bytes)", n);
            return WEFT_OK;
        }
    }
    return weft_error(WEFT_ERR_UNSUPPORTED, "ucx: the worker address is %zu bytes, more than "
                      "the %d the address exchange carries (TP_ADDR_BYTES)", n, TP_ADDR_BYTES);
}

/* The process's UCX worker, shared by its communicators: a frame that send reported
 * taken may still need its sender's progress (a wire-up, a rendezvous over tcp), and a
 * rank that went on to another communicator must still give it. With a worker per
 * communicator test_coll's split test deadlocked: rank 2, waiting in the parent, never
 * progressed the child's worker that held the frame rank 0 waited for in the child. So
 * every communicator's progress op drives the one worker, and tags carry the
 * communicator. Guarded by its mutex; created by the first user, destroyed by the last
 * (no fd outlives the last communicator). */
static struct {
    pthread_mutex_t lock;
    int users;
    ucp_context_h ucp;
    ucp_worker_h worker;
    ucx_ctx_t *live;                /* every context using the worker */
} shared = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Takes the messages that match (tag, mask) and that nobody will receive (goodbyes and
 * states that reached endpoints already closed), so that they neither pile up in the
 * worker nor make UCX warn about each at its end; until `deadline` (time_ns) at most. */
static void drain_unexpected(ucp_worker_h w, ucp_tag_t tag, ucp_tag_t mask, uint64_t deadline)
{
    while (time_ns() < deadline) {
        ucp_tag_recv_info_t info;
        ucp_worker_progress(w);
        ucp_tag_message_h m = ucp_tag_probe_nb(w, tag, mask, 1, &info);
        if (m == NULL)
            return;
        void *buf = malloc(info.length ? info.length : 1), *req;
        if (buf == NULL)
            return;
        ucp_request_param_t p = { .op_attr_mask = 0 };
        if (ucx_req_take(ucp_tag_msg_recv_nbx(w, buf, info.length, m, &p), &req) ==
            UCS_INPROGRESS)
            while (ucx_req_test(&req) == UCS_INPROGRESS && time_ns() < deadline)
                ucp_worker_progress(w);
        if (req) {
            ucp_request_free(req);
            return;                 /* buf stays UCX's to write: leaked, not freed */
        }
        free(buf);
    }
}

/* Communicators closed while the worker lives (the last UCX_CLOSED_IDS): a peer that
 * closes after this rank sends its goodbye (and maybe a state) to receives cancelled
 * already, and the worker would keep those messages for its whole life, a few per peer
 * and communicator. Every communicator's creation and close takes what arrived for
 * these (10 ms at most), but never for an id a live context of this process still has.
 * With shared.lock held. */
#define UCX_CLOSED_IDS 64
static struct {
    uint32_t id[UCX_CLOSED_IDS];
    int n, next;
} closed;

#define UCX_TAG_COMM_MASK ((ucp_tag_t)0xffffffffu)   /* the communicator's bits */

/* 1 when a live context of this process has communicator id `id` (two ranks of one
 * communicator in one process, as threads): its messages are not stray. */
static int id_live(uint32_t id)
{
    for (const ucx_ctx_t *c = shared.live; c; c = c->next)
        if (c->comm_id == id)
            return 1;
    return 0;
}

static void sweep_closed(void)
{
    uint64_t deadline = time_ns() + 10000000ull;
    for (int i = 0; i < closed.n; i++)
        if (!id_live(closed.id[i]))
            drain_unexpected(shared.worker, closed.id[i], UCX_TAG_COMM_MASK, deadline);
}

int ucx_closed_messages(void)
{
    int found = 0;
    pthread_mutex_lock(&shared.lock);
    for (int i = 0; shared.worker && i < closed.n && !found; i++) {
        ucp_tag_recv_info_t info;
        ucp_worker_progress(shared.worker);
        found = ucp_tag_probe_nb(shared.worker, closed.id[i], UCX_TAG_COMM_MASK, 0,
                                 &info) != NULL;
    }
    pthread_mutex_unlock(&shared.lock);
    return found;
}

/* x: the context that goes (its communicator's id is recorded as closed unless another
 * live context has it). */
static void shared_release(ucx_ctx_t *x)
{
    pthread_mutex_lock(&shared.lock);
    for (ucx_ctx_t **pp = &shared.live; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    uint32_t comm_id = x->comm_id;
    if (comm_id != 0 && !id_live(comm_id)) {
        closed.id[closed.next] = comm_id;
        closed.next = (closed.next + 1) % UCX_CLOSED_IDS;
        closed.n += closed.n < UCX_CLOSED_IDS;
    }
    if (--shared.users > 0)
        sweep_closed();
    if (shared.users == 0) {
        drain_unexpected(shared.worker, 0, 0, time_ns() + 100000000ull);
        closed.n = closed.next = 0;
        ucx_reg_purge();
        ucp_worker_destroy(shared.worker);
        ucp_cleanup(shared.ucp);
        shared.worker = NULL;
        shared.ucp = NULL;
    }
    pthread_mutex_unlock(&shared.lock);
}

/* Whether the comma-separated list names `what` (exactly, as UCX compares them). */
static int tls_names(const char *list, const char *what)
{
    size_t n = strlen(what);
    for (const char *t = list; *t; ) {
        size_t len = strcspn(t, ",");
        if (len == n && !strncmp(t, what, n))
            return 1;
        t += len + (t[len] == ',');
    }
    return 0;
}

/* Whether UCX_TLS leaves UCX one of its shared-memory transports that read
 * MM_ERROR_HANDLING (posix, sysv, xpmem: UCX's alias "mm", within "sm"/"shm"): unset, a
 * list naming all, sm, shm, mm or one of them, or an exclusion list ("^tcp") that
 * excludes neither sm, shm, mm nor all three. Else (UCX_TLS=tcp,self) the setting below
 * would only earn a warning from UCX that no transport used it. */
static int mm_allowed(void)
{
    const char *tls = getenv("UCX_TLS");
    if (tls == NULL || *tls == '\0')
        return 1;
    int excl = *tls == '^';
    const char *l = tls + excl;
    int alias = tls_names(l, "sm") || tls_names(l, "shm") || tls_names(l, "mm"),
        each = tls_names(l, "posix") + tls_names(l, "sysv") + tls_names(l, "xpmem");
    if (excl)
        return !(alias || each == 3);
    return alias || each > 0 || tls_names(l, "all");
}

/* Endpoints in error mode PEER may use only transports that report peer failures, and
 * UCX 1.13's shared-memory ones (posix, sysv) say they do only with MM_ERROR_HANDLING=y:
 * without it every local peer went over tcp (10 us for 8 bytes instead of 0.8). weft
 * watches local peers' pids itself (peer_down), so it turns the capability on, unless
 * the user set it (UCX_MM_, UCX_POSIX_ or UCX_SYSV_ERROR_HANDLING). */
static void mm_error_handling(ucp_config_t *cfg)
{
    if (getenv("UCX_MM_ERROR_HANDLING") || getenv("UCX_POSIX_ERROR_HANDLING") ||
        getenv("UCX_SYSV_ERROR_HANDLING") || !mm_allowed())
        return;
    ucs_status_t s = ucp_config_modify(cfg, "MM_ERROR_HANDLING", "y");
    if (s != UCS_OK)
        LOG_INFO(LOG_NET, "ucx: cannot set MM_ERROR_HANDLING=y (%s): local peers go over "
                 "transports with error handling (tcp)", ucs_status_string(s));
}

/* Whether UCX_TLS leaves UCX the shared-memory transport `tl` (posix, sysv, xpmem). */
static int tl_allowed(const char *tl)
{
    const char *tls = getenv("UCX_TLS");
    if (tls == NULL || *tls == '\0')
        return 1;
    int excl = *tls == '^';
    const char *l = tls + excl;
    int named = tls_names(l, "sm") || tls_names(l, "shm") || tls_names(l, "mm") ||
                tls_names(l, tl);
    return excl ? !named : named || tls_names(l, "all");
}

/* UCX's shared-memory transports (posix, sysv, xpmem) keep a message's length in 16 bits:
 * with a segment (UCX_<TL>_SEG_SIZE, else UCX_MM_SEG_SIZE, as UCX's parser gives the
 * transport's own prefix the last word) of 64K or more, UCX 1.13 aborts (65536) or
 * delivers eager messages of 64K with length 0 and stalls larger ones (65600: weft's 64K
 * frames failed as "payload has 0 bytes", 256K ones timed out). Refused here, with the
 * reason, for the transports UCX_TLS leaves, before UCX reads it; values UCX reads from
 * its ucx.conf, and sizes beyond weft's own syntax (cfg_parse_size: a T suffix), are not
 * seen. */
static weft_status_t mm_seg_check(void)
{
    static const char *const tls[] = { "posix", "sysv", "xpmem" };
    for (size_t i = 0; i < sizeof(tls) / sizeof(tls[0]); i++) {
        char name[32];
        snprintf(name, sizeof(name), "UCX_%s_SEG_SIZE", tls[i]);
        for (char *c = name + 4; *c; c++)
            *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
        const char *v = getenv(name);
        if (v == NULL || *v == '\0') {
            snprintf(name, sizeof(name), "UCX_MM_SEG_SIZE");
            v = getenv(name);
        }
        size_t bytes;   /* a value weft's size syntax does not read is left to UCX */
        if (v == NULL || !tl_allowed(tls[i]) || cfg_parse_size(v, &bytes) != 0 ||
            bytes <= 65535)
            continue;
        return weft_error(WEFT_ERR_INVALID_ARG, "ucx: %s=%s: UCX's shared-memory transport "
                          "%s keeps a message's length in 16 bits, and segments of 64K or "
                          "more corrupt or abort transfers (UCX %u.%u); use at most 65535",
                          name, v, tls[i], UCP_API_MAJOR, UCP_API_MINOR);
    }
    return WEFT_OK;
}

/* Reads UCX_* from the environment (the first communicator's) and makes the worker. */
static weft_status_t shared_create(int nranks)
{
    ucp_config_t *cfg;
    RETURN_IF_ERR(mm_seg_check());
    weft_status_t st = ucx_api_load();
    if (st != WEFT_OK)      /* (quiet in auto mode; here the transport was asked for) */
        return weft_error(st, "%s", weft_last_error());
    ucs_status_t s = ucp_config_read(NULL, NULL, &cfg);
    if (s != UCS_OK)
        return weft_error(WEFT_ERR_SYSTEM, "ucx: cannot read the UCX_* configuration: %s",
                          ucs_status_string(s));
    mm_error_handling(cfg);
    ucp_params_t p = { .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
                       .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA,
                       .estimated_num_eps = (size_t)nranks };
    s = ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &p, cfg, &shared.ucp);
    ucp_config_release(cfg);
    if (s != UCS_OK)
        return weft_error(WEFT_ERR_SYSTEM, "ucx: cannot initialize (ucp_init): %s",
                          ucs_status_string(s));
    ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                               .thread_mode = UCS_THREAD_MODE_MULTI };
    s = ucp_worker_create(shared.ucp, &wp, &shared.worker);
    if (s != UCS_OK) {
        ucp_cleanup(shared.ucp);
        shared.ucp = NULL;
        return weft_error(WEFT_ERR_SYSTEM, "ucx: cannot create a worker: %s",
                          ucs_status_string(s));
    }
    return WEFT_OK;
}

ucp_context_h ucx_context(void)
{
    return shared.ucp;
}

static weft_status_t shared_acquire(ucx_ctx_t *x)
{
    weft_status_t st = WEFT_OK;
    pthread_mutex_lock(&shared.lock);
    if (shared.users == 0)
        st = shared_create(x->nranks);
    if (st == WEFT_OK) {
        x->next = shared.live;
        shared.live = x;
        sweep_closed();
        shared.users++;
        x->worker = shared.worker;
    }
    pthread_mutex_unlock(&shared.lock);
    return st;
}

static void ctx_free(ucx_ctx_t *x)
{
    if (x->worker)
        shared_release(x);
    free(x->eps);
    free(x->shared_proc);
    free(x);
}

static weft_status_t ctx_create(weft_comm_t *comm, ucx_ctx_t **x_p)
{
    ucx_ctx_t *x = calloc(1, sizeof(*x));
    if (x == NULL || (x->eps = calloc((size_t)comm->nranks, sizeof(*x->eps))) == NULL) {
        free(x);
        return weft_error(WEFT_ERR_NO_MEMORY, "ucx: out of memory");
    }
    x->nranks = comm->nranks;
    x->rank = comm->rank;
    x->comm_id = comm->id32;
    x->timeout_s = comm->cfg.timeout_s;
    weft_status_t st = shared_acquire(x);
    if (st != WEFT_OK) {
        ctx_free(x);
        return st;
    }
    *x_p = x;
    return WEFT_OK;
}

static weft_status_t ucx_local_setup(weft_comm_t *comm, tp_addr_t *addr)
{
    int forced = !strcmp(comm->cfg.transport, "ucx");
    ucx_ctx_t *x = NULL;
    addr->len = 0;
    if (!forced && !rdma_device_present()) {
        LOG_DEBUG(LOG_NET, "ucx: no RDMA device; left to shm and tcp (WEFT_TRANSPORT=ucx "
                  "forces it)");
        return WEFT_OK;
    }
    weft_status_t st = ctx_create(comm, &x);
    if (st == WEFT_OK && (st = put_address(x, addr)) != WEFT_OK)
        ctx_free(x);
    if (st != WEFT_OK) {
        if (forced)
            return st;
        LOG_INFO(LOG_NET, "ucx: not used: %s", weft_last_error());
        return WEFT_OK;
    }
    tp_set_ctx(comm, &tp_ucx_ops, x);
    return WEFT_OK;
}

/* Ranks by (host, pid namespace, pid), for shared_flags. */
static const weft_comm_t *sort_comm;

static int by_process(const void *a, const void *b)
{
    const peer_info_t *x = &sort_comm->peers[*(const int *)a],
                      *y = &sort_comm->peers[*(const int *)b];
    if (x->host_id != y->host_id)
        return x->host_id < y->host_id ? -1 : 1;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->pidns < y->pidns ? -1 : x->pidns > y->pidns;
}

/* Which ranks of comm share their process with another (ranks as threads), computed once
 * per communicator: sorted by host and pid, neighbours compared (peer_same_process), not
 * every pair for every pair (O(n^2) for each rank's n connects). NULL out of memory. */
static const uint8_t *shared_flags(const weft_comm_t *comm, ucx_ctx_t *x)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    if (x->shared_proc)
        return x->shared_proc;
    int n = comm->nranks, *idx = malloc((size_t)n * sizeof(int));
    uint8_t *f = calloc((size_t)n, 1);
    if (idx == NULL || f == NULL) {
        free(idx);
        free(f);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        idx[i] = i;
    pthread_mutex_lock(&lock);      /* (sort_comm: communicators connect in any thread) */
    sort_comm = comm;
    qsort(idx, (size_t)n, sizeof(int), by_process);
    pthread_mutex_unlock(&lock);
    for (int i = 1; i < n; i++)
        if (peer_same_process(&comm->peers[idx[i]], &comm->peers[idx[i - 1]]))
            f[idx[i]] = f[idx[i - 1]] = 1;
    free(idx);
    x->shared_proc = f;
    return f;
}

/* Not where either end shares its process with another rank: the process has one worker,
 * and a frame's tag names its sender and communicator, not its receiver, so two ranks'
 * receives from one peer took each other's frames (an all-to-all of 3 threads returned
 * WEFT_OK with wrong elements before 2026-11-28). Those ranks use shm and tcp. */
static int ucx_can_connect(const weft_comm_t *comm, const peer_info_t *self,
                           const peer_info_t *peer)
{
    int slot = tp_slot(&tp_ucx_ops);
    if (self->addr[slot].len == 0 || peer->addr[slot].len == 0)
        return 0;
    const uint8_t *f = shared_flags(comm, tp_ctx(comm, &tp_ucx_ops));
    if (f == NULL || f[self->rank] || f[peer->rank]) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            LOG_INFO(LOG_NET, "ucx: not between ranks of which one shares its process with "
                     "another rank (threads): one worker per process, and UCX tags name no "
                     "receiver");
        return 0;
    }
    return 1;
}

int ucx_peer_exited(const ucx_ep_t *e)
{
    return e->same_host && pid_exited((int)e->peer_pid);     /* a zombie too */
}

/* The error callback (on a progressing thread): the endpoint is lost for good. */
static void ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucx_ep_t *e = arg;
    e->lost_status = status;
    __atomic_store_n(&e->lost, 1, __ATOMIC_RELEASE);
    LOG_INFO(LOG_NET, "ucx: endpoint to rank %d failed: %s", e->base.peer,
             ucs_status_string(status));
}

/* What the endpoint's lanes are, as UCX 1.13 tells it (only by ucp_ep_print_info, read
 * here):
 *     lane[0]:  1:tcp/weft0.0 md[1]  -> md[1]/tcp/sysdev[255] am am_bw#0 keepalive wireup
 *     lane[0]:  3:sysv/memory.0 md[2] -> md[2]/sysv/sysdev[255] am am_bw#0 keepalive
 * - rma_net: none does RMA ("rma" among its uses) or sits on a shared-memory device
 *   (sysv, posix, cma, xpmem, knem: UCX's "memory" devices). Then ucp_get_nbx runs as
 *   active messages over, say, tcp (UCX_TLS=tcp), and the cma algorithm's reads lost to
 *   the ring by 1.3-2x between two network namespaces; gets over shared memory (UCX
 *   1.13 emulates them there too, with error mode PEER) or RDMA are what single copy is
 *   for.
 * - fast_small: one sits on a shared-memory device and none does RMA: a frame's message
 *   of 8-32K then goes eagerly (UCP_OP_ATTR_FLAG_FAST_CMPL: copied through the fifo)
 *   instead of by a rendezvous that is the same copies after a round trip (error mode
 *   PEER leaves such an endpoint no cma lane); 16K all-reduce 1.3x, 32-64K 1.1-1.2x
 *   faster over sysv. Not over tcp, where it was up to 1.9x slower at 16K, nor where
 *   RDMA makes the rendezvous zero-copy. */
static void lanes_read(ucx_ep_t *e)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return;                     /* unknown: single copy stays the default */
    ucp_ep_print_info(e->ep, f);
    fclose(f);
    int lanes = 0, mem_any = 0, rma_any = 0;
    for (const char *l = text ? strstr(text, "lane[") : NULL; l; l = strstr(l + 1, "lane[")) {
        const char *eol = strchr(l, '\n');
        if (eol == NULL)
            eol = l + strlen(l);
        /* the transport/device after the second colon: "]:  3:sysv/memory.0 ..." */
        const char *tl = memchr(l, ':', (size_t)(eol - l));
        tl = tl ? memchr(tl + 1, ':', (size_t)(eol - tl - 1)) : NULL;
        const char *end = tl ? tl + strcspn(tl, " \n") : NULL;
        if (end == NULL)
            continue;
        const char *mem = strstr(tl, "/memory"), *rma = strstr(end, " rma");
        mem_any |= mem && mem < end;
        rma_any |= rma && rma < eol;
        if (lanes++ == 0)
            LOG_DEBUG(LOG_NET, "ucx: rank %d's first lane is %.*s", e->base.peer,
                      (int)(end - tl - 1), tl + 1);
    }
    free(text);
    e->base.rma_net = lanes > 0 && !mem_any && !rma_any;
    e->fast_small = mem_any && !rma_any;
}

static weft_status_t ucx_connect(weft_comm_t *comm, int peer, tp_ep_t **ep_p)
{
    ucx_ctx_t *x = tp_ctx(comm, &tp_ucx_ops);
    const tp_addr_t *a = tp_peer_addr(comm, &tp_ucx_ops, peer);
    ucx_ep_t *e = calloc(1, sizeof(*e));
    void *raddr = malloc(a->len);   /* the blob is unaligned */
    if (e == NULL || raddr == NULL) {
        free(e);
        free(raddr);
        return weft_error(WEFT_ERR_NO_MEMORY, "ucx: out of memory");
    }
    memcpy(raddr, a->blob, a->len);
    e->x = x;
    e->base.peer = peer;
    e->peer_pid = (pid_t)comm->peers[peer].pid;
    /* its pid says whether it exited only from its own pid namespace */
    e->same_host = peer_pid_comparable(&comm->peers[peer], &comm->peers[comm->rank]);
    e->max_frame = e->tx_max = comm->cfg.buffsize;
    ucp_ep_params_t p = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = raddr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = { ep_failed, e },
    };
    ucs_status_t s = ucp_ep_create(x->worker, &p, &e->ep);
    free(raddr);
    if (s != UCS_OK) {
        weft_status_t st = ucx_peer_exited(e)
            ? weft_error(WEFT_ERR_PEER_LOST, "ucx: rank %d (pid %d) has exited", peer,
                         (int)e->peer_pid)
            : weft_error(WEFT_ERR_SYSTEM, "ucx: cannot create an endpoint to rank %d: %s",
                         peer, ucs_status_string(s));
        free(e);
        return st;
    }
    x->eps[peer] = e;
    lanes_read(e);
    weft_status_t st = ucx_rx_start(e);
    if (st != WEFT_OK) {
        e->base.ops = &tp_ucx_ops;
        tp_ucx_ops.close(&e->base);
        return st;
    }
    *ep_p = &e->base;
    return WEFT_OK;
}

/* Every rank has its endpoints (a barrier came first): wire them up now, while every
 * rank progresses here, instead of on the first frames. A rank that later goes silent
 * (computes) would otherwise hold its peers' first frames, and their goodbyes, until its
 * next call. Bounded: a peer that leaves init early finishes the wire-up on its next
 * call anyway. */
static weft_status_t ucx_post_connect(weft_comm_t *comm)
{
    ucx_ctx_t *x = tp_ctx(comm, &tp_ucx_ops);
    void **reqs = x ? calloc((size_t)x->nranks, sizeof(*reqs)) : NULL;
    if (reqs == NULL)
        return WEFT_OK;
    ucp_request_param_t p = { .op_attr_mask = 0 };
    int pending = 0;
    for (int r = 0; r < x->nranks; r++)
        if (x->eps[r])
            pending += ucx_req_take(ucp_ep_flush_nbx(x->eps[r]->ep, &p), &reqs[r]) ==
                       UCS_INPROGRESS;
    uint64_t deadline = time_ns() + 2000000000ull;
    while (pending && time_ns() < deadline) {
        ucp_worker_progress(x->worker);
        pending = 0;
        for (int r = 0; r < x->nranks; r++)
            pending += ucx_req_test(&reqs[r]) == UCS_INPROGRESS;
    }
    for (int r = 0; r < x->nranks; r++)
        if (reqs[r])
            ucp_request_free(reqs[r]);
    free(reqs);
    return WEFT_OK;
}

static void ucx_local_cleanup(weft_comm_t *comm)
{
    ucx_ctx_t *x = tp_ctx(comm, &tp_ucx_ops);
    if (x == NULL)
        return;
    ctx_free(x);
    tp_set_ctx(comm, &tp_ucx_ops, NULL);
}

static weft_status_t ucx_progress(weft_comm_t *comm)
{
    ucx_ctx_t *x = tp_ctx(comm, &tp_ucx_ops);
    for (int i = 0; i < 64 && ucp_worker_progress(x->worker); i++)
        ;
    return WEFT_OK;
}

/* Whether a frame the peer sent is still to be read: a header arrived, or its payload
 * is on the way (a rendezvous needs the sender alive). */
static int frame_waiting(const ucx_ep_t *e, int sender_alive)
{
    if (e->rx_state != RX_ARRIVED)
        return e->rx_hdr_req && ucp_request_check_status(e->rx_hdr_req) != UCS_INPROGRESS;
    if (e->pl_state != PL_POSTED)
        return 1;
    return sender_alive || ucp_request_check_status(e->rx_pl_req) != UCS_INPROGRESS;
}

/* WEFT_OK while the peer may still send what we have not read; logged unless quiet.
 * A peer that is gone still has its say: the states it posted are all taken then, and a
 * frame of it that arrived is read before its departure counts, whether it said goodbye,
 * exited or its connection was reset (a rank that finished its part and left: the
 * others must not fail for it while its last frames wait to be read). */
static weft_status_t peer_down(ucx_ep_t *e, int quiet)
{
    ucp_worker_progress(e->x->worker);
    ucx_states_poll(e, 0);
    int lost = __atomic_load_n(&e->lost, __ATOMIC_ACQUIRE);
    int exited = !lost && ucx_peer_exited(e);
    if (!lost && !exited && !e->gone)
        return WEFT_OK;
    for (int i = 0; i < 16; i++)    /* take what it sent before it went */
        ucp_worker_progress(e->x->worker);
    int alive = !lost && !exited;   /* said goodbye, still there: a rendezvous may end */
    if (frame_waiting(e, alive) || (alive && e->frames_rx < e->gone_frames))
        return WEFT_OK;
    weft_status_t st;
    if (lost) {
        st = ucx_lost_error(e, quiet);
    } else {
        weft_status_t (*err)(weft_status_t, const char *, ...) =
            quiet ? weft_error_quiet : weft_error;
        st = exited ? err(WEFT_ERR_PEER_LOST, "ucx: rank %d (pid %d) has exited",
                          e->base.peer, (int)e->peer_pid)
                    : err(WEFT_ERR_PEER_LOST, "ucx: rank %d aborted or destroyed its "
                          "communicator", e->base.peer);
    }
    ucx_states_poll(e, 1);
    return st;
}

static weft_status_t ucx_check_alive(tp_ep_t *ep)
{
    return peer_down((ucx_ep_t *)ep, 0);
}

static weft_status_t ucx_peer_state(tp_ep_t *ep, tp_state_t *s)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    weft_status_t st = peer_down(e, 1);
    *s = e->st_rx;
    return st;
}

/* One turn of a drain: progresses the worker, and says 1 once the peer can no longer
 * take anything (it said goodbye, is lost or exited) or limit_ns passed (0: never). */
static int give_up(ucx_ep_t *e, uint64_t start, uint64_t limit_ns, long spins,
                   uint64_t *next_check)
{
    if (ucp_worker_progress(e->x->worker) == 0 && spins > 1000)
        sched_yield();
    uint64_t now = time_ns();
    if (now < *next_check)
        return 0;
    *next_check = now + 10000000ull;
    ucx_states_poll(e, 0);
    if (!e->gone && !e->lost && !ucx_peer_exited(e) && !(limit_ns && now - start > limit_ns))
        return 0;
    LOG_DEBUG(LOG_NET, "ucx: rank %d did not take every frame we sent", e->base.peer);
    return 1;
}

/* Waits until the peer has taken every frame we sent (a rendezvous completes only when
 * the receiver has read it: an endpoint flush does not wait for that), then flushes
 * the endpoint (states, the goodbye); or until the peer can no longer take them or
 * max_s passed. Returns at once when nothing is outstanding. */
void ucx_drain(ucx_ep_t *e, double max_s)
{
    uint64_t start = time_ns(), next_check = start, limit = (uint64_t)(max_s * 1e9);
    long spins = 0;
    if (__atomic_load_n(&e->lost, __ATOMIC_ACQUIRE))
        return;
    while (ucx_tx_busy(e))
        if (give_up(e, start, limit, spins++, &next_check))
            return;
    ucp_request_param_t p = { .op_attr_mask = 0 };
    void *req;
    if (ucx_req_take(ucp_ep_flush_nbx(e->ep, &p), &req) != UCS_INPROGRESS)
        return;
    while (ucx_req_test(&req) == UCS_INPROGRESS)
        if (give_up(e, start, limit, spins++, &next_check)) {
            ucp_request_free(req);
            return;
        }
}

/* Closes the UCX endpoint without waiting for the peer: UCX cancels what it still
 * holds. Once. Returns 1 when UCX has let go of every send request of the endpoint
 * (frames, states, the goodbye) and so reads none of their buffers any more; 0 when
 * some was still held after FORCE_CLOSE_S (logged): then its buffers must stay
 * allocated. UCX 1.13's forced close returns at once and completes the requests later,
 * from worker progress, once it has discarded the endpoint's lanes (and invalidated a
 * rendezvous send's registration, so the peer cannot read it either): until then a
 * request is still in progress and may still read its buffer. The remote keys go last,
 * once no transfer can still be using them. */
static int force_close(ucx_ep_t *e)
{
    if (e->ep == NULL)
        return !ucx_sends_busy(e);
    ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_EP_CLOSE_FLAG_FORCE };
    void *req;
    uint64_t deadline = time_ns() + FORCE_CLOSE_S * 1000000000ull;
    if (ucx_req_take(ucp_ep_close_nbx(e->ep, &p), &req) == UCS_INPROGRESS)
        while (ucx_req_test(&req) == UCS_INPROGRESS)
            ucp_worker_progress(e->x->worker);
    e->ep = NULL;
    int busy;
    while ((busy = ucx_sends_busy(e)) && time_ns() < deadline)
        ucp_worker_progress(e->x->worker);
    ucx_rkeys_destroy(e, 0);
    if (busy)
        LOG_WARN(LOG_NET, "ucx: rank %d's closed endpoint still has sends in progress "
                 "after %d s: their buffers are left allocated", e->base.peer, FORCE_CLOSE_S);
    return !busy;
}

#define STATE_LEAVE_NS 100000000ull     /* 100 ms */

/* Gives the endpoint up for good (lost, cancelled) and closes it: no abort starts on it
 * any more, one running on another thread ends first. Our FAILED state gets 100 ms to
 * leave first (the drain did not wait for it): over shared memory nothing else tells
 * the peer that this endpoint closed. */
void ucx_withdraw(ucx_ep_t *e)
{
    uint64_t deadline = time_ns() + STATE_LEAVE_NS;
    while (ucx_states_busy(e) && time_ns() < deadline)
        ucp_worker_progress(e->x->worker);
    e->lost_status = UCS_ERR_CANCELED;
    __atomic_store_n(&e->lost, 1, __ATOMIC_SEQ_CST);   /* no abort starts on ep now */
    while (__atomic_load_n(&e->abort_busy, __ATOMIC_SEQ_CST))
        sched_yield();                                  /* one on another thread ends */
    force_close(e);
}

void ucx_withdraw_kept(ucx_ep_t *e)
{
    int n = ucx_kept_busy(e);
    if (n == 0)
        return;
    LOG_INFO(LOG_NET, "ucx: rank %d has not taken %d frame(s) sent from the failed call's "
             "buffers: closing the endpoint, so that UCX reads no more of them", e->base.peer,
             n);
    ucx_withdraw(e);
}

void ucx_withdraw_posted(ucx_ep_t *e, uint64_t deadline)
{
    void *req = e->rx_pl_req;
    if (e->pl_state != PL_POSTED || req == NULL || e->pl_dst == e->rx_buf)
        return;                     /* nothing posted, or into our own staging */
    while (ucp_request_check_status(req) == UCS_INPROGRESS && time_ns() < deadline)
        ucp_worker_progress(e->x->worker);
    if (ucp_request_check_status(req) != UCS_INPROGRESS)
        return;                     /* landed (or failed) before the call returns */
    ucp_request_cancel(e->x->worker, req);
    if (ucp_request_check_status(req) != UCS_INPROGRESS) {
        LOG_INFO(LOG_NET, "ucx: rank %d's frame had not come: its receive into the failed "
                 "call's buffer is cancelled", e->base.peer);
        return;                     /* recv_payload would now fail: the comm has failed */
    }
    /* matched: its bytes are on the way. Closing the endpoint ends a rendezvous (UCX
     * completes the receive as cancelled); the rest of an eager message would still land */
    LOG_INFO(LOG_NET, "ucx: rank %d's frame is still coming into the failed call's buffer: "
             "closing the endpoint", e->base.peer);
    ucx_withdraw(e);
    uint64_t end = time_ns() + FORCE_CLOSE_S * 1000000000ull;
    while (ucp_request_check_status(req) == UCS_INPROGRESS && time_ns() < end)
        ucp_worker_progress(e->x->worker);
    if (ucp_request_check_status(req) == UCS_INPROGRESS)
        LOG_WARN(LOG_NET, "ucx: rank %d's frame was still arriving %d s after the endpoint "
                 "closed: its bytes may yet land in the failed call's receive buffer",
                 e->base.peer, FORCE_CLOSE_S);
}

static void ucx_close(tp_ep_t *ep)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    ucx_ctx_t *x = e->x;
    if (!x->said_goodbye) {         /* all goodbyes first: no teardown waits on another */
        x->said_goodbye = 1;
        for (int p = 0; p < x->nranks; p++)
            if (x->eps[p])
                ucx_abort(&x->eps[p]->base);
        /* 30 s at most: WEFT_TIMEOUT may be off (the NCCL shim's), and a destroy must
         * end; one deadline for every endpoint (before 2026-11-28 each got its own, so k
         * stuck peers held a destroy k times as long; from a review, not reproduced) */
        x->close_end = time_ns() + (uint64_t)(WEFT_MIN(x->timeout_s, 30.0) * 1e9);
    }
    uint64_t now = time_ns();
    ucx_drain(e, now < x->close_end ? (double)(x->close_end - now) * 1e-9 : 1e-9);
    int released = force_close(e);
    ucx_rx_stop(e);
    x->eps[e->base.peer] = NULL;
    if (!released)
        return;                     /* e holds buffers UCX may still read: leaked */
    ucx_rkeys_destroy(e, 1);
    ucx_tx_free(e);
    free(e);
}

const tp_ops_t tp_ucx_ops = {
    .name = "ucx",
    .preference = 15,               /* below shm (within a host), above tcp (with RDMA) */
    .chunk = 512 * 1024,
    /* within a host, UCX 1.13's endpoints in error mode PEER have no cma lane: a frame's
     * rendezvous runs as an active-message pipeline over sysv shared memory (four copies
     * with the tx slot and staging), and its gets beat the ring from 256K (docs/PERF.md) */
    .cma_min = 256 * 1024,
    /* setup */
    .can_connect = ucx_can_connect,
    .local_setup = ucx_local_setup,
    .connect = ucx_connect,
    .post_connect = ucx_post_connect,
    .local_cleanup = ucx_local_cleanup,
    /* progress: the worker */
    .progress = ucx_progress,
    /* data */
    .send = ucx_send,
    .send_kept = ucx_send_kept,        /* host memory, read where it lies (rendezvous) */
    .recv_peek = ucx_recv_peek,
    .recv_payload = ucx_recv_payload,
    .recv_release = ucx_recv_release,
    .flush = ucx_flush,
    .check_alive = ucx_check_alive,
    /* peer states */
    .post_state = ucx_post_state,
    .peer_state = ucx_peer_state,
    .abort = ucx_abort,                /* ucx_state.c */
    /* one-sided: ucp_mem_map, packed rkeys, ucp_get_nbx / ucp_put_nbx (ucx_rma.c) */
    .mem_reg = ucx_mem_reg,
    .mem_dereg = ucx_mem_dereg,
    .rma_reach = NULL,                 /* every peer: UCX emulates RMA where no lane has it */
    .rkey_unpack = ucx_rkey_unpack,
    .rkey_release = ucx_rkey_release,
    .get = ucx_get,
    .put = ucx_put,
    .rma_test = ucx_rma_test,
    .rma_cancel = ucx_rma_cancel,
    .rptr = NULL,
    /* teardown */
    .close = ucx_close,
};
