/*
 * tp_ib.c - the InfiniBand verbs transport: weft moving frames between hosts by RDMA
 * itself (RC queue pairs), through the verbs table of ib_verbs.h (rdma-core, or weft's
 * emulator in tests).
 *
 * Setup. local_setup opens the chosen device and port (WEFT_IB_HCA, NCCL's syntax) and a
 * TCP listener; the address blob carries the listener, LID, GID and the doorbell (below).
 * connect meets the peer on that socket (authenticated like tcp: rank i connects to
 * j > i), and both send their connection data (QPNs, PSN, LID/GID, MTU, the control
 * block's and the eager ring's address and rkey, the slot size); each moves its QPs to
 * RTR and posts its receives, says so, and after the peer's "ready" moves to RTS. The
 * socket is then closed: everything afterwards is verbs.
 *
 * Two rings per direction, eager and large. A connection comes with an eager ring and
 * staging of IB_SLOTS slots of IB_EAGER_SLOT bytes (32K in all) and its control block;
 * a frame that fits an eager slot (barriers, small collectives, a posted buffer's
 * headers) goes there and never waits for the receiver, as an MPI eager send. The large
 * ring and staging (IB_SLOTS slots of a header plus the largest chunk: 8 MB apiece at the
 * default WEFT_BUFFSIZE) are made only for the peers that carry larger frames, as NCCL
 * connects only the peers its rings and trees use: with every peer's made at init, a
 * rank of a 512-host job would pin 64 GB. Large staging is made at the first such send.
 * The large ring is the receiver's: a sender with a large frame and no ring to write it
 * into sets its byte in the receiver's doorbell (a registered byte per rank, in the
 * address blob) once by an RDMA write and waits; the receiver's context progress, which
 * runs in every engine pass of any call on this communicator, makes the ring and
 * RDMA-writes where it is into the sender's control block (a seqlock box, written once).
 * So a large send waits, the first time, until its receiver is in a call of this
 * communicator (a rendezvous, as MPI's for large messages; a send to a peer that is
 * itself blocked in a send completes). Frame k takes slot k % IB_SLOTS of whichever
 * ring, credits count frames of both, and the immediate says which ring.
 *
 * Data. Each direction has rings of IB_SLOTS slots in the receiver's memory (above), a
 * large slot one frame (header + up to WEFT_BUFFSIZE/4 bytes, the largest chunk). The
 * sender copies a frame to its own registered staging slot and RDMA-writes it to the
 * peer's slot with immediate data (the frame's sequence number); frames are striped
 * across WEFT_IB_QPS_PER_CONN QPs (frame k on QP k % n), and the receiver delivers them
 * in sequence order. A frame larger than the peer's slot is a mismatch
 * (WEFT_ERR_MISMATCH naming both sides), never an overrun. Credits: the receiver
 * RDMA-writes the count of slots it has released into the sender's control block; the
 * sender writes slot k only while k - released < IB_SLOTS. Sends are signaled
 * selectively (every IB_SIG_EVERY WRs per QP), so the send queue drains; the staging
 * slot of frame k is reused only at frame k + IB_SLOTS, which the credit says the peer
 * has received (so the HCA has read it).
 *
 * Posted receive buffers (zero copy, WEFT_IB_ZCOPY). When the engine's next frames from
 * a peer are a plain receive into host memory (transport.h, recv_post), the receiver may
 * post that buffer: it RDMA-writes {first frame, address, rkey, size} into the sender's
 * FIFO box in the control block. A sender about to send exactly that frame adopts the
 * post and RDMA-writes the payloads of that frame and the next ones straight into the
 * buffer, one after the other, each followed on the same QP by the header alone, as a
 * write-with-immediate into the ring slot whose immediate carries IB_IMM_ZC; the
 * receiver hands the engine the payload where it landed, and copies nothing. A frame
 * that does not fit what is left of the post goes through the ring (where the engine
 * finds the mismatch): a post is never overrun. A post the sender did not see in time
 * is stale once its first frame arrives through the ring. One post per direction at a
 * time: it ends when its bytes have arrived or its first frame came through the ring;
 * a call that fails withdraws it (a revoking box, and the registration dropped: a late
 * write then fails at the sender as a remote access error, reported as the receiver
 * having left the call).
 *
 * Payloads read where they lie (send_kept). A frame of a send step that no step of the
 * call overwrites (schedule.h, keep), in weft_mem_alloc memory, is not copied to staging:
 * its write gathers the header from staging and the payload under the region's cached
 * registration (into a posted buffer: the payload's write reads it in place). That write
 * is signaled, and flush, which the engine runs before the call ends, waits until a
 * successful completion on its QP covers it.
 *
 * Peer states travel as RDMA writes into the peer's control block ({seq, state, seq}),
 * the latest winning. A lost peer is an error completion: RETRY_EXC_ERR after the QP's
 * timeout and retries (WEFT_IB_TIMEOUT, WEFT_IB_RETRY_CNT); check_alive and peer_state
 * keep one zero-byte RDMA write in flight as a probe, so a peer that died while this rank
 * only waits is still found. abort moves the QPs to ERR: the peer's next write fails.
 * Every error completion is mapped to a weft status with ibv_wc_status_str and the peer.
 *
 * Invariants: frames arrive in order per QP and are delivered in sequence order; arrived
 * frames are delivered before an error is reported, so a peer's last frames are read.
 */
#define _GNU_SOURCE     /* sched_getcpu */
#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm_int.h"
#include "auth.h"
#include "check.h"
#include "sock.h"
#include "status.h"
#include "topo.h"
#include "util.h"
#include "ib_verbs.h"

extern const tp_ops_t tp_ib_ops;

#define IB_ADDR_MAGIC 0x77696232u   /* "wib2": the eager ring and the doorbell (2026-11-28) */
#define IB_MAX_QPS 4
#define IB_SLOTS 8                  /* frames in flight per direction */
#define IB_SQ_DEPTH 64              /* send WRs per QP */
#define IB_SIG_EVERY 16             /* a signaled WR every this many per QP */
#define IB_RQ_DEPTH (IB_SLOTS + 4)
#define WR_PROBE 1ull               /* wr_id kinds (low bits) */
#define WR_DATA 2ull
#define WR_RMA 3ull
#define WR_FIFO 4ull                /* a receive buffer posted into the peer's FIFO box */
#define WR_ZC 5ull                  /* a payload written into the peer's posted buffer */
#define WR_RECV 0x80ull             /* a receive (post_recvs): an error completion's opcode
                                       is undefined, so its wr_id tells it from a send's */
#define IB_IMM_ZC 0x80000000u       /* immediate: the payload went to the posted buffer */
#define IB_IMM_EAGER 0x40000000u    /* immediate: the frame (a ZC frame's header) is in
                                       the eager ring */
#define IB_IMM_SEQ 0x3fffffffu      /* immediate: the frame's number (mod 2^30) */
#define IB_EAGER_SLOT 2048          /* bytes of an eager slot: a header and up to 2008
                                       payload bytes (see the top) */
#define ARR_IN 1                    /* arrived[]: a frame is in slot */
#define ARR_ZC 2                    /* its payload is in the posted buffer */
#define ARR_EAGER 4                 /* its header (and payload) in the eager ring */
#define IB_RKEY_MAGIC 0x77696b31u   /* "wik1" */
#define IB_ACCESS_ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE)
/* not a verbs flag: with it, reg_pages may register for remote reads alone where the
 * pages cannot be pinned for writing (ib_mem_reg: peers only read a call's buffers) */
#define IB_ACCESS_READ_OK (1 << 30)

/* The address blob: where to meet this rank, and its port. */
typedef struct ib_addr {
    uint32_t magic;
    uint16_t lid;
    uint8_t port, pad;
    uint8_t gid[16];
    struct sockaddr_in sock;
    char dev[32];
    uint64_t bell_addr;         /* the doorbell (ib_ctx_t.bell): byte r is rank r's */
    uint32_t bell_rkey, pad2;
} ib_addr_t;

/* What the two ends of a connection send each other on the setup socket. */
typedef struct ib_conn_info {
    uint32_t magic;
    uint32_t nqp;
    uint32_t qpn[IB_MAX_QPS];
    uint32_t psn;
    uint32_t mtu;
    uint16_t lid;
    uint8_t gid[16];
    uint8_t pad[2];
    uint64_t ctrl_addr, eager_addr;
    uint32_t ctrl_rkey, eager_rkey;
    uint64_t slot_bytes;
    uint32_t nslots, rank;
} ib_conn_info_t;

/* A peer state as written into the control block: valid when seq == seq2. */
typedef struct ib_state_box {
    uint64_t seq;
    tp_state_t st;
    uint64_t seq2;
} ib_state_box_t;

/* A receive buffer the peer posted: frames from `first` on may be written into
 * [addr, addr + len) in order. Valid when seq == seq2; len 0 revokes. */
typedef struct ib_fifo_box {
    uint64_t seq;
    uint64_t first;
    uint64_t addr;
    uint64_t len;
    uint32_t rkey, pad;
    uint64_t seq2;
} ib_fifo_box_t;

/* Where the large receive ring of a direction is, once its receiver made it (or that
 * it could not: refused, addr 0): written once, by the receiver into the sender's
 * control block. Valid when seq == seq2 != 0. */
typedef struct ib_ring_box {
    uint64_t seq;
    uint64_t addr;
    uint32_t rkey, refused;
    uint64_t seq2;
} ib_ring_box_t;

/* Registered per endpoint: the peer writes rx_*, this rank's RDMA writes read tx_*. */
typedef struct ib_ctrl {
    volatile uint64_t rx_credits;   /* slots the peer has released (written by the peer) */
    uint64_t pad0[7];
    ib_state_box_t rx_state;        /* the peer's latest state (written by the peer) */
    uint64_t tx_credits;            /* source of our credit writes */
    ib_state_box_t tx_state[2];     /* sources of our state writes, used in turn: a box
                                       is refilled only once its write retired, so the
                                       HCA never reads one half old, half new */
    ib_fifo_box_t rx_fifo;          /* the peer's posted receive buffer (written by it) */
    ib_fifo_box_t tx_fifo[2];       /* sources of our posts, used in turn */
    ib_ring_box_t rx_ring;          /* the peer's ring for our frames (written by it) */
    ib_ring_box_t tx_ring;          /* source of our ring's announcement */
    uint8_t tx_bell;                /* source of our doorbell write (1) */
} ib_ctrl_t;

/* A cached registration of a whole weft_mem_alloc region (ib_ctx_t.regs). */
typedef struct ib_reg {
    struct ib_reg *next;
    uint32_t serial;                /* the region's (mem.h: never reused in a process) */
    struct ibv_mr *mr;
    int refs;                       /* handles out now (mem_reg, a transfer's buffer) */
    int dead;                       /* weft freed the region: goes with the last handle */
} ib_reg_t;

/* A registration handed out: the cache's (reg) or one of its own (mr only). */
typedef struct ib_mem {
    struct ibv_mr *mr;
    ib_reg_t *reg;
} ib_mem_t;

typedef struct ib_ctx {
    const ib_verbs_t *v;
    struct ibv_context *dev;
    struct ibv_pd *pd;
    uint8_t port;
    int gid_index;
    struct ibv_port_attr pattr;
    union ibv_gid gid;
    char devname[32];
    int lfd;
    struct ib_ep **pending;         /* [nranks] accepted and connected, not yet claimed */
    /* the doorbell: a registered byte per rank, which that rank's endpoint sets (an RDMA
     * write) when it has a frame for this rank and no ring to write it into; progress
     * makes the ring (see the top) */
    volatile uint8_t *bell;
    size_t bell_bytes;
    struct ibv_mr *bell_mr;
    int peers;                      /* endpoints (the peers ib serves) */
    int rings, stages;              /* endpoints that made their ring, their staging */
    int dirty;                      /* endpoints whose ring's announcement waits for room */
    size_t frame_bytes;             /* registered for them, both kinds */
    pthread_mutex_t reg_lock;       /* regs: weft_mem_free may run on any thread */
    ib_reg_t *regs;
    int hooked;                     /* mem_free_hook_add took ib_region_freed */
    int zcopy;                      /* WEFT_IB_ZCOPY: 0 none, 1 weft_mem_alloc memory, 2 all */
} ib_ctx_t;

/* A posted get or put (tp_rma_t.req): done once its signaled completion is polled. */
typedef struct ib_rma {
    struct ib_rma *next;
    ib_mem_t mem;               /* the local buffer's registration, for this transfer */
    uint32_t n;                 /* its WR's number on QP 0 */
    int done;
} ib_rma_t;

