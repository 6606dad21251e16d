/*
 * ibemu.c - weft's verbs emulator: libweft_ibemu.so, loaded by the ib transport in place
 * of rdma-core when WEFT_IB_VERBS names it (a testing knob; docs/TRANSPORTS.md).
 *
 * It is weft's test double for an RDMA device, so it makes the checks hardware makes
 * that weft relies on. One emulated device (weftemu0, port 1, LID 1; WEFT_IBEMU_DEVICES
 * names up to 4, all on the same fabric, for the tests of HCA choice; a name starting
 * efa or iwarp is a device of that kind, which weft must skip; reg_mr refuses pages that
 * are not mapped, or not writable when it asks for writes, with EFAULT, remote write
 * without local write with EINVAL, and, with WEFT_IBEMU_MR_MAX, a registration larger than
 * that with ENOMEM, as the pinned memory limit does) whose "fabric" is a
 * shared-memory segment (/dev/shm/weft_ibemu.<uid>, or WEFT_IBEMU_FABRIC) holding the MR,
 * QP and CQ tables of every process that opened it, under one robust process-shared
 * mutex. A post_send does the whole transfer at once, under the lock: it checks the QP
 * state (RTS; in ERR every WR is flushed), each local SGE against the poster's MRs (lkey,
 * bounds; at most the QP's max_send_sge pieces, gathered in order), the peer QP (its owner alive, RTR/RTS, connected back to this QP), the rkey
 * against the target's MRs (owner, bounds, REMOTE_WRITE/READ), and a posted receive for
 * SEND and WRITE_WITH_IMM (none: RNR retry exceeded); then moves the bytes into or out of
 * the target process with process_vm_writev/readv and posts the completions. A failed
 * check completes with the status hardware gives (REM_ACCESS_ERR, LOC_PROT_ERR,
 * RETRY_EXC_ERR, RNR_RETRY_EXC_ERR, ...) and moves the QP to ERR, which flushes what is
 * posted (WEFT_IBEMU_LAG=1 holds each send WR until its process polls, each QP at its
 * own pace, and drops those still held when the QP is destroyed); an error completion's opcode is given wrong on purpose (verbs leaves it
 * undefined). Unsignaled WRs hold their send-queue slot until a later signaled completion on
 * that QP is polled, so a transport that never signals finds its send queue full.
 *
 * Invariants: table entries belong to a pid; an entry whose pid is gone is free again;
 * keys carry a generation, so a stale key never matches a reused entry.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "../../comm/ib/ib_verbs.h"

#define EMU_MAGIC 0x77656d75u   /* "wemu" */
#define EMU_VERSION 2
#define EMU_SGE 4               /* max_send_sge a QP may ask for */
#define EMU_MRS 2048
#define EMU_QPS 1024
#define EMU_CQS 256
#define EMU_CQE 1024
#define EMU_RQ 512

typedef struct emu_mr {
    int32_t pid;                /* 0: free */
    uint32_t key;               /* lkey = rkey: index | generation << 16 */
    uint64_t addr, len;
    int32_t access;
} emu_mr_t;

typedef struct emu_rwqe {
    uint64_t wr_id, addr;
    uint32_t len, lkey;
} emu_rwqe_t;

typedef struct emu_qp {
    int32_t pid;
    int32_t state;              /* enum ibv_qp_state */
    uint32_t dest_qpn;
    int32_t send_cq, recv_cq;
    int32_t access;             /* qp_access_flags */
    uint32_t max_send_wr, max_recv_wr, sq_sig_all;
    uint32_t max_send_sge;      /* a send WR gathers at most this many pieces */
    uint32_t sq_used;           /* WRs posted and not yet retired by a polled completion */
    uint32_t sq_since;          /* WRs posted since the last completion was queued */
    uint32_t rq_head, rq_tail;
    emu_rwqe_t rq[EMU_RQ];
} emu_qp_t;

typedef struct emu_cq {
    int32_t pid;
    uint32_t cqe, head, tail;
    struct ibv_wc wc[EMU_CQE];
    uint32_t retire[EMU_CQE];   /* send-queue slots this completion frees on its QP */
} emu_cq_t;

typedef struct emu_fabric {
    uint32_t magic, version;
    pthread_mutex_t lock;
    uint32_t gen;
    emu_mr_t mr[EMU_MRS];
    emu_qp_t qp[EMU_QPS];       /* QPN = index + 1 */
    emu_cq_t cq[EMU_CQS];
} emu_fabric_t;

#define EMU_DEVS 4
typedef struct emu_dev {
    struct ibv_device dev[EMU_DEVS];
    struct ibv_device *list[EMU_DEVS + 1];
} emu_dev_t;

