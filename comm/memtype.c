/*
 * memtype.c - copy and reduce by memory type (memtype.h): host memory through the
 * kernels (kernels/reduce.h), CUDA memory refused until a device build brings its table.
 *
 * The host table is on every frame's path (the engine's receive steps), so its
 * functions are the kernels' calls and nothing more.
 */
#include <string.h>

#include "memtype.h"
#include "reduce.h"
#include "status.h"

static weft_status_t host_copy(void *dst, const void *src, size_t n, int nt)
{
    if (nt)
        kern_copy_nt(dst, src, n);
    else
        memmove(dst, src, n);
    return WEFT_OK;
}

static weft_status_t host_reduce(void *dst, const void *x, const void *y, size_t n,
                                 weft_dtype_t dtype, weft_op_t op, int div, int nt)
{
    if (nt)
        kern_reduce_nt(dst, x, y, n, dtype, op, div);
    else
        kern_reduce(dst, x, y, n, dtype, op, div);
    return WEFT_OK;
}

static weft_status_t host_divide(void *dst, const void *src, size_t n, weft_dtype_t dtype,
                                 int div)
{
    kern_divide(dst, src, n, dtype, div);
    return WEFT_OK;
}

static weft_status_t cuda_refuse(const char *what)
{
    return weft_error(WEFT_ERR_UNSUPPORTED, "memory type cuda: cannot %s device memory: "
                      "this build of weft has no CUDA copy or reduction (host memory only)",
                      what);
}

static weft_status_t cuda_copy(void *dst, const void *src, size_t n, int nt)
{
    return cuda_refuse("copy");
}

static weft_status_t cuda_reduce(void *dst, const void *x, const void *y, size_t n,
                                 weft_dtype_t dtype, weft_op_t op, int div, int nt)
{
    return cuda_refuse("reduce");
}

static weft_status_t cuda_divide(void *dst, const void *src, size_t n, weft_dtype_t dtype,
                                 int div)
{
    return cuda_refuse("divide");
}

static const mem_ops_t mem_tables[MEM_TYPES] = {
    [MEM_HOST] = { .type = MEM_HOST, .name = "host", .usable = 1,
                   .copy = host_copy, .reduce = host_reduce, .divide = host_divide },
    [MEM_CUDA] = { .type = MEM_CUDA, .name = "cuda", .usable = 0,
                   .copy = cuda_copy, .reduce = cuda_reduce, .divide = cuda_divide },
};

const mem_ops_t *mem_ops_for(mem_type_t t)
{
    return (unsigned)t < MEM_TYPES ? &mem_tables[t] : &mem_tables[MEM_CUDA];
}

mem_type_t mem_type_of(const void *ptr)
{
    return MEM_HOST;
}

const char *mem_type_name(mem_type_t t)
{
    return mem_ops_for(t)->name;
}