typedef struct ib_ep {
    tp_ep_t base;
    ib_rma_t *rma;                      /* posted transfers, oldest first */
    ib_ctx_t *c;
    int nqp;
    struct ibv_qp *qp[IB_MAX_QPS];
    struct ibv_cq *cq;
    uint32_t sq_posted[IB_MAX_QPS];     /* WRs posted on each QP */
    uint32_t sq_retired[IB_MAX_QPS];    /* of which retired by a polled completion */
    uint32_t sq_ok[IB_MAX_QPS];         /* the last WR a successful completion retired (it
                                           and every WR before it on the QP succeeded) */
    char *ring, *stage;                 /* receive ring, send staging: IB_SLOTS slots,
                                           each made at its first use (NULL before) */
    char *eager, *eager_stage;          /* the same of IB_EAGER_SLOT bytes, made at connect */
    struct ibv_mr *ring_mr, *stage_mr, *ctrl_mr, *eager_mr, *eager_stage_mr;
    ib_ctrl_t *ctrl;
    size_t slot_bytes;
    ib_conn_info_t peer;                /* the peer's connection data */
    uint64_t tx_ring_addr;              /* the peer's ring for our frames (0: not known yet) */
    uint32_t tx_ring_rkey;
    int ring_dirty;                     /* our ring is made (or refused), its announcement
                                           not posted */
    int ring_refused;                   /* this rank could not make its large ring */
    int rang;                           /* our doorbell write to the peer is posted */
    uint64_t bell_addr;                 /* the peer's doorbell byte for this rank */
    uint32_t bell_rkey;
    uint64_t tx_seq;                    /* frames sent */
    uint64_t rx_seq;                    /* frames delivered (released) */
    uint64_t credits_sent;              /* rx_seq as last written to the peer */
    uint8_t arrived[IB_SLOTS];          /* ARR_* bits: arrived, where */
    /* the receive buffer this rank posted to the peer (zero copy; see the top) */
    int post_live;
    uint64_t post_first;                /* its first frame */
    char *post_addr;
    size_t post_len, post_used;         /* bytes; of which landed and delivered */
    ib_mem_t post_mem;
    int cut;                            /* a failed call withdrew a live post whose
                                           registration outlives it: ib_fail_end cuts */
    uint64_t post_seq;                  /* posts made (the FIFO box's seq) */
    uint32_t post_wr[2];                /* QP 0 WR that last wrote from tx_fifo[i] */
    /* the buffer the peer posted to this rank, once adopted */
    uint64_t fifo_seen;                 /* the last box seq looked at */
    int tx_post_active;
    uint64_t tx_post_addr, tx_post_len, tx_post_used;
    uint32_t tx_post_rkey;
    uint64_t zc_rx, zc_tx;              /* frames that went by posted buffers */
    uint32_t kept_wr[IB_MAX_QPS];       /* per QP: the signaled WR that last read one, */
    unsigned kept_busy;                 /* while bit q says it may be in flight */
    uint64_t state_seq, state_seen;
    int state_dirty;                    /* a state waits for send-queue room or a box */
    tp_state_t state_msg;               /* the latest state posted (ib_post_state) */
    uint32_t state_wr[2];               /* the write that last read each tx_state box */
    tp_state_t st_rx;
    int probing;                        /* a probe write is in flight */
    int closing;                        /* ib_close_start ran: close_mark[0..closed) */
    int close_marked;                   /* QPs whose closing probe is posted */
    uint32_t close_mark[IB_MAX_QPS];    /* sq_posted[q] at that probe */
    uint64_t close_end;                 /* when the close stops waiting */
    weft_status_t err;                  /* the first failure; later calls return it */
    int aborted;
    int quiet;                          /* in peer_state: a failure is the caller's to report */
    int rank;                           /* this rank, for messages */
} ib_ep_t;

/* ---- device choice ---- */

/* Whether the kernel types GID i of name:port as RoCE v2 (1), as something else (0), or
 * does not say (-1: no sysfs entry, an older kernel or the emulator). */
static int gid_is_v2(const char *name, uint8_t port, int i)
{
    char path[256], type[32] = "";
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/gid_attrs/types/%d",
             name, (unsigned)port, i);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int got = fgets(type, sizeof(type), f) != NULL;
    fclose(f);
    return got ? strstr(type, "v2") != NULL : -1;
}

/* GID for WEFT_IB_GID_INDEX=auto on Ethernet: an IPv4-mapped GID (::ffff:a.b.c.d) that
 * the kernel types RoCE v2 (mlx5 lists each address twice, v1 first), else the first
 * IPv4-mapped one (a kernel that does not type them); InfiniBand and the emulator:
 * index 0. */
static int pick_gid(const ib_verbs_t *v, struct ibv_context *d, const char *name,
                    uint8_t port, const struct ibv_port_attr *pa, union ibv_gid *gid)
{
    static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    int first = -1;
    union ibv_gid first_gid;
    if (pa->link_layer == IBV_LINK_LAYER_ETHERNET)
        for (int i = 0; i < pa->gid_tbl_len && i < 256; i++) {
            union ibv_gid g;
            if (v->query_gid(d, port, i, &g) != 0 || memcmp(g.raw, v4, sizeof(v4)) != 0)
                continue;
            if (gid_is_v2(name, port, i) == 1) {
                *gid = g;
                return i;
            }
            if (first < 0) {
                first = i;
                first_gid = g;
            }
        }
    if (first >= 0) {
        *gid = first_gid;
        return first;
    }
    return v->query_gid(d, port, 0, gid) == 0 ? 0 : -1;
}

/* A small sysfs file's first integer; -1 when absent. */
static int read_int(const char *path)
{
    FILE *f = fopen(path, "r");
    int x = -1;
    if (f) {
        if (fscanf(f, "%d", &x) != 1)
            x = -1;
        fclose(f);
    }
    return x;
}

/* The NUMA node of the core this process runs on (bound by WEFT_BIND or the launcher),
 * -1 unknown. */
static int my_numa(void)
{
    int cpu = sched_getcpu();
    char path[96];
    for (int node = 0; cpu >= 0 && node < 64; node++) {
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/node%d", cpu, node);
        if (access(path, F_OK) == 0)
            return node;
    }
    return -1;
}

/* Opens dev's first active port that WEFT_IB_HCA allows (only `port`, when not 0) and
 * has a usable GID, in place of the one c holds: 1 when it did. */
static int open_device_port(weft_comm_t *comm, ib_ctx_t *c, struct ibv_device *dev,
                            const topo_nic_filter_t *hca, int only)
{
    const ib_verbs_t *v = c->v;
    const char *name = v->get_device_name(dev);
    /* RC queue pairs set up by hand need an InfiniBand-transport device (InfiniBand or
     * RoCE): iWARP connects its QPs through rdma_cm, and EFA has no RC at all */
    if (dev->transport_type != IBV_TRANSPORT_IB) {
        LOG_INFO(LOG_NET, "ib: %s skipped: its transport is %s, not InfiniBand or RoCE "
                 "(the ib transport needs RC queue pairs connected by hand)", name,
                 dev->transport_type == IBV_TRANSPORT_IWARP ? "iWARP" : "another one");
        return 0;
    }
    struct ibv_context *d = v->open_device(dev);
    if (d == NULL)
        return 0;
    /* ports are numbered from 1 with no gap: the first that does not answer ends them */
    struct ibv_port_attr pa;
    for (uint8_t port = 1; port != 0 && v->query_port(d, port, &pa) == 0; port++) {
        union ibv_gid gid;
        if ((only && port != only) || pa.state != IBV_PORT_ACTIVE ||
            (pa.link_layer != IBV_LINK_LAYER_INFINIBAND &&
             pa.link_layer != IBV_LINK_LAYER_ETHERNET) ||
            !topo_nic_filter_allows_port(hca, name, port))
            continue;
        int gi = (int)comm->cfg.ib_gid_index;
        if (gi < 0)
            gi = pick_gid(v, d, name, port, &pa, &gid);
        else if (v->query_gid(d, port, gi, &gid) != 0)
            gi = -1;
        if (gi < 0)
            continue;
        if (c->dev)
            v->close_device(c->dev);
        c->gid = gid;
        c->dev = d;
        c->port = port;
        c->pattr = pa;
        c->gid_index = gi;
        snprintf(c->devname, sizeof(c->devname), "%s", name);
        return 1;
    }
    v->close_device(d);
    return 0;
}

/* The HCA topo/ places this process on (topo_nic_for_rank: nearest its GPU, else its
 * cores; ties round-robin over the local ranks), into name (and its port), when there
 * are several devices to choose from, the launcher says which local rank this is, and
 * the topology (WEFT_TOPO_FILE's, else hwloc's view of this machine) knows the HCAs.
 * Anything missing leaves name empty: the NUMA rule below then decides. Worked out once
 * per process (hwloc's I/O discovery is slow; every communicator, split ones too, asks):
 * the launcher's variables and the knobs it reads do not change. */
static void topo_hca_once(const weft_comm_t *comm, int ndev, char *name, size_t cap,
                          int *port, char *why, size_t why_cap);

static void topo_hca(const weft_comm_t *comm, int ndev, char *name, size_t cap, int *port,
                     char *why, size_t why_cap)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int done;
    static char c_name[64], c_why[160];
    static int c_port;
    pthread_mutex_lock(&lock);
    if (!done && ndev >= 2) {
        topo_hca_once(comm, ndev, c_name, sizeof(c_name), &c_port, c_why, sizeof(c_why));
        done = 1;
    }
    snprintf(name, cap, "%s", ndev >= 2 ? c_name : "");
    snprintf(why, why_cap, "%s", ndev >= 2 ? c_why : "");
    *port = c_port;
    pthread_mutex_unlock(&lock);
}

static void topo_hca_once(const weft_comm_t *comm, int ndev, char *name, size_t cap,
                          int *port, char *why, size_t why_cap)
{
    name[0] = '\0';
    launch_env_t env;
    topo_t *t = NULL;
    topo_nic_choice_t ch;
    if (ndev < 2)
        return;
    weft_error_saved_t before;
    weft_error_save(&before);
    if (env_detect(&env) != WEFT_OK || env.local_rank < 0 || env.local_size < 1 ||
        env.local_rank >= env.local_size) {
        weft_error_restore(&before);
        LOG_DEBUG(LOG_NET, "ib: no local rank from the launcher: HCA by NUMA node");
        return;
    }
    if (topo_load(comm->cfg.topo_file[0] ? comm->cfg.topo_file : NULL, &t) != WEFT_OK) {
        LOG_DEBUG(LOG_NET, "ib: no topology (%s): HCA by NUMA node", weft_last_error());
        weft_error_restore(&before);
        return;
    }
    /* where the launcher bound this process (weft binds later, and keeps a launcher's
     * binding): this machine's topology only, a file's cpus are another machine's */
    int bound = -1;
    cpu_set_t cs;
    if (!topo_is_xml(t) && sched_getaffinity(0, sizeof(cs), &cs) == 0) {   /* nor HWLOC_XMLFILE's */
        int cpus[CPU_SETSIZE], n = 0;
        for (int i = 0; i < CPU_SETSIZE; i++)
            if (CPU_ISSET(i, &cs))
                cpus[n++] = i;
        bound = topo_cpus_numa(t, cpus, n);
    }
    if (topo_nic_for_bound_rank(t, env.local_rank, env.local_size, TOPO_NIC_IB,
                                comm->cfg.ib_hca, bound, &ch) != WEFT_OK || ch.nic < 0) {
        LOG_DEBUG(LOG_NET, "ib: the topology chooses no HCA (%s): HCA by NUMA node",
                  weft_last_error());
        weft_error_restore(&before);
        topo_free(t);
        return;
    }
    snprintf(name, cap, "%s", ch.name);
    *port = ch.port;
    topo_place_t p;
    p.gpu = -1;
    int gpu_numa = topo_place(t, env.local_rank, env.local_size, &p) == WEFT_OK && p.gpu >= 0 &&
                   topo_gpu(t, p.gpu) ? topo_gpu(t, p.gpu)->numa : -1;
    weft_error_restore(&before);
    const topo_nic_t *hca = topo_nic(t, ch.nic);
    snprintf(why, why_cap, ", nearest local rank %d of %d by the topology (%s, 1 of %d%s)",
             env.local_rank, env.local_size, topo_dist_name(ch.dist), ch.tied,
             bound >= 0 && p.gpu < 0 ? ", the launcher's NUMA binding" : "");
    if (bound >= 0 && gpu_numa >= 0 && bound != gpu_numa)
        LOG_WARN(LOG_NET, "ib: local rank %d is bound to NUMA node %d by its launcher, its "
                 "GPU to node %d (HCA %s: node %d): host copies cross the sockets (srun "
                 "--cpu-bind=none or -m block:block, mpirun --bind-to none or --map-by "
                 "numa, and weft binds it near its GPU)", env.local_rank, bound, gpu_numa,
                 ch.name, hca ? hca->numa : -1);
    topo_free(t);
}

