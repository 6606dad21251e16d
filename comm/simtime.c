/*
 * simtime.c - the timing executor behind weft-sim: a discrete-event replay of every
 * rank's schedule on a described cluster, without data.
 *
 * Each rank's schedule is built by algo_build, exactly as the engine gets it (root check
 * included), then kept in a compact form (steps without buffers, the per-peer queues as
 * links between steps, 48 bytes a step) so that 4096 ranks of a ring all-reduce (67 M
 * steps) fit in about 4 GB; the full schedule of one rank lives only while it is
 * compacted. Time advances from event to event (a
 * heap ordered by time, ties in the order they were made, so a run is deterministic).
 *
 * Modelled, with the engine's step semantics (engine.c):
 *   - a step runs when it heads its queue (sends to one peer, receives from one peer, the
 *     local steps: each in array order), its `dep` completed and, with after_all, every
 *     earlier step completed; a send moves only what its `stream` source has produced, a
 *     receive with a `stream` writes only what that send has handed over;
 *   - frames: a send cuts its bytes into frames of the call's chunk (at least one frame,
 *     empty ones too) and hands them over one at a time; a frame occupies the sender's
 *     port for overhead + bytes * beta of its link class, then the receiver's port for
 *     as long (at once when it is free: the two overlap, and a frame waits for a busy
 *     receiving port in the fabric, not on the sender's port), and arrives alpha after
 *     the receiver's port took it. alpha is latency, not port time: frames in a
 *     pipeline overlap it (a per-frame cost that holds the port is `overhead`).
 *     Within a host the ports are each rank's own (one in,
 *     one out: an NVLink-class or shared-memory link per rank, a full-bandwidth switch
 *     between them); between hosts they are the hosts' NICs, rank r using NIC
 *     (r % per_host) % nics, so ranks of a host that cross hosts at once share them.
 *     A sending port carries one frame at a time: sends that find it busy queue and
 *     take turns (round-robin among the sends that want it, as a NIC among its queue
 *     pairs), so frames leave in time order; a receiving port takes them in that order;
 *   - a link (sender, receiver) is a FIFO; it holds at most `staging` bytes sent and
 *     not yet consumed, and a sender whose next frame does not fit waits until the
 *     receiver consumes one (the shm ring and WEFT_BUFFSIZE), so pipelines fill, stall
 *     and drain as the engine's do;
 *   - a receive takes the head frame once it has arrived; a plain receive costs nothing
 *     beyond the transfer (beta covers moving a byte from buffer to buffer), a
 *     receive-reduce costs bytes * gamma on the receiver's one compute resource (a core,
 *     or a GPU's reduction kernel), and the frame's staging is freed when it is done;
 *   - local steps run on that compute resource too: a copy costs bytes * copy_beta (none
 *     in place), a fold (nslots - 1) * bytes * gamma, a single-copy read alpha + bytes *
 *     beta of its link class (+ bytes * gamma reducing);
 *   - the call's time is when the last step of the last rank completes.
 *   - with shm_copies, a frame inside a host holds no ports: the sender's compute
 *     resource copies it in (overhead + bytes * copy_beta) and the receiver's copies it
 *     out (bytes * copy_beta) or reduces it out (bytes * gamma) when its receive runs, as
 *     weft's shm transport does with the ranks' own cores; with `cores` below the ranks
 *     of a host, every compute cost there takes per_host / cores times as long (the
 *     cores time-shared, polling not counted); net_copies does the same between hosts
 *     at the inter-host beta per byte on each end (tcp: the kernel copies on both
 *     sides), a reduction after the copy, and holds no NIC (the CPUs are the bound:
 *     the number of NICs changes nothing);
 * Not modelled: without shm_copies, the sender's own CPU time to copy into staging (inside beta), caches and
 * memory contention between ranks of a host beyond their ports, the PCIe or network
 * topology inside a host or between hosts (a full-bisection fabric: only the NICs at
 * either end are contended), congestion control, packet loss, the tuner's streaming
 * stores, jitter, and the progress loop's polling order (a step runs the moment it can).
 *
 * Invariants: the schedules are algo_build's, unchanged; a frame is checked against the
 * receiving step's room and element size like the engine's header check, and a schedule
 * that would deadlock or leave frames unreceived fails here as in simexec.c.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config.h"
#include "simtime.h"
#include "status.h"
#include "util.h"

/* ---- the cluster ---------------------------------------------------------------- */

void simtime_cluster_default(simtime_cluster_t *c)
{
    memset(c, 0, sizeof(*c));
    c->hosts = 1;
    c->per_host = 2;
    c->nics = 1;
    algo_model_default(&c->m);
    c->copy_beta = c->m.gamma;          /* a copy streams like a reduction here */
    c->chunk = 0;
    c->staging = 4u << 20;              /* WEFT_BUFFSIZE's default */
    c->channels = 1;                    /* WEFT_NCHANNELS' */
}

typedef enum { K_INT, K_BW, K_US, K_SIZE, K_BOOL } key_kind_t;

