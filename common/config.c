/*
 * config.c - the tunables table and its parsers.
 *
 * Invariant: every WEFT_* knob weft reads (other than the launcher's rank variables and
 * WEFT_SECRET) is a row of `knobs`; adding a knob means adding a field and a row.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "status.h"

typedef int (*cfg_parse_fn_t)(const char *s, void *field, size_t cap);
typedef void (*cfg_format_fn_t)(const void *field, char *buf, size_t cap);

typedef struct {
    const char *name;
    const char *defval;
    const char *doc;
    size_t offset;
    size_t cap;          /* size of the field, for strings */
    cfg_parse_fn_t parse;
    cfg_format_fn_t format;
    const char *choices; /* "a|b|c" for enumerated strings, or NULL */
} cfg_knob_t;

static int parse_string(const char *s, void *field, size_t cap)
{
    if (strlen(s) >= cap)
        return -1;
    strcpy((char *)field, s);
    return 0;
}

#define CFG_CPU_MAX (1 << 20)   /* past any machine's cpu numbers; keeps strtol in range */

/* WEFT_BIND: auto, none, or cores: and one cpu list per local rank ("cores:0-3,4-7" is
 * two ranks' sets: a comma starts the next rank's set, a dash makes a range). */
static int parse_bind(const char *s, void *field, size_t cap)
{
    if (strcmp(s, "auto") != 0 && strcmp(s, "none") != 0) {
        if (strncmp(s, "cores:", 6) != 0)
            return -1;
        const char *l = s + 6;
        if (*l == '\0')
            return -1;
        /* each item an OS cpu N or a range N-M with N <= M: "1-0", "-", "0-" or "-1" is
         * refused here, on every rank alike, not by one rank's binding after connecting */
        for (const char *p = l;; p++) {
            char *end;
            if (!isdigit((unsigned char)*p))
                return -1;
            long lo = strtol(p, &end, 10), hi = lo;
            if (*end == '-') {
                if (!isdigit((unsigned char)end[1]))
                    return -1;
                hi = strtol(end + 1, &end, 10);
            }
            if (lo > hi || hi > CFG_CPU_MAX || (*end != ',' && *end != '\0'))
                return -1;
            if (*end == '\0')
                break;
            p = end;
        }
    }
    return parse_string(s, field, cap);
}

/* WEFT_HOSTID: a name, so that it survives shells and logs unquoted. */
static int parse_hostid(const char *s, void *field, size_t cap)
{
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._:-", *p))
            return -1;
    return parse_string(s, field, cap);
}

static int parse_double(const char *s, void *field, size_t cap)
{
    (void)cap;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* at most 1e9 (WEFT_TIMEOUT: 31 years, "forever"): deadlines are uint64_t
     * nanoseconds, and inf or 1e30 seconds would not convert */
    if (errno || end == s || *end != '\0' || !(v > 0) || !(v <= 1e9))
        return -1;
    *(double *)field = v;
    return 0;
}

/* As parse_double, or 0 (off: WEFT_WAIT_WARN). */
static int parse_double0(const char *s, void *field, size_t cap)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!errno && end != s && *end == '\0' && v == 0) {
        *(double *)field = 0;
        return 0;
    }
    return parse_double(s, field, cap);
}

/* A count, or "auto" (stored as -1; "-1" says the same) where the caller picks a value at
 * run time. */
static int parse_long(const char *s, void *field, size_t cap)
{
    (void)cap;
    char *end;
    if (!strcmp(s, "auto") || !strcmp(s, "-1")) {
        *(long *)field = -1;
        return 0;
    }
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < 0)
        return -1;
    *(long *)field = v;
    return 0;
}

int cfg_parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')  /* strtoull takes " -1" as 2^64 - 1 */
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || (shift && v > (~0ull >> shift)))
        return -1;
    *out = (size_t)(v << shift);
    return 0;
}

static int parse_size(const char *s, void *field, size_t cap)
{
    (void)cap;
    return cfg_parse_size(s, (size_t *)field);
}

static void format_string(const void *f, char *buf, size_t cap) { snprintf(buf, cap, "%s", (const char *)f); }
static void format_double(const void *f, char *buf, size_t cap) { snprintf(buf, cap, "%g", *(const double *)f); }
static void format_long(const void *f, char *buf, size_t cap)   { snprintf(buf, cap, "%ld", *(const long *)f); }
static void format_size(const void *f, char *buf, size_t cap)   { snprintf(buf, cap, "%zu", *(const size_t *)f); }

