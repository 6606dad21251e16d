/*
 * memtype.h - the memory type of every buffer the engine touches, and the one place
 * where its copies and reductions are dispatched.
 *
 * A buffer's type says who may touch it: HOST memory any CPU code, CUDA memory only a
 * CUDA copy or kernel. The engine never calls memcpy or kern_reduce itself: a call's
 * mem_ops_t (mem_ops_for, chosen once when the call starts from the types of its send
 * and receive buffers; scratch, staging and metadata are host memory) moves and reduces
 * its bytes, so a device build adds a table here and nothing in the engine changes.
 * HOST's table is the host kernels. CUDA's (builds with WEFT_HAVE_CUDA and a visible
 * GPU) runs weft's CUDA kernels (kernels/cuda/) on a stream of the calling thread and
 * waits for them, so its results are in place when a call returns, as the host table's
 * are; without CUDA in the build or without a GPU it refuses every operation with
 * WEFT_ERR_UNSUPPORTED and says why. The engine itself still refuses CUDA buffers
 * (usable 0): its transports read send buffers with the CPU. Device buffers go through
 * include/weft_cuda.h's stream calls (kernels/cuda/stream.c) instead.
 *
 * Invariant: a table's functions take the host table's arguments and give its results
 * bit for bit (kernels/reduce.h); nt asks for streaming stores, a hint.
 */
#ifndef WEFT_MEMTYPE_H
#define WEFT_MEMTYPE_H

#include <stddef.h>

#include "weft.h"

typedef enum { MEM_HOST = 0, MEM_CUDA = 1, MEM_TYPES } mem_type_t;

typedef struct mem_ops {
    mem_type_t type;
    const char *name;
    int usable;                 /* 0: the engine refuses calls on this memory type */
    /* dst = src, n bytes; dst and src may overlap only with nt 0 */
    weft_status_t (*copy)(void *dst, const void *src, size_t n, int nt);
    /* dst = x op y, n elements (AVG: divided by div when div > 0); dst may alias x or y */
    weft_status_t (*reduce)(void *dst, const void *x, const void *y, size_t n,
                            weft_dtype_t dtype, weft_op_t op, int div, int nt);
    /* dst = src / div, n elements */
    weft_status_t (*divide)(void *dst, const void *src, size_t n, weft_dtype_t dtype, int div);
} mem_ops_t;

/* The table for memory of type t (never NULL; t out of range gets CUDA's refusals). */
const mem_ops_t *mem_ops_for(mem_type_t t);
/* The type of the memory at ptr: CUDA for device memory (cudaPointerGetAttributes says
 * cudaMemoryTypeDevice) in a CUDA build with a visible GPU; HOST otherwise, pinned and
 * managed memory included (the CPU may touch both). */
mem_type_t mem_type_of(const void *ptr);
const char *mem_type_name(mem_type_t t);
/* 1 when this build has CUDA, WEFT_CUDA is not 0 and the CUDA runtime sees at least one
 * GPU (asked once per process, on first use); 0 otherwise, with the reason in *why_p when
 * why_p is given. */
int mem_cuda_visible(const char **why_p);

#endif