typedef struct emu_cq_h { struct ibv_cq cq; int idx; } emu_cq_h_t;
/* A send WR held back in WEFT_IBEMU_LAG mode, with its pieces. */
typedef struct emu_pend { struct ibv_send_wr wr; struct ibv_sge sg[EMU_SGE]; } emu_pend_t;
#define EMU_PEND 256
typedef struct emu_qp_h {
    struct ibv_qp qp;
    int idx;
    int nth;                    /* QPs on its send CQ made before it (lag: its pace) */
    uint32_t pend_head, pend_tail;
    emu_pend_t pend[EMU_PEND];  /* WEFT_IBEMU_LAG: posted, not yet run */
} emu_qp_h_t;

/* WEFT_IBEMU_LAG=1: a send WR does not run when it is posted but when this process later
 * polls a CQ, a QP's WRs in order, one per poll on the first QP of a send CQ, one per 64
 * polls on the second, per 4096 on the others, as QPs on real hardware move at their own
 * pace: a QP destroyed with WRs still held loses them (as hardware does). For the close
 * tests: a transport must wait for every QP's WRs, not one QP's. This process's QPs: */
static int lag_on = -1;
static emu_qp_h_t *lag_qps[EMU_QPS];
static int nlag_qps;
static uint64_t lag_tick;

static emu_fabric_t *fab;
/* This process's pid: getpid() is a system call, and the emulator asked it several
 * times per WR. Reset in a forked child. */
static int32_t self_pid;
static void self_pid_reset(void) { self_pid = 0; }
static int32_t me(void)
{
    if (self_pid == 0)
        self_pid = (int32_t)getpid();
    return self_pid;
}

static emu_dev_t edev;
static pthread_once_t fab_once = PTHREAD_ONCE_INIT;

static void fabric_open(void)
{
    char name[128];
    const char *env = getenv("WEFT_IBEMU_FABRIC");
    if (env && *env)
        snprintf(name, sizeof(name), "%s", env);
    else
        snprintf(name, sizeof(name), "/weft_ibemu.%u", (unsigned)getuid());
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0)
        return;
    /* the first to take the file lock initializes; a size means it is done */
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
    while (fcntl(fd, F_SETLKW, &fl) < 0 && errno == EINTR)
        ;
    if (lseek(fd, 0, SEEK_END) != (off_t)sizeof(emu_fabric_t) &&
        ftruncate(fd, sizeof(emu_fabric_t)) < 0) {
        close(fd);
        return;
    }
    emu_fabric_t *f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (f != MAP_FAILED && (f->magic != EMU_MAGIC || f->version != EMU_VERSION)) {
        memset(f, 0, sizeof(*f));
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&f->lock, &a);
        f->version = EMU_VERSION;
        __atomic_store_n(&f->magic, EMU_MAGIC, __ATOMIC_RELEASE);
    }
    fl.l_type = F_UNLCK;
    fcntl(fd, F_SETLK, &fl);
    close(fd);
    if (f != MAP_FAILED)
        fab = f;
    pthread_atfork(NULL, NULL, self_pid_reset);
}

/* Takes the fabric lock. A robust mutex recovers from a holder that dies, but not from
 * a waiter that dies after an unlock woke it and before it took the lock: that wakeup is
 * lost, and the next waiter sleeps on a free mutex until someone else unlocks (seen in
 * the fault tests as a survivor stuck here for seconds after a rank was SIGKILLed). So
 * every wait is bounded by 5 ms and retried: a lost wakeup costs at most that. */
static void lock(void)
{
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_nsec += 5000000;
        if (t.tv_nsec >= 1000000000) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000;
        }
        int rc = pthread_mutex_clocklock(&fab->lock, CLOCK_MONOTONIC, &t);
        if (rc == ETIMEDOUT)
            continue;
        if (rc == EOWNERDEAD)   /* a process died holding it */
            pthread_mutex_consistent(&fab->lock);
        return;
    }
}

static void unlock(void) { pthread_mutex_unlock(&fab->lock); }

/* Whether pid still runs (a zombie does not: its memory is gone). Reading
 * /proc/PID/stat on every WR was a fifth of the emulated tests' time, so a process seen
 * running is taken as running for the next millisecond (PID_FRESH_NS): a death is seen
 * that much later, and a WR that moves bytes into a dead process fails anyway (xfer).
 * The caller holds the lock. */