#define STR(field)  offsetof(weft_config_t, field), sizeof(((weft_config_t *)0)->field), parse_string, format_string
#define DBL(field)  offsetof(weft_config_t, field), 0, parse_double, format_double
#define DBL0(field) offsetof(weft_config_t, field), 0, parse_double0, format_double
#define LNG(field)  offsetof(weft_config_t, field), 0, parse_long, format_long
#define SIZE(field) offsetof(weft_config_t, field), 0, parse_size, format_size

static const cfg_knob_t knobs[] = {
    /* diagnostics */
    { "WEFT_DEBUG", "WARN", "log level: NONE, WARN, INFO, DEBUG, TRACE", STR(debug),
      "NONE|WARN|INFO|DEBUG|TRACE|none|warn|info|debug|trace" },
    { "WEFT_DEBUG_SUBSYS", "ALL", "log subsystems: INIT,BOOT,NET,SHM,COLL,ENGINE,TOPO,TUNE,ALL; ^X excludes",
      STR(debug_subsys), NULL },
    { "WEFT_TIMEOUT", "300", "seconds (at most 1e9) a blocking call waits for peers before "
      "WEFT_ERR_TIMEOUT; weft_comm_init gets one in all, a split's connecting another",
      DBL(timeout_s), NULL },
    { "WEFT_WAIT_WARN", "60", "seconds a call may wait for its peers before it logs a WARN "
      "naming the ranks it waits for (again at twice as long, and so on); 0 = never",
      DBL0(wait_warn_s), NULL },
    /* transports */
    { "WEFT_TRANSPORT", "auto", "auto (shm within a host, tcp across, ucx across when UCX "
      "sees an RDMA device, ib across when a verbs device reaches the peer), shm, tcp, ucx "
      "(every peer; built with libucx-dev), or ib (every peer, over RDMA verbs)",
      STR(transport), "auto|shm|tcp|ucx|ib" },
    { "WEFT_SOCKET_IFNAME", "", "interface whose address tcp listens on, NCCL's syntax: "
      "ib0,eth (prefixes, in order of preference), =eth1 (exactly), ^docker,lo (all but); "
      "default: the address that reaches the rendezvous host", STR(socket_ifname), NULL },
    { "WEFT_IB_HCA", "", "verbs devices (and ports) a rank may use, NCCL's syntax: "
      "mlx5_0:1,mlx5_1 (name prefixes, optional port; empty entries skipped), =mlx5_0 "
      "(exactly), ^mlx5_2 (all but); InfiniBand and RoCE devices only (EFA, iWARP skipped); "
      "each local rank takes the nearest allowed one to its GPU (topo_nic_for_rank); empty: "
      "every active port", STR(ib_hca), NULL },
    { "WEFT_IB_QPS_PER_CONN", "1", "RC queue pairs per ib connection; frames are striped "
      "across them (1-4)", LNG(ib_qps), "1|2|3|4" },
    { "WEFT_IB_GID_INDEX", "auto", "GID index of the ib port (RoCE); auto (or -1): the first "
      "RoCE v2 IPv4-mapped GID, else index 0", LNG(ib_gid_index), NULL },
    { "WEFT_IB_TIMEOUT", "14", "ib QP local ACK timeout, 4.096 us * 2^value (1-31)",
      LNG(ib_timeout), NULL },
    { "WEFT_IB_RETRY_CNT", "7", "ib QP transport retries before a peer is lost (0-7)",
      LNG(ib_retry_cnt), "0|1|2|3|4|5|6|7" },
    { "WEFT_IB_SL", "0", "InfiniBand service level of the ib QPs (0-15), as NCCL_IB_SL: the "
      "fabric's QoS class for weft's traffic", LNG(ib_sl), NULL },
    { "WEFT_IB_TC", "0", "traffic class of the ib QPs' global route header (0-255), as "
      "NCCL_IB_TC: on RoCE its upper 6 bits are the DSCP, which picks the lossless "
      "(PFC/ECN) priority a fabric reserves for RDMA", LNG(ib_tc), NULL },
    { "WEFT_IB_PKEY", "0", "partition key index of the ib QPs (0-65535), as NCCL_IB_PKEY: "
      "for a partition other than the port's first", LNG(ib_pkey), NULL },
    { "WEFT_IB_ZCOPY", "reg", "which receive buffers an ib rank posts to its peer, which then "
      "RDMA-writes the data straight into them instead of into the receive ring (no copy "
      "out of it): reg = weft_mem_alloc memory (registered once, cached), all = any host "
      "buffer (its pages registered for the receive), 0 = none", STR(ib_zcopy),
      "reg|all|0" },
    { "WEFT_BUFFSIZE", "4M", "bytes of staging per connection and direction (shm ring size); "
      "may differ between ranks: frames are cut to a quarter of the smallest; unset, a "
      "host's shm rings shrink where /dev/shm is small (to fit half of its free space)",
      SIZE(buffsize), NULL },
    { "WEFT_SOCKET_BUFFSIZE", "0", "SO_SNDBUF and SO_RCVBUF of each tcp data connection "
      "(the kernel caps them at net.core.wmem_max/rmem_max); 0 = leave both to the kernel's "
      "autotuning (net.ipv4.tcp_wmem/tcp_rmem), which a fixed size disables; at least 64K "
      "(smaller windows stall on zero-window probes)",
      SIZE(socket_buffsize), NULL },
    { "WEFT_TCP_DEAD", "10", "seconds a tcp data connection may go without an answer from "
      "the peer's host (keepalive probes while idle; while data sent is unacknowledged, any "
      "acknowledgement) before "
      "the peer counts as lost (WEFT_ERR_PEER_LOST): a host that vanishes without closing "
      "its connections (power loss, a cut network) is found in about this time instead of "
      "at WEFT_TIMEOUT; 0 = the kernel's defaults (about 15 minutes of retransmissions)",
      LNG(tcp_dead_s), NULL },
    /* algorithms */
    { "WEFT_ALGO", "auto", "auto (the tuner), or a registered algorithm (comm/algo.c; the "
      "names follow the table), used for every call it supports: ring (pipelined ring or "
      "chain), direct (one-shot exchange), cma (single copy: one-sided reads of the peers' buffers, where every transport in use has them), "
      "tree (double binary tree: allreduce, reduce, broadcast), rhd (recursive halving/"
      "doubling: allreduce; reduce_scatter, allgather at a power of two), "
      "hier (rings inside each host and across hosts: allreduce, reduce_scatter, "
      "allgather, broadcast where ranks span hosts, as many on each, more than one), "
      "...", STR(algo), NULL },
    { "WEFT_CHUNK", "0", "bytes per frame; 0 lets the tuner decide", SIZE(chunk), NULL },
    { "WEFT_NCHANNELS", "1", "channels of the ring and chain algorithms (1-64): each takes a "
      "slice of the call's buffer (at least 64K), odd ones run the ring the other way "
      "round, and their frames take turns on every connection",
      LNG(nchannels), NULL },
    { "WEFT_DIRECT_MAX", "32K", "largest per-rank message the tuner sends with the direct "
      "algorithm: all of them up to it on 2 ranks and up to 4 ranks of one host; beyond, "
      "the cost model weighs direct against the trees up to it",
      SIZE(direct_max), NULL },
    { "WEFT_CMA_MIN", "0", "smallest per-rank message the tuner moves by single-copy reads "
      "(one-sided gets) when every peer has them, for every collective; 0 = the defaults: "
      "all-gather from 32K on shm (unless one-sided reads take over 2.5x a copy's time "
      "there, measured at init: then never; 256K elsewhere), and everything from 256K where ucx serves every peer within "
      "one host (on shm the ring is faster for the others, see docs/PERF.md, except "
      "all-reduce from 512K and reduce-scatter from 64K per rank where 2 ranks' cores share "
      "no cache: WEFT_SHM_FAR)",
      SIZE(cma_min), NULL },
    { "WEFT_REG_MIN", "64M", "smallest per-rank message (every peer with one-sided reads) that "
      "first exchanges buffer addresses, and runs single-copy (mappings, or cached "
      "registrations) when every rank's "
      "buffers are weft_mem_alloc memory (from twice the size when any rank's call is in "
      "place); 0 = never", SIZE(reg_min), NULL },
    { "WEFT_NT_MIN", "4M", "smallest call (its larger buffer, bytes) whose writes into the "
      "caller's buffers use non-temporal stores, which skip the cache; 0 = never",
      SIZE(nt_min), NULL },
    { "WEFT_SHM_NT", "auto", "how a rank copies frames of 64K and more into a peer's shm "
      "ring: auto = plain stores, and non-temporal ones while those move the bytes in more "
      "than 3.5 times as fast (the two ranks' cores share no cache then, and plain stores "
      "wait on the peer's cache line by line: docs/PERF.md); 0 = always plain; 1 = always "
      "non-temporal", LNG(shm_nt), "auto|0|1" },
    { "WEFT_SHM_FAR", "auto", "whether the two ranks of a 2-rank communicator on one host "
      "sit on cores that share no cache (two sockets, two CCDs, a VM's vCPUs moved apart), "
      "where single-copy reads beat the shm ring for all-reduce (from 512K) and reduce-scatter "
      "(from 64K per rank): auto = rank 0 times 1000 cache-line round trips with rank 1 at "
      "init (far from 180 to 2000 ns), and both take its verdict (rank 0's setting counts); "
      "1 = far; 0 = near (the ring, as before); only where single-copy reads run at about a "
      "copy's speed (see WEFT_CMA_MIN), else ignored",
      LNG(shm_far), "auto|0|1" },
    { "WEFT_SPIN", "auto", "idle polls before a waiting rank yields its core; auto = 2000, "
      "or 0 when a host has more ranks than cores", LNG(spin), NULL },
    { "WEFT_ROOT_CHECK", "auto", "1: broadcast and reduce spend one extra hop (none with 2 "
      "ranks) so that ranks that disagree on the root all fail in that call; 0: a rank whose "
      "part was consistent may finish, and fails on a later call that waits on the others; "
      "auto = 1 for calls of 64K and more, 0 below (where the hop is most of a call's time)",
      LNG(root_check), "auto|0|1" },
    { "WEFT_PROGRESS_THREAD", "1", "1: nonblocking collectives progress in the background, "
      "in a thread per communicator started by its first nonblocking call (it sleeps while "
      "nothing is queued); 0: they progress only inside weft calls (weft_test, weft_wait, "
      "later calls)", LNG(progress_thread), "0|1" },
    { "WEFT_CUDA", "1", "1: in a build with CUDA, device buffers are recognised once a GPU is "
      "visible (the first call that needs to know asks the CUDA runtime, which loads the "
      "driver); 0: weft never calls CUDA: every buffer is host memory, and the stream calls "
      "and the NCCL-API shim report that CUDA is off", LNG(cuda), "0|1" },
    { "WEFT_CUDA_ASYNC", "0", "1: stream calls of several ranks, each its own process on "
      "one host, only enqueue on the caller's stream (which waits on flags in pinned "
      "memory) and a thread per communicator runs them; every buffer must then be "
      "cudaMalloc memory (a host, cudaMallocAsync or cuMem buffer fails the call, found "
      "after it returned); 0: they block the calling thread until complete, and stage "
      "what cannot go GPU to GPU; auto: 1 where no two ranks share a GPU, else 0 (there "
      "the waiting processes' contexts slowed a sharded training step 2.8x: docs/GPU.md); "
      "weft-train --device cuda sets auto when unset. Rank 0's setting counts",
      LNG(cuda_async), "auto|0|1" },
    { "WEFT_CUDA_IPC", "1", "1: stream calls on device buffers whose ranks are all on one "
      "host map each other's GPU memory (CUDA IPC; threads of one process use the pointers "
      "as they are) and reduce and copy with one kernel per rank, no host staging; 0: they "
      "stage through pinned host memory and the host collectives", LNG(cuda_ipc), "0|1" },
    /* topology */
    { "WEFT_TOPO_FILE", "", "hwloc XML to use instead of discovering this machine", STR(topo_file), NULL },
    { "WEFT_BIND", "auto", "where each rank runs: auto = when the launcher left the process "
      "unbound and the host has a core per local rank, bind it to its own block of cores "
      "(topo_place: with GPUs, cores of the NUMA node of its GPU, local rank i on GPU i mod "
      "ngpus, or on the (i mod n)-th of the n GPUs CUDA_VISIBLE_DEVICES shows; without, "
      "NUMA-aware blocks), as Open MPI binds by default; none = leave it; "
      "cores:LIST = local rank i on the i-th comma-separated item of LIST, an OS cpu number or "
      "a range (cores:0,1 puts local rank 0 on cpu 0 and 1 on cpu 1; cores:0-3,4-7 gives "
      "each of two ranks four cpus)",
      offsetof(weft_config_t, bind), sizeof(((weft_config_t *)0)->bind), parse_bind,
      format_string, NULL },
    { "WEFT_HOSTID", "", "which host this process is on, for the ranks' host map (shm "
      "within a host): empty = a hash of the host name, boot id and machine id; any name "
      "(letters, digits, . _ : -) puts the processes that give the same one on one host "
      "(tests, containers sharing /dev/shm)",
      offsetof(weft_config_t, hostid), sizeof(((weft_config_t *)0)->hostid), parse_hostid,
      format_string, NULL },
};
#define NKNOBS (sizeof(knobs) / sizeof(knobs[0]))

