/*
 * shm_rma.c - one-sided access to a peer's memory on this host (transport.h: mem_reg,
 * rkey_unpack, get, put, rptr).
 *
 * Nothing needs registering: a get is process_vm_readv and a put process_vm_writev of the
 * peer's pages, which the kernel allows where the connect probe could read the peer's
 * probe word (cma_ok; rma_reach says so). A key only describes the buffer:
 *   CMA     any memory: the owner's pid; the reads go through the kernel
 *   REGION  weft_mem_alloc memory (mem.c): also the region (base, size, fd, serial), so a
 *           peer can map it through /proc/<pid>/fd/<fd> and read it in place (rptr)
 * Both complete at once, so get and put never return WEFT_IN_PROGRESS. Unpacking a
 * REGION key maps the region once per endpoint and keeps it (SHM_RMAPS of them, the
 * oldest unreferenced one unmapped to make room; a region its owner freed stays mapped
 * here, its pages alive, until then or until the endpoint closes); a key that cannot be
 * mapped (refused, or every slot in use) reads through the kernel instead.
 *
 * Invariants: a key is checked (size, magic, owner pid, kind, bounds) before anything in
 * it is used; a mapping is unmapped only when no unpacked key refers to it.
 */
#define _GNU_SOURCE /* process_vm_readv */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shm_int.h"
#include "check.h"
#include "log.h"
#include "status.h"
#include "util.h"

#define SHM_RKEY_MAGIC 0x59454b52u      /* "RKEY" */
#define SHM_RMAPS 8                     /* peer regions kept mapped per endpoint */
enum { SHM_KEY_CMA = 1, SHM_KEY_REGION = 2 };

/* shm's packed key (tp_rkey_t.blob) */
typedef struct shm_rkey {
    uint32_t magic;
    uint32_t kind;                      /* SHM_KEY_* */
    uint32_t pid;                       /* the owner */
    uint32_t pad;
    mem_region_t reg;                   /* REGION: the weft_mem_alloc region */
} shm_rkey_t;
_Static_assert(sizeof(shm_rkey_t) <= TP_RKEY_BYTES, "shm's key fits a tp_rkey_t");

/* An unpacked key (tp_rmem_t): a mapped region, or (map NULL) reads through the kernel. */
typedef struct shm_rmap {
    mem_region_t reg;                   /* fd -1: the CMA key */
    const char *map;
    int refs;                           /* unpacked keys that name it */
} shm_rmap_t;

struct shm_rma {
    int peer;
    pid_t pid;
    int cma_ok;
    shm_rmap_t cma;                     /* every CMA key (and every unmappable region) */
    shm_rmap_t rmaps[SHM_RMAPS];
    int rmap_next;                      /* where the search for a free slot starts */
};

/* process_vm_readv (write 0) or _writev (1) of len bytes at the peer's raddr, whole */
static weft_status_t cma_xfer(pid_t pid, void *local, uint64_t raddr, size_t len, int write)
{
    size_t done = 0;
    while (done < len) {
        struct iovec lv = { (char *)local + done, len - done };
        struct iovec rv = { (void *)(uintptr_t)(raddr + done), len - done };
        ssize_t n = write ? process_vm_writev(pid, &lv, 1, &rv, 1, 0)
                          : process_vm_readv(pid, &lv, 1, &rv, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)             /* nothing moved, no error: the range ends there */
            errno = EFAULT;
        if (n <= 0)
            return errno == ESRCH ? WEFT_ERR_PEER_LOST : WEFT_ERR_SYSTEM;
        done += (size_t)n;
    }
    return WEFT_OK;
}

weft_status_t shm_cma_read(pid_t pid, void *dst, uint64_t raddr, size_t len)
{
    return cma_xfer(pid, dst, raddr, len, 0);
}

/* How many times longer a 256K process_vm_readv takes on this host than a memcpy of it:
 * the fastest of 8 of each (after one of each to warm up), of this process's own memory,
 * which takes the kernel's path for a peer's (pin the pages, copy). Measured once per
 * process (about 0.3 ms); 0 when it cannot be. */
static double cma_cost;
static pthread_once_t cma_cost_once = PTHREAD_ONCE_INIT;