#define PID_FRESH_NS 1000000
#define PID_SEEN 16
static struct { int32_t pid; int64_t at; } pid_seen[PID_SEEN];
static unsigned pid_seen_next;

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int pid_running(int32_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

static int pid_alive(int32_t pid)
{
    if (pid == me())
        return 1;
    int64_t t = now_ns();
    for (int i = 0; i < PID_SEEN; i++)
        if (pid_seen[i].pid == pid) {
            if (t - pid_seen[i].at < PID_FRESH_NS)
                return 1;
            pid_seen[i].pid = 0;
            break;
        }
    if (!pid_running(pid))
        return 0;
    unsigned k = pid_seen_next++ % PID_SEEN;
    pid_seen[k].pid = pid;
    pid_seen[k].at = t;
    return 1;
}

/* A free entry (pid 0, or its pid gone); the caller holds the lock. */
#define FIND_FREE(arr, n, out)                                                   \
    do {                                                                         \
        out = -1;                                                                \
        for (int i_ = 0; i_ < (n); i_++)                                         \
            if (fab->arr[i_].pid == 0 || !pid_alive(fab->arr[i_].pid)) {         \
                out = i_;                                                        \
                break;                                                           \
            }                                                                    \
    } while (0)

/* ---- device, PD ---- */

static struct ibv_device **emu_get_device_list(int *num)
{
    pthread_once(&fab_once, fabric_open);
    if (fab == NULL) {
        if (num)
            *num = 0;
        errno = ENODEV;
        return NULL;
    }
    /* WEFT_IBEMU_DEVICES: names of the devices (comma-separated, at most 4), all on the
     * one fabric; default one, weftemu0 */
    const char *names = getenv("WEFT_IBEMU_DEVICES");
    char buf[4 * IBV_SYSFS_NAME_MAX];
    snprintf(buf, sizeof(buf), "%s", names && *names ? names : "weftemu0");
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < EMU_DEVS;
         t = strtok_r(NULL, ",", &save), n++) {
        struct ibv_device *d = &edev.dev[n];
        snprintf(d->name, sizeof(d->name), "%s", t);
        snprintf(d->dev_name, sizeof(d->dev_name), "uverbs%d", n);
        /* other kinds by name, as their providers report them: efa* (AWS EFA: no RC)
         * and iwarp* (iWARP: QPs connected through rdma_cm) */
        d->node_type = !strncmp(t, "efa", 3) ? IBV_NODE_UNSPECIFIED :
                       !strncmp(t, "iwarp", 5) ? IBV_NODE_RNIC : IBV_NODE_CA;
        d->transport_type = !strncmp(t, "efa", 3) ? IBV_TRANSPORT_UNSPECIFIED :
                            !strncmp(t, "iwarp", 5) ? IBV_TRANSPORT_IWARP : IBV_TRANSPORT_IB;
        edev.list[n] = d;
    }
    edev.list[n] = NULL;
    if (num)
        *num = n;
    return edev.list;
}

static void emu_free_device_list(struct ibv_device **l) { (void)l; }
static const char *emu_get_device_name(struct ibv_device *d) { return d->name; }

static struct ibv_context *emu_open_device(struct ibv_device *d)
{
    struct ibv_context *c = calloc(1, sizeof(*c));
    if (c)
        c->device = d;
    return c;
}

static int emu_close_device(struct ibv_context *c) { free(c); return 0; }

static int emu_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
    (void)c;
    if (port != 1)
        return EINVAL;
    memset(a, 0, sizeof(*a));
    a->state = IBV_PORT_ACTIVE;
    a->max_mtu = a->active_mtu = IBV_MTU_4096;
    a->lid = 1;
    a->link_layer = !strncmp(c->device->name, "efa", 3) ? IBV_LINK_LAYER_UNSPECIFIED :
                    !strncmp(c->device->name, "iwarp", 5) ? IBV_LINK_LAYER_ETHERNET :
                    IBV_LINK_LAYER_INFINIBAND;
    if (a->link_layer != IBV_LINK_LAYER_INFINIBAND)
        a->lid = 0;
    a->gid_tbl_len = 1;
    a->max_msg_sz = 1u << 31;
    return 0;
}

static int emu_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *g)
{
    (void)c;
    if (port != 1 || index != 0)
        return EINVAL;
    memset(g, 0, sizeof(*g));
    g->raw[0] = 0xfe;
    g->raw[1] = 0x80;
    g->raw[15] = 1;
    return 0;
}

static struct ibv_pd *emu_alloc_pd(struct ibv_context *c)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));
    if (pd)
        pd->context = c;
    return pd;
}

static int emu_dealloc_pd(struct ibv_pd *pd) { free(pd); return 0; }

/* ---- MR ---- */

/* Whether every page of [addr, addr+len) is mapped, and writable where `write` (from
 * /proc/self/maps): pinning pages for writing fails on read-only memory, as the kernel's
 * does under ibv_reg_mr (EFAULT). */
