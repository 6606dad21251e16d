/*
 * ucx_rma.c - the UCX transport's one-sided access (transport.h: mem_reg, rkey_unpack,
 * get, put): ucp_mem_map registrations, packed rkeys, ucp_get_nbx / ucp_put_nbx.
 *
 * Registration. A buffer peers will read is mapped with ucp_mem_map (the memory exists:
 * UCX registers it with every memory domain that can, pins nothing for cma or tcp) and
 * its key packed with ucp_rkey_pack; the packed bytes are copied into the tp_rkey_t and
 * UCX's buffer released at once (ucp_rkey_buffer_release). What is cached, and what this
 * relies on:
 *   weft_mem_alloc memory  the whole region is mapped once and kept, process-wide,
 *                          keyed by the region's serial (mem.c): a later call in any
 *                          communicator reuses it. A region weft_mem_free'd is never
 *                          matched again (its serial is gone) and is unmapped by the next
 *                          registration's sweep, or when the last communicator closes the
 *                          UCX context; at most UCX_REG_CACHE idle regions stay mapped.
 *   any other memory       mapped for the call and unmapped when it ends: UCX 1.13's
 *                          ucp_mem_map has no registration cache that notices free() and
 *                          a new allocation at the same address, so weft keeps none for
 *                          memory it does not own (with RDMA, use weft_mem_alloc for
 *                          buffers sent one-sidedly again and again).
 * The destination of a get is not registered by weft: UCX registers it where a zero-copy
 * protocol needs it (its own rcache, with its memory hooks), or copies through bounce
 * buffers.
 *
 * Keys. tp_rkey_t.blob = a header (magic, the packed length, a checksum of the packed
 * bytes) and UCX's packed key. ucp_ep_rkey_unpack trusts its input, so a key is checked
 * first: a key of another transport, oversized, truncated or garbled is refused with a
 * clear error and never reaches UCX. Unpacked keys are kept per endpoint (UCX_RKEYS,
 * matched by their bytes, reference-counted: an idle one is destroyed to make room, all
 * of them before the endpoint closes).
 *
 * Transfers. get and put post ucp_get_nbx / ucp_put_nbx and return the request; the
 * engine's progress op drives the worker and rma_test polls it. A put is complete once
 * its data is at the peer: it is followed by an endpoint flush, whose request is the
 * one tested. Failures: a peer whose endpoint failed or whose process exited gives
 * WEFT_ERR_PEER_LOST (from the request, or from check_alive while the engine waits);
 * anything else WEFT_ERR_SYSTEM with UCX's reason.
 *
 * Invariants: a registration is unmapped only with no call holding it; an unpacked key
 * is destroyed only with no call holding it, and before its endpoint closes; the cache
 * lock is never held across a worker progress.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ucx_int.h"
#include "check.h"
#include "status.h"
#include "util.h"

#define UCX_RKEY_MAGIC 0x4b52434eu      /* "NCRK" */
#define UCX_REG_CACHE 16                /* idle weft_mem_alloc regions kept mapped */
#define UCX_RKEYS 8                     /* unpacked keys kept per endpoint */

/* tp_rkey_t.blob: this header, then UCX's packed key */
typedef struct ucx_rkey_hdr {
    uint32_t magic;
    uint32_t len;                       /* packed bytes after the header */
    uint64_t sum;                       /* FNV-1a of them */
} ucx_rkey_hdr_t;
#define UCX_PACKED_MAX (TP_RKEY_BYTES - sizeof(ucx_rkey_hdr_t))

/* A registration (tp_mem_t). serial 0: not weft_mem_alloc memory, unmapped at dereg. */
typedef struct ucx_reg {
    struct ucx_reg *next;
    uint64_t base, size;
    uint32_t serial;
    int refs;
    ucp_mem_h memh;
    tp_rkey_t key;
} ucx_reg_t;

static struct {
    pthread_mutex_t lock;
    ucx_reg_t *regs;                    /* weft_mem_alloc regions, newest first */
} cache = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* An unpacked key (tp_rmem_t) */
typedef struct ucx_rkey {
    ucp_rkey_h h;                       /* NULL: a free slot */
    int refs;
    uint64_t used;                      /* last unpack, for eviction */
    tp_rkey_t key;
} ucx_rkey_t;

struct ucx_rkeys {
    ucx_rkey_t k[UCX_RKEYS];
    uint64_t clock;
};

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void reg_unmap(ucx_reg_t *r)
{
    ucp_mem_unmap(ucx_context(), r->memh);
    free(r);
}