static int choice_ok(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n))
            return 1;
        p = bar ? bar + 1 : NULL;
    }
    return 0;
}

static int knob_set(const cfg_knob_t *k, weft_config_t *cfg, const char *v)
{
    if (k->choices && !choice_ok(k->choices, v))
        return -1;
    return k->parse(v, (char *)cfg + k->offset, k->cap);
}

/* cfg_set_default's values, by knob; NULL: the table's */
static char *default_over[NKNOBS];

const char *cfg_defaults(weft_config_t *cfg)
{
    const char *bad = NULL;
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < NKNOBS; i++)
        if (knob_set(&knobs[i], cfg, default_over[i] ? default_over[i] : knobs[i].defval) != 0 &&
            bad == NULL)
            bad = knobs[i].name;    /* a table error: test_algos checks there is none */
    return bad;
}

weft_status_t cfg_set_default(const char *name, const char *value)
{
    for (size_t i = 0; name && value && i < NKNOBS; i++) {
        if (strcmp(knobs[i].name, name) != 0)
            continue;
        weft_config_t probe;
        cfg_defaults(&probe);
        if (knob_set(&knobs[i], &probe, value) != 0)
            return weft_error(WEFT_ERR_INVALID_ARG, "config: %s='%s' is not valid", name,
                              value);
        char *v = strdup(value);
        if (v == NULL)
            return weft_error(WEFT_ERR_NO_MEMORY, "config: out of memory");
        free(default_over[i]);
        default_over[i] = v;
        return WEFT_OK;
    }
    return weft_error(WEFT_ERR_INVALID_ARG, "config: no knob '%s'", name ? name : "(null)");
}