static int pages_ok(uintptr_t addr, size_t len, int write)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return 1;               /* cannot tell: as before */
    uintptr_t at = addr, end = addr + len;
    char line[512];
    while (at < end && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        char perm[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) != 3 || hi <= at || lo > at)
            continue;           /* (the file lists mappings in address order) */
        if (perm[0] != 'r' || (write && perm[1] != 'w'))
            break;
        at = hi;
    }
    fclose(f);
    return at >= end;
}

/* This process's registered bytes, now and at most (WEFT_IBEMU_REPORT=1 prints the
 * peak at exit: what a real HCA would have pinned). Under the fabric's lock. */
static size_t reg_now, reg_peak;

__attribute__((destructor)) static void reg_report(void)
{
    const char *r = getenv("WEFT_IBEMU_REPORT");
    if (r && *r == '1' && reg_peak)
        fprintf(stderr, "ibemu: pid %d: at most %zu bytes registered at once\n",
                (int)getpid(), reg_peak);
}

static struct ibv_mr *emu_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    /* verbs: remote write (or atomics) needs local write too */
    if (len == 0 || addr == NULL ||
        ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
        errno = EINVAL;
        return NULL;
    }
    /* WEFT_IBEMU_MR_MAX=BYTES: a larger registration fails as one over the pinned memory
     * limit (RLIMIT_MEMLOCK) does */
    const char *mx = getenv("WEFT_IBEMU_MR_MAX");
    if (mx && *mx && len > strtoull(mx, NULL, 0)) {
        errno = ENOMEM;
        return NULL;
    }
    if (!pages_ok((uintptr_t)addr, len,
                  access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))) {
        errno = EFAULT;
        return NULL;
    }
    struct ibv_mr *mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return NULL;
    lock();
    int i;
    FIND_FREE(mr, EMU_MRS, i);
    if (i < 0) {
        unlock();
        free(mr);
        errno = ENOMEM;
        return NULL;
    }
    uint32_t key = (uint32_t)i | ((++fab->gen & 0xffffu) << 16);
    fab->mr[i] = (emu_mr_t){ .pid = me(), .key = key, .addr = (uintptr_t)addr,
                             .len = len, .access = access };
    reg_now += len;
    if (reg_now > reg_peak)
        reg_peak = reg_now;
    unlock();
    mr->context = pd->context;
    mr->pd = pd;
    mr->addr = addr;
    mr->length = len;
    mr->handle = (uint32_t)i;
    mr->lkey = mr->rkey = key;
    return mr;
}

static int emu_dereg_mr(struct ibv_mr *mr)
{
    lock();
    emu_mr_t *m = &fab->mr[mr->handle];
    if (m->pid == me() && m->key == mr->lkey) {
        m->pid = 0;
        reg_now -= mr->length;
    }
    unlock();
    free(mr);
    return 0;
}

/* The MR of pid that key names and that covers [addr, addr+len) with access `need`. */
static int mr_check(int32_t pid, uint32_t key, uint64_t addr, uint64_t len, int need)
{
    emu_mr_t *m = &fab->mr[key & 0xffffu];
    if ((key & 0xffffu) >= EMU_MRS || m->pid != pid || m->key != key)
        return 0;
    if (addr < m->addr || len > m->len || addr - m->addr > m->len - len)
        return 0;
    return (m->access & need) == need;
}

/* ---- CQ ---- */

static struct ibv_cq *emu_create_cq(struct ibv_context *c, int cqe, void *cq_ctx,
                                    struct ibv_comp_channel *ch, int vector)
{
    (void)ch, (void)vector;
    if (cqe <= 0 || cqe > EMU_CQE - 1) {
        errno = EINVAL;
        return NULL;
    }
    emu_cq_h_t *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    lock();
    int i;
    FIND_FREE(cq, EMU_CQS, i);
    if (i < 0) {
        unlock();
        free(h);
        errno = ENOMEM;
        return NULL;
    }
    emu_cq_t *q = &fab->cq[i];
    q->pid = me();
    q->cqe = (uint32_t)cqe;
    q->head = q->tail = 0;
    unlock();
    h->idx = i;
    h->cq.context = c;
    h->cq.cq_context = cq_ctx;
    h->cq.cqe = cqe;
    return &h->cq;
}

static int emu_destroy_cq(struct ibv_cq *cq)
{
    emu_cq_h_t *h = (emu_cq_h_t *)cq;
    lock();
    if (fab->cq[h->idx].pid == me())
        fab->cq[h->idx].pid = 0;
    unlock();
    free(h);
    return 0;
}

static void qp_to_err(emu_qp_t *q);
static void lag_run(void);

/* Posts a completion; a full CQ is an overrun, which moves the QP to ERR (as the
 * hardware's CQ error does), reported on stderr since nothing else would see it. */