/* Opens the active port WEFT_IB_HCA allows on the HCA the topology places this rank on
 * (topo_hca), else on the one nearest this process's cores (the device's NUMA node, from
 * sysfs), else the first; quiet: finding none is no error. */
static weft_status_t open_port(weft_comm_t *comm, ib_ctx_t *c, int quiet)
{
    weft_status_t (*err)(weft_status_t, const char *, ...) =
        quiet ? weft_error_quiet : weft_error;
    const ib_verbs_t *v = c->v;
    topo_nic_filter_t hca;          /* WEFT_IB_HCA: bad syntax is an error, even in auto */
    RETURN_IF_ERR(topo_nic_filter_parse(comm->cfg.ib_hca, "WEFT_IB_HCA", &hca));
    int n = 0;
    struct ibv_device **list = v->get_device_list(&n);
    if (list == NULL || n == 0) {
        if (list)
            v->free_device_list(list);
        return err(WEFT_ERR_UNSUPPORTED, "ib: %s finds no RDMA device", v->provider);
    }
    char pick[64], why[160] = "";
    int pick_port = 0;
    topo_hca(comm, n, pick, sizeof(pick), &pick_port, why, sizeof(why));
    for (int i = 0; pick[0] && i < n && !c->dev; i++)
        if (!strcmp(v->get_device_name(list[i]), pick))
            open_device_port(comm, c, list[i], &hca, pick_port);
    if (!c->dev)
        why[0] = '\0';
    int here = my_numa(), near = 0;
    for (int i = 0; i < n && !near && !why[0]; i++) {
        const char *name = v->get_device_name(list[i]);
        char path[128];
        snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/numa_node", name);
        int is_near = here >= 0 && read_int(path) == here;
        if (c->dev != NULL && !is_near)
            continue;           /* one is taken already, and this one is no nearer */
        if (open_device_port(comm, c, list[i], &hca, 0))
            near = is_near;
    }
    if (near)
        snprintf(why, sizeof(why), ", on this NUMA node");
    char other[128] = "";           /* devices of another transport, for the error */
    for (int i = 0; c->dev == NULL && i < n; i++)
        if (list[i]->transport_type != IBV_TRANSPORT_IB)
            snprintf(other + strlen(other), sizeof(other) - strlen(other), "%s%s",
                     other[0] ? ", " : "; not InfiniBand or RoCE: ",
                     v->get_device_name(list[i]));
    v->free_device_list(list);
    if (c->dev == NULL)
        return err(WEFT_ERR_UNSUPPORTED, "ib: no active port among %d device(s) of %s "
                   "passes WEFT_IB_HCA='%s'%s", n, v->provider, comm->cfg.ib_hca, other);
    c->pd = v->alloc_pd(c->dev);
    if (c->pd == NULL) {
        v->close_device(c->dev);
        c->dev = NULL;
        return err(WEFT_ERR_SYSTEM, "ib: ibv_alloc_pd on %s: %m", c->devname);
    }
    LOG_INFO(LOG_NET, "ib: %s port %u (%s, lid %u, gid index %d%s) via %s; service level "
             "%ld, traffic class %ld, pkey index %ld", c->devname, c->port,
             c->pattr.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
             c->pattr.lid, c->gid_index, why, v->provider, comm->cfg.ib_sl, comm->cfg.ib_tc,
             comm->cfg.ib_pkey);
    return WEFT_OK;
}

/* ---- setup ---- */

static int ib_addr_of(const peer_info_t *pi, ib_addr_t *a)
{
    const tp_addr_t *t = &pi->addr[tp_slot(&tp_ib_ops)];
    if (t->len != sizeof(*a))
        return 0;
    memcpy(a, t->blob, sizeof(*a));
    return a->magic == IB_ADDR_MAGIC;
}

/* Both ends have a port of the same kind (a RoCE port has no LID); on Ethernet any GID
 * routes, on InfiniBand the peer must share the subnet prefix. The same answer on both
 * sides (each decides alone: a RoCE rank that said yes to an InfiniBand one that said
 * no waited for a handshake that never came). */
static int ib_can_connect(const weft_comm_t *comm, const peer_info_t *self,
                          const peer_info_t *peer)
{
    ib_addr_t a, b;
    if (!ib_addr_of(self, &a) || !ib_addr_of(peer, &b) || (a.lid == 0) != (b.lid == 0))
        return 0;
    return a.lid == 0 || !memcmp(a.gid, b.gid, 8);
}

static void ib_local_cleanup(weft_comm_t *comm);
static void ep_free(struct ib_ep *e);
static void ib_region_freed(void *ctx, const mem_region_t *r);
static void reg_give(ib_ctx_t *c, ib_mem_t *m);
static int in_region(const void *ptr, size_t len, mem_region_t *r);
static weft_status_t reg_take(ib_ctx_t *c, const void *ptr, size_t len, int access,
                              ib_mem_t *m);

/* The doorbell: a byte per rank, registered for the peers' writes. */
static weft_status_t bell_create(weft_comm_t *comm, ib_ctx_t *c)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *b;
    c->bell_bytes = ((size_t)comm->nranks + page - 1) & ~(page - 1);
    if (posix_memalign(&b, page, c->bell_bytes) != 0)
        return weft_error(WEFT_ERR_NO_MEMORY, "ib: out of memory");
    memset(b, 0, c->bell_bytes);
    c->bell = b;
    c->bell_mr = c->v->reg_mr(c->pd, b, c->bell_bytes,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (c->bell_mr == NULL)
        return weft_error(WEFT_ERR_SYSTEM, "ib: ibv_reg_mr on %s: %m", c->devname);
    return WEFT_OK;
}

static weft_status_t ib_local_setup(weft_comm_t *comm, tp_addr_t *self)
{
    int forced = !strcmp(comm->cfg.transport, tp_ib_ops.name);
    const char *why = NULL;
    const ib_verbs_t *v = ib_verbs_load(&why);
    if (v == NULL) {
        if (forced)
            return weft_error(WEFT_ERR_UNSUPPORTED, "ib: WEFT_TRANSPORT=ib, but %s", why);
        LOG_DEBUG(LOG_NET, "ib: off: %s", why);
        return WEFT_OK;     /* publishes no address: no peer is reached by ib */
    }
    ib_ctx_t *c = calloc(1, sizeof(*c));
    struct ib_ep **pending = calloc((size_t)comm->nranks, sizeof(*pending));
    if (c == NULL || pending == NULL) {
        free(c);
        free(pending);
        return weft_error(WEFT_ERR_NO_MEMORY, "ib: out of memory");
    }
    static atomic_int fork_warned;
    if (ib_verbs_fork_failed() && !atomic_exchange(&fork_warned, 1))
        LOG_WARN(LOG_NET, "ib: ibv_fork_init failed (memory registered before weft loaded "
                 "rdma-core?): with rdma-core before v35 or a kernel before 5.13, a fork() "
                 "after init (a data loader's workers) can corrupt what ib sends");
    c->v = v;
    c->lfd = -1;
    c->zcopy = !strcmp(comm->cfg.ib_zcopy, "all") ? 2 : !strcmp(comm->cfg.ib_zcopy, "0") ? 0 : 1;
    c->pending = pending;
    pthread_mutex_init(&c->reg_lock, NULL);
    tp_set_ctx(comm, &tp_ib_ops, c);
    weft_error_saved_t before;
    weft_error_save(&before);
    weft_status_t st = open_port(comm, c, !forced);
    if (st != WEFT_OK && !forced) {     /* auto: a machine without a device has no ib */
        LOG_DEBUG(LOG_NET, "ib: off: %s", weft_last_error());
        weft_error_restore(&before);
        ib_local_cleanup(comm);
        return WEFT_OK;
    }
    struct sockaddr_in sa;
    if (st == WEFT_OK)
        st = comm_local_addr(comm, &sa);
    if (st == WEFT_OK) {
        sa.sin_port = 0;
        st = sock_listen(&sa, comm->nranks, &c->lfd);
    }
    if (st == WEFT_OK)
        st = bell_create(comm, c);
    if (st != WEFT_OK) {
        ib_local_cleanup(comm);
        return st;
    }
    if (mem_free_hook_add(ib_region_freed, c) != 0) {
        ib_local_cleanup(comm);
        return weft_error(WEFT_ERR_NO_MEMORY, "ib: out of memory");
    }
    c->hooked = 1;
    ib_addr_t a = { .magic = IB_ADDR_MAGIC, .lid = c->pattr.lid, .port = c->port, .sock = sa,
                    .bell_addr = (uintptr_t)c->bell, .bell_rkey = c->bell_mr->rkey };
    memcpy(a.gid, c->gid.raw, sizeof(a.gid));
    snprintf(a.dev, sizeof(a.dev), "%s", c->devname);
    _Static_assert(sizeof(a) <= TP_ADDR_BYTES, "ib address fits the blob");
    memcpy(self->blob, &a, sizeof(a));
    self->len = sizeof(a);
    return WEFT_OK;
}

static void ib_local_cleanup(weft_comm_t *comm)
{
    ib_ctx_t *c = tp_ctx(comm, &tp_ib_ops);
    if (c == NULL)
        return;
    if (c->hooked)
        mem_free_hook_remove(ib_region_freed, c);
    for (int i = 0; i < comm->nranks; i++)
        if (c->pending[i])
            ep_free(c->pending[i]);
    while (c->regs) {   /* the endpoints, and with them every transfer, are gone */
        ib_reg_t *g = c->regs;
        c->regs = g->next;
        c->v->dereg_mr(g->mr);
        free(g);
    }
    pthread_mutex_destroy(&c->reg_lock);
    if (c->rings || c->stages)
        LOG_INFO(LOG_NET, "ib: rank %d: large receive rings for %d of its %d ib peers, large "
                 "send staging for %d (%.1f MiB registered; made at a peer's first frame "
                 "over %d bytes, besides every peer's %d KiB of eager slots)",
                 comm->rank, c->rings, c->peers, c->stages,
                 (double)c->frame_bytes / (1 << 20), IB_EAGER_SLOT,
                 2 * IB_SLOTS * IB_EAGER_SLOT / 1024);
    if (c->bell_mr)
        c->v->dereg_mr(c->bell_mr);
    free((void *)c->bell);
    if (c->lfd >= 0)
        close(c->lfd);
    if (c->pd)
        c->v->dealloc_pd(c->pd);
    if (c->dev)
        c->v->close_device(c->dev);
    free(c->pending);
    free(c);
    tp_set_ctx(comm, &tp_ib_ops, NULL);
}

/* The listener goes once every rank is connected; the device stays (the endpoints'). */
static weft_status_t ib_post_connect(weft_comm_t *comm)
{
    ib_ctx_t *c = tp_ctx(comm, &tp_ib_ops);
    if (c && c->lfd >= 0) {
        close(c->lfd);
        c->lfd = -1;
    }
    return WEFT_OK;
}

static void ep_free(struct ib_ep *e)
{
    const ib_verbs_t *v = e->c->v;
    if (e->post_live)
        reg_give(e->c, &e->post_mem);
    while (e->rma) {
        ib_rma_t *t = e->rma;
        e->rma = t->next;
        reg_give(e->c, &t->mem);
        free(t);
    }
    for (int i = 0; i < e->nqp; i++)
        if (e->qp[i])
            v->destroy_qp(e->qp[i]);
    if (e->cq)
        v->destroy_cq(e->cq);
    if (e->ring_mr)
        v->dereg_mr(e->ring_mr);
    if (e->stage_mr)
        v->dereg_mr(e->stage_mr);
    if (e->ctrl_mr)
        v->dereg_mr(e->ctrl_mr);
    if (e->eager_mr)
        v->dereg_mr(e->eager_mr);
    if (e->eager_stage_mr)
        v->dereg_mr(e->eager_stage_mr);
    free(e->ring);
    free(e->stage);
    free(e->eager);
    free(e->eager_stage);
    free(e->ctrl);
    free(e);
}

static weft_status_t post_recvs(ib_ep_t *e, int q, int n)
{
    for (int i = 0; i < n; i++) {
        struct ibv_recv_wr wr = { .wr_id = WR_RECV, .num_sge = 0 }, *bad;
        if (e->c->v->post_recv(e->qp[q], &wr, &bad) != 0)
            return weft_error(WEFT_ERR_SYSTEM, "ib: ibv_post_recv to rank %d failed",
                              e->base.peer);
    }
    return WEFT_OK;
}

