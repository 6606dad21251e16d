/*
 * test_ibemu.c - weft's verbs emulator (tests/ibemu/) makes the checks an RDMA device
 * makes, across two processes: the ib transport's tests are only as honest as it is.
 *
 *   build/tests/test_ibemu       (standalone; loads ../lib/libweft_ibemu.so beside it)
 *
 * The parent's QPs A1, A2 are connected to the child's B1, B2 (the child owns a 4 KB
 * registered buffer and posts one receive on B1). Checked: a post on a QP in RESET is
 * refused; a WR with more pieces than the QP's max_send_sge is refused; an RDMA_WRITE
 * that gathers two pieces lands in the child's memory, in order; WRITE_WITH_IMM consumes the child's
 * receive and completes there with the immediate; RDMA_READ reads the child's memory;
 * unsignaled WRs hold the send queue until a signaled completion is polled (ENOMEM
 * before); a WRITE_WITH_IMM with no receive posted fails with RNR retry exceeded and
 * moves the QP to ERR, where the next WR is flushed; a write past the MR's end and a
 * wrong rkey fail with a remote access error and change no byte; a QP whose peer process
 * is gone fails with retry exceeded. Bounded by alarm(); exits 0 when every check passed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ib/ib_verbs.h"

static const ib_verbs_t *v;
static int checks, fails;

static void check(int ok, const char *what)
{
    checks++;
    if (!ok) {
        fails++;
        printf("FAIL %s\n", what);
    }
}

typedef struct info {
    uint32_t qpn[2];
    uint64_t addr;
    uint32_t rkey;
} info_t;

typedef struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp[2];
} side_t;

static void open_side(side_t *s, int sq)
{
    int n;
    struct ibv_device **l = v->get_device_list(&n);
    s->ctx = l && n > 0 ? v->open_device(l[0]) : NULL;
    s->pd = s->ctx ? v->alloc_pd(s->ctx) : NULL;
    s->cq = s->pd ? v->create_cq(s->ctx, 256, NULL, NULL, 0) : NULL;
    for (int i = 0; i < 2 && s->cq; i++) {
        struct ibv_qp_init_attr ia = { .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
                                       .cap = { .max_send_wr = (uint32_t)sq, .max_recv_wr = 4,
                                                .max_send_sge = 2, .max_recv_sge = 1 } };
        s->qp[i] = v->create_qp(s->pd, &ia);
    }
    if (!s->qp[0] || !s->qp[1]) {
        printf("FAIL emulator setup\n");
        exit(1);
    }
}

static void close_side(side_t *s, struct ibv_mr *mr, void *buf)
{
    v->dereg_mr(mr);
    free(buf);
    for (int i = 0; i < 2; i++)
        v->destroy_qp(s->qp[i]);
    v->destroy_cq(s->cq);
    v->dealloc_pd(s->pd);
    v->close_device(s->ctx);
}

static int to_init(struct ibv_qp *qp)
{
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
                             .qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
                                 IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
    return v->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                        IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct ibv_qp *qp, uint32_t dest)
{
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096,
                             .dest_qp_num = dest, .max_dest_rd_atomic = 1,
                             .min_rnr_timer = 12, .ah_attr = { .dlid = 1, .port_num = 1 } };
    return v->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                        IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ibv_qp *qp)
{
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
                             .rnr_retry = 0, .max_rd_atomic = 1 };
    return v->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, void *buf, struct ibv_mr *mr,
                size_t len, uint64_t raddr, uint32_t rkey, int sig, uint64_t id)
{
    struct ibv_sge sge = { (uintptr_t)buf, (uint32_t)len, mr ? mr->lkey : 0 };
    struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = len ? 1 : 0,
                              .opcode = op, .send_flags = sig ? IBV_SEND_SIGNALED : 0,
                              .imm_data = 0xabcd1234, .wr.rdma = { raddr, rkey } }, *bad;
    return v->post_send(qp, &wr, &bad);
}

/* The next completion (1 s at most): its status, -1 when none came. */
static int next_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
    for (int i = 0; i < 100000; i++) {
        if (v->poll_cq(cq, 1, wc) == 1)
            return (int)wc->status;
        usleep(10);
    }
    return -1;
}

static void xread(int fd, void *p, size_t n) { if (read(fd, p, n) != (ssize_t)n) exit(1); }
static void xwrite(int fd, const void *p, size_t n) { if (write(fd, p, n) != (ssize_t)n) exit(1); }

