/*
 * ib_verbs.c - fills the verbs table (ib_verbs.h) once per process.
 *
 * WEFT_IB_VERBS (a testing knob) names a library exporting `weft_ib_verbs`, a filled
 * table (weft's verbs emulator, tests/ibemu/); otherwise rdma-core's libibverbs.so.1 is
 * opened, its exported calls looked up and ibv_fork_init called. A process without either simply has no ib
 * transport; the reason is kept for the error a forced WEFT_TRANSPORT=ib reports.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "ib_verbs.h"

static ib_verbs_t real;
static const ib_verbs_t *loaded;
static char why_buf[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int fork_failed;     /* ibv_fork_init refused (ib_verbs_fork_failed) */

/* <infiniband/verbs.h> has these inline, through the context's ops: the same here. */
static int real_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    return qp->context->ops.post_send(qp, wr, bad);
}

static int real_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    return qp->context->ops.post_recv(qp, wr, bad);
}

static int real_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    return cq->context->ops.poll_cq(cq, n, wc);
}

#define SYM(field, name)                                                        \
    do {                                                                        \
        *(void **)&real.field = dlsym(h, name);                                 \
        if (real.field == NULL) {                                               \
            snprintf(why_buf, sizeof(why_buf), "libibverbs.so.1 lacks %s", name); \
            return;                                                             \
        }                                                                       \
    } while (0)

static void load(void)
{
    const char *path = getenv("WEFT_IB_VERBS");
    if (path && *path) {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        const ib_verbs_t *t = h ? dlsym(h, "weft_ib_verbs") : NULL;
        if (t == NULL)
            snprintf(why_buf, sizeof(why_buf), "WEFT_IB_VERBS=%s: %s", path,
                     h ? "exports no weft_ib_verbs table" : dlerror());
        else if (t->abi != IB_VERBS_ABI)
            snprintf(why_buf, sizeof(why_buf), "WEFT_IB_VERBS=%s: table ABI %d, weft wants %d",
                     path, t->abi, IB_VERBS_ABI);
        else
            loaded = t;
        return;
    }
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(why_buf, sizeof(why_buf), "no libibverbs.so.1 (rdma-core): %s", dlerror());
        return;
    }
    SYM(get_device_list, "ibv_get_device_list");
    SYM(free_device_list, "ibv_free_device_list");
    SYM(get_device_name, "ibv_get_device_name");
    SYM(open_device, "ibv_open_device");
    SYM(close_device, "ibv_close_device");
    SYM(query_port, "ibv_query_port");
    SYM(query_gid, "ibv_query_gid");
    SYM(alloc_pd, "ibv_alloc_pd");
    SYM(dealloc_pd, "ibv_dealloc_pd");
    SYM(reg_mr, "ibv_reg_mr");
    SYM(dereg_mr, "ibv_dereg_mr");
    SYM(create_cq, "ibv_create_cq");
    SYM(destroy_cq, "ibv_destroy_cq");
    SYM(create_qp, "ibv_create_qp");
    SYM(modify_qp, "ibv_modify_qp");
    SYM(destroy_qp, "ibv_destroy_qp");
    SYM(wc_status_str, "ibv_wc_status_str");
    /* As NCCL does at its IB init, before anything is registered: registrations safe
     * across fork() (a PyTorch data loader's workers, forked after init): without it, on
     * a kernel older than 5.13 the parent's next write to a pinned page after a fork
     * copies that page, and the HCA keeps the old one (credits and frames lost, stale
     * bytes sent). Where the kernel keeps pinned pages in the parent by itself,
     * rdma-core does nothing here. Best effort: a failure leaves things as they were. */
    int (*fork_init)(void) = (int (*)(void))dlsym(h, "ibv_fork_init");
    if (fork_init && fork_init() != 0)
        fork_failed = 1;
    real.post_send = real_post_send;
    real.post_recv = real_post_recv;
    real.poll_cq = real_poll_cq;
    real.abi = IB_VERBS_ABI;
    real.provider = "rdma-core (libibverbs.so.1)";
    loaded = &real;
}

const ib_verbs_t *ib_verbs_load(const char **why)
{
    pthread_once(&once, load);
    if (why)
        *why = why_buf;
    return loaded;
}

int ib_verbs_fork_failed(void)
{
    return fork_failed;
}
