/*
 * config.h - weft's tunables: one table of {name, default, doc, offset, parser}.
 *
 * cfg_load() parses the environment once into a weft_config_t that is then passed
 * explicitly (the communicator keeps its copy). cfg_print() documents every knob with
 * its current value; `weft-topo --print-config` shows it.
 */
#ifndef WEFT_CONFIG_H
#define WEFT_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weft.h"

typedef struct weft_config {
    char debug[16];           /* WEFT_DEBUG (read by the logger) */
    char debug_subsys[128];   /* WEFT_DEBUG_SUBSYS (read by the logger) */
    double timeout_s;         /* WEFT_TIMEOUT */
    double wait_warn_s;       /* WEFT_WAIT_WARN: a call waiting this long says so (0: never) */
    char transport[16];       /* WEFT_TRANSPORT: auto | shm | tcp | ucx | ib */
    char algo[16];            /* WEFT_ALGO: auto | a registered algorithm (comm/algo.c,
                                 which checks it: algo_check_config) */
    char socket_ifname[64];   /* WEFT_SOCKET_IFNAME */
    char ib_hca[64];          /* WEFT_IB_HCA */
    long ib_qps;              /* WEFT_IB_QPS_PER_CONN */
    long ib_gid_index;        /* WEFT_IB_GID_INDEX: -1 = auto */
    long ib_timeout;          /* WEFT_IB_TIMEOUT */
    long ib_retry_cnt;        /* WEFT_IB_RETRY_CNT */
    long ib_sl, ib_tc;        /* WEFT_IB_SL, WEFT_IB_TC: the QPs' service level, traffic class */
    long ib_pkey;             /* WEFT_IB_PKEY: the QPs' partition key index */
    char ib_zcopy[8];         /* WEFT_IB_ZCOPY: reg | all | 0 (comm/ib/tp_ib.c) */
    char topo_file[256];      /* WEFT_TOPO_FILE */
    char bind[256];           /* WEFT_BIND: auto | none | cores:LIST (comm/bind.c) */
    char hostid[64];          /* WEFT_HOSTID: "" = hostname/boot/machine id (topo_host_id) */
    size_t buffsize;          /* WEFT_BUFFSIZE: bytes of staging per connection */
    int buffsize_given;       /* WEFT_BUFFSIZE was set (environment, or an embedder's
                                 cfg_set_default): shm keeps it where /dev/shm is too
                                 small (init fails, saying so); unset, the shm rings of
                                 a host shrink to fit half of it (comm/shm/tp_shm.c) */
    size_t socket_buffsize;   /* WEFT_SOCKET_BUFFSIZE: SO_SNDBUF/SO_RCVBUF; 0 = autotuning */
    long tcp_dead_s;          /* WEFT_TCP_DEAD: seconds of silence from a peer's host after
                                 which its tcp connection is lost; 0 = the kernel's */
    size_t chunk;             /* WEFT_CHUNK: bytes per frame, 0 = tuner decides */
    long nchannels;           /* WEFT_NCHANNELS: rings per call (slices of the buffer) */
    size_t direct_max;        /* WEFT_DIRECT_MAX: largest message for the direct algo */
    size_t cma_min;           /* WEFT_CMA_MIN: smallest message for single-copy (cma) */
    size_t reg_min;           /* WEFT_REG_MIN: smallest message that probes for registered
                                 buffers (weft_mem_alloc) on every rank */
    size_t nt_min;            /* WEFT_NT_MIN: smallest call whose writes stream (0 = never) */
    long shm_nt;              /* WEFT_SHM_NT: how large frames go into a peer's shm ring:
                                 -1 = auto (comm/shm/tp_shm.c), 0 = plain, 1 = streaming */
    long shm_far;             /* WEFT_SHM_FAR: 2 ranks of one host on cores that share no
                                 cache: -1 = measured at init (connect.c), 0 = no, 1 = yes */
    long spin;                /* WEFT_SPIN: idle polls before yielding the core; -1 = auto */
    long root_check;          /* WEFT_ROOT_CHECK: rooted collectives confirm the root
                                 (-1: auto, algo_root_checked) */
    long progress_thread;     /* WEFT_PROGRESS_THREAD: nonblocking calls progress in a
                                 per-communicator thread (0: only inside weft calls) */
    long cuda;                /* WEFT_CUDA: 0 = never call CUDA (comm/memtype.c) */
    long cuda_async;          /* WEFT_CUDA_ASYNC: stream calls of several ranks only enqueue
                                 (kernels/cuda/queue.c); 0 = they block the caller; -1
                                 (auto) = 1 where no two ranks share a GPU; rank 0's
                                 counts */
    long cuda_ipc;            /* WEFT_CUDA_IPC: device collectives inside a host read and
                                 write peers' GPU memory (kernels/cuda/ipc.c); 0 = stage */
} weft_config_t;

/* Parses every WEFT_* tunable. On a bad value returns WEFT_ERR_INVALID_ARG naming it
 * and leaves *cfg untouched. */
weft_status_t cfg_load(weft_config_t *cfg);
/* Every knob at its default; the name of a knob whose default does not parse (the table's
 * mistake: it then stays 0, as WEFT_IB_GID_INDEX's "-1" did until 2026-11-27), else NULL. */
const char *cfg_defaults(weft_config_t *cfg);
/* Another default for knob `name` in this copy of the library (an embedder's: the NCCL
 * shim's WEFT_BIND=none and WEFT_TIMEOUT off, as NCCL): the environment still wins.
 * WEFT_ERR_INVALID_ARG for an unknown knob or a value it does not take. Not thread-safe:
 * call it before the first communicator. */
weft_status_t cfg_set_default(const char *name, const char *value);
void cfg_print(FILE *out, const weft_config_t *cfg);

/* The knobs every rank of a communicator must set alike, because each rank picks its
 * schedules from them (WEFT_ALGO, WEFT_NCHANNELS, WEFT_DIRECT_MAX, WEFT_CMA_MIN,
 * WEFT_REG_MIN, WEFT_ROOT_CHECK, WEFT_CUDA_IPC): ranks that differ would send frames the
 * others do not expect, or wait for ones that never come. connect_all compares these
 * hashes of their values at its closing barrier. */
/* WEFT_CHUNK's ceiling, and the tuner's: a frame header carries its length in 32 bits
 * (frame.h), and a frame of 4 GiB or more was cut to its low bits there */
#define CFG_CHUNK_MAX ((size_t)1 << 30)
#define CFG_AGREE_MAX 8
typedef struct cfg_agree {
    uint32_t h[CFG_AGREE_MAX];  /* in table order; 0 past the last */
} cfg_agree_t;
/* Fills *out; returns how many knobs must agree. */
int cfg_agree_hash(const weft_config_t *cfg, cfg_agree_t *out);
/* The name of the which-th of those knobs, its value in cfg formatted into val; NULL
 * past the last (or for a name the table lacks, which test_algos rules out). */
const char *cfg_agree_name(int which, const weft_config_t *cfg, char *val, size_t cap);

/* "4M", "256k", "1G", "4096" -> bytes. Returns 0 on success, -1 on garbage/overflow. */
int cfg_parse_size(const char *s, size_t *out);

#endif