/* Maps [base, base+size) and packs its key into r->key. */
static weft_status_t reg_map(uint64_t base, uint64_t size, uint32_t serial, ucx_reg_t **r_p)
{
    ucp_context_h ctx = ucx_context();
    ucx_reg_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "ucx: out of memory");
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = (void *)(uintptr_t)base, .length = size,
    };
    ucs_status_t s = ucp_mem_map(ctx, &mp, &r->memh);
    if (s != UCS_OK) {
        free(r);
        return weft_error(WEFT_ERR_SYSTEM, "ucx: cannot register %llu bytes at %#llx "
                          "(ucp_mem_map): %s", (unsigned long long)size,
                          (unsigned long long)base, ucs_status_string(s));
    }
    void *packed;
    size_t n;
    s = ucp_rkey_pack(ctx, r->memh, &packed, &n);
    if (s != UCS_OK || n > UCX_PACKED_MAX) {
        if (s == UCS_OK)
            ucp_rkey_buffer_release(packed);
        ucp_mem_unmap(ctx, r->memh);
        free(r);
        return s != UCS_OK
            ? weft_error(WEFT_ERR_SYSTEM, "ucx: cannot pack a remote key: %s",
                         ucs_status_string(s))
            : weft_error(WEFT_ERR_UNSUPPORTED, "ucx: the packed remote key is %zu bytes, "
                         "more than the %zu a tp_rkey_t carries (TP_RKEY_BYTES)", n,
                         (size_t)UCX_PACKED_MAX);
    }
    ucx_rkey_hdr_t h = { .magic = UCX_RKEY_MAGIC, .len = (uint32_t)n, .sum = fnv1a(packed, n) };
    memcpy(r->key.blob, &h, sizeof(h));
    memcpy(r->key.blob + sizeof(h), packed, n);
    ucp_rkey_buffer_release(packed);
    r->key.len = (uint16_t)(sizeof(h) + n);
    r->key.tp = (uint8_t)tp_slot(&tp_ucx_ops);
    r->base = base;
    r->size = size;
    r->serial = serial;
    *r_p = r;
    return WEFT_OK;
}

/* Unmaps idle regions that were freed, and the oldest idle ones past UCX_REG_CACHE.
 * With cache.lock held. */
static void reg_sweep(void)
{
    int idle = 0;
    for (ucx_reg_t **pp = &cache.regs; *pp != NULL;) {
        ucx_reg_t *r = *pp;
        mem_region_t cur;
        mem_lookup((void *)(uintptr_t)r->base, &cur);
        int gone = cur.fd < 0 || cur.serial != r->serial;
        if (r->refs == 0 && (gone || ++idle > UCX_REG_CACHE)) {
            *pp = r->next;
            reg_unmap(r);
            continue;
        }
        pp = &r->next;
    }
}

weft_status_t ucx_mem_reg(weft_comm_t *comm, const void *ptr, size_t len, mem_type_t mt,
                          tp_mem_t **mem_p, tp_rkey_t *rkey)
{
    if (mt != MEM_HOST)
        return weft_error(WEFT_ERR_UNSUPPORTED, "ucx: cannot register %s memory: this build "
                          "registers host memory only", mem_type_name(mt));
    mem_region_t reg;
    uint64_t a = (uint64_t)(uintptr_t)ptr;
    ucx_reg_t *r = NULL;
    weft_status_t st = WEFT_OK;
    mem_lookup(ptr, &reg);
    pthread_mutex_lock(&cache.lock);    /* also serializes ucp_mem_map on the shared context */
    if (reg.fd < 0 || len > reg.size - (a - reg.base)) {
        st = reg_map(a, len, 0, &r);    /* for this call only */
    } else {
        reg_sweep();
        for (r = cache.regs; r && r->serial != reg.serial; r = r->next)
            ;
        if (r == NULL && (st = reg_map(reg.base, reg.size, reg.serial, &r)) == WEFT_OK) {
            r->next = cache.regs;
            cache.regs = r;
        }
    }
    if (r)
        r->refs++;
    pthread_mutex_unlock(&cache.lock);
    RETURN_IF_ERR(st);
    *rkey = r->key;
    *mem_p = (tp_mem_t *)r;
    return WEFT_OK;
}

void ucx_mem_dereg(weft_comm_t *comm, tp_mem_t *mem)
{
    ucx_reg_t *r = (ucx_reg_t *)mem;
    pthread_mutex_lock(&cache.lock);
    if (--r->refs == 0 && r->serial == 0)
        reg_unmap(r);
    pthread_mutex_unlock(&cache.lock);
}

void ucx_reg_purge(void)
{
    pthread_mutex_lock(&cache.lock);
    while (cache.regs) {
        ucx_reg_t *r = cache.regs;
        cache.regs = r->next;
        reg_unmap(r);
    }
    pthread_mutex_unlock(&cache.lock);
}