/* The child: owns the target memory and B1, B2; answers "check" with its verdict. */
static int child(int rfd, int wfd)
{
    side_t s = { 0 };
    open_side(&s, 16);
    char *buf = aligned_alloc(4096, 4096);
    memset(buf, 0, 4096);
    struct ibv_mr *mr = v->reg_mr(s.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE |
                                  IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    strcpy(buf + 1024, "read me");
    info_t me = { { s.qp[0]->qp_num, s.qp[1]->qp_num }, (uintptr_t)buf, mr->rkey }, peer;
    for (int i = 0; i < 2; i++)
        to_init(s.qp[i]);
    struct ibv_recv_wr rw = { .wr_id = 77 }, *bad;
    v->post_recv(s.qp[0], &rw, &bad);
    xwrite(wfd, &me, sizeof(me));
    xread(rfd, &peer, sizeof(peer));
    int ok = 1;
    for (int i = 0; i < 2; i++)
        ok &= to_rtr(s.qp[i], peer.qpn[i]) == 0;
    xwrite(wfd, &ok, sizeof(ok));
    char cmd;
    xread(rfd, &cmd, 1);    /* the parent is done writing */
    struct ibv_wc wc;
    int verdict = 0;
    if (strcmp(buf, "hello") != 0)
        verdict |= 1;       /* the gathered write did not land, or out of order */
    if (next_wc(s.cq, &wc) != IBV_WC_SUCCESS || wc.wr_id != 77 ||
        wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || wc.imm_data != 0xabcd1234 ||
        !(wc.wc_flags & IBV_WC_WITH_IMM) || wc.byte_len != 6)
        verdict |= 2;       /* no receive completion with the immediate */
    for (int i = 4096 - 8; i < 4096; i++)
        if (buf[i] != 0)
            verdict |= 4;   /* the refused writes changed memory */
    xwrite(wfd, &verdict, sizeof(verdict));
    close_side(&s, mr, buf);
    return 0;               /* exits: its QPs are gone */
}

int main(int argc, char **argv)
{
    char exe[PATH_MAX], lib[PATH_MAX + 32], fabric[64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return 1;
    exe[n] = '\0';
    snprintf(lib, sizeof(lib), "%s/../lib/libweft_ibemu.so", dirname(exe));
    snprintf(fabric, sizeof(fabric), "/weft_ibemu.test.%d", (int)getpid());
    setenv("WEFT_IBEMU_FABRIC", fabric, 1);
    alarm(30);
    void *h = dlopen(lib, RTLD_NOW);
    v = h ? dlsym(h, "weft_ib_verbs") : NULL;
    if (v == NULL || v->abi != IB_VERBS_ABI) {
        printf("FAIL cannot load the emulator %s: %s\n", lib, h ? "no table" : dlerror());
        return 1;
    }
    int down[2], up[2];
    if (pipe(down) || pipe(up))
        return 1;
    pid_t pid = fork();
    if (pid == 0)
        return child(down[0], up[1]);
    side_t s = { 0 };
    open_side(&s, 8);
    char *buf = aligned_alloc(4096, 4096);
    memset(buf, 0, 4096);
    struct ibv_mr *mr = v->reg_mr(s.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    info_t peer, me = { { s.qp[0]->qp_num, s.qp[1]->qp_num }, 0, 0 };
    xread(up[0], &peer, sizeof(peer));
    check(post(s.qp[0], IBV_WR_RDMA_WRITE, buf, mr, 8, peer.addr, peer.rkey, 1, 1) != 0,
          "a post on a QP in RESET is refused");
    check(to_rtr(s.qp[0], peer.qpn[0]) != 0, "RESET -> RTR is refused");
    for (int i = 0; i < 2; i++)
        check(to_init(s.qp[i]) == 0 && to_rtr(s.qp[i], peer.qpn[i]) == 0 &&
              to_rts(s.qp[i]) == 0, "RESET -> INIT -> RTR -> RTS");
    xwrite(down[1], &me, sizeof(me));
    int ok = 0;
    xread(up[0], &ok, sizeof(ok));
    check(ok, "the child's QPs reach RTR");
    struct ibv_wc wc;

    /* the data paths; the first write gathers two pieces (the QPs take two) */
    strcpy(buf, "hel");
    strcpy(buf + 200, "lo");
    struct ibv_sge g[3] = { { (uintptr_t)buf, 3, mr->lkey }, { (uintptr_t)(buf + 200), 3,
                            mr->lkey }, { (uintptr_t)buf, 1, mr->lkey } };
    struct ibv_send_wr gw = { .wr_id = 2, .sg_list = g, .num_sge = 3,
                              .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                              .wr.rdma = { peer.addr, peer.rkey } }, *gbad;
    check(v->post_send(s.qp[0], &gw, &gbad) != 0 && gbad == &gw,
          "a WR with more pieces than the QP's max_send_sge is refused");
    gw.num_sge = 2;
    check(v->post_send(s.qp[0], &gw, &gbad) == 0 && next_wc(s.cq, &wc) == IBV_WC_SUCCESS &&
          wc.wr_id == 2 && wc.opcode == IBV_WC_RDMA_WRITE && wc.byte_len == 6,
          "RDMA_WRITE of two pieces completes");
    strcpy(buf, "hello");
    check(post(s.qp[0], IBV_WR_RDMA_WRITE_WITH_IMM, buf, mr, 6, peer.addr + 2048, peer.rkey,
               1, 3) == 0 && next_wc(s.cq, &wc) == IBV_WC_SUCCESS && wc.wr_id == 3,
          "RDMA_WRITE_WITH_IMM completes");
    check(post(s.qp[0], IBV_WR_RDMA_READ, buf + 100, mr, 8, peer.addr + 1024, peer.rkey, 1,
               4) == 0 && next_wc(s.cq, &wc) == IBV_WC_SUCCESS &&
          wc.opcode == IBV_WC_RDMA_READ && !strcmp(buf + 100, "read me"),
          "RDMA_READ brings the child's bytes");

    /* selective signaling: 8 slots, 7 unsignaled + 1 signaled fill it; polled, it drains */
    int rc = 0;
    for (int i = 0; i < 8 && rc == 0; i++)
        rc = post(s.qp[0], IBV_WR_RDMA_WRITE, buf, mr, 6, peer.addr, peer.rkey, i == 7, 10 + i);
    check(rc == 0, "a send queue's worth of WRs is taken");
    check(post(s.qp[0], IBV_WR_RDMA_WRITE, buf, mr, 6, peer.addr, peer.rkey, 1, 20) != 0,
          "a full send queue refuses the next WR");
    check(next_wc(s.cq, &wc) == IBV_WC_SUCCESS && wc.wr_id == 17 &&
          v->poll_cq(s.cq, 1, &wc) == 0, "only the signaled WR completes");
    check(post(s.qp[0], IBV_WR_RDMA_WRITE, buf, mr, 6, peer.addr, peer.rkey, 1, 21) == 0 &&
          next_wc(s.cq, &wc) == IBV_WC_SUCCESS, "polling it freed the queue");

    /* RNR: the child's one receive is used up */
    check(post(s.qp[0], IBV_WR_RDMA_WRITE_WITH_IMM, buf, mr, 6, peer.addr, peer.rkey, 1,
               30) == 0 && next_wc(s.cq, &wc) == IBV_WC_RNR_RETRY_EXC_ERR && wc.wr_id == 30,
          "WRITE_WITH_IMM without a posted receive: RNR retry exceeded");
    check(post(s.qp[0], IBV_WR_RDMA_WRITE, buf, mr, 6, peer.addr, peer.rkey, 0, 31) == 0 &&
          next_wc(s.cq, &wc) == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 31,
          "a QP in ERR flushes what is posted, signaled or not");

    /* access checks: past the MR's end, a wrong rkey, a local buffer outside any MR */
    struct ibv_qp_attr reset = { .qp_state = IBV_QPS_RESET };
    check(v->modify_qp(s.qp[0], &reset, IBV_QP_STATE) == 0 && to_init(s.qp[0]) == 0 &&
          to_rtr(s.qp[0], peer.qpn[0]) == 0 && to_rts(s.qp[0]) == 0, "ERR -> RESET -> RTS");
    memset(buf, 0x5a, 64);
    check(post(s.qp[0], IBV_WR_RDMA_WRITE, buf, mr, 16, peer.addr + 4096 - 8, peer.rkey, 1,
               40) == 0 && next_wc(s.cq, &wc) == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 40,
          "a write past the MR's end: remote access error");
    check(post(s.qp[1], IBV_WR_RDMA_WRITE, buf, mr, 8, peer.addr + 4096 - 8, peer.rkey ^ 0x10000,
               1, 41) == 0 && next_wc(s.cq, &wc) == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 41,
          "a wrong rkey: remote access error");
    check(v->modify_qp(s.qp[1], &reset, IBV_QP_STATE) == 0 && to_init(s.qp[1]) == 0 &&
          to_rtr(s.qp[1], peer.qpn[1]) == 0 && to_rts(s.qp[1]) == 0, "QP 2 back to RTS");
    char stray[16];
    check(post(s.qp[1], IBV_WR_RDMA_WRITE, stray, mr, 8, peer.addr, peer.rkey, 1, 42) == 0 &&
          next_wc(s.cq, &wc) == IBV_WC_LOC_PROT_ERR, "a local buffer outside the MR: "
          "local protection error");

    char cmd = 'c';
    int verdict = -1;
    xwrite(down[1], &cmd, 1);
    xread(up[0], &verdict, sizeof(verdict));
    check(!(verdict & 1), "the child sees the written bytes");
    check(!(verdict & 2), "the child's receive completed with the immediate");
    check(!(verdict & 4), "refused writes changed no byte of the child's memory");
    int status;
    waitpid(pid, &status, 0);

    /* the peer process is gone: its QP answers no more */
    check(v->modify_qp(s.qp[1], &reset, IBV_QP_STATE) == 0 && to_init(s.qp[1]) == 0 &&
          to_rtr(s.qp[1], peer.qpn[1]) == 0 && to_rts(s.qp[1]) == 0, "QP 2 back to RTS again");
    check(post(s.qp[1], IBV_WR_RDMA_WRITE, buf, mr, 8, peer.addr, peer.rkey, 1, 50) == 0 &&
          next_wc(s.cq, &wc) == IBV_WC_RETRY_EXC_ERR, "a dead peer: retry exceeded");
    check(!strcmp(v->wc_status_str(IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded"),
          "status strings as rdma-core's");
    close_side(&s, mr, buf);
    shm_unlink(fabric);
    printf("test_ibemu: %d passed, %d failed\n", checks - fails, fails);
    return fails != 0;
}
