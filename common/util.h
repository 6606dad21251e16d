/*
 * util.h - small helpers used across layers: time, alignment, hashing, dtype facts.
 */
#ifndef WEFT_UTIL_H
#define WEFT_UTIL_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "weft.h"

#define WEFT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define WEFT_MAX(a, b) ((a) > (b) ? (a) : (b))
#define WEFT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define WEFT_CACHELINE 64

static inline size_t align_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

static inline uint64_t time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The same clock at its tick (CLOCK_MONOTONIC_COARSE: a few ms of resolution, never
 * ahead of time_ns()), for once-per-call bookkeeping: ~3 ns instead of ~25 ns a read on
 * this VM's kvm-clock, which is a tenth of a small all-reduce. */
static inline uint64_t time_ns_coarse(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double time_s(void)
{
    return (double)time_ns() * 1e-9;
}

/* FNV-1a over a byte range, chained through h (start with HASH_SEED). */
#define HASH_SEED 0xcbf29ce484222325ull
static inline uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* dtype facts; the _valid checks are the one place the enums are range-checked. */
static inline int dtype_valid(int d) { return d >= 0 && d < WEFT_NUM_DTYPES; }
static inline int op_valid(int o)    { return o >= 0 && o < WEFT_NUM_OPS; }

/* 1 when process pid has exited: gone (ESRCH: EPERM is also what a security policy that
 * forbids signals between ranks answers for a live one), or a zombie its parent has not
 * reaped yet, which kill() still finds (a launcher that waits for rank 0 before rank 1
 * left rank 1 waiting for a dead rank 0 until WEFT_TIMEOUT, before 2026-11-27). */
static inline int pid_exited(int pid)
{
    if (kill(pid, 0) != 0)
        return errno == ESRCH;
    char path[48], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');    /* the command name may hold anything */
    if (!(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X')))
        return 0;
    /* a main thread that called pthread_exit shows Z too while the others run on */
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    if ((f = fopen(path, "re")) == NULL)
        return 1;
    int threads = 1;
    while (fgets(buf, sizeof(buf), f))
        if (sscanf(buf, "Threads: %d", &threads) == 1)
            break;
    fclose(f);
    return threads <= 1;
}

/* This process's pid namespace (device and inode of /proc/self/ns/pid, hashed), 0 where
 * it cannot be read. Ranks of one host may sit in different ones (one container per rank
 * with a shared /dev/shm, docker --ipc=host): a peer's pid then means nothing here. */
static inline uint64_t pid_ns_id(void)
{
    struct stat sb;
    if (stat("/proc/self/ns/pid", &sb) != 0)
        return 0;
    uint64_t id = (uint64_t)sb.st_dev << 32 ^ (uint64_t)sb.st_ino;
    return id ? id : 1;     /* (namespaces' inodes run consecutively: keep every bit) */
}

/* a * b without overflow: returns 0 and sets *out, or -1 when it would overflow. */
static inline int mul_size(size_t a, size_t b, size_t *out)
{
    if (b != 0 && a > SIZE_MAX / b)
        return -1;
    *out = a * b;
    return 0;
}

/* Reads /dev/urandom fully; returns 0 or -1. */
int random_bytes(void *buf, size_t n);

#endif
