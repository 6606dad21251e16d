/*
 * dtype.c - names and sizes of weft's dtypes and ops, and random bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include "util.h"

static const struct { const char *name; size_t size; } dtypes[WEFT_NUM_DTYPES] = {
    [WEFT_INT8] = { "int8", 1 },       [WEFT_UINT8] = { "uint8", 1 },
    [WEFT_INT32] = { "int32", 4 },     [WEFT_UINT32] = { "uint32", 4 },
    [WEFT_INT64] = { "int64", 8 },     [WEFT_UINT64] = { "uint64", 8 },
    [WEFT_FLOAT16] = { "half", 2 },    [WEFT_BFLOAT16] = { "bfloat16", 2 },
    [WEFT_FLOAT32] = { "float", 4 },   [WEFT_FLOAT64] = { "double", 8 },
};

static const char *ops[WEFT_NUM_OPS] = {
    [WEFT_SUM] = "sum", [WEFT_PROD] = "prod", [WEFT_MIN] = "min", [WEFT_MAX] = "max",
    [WEFT_AVG] = "avg",
};

const char *weft_dtype_name(weft_dtype_t d)
{
    return dtype_valid(d) ? dtypes[d].name : NULL;
}

size_t weft_dtype_size(weft_dtype_t d)
{
    return dtype_valid(d) ? dtypes[d].size : 0;
}

const char *weft_op_name(weft_op_t o)
{
    return op_valid(o) ? ops[o] : NULL;
}

int random_bytes(void *buf, size_t n)
{
    /* getrandom: no descriptor (a rank out of them at init still makes its nonces) */
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom((char *)buf + got, n - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got == n)
        return 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);   /* a kernel without it */
    if (fd < 0)
        return -1;
    got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0) {
            close(fd);
            return -1;
        }
        got += (size_t)r;
    }
    close(fd);
    return 0;
}