/* IB_SLOTS slots of `slot` bytes, page-aligned and registered with `access`: a receive
 * ring or a send staging area (the eager ones made at connect, the others at their first
 * use: see the top). */
static weft_status_t slots_make(ib_ep_t *e, size_t slot, int access, char **buf_p,
                                struct ibv_mr **mr_p)
{
    /* (a large ring's failure is reported by ring_make, with what it means) */
    weft_status_t (*err)(weft_status_t, const char *, ...) =
        slot != IB_EAGER_SLOT && (access & IBV_ACCESS_REMOTE_WRITE) ? weft_error_quiet
                                                                     : weft_error;
    ib_ctx_t *c = e->c;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t bytes = (IB_SLOTS * slot + page - 1) & ~(page - 1);
    void *b;
    if (posix_memalign(&b, page, bytes) != 0)
        return err(WEFT_ERR_NO_MEMORY, "ib: out of memory for the frames of rank %d (%zu "
                   "bytes)", e->base.peer, bytes);
    struct ibv_mr *mr = c->v->reg_mr(c->pd, b, bytes, access);
    if (mr == NULL) {
        weft_status_t st = err(WEFT_ERR_SYSTEM, "ib: ibv_reg_mr of %zu bytes for the frames "
                               "of rank %d on %s: %m", bytes, e->base.peer, c->devname);
        free(b);
        return st;
    }
    *buf_p = b;
    *mr_p = mr;
    if (slot != IB_EAGER_SLOT)
        c->frame_bytes += bytes;
    return WEFT_OK;
}

/* Creates the endpoint's CQ, QPs (INIT) and control block, and fills *me. */
static weft_status_t ep_create(weft_comm_t *comm, ib_ctx_t *c, ib_ep_t *e, ib_conn_info_t *me)
{
    const ib_verbs_t *v = c->v;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    /* a frame is a chunk at most, and a chunk a quarter of the smallest WEFT_BUFFSIZE
     * (config.c, tuner.c: pick_chunk): slots of half of it pinned twice what was used */
    e->slot_bytes = (sizeof(frame_hdr_t) + WEFT_MIN(comm->cfg.buffsize / 4, CFG_CHUNK_MAX) +
                     63) & ~(size_t)63;
    _Static_assert(sizeof(ib_ctrl_t) <= 4096, "the control block fits a page");
    if (posix_memalign((void **)&e->ctrl, page, page) != 0)
        return weft_error(WEFT_ERR_NO_MEMORY, "ib: out of memory");
    memset(e->ctrl, 0, page);
    int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    e->ctrl_mr = v->reg_mr(c->pd, e->ctrl, page, rw);
    if (!e->ctrl_mr)
        return weft_error(WEFT_ERR_SYSTEM, "ib: ibv_reg_mr on %s: %m", c->devname);
    RETURN_IF_ERR(slots_make(e, IB_EAGER_SLOT, rw, &e->eager, &e->eager_mr));
    RETURN_IF_ERR(slots_make(e, IB_EAGER_SLOT, IBV_ACCESS_LOCAL_WRITE, &e->eager_stage,
                             &e->eager_stage_mr));
    e->cq = v->create_cq(c->dev, e->nqp * (IB_SQ_DEPTH + IB_RQ_DEPTH), NULL, NULL, 0);
    if (e->cq == NULL)
        return weft_error(WEFT_ERR_SYSTEM, "ib: ibv_create_cq on %s: %m", c->devname);
    *me = (ib_conn_info_t){ .magic = IB_ADDR_MAGIC, .nqp = (uint32_t)e->nqp,
                            .psn = (uint32_t)(random() & 0xffffff),
                            .mtu = c->pattr.active_mtu, .lid = c->pattr.lid,
                            .ctrl_addr = (uintptr_t)e->ctrl, .ctrl_rkey = e->ctrl_mr->rkey,
                            .eager_addr = (uintptr_t)e->eager, .eager_rkey = e->eager_mr->rkey,
                            .slot_bytes = e->slot_bytes, .nslots = IB_SLOTS,
                            .rank = (uint32_t)comm->rank };
    memcpy(me->gid, c->gid.raw, sizeof(me->gid));
    for (int q = 0; q < e->nqp; q++) {
        struct ibv_qp_init_attr ia = {
            .send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
            .cap = { .max_send_wr = IB_SQ_DEPTH, .max_recv_wr = IB_RQ_DEPTH,
                     .max_send_sge = 2, .max_recv_sge = 1 },
        };
        e->qp[q] = v->create_qp(c->pd, &ia);
        if (e->qp[q] == NULL)
            return weft_error(WEFT_ERR_SYSTEM, "ib: ibv_create_qp on %s: %m", c->devname);
        /* remote reads too: the one-sided gets of the single-copy algorithm */
        struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = c->port,
                                 .pkey_index = (uint16_t)comm->cfg.ib_pkey,
                                 .qp_access_flags = rw | IBV_ACCESS_REMOTE_READ };
        if (v->modify_qp(e->qp[q], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                         IBV_QP_ACCESS_FLAGS) != 0)
            return weft_error(WEFT_ERR_SYSTEM, "ib: QP to INIT on %s failed", c->devname);
        me->qpn[q] = e->qp[q]->qp_num;
        RETURN_IF_ERR(post_recvs(e, q, IB_RQ_DEPTH));
    }
    return WEFT_OK;
}

/* INIT -> RTR -> RTS against the peer's data. */
static weft_status_t ep_rtr(weft_comm_t *comm, ib_ep_t *e, const ib_conn_info_t *me, int q)
{
    ib_ctx_t *c = e->c;
    const ib_conn_info_t *p = &e->peer;
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_RTR, .path_mtu = WEFT_MIN(p->mtu, me->mtu),
        .dest_qp_num = p->qpn[q], .rq_psn = p->psn, .max_dest_rd_atomic = 1,
        .min_rnr_timer = 12,
        .ah_attr = { .dlid = p->lid, .port_num = c->port, .sl = (uint8_t)comm->cfg.ib_sl },
    };
    if (c->pattr.link_layer == IBV_LINK_LAYER_ETHERNET || c->pattr.lid == 0) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, p->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)c->gid_index;
        a.ah_attr.grh.hop_limit = 255;
        a.ah_attr.grh.traffic_class = (uint8_t)comm->cfg.ib_tc;
    }
    if (c->v->modify_qp(e->qp[q], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                        IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                        IBV_QP_MIN_RNR_TIMER) != 0)
        return weft_error(WEFT_ERR_SYSTEM, "ib: QP to RTR (rank %d) failed", e->base.peer);
    return WEFT_OK;
}

static weft_status_t ep_rts(weft_comm_t *comm, ib_ep_t *e, const ib_conn_info_t *me, int q)
{
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_RTS, .timeout = (uint8_t)comm->cfg.ib_timeout,
        .retry_cnt = (uint8_t)comm->cfg.ib_retry_cnt, .rnr_retry = 7, .sq_psn = me->psn,
        .max_rd_atomic = 1,
    };
    if (e->c->v->modify_qp(e->qp[q], &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0)
        return weft_error(WEFT_ERR_SYSTEM, "ib: QP to RTS (rank %d) failed", e->base.peer);
    return WEFT_OK;
}

static weft_status_t handshake(weft_comm_t *comm, ib_ctx_t *c, int peer, int fd,
                               uint64_t deadline, ib_ep_t **ep_p);

static int ib_taken(void *ctx, int who)
{
    return ((ib_ctx_t *)ctx)->pending[who] != NULL;
}

/* Accepts until `peer` has connected, connecting every rank that arrives (each has sent
 * its data and waits for ours: answering at once is what lets every rank connect to the
 * higher ranks first without waiting in a circle). */
static weft_status_t accept_peer(weft_comm_t *comm, ib_ctx_t *c, int peer, uint64_t deadline)
{
    while (c->pending[peer] == NULL) {
        int fd, who;
        RETURN_IF_ERR(connect_accept(comm, c->lfd, deadline, "ib", ib_taken, c, &fd, &who));
        RETURN_IF_ERR(handshake(comm, c, who, fd, deadline, &c->pending[who]));
    }
    return WEFT_OK;
}

/* Both ends of a setup socket run this at once: each sends its connection data, reads
 * the peer's, moves to RTR, says so, and moves to RTS once the peer can receive too. The
 * socket is closed either way. */
static weft_status_t handshake(weft_comm_t *comm, ib_ctx_t *c, int peer, int fd,
                               uint64_t deadline, ib_ep_t **ep_p)
{
    ib_ep_t *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        close(fd);
        return weft_error(WEFT_ERR_NO_MEMORY, "ib: out of memory");
    }
    e->c = c;
    e->base.peer = peer;
    e->rank = comm->rank;
    e->nqp = (int)WEFT_MIN(WEFT_MAX(comm->cfg.ib_qps, 1), IB_MAX_QPS);
    ib_addr_t pa;
    if (ib_addr_of(&comm->peers[peer], &pa)) {
        e->bell_addr = pa.bell_addr;
        e->bell_rkey = pa.bell_rkey;
    }
    ib_conn_info_t me;
    weft_status_t st = ep_create(comm, c, e, &me);
    if (st == WEFT_OK)
        st = sock_send_all_watched(fd, &me, sizeof(me), deadline, &comm->setup_watch);
    if (st == WEFT_OK)
        st = sock_recv_all_watched(fd, &e->peer, sizeof(e->peer), deadline, &comm->setup_watch);
    if (st == WEFT_OK && (e->peer.magic != IB_ADDR_MAGIC || e->peer.rank != (uint32_t)peer))
        st = weft_error(WEFT_ERR_INTERNAL, "ib: garbled connection data from rank %d", peer);
    if (st == WEFT_OK && (e->peer.nqp != me.nqp || e->peer.nslots != IB_SLOTS))
        st = weft_error(WEFT_ERR_MISMATCH, "ib: rank %d uses %u QPs per connection and "
                        "%u slots, rank %d %u and %u (WEFT_IB_QPS_PER_CONN differs)",
                        comm->rank, me.nqp, IB_SLOTS, peer, e->peer.nqp, e->peer.nslots);
    for (int q = 0; st == WEFT_OK && q < e->nqp; q++)
        st = ep_rtr(comm, e, &me, q);
    char ready = 1, got = 0;
    if (st == WEFT_OK)
        st = sock_send_all_watched(fd, &ready, 1, deadline, &comm->setup_watch);
    if (st == WEFT_OK)
        st = sock_recv_all_watched(fd, &got, 1, deadline, &comm->setup_watch);
    for (int q = 0; st == WEFT_OK && q < e->nqp; q++)
        st = ep_rts(comm, e, &me, q);
    close(fd);
    if (st != WEFT_OK) {
        ep_free(e);
        return st;
    }
    *ep_p = e;
    return WEFT_OK;
}

static weft_status_t ib_connect(weft_comm_t *comm, int peer, tp_ep_t **ep_p)
{
    ib_ctx_t *c = tp_ctx(comm, &tp_ib_ops);
    if (c == NULL || c->dev == NULL)
        return weft_error(WEFT_ERR_INTERNAL, "ib: no device open for rank %d", peer);
    uint64_t deadline = comm_setup_deadline(comm);
    ib_ep_t *e = NULL;
    if (peer < comm->rank) {
        RETURN_IF_ERR(accept_peer(comm, c, peer, deadline));
        e = c->pending[peer];
        c->pending[peer] = NULL;
    } else {
        ib_addr_t a;
        int fd, who;
        if (!ib_addr_of(&comm->peers[peer], &a))
            return weft_error(WEFT_ERR_INTERNAL, "ib: rank %d published no ib address", peer);
        RETURN_IF_ERR(sock_connect_watched(&a.sock, deadline, &comm->setup_watch, &fd));
        /* watched: a peer that died after its kernel took the connection never answers */
        weft_status_t st = auth_handshake_watched(fd, comm->has_secret ? comm->secret : NULL,
                                                  AUTH_DATA, comm->id, comm->rank, deadline,
                                                  &comm->setup_watch, &who);
        if (st == WEFT_OK && who != peer)
            st = weft_error(WEFT_ERR_AUTH, "ib: rank %d's address answered as rank %d", peer,
                            who);
        if (st != WEFT_OK) {
            close(fd);
            return st;
        }
        RETURN_IF_ERR(handshake(comm, c, peer, fd, deadline, &e));
    }
    c->peers++;
    *ep_p = &e->base;
    return WEFT_OK;
}

/* ---- completions ---- */

/* A failed completion as a weft status: the peer lost for what says it is gone, an
 * internal error (a weft bug, or the peer's memory no longer registered) otherwise. */