static void cma_cost_measure(void)
{
    const size_t n = 256u << 10;
    char *a = malloc(n), *b = malloc(n);
    uint64_t copy = UINT64_MAX, read = UINT64_MAX;
    if (a && b) {
        memset(a, 1, n);
        memset(b, 2, n);
        for (int i = 0; i < 9 && read; i++) {
            uint64_t t0 = time_ns();
            memcpy(b, a, n);
            __asm__ volatile("" : : "r"(b) : "memory");     /* the copy happens */
            uint64_t t1 = time_ns();
            if (shm_cma_read(getpid(), b, (uint64_t)(uintptr_t)a, n) != WEFT_OK)
                read = 0;
            uint64_t t2 = time_ns();
            if (i > 0 && read) {
                copy = WEFT_MIN(copy, t1 - t0);
                read = WEFT_MIN(read, t2 - t1);
            }
        }
    }
    cma_cost = a && b && read && read != UINT64_MAX && copy ? (double)read / (double)copy : 0;
    free(a);
    free(b);
}

double shm_cma_cost(void)
{
    pthread_once(&cma_cost_once, cma_cost_measure);
    return cma_cost;
}

shm_rma_t *shm_rma_create(int peer, pid_t pid, int cma_ok)
{
    shm_rma_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->peer = peer;
    r->pid = pid;
    r->cma_ok = cma_ok;
    r->cma.reg.fd = -1;
    return r;
}

void shm_rma_destroy(shm_rma_t *r)
{
    if (r == NULL)
        return;
    for (int i = 0; i < SHM_RMAPS; i++)
        if (r->rmaps[i].map)
            munmap((void *)r->rmaps[i].map, r->rmaps[i].reg.size);
    free(r);
}

/* The key says where [ptr, ptr+len) is: in a weft_mem_alloc region, or anywhere. */
weft_status_t shm_mem_reg(weft_comm_t *comm, const void *ptr, size_t len, mem_type_t mt,
                          tp_mem_t **mem_p, tp_rkey_t *rkey)
{
    if (mt != MEM_HOST)
        return weft_error(WEFT_ERR_UNSUPPORTED, "shm: cannot register %s memory: peers "
                          "read host memory only", mem_type_name(mt));
    shm_rkey_t k = { .magic = SHM_RKEY_MAGIC, .kind = SHM_KEY_CMA, .pid = (uint32_t)getpid() };
    mem_region_t r;
    uint64_t a = (uint64_t)(uintptr_t)ptr;
    mem_lookup(ptr, &r);
    if (r.fd >= 0 && len <= r.size - (a - r.base)) {
        k.kind = SHM_KEY_REGION;
        k.reg = r;
    } else {
        k.reg.fd = -1;
    }
    memset(rkey, 0, sizeof(*rkey));
    memcpy(rkey->blob, &k, sizeof(k));
    rkey->len = sizeof(k);
    rkey->tp = (uint8_t)tp_slot(&tp_shm_ops);
    *mem_p = NULL;                      /* nothing held */
    return WEFT_OK;
}

void shm_mem_dereg(weft_comm_t *comm, tp_mem_t *mem)
{
}

int shm_rma_reach(const tp_ep_t *ep)
{
    return shm_ep_rma(ep)->cma_ok;
}

/* The peer's region mapped here (one open of /proc/<pid>/fd/<fd> and one mmap per
 * region, keyed by serial), or NULL where that is refused or every slot is in use. */
static shm_rmap_t *map_region(shm_rma_t *r, const mem_region_t *reg)
{
    for (int i = 0; i < SHM_RMAPS; i++)
        if (r->rmaps[i].map && r->rmaps[i].reg.serial == reg->serial &&
            r->rmaps[i].reg.base == reg->base && r->rmaps[i].reg.size == reg->size)
            return &r->rmaps[i];
    shm_rmap_t *m = NULL;
    for (int k = 0; k < SHM_RMAPS && m == NULL; k++) {
        int i = (r->rmap_next + k) % SHM_RMAPS;
        if (r->rmaps[i].refs == 0) {
            m = &r->rmaps[i];
            r->rmap_next = (i + 1) % SHM_RMAPS;
        }
    }
    if (m == NULL)
        return NULL;
    char path[64];
    struct stat sb;
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)r->pid, (int)reg->fd);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        LOG_INFO(LOG_SHM, "shm: cannot open rank %d's registered memory (%s): %s; reading "
                 "it with process_vm_readv", r->peer, path, strerror(errno));
        return NULL;
    }
    void *p = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_size >= reg->size)
        p = mmap(NULL, reg->size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        LOG_INFO(LOG_SHM, "shm: cannot map rank %d's registered memory (%s); reading it with "
                 "process_vm_readv", r->peer, path);
        return NULL;
    }
    if (m->map)
        munmap((void *)m->map, m->reg.size);
    m->reg = *reg;
    m->map = p;
    return m;
}

