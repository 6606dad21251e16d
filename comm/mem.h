/*
 * mem.h - memory the ranks of one host can share (weft_mem_alloc), and how a peer finds it.
 */
#ifndef WEFT_MEM_H
#define WEFT_MEM_H

#include <stddef.h>
#include <stdint.h>

/* One allocation as its owner describes it to a peer: the peer opens the owner's fd
 * through /proc/<pid>/fd and maps it. fd < 0: not weft_mem_alloc memory. */
typedef struct mem_region {
    uint64_t base, size;        /* in the owner's address space */
    int32_t fd;
    uint32_t serial;            /* never reused within a process: tells a new region from
                                   an old one at the same address or fd */
} mem_region_t;

/* The region holding ptr, or fd = -1 when ptr is not weft_mem_alloc memory. */
void mem_lookup(const void *ptr, mem_region_t *r);

#endif
