/*
 * initonly.c - what a job of N ranks on one host spends on its shm rings: init, then
 * (mode 1) one barrier, (mode 2) one all-reduce of 1 MB, (mode 3) one of 8 bytes, then
 * destroy. Timed from outside (ab.sh).
 *
 *   gcc -O2 -Iinclude docs/perf/2026-11-28-lazyshm/initonly.c build/lib/libweft.a -lhwloc \
 *       -L/usr/local/cuda/lib64 -lcudart_static -ldl -lstdc++ -lrt -lm -pthread -o /tmp/io
 *   WEFT_TRANSPORT=shm build/bin/weftrun -n 64 /tmp/io 1
 */
#include <stdlib.h>
#include "weft.h"

static float b[262144];

int main(int argc, char **argv)
{
    weft_comm_t *c;
    if (weft_comm_init(&c) != WEFT_OK)
        return 1;
    int mode = argc > 1 ? atoi(argv[1]) : 0;
    weft_status_t st = WEFT_OK;
    if (mode == 1)
        st = weft_barrier(c);
    if (mode == 2)
        st = weft_allreduce(b, b, 262144, WEFT_FLOAT32, WEFT_SUM, c);
    if (mode == 3)
        st = weft_allreduce(b, b, 2, WEFT_FLOAT32, WEFT_SUM, c);
    weft_comm_destroy(c);
    return st != WEFT_OK;
}
