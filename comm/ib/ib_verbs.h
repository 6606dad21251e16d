/*
 * ib_verbs.h - the verbs calls the ib transport makes, as a table of weft's own
 * function pointers.
 *
 * The transport never calls ibv_* directly: libweft neither links rdma-core nor needs it
 * at run time. ib_verbs_load fills the table once per process, from rdma-core's
 * libibverbs.so.1 (dlopen; the static inline verbs - post_send, post_recv, poll_cq - go
 * through the context's ops as <infiniband/verbs.h> does) or, for tests, from the
 * library WEFT_IB_VERBS names (tests/ibemu/: weft's verbs emulator), which exports a
 * filled table as `weft_ib_verbs`. Both use rdma-core's own types, so the real path is
 * compiled against the real structures.
 */
#ifndef WEFT_IB_VERBS_H
#define WEFT_IB_VERBS_H

#include <infiniband/verbs.h>

#define IB_VERBS_ABI 1          /* bumped when the table changes: a stale emulator is refused */

typedef struct ib_verbs {
    int abi;
    const char *provider;       /* "rdma-core (libibverbs.so.1)" or the emulator's name */
    struct ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_ctx,
                                struct ibv_comp_channel *ch, int vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
    int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
    int (*poll_cq)(struct ibv_cq *cq, int n, struct ibv_wc *wc);
    const char *(*wc_status_str)(enum ibv_wc_status status);
} ib_verbs_t;

/* The process's table: NULL (and *why says why) where no verbs library loads. */
const ib_verbs_t *ib_verbs_load(const char **why);
/* 1 when rdma-core's ibv_fork_init, called at load, refused (registrations are then not
 * safe across fork() on kernels before 5.13). */
int ib_verbs_fork_failed(void);

#endif