weft_status_t cfg_load(weft_config_t *out)
{
    weft_config_t cfg;
    cfg_defaults(&cfg);
    for (size_t i = 0; i < NKNOBS; i++) {
        const char *v = getenv(knobs[i].name);
        if (strcmp(knobs[i].name, "WEFT_BUFFSIZE") == 0)
            cfg.buffsize_given = (v != NULL && *v != '\0') || default_over[i] != NULL;
        if (v == NULL || *v == '\0')
            continue;
        if (knob_set(&knobs[i], &cfg, v) != 0)
            return weft_error(WEFT_ERR_INVALID_ARG, "config: %s='%s' is not valid (%s%s%s)",
                              knobs[i].name, v, knobs[i].doc,
                              knobs[i].choices ? "; one of " : "",
                              knobs[i].choices ? knobs[i].choices : "");
    }
    if (cfg.ib_timeout < 1 || cfg.ib_timeout > 31 || cfg.ib_gid_index < -1 ||
        cfg.ib_gid_index > 255)
        return weft_error(WEFT_ERR_INVALID_ARG, "config: WEFT_IB_TIMEOUT=%ld must be in "
                          "[1, 31], WEFT_IB_GID_INDEX=%ld in [-1, 255]", cfg.ib_timeout,
                          cfg.ib_gid_index);
    if (cfg.ib_sl < 0 || cfg.ib_sl > 15 || cfg.ib_tc < 0 || cfg.ib_tc > 255 ||
        cfg.ib_pkey < 0 || cfg.ib_pkey > 65535)
        return weft_error(WEFT_ERR_INVALID_ARG, "config: WEFT_IB_SL=%ld must be in [0, 15], "
                          "WEFT_IB_TC=%ld in [0, 255], WEFT_IB_PKEY=%ld in [0, 65535]",
                          cfg.ib_sl, cfg.ib_tc, cfg.ib_pkey);
    if (cfg.nchannels < 1 || cfg.nchannels > 64)
        return weft_error(WEFT_ERR_INVALID_ARG, "config: WEFT_NCHANNELS=%ld must be in "
                          "[1, 64]", cfg.nchannels);
    /* 4G: a frame is a quarter at most, and WEFT_CHUNK stops at 1G; a larger value
     * wrapped the shm ring's size to 0 (SIGFPE at the first send) */
    if (cfg.buffsize < 64 * 1024 || cfg.buffsize > ((size_t)4 << 30))
        return weft_error(WEFT_ERR_INVALID_ARG, "config: WEFT_BUFFSIZE=%zu must be in "
                          "[64K, 4G]", cfg.buffsize);
    if (cfg.socket_buffsize != 0 &&
        (cfg.socket_buffsize < 64 * 1024 || cfg.socket_buffsize > ((size_t)1 << 30)))
        return weft_error(WEFT_ERR_INVALID_ARG, "config: WEFT_SOCKET_BUFFSIZE=%zu must be 0 "
                          "or in [64K, 1G]", cfg.socket_buffsize);
    if (cfg.tcp_dead_s != 0 && (cfg.tcp_dead_s < 2 || cfg.tcp_dead_s > 3600))
        return weft_error(WEFT_ERR_INVALID_ARG, "config: WEFT_TCP_DEAD=%ld must be 0 or in "
                          "[2, 3600] seconds", cfg.tcp_dead_s);
    /* a ring holds 4 frames at least (the tuner's cap, tuner.c): a larger WEFT_CHUNK
     * was accepted up to WEFT_BUFFSIZE/2 and then cut to /4 without a word */
    size_t chunk_max = cfg.buffsize / 4 < CFG_CHUNK_MAX ? cfg.buffsize / 4 : CFG_CHUNK_MAX;
    if (cfg.chunk != 0 && (cfg.chunk < 256 || cfg.chunk > chunk_max))
        return weft_error(WEFT_ERR_INVALID_ARG, "config: WEFT_CHUNK=%zu must be 0 or in "
                          "[256, %zu] (WEFT_BUFFSIZE/4, and 1G at most)", cfg.chunk, chunk_max);
    *out = cfg;
    return WEFT_OK;
}