static void cq_push(int cqi, emu_qp_t *q, const struct ibv_wc *wc, uint32_t retire)
{
    emu_cq_t *c = &fab->cq[cqi];
    if (c->tail - c->head >= c->cqe) {
        fprintf(stderr, "ibemu: CQ overrun (%u entries) on QP %u\n", c->cqe, wc->qp_num);
        if (q->state != IBV_QPS_ERR)
            qp_to_err(q);
        return;
    }
    c->wc[c->tail % EMU_CQE] = *wc;
    c->retire[c->tail % EMU_CQE] = retire;
    c->tail++;
}

static int emu_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    emu_cq_h_t *h = (emu_cq_h_t *)cq;
    lock();
    if (lag_on)
        lag_run();
    emu_cq_t *c = &fab->cq[h->idx];
    int got = 0;
    while (got < n && c->head != c->tail) {
        wc[got] = c->wc[c->head % EMU_CQE];
        /* verbs: an error completion's opcode is undefined (only wr_id, status, qp_num
         * and vendor_err are); mlx5 leaves it unset. Hand the other class (a receive's
         * as a send's and back), so that a reader relying on it goes wrong here too. */
        if (wc[got].status != IBV_WC_SUCCESS)
            wc[got].opcode = (enum ibv_wc_opcode)(wc[got].opcode ^ IBV_WC_RECV);
        uint32_t r = c->retire[c->head % EMU_CQE];
        if (r) {
            emu_qp_t *q = &fab->qp[wc[got].qp_num - 1];
            q->sq_used = q->sq_used >= r ? q->sq_used - r : 0;
        }
        c->head++;
        got++;
    }
    unlock();
    return got;
}

/* ---- QP ---- */

static struct ibv_qp *emu_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
    if (a->qp_type != IBV_QPT_RC || a->send_cq == NULL || a->recv_cq == NULL ||
        a->cap.max_recv_wr > EMU_RQ || a->cap.max_send_wr == 0 ||
        a->cap.max_send_sge > EMU_SGE || a->cap.max_recv_sge > 1) {
        errno = EINVAL;
        return NULL;
    }
    emu_qp_h_t *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    lock();
    int i;
    FIND_FREE(qp, EMU_QPS, i);
    if (i < 0) {
        unlock();
        free(h);
        errno = ENOMEM;
        return NULL;
    }
    emu_qp_t *q = &fab->qp[i];
    memset(q, 0, offsetof(emu_qp_t, rq));
    q->pid = me();
    q->state = IBV_QPS_RESET;
    q->send_cq = ((emu_cq_h_t *)a->send_cq)->idx;
    q->recv_cq = ((emu_cq_h_t *)a->recv_cq)->idx;
    q->max_send_wr = a->cap.max_send_wr;
    q->max_send_sge = a->cap.max_send_sge ? a->cap.max_send_sge : 1;
    q->max_recv_wr = a->cap.max_recv_wr;
    q->sq_sig_all = (uint32_t)a->sq_sig_all;
    if (lag_on < 0) {
        const char *lag = getenv("WEFT_IBEMU_LAG");
        lag_on = lag && *lag && strcmp(lag, "0") != 0;
    }
    for (int k = 0; k < nlag_qps; k++)
        h->nth += lag_qps[k]->qp.send_cq == a->send_cq;
    if (nlag_qps < EMU_QPS)
        lag_qps[nlag_qps++] = h;
    unlock();
    h->idx = i;
    h->qp.context = pd->context;
    h->qp.pd = pd;
    h->qp.qp_context = a->qp_context;
    h->qp.send_cq = a->send_cq;
    h->qp.recv_cq = a->recv_cq;
    h->qp.qp_num = (uint32_t)i + 1;
    h->qp.qp_type = IBV_QPT_RC;
    h->qp.state = IBV_QPS_RESET;
    return &h->qp;
}

/* Moves q to ERR: every posted receive completes with a flush error. Lock held. */
static void qp_to_err(emu_qp_t *q)
{
    q->state = IBV_QPS_ERR;
    uint32_t qpn = (uint32_t)(q - fab->qp) + 1;
    while (q->rq_head != q->rq_tail) {
        emu_rwqe_t *r = &q->rq[q->rq_head++ % EMU_RQ];
        struct ibv_wc wc = { .wr_id = r->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
                             .opcode = IBV_WC_RECV, .qp_num = qpn };
        emu_cq_t *c = &fab->cq[q->recv_cq];
        if (c->tail - c->head < c->cqe) {
            c->wc[c->tail % EMU_CQE] = wc;
            c->retire[c->tail++ % EMU_CQE] = 0;
        }
    }
}