weft_status_t shm_rkey_unpack(tp_ep_t *ep, const tp_rkey_t *rkey, tp_rmem_t **rmem_p)
{
    shm_rma_t *r = shm_ep_rma(ep);
    shm_rkey_t k;
    if (rkey->len != sizeof(k) || rkey->tp != tp_slot(&tp_shm_ops))
        return weft_error(WEFT_ERR_INVALID_ARG, "shm: rank %d's remote key is not an shm key "
                          "(%u bytes from transport slot %u; shm's are %zu bytes, slot %d)",
                          ep->peer, rkey->len, rkey->tp, sizeof(k), tp_slot(&tp_shm_ops));
    memcpy(&k, rkey->blob, sizeof(k));
    if (k.magic != SHM_RKEY_MAGIC || (k.kind != SHM_KEY_CMA && k.kind != SHM_KEY_REGION) ||
        k.pid != (uint32_t)r->pid ||
        (k.kind == SHM_KEY_REGION && (k.reg.fd < 0 || k.reg.size == 0 ||
                                      k.reg.base + k.reg.size < k.reg.base)))
        return weft_error(WEFT_ERR_INVALID_ARG, "shm: rank %d's remote key is garbled (magic "
                          "%#x, kind %u, pid %u where the peer is %d)", ep->peer, k.magic,
                          k.kind, k.pid, (int)r->pid);
    if (!r->cma_ok)
        return weft_error(WEFT_ERR_UNSUPPORTED, "shm: no single-copy access to rank %d",
                          ep->peer);
    shm_rmap_t *m = k.kind == SHM_KEY_REGION ? map_region(r, &k.reg) : NULL;
    if (m == NULL)
        m = &r->cma;
    m->refs++;
    *rmem_p = (tp_rmem_t *)m;
    return WEFT_OK;
}

void shm_rkey_release(tp_ep_t *ep, tp_rmem_t *rmem)
{
    ((shm_rmap_t *)rmem)->refs--;
}

/* A region key covers its region only; a CMA key leaves the bounds to the kernel. */
static weft_status_t check_range(const tp_ep_t *ep, const shm_rmap_t *m, uint64_t raddr,
                                 size_t len)
{
    if (m->map == NULL || (raddr >= m->reg.base && raddr - m->reg.base <= m->reg.size &&
                           len <= m->reg.size - (raddr - m->reg.base)))
        return WEFT_OK;
    return weft_error(WEFT_ERR_INVALID_ARG, "shm: [%#llx, +%zu) lies outside rank %d's "
                      "registered region", (unsigned long long)raddr, len, ep->peer);
}

static weft_status_t cma_status(const tp_ep_t *ep, weft_status_t st, const char *what,
                                size_t len)
{
    pid_t pid = shm_ep_rma(ep)->pid;
    if (st == WEFT_ERR_PEER_LOST)
        return weft_error(st, "shm: rank %d (pid %d) is gone", ep->peer, (int)pid);
    if (st != WEFT_OK)
        return weft_error(st, "shm: single-copy %s of %zu bytes at rank %d failed: %m", what,
                          len, ep->peer);
    return WEFT_OK;
}

weft_status_t shm_get(tp_ep_t *ep, void *dst, tp_rmem_t *rmem, uint64_t raddr, size_t len,
                      tp_rma_t *req)
{
    req->req = NULL;
    RETURN_IF_ERR(check_range(ep, (shm_rmap_t *)rmem, raddr, len));
    return cma_status(ep, shm_cma_read(shm_ep_rma(ep)->pid, dst, raddr, len), "read", len);
}

weft_status_t shm_put(tp_ep_t *ep, const void *src, tp_rmem_t *rmem, uint64_t raddr,
                      size_t len, tp_rma_t *req)
{
    req->req = NULL;
    RETURN_IF_ERR(check_range(ep, (shm_rmap_t *)rmem, raddr, len));
    return cma_status(ep, cma_xfer(shm_ep_rma(ep)->pid, (void *)src, raddr, len, 1), "write", len);
}

/* Transfers complete when posted: nothing is ever in progress. */
weft_status_t shm_rma_test(tp_ep_t *ep, tp_rma_t *req)
{
    return WEFT_OK;
}

void shm_rma_cancel(tp_ep_t *ep, tp_rma_t *req)
{
    req->req = NULL;
}

const void *shm_rptr(tp_ep_t *ep, tp_rmem_t *rmem, uint64_t raddr, size_t len)
{
    const shm_rmap_t *m = (const shm_rmap_t *)rmem;
    if (m->map == NULL || raddr < m->reg.base || raddr - m->reg.base > m->reg.size ||
        len > m->reg.size - (raddr - m->reg.base))
        return NULL;
    return m->map + (raddr - m->reg.base);
}