/* FNV-1a, 32 bits: the value as cfg_print shows it, so "auto" and "-1", or "1K" and
 * "1024", hash alike. */
static uint32_t hash_str(const char *v)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

/* The knobs every rank must set alike (config.h), in the order of cfg_agree_t. */
static const char *const agree_knobs[] = {
    "WEFT_ALGO", "WEFT_NCHANNELS", "WEFT_DIRECT_MAX", "WEFT_CMA_MIN", "WEFT_REG_MIN",
    "WEFT_ROOT_CHECK", "WEFT_CUDA_IPC",
};
#define NAGREE (int)(sizeof(agree_knobs) / sizeof(agree_knobs[0]))
_Static_assert(sizeof(agree_knobs) / sizeof(agree_knobs[0]) <= CFG_AGREE_MAX,
               "cfg_agree_t has room for every knob that must agree");

static const cfg_knob_t *knob_named(const char *name)
{
    for (size_t i = 0; i < NKNOBS; i++)
        if (!strcmp(knobs[i].name, name))
            return &knobs[i];
    return NULL;
}

const char *cfg_agree_name(int which, const weft_config_t *cfg, char *val, size_t cap)
{
    const cfg_knob_t *k = which >= 0 && which < NAGREE ? knob_named(agree_knobs[which]) : NULL;
    if (k == NULL) {    /* not a knob of the table: test_algos checks there is none */
        snprintf(val, cap, "?");
        return NULL;
    }
    k->format((const char *)cfg + k->offset, val, cap);
    return k->name;
}

int cfg_agree_hash(const weft_config_t *cfg, cfg_agree_t *out)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < NAGREE; i++) {
        char val[300];
        out->h[i] = cfg_agree_name(i, cfg, val, sizeof(val)) ? hash_str(val) : 0;
    }
    return NAGREE;
}

void cfg_print(FILE *out, const weft_config_t *cfg)
{
    fprintf(out, "%-20s %-10s %-10s %s\n", "# name", "value", "default", "meaning");
    for (size_t i = 0; i < NKNOBS; i++) {
        char val[300];
        knobs[i].format((const char *)cfg + knobs[i].offset, val, sizeof(val));
        fprintf(out, "%-20s %-10s %-10s %s\n", knobs[i].name, val[0] ? val : "\"\"",
                knobs[i].defval[0] ? knobs[i].defval : "\"\"", knobs[i].doc);
    }
}