static int emu_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
    emu_qp_h_t *h = (emu_qp_h_t *)qp;
    int rc = 0;
    lock();
    emu_qp_t *q = &fab->qp[h->idx];
    int to = (mask & IBV_QP_STATE) ? (int)a->qp_state : q->state;
    int from = q->state;
    if (to == IBV_QPS_ERR) {
        qp_to_err(q);
    } else if (to == IBV_QPS_RESET) {
        q->state = IBV_QPS_RESET;
        q->rq_head = q->rq_tail = 0;
        q->sq_used = q->sq_since = 0;
    } else if (to == IBV_QPS_INIT && (from == IBV_QPS_RESET || from == IBV_QPS_INIT)) {
        if (from == IBV_QPS_RESET &&
            (mask & (IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX)) !=
                (IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX))
            rc = EINVAL;
        else if (mask & IBV_QP_PORT && a->port_num != 1)
            rc = EINVAL;
        else if (mask & IBV_QP_PKEY_INDEX && a->pkey_index != 0)
            rc = EINVAL;            /* the port's pkey table has one entry */
        else {
            if (mask & IBV_QP_ACCESS_FLAGS)
                q->access = (int32_t)a->qp_access_flags;
            q->state = IBV_QPS_INIT;
        }
    } else if (to == IBV_QPS_RTR && from == IBV_QPS_INIT) {
        int need = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        if ((mask & need) != need || a->dest_qp_num == 0 || a->dest_qp_num > EMU_QPS)
            rc = EINVAL;
        else {
            q->dest_qpn = a->dest_qp_num;
            q->state = IBV_QPS_RTR;
        }
    } else if (to == IBV_QPS_RTS && (from == IBV_QPS_RTR || from == IBV_QPS_RTS)) {
        int need = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                   IBV_QP_MAX_QP_RD_ATOMIC;
        if (from == IBV_QPS_RTR && (mask & need) != need)
            rc = EINVAL;
        else
            q->state = IBV_QPS_RTS;
    } else if (to != from) {
        rc = EINVAL;
    }
    if (rc == 0)
        qp->state = (enum ibv_qp_state)q->state;
    unlock();
    return rc;
}

static int emu_destroy_qp(struct ibv_qp *qp)
{
    emu_qp_h_t *h = (emu_qp_h_t *)qp;
    lock();
    if (fab->qp[h->idx].pid == me()) {
        fab->qp[h->idx].pid = 0;
        fab->qp[h->idx].state = IBV_QPS_RESET;
    }
    for (int k = 0; k < nlag_qps; k++)      /* WRs still held are lost, as on hardware */
        if (lag_qps[k] == h) {
            lag_qps[k] = lag_qps[--nlag_qps];
            break;
        }
    unlock();
    free(h);
    return 0;
}

static int emu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    emu_qp_h_t *h = (emu_qp_h_t *)qp;
    int rc = 0;
    lock();
    emu_qp_t *q = &fab->qp[h->idx];
    for (; wr; wr = wr->next) {
        if (q->state == IBV_QPS_RESET || wr->num_sge > 1) {
            rc = EINVAL;
            break;
        }
        if (q->rq_tail - q->rq_head >= q->max_recv_wr) {
            rc = ENOMEM;
            break;
        }
        emu_rwqe_t r = { .wr_id = wr->wr_id };
        if (wr->num_sge == 1)
            r = (emu_rwqe_t){ wr->wr_id, wr->sg_list[0].addr, wr->sg_list[0].length,
                              wr->sg_list[0].lkey };
        if (q->state == IBV_QPS_ERR) {      /* posted into ERR: flushed at once */
            struct ibv_wc wc = { .wr_id = wr->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
                                 .opcode = IBV_WC_RECV, .qp_num = qp->qp_num };
            cq_push(q->recv_cq, q, &wc, 0);
            continue;
        }
        q->rq[q->rq_tail++ % EMU_RQ] = r;
    }
    unlock();
    if (rc && bad)
        *bad = wr;
    return rc;
}

/* Copies len bytes between this process and pid (to: into pid's memory). */
static int xfer(int32_t pid, int to, uint64_t local, uint64_t remote, size_t len)
{
    if (len == 0)
        return 0;
    if (pid == me()) {
        if (to)
            memmove((void *)(uintptr_t)remote, (void *)(uintptr_t)local, len);
        else
            memmove((void *)(uintptr_t)local, (void *)(uintptr_t)remote, len);
        return 0;
    }
    struct iovec l = { (void *)(uintptr_t)local, len }, r = { (void *)(uintptr_t)remote, len };
    ssize_t n = to ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                   : process_vm_readv(pid, &l, 1, &r, 1, 0);
    return n == (ssize_t)len ? 0 : -1;
}

