/*
 * mem.h - memory the ranks of one host can share (weft_mem_alloc), and how a peer finds
 * memory: a region, or a transport's packed remote key.
 */
#ifndef WEFT_MEM_H
#define WEFT_MEM_H

#include <stddef.h>
#include <stdint.h>

/* One allocation as its owner describes it to a peer: the peer opens the owner's fd
 * through /proc/<pid>/fd and maps it. fd < 0: not weft_mem_alloc memory (or a region
 * inherited across fork(), which is the child's own and not shared). */
typedef struct mem_region {
    uint64_t base, size;        /* in the owner's address space */
    int32_t fd;
    uint32_t serial;            /* never reused within a process: tells a new region from
                                   an old one at the same address or fd */
} mem_region_t;

/* A packed remote key: what a peer needs to reach one registered buffer, as the transport
 * that packed it (registry slot tp) wrote it. Fixed size, so sched_meta_t is a flat
 * blob; len 0 = no key. UCX keys (ucp_rkey_pack) are tens of bytes on shm, cma and tcp
 * and grow by about 10 per RDMA device; a transport whose key does not fit refuses to
 * register (mem_reg fails, naming TP_RKEY_BYTES). */
#define TP_RKEY_BYTES 252
typedef struct tp_rkey {
    uint16_t len;               /* bytes of blob in use */
    uint8_t tp;                 /* the packing transport's registry slot */
    uint8_t pad;
    uint8_t blob[TP_RKEY_BYTES];
} tp_rkey_t;
_Static_assert(sizeof(tp_rkey_t) == 256, "tp_rkey_t is a flat 256-byte record");

/* The region holding ptr, or fd = -1 when ptr is not weft_mem_alloc memory. */
void mem_lookup(const void *ptr, mem_region_t *r);

/* Called by weft_mem_free, before the pages go, with the region: a transport that keeps
 * registrations of weft_mem_alloc memory (ib's cache) drops them there. Hooks run one
 * free at a time, never while mem_lookup's lock is held; remove waits for a running one.
 * add returns -1 when out of memory. */
typedef void (*mem_free_hook_t)(void *ctx, const mem_region_t *r);
int mem_free_hook_add(mem_free_hook_t fn, void *ctx);
void mem_free_hook_remove(mem_free_hook_t fn, void *ctx);

#endif
