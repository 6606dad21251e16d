/*
 * simtime.h - weft-sim's timing executor: how long one call's schedules take on a
 * described cluster, without data.
 *
 * The cluster (simtime_cluster_t) is hosts x ranks per host, ranks numbered host by host
 * (rank r on host r / ranks_per_host), with an alpha-beta-gamma model per link class
 * (algo.h: ALGO_LINK_SHM inside a host, ALGO_LINK_NET between hosts) plus what a replay
 * needs beyond the closed forms: NICs per host, a per-frame link overhead, the local copy
 * bandwidth, the frame size and the staging bound, the cores per host, and whether
 * shared memory moves frames with the ranks' own CPUs. comm/simtime.c's banner says what is
 * modelled and what is not; docs/SCALE.md documents the model file (key = value).
 *
 * Invariant: a cluster that simtime_cluster_check accepts is one the executor can run;
 * every setter refuses bad input with WEFT_ERR_INVALID_ARG and a message
 * (weft_last_error) and leaves the cluster unchanged.
 */
#ifndef WEFT_SIMTIME_H
#define WEFT_SIMTIME_H

#include <stddef.h>
#include <stdio.h>

#include "algo.h"

typedef struct simtime_cluster {
    int hosts, per_host;        /* ranks = hosts * per_host */
    int nics;                   /* NICs per host; rank r sends and receives between hosts
                                   on NIC (r % per_host) % nics of its host (those beyond
                                   per_host carry nothing, and the replay keeps none) */
    algo_model_t m;             /* alpha (s), beta (s/byte) per link class, gamma (s/byte) */
    double overhead[ALGO_NLINKS];   /* s a link stays busy per frame beyond bytes * beta */
    double copy_beta;           /* s/byte of a local copy (memory bandwidth) */
    size_t chunk;               /* frame payload; 0: weft's default (128K within one host,
                                   512K across hosts: the transports' chunk) */
    size_t staging;             /* bytes a link holds before its sender waits
                                   (WEFT_BUFFSIZE); 0: unbounded */
    const int *rank_host;       /* [ranks] each rank's host (simtime_host_map), what the
                                   layouts point to as the engine's point to the
                                   communicator's map; NULL: no map, and algorithms that
                                   need one (hier) decline */
    int cores;                  /* cores per host; 0: one per rank. A host with more ranks
                                   than cores time-shares them: every compute cost (and
                                   shm_copies' copies) of its ranks takes per_host / cores
                                   times as long */
    int shm_copies;             /* 1: a frame inside a host is moved by the ranks' own
                                   CPUs, as weft's shm transport does: the sender copies it
                                   into the link and the receiver copies (or reduces) it
                                   out, each on its compute resource at copy_bw (gamma when
                                   reducing), serialized with its other work; 0: by a
                                   link with ports of its own (NVLink, copy engines) */
    int net_copies;             /* 1: a frame between hosts is moved by the CPUs at either
                                   end, as tcp's kernel copies do: bytes * inter beta on
                                   the sender's compute resource and again on the
                                   receiver's (plus gamma when it reduces), no NIC ports
                                   (nics changes nothing then); 0: by NICs (RDMA) */
    int channels;               /* WEFT_NCHANNELS (1-64): the ring's and chains' channels,
                                   offered as the tuner offers them (algo_channels) */
} simtime_cluster_t;

/* This VM's defaults (algo_model_default's numbers), 1 host x 2 ranks, one NIC. */
void simtime_cluster_default(simtime_cluster_t *c);

/* Sets one key (the model file's names: hosts, ranks_per_host, nics, intra_bw, intra_lat,
 * inter_bw, inter_lat, reduce_bw, copy_bw, intra_overhead, inter_overhead, chunk,
 * staging, cores, shm_copies, net_copies, channels; bandwidths in GB/s, latencies and overheads in us, sizes with K/M/G) from its
 * text. Unknown key or bad value: WEFT_ERR_INVALID_ARG, c unchanged. */
weft_status_t simtime_cluster_set(simtime_cluster_t *c, const char *key, const char *value);

/* Reads a model file: "key = value" lines, '#' comments, blank lines. The first bad line
 * fails with its file and line number in the message. */
weft_status_t simtime_cluster_load(simtime_cluster_t *c, const char *path);

/* Whether c describes a cluster the executor can run (positive counts and bandwidths,
 * at most SIMTIME_MAX_RANKS ranks, a chunk within the staging bound). */
#define SIMTIME_MAX_RANKS 65536
weft_status_t simtime_cluster_check(const simtime_cluster_t *c);

/* Writes c as a model file simtime_cluster_load reads back. */
void simtime_cluster_write(const simtime_cluster_t *c, FILE *f);

/* The frame payload a call of `args` gets on c (weft's tuner: the chunk, at most a
 * quarter of the staging, a multiple of 64 and of the element size). */
size_t simtime_chunk(const simtime_cluster_t *c, const sched_args_t *args);

/* The layout of `rank` on c. */
void simtime_layout(const simtime_cluster_t *c, int rank, sched_layout_t *l);
/* rank_host[r] = rank r's host on c (r / per_host): the map for c->rank_host. */
void simtime_host_map(const simtime_cluster_t *c, int *rank_host);

typedef struct simtime_result {
    double seconds;             /* from the start until the last rank's last step */
    long long steps, frames, events;
    size_t peak_bytes;          /* the executor's own memory at its largest */
} simtime_result_t;

/* Replays algorithm `al` for the call `args` (coll, count, dtype, op, root, inplace;
 * rank, nranks, chunk and layout are set here from c) on every rank of c: each rank's
 * schedule is built by algo_build (root_check as WEFT_ROOT_CHECK), exactly what the
 * engine runs. WEFT_ERR_UNSUPPORTED when `al` does not support the call on some rank;
 * WEFT_ERR_MISMATCH or WEFT_ERR_INTERNAL when the schedules do not fit together (a frame
 * with no room, a deadlock, frames left over), naming the rank and step. A count of 0
 * (a barrier's aside) takes no time and no steps, as the engine runs no schedule then.
 * max_frames > 0 bounds the work: a call whose sends would cut more frames fails with
 * WEFT_ERR_UNSUPPORTED before any is replayed (the time is about 0.3-4 us a frame), and
 * before more schedules are kept than that many frames take: the count stops at the rank
 * that passes the limit, and when rank 0, 1, the middle one and the last each cut more
 * than max_frames / ranks the call is refused from those four alone (the message says
 * "about"). */
weft_status_t simtime_run(const simtime_cluster_t *c, const algo_t *al,
                          const sched_args_t *args, int root_check, long long max_frames,
                          simtime_result_t *res);

#endif