static const struct {
    const char *name;
    key_kind_t kind;
    const char *what;
} keys[] = {
    { "hosts", K_INT, "hosts" },
    { "ranks_per_host", K_INT, "ranks on each host" },
    { "nics", K_INT, "NICs per host" },
    { "intra_bw", K_BW, "GB/s per rank and direction inside a host" },
    { "intra_lat", K_US, "us of latency inside a host" },
    { "inter_bw", K_BW, "GB/s per NIC and direction between hosts" },
    { "inter_lat", K_US, "us of latency between hosts" },
    { "reduce_bw", K_BW, "GB/s of a rank's reductions" },
    { "copy_bw", K_BW, "GB/s of a rank's local copies" },
    { "intra_overhead", K_US, "us a link inside a host is busy per frame" },
    { "inter_overhead", K_US, "us a NIC is busy per frame" },
    { "chunk", K_SIZE, "frame payload bytes (0: weft's default)" },
    { "staging", K_SIZE, "bytes a link holds (WEFT_BUFFSIZE; 0: unbounded)" },
    { "cores", K_INT, "cores per host" },
    { "shm_copies", K_BOOL, "0 or 1: frames inside a host copied by the ranks' CPUs" },
    { "net_copies", K_BOOL, "0 or 1: frames between hosts copied by the CPUs (tcp)" },
    { "channels", K_INT, "channels of the ring and chains (WEFT_NCHANNELS, 1-64)" },
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static int parse_double(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

weft_status_t simtime_cluster_set(simtime_cluster_t *c, const char *key, const char *value)
{
    size_t k = 0;
    while (k < NKEYS && strcmp(keys[k].name, key) != 0)
        k++;
    if (k == NKEYS) {
        char names[512];
        size_t n = 0;
        for (size_t j = 0; j < NKEYS && n < sizeof(names); j++)
            n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s", j ? ", " : "",
                                  keys[j].name);
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: unknown key '%s'; the keys "
                                "are %s", key, names);
    }
    double v = 0;
    size_t sz = 0;
    char *end;
    long iv = 0;
    switch (keys[k].kind) {
    case K_INT:
        iv = strtol(value, &end, 10);
        if (end == value || *end != '\0' || iv < 1 || iv > SIMTIME_MAX_RANKS)
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: %s = '%s': want a whole "
                                    "number of %s, 1 to %d", key, value, keys[k].what,
                                    SIMTIME_MAX_RANKS);
        break;
    case K_BW:
        /* 1e-9 at least: below, 1 / (v * 1e9) seconds a byte is inf (1e-320 gave time
         * inf and busbw 0 with exit 0) */
        if (parse_double(value, &v) != 0 || !(v >= 1e-9) || v > 1e6)
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: %s = '%s': want %s, "
                                    "from 1e-9 to 1e6", key, value, keys[k].what);
        break;
    case K_US:
        if (parse_double(value, &v) != 0 || v < 0 || v > 1e9)
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: %s = '%s': want %s, "
                                    "0 or more", key, value, keys[k].what);
        break;
    case K_BOOL:
        if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0)
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: %s = '%s': want %s",
                                    key, value, keys[k].what);
        iv = value[0] - '0';
        break;
    case K_SIZE:
        if (cfg_parse_size(value, &sz) != 0)
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: %s = '%s': want %s, "
                                    "a size like 512K", key, value, keys[k].what);
        break;
    }
    if (!strcmp(key, "hosts"))               c->hosts = (int)iv;
    else if (!strcmp(key, "ranks_per_host")) c->per_host = (int)iv;
    else if (!strcmp(key, "nics"))           c->nics = (int)iv;
    else if (!strcmp(key, "intra_bw"))       c->m.beta[ALGO_LINK_SHM] = 1.0 / (v * 1e9);
    else if (!strcmp(key, "intra_lat"))      c->m.alpha[ALGO_LINK_SHM] = v * 1e-6;
    else if (!strcmp(key, "inter_bw"))       c->m.beta[ALGO_LINK_NET] = 1.0 / (v * 1e9);
    else if (!strcmp(key, "inter_lat"))      c->m.alpha[ALGO_LINK_NET] = v * 1e-6;
    else if (!strcmp(key, "reduce_bw"))      c->m.gamma = 1.0 / (v * 1e9);
    else if (!strcmp(key, "copy_bw"))        c->copy_beta = 1.0 / (v * 1e9);
    else if (!strcmp(key, "intra_overhead")) c->overhead[ALGO_LINK_SHM] = v * 1e-6;
    else if (!strcmp(key, "inter_overhead")) c->overhead[ALGO_LINK_NET] = v * 1e-6;
    else if (!strcmp(key, "chunk"))          c->chunk = sz;
    else if (!strcmp(key, "cores"))          c->cores = (int)iv;
    else if (!strcmp(key, "shm_copies"))     c->shm_copies = (int)iv;
    else if (!strcmp(key, "net_copies"))     c->net_copies = (int)iv;
    else if (!strcmp(key, "channels") && iv > 64)          /* WEFT_NCHANNELS' bound */
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: channels = '%s': want %s",
                                value, keys[k].what);
    else if (!strcmp(key, "channels"))       c->channels = (int)iv;
    else                                     c->staging = sz;
    return WEFT_OK;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

weft_status_t simtime_cluster_load(simtime_cluster_t *c, const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: cannot open model file %s",
                                path);
    simtime_cluster_t tmp = *c;         /* all or nothing */
    /* getline, not a fixed buffer: fgets cut a line of 512 bytes or more in two and
     * parsed its tail as a line of its own (a long comment ending in "hosts = 3" set
     * hosts), numbering every line after it one too high */
    char *line = NULL;
    size_t cap = 0;
    int no = 0;
    weft_status_t st = WEFT_OK;
    while (st == WEFT_OK && getline(&line, &cap, f) >= 0) {
        no++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (*s == '\0')
            continue;
        char *eq = strchr(s, '=');
        if (eq == NULL) {
            st = weft_error_quiet(WEFT_ERR_INVALID_ARG, "%s:%d: want 'key = value', got "
                                  "'%s'", path, no, s);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        st = simtime_cluster_set(&tmp, key, val);
        if (st != WEFT_OK) {
            char why[400];
            snprintf(why, sizeof(why), "%s", weft_last_error());
            st = weft_error_quiet(st, "%s:%d: %s", path, no, why);
        }
    }
    /* a directory opens, and reads as an error, not as an empty file (and a line
     * getline found no memory for ends the loop short of the end as well) */
    if (st == WEFT_OK && (ferror(f) || !feof(f)))
        st = weft_error_quiet(WEFT_ERR_INVALID_ARG, "%s: cannot read it as a model file: %s",
                              path, strerror(errno));
    free(line);
    fclose(f);
    if (st == WEFT_OK)
        *c = tmp;
    return st;
}

weft_status_t simtime_cluster_check(const simtime_cluster_t *c)
{
    long ranks = (long)c->hosts * c->per_host;
    if (c->hosts < 1 || c->per_host < 1 || c->nics < 1)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: hosts (%d), ranks per host "
                                "(%d) and NICs (%d) must each be at least 1", c->hosts,
                                c->per_host, c->nics);
    if (ranks < 2 || ranks > SIMTIME_MAX_RANKS)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: %d hosts x %d ranks = %ld "
                                "ranks; weft-sim runs 2 to %d", c->hosts, c->per_host, ranks,
                                SIMTIME_MAX_RANKS);
    for (int l = 0; l < ALGO_NLINKS; l++)
        if (!(c->m.beta[l] > 0) || !(c->m.alpha[l] >= 0) || !(c->overhead[l] >= 0))
            return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: the %s link needs a "
                                    "bandwidth above 0 and a latency of 0 or more",
                                    l == ALGO_LINK_SHM ? "intra-host" : "inter-host");
    if (!(c->m.gamma > 0) || !(c->copy_beta > 0))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: reduce_bw and copy_bw must "
                                "be above 0");
    if (c->chunk && (c->chunk < 256 || c->chunk > CFG_CHUNK_MAX ||
                     (c->staging && c->chunk > c->staging / 4)))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: chunk %zu: want 256 bytes "
                                "or more, at most a quarter of the staging (%zu) and 1G, as "
                                "WEFT_CHUNK", c->chunk, c->staging);
    if (c->staging && c->staging < 64 * 1024)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "cluster: staging %zu: want 64K or "
                                "more (WEFT_BUFFSIZE), or 0 for unbounded", c->staging);
    return WEFT_OK;
}