/* The key as UCX packed it, once checked: NULL (and the error set) when it is not one. */
static const uint8_t *check_key(const ucx_ep_t *e, const tp_rkey_t *k, size_t *n_p)
{
    ucx_rkey_hdr_t h;
    if (k->tp != tp_slot(&tp_ucx_ops) || k->len < sizeof(h) || k->len > TP_RKEY_BYTES) {
        weft_error(WEFT_ERR_INVALID_ARG, "ucx: rank %d's remote key is not a ucx key (%u "
                   "bytes from transport slot %u; at most %d from slot %d)", e->base.peer,
                   k->len, k->tp, TP_RKEY_BYTES, tp_slot(&tp_ucx_ops));
        return NULL;
    }
    memcpy(&h, k->blob, sizeof(h));
    if (h.magic != UCX_RKEY_MAGIC || h.len != k->len - sizeof(h) ||
        h.sum != fnv1a(k->blob + sizeof(h), h.len)) {
        weft_error(WEFT_ERR_INVALID_ARG, "ucx: rank %d's remote key is garbled (magic %#x, "
                   "%u packed bytes in a %u-byte key, checksum %s)", e->base.peer, h.magic,
                   h.len, k->len, h.len == k->len - sizeof(h) ? "wrong" : "not checked");
        return NULL;
    }
    *n_p = h.len;
    return k->blob + sizeof(h);
}

weft_status_t ucx_rkey_unpack(tp_ep_t *ep, const tp_rkey_t *rkey, tp_rmem_t **rmem_p)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    size_t n;
    RETURN_IF_ERR(ucx_lost_error(e, 0));    /* e->ep may be closed (ucx_withdraw_kept) */
    const uint8_t *packed = check_key(e, rkey, &n);
    if (packed == NULL)
        return WEFT_ERR_INVALID_ARG;
    if (e->rkeys == NULL && (e->rkeys = calloc(1, sizeof(*e->rkeys))) == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "ucx: out of memory");
    struct ucx_rkeys *c = e->rkeys;
    ucx_rkey_t *slot = NULL;
    for (int i = 0; i < UCX_RKEYS; i++) {
        ucx_rkey_t *k = &c->k[i];
        if (k->h && k->key.len == rkey->len && !memcmp(k->key.blob, rkey->blob, rkey->len)) {
            slot = k;
            break;
        }
        if (k->refs == 0 && (slot == NULL || !k->h || (slot->h && k->used < slot->used)))
            slot = k;                   /* free, else the idle one used longest ago */
    }
    if (slot == NULL)
        return weft_error(WEFT_ERR_INTERNAL, "ucx: more than %d remote keys of rank %d in "
                          "use", UCX_RKEYS, ep->peer);
    if (!(slot->h && slot->key.len == rkey->len &&
          !memcmp(slot->key.blob, rkey->blob, rkey->len))) {
        if (slot->h)
            ucp_rkey_destroy(slot->h);
        slot->h = NULL;
        ucs_status_t s = ucp_ep_rkey_unpack(e->ep, packed, &slot->h);
        if (s != UCS_OK) {
            slot->h = NULL;
            return weft_error(WEFT_ERR_INVALID_ARG, "ucx: cannot unpack rank %d's remote key: "
                              "%s", ep->peer, ucs_status_string(s));
        }
        slot->key = *rkey;
    }
    slot->refs++;
    slot->used = ++c->clock;
    *rmem_p = (tp_rmem_t *)slot;
    return WEFT_OK;
}

void ucx_rkey_release(tp_ep_t *ep, tp_rmem_t *rmem)
{
    ucx_rkey_t *k = (ucx_rkey_t *)rmem;
    /* the last transfer of a key whose endpoint was closed under it (ucx_withdraw_kept)
     * has ended: the key goes now (ucx_rkeys_destroy left it) */
    if (--k->refs == 0 && ((ucx_ep_t *)ep)->ep == NULL && k->h) {
        ucp_rkey_destroy(k->h);
        k->h = NULL;
    }
}

void ucx_rkeys_destroy(ucx_ep_t *e, int all)
{
    if (e->rkeys == NULL)
        return;
    int held = 0;
    for (int i = 0; i < UCX_RKEYS; i++) {
        ucx_rkey_t *k = &e->rkeys->k[i];
        if (k->refs > 0 && !all) {
            held = 1;               /* a failed call's transfer still names it */
            continue;
        }
        if (k->h)
            ucp_rkey_destroy(k->h);
        k->h = NULL;
    }
    if (!held) {
        free(e->rkeys);
        e->rkeys = NULL;
    }
}

