/*
 * topo.h - the machine as weft sees it: CPUs, NUMA nodes, GPUs and NICs, from hwloc.
 *
 * A topo_t is loaded once (from this machine, or from an hwloc XML export so that
 * placement decisions can be tested on hardware we do not have) and is read-only
 * afterwards; every query below is a pure function of it. hwloc types stay inside
 * topo.c: callers see counts, small structs and index lists.
 *
 * Indices: NUMA nodes and cores are hwloc *logical* indices (L#, the order of
 * `hwloc-ls`); `cpus` strings hold OS PU numbers (what taskset and /proc show).
 * GPUs and NICs are listed in PCI bus-id order, so the i-th GPU is CUDA device i under
 * CUDA_DEVICE_ORDER=PCI_BUS_ID.
 */
#ifndef WEFT_TOPO_H
#define WEFT_TOPO_H

#include <stdio.h>

#include "weft.h"

typedef struct topo topo_t;

#define TOPO_NAME_MAX 32
#define TOPO_MODEL_MAX 64
#define TOPO_BUSID_MAX 16          /* "0000:84:00.0" */
#define TOPO_LIST_MAX 128          /* "0-7,16-23"; longer lists end in "..." */

/* A GPU: a PCI device with a compute OS device (CUDA, NVML, RSMI, Level Zero, OpenCL
 * GPU), or an NVIDIA display controller, or an AMD 3D/compute-class controller. */
typedef struct topo_gpu {
    char name[TOPO_NAME_MAX];      /* cuda0, nvml3, opencl0d1; "gpuN" when no OS device */
    char model[TOPO_MODEL_MAX];    /* GPUModel, else the PCI device name */
    char busid[TOPO_BUSID_MAX];    /* "" when not on PCI */
    int numa;                      /* nearest NUMA node (logical), -1 unknown */
} topo_gpu_t;

/* A network adapter: the network and OpenFabrics OS devices of one PCI function,
 * merged (mlx5_0 and ib0 are one NIC). */
typedef struct topo_nic {
    char name[TOPO_NAME_MAX];      /* the verbs device when there is one, else ifname */
    char ifname[TOPO_NAME_MAX];    /* network interface (ib0, eth0), "" when none */
    char hca[TOPO_NAME_MAX];       /* OpenFabrics/verbs device (mlx5_0), "" when none */
    char busid[TOPO_BUSID_MAX];    /* "" when not on PCI */
    int numa;                      /* nearest NUMA node (logical), -1 unknown */
    int is_ib;                     /* InfiniBand link (not Ethernet/RoCE) */
} topo_nic_t;

/* Where one local rank should run. Written by topo_place, consumed by topo_bind. */
typedef struct topo_place {
    int local_rank;
    int numa;                      /* NUMA node of its cores (logical) */
    int gpu;                       /* index for topo_gpu(), -1 when none */
    int nic;                       /* index for topo_nic(), -1 when none */
    int ncores;                    /* cores in its set */
    int shared;                    /* 1 when other ranks share these cores */
    int core_begin, core_end;      /* [begin, end) in topo's NUMA-ordered core list */
    char cores[TOPO_LIST_MAX];     /* logical core indices, "0-3" */
    char cpus[TOPO_LIST_MAX];      /* OS PU numbers of those cores, "0-3,16-19" */
} topo_place_t;

/* Loads the topology of this machine (xml_path NULL or "") or of an hwloc XML file,
 * keeping PCI and OS devices. A missing or unparsable file gives WEFT_ERR_INVALID_ARG;
 * on any error *topo_p is untouched and nothing is leaked. */
weft_status_t topo_load(const char *xml_path, topo_t **topo_p);
/* This machine's cpus, caches and NUMA nodes only: no GPUs or NICs, so no I/O discovery
 * (hwloc's pci plugin, slower, and it leaves libpciaccess allocations behind). Enough
 * for binding: topo_place's cores do not depend on the devices. */
weft_status_t topo_load_cpus(topo_t **topo_p);
void topo_free(topo_t *t);

/* 1 when loaded from XML (or otherwise not describing the running machine). */
int topo_is_xml(const topo_t *t);
const char *topo_source(const topo_t *t);        /* the XML path, or "this machine" */
const char *topo_machine_name(const topo_t *t);  /* DMI product or host name, or "" */

int topo_num_packages(const topo_t *t);
int topo_num_numa(const topo_t *t);
int topo_num_cores(const topo_t *t);   /* PUs stand in for cores where hwloc has none */
int topo_num_pus(const topo_t *t);

int topo_num_gpus(const topo_t *t);
const topo_gpu_t *topo_gpu(const topo_t *t, int i);   /* NULL when out of range */
int topo_num_nics(const topo_t *t);
const topo_nic_t *topo_nic(const topo_t *t, int i);   /* NULL when out of range */

/* Placement of local rank `local_rank` of `local_size` ranks on this host:
 * ranks go to NUMA nodes in contiguous blocks in proportion to their cores, then to
 * contiguous, disjoint blocks of that node's cores; with fewer ranks than nodes each
 * rank takes whole nodes (numa is its first); with more ranks than cores, ranks share
 * single cores. GPU: the local_rank-th when there are exactly
 * local_size GPUs, else one near the rank's node. NIC: InfiniBand near the GPU (or the
 * cores) first, then any NIC near it, then any InfiniBand, then any. */
weft_status_t topo_place(const topo_t *t, int local_rank, int local_size,
                         topo_place_t *out);

/* Binds the calling process (all its threads) to the placement's cores. Only for the
 * topology of this machine: WEFT_ERR_UNSUPPORTED for one loaded from XML. */
weft_status_t topo_bind(const topo_t *t, const topo_place_t *p);

/* 1 when this process is already bound to fewer cpus than the machine lets it use (a
 * launcher or the user bound it), with that set in cpus ("" when unknown); 0 when it
 * may run anywhere, and always for a topology loaded from XML. */
int topo_bound_elsewhere(const topo_t *t, char *cpus, size_t cap);
/* Binds the calling process (all its threads) to the OS cpus of a list ("0-3,8"): a
 * malformed list, or cpus this process may not use, give WEFT_ERR_INVALID_ARG and bind
 * nothing. Only for the topology of this machine. */
weft_status_t topo_bind_cpus(const topo_t *t, const char *cpus);

/* Readable summary: source, machine, counts, each GPU and NIC. */
void topo_print(const topo_t *t, FILE *out);
/* One line for a placement: "rank 0: numa 0 cores 0-3 (cpus 0-3,16-19) gpu ... nic ...". */
void topo_place_print(const topo_t *t, const topo_place_t *p, FILE *out);

#endif
