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
 * GPUs are listed as CUDA numbers them: where hwloc reports CUDA OS devices (cudaN),
 * the GPUs that carry one, gpu i being cudaI; else, where it reports NVML ones (nvmlN),
 * those GPUs by N (bus order); else every GPU found, in PCI bus-id order (CUDA device i
 * under CUDA_DEVICE_ORDER=PCI_BUS_ID). GPUs without such a device where others have one
 * (a Tesla CUDA does not drive, an AMD card) are not indexed: topo_print lists them.
 * NICs are in PCI bus-id order.
 */
#ifndef WEFT_TOPO_H
#define WEFT_TOPO_H

#include <stddef.h>
#include <stdint.h>
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
    char uuid[48];                 /* NVIDIAUUID of its NVML device ("GPU-..."), "" unknown */
    char busid[TOPO_BUSID_MAX];    /* "" when not on PCI */
    int numa;                      /* nearest NUMA node (logical), -1 unknown */
    unsigned long long pci_id;     /* topo.c's handle on the PCI device, 0 none */
    int cuda, nvml;                /* N of its cudaN / nvmlN OS device, -1 none */
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
    unsigned long long pci_id;     /* topo.c's handle on the PCI device, 0 none */
} topo_nic_t;

/* How far a device is from a rank's GPU (or, without one, from its cores), nearest
 * first. Without a GPU the PCI classes cannot happen: a rank's cores are only near
 * (same NUMA node) or far. */
typedef enum topo_dist {
    TOPO_DIST_SWITCH = 0,          /* behind the same PCIe switch as the GPU */
    TOPO_DIST_HOSTBRIDGE,          /* same host bridge (root complex), another switch */
    TOPO_DIST_NUMA,                /* same NUMA node, another host bridge */
    TOPO_DIST_FAR,                 /* another NUMA node, or unknown */
} topo_dist_t;
const char *topo_dist_name(topo_dist_t d);   /* "pcie-switch", "host-bridge", "numa", "far" */