void simtime_cluster_write(const simtime_cluster_t *c, FILE *f)
{
    fprintf(f, "hosts = %d\nranks_per_host = %d\nnics = %d\n", c->hosts, c->per_host, c->nics);
    fprintf(f, "intra_bw = %.6g\nintra_lat = %.6g\n", 1e-9 / c->m.beta[ALGO_LINK_SHM],
            c->m.alpha[ALGO_LINK_SHM] * 1e6);
    fprintf(f, "inter_bw = %.6g\ninter_lat = %.6g\n", 1e-9 / c->m.beta[ALGO_LINK_NET],
            c->m.alpha[ALGO_LINK_NET] * 1e6);
    fprintf(f, "reduce_bw = %.6g\ncopy_bw = %.6g\n", 1e-9 / c->m.gamma, 1e-9 / c->copy_beta);
    fprintf(f, "intra_overhead = %.6g\ninter_overhead = %.6g\n",
            c->overhead[ALGO_LINK_SHM] * 1e6, c->overhead[ALGO_LINK_NET] * 1e6);
    fprintf(f, "chunk = %zu\nstaging = %zu\n", c->chunk, c->staging);
    if (c->cores)
        fprintf(f, "cores = %d\n", c->cores);
    fprintf(f, "shm_copies = %d\nnet_copies = %d\n", c->shm_copies, c->net_copies);
    if (c->channels > 1)
        fprintf(f, "channels = %d\n", c->channels);
}

size_t simtime_chunk(const simtime_cluster_t *c, const sched_args_t *args)
{
    size_t chunk = c->chunk ? c->chunk : c->hosts > 1 ? 512 * 1024 : 128 * 1024;
    if (c->staging)
        chunk = WEFT_MIN(chunk, c->staging / 4);
    chunk = WEFT_MIN(chunk, CFG_CHUNK_MAX);
    size_t esz = weft_dtype_size(args->dtype);
    chunk = chunk / 64 * 64;
    return chunk / esz * esz;
}

/* Rank `rank`'s layout from rank 0's: only host and local_rank differ between ranks. */
static void layout_from(const simtime_cluster_t *c, const sched_layout_t *l0, int rank,
                        sched_layout_t *l)
{
    *l = *l0;
    l->local_rank = rank % c->per_host;
    l->host = rank / c->per_host;
}

/* algo_layout, as the engine gets it, for rank 0, then the per-rank fields; test_sim
 * checks the result equals algo_layout's for every rank. algo_layout is O(n^2) (2.3 s at
 * 65536 ranks), and weft-sim asks for the layout twice per row and column: rank 0's is
 * kept per thread for the last hosts x per_host, all it depends on. */
void simtime_layout(const simtime_cluster_t *c, int rank, sched_layout_t *l)
{
    static _Thread_local struct {
        int hosts, per_host;            /* 0: nothing kept */
        sched_layout_t l0;
    } kept;
    int n = c->hosts * c->per_host;
    sched_layout_t l0;
    if (kept.hosts == c->hosts && kept.per_host == c->per_host) {
        l0 = kept.l0;
    } else {
        uint64_t *ids = malloc((size_t)n * sizeof(uint64_t));
        if (ids == NULL) {              /* what algo_layout would say, field by field */
            memset(&l0, 0, sizeof(l0));
            l0.nhosts = c->hosts;
            l0.per_host = c->per_host;
            l0.uniform = 1;
        } else {
            for (int q = 0; q < n; q++)
                ids[q] = (uint64_t)(q / c->per_host);
            algo_layout(ids, n, 0, 0, &l0);
            free(ids);
            kept.hosts = c->hosts;
            kept.per_host = c->per_host;
            kept.l0 = l0;
        }
    }
    l0.rank_host = c->rank_host;
    layout_from(c, &l0, rank, l);
}

void simtime_host_map(const simtime_cluster_t *c, int *rank_host)
{
    for (int q = 0; q < c->hosts * c->per_host; q++)
        rank_host[q] = q / c->per_host;
}

/* ---- the replay ----------------------------------------------------------------- */

/* One step, without buffers (48 bytes: 4096 ranks x 16380 ring steps take 3.2 GB). */
typedef struct ts_step {
    uint64_t len, done;         /* bytes; done: sent, received or produced so far */
    int32_t peer;               /* SEND, RECV, RGET and their kin: the peer; FOLD: nslots */
    int32_t dep, stream;
    int32_t prev, next;         /* the step before and after it in its queue, or -1 */
    union {
        int32_t link;           /* receives: index in this rank's links; SEND: in the peer's */
        float cost;             /* local steps: seconds on the compute resource */
    } u;
    uint8_t kind, after_all, complete, sent;
    uint8_t busy;               /* 1: a frame on the port or being reduced, a local step
                                   running; 2: queued for its sending port */
} ts_step_t;

/* Frames from one sender to this rank, in order. */
typedef struct ts_link {
    int32_t from;
    int32_t cur;                /* the first receive from `from` not complete, or -1 */
    int32_t head, tail;         /* frames (ts_t.fr), -1: none */
    int32_t blocked;            /* the sender's send step waiting for room, or -1 */
    uint64_t bytes;             /* sent and not consumed yet */
} ts_link_t;

typedef struct ts_frame {
    double arrive;
    uint64_t len;
    int32_t next;
} ts_frame_t;

/* A sending port: busy until `free`; sends that find it busy queue in order (waiters,
 * ts_t.wt) and the first of them gets it when it frees (`grant`), so frames go out in
 * time order and a port is shared round-robin among the sends that want it. */
typedef struct ts_port {
    double free;
    int32_t head, tail;         /* waiters, -1: none */
    int64_t grant;              /* (rank << 32 | step) that may send now, or -1 */
} ts_port_t;

typedef struct ts_wait {
    int64_t who;                /* rank << 32 | step */
    int32_t next;
} ts_wait_t;

typedef struct ts_rank {
    ts_step_t *st;
    int32_t *woff, *wake;       /* CSR: the steps whose dep or stream is step i */
    int32_t *aa;                /* after_all steps, in order */
    ts_link_t *links;           /* by sender, ascending */
    int n, naa, aa_pos, nlinks, prefix, ncomplete, host, local;
    size_t esz;
    ts_port_t tx;               /* its sending port inside the host */
    double rx, cpu;             /* when its receiving port and compute resource are free */
} ts_rank_t;