static weft_status_t wc_error(ib_ep_t *e, const struct ibv_wc *wc)
{
    weft_status_t (*err)(weft_status_t, const char *, ...) =
        e->quiet ? weft_error_quiet : weft_error;
    const char *s = e->c->v->wc_status_str(wc->status);
    int peer = e->base.peer;
    /* a payload for a buffer the peer posted and then withdrew: its call failed (the
     * engine then looks for the reason it posted) */
    if ((wc->wr_id & 0xff) == WR_ZC && wc->status == IBV_WC_REM_ACCESS_ERR)
        return err(WEFT_ERR_PEER_LOST, "ib: rank %d withdrew the receive buffer it had "
                   "posted (its call failed): %s (QP %u)", peer, s, wc->qp_num);
    switch (wc->status) {
    case IBV_WC_WR_FLUSH_ERR:
        if (e->aborted)
            return weft_error_quiet(WEFT_ERR_PEER_LOST, "ib: connection to rank %d aborted "
                                    "by this rank", peer);
        /* a flush follows another failure, or the QP was moved to ERR */
        __attribute__((fallthrough));
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_REM_ABORT_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
    case IBV_WC_FATAL_ERR:
        return err(WEFT_ERR_PEER_LOST, "ib: rank %d lost: %s (QP %u, WEFT_IB_TIMEOUT/"
                          "WEFT_IB_RETRY_CNT bound how long it is waited for)", peer, s,
                          wc->qp_num);
    default:
        return err(WEFT_ERR_INTERNAL, "ib: RDMA with rank %d failed: %s (status %d, "
                          "QP %u)", peer, s, (int)wc->status, wc->qp_num);
    }
}

static int qp_index(const ib_ep_t *e, uint32_t qpn)
{
    for (int q = 0; q < e->nqp; q++)
        if (e->qp[q]->qp_num == qpn)
            return q;
    return -1;
}

static weft_status_t post_pending(ib_ep_t *e);

/* post_pending where the connection still works; a failure that is not a full queue
 * (post_send refused the credit or state) is the connection's error from then on, so
 * that it is reported instead of a peer waiting for the credit until WEFT_TIMEOUT. */
static void pending(ib_ep_t *e)
{
    if (e->err != WEFT_OK)
        return;
    weft_status_t st = post_pending(e);
    if (st < 0)
        e->err = st;
}

/* Drains the CQ: arrived frames are marked, send-queue slots retired, the first error
 * kept. Returns e->err. */
static weft_status_t ep_poll(ib_ep_t *e)
{
    struct ibv_wc wc[16];
    int n;
    while ((n = e->c->v->poll_cq(e->cq, 16, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            int q = qp_index(e, wc[i].qp_num);
            if (wc[i].status != IBV_WC_SUCCESS) {
                if (e->err == WEFT_OK)
                    e->err = wc_error(e, &wc[i]);
                if (q >= 0 && (wc[i].wr_id & 0xff) != WR_RECV)   /* not opcode: undefined */
                    e->sq_retired[q] = e->sq_posted[q];     /* an error flushes them all */
                e->probing = 0;
                continue;
            }
            if (q < 0)
                continue;
            if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                uint32_t fr = wc[i].imm_data & IB_IMM_SEQ;
                uint32_t d = (fr - (uint32_t)e->rx_seq) & IB_IMM_SEQ;
                if (d >= IB_SLOTS || e->arrived[fr % IB_SLOTS]) {
                    if (e->err == WEFT_OK)
                        e->err = weft_error(WEFT_ERR_INTERNAL, "ib: frame %u from rank %d "
                                            "is outside the window at %llu", fr,
                                            e->base.peer, (unsigned long long)e->rx_seq);
                    continue;
                }
                e->arrived[fr % IB_SLOTS] = ARR_IN |
                                            (wc[i].imm_data & IB_IMM_ZC ? ARR_ZC : 0) |
                                            (wc[i].imm_data & IB_IMM_EAGER ? ARR_EAGER : 0);
                if (e->err == WEFT_OK)
                    e->err = post_recvs(e, q, 1);
            } else {
                /* a signaled send: it and everything before it on its QP are done */
                e->sq_retired[q] = e->sq_ok[q] = (uint32_t)(wc[i].wr_id >> 8);
                if ((wc[i].wr_id & 0xff) == WR_PROBE)
                    e->probing = 0;
                /* completions come in order on a QP: this one and those before are done */
                if (q == 0)
                    for (ib_rma_t *r = e->rma; r; r = r->next)
                        if ((int32_t)(e->sq_retired[0] - r->n) >= 0)
                            r->done = 1;
            }
        }
    }
    if (n < 0 && e->err == WEFT_OK)
        e->err = weft_error(WEFT_ERR_SYSTEM, "ib: ibv_poll_cq (rank %d) failed", e->base.peer);
    pending(e);
    return e->err;
}

/* Posts one WR on QP q gathering nsge pieces (at most 2: the QPs' max_send_sge),
 * signaled every IB_SIG_EVERY (or when `sig`); WEFT_IN_PROGRESS when its send queue is
 * full. */
static weft_status_t post_sg(ib_ep_t *e, int q, enum ibv_wr_opcode op, struct ibv_sge *sge,
                             int nsge, uint64_t raddr, uint32_t rkey, uint32_t imm,
                             uint64_t kind, int sig)
{
    if (e->sq_posted[q] - e->sq_retired[q] >= IB_SQ_DEPTH - 1)
        return WEFT_IN_PROGRESS;
    uint32_t n = e->sq_posted[q] + 1;
    sig = sig || n % IB_SIG_EVERY == 0 || e->sq_posted[q] - e->sq_retired[q] >= IB_SQ_DEPTH - 2;
    struct ibv_send_wr wr = {
        .wr_id = (uint64_t)n << 8 | kind, .sg_list = sge, .num_sge = nsge,
        .opcode = op, .send_flags = sig ? IBV_SEND_SIGNALED : 0, .imm_data = imm,
        .wr.rdma = { .remote_addr = raddr, .rkey = rkey },
    }, *bad;
    int rc = e->c->v->post_send(e->qp[q], &wr, &bad);
    if (rc != 0) {
        if (rc == ENOMEM)
            return WEFT_IN_PROGRESS;
        return weft_error(WEFT_ERR_SYSTEM, "ib: ibv_post_send to rank %d: %s", e->base.peer,
                          strerror(rc));
    }
    e->sq_posted[q] = n;
    return WEFT_OK;
}

/* post_sg of one piece (none when len is 0). */
static weft_status_t post(ib_ep_t *e, int q, enum ibv_wr_opcode op, void *laddr,
                          uint32_t lkey, size_t len, uint64_t raddr, uint32_t rkey,
                          uint32_t imm, uint64_t kind, int sig)
{
    struct ibv_sge sge = { .addr = (uintptr_t)laddr, .length = (uint32_t)len, .lkey = lkey };
    return post_sg(e, q, op, &sge, len ? 1 : 0, raddr, rkey, imm, kind, sig);
}

/* Our ring's announcement, credits and a state that waited for send-queue room; all on
 * QP 0. */
static weft_status_t post_pending(ib_ep_t *e)
{
    if (e->ring_dirty) {
        ib_ring_box_t *b = &e->ctrl->tx_ring;
        *b = (ib_ring_box_t){ .seq = 1, .addr = (uintptr_t)e->ring,
                              .rkey = e->ring ? e->ring_mr->rkey : 0,
                              .refused = e->ring_refused, .seq2 = 1 };
        weft_status_t st = post(e, 0, IBV_WR_RDMA_WRITE, b, e->ctrl_mr->lkey, sizeof(*b),
                                e->peer.ctrl_addr + offsetof(ib_ctrl_t, rx_ring),
                                e->peer.ctrl_rkey, 0, 0, 0);
        if (st != WEFT_OK)
            return st == WEFT_IN_PROGRESS ? WEFT_OK : st;
        e->ring_dirty = 0;
        e->c->dirty--;
    }
    if (e->credits_sent != e->rx_seq) {
        e->ctrl->tx_credits = e->rx_seq;
        weft_status_t st = post(e, 0, IBV_WR_RDMA_WRITE, &e->ctrl->tx_credits,
                                e->ctrl_mr->lkey, sizeof(uint64_t), e->peer.ctrl_addr +
                                offsetof(ib_ctrl_t, rx_credits), e->peer.ctrl_rkey, 0, 0, 0);
        if (st != WEFT_OK)
            return st == WEFT_IN_PROGRESS ? WEFT_OK : st;
        e->credits_sent = e->rx_seq;
    }
    if (e->state_dirty) {
        int i = (int)(e->state_seq % 2);
        if (e->state_wr[i] && (int32_t)(e->sq_retired[0] - e->state_wr[i]) < 0)
            return WEFT_OK;         /* its box is still being read: after the next poll */
        ib_state_box_t *b = &e->ctrl->tx_state[i];
        b->seq = e->state_seq;
        b->st = e->state_msg;
        b->seq2 = e->state_seq;
        weft_status_t st = post(e, 0, IBV_WR_RDMA_WRITE, b, e->ctrl_mr->lkey,
                                sizeof(ib_state_box_t), e->peer.ctrl_addr +
                                offsetof(ib_ctrl_t, rx_state), e->peer.ctrl_rkey, 0, 0, 1);
        if (st != WEFT_OK)
            return st == WEFT_IN_PROGRESS ? WEFT_OK : st;
        e->state_wr[i] = e->sq_posted[0];
        e->state_dirty = 0;
    }
    return WEFT_OK;
}

/* ---- data ---- */

/* This rank's receive ring for the peer's frames that do not fit an eager slot, made
 * when the peer rings the doorbell (ib_progress) and announced: post_pending writes where
 * it is into the peer's control block (the context counts the announcements still to
 * post, which its progress retries). One that cannot be made (memory, or the pinned
 * memory limit) is announced as refused: the peer's large send fails with that, naming
 * this rank, instead of waiting; this rank warns why, and its other traffic goes on. */
static void ring_make(ib_ep_t *e)
{
    if (e->ring || e->ring_refused || e->err != WEFT_OK)
        return;
    weft_status_t st = slots_make(e, e->slot_bytes,
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                                  &e->ring, &e->ring_mr);
    if (st != WEFT_OK) {
        LOG_WARN(LOG_NET, "ib: rank %d refuses rank %d's frames over %d bytes: %s", e->rank,
                 e->base.peer, IB_EAGER_SLOT, weft_last_error());
        weft_error_clear();
        e->ring_refused = 1;
    } else {
        e->c->rings++;
    }
    e->ring_dirty = 1;
    e->c->dirty++;
    pending(e);
}

/* Staging for frames that do not fit an eager slot, made at the first one. */
static weft_status_t stage_ready(ib_ep_t *e)
{
    if (e->stage == NULL) {
        RETURN_IF_ERR(slots_make(e, e->slot_bytes, IBV_ACCESS_LOCAL_WRITE, &e->stage,
                                 &e->stage_mr));
        e->c->stages++;
    }
    return WEFT_OK;
}

/* Whether the peer's ring for this rank's frames that do not fit an eager slot is
 * known; until then the doorbell is rung once (WEFT_IN_PROGRESS; the peer's progress
 * makes the ring). */
static weft_status_t tx_ready(ib_ep_t *e)
{
    volatile ib_ring_box_t *b = &e->ctrl->rx_ring;
    uint64_t s2 = b->seq2;          /* a seqlock, as the state box (ib_peer_state) */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    uint64_t addr = b->addr;
    uint32_t rkey = b->rkey, refused = b->refused;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (s2 != 0 && b->seq == s2 && refused)
        return weft_error(WEFT_ERR_NO_MEMORY, "ib: rank %d could not make a receive ring for "
                          "rank %d's frames over %d bytes (out of memory or of its pinned "
                          "memory limit, ulimit -l: its warning says which)", e->base.peer,
                          e->rank, IB_EAGER_SLOT);
    if (s2 != 0 && b->seq == s2 && addr != 0) {
        e->tx_ring_addr = addr;
        e->tx_ring_rkey = rkey;
        return WEFT_OK;
    }
    if (!e->rang) {
        e->ctrl->tx_bell = 1;
        weft_status_t st = post(e, 0, IBV_WR_RDMA_WRITE, &e->ctrl->tx_bell, e->ctrl_mr->lkey,
                                1, e->bell_addr + (uint64_t)e->rank, e->bell_rkey, 0, 0, 0);
        if (st < 0)
            return st;
        e->rang = st == WEFT_OK;
    }
    return WEFT_IN_PROGRESS;
}

/* A receive buffer the peer posted, adopted when it starts at the frame about to be
 * sent; any other post is stale (its first frame went through the ring) or revoked. */