/* Where one local rank should run. Written by topo_place, consumed by topo_bind. */
typedef struct topo_place {
    int local_rank;
    int numa;                      /* NUMA node of its cores (logical) */
    int gpu;                       /* index for topo_gpu(), -1 when none */
    int nic;                       /* index for topo_nic(), -1 when none */
    topo_dist_t nic_dist;          /* how near that NIC is to the GPU (or the cores) */
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
/* This machine as topo_load sees it, restricted to the cpus this process is bound to
 * (taskset, numactl, a launcher's binding): what a launcher may hand out to its ranks. */
weft_status_t topo_load_bound(topo_t **topo_p);
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

/* What CUDA_VISIBLE_DEVICES (as the loader found it) does to topo_place's GPUs: "" when
 * it was not set, else a line for weft-topo and the log. */
const char *topo_gpu_visibility(const topo_t *t);
#define TOPO_VIS_MAX 64

/* Placement of local rank `local_rank` of `local_size` ranks on this host.
 * GPU: local rank i uses GPU i mod ngpus, GPUs in CUDA's order (above): the LOCAL_RANK
 * convention of torchrun/NCCL jobs, cudaSetDevice(local_rank % count). Where the process
 * had CUDA_VISIBLE_DEVICES when loaded (read by topo_load*, as CUDA reads it: indices up
 * to the first invalid one), local rank i uses the (i mod n)-th of the n GPUs it shows,
 * as `cudaSetDevice(local_rank % count)` does; every local rank is taken to see the same
 * list, except where it shows one GPU to several local ranks (srun --gpus-per-task:
 * each sees its own, which a rank cannot know): the cores are then NUMA blocks, as
 * without GPUs, and the GPU decides the NIC only. A repeated index shows no GPU (as in
 * CUDA); GPU UUIDs are matched by prefix against topo_gpu_t.uuid (hwloc's NVML data), and
 * a list that matches none (MIG instances, no NVML data) leaves every rank without a
 * known GPU. The indices count in the list above; on this machine, where hwloc reports
 * CUDA devices, CUDA has applied the variable to them already, and it is not applied
 * again (under Slurm's ConstrainDevices the job's GPUs are the only ones CUDA and NVML
 * report, so its relative indices count among them).
 * Cores, with GPUs: the NUMA node of the rank's GPU, split into contiguous, disjoint
 * blocks among the ranks whose GPUs sit on that node (shared single cores when there
 * are more such ranks than the node has cores). Cores, without GPUs (or a GPU whose
 * node is unknown): ranks go to NUMA nodes in contiguous blocks in proportion to their
 * cores, then to disjoint blocks of that node's cores; with fewer ranks than nodes each
 * rank takes whole nodes (numa is its first); with more ranks than cores, ranks share
 * single cores. NIC: topo_nic_for_rank with no filter, any kind. */
weft_status_t topo_place(const topo_t *t, int local_rank, int local_size,
                         topo_place_t *out);

/* Which network devices a rank may use: WEFT_IB_HCA / WEFT_SOCKET_IFNAME, NCCL's syntax.
 *   "mlx5_0:1,mlx5_1"  those devices (a name is a prefix: "mlx5" is every mlx5_N),
 *                      the first with port 1; a device without a port gets port 1
 *   "^mlx5_2"          every device but these ("^eth" excludes eth0, eth1, ...)
 *   "=mlx5_0"          exact names only ("^=" combines both)
 * "" is no filter. The topology lists devices, not HCA ports: in an exclusion a port
 * excludes the device only when it names port 1, the only one weft picks by itself. */
#define TOPO_FILTER_MAX 16
typedef struct topo_nic_filter {
    int exclude;                   /* ^: the entries are what may not be used */
    int exact;                     /* =: whole names, not prefixes */
    int n;                         /* entries; 0: no filter */
    struct {
        char name[TOPO_NAME_MAX];
        int port;                  /* 0: none given */
    } e[TOPO_FILTER_MAX];
} topo_nic_filter_t;
/* Parses spec for the knob named `knob` (for the message). Bad syntax (empty entry or
 * name, a port that is not a number from 1 to 255, a name too long, more than
 * TOPO_FILTER_MAX entries) gives WEFT_ERR_INVALID_ARG and leaves *f untouched. */
weft_status_t topo_nic_filter_parse(const char *spec, const char *knob, topo_nic_filter_t *f);
/* 1 when the filter lets device `name` be used; *port (may be NULL) gets its port. */
int topo_nic_filter_allows(const topo_nic_filter_t *f, const char *name, int *port);
/* For a transport that walks a device's ports itself (ib): 1 when the filter lets port
 * `port` of device `name` be used. An entry without a port stands for every port of the
 * device, in an inclusion and in an exclusion, as in NCCL. */
int topo_nic_filter_allows_port(const topo_nic_filter_t *f, const char *name, int port);

/* The network device of one local rank. */
typedef enum topo_nic_kind {
    TOPO_NIC_ANY = 0,              /* nearest of all; InfiniBand first at equal distance */
    TOPO_NIC_IB,                   /* verbs devices (HCAs), matched and named by HCA name */
    TOPO_NIC_SOCKET,               /* network interfaces, matched and named by ifname */
} topo_nic_kind_t;
typedef struct topo_nic_choice {
    int nic;                       /* index for topo_nic(), -1: no device of that kind */
    char name[TOPO_NAME_MAX];      /* HCA (IB, and ANY when it has one) or ifname */
    int port;                      /* HCA port (the filter's, else 1); 0 for interfaces */
    topo_dist_t dist;              /* its distance class */
    int tied;                      /* devices in that class the choice rotated over */
} topo_nic_choice_t;
/* The nearest allowed device of `kind` to local rank r's GPU (or its cores: see
 * topo_place): class by class (topo_dist_t); devices tied in the best class go
 * round-robin to the ranks that see the same tie, in local rank order. `filter` is the
 * knob's value (NULL or "" for none). Bad syntax, and a filter that leaves no device of
 * the kind, give WEFT_ERR_INVALID_ARG (the latter naming what exists); no device of
 * the kind at all, without a filter, is WEFT_OK with out->nic = -1. Only the first 64
 * devices are considered. */
weft_status_t topo_nic_for_rank(const topo_t *t, int local_rank, int local_size,
                                topo_nic_kind_t kind, const char *filter,
                                topo_nic_choice_t *out);
/* The same for a rank its launcher bound to NUMA node bound_numa (topo_cpus_numa; -1:
 * unbound, as topo_nic_for_rank): a rank without a GPU takes the devices nearest that
 * node, not the node topo_place would have given it (srun --cpu-bind=cores spreads
 * tasks over the sockets cyclically, Open MPI's --bind-to core by core: local rank 1 of
 * 4 on a two-socket host sits on socket 1, where weft's own blocks put it on socket 0).
 * A rank with a GPU keeps its GPU's devices. */
weft_status_t topo_nic_for_bound_rank(const topo_t *t, int local_rank, int local_size,
                                      topo_nic_kind_t kind, const char *filter,
                                      int bound_numa, topo_nic_choice_t *out);
/* The NUMA node (as topo_place_t.numa counts them) holding every one of the ncpus OS
 * cpu numbers, -1 when they span several, include one the topology does not have, or
 * are every cpu it has (no binding to speak of). */
int topo_cpus_numa(const topo_t *t, const int *cpus, int ncpus);

/* Host identity: the same on every process of one host (or one UTS namespace), different
 * across hosts. A hash of the host name, the kernel's boot id and /etc/machine-id (what
 * exists of them); override non-empty (WEFT_HOSTID) replaces all three, so tests and
 * containers can say which processes share a host (they must then share /dev/shm).
 * hostname gets the host name (for messages) either way. */
uint64_t topo_host_id(const char *override, char *hostname, size_t cap);

/* Ring order of n ranks whose hosts are host_id[]: host-major (hosts in order of their
 * first rank, ranks of a host in rank order), so the ring crosses between hosts once
 * per host. order[i] is the i-th rank on the ring. */
void topo_ring_order(const uint64_t *host_id, int n, int *order);

/* 1 when this machine has a PCI display/3D or accelerator-class device from NVIDIA or
 * AMD, from sysfs (cheap: no hwloc I/O discovery); 0 when none or no sysfs. */
int topo_machine_has_gpus(void);

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