enum { EV_LINK, EV_TX_DONE, EV_BUSY_DONE };

typedef struct ts_ev {
    double t;
    uint64_t seq;
    int32_t rank, arg;
    int type;
} ts_ev_t;

typedef struct ts {
    const simtime_cluster_t *c;
    int n;
    int nics;                           /* NICs per host that ranks use: at most per_host */
    size_t chunk;
    ts_rank_t *r;
    ts_port_t *nic_tx;                  /* [hosts * ts_t.nics] */
    double *nic_rx;
    ts_wait_t *wt;                      /* port waiters, free list free_wt */
    int32_t free_wt;
    size_t nwt, capwt;
    ts_ev_t *heap;
    size_t nheap, capheap;
    uint64_t seq;
    uint64_t *work;                     /* (rank << 32 | step) to try */
    size_t nwork, capwork;
    ts_frame_t *fr;
    int32_t free_fr;
    size_t nfr, capfr;
    double now, end;
    double cpuf;                        /* compute time factor: per_host / cores, at least 1 */
    size_t bytes, peak;
    long long frames, events, planned;  /* planned: frames the sends will cut */
} ts_t;

static void *ts_alloc(ts_t *t, size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p) {
        t->bytes += n;
        t->peak = WEFT_MAX(t->peak, t->bytes);
    }
    return p;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem, ts_t *t)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 1024;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (q == NULL)
        return -1;
    t->bytes += (nc - *cap) * elem;
    t->peak = WEFT_MAX(t->peak, t->bytes);
    *p = q;
    *cap = nc;
    return 0;
}

static int ev_before(const ts_ev_t *a, const ts_ev_t *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static weft_status_t ev_push(ts_t *t, double when, int type, int rank, int arg)
{
    if (grow((void **)&t->heap, &t->capheap, t->nheap + 1, sizeof(ts_ev_t), t))
        return weft_error(WEFT_ERR_NO_MEMORY, "weft-sim: out of memory (events)");
    ts_ev_t e = { when, t->seq++, rank, arg, type };
    size_t i = t->nheap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!ev_before(&e, &t->heap[up]))
            break;
        t->heap[i] = t->heap[up];
        i = up;
    }
    t->heap[i] = e;
    return WEFT_OK;
}

static ts_ev_t ev_pop(ts_t *t)
{
    ts_ev_t top = t->heap[0], last = t->heap[--t->nheap];
    size_t i = 0, n = t->nheap;
    for (;;) {
        size_t l = 2 * i + 1, m = l;
        if (l >= n)
            break;
        if (l + 1 < n && ev_before(&t->heap[l + 1], &t->heap[l]))
            m = l + 1;
        if (!ev_before(&t->heap[m], &last))
            break;
        t->heap[i] = t->heap[m];
        i = m;
    }
    if (n)
        t->heap[i] = last;
    return top;
}

static weft_status_t wake(ts_t *t, int rank, int step)
{
    if (step < 0)
        return WEFT_OK;
    if (grow((void **)&t->work, &t->capwork, t->nwork + 1, sizeof(uint64_t), t))
        return weft_error(WEFT_ERR_NO_MEMORY, "weft-sim: out of memory");
    t->work[t->nwork++] = (uint64_t)rank << 32 | (uint32_t)step;
    return WEFT_OK;
}

/* The steps that wait on step i's progress: its dependents and stream readers. */
static weft_status_t wake_readers(ts_t *t, int rank, int i)
{
    const ts_rank_t *r = &t->r[rank];
    for (int k = r->woff[i]; k < r->woff[i + 1]; k++)
        RETURN_IF_ERR(wake(t, rank, r->wake[k]));
    return WEFT_OK;
}

static weft_status_t complete(ts_t *t, int rank, int i)
{
    ts_rank_t *r = &t->r[rank];
    ts_step_t *st = &r->st[i];
    st->complete = 1;
    st->busy = 0;
    st->done = st->len;
    r->ncomplete++;
    t->end = WEFT_MAX(t->end, t->now);
    if (st->kind == STEP_RECV || st->kind == STEP_RECV_REDUCE)
        r->links[st->u.link].cur = st->next;
    RETURN_IF_ERR(wake(t, rank, st->next));
    RETURN_IF_ERR(wake_readers(t, rank, i));
    while (r->prefix < r->n && r->st[r->prefix].complete)
        r->prefix++;
    while (r->aa_pos < r->naa && r->st[r->aa[r->aa_pos]].complete)
        r->aa_pos++;
    if (r->aa_pos < r->naa && r->aa[r->aa_pos] <= r->prefix)
        RETURN_IF_ERR(wake(t, rank, r->aa[r->aa_pos]));
    return WEFT_OK;
}