static void fifo_check(ib_ep_t *e)
{
    volatile ib_fifo_box_t *b = &e->ctrl->rx_fifo;
    uint64_t s2 = b->seq2;          /* a seqlock, as the state box (ib_peer_state) */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    ib_fifo_box_t copy;
    memcpy(&copy, (const void *)b, sizeof(copy));
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (b->seq != s2 || copy.seq2 != s2 || s2 == e->fifo_seen)
        return;
    e->fifo_seen = s2;
    if (copy.first != e->tx_seq || copy.len == 0)
        return;
    e->tx_post_active = 1;
    e->tx_post_addr = copy.addr;
    e->tx_post_len = copy.len;
    e->tx_post_rkey = copy.rkey;
    e->tx_post_used = 0;
}

/* Sends a frame. pmr: the registration of the payload's memory, which is then read where
 * it lies (send_kept) and not copied to staging. */
static weft_status_t send_frame(ib_ep_t *e, const frame_hdr_t *hdr, const void *payload,
                                const struct ibv_mr *pmr)
{
    tp_ep_t *ep = &e->base;
    RETURN_IF_ERR(ep_poll(e));
    size_t bytes = sizeof(*hdr) + hdr->len;
    if (bytes > e->peer.slot_bytes)
        return weft_error(WEFT_ERR_MISMATCH, "ib: rank %d sends a frame of %u bytes, rank %d's "
                          "slots take %llu (the engine's frames fit the smallest WEFT_BUFFSIZE: a "
                          "frame this large did not come from it)", e->rank,
                          hdr->len, ep->peer,
                          (unsigned long long)(e->peer.slot_bytes - sizeof(*hdr)));
    if (e->tx_seq - e->ctrl->rx_credits >= IB_SLOTS)
        return WEFT_IN_PROGRESS;        /* the peer has not released the slot yet */
    size_t slot = e->tx_seq % IB_SLOTS;
    int q = (int)(e->tx_seq % (uint64_t)e->nqp);
    if (!e->tx_post_active)
        fifo_check(e);
    /* into the peer's posted buffer while the frames fit what is left of it; the first
     * one that does not (or an empty one) goes through the ring and ends the post on both
     * sides (the peer's engine finds the mismatch) */
    int zc = e->tx_post_active && hdr->len > 0 &&
             hdr->len <= e->tx_post_len - e->tx_post_used;
    if (!zc)
        e->tx_post_active = 0;
    int kept = pmr != NULL && hdr->len > 0;
    /* what goes into a ring slot (the header alone after a posted buffer's payload) picks
     * the ring: eager when it fits, else the peer's large ring, which waits for the peer
     * to make it (tx_ready); what is copied into staging picks the staging */
    int eager = (zc ? sizeof(*hdr) : bytes) <= IB_EAGER_SLOT;
    int big_stage = !kept && bytes > IB_EAGER_SLOT;
    if (!eager && e->tx_ring_addr == 0) {
        weft_status_t st = tx_ready(e);     /* WEFT_IN_PROGRESS until the peer's ring is */
        if (st != WEFT_OK)
            return st;
    }
    if (big_stage)
        RETURN_IF_ERR(stage_ready(e));
    if (e->sq_posted[q] - e->sq_retired[q] >= (uint32_t)(IB_SQ_DEPTH - 1 - zc))
        return WEFT_IN_PROGRESS;
    char *src = big_stage ? e->stage + slot * e->slot_bytes
                          : e->eager_stage + slot * IB_EAGER_SLOT;
    uint32_t lkey = big_stage ? e->stage_mr->lkey : e->eager_stage_mr->lkey;
    memcpy(src, hdr, sizeof(*hdr));
    /* the payload: where it lies (kept), else its copy behind the header in staging */
    struct ibv_sge pl = { .addr = (uintptr_t)(src + sizeof(*hdr)), .length = hdr->len,
                          .lkey = lkey };
    if (kept)
        pl = (struct ibv_sge){ .addr = (uintptr_t)payload, .length = hdr->len,
                               .lkey = pmr->lkey };
    else if (hdr->len)
        memcpy(src + sizeof(*hdr), payload, hdr->len);
    weft_status_t st;
    if (zc) {
        /* the payload, then on the same QP (in order) the header that announces it */
        st = post_sg(e, q, IBV_WR_RDMA_WRITE, &pl, 1, e->tx_post_addr + e->tx_post_used,
                     e->tx_post_rkey, 0, WR_ZC, 0);
        if (st != WEFT_OK)
            return st;
    }
    /* header and payload as one write into the ring slot (a kept payload gathered from
     * where it lies), or the header alone after a posted buffer's payload; signaled when
     * it read a kept payload, so that flush sees the payload read */
    struct ibv_sge sg[2] = { { .addr = (uintptr_t)src, .length = sizeof(*hdr),
                               .lkey = lkey }, pl };
    int nsge = 1;
    if (!zc && kept)
        nsge = 2;
    else if (!zc)
        sg[0].length = (uint32_t)bytes;
    uint32_t imm = ((uint32_t)e->tx_seq & IB_IMM_SEQ) | (zc ? IB_IMM_ZC : 0) |
                   (eager ? IB_IMM_EAGER : 0);
    uint64_t dst = eager ? e->peer.eager_addr + slot * IB_EAGER_SLOT
                         : e->tx_ring_addr + slot * e->peer.slot_bytes;
    st = post_sg(e, q, IBV_WR_RDMA_WRITE_WITH_IMM, sg, nsge, dst,
                 eager ? e->peer.eager_rkey : e->tx_ring_rkey, imm, WR_DATA, kept);
    if (st != WEFT_OK)
        return st;      /* (a payload written already is written again on the retry) */
    if (kept) {
        e->kept_wr[q] = e->sq_posted[q];
        e->kept_busy |= 1u << q;
        ep->frames_kept++;
    }
    e->tx_seq++;
    if (zc) {
        e->zc_tx++;
        e->tx_post_used += hdr->len;
        if (e->tx_post_used == e->tx_post_len)
            e->tx_post_active = 0;
    }
    return WEFT_OK;
}

static weft_status_t ib_send(tp_ep_t *ep, const frame_hdr_t *hdr, const void *payload)
{
    return send_frame((ib_ep_t *)ep, hdr, payload, NULL);
}

/* transport.h: the payload stays untouched until flush. Read where it lies when it is in
 * a weft_mem_alloc region (whose registration the cache keeps; WEFT_IB_ZCOPY not 0),
 * else copied as send does. */
static weft_status_t ib_send_kept(tp_ep_t *ep, const frame_hdr_t *hdr, const void *payload)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    mem_region_t r;
    ib_mem_t m = { 0 };
    if (e->c->zcopy == 0 || hdr->len == 0 || !in_region(payload, hdr->len, &r))
        return send_frame(e, hdr, payload, NULL);
    if (reg_take(e->c, payload, hdr->len, IB_ACCESS_ALL, &m) != WEFT_OK) {
        LOG_DEBUG(LOG_NET, "ib: a frame to rank %d goes through staging: %s", ep->peer,
                  weft_last_error());
        weft_error_clear();
        return send_frame(e, hdr, payload, NULL);
    }
    /* the cached registration outlives the call: weft_mem_free of memory a call still
     * uses is the caller's error, as for any buffer */
    struct ibv_mr *mr = m.mr;
    reg_give(e->c, &m);
    return send_frame(e, hdr, payload, mr);
}

/* transport.h: every payload read where it lay has been read (its signaled WR, and so
 * everything before it on that QP, completed successfully). A failure after that, such
 * as a credit write to a peer that took its frames and left, is not this call's: the
 * next one that needs the connection reports it. */
/* Whether a kept send's payload (send_kept) may still be read by the HCA: a QP's bit in
 * kept_busy stays until a successful completion covers its last kept WR. */
static int kept_pending(ib_ep_t *e)
{
    for (int q = 0; q < e->nqp; q++) {
        if (!(e->kept_busy & 1u << q))
            continue;
        if ((int32_t)(e->sq_ok[q] - e->kept_wr[q]) < 0)
            return 1;
        e->kept_busy &= ~(1u << q);
    }
    return 0;
}

static weft_status_t ib_flush(tp_ep_t *ep)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    if (e->kept_busy == 0)
        return WEFT_OK;
    weft_status_t st = ep_poll(e);
    if (kept_pending(e))
        return st != WEFT_OK ? st : WEFT_IN_PROGRESS;
    return WEFT_OK;
}

/* The header of the frame in slot (arrived): in the eager ring or the big one. */
static const frame_hdr_t *rx_hdr(const ib_ep_t *e, size_t slot)
{
    if (e->arrived[slot] & ARR_EAGER)
        return (const frame_hdr_t *)(e->eager + slot * IB_EAGER_SLOT);
    return (const frame_hdr_t *)(e->ring + slot * e->slot_bytes);
}

static weft_status_t ib_recv_peek(tp_ep_t *ep, const frame_hdr_t **hdr_p, const void **payload_p)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    weft_status_t st = ep_poll(e);
    size_t slot = e->rx_seq % IB_SLOTS;
    uint8_t arr = e->arrived[slot];
    if (!arr)                   /* what arrived is delivered before a failure */
        return st != WEFT_OK ? st : WEFT_IN_PROGRESS;
    if (!(arr & ARR_EAGER) && e->ring == NULL)
        return weft_error(WEFT_ERR_INTERNAL, "ib: rank %d wrote frame %llu into a ring this "
                          "rank has not made", ep->peer, (unsigned long long)e->rx_seq);
    const frame_hdr_t *h = rx_hdr(e, slot);
    size_t cap = (arr & ARR_EAGER) && !(arr & ARR_ZC) ? IB_EAGER_SLOT : e->slot_bytes;
    if (sizeof(*h) + h->len > cap)
        return weft_error(WEFT_ERR_INTERNAL, "ib: frame from rank %d claims %u bytes (slot "
                          "%zu)", ep->peer, h->len, cap - sizeof(*h));
    *hdr_p = h;
    /* a payload in the posted buffer: the engine asks for it after checking the header */
    *payload_p = arr & ARR_ZC ? NULL : h + 1;
    return WEFT_OK;
}

/* The payload is in the ring, or (zero copy) where it landed in the posted buffer: at
 * the engine's dst when both ends agree on the frames. */
static weft_status_t ib_recv_payload(tp_ep_t *ep, void *dst, const void **payload_p)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    size_t slot = e->rx_seq % IB_SLOTS;
    const frame_hdr_t *h = rx_hdr(e, slot);
    if (!(e->arrived[slot] & ARR_ZC)) {
        *payload_p = h + 1;
        return WEFT_OK;
    }
    if (!e->post_live || e->rx_seq < e->post_first || h->len > e->post_len - e->post_used)
        return weft_error(WEFT_ERR_INTERNAL, "ib: rank %d wrote %u bytes of frame %llu into "
                          "a receive buffer this rank has not posted for it", ep->peer,
                          h->len, (unsigned long long)e->rx_seq);
    *payload_p = e->post_addr + e->post_used;
    return WEFT_OK;
}

/* The posted buffer is done with: its bytes arrived, or its first frame came through
 * the ring (so the peer will never write into it). */
static void post_end(ib_ep_t *e)
{
    reg_give(e->c, &e->post_mem);
    e->post_live = 0;
}

static void ib_recv_release(tp_ep_t *ep)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    size_t slot = e->rx_seq % IB_SLOTS;
    int zc = (e->arrived[slot] & ARR_ZC) != 0;
    uint32_t len = rx_hdr(e, slot)->len;
    if (e->post_live) {
        if (zc) {
            e->zc_rx++;
            e->post_used += len;
            if (e->post_used == e->post_len)
                post_end(e);
        } else {
            post_end(e);    /* not seen in time, or the peer stopped using it */
        }
    }
    e->arrived[slot] = 0;
    e->rx_seq++;
    pending(e);         /* the credit; later (ep_poll) when the queue is full */
}

/* Writes box {first, addr, len, rkey} into the peer's FIFO from the next free source
 * (its last write retired); WEFT_IN_PROGRESS when neither is free or the queue is full. */
static weft_status_t fifo_post(ib_ep_t *e, uint64_t first, const void *addr, size_t len,
                               uint32_t rkey)
{
    int i = (int)(e->post_seq % 2);
    if (e->post_wr[i] && (int32_t)(e->sq_retired[0] - e->post_wr[i]) < 0)
        return WEFT_IN_PROGRESS;
    ib_fifo_box_t *b = &e->ctrl->tx_fifo[i];
    uint64_t seq = e->post_seq + 1;
    *b = (ib_fifo_box_t){ .seq = seq, .first = first, .addr = (uintptr_t)addr, .len = len,
                          .rkey = rkey, .seq2 = seq };
    weft_status_t st = post(e, 0, IBV_WR_RDMA_WRITE, b, e->ctrl_mr->lkey, sizeof(*b),
                            e->peer.ctrl_addr + offsetof(ib_ctrl_t, rx_fifo), e->peer.ctrl_rkey,
                            0, WR_FIFO, 1);
    if (st != WEFT_OK)
        return st;
    e->post_seq = seq;
    e->post_wr[i] = e->sq_posted[0];
    return WEFT_OK;
}