/* xfer of a WR's pieces to (from) consecutive bytes from remote on. */
static int xfer_sg(int32_t pid, int to, const struct ibv_send_wr *wr, uint64_t remote)
{
    for (int k = 0; k < wr->num_sge; k++) {
        if (xfer(pid, to, wr->sg_list[k].addr, remote, wr->sg_list[k].length) < 0)
            return -1;
        remote += wr->sg_list[k].length;
    }
    return 0;
}

static enum ibv_wc_opcode send_wc_opcode(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_SEND: case IBV_WR_SEND_WITH_IMM: return IBV_WC_SEND;
    default: return IBV_WC_RDMA_WRITE;
    }
}

/* Executes one WR on q (RTS): the status of its completion. Lock held. */
static enum ibv_wc_status execute(emu_qp_t *q, uint32_t qpn, struct ibv_send_wr *wr,
                                  uint32_t *byte_len)
{
    /* the local pieces, gathered (written: scattered for a read) in order */
    uint64_t len = 0;
    int need_local = wr->opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0;
    for (int k = 0; k < wr->num_sge; k++) {
        const struct ibv_sge *g = &wr->sg_list[k];
        if (g->length && !mr_check(me(), g->lkey, g->addr, g->length, need_local))
            return IBV_WC_LOC_PROT_ERR;
        len += g->length;
    }
    *byte_len = (uint32_t)len;
    emu_qp_t *d = q->dest_qpn ? &fab->qp[q->dest_qpn - 1] : NULL;
    /* no answer from the other end: the requester retries, then gives up */
    if (d == NULL || d->pid == 0 || !pid_alive(d->pid) || d->dest_qpn != qpn ||
        (d->state != IBV_QPS_RTR && d->state != IBV_QPS_RTS))
        return IBV_WC_RETRY_EXC_ERR;
    switch (wr->opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ: {
        int read = wr->opcode == IBV_WR_RDMA_READ;
        int need = read ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
        if ((d->access & need) != need ||
            (len && !mr_check(d->pid, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, len, need))) {
            qp_to_err(d);       /* the responder's QP fails too */
            return IBV_WC_REM_ACCESS_ERR;
        }
        emu_rwqe_t *r = NULL;
        if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
            if (d->rq_head == d->rq_tail)
                return IBV_WC_RNR_RETRY_EXC_ERR;
            r = &d->rq[d->rq_head % EMU_RQ];
        }
        if (xfer_sg(d->pid, !read, wr, wr->wr.rdma.remote_addr) < 0)
            return IBV_WC_RETRY_EXC_ERR;    /* it went while we wrote */
        if (r) {
            d->rq_head++;
            struct ibv_wc wc = { .wr_id = r->wr_id, .status = IBV_WC_SUCCESS,
                                 .opcode = IBV_WC_RECV_RDMA_WITH_IMM, .byte_len = (uint32_t)len,
                                 .imm_data = wr->imm_data, .qp_num = q->dest_qpn,
                                 .src_qp = qpn, .wc_flags = IBV_WC_WITH_IMM };
            cq_push(d->recv_cq, d, &wc, 0);
        }
        return IBV_WC_SUCCESS;
    }
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM: {
        if (d->rq_head == d->rq_tail)
            return IBV_WC_RNR_RETRY_EXC_ERR;
        emu_rwqe_t *r = &d->rq[d->rq_head++ % EMU_RQ];
        struct ibv_wc wc = { .wr_id = r->wr_id, .opcode = IBV_WC_RECV, .byte_len = (uint32_t)len,
                             .qp_num = q->dest_qpn, .src_qp = qpn };
        if (wr->opcode == IBV_WR_SEND_WITH_IMM) {
            wc.imm_data = wr->imm_data;
            wc.wc_flags = IBV_WC_WITH_IMM;
        }
        enum ibv_wc_status st = IBV_WC_SUCCESS;
        if (len > r->len) {
            wc.status = IBV_WC_LOC_LEN_ERR;
            st = IBV_WC_REM_INV_REQ_ERR;
        } else if (len && !mr_check(d->pid, r->lkey, r->addr, len, IBV_ACCESS_LOCAL_WRITE)) {
            wc.status = IBV_WC_LOC_PROT_ERR;
            st = IBV_WC_REM_OP_ERR;
        } else if (xfer_sg(d->pid, 1, wr, r->addr) < 0) {
            return IBV_WC_RETRY_EXC_ERR;
        }
        cq_push(d->recv_cq, d, &wc, 0);
        if (wc.status != IBV_WC_SUCCESS)
            qp_to_err(d);
        return st;
    }
    default:
        return IBV_WC_LOC_QP_OP_ERR;
    }
}