static int link_of(const ts_rank_t *r, int from)
{
    int lo = 0, hi = r->nlinks - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (r->links[mid].from == from)
            return mid;
        if (r->links[mid].from < from)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Whether the ranks' CPUs move frames of link class cls (shm_copies, net_copies), and
 * what a byte costs each end then. */
static int cpu_moves(const simtime_cluster_t *c, int cls)
{
    return cls == ALGO_LINK_SHM ? c->shm_copies : c->net_copies;
}

static double move_beta(const simtime_cluster_t *c, int cls)
{
    return cls == ALGO_LINK_SHM ? c->copy_beta : c->m.beta[cls];
}

/* The ports a frame from s to d occupies (local % nics: NIC local % c->nics, as no
 * rank's local index reaches the NICs beyond per_host). A frame between hosts that the
 * CPUs move (net_copies) occupies none: *tx is NULL then, and the sender's compute
 * resource alone orders its frames. Inside a host, a CPU-moved frame (shm_copies) keeps
 * the sender's own port: no other rank uses it, and it makes the rank's sends take turns
 * while its CPU copies one frame at a time anyway. */
static void ports(ts_t *t, ts_rank_t *s, ts_rank_t *d, int cls, ts_port_t **tx, double **rx)
{
    if (cls == ALGO_LINK_SHM) {
        *tx = &s->tx;
        *rx = &d->rx;
        return;
    }
    if (cpu_moves(t->c, cls)) {
        *tx = NULL;
        *rx = NULL;
        return;
    }
    int nics = t->nics;
    *tx = &t->nic_tx[s->host * nics + s->local % nics];
    *rx = &t->nic_rx[d->host * nics + d->local % nics];
}

/* Queues `who` for port p; the step is marked busy (2) until port_next grants it. */
static weft_status_t port_wait(ts_t *t, ts_port_t *p, int64_t who)
{
    int32_t w;
    t->r[who >> 32].st[(uint32_t)who].busy = 2;
    if (t->free_wt >= 0) {
        w = t->free_wt;
        t->free_wt = t->wt[w].next;
    } else {
        if (grow((void **)&t->wt, &t->capwt, t->nwt + 1, sizeof(ts_wait_t), t))
            return weft_error(WEFT_ERR_NO_MEMORY, "weft-sim: out of memory (ports)");
        w = (int32_t)t->nwt++;
    }
    t->wt[w] = (ts_wait_t){ who, -1 };
    if (p->tail >= 0)
        t->wt[p->tail].next = w;
    else
        p->head = w;
    p->tail = w;
    return WEFT_OK;
}

/* Port p is free: its first waiter may send. */
static weft_status_t port_next(ts_t *t, ts_port_t *p)
{
    int32_t w = p->head;
    if (w < 0 || p->grant >= 0)
        return WEFT_OK;
    p->head = t->wt[w].next;
    if (p->head < 0)
        p->tail = -1;
    p->grant = t->wt[w].who;
    t->wt[w].next = t->free_wt;
    t->free_wt = w;
    t->r[p->grant >> 32].st[(uint32_t)p->grant].busy = 0;
    return wake(t, (int)(p->grant >> 32), (int)(uint32_t)p->grant);
}

/* The next frame of send step i, if it can go. */
static weft_status_t try_send(ts_t *t, int rank, int i)
{
    ts_rank_t *r = &t->r[rank];
    ts_step_t *st = &r->st[i];
    uint64_t avail = st->stream >= 0 ? r->st[st->stream].done : st->len;
    uint64_t n = WEFT_MIN((uint64_t)t->chunk, avail - st->done);
    if (st->done == st->len && st->sent)
        return complete(t, rank, i);
    if (n == 0 && st->len != 0)
        return WEFT_OK;                         /* waiting for the stream source */
    ts_rank_t *d = &t->r[st->peer];
    ts_link_t *l = &d->links[st->u.link];
    if (t->c->staging && l->bytes && l->bytes + n > t->c->staging) {
        l->blocked = i;                         /* the link is full */
        return WEFT_OK;
    }
    int cls = d->host == r->host ? ALGO_LINK_SHM : ALGO_LINK_NET;
    ts_port_t *tx;
    double *rx;
    ports(t, r, d, cls, &tx, &rx);
    int64_t me = (int64_t)rank << 32 | (uint32_t)i;
    if (tx && tx->grant != me && (tx->free > t->now || tx->grant >= 0 || tx->head >= 0))
        return port_wait(t, tx, me);            /* EV_TX_DONE of the port's frame wakes it */
    if (tx)
        tx->grant = -1;
    /* The sender's port, then the receiver's: a frame that finds the receiver's port
     * busy waits in the fabric, not on the sender's port (an all-to-all runs at the
     * busier side's rate, as through a switch). */
    double occ, end, in;
    if (cpu_moves(t->c, cls)) {
        /* the sender's CPU copies the frame in when it is free; the receiver's copies it
         * out when its receive runs (try_recv): no receiving port, and between hosts no
         * NIC either (tx NULL: a NIC port held from now to `end` was held through the
         * CPU's other work and made the host's ranks wait for each other's CPUs, so one
         * NIC took 86 ms where two took 69 for a 2x2 all-to-all) */
        occ = (t->c->overhead[cls] + (double)n * move_beta(t->c, cls)) * t->cpuf;
        end = WEFT_MAX(t->now, r->cpu) + occ;
        r->cpu = end;
        in = end;
    } else {
        occ = t->c->overhead[cls] + (double)n * t->c->m.beta[cls];
        end = t->now + occ;
        in = WEFT_MAX(end, *rx + occ);
        *rx = in;
    }
    if (tx)
        tx->free = end;
    int32_t f;
    if (t->free_fr >= 0) {
        f = t->free_fr;
        t->free_fr = t->fr[f].next;
    } else {
        if (grow((void **)&t->fr, &t->capfr, t->nfr + 1, sizeof(ts_frame_t), t))
            return weft_error(WEFT_ERR_NO_MEMORY, "weft-sim: out of memory (frames)");
        f = (int32_t)t->nfr++;
    }
    t->fr[f] = (ts_frame_t){ in + t->c->m.alpha[cls], n, -1 };
    if (l->tail >= 0)
        t->fr[l->tail].next = f;
    else
        l->head = f;
    l->tail = f;
    l->bytes += n;
    st->done += n;
    st->sent = 1;
    st->busy = 1;
    t->frames++;
    RETURN_IF_ERR(ev_push(t, end, EV_TX_DONE, rank, i));
    RETURN_IF_ERR(ev_push(t, in + t->c->m.alpha[cls], EV_LINK, st->peer, st->u.link));
    return wake_readers(t, rank, i);            /* an in-place receive may go on */
}

/* Takes the head frame of step i's link: staging freed, bytes counted. */
static weft_status_t consume(ts_t *t, int rank, int i)
{
    ts_rank_t *r = &t->r[rank];
    ts_step_t *st = &r->st[i];
    ts_link_t *l = &r->links[st->u.link];
    int32_t f = l->head;
    uint64_t len = t->fr[f].len;
    l->head = t->fr[f].next;
    if (l->head < 0)
        l->tail = -1;
    t->fr[f].next = t->free_fr;
    t->free_fr = f;
    l->bytes -= len;
    st->done += len;
    st->sent = 1;
    st->busy = 0;
    if (l->blocked >= 0) {
        RETURN_IF_ERR(wake(t, l->from, l->blocked));
        l->blocked = -1;
    }
    RETURN_IF_ERR(wake_readers(t, rank, i));
    if (st->done == st->len)
        return complete(t, rank, i);
    return wake(t, rank, i);
}

static weft_status_t try_recv(ts_t *t, int rank, int i)
{
    ts_rank_t *r = &t->r[rank];
    ts_step_t *st = &r->st[i];
    ts_link_t *l = &r->links[st->u.link];
    if (l->head < 0 || t->fr[l->head].arrive > t->now)
        return WEFT_OK;                         /* EV_LINK wakes it */
    uint64_t len = t->fr[l->head].len;
    if (len > st->len - st->done || len % r->esz != 0)
        return weft_error_quiet(WEFT_ERR_MISMATCH, "weft-sim: rank %d step %d has room for %llu "
                          "bytes; rank %d sent a frame of %llu", rank, i,
                          (unsigned long long)(st->len - st->done), st->peer,
                          (unsigned long long)len);
    if (st->stream >= 0 && r->st[st->stream].done < st->done + len)
        return WEFT_OK;                         /* its bytes are not sent yet (in place) */
    int cls = t->r[l->from].host == r->host ? ALGO_LINK_SHM : ALGO_LINK_NET;
    int copies = cpu_moves(t->c, cls);
    if (st->kind == STEP_RECV && !copies)
        return consume(t, rank, i);
    st->busy = 1;       /* a reduction, or the CPU's copy out of the link */
    /* shm reduces straight out of the ring; tcp lands the bytes first */
    double beta = st->kind == STEP_RECV ? move_beta(t->c, cls)
                  : t->c->m.gamma + (copies && cls == ALGO_LINK_NET ? t->c->m.beta[cls] : 0);
    r->cpu = WEFT_MAX(t->now, r->cpu) + (double)len * beta * t->cpuf;
    return ev_push(t, r->cpu, EV_BUSY_DONE, rank, i);
}

static weft_status_t try_step(ts_t *t, int rank, int i)
{
    ts_rank_t *r = &t->r[rank];
    ts_step_t *st = &r->st[i];
    if (st->complete || st->busy || (st->prev >= 0 && !r->st[st->prev].complete) ||
        (st->dep >= 0 && !r->st[st->dep].complete) || (st->after_all && r->prefix < i))
        return WEFT_OK;
    switch (st->kind) {
    case STEP_SEND:
        return try_send(t, rank, i);
    case STEP_RECV:
    case STEP_RECV_REDUCE:
        return try_recv(t, rank, i);
    default:
        if (st->u.cost <= 0)
            return complete(t, rank, i);
        st->busy = 1;
        r->cpu = WEFT_MAX(t->now, r->cpu) + st->u.cost * t->cpuf;
        return ev_push(t, r->cpu, EV_BUSY_DONE, rank, i);
    }
}

static weft_status_t drain(ts_t *t)
{
    while (t->nwork) {
        uint64_t w = t->work[--t->nwork];
        RETURN_IF_ERR(try_step(t, (int)(w >> 32), (int)(uint32_t)w));
    }
    return WEFT_OK;
}

static weft_status_t handle(ts_t *t, const ts_ev_t *e)
{
    ts_rank_t *r = &t->r[e->rank];
    switch (e->type) {
    case EV_LINK: {
        ts_link_t *l = &r->links[e->arg];
        return wake(t, e->rank, l->cur);
    }
    case EV_TX_DONE: {
        ts_step_t *st = &r->st[e->arg];
        ts_rank_t *d = &t->r[st->peer];
        ts_port_t *tx;
        double *rx;
        ports(t, r, d, d->host == r->host ? ALGO_LINK_SHM : ALGO_LINK_NET, &tx, &rx);
        st->busy = 0;
        if (tx)
            RETURN_IF_ERR(port_next(t, tx));    /* waiters first: round-robin */
        return wake(t, e->rank, e->arg);
    }
    default:                                    /* EV_BUSY_DONE */
        if (r->st[e->arg].kind == STEP_RECV || r->st[e->arg].kind == STEP_RECV_REDUCE)
            return consume(t, e->rank, e->arg);     /* reduced, or copied out */
        return complete(t, e->rank, e->arg);
    }
}

/* Seconds a local step keeps the rank's compute resource. */
static double local_cost(const simtime_cluster_t *c, const sched_args_t *a,
                         const sched_step_t *s, int cls)
{
    double len = (double)s->len;
    switch (s->kind) {
    case STEP_COPY:
        return s->dst_buf == s->src_buf && s->dst_off == s->src_off ? 0 : len * c->copy_beta;
    case STEP_FOLD:
        if (s->nslots > 1)
            return (s->nslots - 1) * len * c->m.gamma;
        if (s->final && a->op == WEFT_AVG)
            return len * c->m.gamma;
        return s->dst_buf == s->src_buf && s->dst_off == s->src_off ? 0 : len * c->copy_beta;
    case STEP_RGET:
        return c->m.alpha[cls] + len * c->m.beta[cls];
    default:                                    /* RGET_REDUCE */
        return c->m.alpha[cls] + len * (c->m.beta[cls] + c->m.gamma);
    }
}

static int is_recv(int kind)
{
    return kind == STEP_RECV || kind == STEP_RECV_REDUCE;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Rank q's schedule as the engine builds it (a = its arguments); the caller frees s. */
static weft_status_t build_sched(ts_t *t, const algo_t *al, const sched_args_t *args, int q,
                                 int root_check, const sched_layout_t *l0, sched_args_t *a,
                                 sched_t *s)
{
    *a = *args;
    a->rank = q;
    layout_from(t->c, l0, q, &a->layout);
    if (!al->supports(a))
        return weft_error_quiet(WEFT_ERR_UNSUPPORTED, "weft-sim: %s does not run this call "
                                "on rank %d", al->name, q);
    RETURN_IF_ERR(algo_build(al, a, root_check, s));
    if (s->probe) {
        sched_free(s);
        return weft_error_quiet(WEFT_ERR_UNSUPPORTED, "weft-sim: %s is an address exchange "
                                "that another schedule continues", al->name);
    }
    return WEFT_OK;
}

/* The frames a send step cuts: at least one, an empty one too. */
static long long send_frames(const ts_t *t, const sched_step_t *x)
{
    return x->len ? (long long)((x->len + t->chunk - 1) / t->chunk) : 1;
}

/* Builds rank q's schedule and keeps its compact form. */
static weft_status_t build_rank(ts_t *t, const algo_t *al, const sched_args_t *args, int q,
                                int root_check, const sched_layout_t *l0)
{
    ts_rank_t *r = &t->r[q];
    sched_args_t a;
    sched_t s;
    RETURN_IF_ERR(build_sched(t, al, args, q, root_check, l0, &a, &s));
    r->host = a.layout.host;
    r->local = a.layout.local_rank;
    r->esz = weft_dtype_size(a.dtype);
    int n = s.nsteps;
    size_t nn = (size_t)n;
    r->n = n;
    r->st = ts_alloc(t, nn * sizeof(ts_step_t));
    r->woff = ts_alloc(t, (nn + 1) * sizeof(int32_t));
    int32_t *peers = malloc(nn * sizeof(int32_t) + 1);
    int naa = 0, nw = 0, np = 0;
    if (!r->st || !r->woff || !peers) {
        free(peers);
        sched_free(&s);
        return weft_error(WEFT_ERR_NO_MEMORY, "weft-sim: out of memory (%d ranks)", t->n);
    }
    memset(r->woff, 0, (nn + 1) * sizeof(int32_t));
    for (int i = 0; i < n; i++) {
        const sched_step_t *x = &s.steps[i];
        ts_step_t *y = &r->st[i];
        memset(y, 0, sizeof(*y));
        y->len = x->len;
        y->kind = x->kind;
        y->peer = x->kind == STEP_FOLD ? x->nslots : x->peer;
        y->dep = x->dep;
        y->stream = x->stream;
        y->after_all = x->after_all;
        y->prev = y->next = -1;
        naa += x->after_all != 0;
        if (x->dep >= 0)
            r->woff[x->dep + 1]++, nw++;
        if (x->stream >= 0)
            r->woff[x->stream + 1]++, nw++;
        if (is_recv(x->kind))
            peers[np++] = x->peer;
        if (x->kind == STEP_SEND)
            t->planned += send_frames(t, x);
        if (x->kind != STEP_SEND && !is_recv(x->kind)) {
            int cls = x->peer >= 0 && x->peer / t->c->per_host != r->host ? ALGO_LINK_NET
                                                                          : ALGO_LINK_SHM;
            y->u.cost = (float)local_cost(t->c, &a, x, cls);
        }
    }
    for (int i = 0; i < n; i++) {
        if (s.steps[i].kind == STEP_SEND || is_recv(s.steps[i].kind)) {
            r->st[i].next = s.next_same[i];
            if (s.next_same[i] >= 0)
                r->st[s.next_same[i]].prev = i;
        }
    }
    for (int k = 1; k < s.nlocals; k++) {
        r->st[s.locals[k]].prev = s.locals[k - 1];
        r->st[s.locals[k - 1]].next = s.locals[k];
    }
    r->wake = ts_alloc(t, (size_t)nw * sizeof(int32_t) + 1);
    r->aa = ts_alloc(t, (size_t)naa * sizeof(int32_t) + 1);
    qsort(peers, (size_t)np, sizeof(int32_t), cmp_i32);
    int nl = 0;
    for (int k = 0; k < np; k++)
        if (nl == 0 || peers[nl - 1] != peers[k])
            peers[nl++] = peers[k];
    r->links = ts_alloc(t, (size_t)nl * sizeof(ts_link_t) + 1);
    if (!r->wake || !r->aa || !r->links) {
        free(peers);
        sched_free(&s);
        return weft_error(WEFT_ERR_NO_MEMORY, "weft-sim: out of memory (%d ranks)", t->n);
    }
    r->nlinks = nl;
    for (int k = 0; k < nl; k++)
        r->links[k] = (ts_link_t){ peers[k], s.head_recv[peers[k]], -1, -1, -1, 0 };
    free(peers);
    for (int i = 0; i < n; i++)
        r->woff[i + 1] += r->woff[i];
    int32_t *fill = malloc(nn * sizeof(int32_t) + 1);
    if (fill == NULL) {
        sched_free(&s);
        return weft_error(WEFT_ERR_NO_MEMORY, "weft-sim: out of memory (%d ranks)", t->n);
    }
    memcpy(fill, r->woff, nn * sizeof(int32_t));
    for (int i = 0; i < n; i++) {
        const sched_step_t *x = &s.steps[i];
        if (x->dep >= 0)
            r->wake[fill[x->dep]++] = i;
        if (x->stream >= 0)
            r->wake[fill[x->stream]++] = i;
        if (x->after_all)
            r->aa[r->naa++] = i;
        if (is_recv(x->kind))
            r->st[i].u.link = link_of(r, x->peer);
    }
    free(fill);
    sched_free(&s);
    return WEFT_OK;
}

/* Every send finds its link at the receiver; a send to a rank that never receives from
 * this one is a schedule mismatch. */
static weft_status_t resolve_sends(ts_t *t)
{
    for (int q = 0; q < t->n; q++) {
        ts_rank_t *r = &t->r[q];
        for (int i = 0; i < r->n; i++) {
            ts_step_t *st = &r->st[i];
            if (st->kind != STEP_SEND)
                continue;
            if (st->peer < 0 || st->peer >= t->n || st->peer == q ||
                (st->u.link = link_of(&t->r[st->peer], q)) < 0)
                return weft_error_quiet(WEFT_ERR_MISMATCH, "weft-sim: rank %d step %d sends to "
                                  "rank %d, which receives nothing from it", q, i, st->peer);
        }
    }
    return WEFT_OK;
}

static weft_status_t stuck(const ts_t *t, const algo_t *al)
{
    for (int q = 0; q < t->n; q++) {
        const ts_rank_t *r = &t->r[q];
        for (int i = 0; i < r->n; i++)
            if (!r->st[i].complete)
                return weft_error_quiet(WEFT_ERR_INTERNAL, "weft-sim: %s on %d ranks: no rank can "
                                  "move; rank %d waits in step %d (kind %d, peer %d)",
                                  al->name, t->n, q, i, r->st[i].kind, r->st[i].peer);
    }
    for (int q = 0; q < t->n; q++)
        for (int k = 0; k < t->r[q].nlinks; k++)
            if (t->r[q].links[k].head >= 0)
                return weft_error_quiet(WEFT_ERR_INTERNAL, "weft-sim: %s: rank %d sent rank %d "
                                  "frames no step received", al->name, t->r[q].links[k].from,
                                  q);
    return WEFT_OK;
}

static void ts_free(ts_t *t)
{
    for (int q = 0; t->r && q < t->n; q++) {
        free(t->r[q].st);
        free(t->r[q].woff);
        free(t->r[q].wake);
        free(t->r[q].aa);
        free(t->r[q].links);
    }
    free(t->r);
    free(t->nic_tx);
    free(t->nic_rx);
    free(t->heap);
    free(t->work);
    free(t->fr);
    free(t->wt);
}

static weft_status_t too_many(const ts_t *t, const algo_t *al, long long max_frames, int q)
{
    return weft_error_quiet(WEFT_ERR_UNSUPPORTED, "weft-sim: %s would replay %lld frames "
                            "or more, more than the limit of %lld (the sends of the first "
                            "%d of %d ranks cut that many)", al->name, t->planned,
                            max_frames, q + 1, t->n);
}

/* The frames rank q's sends cut, from its schedule built and dropped. */
static weft_status_t frames_of(ts_t *t, const algo_t *al, const sched_args_t *args, int q,
                               int root_check, const sched_layout_t *l0, long long *frames)
{
    sched_args_t a;
    sched_t s;
    RETURN_IF_ERR(build_sched(t, al, args, q, root_check, l0, &a, &s));
    *frames = 0;
    for (int i = 0; i < s.nsteps; i++)
        if (s.steps[i].kind == STEP_SEND)
            *frames += send_frames(t, &s.steps[i]);
    sched_free(&s);
    return WEFT_OK;
}

/* Whether the call would cut more than max_frames frames, judged before the ranks past
 * rank 0 (cutting rank0_frames) are built: when every one of a few ranks spread over
 * the cluster (0, 1, the middle, the last: a host's first and later ranks, both ends
 * of a ring or chain) cuts more than max_frames / n, so would n of the fewest. A
 * schedule where some rank sends less (a broadcast's leaves, a reduce's root) is not
 * judged here: the count as the ranks are built refuses it if it must. Counting every
 * rank first is no way out: a ring's schedule of 65536 ranks takes 0.4 s to build. */
static weft_status_t over_limit(ts_t *t, const algo_t *al, const sched_args_t *args,
                                int root_check, long long max_frames,
                                const sched_layout_t *l0, long long rank0_frames)
{
    const int probe[] = { 1, t->n / 2 + 1, t->n - 1 };
    long long fewest = rank0_frames;
    char ranks[64] = "0";
    size_t len = 1;
    for (size_t k = 0; k < sizeof(probe) / sizeof(probe[0]); k++) {
        int q = probe[k], seen = q >= t->n;     /* 2 ranks: 1, 2, 1; 4: 1, 3, 3 */
        for (size_t j = 0; j < k; j++)
            seen |= probe[j] == q;
        if (seen)
            continue;
        long long f;
        RETURN_IF_ERR(frames_of(t, al, args, q, root_check, l0, &f));
        fewest = WEFT_MIN(fewest, f);
        if ((double)fewest * t->n <= (double)max_frames)
            return WEFT_OK;
        len += (size_t)snprintf(ranks + len, sizeof(ranks) - len, ", %d", q);
    }
    return weft_error_quiet(WEFT_ERR_UNSUPPORTED, "weft-sim: %s would replay about %.3g "
                            "frames, more than the limit of %lld (ranks %s of %d cut %lld "
                            "or more each; the rest were not built)", al->name,
                            (double)fewest * t->n, max_frames, ranks, t->n, fewest);
}

static weft_status_t replay(ts_t *t, const algo_t *al, const sched_args_t *args,
                            int root_check, long long max_frames, simtime_result_t *res)
{
    const simtime_cluster_t *c = t->c;
    /* rank r uses NIC (r % per_host) % nics: NICs beyond per_host carry nothing, and
     * 32768 hosts of 65536 NICs each asked for 51 GB of ports */
    t->nics = WEFT_MIN(c->nics, c->per_host);
    size_t nn = (size_t)c->hosts * (size_t)t->nics;
    t->r = ts_alloc(t, (size_t)t->n * sizeof(ts_rank_t));
    t->nic_tx = ts_alloc(t, nn * sizeof(ts_port_t));
    t->nic_rx = ts_alloc(t, nn * sizeof(double));
    if (!t->r || !t->nic_tx || !t->nic_rx)
        return weft_error(WEFT_ERR_NO_MEMORY, "weft-sim: out of memory (%d ranks)", t->n);
    memset(t->r, 0, (size_t)t->n * sizeof(ts_rank_t));
    for (int q = 0; q < t->n; q++)
        t->r[q].tx = (ts_port_t){ 0, -1, -1, -1 };
    for (size_t k = 0; k < nn; k++)
        t->nic_tx[k] = (ts_port_t){ 0, -1, -1, -1 };
    memset(t->nic_rx, 0, nn * sizeof(double));
    sched_layout_t l0;
    simtime_layout(c, 0, &l0);
    /* The limit is checked as the schedules are built, not once all are (which kept
     * every rank's steps first: a 65536-rank ring of 8 bytes asked for 825 GB before it
     * said N/A), and judged from a few ranks before the rest are built (over_limit). */
    RETURN_IF_ERR(build_rank(t, al, args, 0, root_check, &l0));
    if (max_frames > 0 && t->planned > max_frames)
        return too_many(t, al, max_frames, 0);
    if (max_frames > 0 && (double)t->planned * t->n > (double)max_frames)
        RETURN_IF_ERR(over_limit(t, al, args, root_check, max_frames, &l0, t->planned));
    for (int q = 1; q < t->n; q++) {
        RETURN_IF_ERR(build_rank(t, al, args, q, root_check, &l0));
        if (max_frames > 0 && t->planned > max_frames)
            return too_many(t, al, max_frames, q);
    }
    RETURN_IF_ERR(resolve_sends(t));
    long long steps = 0;
    for (int q = 0; q < t->n; q++) {
        steps += t->r[q].n;
        for (int i = 0; i < t->r[q].n; i++)
            if (t->r[q].st[i].prev < 0)
                RETURN_IF_ERR(wake(t, q, i));
    }
    RETURN_IF_ERR(drain(t));
    while (t->nheap) {
        ts_ev_t e = ev_pop(t);
        t->now = e.t;
        t->events++;
        RETURN_IF_ERR(handle(t, &e));
        RETURN_IF_ERR(drain(t));
    }
    RETURN_IF_ERR(stuck(t, al));       /* a step left, or a frame nobody took */
    res->seconds = t->end;
    res->steps = steps;
    res->frames = t->frames;
    res->events = t->events;
    res->peak_bytes = t->peak;
    return WEFT_OK;
}

weft_status_t simtime_run(const simtime_cluster_t *c, const algo_t *al,
                          const sched_args_t *args, int root_check, long long max_frames,
                          simtime_result_t *res)
{
    RETURN_IF_ERR(simtime_cluster_check(c));
    memset(res, 0, sizeof(*res));
    /* The engine moves nothing for a count of 0 (coll_run completes the call without a
     * schedule, whatever the algorithm; a barrier, whose count is always 0, runs): no
     * time, no steps. Replayed, an 8-byte all-gather of 4 ranks (count 0) took 0.5 us. */
    if (args->count == 0 && args->coll != COLL_BARRIER)
        return WEFT_OK;
    sched_args_t a = *args;
    a.nranks = c->hosts * c->per_host;
    a.chunk = simtime_chunk(c, &a);
    a.nchannels = algo_channels(&a, c->channels > 1 ? c->channels : 1);
    if (a.chunk == 0)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "weft-sim: a chunk of 0 bytes");
    ts_t t = { .c = c, .n = a.nranks, .chunk = a.chunk, .free_fr = -1, .free_wt = -1,
               .cpuf = c->cores && c->per_host > c->cores ? (double)c->per_host / c->cores
                                                         : 1.0 };
    weft_status_t st = replay(&t, al, &a, root_check, max_frames, res);
    ts_free(&t);
    return st;
}
