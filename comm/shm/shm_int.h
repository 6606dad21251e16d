/*
 * shm_int.h - what the shared-memory transport's files share: tp_shm.c (segments, rings,
 * peer states) and shm_rma.c (one-sided access to a peer's memory).
 */
#ifndef WEFT_SHM_INT_H
#define WEFT_SHM_INT_H

#include <stdint.h>
#include <sys/types.h>

#include "comm_int.h"

extern const tp_ops_t tp_shm_ops;

/* An endpoint's one-sided state (shm_rma.c): the peer's regions mapped here. */
typedef struct shm_rma shm_rma_t;

/* tp_shm.c: the endpoint's */
shm_rma_t *shm_ep_rma(const tp_ep_t *ep);

/* tp_shm.c: how a sender copies large frames into a peer's ring (WEFT_SHM_NT; the top of
 * tp_shm.c says why). */
typedef struct shm_copy {
    long mode;              /* WEFT_SHM_NT: -1 auto, 0 plain, 1 streaming */
    int nt;                 /* auto: streaming stores now */
    uint32_t frames;        /* timed frames so far */
    double rate[2];         /* bytes/ns, running average: [0] plain, [1] streaming */
} shm_copy_t;
/* 1: copy the next frame of `bytes` with streaming stores */
int shm_copy_next(shm_copy_t *c, size_t bytes);
/* records how fast a timed frame went in (only frames shm_copy_timed says are timed);
 * returns 1 when the choice changed */
int shm_copy_note(shm_copy_t *c, int nt, double rate);
/* whether a frame of `bytes` is timed: auto mode and large enough */
int shm_copy_timed(const shm_copy_t *c, size_t bytes);

/* shm_rma.c */
/* len bytes at the peer's raddr into dst with process_vm_readv, whole or an error:
 * WEFT_ERR_PEER_LOST when the process is gone, WEFT_ERR_SYSTEM otherwise (errno set) */
weft_status_t shm_cma_read(pid_t pid, void *dst, uint64_t raddr, size_t len);
/* a 256K process_vm_readv's time over a memcpy's here, once per process (tp_ops_t.get_cost) */
double shm_cma_cost(void);
/* the state of an endpoint to rank peer (process pid); cma_ok: process_vm_readv on it
 * works (the connect probe). NULL when out of memory. */
shm_rma_t *shm_rma_create(int peer, pid_t pid, int cma_ok);
void shm_rma_destroy(shm_rma_t *r);     /* unmaps what it mapped */
weft_status_t shm_mem_reg(weft_comm_t *comm, const void *ptr, size_t len, mem_type_t mt,
                          tp_mem_t **mem_p, tp_rkey_t *rkey);
void shm_mem_dereg(weft_comm_t *comm, tp_mem_t *mem);
int shm_rma_reach(const tp_ep_t *ep);
weft_status_t shm_rkey_unpack(tp_ep_t *ep, const tp_rkey_t *rkey, tp_rmem_t **rmem_p);
void shm_rkey_release(tp_ep_t *ep, tp_rmem_t *rmem);
weft_status_t shm_get(tp_ep_t *ep, void *dst, tp_rmem_t *rmem, uint64_t raddr, size_t len,
                      tp_rma_t *req);
weft_status_t shm_put(tp_ep_t *ep, const void *src, tp_rmem_t *rmem, uint64_t raddr,
                      size_t len, tp_rma_t *req);
weft_status_t shm_rma_test(tp_ep_t *ep, tp_rma_t *req);
void shm_rma_cancel(tp_ep_t *ep, tp_rma_t *req);
const void *shm_rptr(tp_ep_t *ep, tp_rmem_t *rmem, uint64_t raddr, size_t len);

#endif