/* A transfer's failure s as a weft status: the peer's loss where it is lost. */
static weft_status_t rma_failed(ucx_ep_t *e, ucs_status_t s, const char *what)
{
    weft_status_t st = tp_ucx_ops.check_alive(&e->base);
    return st < 0 ? st : ucx_failed(e, s, what);
}

/* An nbx call's result into req: WEFT_OK done, WEFT_IN_PROGRESS posted, or the failure. */
static weft_status_t posted(ucx_ep_t *e, ucs_status_ptr_t p, tp_rma_t *req, const char *what)
{
    ucs_status_t s = ucx_req_take(p, &req->req);
    if (s == UCS_OK || s == UCS_INPROGRESS)
        return s == UCS_OK ? WEFT_OK : WEFT_IN_PROGRESS;
    return rma_failed(e, s, what);
}

weft_status_t ucx_get(tp_ep_t *ep, void *dst, tp_rmem_t *rmem, uint64_t raddr, size_t len,
                      tp_rma_t *req)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    ucp_request_param_t p = { .op_attr_mask = 0 };
    req->req = NULL;
    RETURN_IF_ERR(ucx_lost_error(e, 0));
    return posted(e, ucp_get_nbx(e->ep, dst, len, raddr, ((ucx_rkey_t *)rmem)->h, &p), req,
                  "one-sided read from");
}

/* The put, then an endpoint flush: the flush completes once the data is at the peer. */
weft_status_t ucx_put(tp_ep_t *ep, const void *src, tp_rmem_t *rmem, uint64_t raddr,
                      size_t len, tp_rma_t *req)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    ucp_request_param_t p = { .op_attr_mask = 0 };
    tp_rma_t put = { NULL };
    req->req = NULL;
    RETURN_IF_ERR(ucx_lost_error(e, 0));
    weft_status_t st = posted(e, ucp_put_nbx(e->ep, src, len, raddr, ((ucx_rkey_t *)rmem)->h,
                                             &p), &put, "one-sided write to");
    if (st < 0)
        return st;
    if (put.req)
        ucp_request_free(put.req);      /* UCX frees it once done; the flush reports */
    return posted(e, ucp_ep_flush_nbx(e->ep, &p), req, "one-sided write to");
}

weft_status_t ucx_rma_test(tp_ep_t *ep, tp_rma_t *req)
{
    ucs_status_t s = ucx_req_test(&req->req);
    if (s == UCS_INPROGRESS)
        return WEFT_IN_PROGRESS;
    return s == UCS_OK ? WEFT_OK : rma_failed((ucx_ep_t *)ep, s, "one-sided transfer with");
}

/* A failed call's transfer: waits 100 ms at most for it to end (a lost endpoint's are
 * completed with an error by UCX). One still running then, towards a peer that is still
 * there, would go on writing the caller's buffer (a get: within a host UCX runs it as
 * active messages, which land whenever the peer's worker answers) or reading it (a put):
 * the endpoint is closed, and UCX completes the request as cancelled. A peer that failed
 * or exited answers nothing more: its request is left to UCX, which frees it whenever it
 * ends (within a host a get to a dead peer stays in progress even after a forced close,
 * and waiting for it would delay the failure's report). */
void ucx_rma_cancel(tp_ep_t *ep, tp_rma_t *req)
{
    ucx_ep_t *e = (ucx_ep_t *)ep;
    uint64_t deadline = time_ns() + 100000000ull;
    while (req->req && ucx_req_test(&req->req) == UCS_INPROGRESS && time_ns() < deadline)
        ucp_worker_progress(e->x->worker);
    if (req->req == NULL)
        return;
    if (!__atomic_load_n(&e->lost, __ATOMIC_SEQ_CST) && !ucx_peer_exited(e)) {
        LOG_INFO(LOG_NET, "ucx: a one-sided transfer with rank %d is still running after "
                 "the failed call: closing the endpoint, so that it touches the call's "
                 "buffer no more", ep->peer);
        ucx_withdraw(e);
        deadline = time_ns() + FORCE_CLOSE_S * 1000000000ull;
        while (ucx_req_test(&req->req) == UCS_INPROGRESS && time_ns() < deadline)
            ucp_worker_progress(e->x->worker);
        if (req->req)
            LOG_WARN(LOG_NET, "ucx: a one-sided transfer with rank %d was still running %d "
                     "s after its endpoint closed: it may yet touch the failed call's buffer",
                     ep->peer, FORCE_CLOSE_S);
    }
    if (req->req) {
        ucp_request_free(req->req);
        req->req = NULL;
    }
}