/* Posts [dst, dst + room) for the frames from the next one on (see the top), when
 * WEFT_IB_ZCOPY allows it for that memory, nothing is posted yet, and the next frame
 * has not arrived already; dst NULL withdraws a live post. Best effort: a buffer not
 * posted is received through the ring. */
static void ib_recv_post(tp_ep_t *ep, void *dst, size_t room)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    if (dst == NULL) {
        if (e->post_live) {
            e->cut = e->post_mem.reg != NULL;   /* cached: its key stays valid */
            /* revoke, for a sender yet to look: from a free source box, so wait until
             * one's write has retired (microseconds on hardware; 100 ms at most, for a
             * connection that no longer moves) */
            uint64_t end = time_ns() + 100000000ull;
            while (e->err == WEFT_OK && fifo_post(e, 0, NULL, 0, 0) == WEFT_IN_PROGRESS &&
                   time_ns() < end)
                ep_poll(e);
            post_end(e);
        }
        return;
    }
    /* (the engine's recv_peek has just polled: a frame here by now needs no post) */
    if (e->post_live || e->c->zcopy == 0 || e->err != WEFT_OK || room == 0 ||
        e->arrived[e->rx_seq % IB_SLOTS])
        return;
    mem_region_t r;
    if (e->c->zcopy == 1 && !in_region(dst, room, &r))
        return;                 /* weft_mem_alloc memory only: its registration is cached */
    if (reg_take(e->c, dst, room, IB_ACCESS_ALL, &e->post_mem) != WEFT_OK) {
        LOG_DEBUG(LOG_NET, "ib: receive buffer for rank %d not posted: %s", ep->peer,
                  weft_last_error());
        weft_error_clear();
        return;
    }
    weft_status_t st = fifo_post(e, e->rx_seq, dst, room, e->post_mem.mr->rkey);
    if (st != WEFT_OK) {
        reg_give(e->c, &e->post_mem);
        if (st < 0 && e->err == WEFT_OK)
            e->err = st;
        return;
    }
    e->post_live = 1;
    e->post_first = e->rx_seq;
    e->post_addr = dst;
    e->post_len = room;
    e->post_used = 0;
}

/* The context's progress: rings for the peers that rang the doorbell (a frame too large
 * for an eager slot and nowhere to write it: tx_ready), so that such a send completes
 * while this rank waits in any call of this communicator, its own send to that peer
 * among them; and the announcements of rings made earlier whose send queue was full. A
 * ring that cannot be made is announced as refused (ring_make); a peer whose connection
 * broke is left to the call that needs it. Never fails the call it runs in. */
static weft_status_t ib_progress(weft_comm_t *comm)
{
    ib_ctx_t *c = tp_ctx(comm, &tp_ib_ops);
    if (c == NULL || c->bell == NULL)
        return WEFT_OK;
    for (int r = 0; c->dirty > 0 && r < comm->nranks; r++) {
        tp_ep_t *ep = comm->eps[r];
        ib_ep_t *e = (ib_ep_t *)ep;
        if (ep == NULL || ep->ops != &tp_ib_ops || !e->ring_dirty)
            continue;
        if (ep_poll(e) != WEFT_OK && e->ring_dirty) {   /* (pending: the announcement) */
            e->ring_dirty = 0;              /* a broken connection: nobody waits for it */
            c->dirty--;
        }
    }
    const volatile uint64_t *w = (const volatile uint64_t *)c->bell;
    for (int i = 0; i < (comm->nranks + 7) / 8; i++) {
        if (w[i] == 0)
            continue;
        for (int r = i * 8; r < i * 8 + 8 && r < comm->nranks; r++) {
            if (c->bell[r] == 0)
                continue;
            c->bell[r] = 0;
            tp_ep_t *ep = comm->eps[r];
            if (ep == NULL || ep->ops != &tp_ib_ops)
                continue;
            ib_ep_t *e = (ib_ep_t *)ep;
            if (e->ring != NULL || e->ring_refused || e->err != WEFT_OK)
                continue;
            ring_make(e);
            ep_poll(e);     /* (an emulated HCA that lags moves the announcement then) */
        }
    }
    return WEFT_OK;
}

/* Keeps one zero-byte signaled write in flight: a peer that is gone fails it. While the
 * next frame from the peer has arrived the answer is yes: a peer that finished its part
 * may have left (its QPs gone, so this rank's credit and probe writes fail), and what it
 * sent is read before its departure counts (the engine takes that frame next; a send it
 * still needs to make there fails in ib_send). */
static weft_status_t ib_check_alive(tp_ep_t *ep)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    weft_status_t st = ep_poll(e);
    if (e->arrived[e->rx_seq % IB_SLOTS])
        return WEFT_OK;
    RETURN_IF_ERR(st);
    if (!e->probing && post(e, 0, IBV_WR_RDMA_WRITE, NULL, 0, 0, e->peer.ctrl_addr,
                            e->peer.ctrl_rkey, 0, WR_PROBE, 1) == WEFT_OK)
        e->probing = 1;
    return ep_poll(e);
}

/* ---- peer states ---- */

static void ib_post_state(tp_ep_t *ep, const tp_state_t *s)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    e->state_msg = *s;
    e->state_seq++;
    e->state_dirty = 1;
    pending(e);
}

static weft_status_t ib_peer_state(tp_ep_t *ep, tp_state_t *s)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    e->quiet = 1;           /* a peer gone after its part is the caller's to judge */
    weft_status_t st = ep_poll(e);
    if (st == WEFT_OK && !e->probing &&
        post(e, 0, IBV_WR_RDMA_WRITE, NULL, 0, 0, e->peer.ctrl_addr, e->peer.ctrl_rkey, 0,
             WR_PROBE, 1) == WEFT_OK)
        e->probing = 1;
    st = ep_poll(e);
    e->quiet = 0;
    /* written in address order: seq2 first, then the state, then seq, as a seqlock */
    volatile ib_state_box_t *b = &e->ctrl->rx_state;
    uint64_t s2 = b->seq2;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    tp_state_t copy;
    memcpy(&copy, (const void *)&b->st, sizeof(copy));
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (b->seq == s2 && s2 > e->state_seen) {
        e->state_seen = s2;
        e->st_rx = copy;
    }
    *s = e->st_rx;
    /* as check_alive: while the peer's next frame has arrived, it is read before the
     * loss counts (a peer that finished its part and left; fail.c's idle probe would
     * otherwise fail a call whose last frame is here) */
    return st < 0 && !e->arrived[e->rx_seq % IB_SLOTS] ? st : WEFT_OK;
}

static void ib_abort(tp_ep_t *ep)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    e->aborted = 1;
    for (int q = 0; q < e->nqp; q++) {
        struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
        e->c->v->modify_qp(e->qp[q], &a, IBV_QP_STATE);
    }
}

/* After a failed call (transport.h, fail_end), two cases leave a way into the caller's
 * memory: a withdrawn post whose registration outlives it (WEFT_IB_ZCOPY=reg: a
 * weft_mem_alloc region stays registered, under the cache, until weft_mem_free), into
 * which a sender that adopted the post goes on writing (it does not look at the FIFO
 * again while it does); and a kept send whose payload the HCA has not read yet. Then
 * every write on each QP, the FAILED state's among them, gets 100 ms to complete (a
 * zero-byte signaled write behind them says when: the queue's last WRs may be
 * unsignaled), and the connection is moved to ERR where the post was withdrawn or a kept
 * payload is still unread. The peer reads what arrived and the state; its next access
 * here fails (PEER_LOST naming this rank). Only then, because a cut connection makes
 * peers blame this rank rather than the failure's cause (every connection cut at every
 * failure turned test_fail's mismatch and abort reports into "rank N lost"). Not
 * covered: a single-copy call's key, which names the whole region and outlives the
 * call, so a peer may still read this rank's buffer after it returns. */
static void ib_fail_end(tp_ep_t *ep)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    if (e->aborted || !(e->cut || kept_pending(e)))
        return;
    uint64_t end = time_ns() + 100000000ull;
    uint32_t mark[IB_MAX_QPS];
    int marked = 0;
    e->quiet = 1;
    while (time_ns() < end && ep_poll(e) == WEFT_OK) {
        if (e->state_dirty)
            continue;                   /* the state is not posted yet (queue full) */
        for (; marked < e->nqp; marked++) {
            if (post(e, marked, IBV_WR_RDMA_WRITE, NULL, 0, 0, e->peer.ctrl_addr,
                     e->peer.ctrl_rkey, 0, WR_PROBE, 1) != WEFT_OK)
                break;                  /* its queue is full: again after the next poll */
            mark[marked] = e->sq_posted[marked];
        }
        int done = marked == e->nqp;
        for (int q = 0; q < marked; q++)
            done &= (int32_t)(e->sq_retired[q] - mark[q]) >= 0;
        if (done)
            break;
    }
    e->quiet = 0;
    if (e->cut || kept_pending(e))
        ib_abort(ep);
    e->cut = 0;
}

/* Posts, on each QP whose closing probe is not posted yet, a zero-byte signaled write
 * behind what is posted there: its completion says the peer's HCA took everything before
 * it on that QP (a send returns once its frame is staged, and the queue's last WRs may be
 * unsignaled). A full queue leaves the rest for the next try. */
static void close_probes(ib_ep_t *e)
{
    for (; e->close_marked < e->nqp; e->close_marked++) {
        int q = e->close_marked;
        if (post(e, q, IBV_WR_RDMA_WRITE, NULL, 0, 0, e->peer.ctrl_addr, e->peer.ctrl_rkey,
                 0, WR_PROBE, 1) != WEFT_OK)
            break;
        e->close_mark[q] = e->sq_posted[q];
    }
}

static void ib_close_start(tp_ep_t *ep)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    if (e->closing)
        return;
    e->closing = 1;
    e->close_end = time_ns() + 1000000000ull;
    e->quiet = 1;
    if (e->err == WEFT_OK && !e->aborted && ep_poll(e) == WEFT_OK)
        close_probes(e);
}

static void ib_close(tp_ep_t *ep)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    ib_close_start(ep);
    if (e->c->zcopy)
        LOG_INFO(LOG_NET, "ib: rank %d: frames by posted buffers (WEFT_IB_ZCOPY=%s): "
                 "%llu of %llu from rank %d, %llu of %llu to it; %llu sent from where they "
                 "lay", e->rank, e->c->zcopy == 2 ? "all" : "reg",
                 (unsigned long long)e->zc_rx, (unsigned long long)e->rx_seq, ep->peer,
                 (unsigned long long)e->zc_tx, (unsigned long long)e->tx_seq,
                 (unsigned long long)ep->frames_kept);
    /* what was posted on every QP must reach the peer before the QPs go: wait (1 s
     * from close_start at most) for each QP's closing probe (before 2026-11-27 only QP
     * 0's: frames striped over the others could be cut, and an earlier probe's
     * completion could end the wait before the frames behind it) */
    while (e->err == WEFT_OK && !e->aborted && time_ns() < e->close_end &&
           ep_poll(e) == WEFT_OK) {
        close_probes(e);
        int done = e->close_marked == e->nqp;
        for (int q = 0; q < e->close_marked; q++)
            done &= (int32_t)(e->sq_retired[q] - e->close_mark[q]) >= 0;
        if (done)
            break;
    }
    ep_free(e);
}

/* ---- one-sided: RDMA_READ and RDMA_WRITE on QP 0 ---- */

/* The packed key: the peer's region and rkey, checked with a checksum before use. */
typedef struct ib_rkey {
    uint32_t magic, rkey;
    uint64_t base, len;
    uint32_t check, pad;
} ib_rkey_t;

typedef struct ib_rmem_s {
    uint32_t rkey;
    uint64_t base, len;
} ib_rmem_t;