/* Runs one send WR on q and posts its completion (where signaled, or failed). Lock held. */
static void run_wr(emu_qp_t *q, uint32_t qpn, struct ibv_send_wr *wr)
{
    q->sq_since++;
    struct ibv_wc wc = { .wr_id = wr->wr_id, .opcode = send_wc_opcode(wr->opcode),
                         .qp_num = qpn };
    if (q->state == IBV_QPS_ERR)
        wc.status = IBV_WC_WR_FLUSH_ERR;
    else
        wc.status = execute(q, qpn, wr, &wc.byte_len);
    if (wc.status != IBV_WC_SUCCESS || (wr->send_flags & IBV_SEND_SIGNALED) || q->sq_sig_all) {
        cq_push(q->send_cq, q, &wc, q->sq_since);   /* retired once polled */
        q->sq_since = 0;
    }
    /* the failed WR's completion first, then the flushes of what is posted */
    if (wc.status != IBV_WC_SUCCESS && q->state != IBV_QPS_ERR)
        qp_to_err(q);
}

/* WEFT_IBEMU_LAG: runs this process's held WRs at each QP's pace (see lag_on). Lock held. */
static void lag_run(void)
{
    lag_tick++;
    for (int i = 0; i < nlag_qps; i++) {
        emu_qp_h_t *h = lag_qps[i];
        if (h->pend_head == h->pend_tail ||
            lag_tick % (1ull << (6 * (h->nth < 2 ? h->nth : 2))) != 0)
            continue;
        emu_pend_t *pw = &h->pend[h->pend_head++ % EMU_PEND];
        run_wr(&fab->qp[h->idx], h->qp.qp_num, &pw->wr);
    }
}

static int emu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    emu_qp_h_t *h = (emu_qp_h_t *)qp;
    int rc = 0;
    lock();
    emu_qp_t *q = &fab->qp[h->idx];
    for (; wr; wr = wr->next) {
        if (q->state != IBV_QPS_RTS && q->state != IBV_QPS_ERR) {
            rc = EINVAL;
            break;
        }
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_send_sge) {
            rc = EINVAL;                        /* more pieces than the QP was made for */
            break;
        }
        if (q->sq_used >= q->max_send_wr) {     /* full: nothing signaled was polled */
            rc = ENOMEM;
            break;
        }
        if (lag_on && h->pend_tail - h->pend_head >= EMU_PEND) {
            rc = ENOMEM;
            break;
        }
        q->sq_used++;
        if (lag_on) {           /* held: run by a later poll (lag_run) */
            emu_pend_t *pw = &h->pend[h->pend_tail++ % EMU_PEND];
            pw->wr = *wr;
            pw->wr.next = NULL;
            memcpy(pw->sg, wr->sg_list, (size_t)wr->num_sge * sizeof(*pw->sg));
            pw->wr.sg_list = pw->sg;
            continue;
        }
        run_wr(q, qp->qp_num, wr);
    }
    unlock();
    if (rc && bad)
        *bad = wr;
    return rc;
}

static const char *emu_wc_status_str(enum ibv_wc_status s)
{
    static const char *names[] = {
        [IBV_WC_SUCCESS] = "success", [IBV_WC_LOC_LEN_ERR] = "local length error",
        [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
        [IBV_WC_LOC_PROT_ERR] = "local protection error",
        [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
        [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR] = "remote access error",
        [IBV_WC_REM_OP_ERR] = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
    };
    return (unsigned)s < sizeof(names) / sizeof(names[0]) && names[s] ? names[s] : "unknown";
}

const ib_verbs_t weft_ib_verbs = {
    .abi = IB_VERBS_ABI,
    .provider = "weft verbs emulator (libweft_ibemu.so)",
    .get_device_list = emu_get_device_list,
    .free_device_list = emu_free_device_list,
    .get_device_name = emu_get_device_name,
    .open_device = emu_open_device,
    .close_device = emu_close_device,
    .query_port = emu_query_port,
    .query_gid = emu_query_gid,
    .alloc_pd = emu_alloc_pd,
    .dealloc_pd = emu_dealloc_pd,
    .reg_mr = emu_reg_mr,
    .dereg_mr = emu_dereg_mr,
    .create_cq = emu_create_cq,
    .destroy_cq = emu_destroy_cq,
    .create_qp = emu_create_qp,
    .modify_qp = emu_modify_qp,
    .destroy_qp = emu_destroy_qp,
    .post_send = emu_post_send,
    .post_recv = emu_post_recv,
    .poll_cq = emu_poll_cq,
    .wc_status_str = emu_wc_status_str,
};