static uint32_t rkey_check(const ib_rkey_t *k)
{
    const uint8_t *p = (const uint8_t *)k;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < offsetof(ib_rkey_t, check); i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

/* Whether [ptr, ptr+len) lies in one weft_mem_alloc region (*r), which the cache serves. */
static int in_region(const void *ptr, size_t len, mem_region_t *r)
{
    mem_lookup(ptr, r);
    return r->fd >= 0 && (uint64_t)(uintptr_t)ptr + len <= r->base + r->size;
}

/* Registers the pages holding [ptr, ptr+len). Memory the process may only read (a const
 * array, a read-only file mapping) cannot be pinned for writing: with IB_ACCESS_READ_OK,
 * where the kernel refuses (EFAULT, EACCES), again for remote reads alone, which is what
 * peers do with a call's buffers (a single-copy get; only tests put). Not for posted
 * receive buffers, which the peer writes. */
static struct ibv_mr *reg_pages(ib_ctx_t *c, const void *ptr, size_t len, int access)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)ptr & ~(page - 1);
    uintptr_t hi = ((uintptr_t)ptr + len + page - 1) & ~(page - 1);
    int read_ok = access & IB_ACCESS_READ_OK;
    access &= ~IB_ACCESS_READ_OK;
    struct ibv_mr *mr = c->v->reg_mr(c->pd, (void *)lo, hi - lo, access);
    if (mr == NULL && read_ok && (errno == EFAULT || errno == EACCES))
        mr = c->v->reg_mr(c->pd, (void *)lo, hi - lo, IBV_ACCESS_REMOTE_READ);
    return mr;
}

/* ---- the registration cache ----
 *
 * Memory weft owns (weft_mem_alloc) is registered once, whole, and the registration kept
 * for every later call on any part of it (refcounted), until weft_mem_free drops it
 * (mem.h's free hook; a registration still in use goes with its last handle). Memory weft
 * does not own is registered for the call (page-aligned) and deregistered at its end:
 * free() could give it back unnoticed, and a cached registration would then pin, and let
 * peers reach, whatever the allocator put there next. */

static void reg_drop(ib_ctx_t *c, ib_reg_t *g)
{
    for (ib_reg_t **pp = &c->regs; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    c->v->dereg_mr(g->mr);
    free(g);
}

static void ib_region_freed(void *ctx, const mem_region_t *r)
{
    ib_ctx_t *c = ctx;
    pthread_mutex_lock(&c->reg_lock);
    for (ib_reg_t *g = c->regs; g; g = g->next)
        if (g->serial == r->serial) {
            if (g->refs == 0)
                reg_drop(c, g);
            else
                g->dead = 1;
            break;
        }
    pthread_mutex_unlock(&c->reg_lock);
}

/* A registration of [ptr, ptr + len): the cache's for weft's memory (every access), else
 * its pages' own with `access`. */
static weft_status_t reg_take(ib_ctx_t *c, const void *ptr, size_t len, int access,
                              ib_mem_t *m)
{
    mem_region_t r;
    m->reg = NULL;
    if (!in_region(ptr, len, &r)) {
        if ((m->mr = reg_pages(c, ptr, len, access)) == NULL)
            return weft_error(WEFT_ERR_SYSTEM, "ib: ibv_reg_mr of %zu bytes on %s: %m", len,
                              c->devname);
        return WEFT_OK;
    }
    pthread_mutex_lock(&c->reg_lock);
    ib_reg_t *g = c->regs;
    while (g && (g->serial != r.serial || g->dead))
        g = g->next;
    if (g == NULL && (g = calloc(1, sizeof(*g))) != NULL) {
        g->serial = r.serial;
        if ((g->mr = c->v->reg_mr(c->pd, (void *)(uintptr_t)r.base, r.size, IB_ACCESS_ALL)) ==
            NULL) {
            free(g);
            pthread_mutex_unlock(&c->reg_lock);
            return weft_error(WEFT_ERR_SYSTEM, "ib: ibv_reg_mr of a %llu-byte weft_mem_alloc "
                              "region on %s: %m", (unsigned long long)r.size, c->devname);
        }
        g->next = c->regs;
        c->regs = g;
    }
    if (g)
        g->refs++;
    pthread_mutex_unlock(&c->reg_lock);
    if (g == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "ib: out of memory");
    m->mr = g->mr;
    m->reg = g;
    return WEFT_OK;
}

static void reg_give(ib_ctx_t *c, ib_mem_t *m)
{
    if (m->reg == NULL) {
        if (m->mr)
            c->v->dereg_mr(m->mr);
    } else {
        pthread_mutex_lock(&c->reg_lock);
        if (--m->reg->refs == 0 && m->reg->dead)
            reg_drop(c, m->reg);
        pthread_mutex_unlock(&c->reg_lock);
    }
    m->mr = NULL;
    m->reg = NULL;
}

static weft_status_t ib_mem_reg(weft_comm_t *comm, const void *ptr, size_t len, mem_type_t mt,
                                tp_mem_t **mem_p, tp_rkey_t *key)
{
    ib_ctx_t *c = tp_ctx(comm, &tp_ib_ops);
    if (mt != MEM_HOST)
        return weft_error(WEFT_ERR_UNSUPPORTED, "ib: registering cuda memory (GPUDirect RDMA) "
                          "is not built yet");
    if (c == NULL || c->pd == NULL)
        return weft_error(WEFT_ERR_INTERNAL, "ib: no device open to register with");
    ib_mem_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "ib: out of memory");
    weft_status_t st = reg_take(c, ptr, len, IB_ACCESS_ALL | IB_ACCESS_READ_OK, m);
    if (st != WEFT_OK) {
        free(m);
        return st;
    }
    struct ibv_mr *mr = m->mr;
    ib_rkey_t k = { .magic = IB_RKEY_MAGIC, .rkey = mr->rkey, .base = (uintptr_t)mr->addr,
                    .len = mr->length };
    k.check = rkey_check(&k);
    _Static_assert(sizeof(k) <= TP_RKEY_BYTES, "ib key fits");
    memset(key, 0, sizeof(*key));
    memcpy(key->blob, &k, sizeof(k));
    key->len = sizeof(k);
    key->tp = (uint8_t)tp_slot(&tp_ib_ops);
    *mem_p = (tp_mem_t *)m;
    return WEFT_OK;
}

static void ib_mem_dereg(weft_comm_t *comm, tp_mem_t *mem)
{
    ib_ctx_t *c = tp_ctx(comm, &tp_ib_ops);
    if (mem && c)
        reg_give(c, (ib_mem_t *)mem);
    free(mem);
}

static weft_status_t ib_rkey_unpack(tp_ep_t *ep, const tp_rkey_t *key, tp_rmem_t **rmem_p)
{
    ib_rkey_t k;
    if (key->tp != (uint8_t)tp_slot(&tp_ib_ops))
        return weft_error(WEFT_ERR_INVALID_ARG, "ib: rank %d's key is not an ib key (slot %u)",
                          ep->peer, key->tp);
    if (key->len != sizeof(k))
        return weft_error(WEFT_ERR_INVALID_ARG, "ib: rank %d's key has %u bytes, an ib key %zu",
                          ep->peer, key->len, sizeof(k));
    memcpy(&k, key->blob, sizeof(k));
    if (k.magic != IB_RKEY_MAGIC || k.check != rkey_check(&k))
        return weft_error(WEFT_ERR_INVALID_ARG, "ib: rank %d's key is garbled", ep->peer);
    ib_rmem_t *r = malloc(sizeof(*r));
    if (r == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "ib: out of memory");
    *r = (ib_rmem_t){ k.rkey, k.base, k.len };
    *rmem_p = (tp_rmem_t *)r;
    return WEFT_OK;
}

static void ib_rkey_release(tp_ep_t *ep, tp_rmem_t *rmem)
{
    free(rmem);
}

static weft_status_t rma_post(tp_ep_t *ep, enum ibv_wr_opcode op, void *local,
                              tp_rmem_t *rmem, uint64_t raddr, size_t len, tp_rma_t *req)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    const ib_rmem_t *r = (const ib_rmem_t *)rmem;
    RETURN_IF_ERR(ep_poll(e));
    if (raddr < r->base || len > r->len || raddr - r->base > r->len - len || len > (1u << 30))
        return weft_error(WEFT_ERR_INVALID_ARG, "ib: [%#llx, +%zu) is outside rank %d's "
                          "registered region [%#llx, +%llu)", (unsigned long long)raddr, len,
                          ep->peer, (unsigned long long)r->base, (unsigned long long)r->len);
    if (len == 0) {
        req->req = NULL;
        return WEFT_OK;
    }
    ib_rma_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "ib: out of memory");
    /* a get writes its local buffer, a put only reads it (read-only memory may be put) */
    weft_status_t st = reg_take(e->c, local, len, op == IBV_WR_RDMA_READ ?
                                IBV_ACCESS_LOCAL_WRITE : 0, &t->mem);
    if (st != WEFT_OK) {
        free(t);
        return st;
    }
    uint64_t end = time_ns() + 1000000000ull;
    /* a full send queue drains as completions are polled */
    while ((st = post(e, 0, op, local, t->mem.mr->lkey, len, raddr, r->rkey, 0, WR_RMA, 1)) ==
               WEFT_IN_PROGRESS && time_ns() < end && ep_poll(e) == WEFT_OK)
        ;
    if (st != WEFT_OK) {
        reg_give(e->c, &t->mem);
        free(t);
        return st == WEFT_IN_PROGRESS ? weft_error(WEFT_ERR_TIMEOUT, "ib: send queue to rank "
                                                   "%d stayed full", ep->peer) : st;
    }
    t->n = e->sq_posted[0];
    ib_rma_t **pp = &e->rma;
    while (*pp)
        pp = &(*pp)->next;
    *pp = t;
    req->req = t;
    return WEFT_IN_PROGRESS;
}

static weft_status_t ib_get(tp_ep_t *ep, void *dst, tp_rmem_t *rmem, uint64_t raddr,
                            size_t len, tp_rma_t *req)
{
    return rma_post(ep, IBV_WR_RDMA_READ, dst, rmem, raddr, len, req);
}

static weft_status_t ib_put(tp_ep_t *ep, const void *src, tp_rmem_t *rmem, uint64_t raddr,
                            size_t len, tp_rma_t *req)
{
    return rma_post(ep, IBV_WR_RDMA_WRITE, (void *)src, rmem, raddr, len, req);
}

static void rma_free(ib_ep_t *e, ib_rma_t *t)
{
    for (ib_rma_t **pp = &e->rma; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    reg_give(e->c, &t->mem);
    free(t);
}

static weft_status_t ib_rma_test(tp_ep_t *ep, tp_rma_t *req)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    ib_rma_t *t = req->req;
    if (t == NULL)
        return WEFT_OK;
    weft_status_t st = ep_poll(e);
    if (t->done) {
        rma_free(e, t);
        req->req = NULL;
        return WEFT_OK;
    }
    return st != WEFT_OK ? st : WEFT_IN_PROGRESS;
}

/* Waits for the transfer 100 ms at most; one still running then is stopped by moving the
 * connection to ERR (the call has failed anyway), so the HCA never touches it again. */
static void ib_rma_cancel(tp_ep_t *ep, tp_rma_t *req)
{
    ib_ep_t *e = (ib_ep_t *)ep;
    ib_rma_t *t = req->req;
    if (t == NULL)
        return;
    uint64_t end = time_ns() + 100000000ull;
    e->quiet = 1;
    while (!t->done && e->err == WEFT_OK && time_ns() < end)
        ep_poll(e);
    e->quiet = 0;
    if (!t->done && e->err == WEFT_OK)
        ib_abort(ep);
    rma_free(e, t);
    req->req = NULL;
}

const tp_ops_t tp_ib_ops = {
    .name = "ib",
    .preference = 16,               /* below shm (within a host), above ucx and tcp */
    .chunk = 512 * 1024,
    .can_connect = ib_can_connect,
    .local_setup = ib_local_setup,
    .connect = ib_connect,
    .post_connect = ib_post_connect,
    .local_cleanup = ib_local_cleanup,
    .progress = ib_progress,        /* the doorbell; every endpoint call polls its own CQ */
    .send = ib_send,
    .send_kept = ib_send_kept,
    .recv_peek = ib_recv_peek,
    .recv_payload = ib_recv_payload,
    .recv_release = ib_recv_release,
    .recv_post = ib_recv_post,
    .fail_end = ib_fail_end,
    .flush = ib_flush,              /* payloads read where they lie; the rest the HCA moves
                                       from staging (close waits for it) */
    .check_alive = ib_check_alive,
    .post_state = ib_post_state,
    .peer_state = ib_peer_state,
    .abort = ib_abort,
    .mem_reg = ib_mem_reg,
    .mem_dereg = ib_mem_dereg,
    .rkey_unpack = ib_rkey_unpack,
    .rkey_release = ib_rkey_release,
    .get = ib_get,
    .put = ib_put,
    .rma_test = ib_rma_test,
    .rma_cancel = ib_rma_cancel,
    .close_start = ib_close_start,
    .close = ib_close,
};
