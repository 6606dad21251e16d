/*
 * topo.c - hwloc discovery (this machine or an XML export), GPU/NIC lists, rank placement.
 *
 * topo_load builds everything up front: the object counts, the cores ordered NUMA node
 * by node, and the GPU and NIC tables (sorted by PCI bus id). After that a topo_t is
 * read-only, so queries, topo_place and topo_nic_for_rank are pure functions and safe
 * from any thread. Also here, as they are about the machine: the NIC filter syntax
 * (WEFT_IB_HCA, WEFT_SOCKET_IFNAME), the host identity and the host-major ring order.
 *
 * Invariants:
 *  - t->hw is a loaded hwloc topology with PCI and OS devices kept (KEEP_IMPORTANT).
 *  - core_order[0..ncores) is a permutation of the logical indices of the core objects
 *    (PUs when hwloc reports no cores), grouped by core_numa[] in increasing node order;
 *    cores whose node is unknown (-1) come last. run_start[] marks the runs of equal
 *    core_numa, run_start[0] = 0 and run_start[nruns] = ncores.
 *  - gpus[] holds ngpus indexed GPUs, then nother others. Where hwloc reports CUDA OS
 *    devices (cudaN), the indexed ones are the GPUs that carry one, by N (CUDA's
 *    ordinals), the others every other GPU found; else, where it reports NVML ones
 *    (nvmlN), the same by NVML's N; else every GPU, by busid (nother 0).
 *  - nics[] hold nnics entries, sorted by busid, non-PCI ones last; every
 *    name is NUL-terminated and non-empty; pci_id is the gp_index of the PCI device
 *    (bus ids can repeat in an export, gp_index cannot), 0 when off PCI.
 *  - vis[0..nvis) (when vis_set) are distinct indices into gpus[].
 *  - A failed topo_load or topo_place writes nothing to its outputs and leaks nothing.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <hwloc.h>

#include "check.h"
#include "log.h"
#include "status.h"
#include "topo.h"
#include "util.h"

struct topo {
    hwloc_topology_t hw;
    int is_xml;
    int live;                      /* discovered in this process (no XML at all, not even
                                      a cached export of this machine): its CUDA devices
                                      are CUDA's here */
    char source[256];
    char machine[128];
    int npackages, nnuma, ncores, npus;
    hwloc_obj_type_t core_type;    /* HWLOC_OBJ_CORE, or HWLOC_OBJ_PU when no cores */
    int *core_order;               /* (ncores) logical core indices, by NUMA node */
    int *core_numa;                /* (ncores) NUMA node of core_order[i], -1 unknown */
    int *run_start;                /* (nruns + 1) where each node's run of cores starts */
    int nruns;
    topo_gpu_t *gpus;              /* (ngpus + nother): the indexed GPUs, then the others */
    int ngpus;
    int nother;                    /* GPUs outside CUDA's list (no cudaN/nvmlN device) */
    int gpu_key;                   /* what indexes gpus[]: GPU_KEY_* */
    int vis_set;                   /* CUDA_VISIBLE_DEVICES was set when loaded */
    int vis[TOPO_VIS_MAX];         /* then: the visible GPUs, as gpus[] indices */
    int nvis;                      /* how many (0: none, or none that maps to gpus[]) */
    char vis_note[160];            /* what it does, for weft-topo and the log */
    topo_nic_t *nics;
    int nnics;
};

/* ---- small helpers ------------------------------------------------------------- */

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

static void format_busid(hwloc_obj_t pci, char *buf, size_t cap)
{
    if (!pci) {
        buf[0] = '\0';
        return;
    }
    snprintf(buf, cap, "%04x:%02x:%02x.%01x", (unsigned)pci->attr->pcidev.domain,
             pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

/* The PCI device an OS device hangs off, or NULL. */
static hwloc_obj_t pci_parent(hwloc_obj_t osdev)
{
    hwloc_obj_t p = osdev->parent;
    return p && p->type == HWLOC_OBJ_PCI_DEVICE ? p : NULL;
}

/* Nearest NUMA node (logical index) of an I/O object: the node of its closest non-I/O
 * ancestor; -1 when that ancestor spans several nodes (a device whose locality the
 * kernel does not know, numa_node -1, hangs off the whole machine in hwloc): taking the
 * first would put every such GPU and NIC on node 0. */
static int numa_of_io(const topo_t *t, hwloc_obj_t io)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->hw, io);
    if (!anc || !anc->nodeset || hwloc_bitmap_weight(anc->nodeset) != 1)
        return -1;
    int os = hwloc_bitmap_first(anc->nodeset);
    if (os < 0)
        return -1;
    hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(t->hw, (unsigned)os);
    return node ? (int)node->logical_index : -1;
}

/* NUMA node (logical) whose CPUs contain cpuset; the first overlapping one otherwise. */
static int numa_of_cpuset(const topo_t *t, hwloc_const_cpuset_t set)
{
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < t->nnuma; i++) {
            hwloc_obj_t n = hwloc_get_obj_by_type(t->hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
            if (!n || !n->cpuset)
                continue;
            if (pass == 0 ? hwloc_bitmap_isincluded(set, n->cpuset)
                          : hwloc_bitmap_intersects(set, n->cpuset))
                return i;
        }
    }
    return -1;
}

/* ---- loading ------------------------------------------------------------------- */

static weft_status_t hw_open(topo_t *t, const char *xml_path, int io, int bound)
{
    int from_xml = xml_path && xml_path[0];

    if (from_xml && access(xml_path, R_OK) != 0)
        return weft_error(WEFT_ERR_INVALID_ARG, "topo: cannot read topology file '%s': %m",
                          xml_path);
    if (hwloc_topology_init(&t->hw) != 0) {
        t->hw = NULL;
        return weft_error(WEFT_ERR_SYSTEM, "topo: hwloc_topology_init failed: %m");
    }
    if (io)         /* else hwloc's default: no I/O objects, no pci plugin loaded */
        hwloc_topology_set_io_types_filter(t->hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (bound && hwloc_topology_set_flags(t->hw, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM |
                                                     HWLOC_TOPOLOGY_FLAG_RESTRICT_TO_CPUBINDING))
        return weft_error(WEFT_ERR_SYSTEM, "topo: cannot restrict hwloc to this process's "
                          "binding: %m");
    if (from_xml && hwloc_topology_set_xml(t->hw, xml_path) != 0)
        return weft_error(WEFT_ERR_INVALID_ARG,
                          "topo: '%s' is not a valid hwloc XML topology (%m)", xml_path);
    if (hwloc_topology_load(t->hw) != 0) {
        if (from_xml)
            return weft_error(WEFT_ERR_INVALID_ARG,
                              "topo: '%s' is not a usable hwloc XML topology (%m)", xml_path);
        return weft_error(WEFT_ERR_SYSTEM, "topo: hwloc discovery failed: %m");
    }
    t->is_xml = from_xml || !hwloc_topology_is_thissystem(t->hw);
    const char *env_xml = getenv("HWLOC_XMLFILE");
    t->live = !from_xml && !(env_xml && env_xml[0]);
    if (from_xml)
        copy_str(t->source, sizeof(t->source), xml_path);
    else if (t->is_xml)     /* hwloc read another machine from its own environment */
        snprintf(t->source, sizeof(t->source), "HWLOC_XMLFILE=%s",
                 env_xml ? env_xml : "(or another hwloc variable)");
    else
        copy_str(t->source, sizeof(t->source), "this machine");
    return WEFT_OK;
}

static void scan_counts(topo_t *t)
{
    hwloc_obj_t root = hwloc_get_root_obj(t->hw);
    const char *name = hwloc_obj_get_info_by_name(root, "DMIProductName");
    if (!name || !name[0])
        name = hwloc_obj_get_info_by_name(root, "HostName");
    copy_str(t->machine, sizeof(t->machine), name);

    t->npackages = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PACKAGE);
    t->nnuma = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE);
    t->npus = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PU);
    t->ncores = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE);
    t->core_type = HWLOC_OBJ_CORE;
    if (t->ncores <= 0) {          /* some platforms expose PUs only */
        t->ncores = t->npus;
        t->core_type = HWLOC_OBJ_PU;
    }
}

/* Fills run_start from core_numa. */
static weft_status_t scan_runs(topo_t *t)
{
    t->run_start = calloc((size_t)t->ncores + 1, sizeof(int));
    if (!t->run_start)
        return weft_error(WEFT_ERR_NO_MEMORY, "topo: out of memory for %d cores", t->ncores);
    t->nruns = 0;
    for (int i = 0; i < t->ncores; i++)
        if (i == 0 || t->core_numa[i] != t->core_numa[i - 1])
            t->run_start[t->nruns++] = i;
    t->run_start[t->nruns] = t->ncores;
    return WEFT_OK;
}

/* Fills core_order/core_numa: cores grouped by NUMA node, unknown node last. */
static weft_status_t scan_cores(topo_t *t)
{
    int n = t->ncores;
    int *numa = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    t->core_order = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    t->core_numa = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    if (!numa || !t->core_order || !t->core_numa) {
        free(numa);
        return weft_error(WEFT_ERR_NO_MEMORY, "topo: out of memory for %d cores", n);
    }
    for (int i = 0; i < n; i++) {
        hwloc_obj_t c = hwloc_get_obj_by_type(t->hw, t->core_type, (unsigned)i);
        numa[i] = c ? numa_of_cpuset(t, c->cpuset) : -1;
    }
    int pos = 0;
    for (int node = 0; node <= t->nnuma; node++) {
        int want = node < t->nnuma ? node : -1;
        for (int i = 0; i < n; i++) {
            if (numa[i] == want) {
                t->core_order[pos] = i;
                t->core_numa[pos++] = want;
            }
        }
    }
    free(numa);
    if (pos != n)
        return weft_error(WEFT_ERR_INTERNAL, "topo: ordered %d of %d cores", pos, n);
    return scan_runs(t);
}

/* Orders devices by bus id, devices off PCI ("") last. */
static int busid_cmp(const char *a, const char *b)
{
    if (!a[0] || !b[0])
        return (a[0] == '\0') - (b[0] == '\0');
    return strcmp(a, b);
}

enum { GPU_KEY_PCI, GPU_KEY_CUDA, GPU_KEY_NVML };

/* The ordinal that indexes a GPU under key, -1 for none. */
static int gpu_key_of(const topo_gpu_t *g, int key)
{
    return key == GPU_KEY_CUDA ? g->cuda : key == GPU_KEY_NVML ? g->nvml : -1;
}

/* Those with an ordinal first, by it; then the rest by bus id, off PCI last. */
static int gpu_cmp(const topo_gpu_t *x, const topo_gpu_t *y, int key)
{
    int kx = gpu_key_of(x, key), ky = gpu_key_of(y, key);
    if ((kx < 0) != (ky < 0))
        return kx < 0 ? 1 : -1;
    if (kx != ky)
        return kx < ky ? -1 : 1;
    return busid_cmp(x->busid, y->busid);
}

/* Insertion sort by gpu_cmp (a machine has a few dozen GPUs at most). */
static void sort_gpus(topo_gpu_t *g, int n, int key)
{
    for (int i = 1; i < n; i++) {
        topo_gpu_t x = g[i];
        int j = i;
        for (; j > 0 && gpu_cmp(&g[j - 1], &x, key) > 0; j--)
            g[j] = g[j - 1];
        g[j] = x;
    }
}

static int nic_cmp(const void *a, const void *b)
{
    return busid_cmp(((const topo_nic_t *)a)->busid, ((const topo_nic_t *)b)->busid);
}

/* How strongly an OS device says "compute GPU": 0 not at all, higher is preferred as
 * the GPU's name (CUDA over NVML over the others). */
static int gpu_osdev_score(hwloc_obj_t o)
{
    if (o->type != HWLOC_OBJ_OS_DEVICE)
        return 0;
    const char *b = o->subtype;
    if (!b || !b[0])
        b = hwloc_obj_get_info_by_name(o, "Backend");
    if (!b)
        return 0;
    if (!strcasecmp(b, "CUDA"))
        return 4;
    if (!strcasecmp(b, "NVML") || !strcasecmp(b, "RSMI") || !strcasecmp(b, "LevelZero"))
        return 3;
    if (!strcasecmp(b, "OpenCL")) {
        const char *kind = hwloc_obj_get_info_by_name(o, "OpenCLDeviceType");
        return kind && !strcasecmp(kind, "GPU") ? 1 : 0;
    }
    return 0;
}

/* NVIDIA display controllers; AMD 3D, display-other and accelerator classes (an AMD
 * VGA counts only with a compute OS device: server boards carry old ATI VGA chips). */
static int pci_is_gpu_class(hwloc_obj_t pci)
{
    unsigned vendor = pci->attr->pcidev.vendor_id, cls = pci->attr->pcidev.class_id;
    if (vendor == 0x10de)
        return (cls >> 8) == 0x03;
    if (vendor == 0x1002)
        return cls == 0x0302 || cls == 0x0380 || cls == 0x1200;
    return 0;
}

/* N of an OS device named <prefix>N of backend `backend` (CUDA's cuda0: 0), else -1. */
static int osdev_ordinal(hwloc_obj_t o, const char *backend, const char *prefix)
{
    if (o->type != HWLOC_OBJ_OS_DEVICE || !o->name)
        return -1;
    const char *b = o->subtype;
    if (!b || !b[0])
        b = hwloc_obj_get_info_by_name(o, "Backend");
    size_t len = strlen(prefix);
    if (!b || strcasecmp(b, backend) || strncmp(o->name, prefix, len) ||
        !isdigit((unsigned char)o->name[len]))
        return -1;
    char *end;
    long v = strtol(o->name + len, &end, 10);
    return *end == '\0' && v < 1L << 24 ? (int)v : -1;
}

static void add_gpu(topo_t *t, hwloc_obj_t pci, hwloc_obj_t osdev)
{
    topo_gpu_t *g = &t->gpus[t->ngpus++];
    const char *model = osdev ? hwloc_obj_get_info_by_name(osdev, "GPUModel") : NULL;
    if (!model && pci)
        model = hwloc_obj_get_info_by_name(pci, "PCIDevice");
    copy_str(g->name, sizeof(g->name), osdev ? osdev->name : NULL);
    copy_str(g->model, sizeof(g->model), model);
    const char *uuid = NULL;     /* on the NVML device, whichever names the GPU */
    g->cuda = g->nvml = -1;
    for (hwloc_obj_t c = pci ? pci->io_first_child : osdev; c;
         c = pci ? c->next_sibling : NULL) {
        if (!uuid)
            uuid = hwloc_obj_get_info_by_name(c, "NVIDIAUUID");
        int n = osdev_ordinal(c, "CUDA", "cuda");
        if (n >= 0 && (g->cuda < 0 || n < g->cuda))
            g->cuda = n;
        n = osdev_ordinal(c, "NVML", "nvml");
        if (n >= 0 && (g->nvml < 0 || n < g->nvml))
            g->nvml = n;
    }
    copy_str(g->uuid, sizeof(g->uuid), uuid);
    format_busid(pci, g->busid, sizeof(g->busid));
    g->pci_id = pci ? pci->gp_index : 0;
    g->numa = numa_of_io(t, pci ? pci : osdev);
}

static weft_status_t scan_gpus(topo_t *t)
{
    int cap = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PCI_DEVICE) +
              hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_OS_DEVICE);
    t->gpus = calloc((size_t)(cap > 0 ? cap : 1), sizeof(*t->gpus));
    if (!t->gpus)
        return weft_error(WEFT_ERR_NO_MEMORY, "topo: out of memory for gpus");

    for (hwloc_obj_t pci = NULL; (pci = hwloc_get_next_pcidev(t->hw, pci)) != NULL;) {
        hwloc_obj_t best = NULL;
        int best_score = 0;
        for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
            int s = gpu_osdev_score(c);
            if (s > best_score) {
                best = c;
                best_score = s;
            }
        }
        if (best || pci_is_gpu_class(pci))
            add_gpu(t, pci, best);
    }
    /* compute devices that hwloc could not attach to a PCI device */
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(t->hw, o)) != NULL;)
        if (!pci_parent(o) && gpu_osdev_score(o) >= 3)
            add_gpu(t, NULL, o);

    /* Index GPUs as CUDA does (before, every GPU in bus order, so that on a machine with
     * GPUs CUDA does not drive, an old Tesla or an AMD card beside a CUDA one, rank i
     * was given another GPU than CUDA device i). hwloc's CUDA backend names CUDA's own
     * devices cudaN, N the ordinal; its NVML backend nvmlN, NVML's index (bus order).
     * Both report the devices this process can open only (a device cgroup, as Slurm's
     * ConstrainDevices, hides the others from them). Without either: every GPU, by bus. */
    int nkey[3] = { t->ngpus, 0, 0 };
    for (int i = 0; i < t->ngpus; i++) {
        nkey[GPU_KEY_CUDA] += t->gpus[i].cuda >= 0;
        nkey[GPU_KEY_NVML] += t->gpus[i].nvml >= 0;
    }
    t->gpu_key = nkey[GPU_KEY_CUDA] ? GPU_KEY_CUDA : nkey[GPU_KEY_NVML] ? GPU_KEY_NVML
                                                                        : GPU_KEY_PCI;
    sort_gpus(t->gpus, t->ngpus, t->gpu_key);
    t->nother = t->ngpus - nkey[t->gpu_key];
    t->ngpus = nkey[t->gpu_key];
    for (int i = 0; i < t->ngpus + t->nother; i++)
        if (!t->gpus[i].name[0])
            snprintf(t->gpus[i].name, sizeof(t->gpus[i].name), i < t->ngpus ? "gpu%d" : "-", i);
    return WEFT_OK;
}

/* InfiniBand: the PCI class says so, or the interface is IPoIB (ibN, 20-byte address). */
static int nic_osdev_is_ib(hwloc_obj_t pci, hwloc_obj_t o)
{
    if (pci && pci->attr->pcidev.class_id == 0x0207)
        return 1;
    if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK)
        return 0;
    const char *addr = hwloc_obj_get_info_by_name(o, "Address");
    return (o->name && !strncmp(o->name, "ib", 2)) || (addr && strlen(addr) == 59);
}

/* The entry for this OS device: the one already holding its PCI function with the slot
 * still free, else a new one. owners[] tracks each entry's PCI device. */
static topo_nic_t *nic_slot(topo_t *t, hwloc_obj_t *owners, hwloc_obj_t pci, int is_hca)
{
    for (int i = 0; pci && i < t->nnics; i++) {
        char *slot = is_hca ? t->nics[i].hca : t->nics[i].ifname;
        if (owners[i] == pci && !slot[0])
            return &t->nics[i];
    }
    owners[t->nnics] = pci;
    topo_nic_t *n = &t->nics[t->nnics++];
    format_busid(pci, n->busid, sizeof(n->busid));
    n->pci_id = pci ? pci->gp_index : 0;
    n->numa = -1;
    return n;
}

static weft_status_t scan_nics(topo_t *t)
{
    int cap = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_OS_DEVICE);
    size_t ncap = (size_t)(cap > 0 ? cap : 1);
    hwloc_obj_t *owners = calloc(ncap, sizeof(*owners));
    t->nics = calloc(ncap, sizeof(*t->nics));
    if (!owners || !t->nics) {
        free(owners);
        return weft_error(WEFT_ERR_NO_MEMORY, "topo: out of memory for nics");
    }
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(t->hw, o)) != NULL;) {
        hwloc_obj_osdev_type_t ty = o->attr->osdev.type;
        if (ty != HWLOC_OBJ_OSDEV_NETWORK && ty != HWLOC_OBJ_OSDEV_OPENFABRICS)
            continue;
        hwloc_obj_t pci = pci_parent(o);
        int is_hca = ty == HWLOC_OBJ_OSDEV_OPENFABRICS;
        topo_nic_t *n = nic_slot(t, owners, pci, is_hca);
        copy_str(is_hca ? n->hca : n->ifname, TOPO_NAME_MAX, o->name);
        n->numa = numa_of_io(t, pci ? pci : o);
        n->is_ib |= nic_osdev_is_ib(pci, o);
    }
    free(owners);
    qsort(t->nics, (size_t)t->nnics, sizeof(*t->nics), nic_cmp);
    for (int i = 0; i < t->nnics; i++) {
        topo_nic_t *n = &t->nics[i];
        copy_str(n->name, sizeof(n->name), n->hca[0] ? n->hca : n->ifname);
        if (!n->name[0])
            snprintf(n->name, sizeof(n->name), "nic%d", i);
    }
    return WEFT_OK;
}

/* CUDA_VISIBLE_DEVICES as CUDA reads it (and PyTorch's reading of it): comma-separated
 * entries, each an index's leading digits after blanks or a '+', up to the first entry
 * that has none, or is out of range; a repeated index shows no GPU at all; "" or "-1"
 * shows none. Indices count in gpus[]'s order: CUDA's ordinals where hwloc reports CUDA
 * devices, else NVML's (bus order, as nvidia-smi and Slurm number GPUs), else bus order
 * (CUDA_DEVICE_ORDER=PCI_BUS_ID); on this machine with CUDA devices, CUDA has applied it
 * already (scan_visible). A list that starts
 * with a GPU UUID (GPU-..., Kubernetes' and some Slurm setups' form) is UUIDs, each
 * matched by prefix, as CUDA does, against the NVIDIAUUID hwloc's NVML backend gives
 * each GPU, up to one that matches no GPU or several; where the topology carries no
 * UUIDs, and for MIG instances (MIG-...), every rank's GPU is unknown, as on a host
 * without GPUs. */
/* One entry of CUDA_VISIBLE_DEVICES (blanks skipped) as a gpus[] index, -1 when it names
 * none: by_uuid, a prefix of exactly one GPU's UUID; else an index's leading digits. */
static int visible_entry(const topo_t *t, const char *p, int by_uuid)
{
    if (by_uuid) {
        size_t len = 0;
        while (p[len] && p[len] != ',' && !isspace((unsigned char)p[len]))
            len++;
        int hit = -1, hits = 0;
        for (int g = 0; len >= 5 && g < t->ngpus; g++)
            if (t->gpus[g].uuid[0] && !strncmp(t->gpus[g].uuid, p, len))
                hit = g, hits++;
        return hits == 1 ? hit : -1;
    }
    p += *p == '+';
    if (!isdigit((unsigned char)*p))
        return -1;
    errno = 0;
    long v = strtol(p, NULL, 10);
    return v < t->ngpus && !errno ? (int)v : -1;
}

static void scan_visible(topo_t *t, const char *cvd)
{
    t->vis_set = cvd != NULL;
    t->nvis = 0;
    t->vis_note[0] = '\0';
    if (cvd == NULL || t->ngpus == 0)
        return;
    if (t->gpu_key == GPU_KEY_CUDA && t->live) {
        /* hwloc's CUDA backend asked CUDA in this process, which applied the variable
         * already: cudaN is CUDA device N as this process sees it (applied again, a job on
         * GPUs 8-11 of 16 had no GPU). NVML, and an export (a cached one of this machine,
         * HWLOC_XMLFILE with HWLOC_THISSYSTEM=1, too), list the devices without it. */
        t->nvis = WEFT_MIN(t->ngpus, TOPO_VIS_MAX);
        for (int i = 0; i < t->nvis; i++)
            t->vis[i] = i;
        snprintf(t->vis_note, sizeof(t->vis_note), "CUDA_VISIBLE_DEVICES=%.40s, applied by "
                 "CUDA to its devices here: local rank i uses gpu i mod %d", cvd, t->nvis);
        LOG_INFO(LOG_TOPO, "topo: %s", t->vis_note);
        return;
    }
    int uuid = 0, repeat = 0;
    const char *first = cvd;
    while (isspace((unsigned char)*first))
        first++;
    int by_uuid = !strncmp(first, "GPU-", 4);
    for (const char *p = cvd; *p && t->nvis < TOPO_VIS_MAX; p++) {
        while (isspace((unsigned char)*p))
            p++;
        int g = visible_entry(t, p, by_uuid);
        if (g < 0) {
            uuid = t->nvis == 0 && (by_uuid || !strncmp(p, "MIG-", 4));
            break;
        }
        for (int i = 0; i < t->nvis; i++)
            repeat |= t->vis[i] == g;
        if (repeat)
            break;
        t->vis[t->nvis++] = g;
        if ((p = strchr(p, ',')) == NULL)
            break;
    }
    if (repeat)
        t->nvis = 0;
    char list[96] = "";
    for (int i = 0; i < t->nvis; i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d", i ? "," : "",
                 t->vis[i]);
    if (uuid)
        snprintf(t->vis_note, sizeof(t->vis_note), "CUDA_VISIBLE_DEVICES=%.40s names GPUs by "
                 "UUID that no GPU here has (MIG, or no NVML data): no rank has a known GPU",
                 cvd);
    else if (t->nvis == 0)
        snprintf(t->vis_note, sizeof(t->vis_note), "CUDA_VISIBLE_DEVICES=%.40s: no GPU visible%s",
                 cvd, repeat ? " (an index repeated)" : "");
    else if (t->nvis == 1)
        snprintf(t->vis_note, sizeof(t->vis_note), "CUDA_VISIBLE_DEVICES=%.40s: every local "
                 "rank uses gpu %d (several ranks: cores by NUMA blocks, as each may see "
                 "another)", cvd, t->vis[0]);
    else
        snprintf(t->vis_note, sizeof(t->vis_note), "CUDA_VISIBLE_DEVICES=%.40s: local rank i "
                 "uses gpu [%s][i mod %d]", cvd, list, t->nvis);
    LOG_INFO(LOG_TOPO, "topo: %s", t->vis_note);
}

static weft_status_t load(const char *xml_path, int io, int bound, topo_t **topo_p)
{
    weft_status_t st;
    if (!topo_p)
        return weft_error(WEFT_ERR_INVALID_ARG, "topo_load: NULL output");
    topo_t *t = calloc(1, sizeof(*t));
    if (!t)
        return weft_error(WEFT_ERR_NO_MEMORY, "topo: out of memory");

    GOTO_IF_ERR(hw_open(t, xml_path, io, bound), st, fail);
    scan_counts(t);
    GOTO_IF_ERR(scan_cores(t), st, fail);
    GOTO_IF_ERR(scan_gpus(t), st, fail);
    GOTO_IF_ERR(scan_nics(t), st, fail);
    scan_visible(t, getenv("CUDA_VISIBLE_DEVICES"));
    LOG_INFO(LOG_TOPO, "topo: %s: %d packages, %d numa nodes, %d cores, %d pus, "
             "%d gpus, %d nics", t->source, t->npackages, t->nnuma, t->ncores, t->npus,
             t->ngpus, t->nnics);
    *topo_p = t;
    return WEFT_OK;
fail:
    topo_free(t);
    return st;
}

weft_status_t topo_load(const char *xml_path, topo_t **topo_p)
{
    return load(xml_path, 1, 0, topo_p);
}

weft_status_t topo_load_cpus(topo_t **topo_p)
{
    return load(NULL, 0, 0, topo_p);
}

weft_status_t topo_load_bound(topo_t **topo_p)
{
    return load(NULL, 1, 1, topo_p);
}

void topo_free(topo_t *t)
{
    if (!t)
        return;
    if (t->hw)
        hwloc_topology_destroy(t->hw);
    free(t->core_order);
    free(t->core_numa);
    free(t->run_start);
    free(t->gpus);
    free(t->nics);
    free(t);
}

/* ---- queries ------------------------------------------------------------------- */

int topo_is_xml(const topo_t *t) { return t->is_xml; }
const char *topo_source(const topo_t *t) { return t->source; }
const char *topo_machine_name(const topo_t *t) { return t->machine; }
int topo_num_packages(const topo_t *t) { return t->npackages; }
int topo_num_numa(const topo_t *t) { return t->nnuma; }
int topo_num_cores(const topo_t *t) { return t->ncores; }
int topo_num_pus(const topo_t *t) { return t->npus; }
int topo_num_gpus(const topo_t *t) { return t->ngpus; }
int topo_num_nics(const topo_t *t) { return t->nnics; }

const topo_gpu_t *topo_gpu(const topo_t *t, int i)
{
    return i >= 0 && i < t->ngpus ? &t->gpus[i] : NULL;
}

const topo_nic_t *topo_nic(const topo_t *t, int i)
{
    return i >= 0 && i < t->nnics ? &t->nics[i] : NULL;
}

/* ---- placement ----------------------------------------------------------------- */

/* Cores [*begin, *end) of core_order for rank r of n, with K cores in R node runs.
 * n < R: rank r takes whole runs [floor(r*R/n), floor((r+1)*R/n)), so every core is used.
 * R <= n <= K: run b = [c_b, c_b + k_b) takes ranks [floor(n*c_b/K), floor(n*(c_b+k_b)/K)),
 * at most k_b of them, and splits into that many contiguous blocks.
 * n > K: rank r shares core floor(r*K/n). */
static void core_block(const topo_t *t, int r, int n, int *begin, int *end)
{
    long long K = t->ncores, R = t->nruns;
    if (n > K) {
        *begin = (int)(r * K / n);
        *end = *begin + 1;
        return;
    }
    if (n < R) {
        *begin = t->run_start[r * R / n];
        *end = t->run_start[(r + 1) * R / n];
        return;
    }
    for (int b = 0; b < R; b++) {
        int c = t->run_start[b], k = t->run_start[b + 1] - c;
        long long r0 = n * (long long)c / K, r1 = n * (long long)(c + k) / K;
        if (r < r1) {
            long long m = r1 - r0, j = r - r0;
            *begin = c + (int)(j * k / m);
            *end = c + (int)((j + 1) * k / m);
            return;
        }
    }
    *begin = (int)K - 1;           /* unreachable: the last run ends at rank n */
    *end = (int)K;
}

/* How many ranks of n run on core position pos (n > K only; else 1). */
static int ranks_on_core(const topo_t *t, int pos, int n)
{
    long long K = t->ncores;
    if (n <= K)
        return 1;
    return (int)(((pos + 1) * (long long)n + K - 1) / K - (pos * (long long)n + K - 1) / K);
}

/* Local rank r's GPU: r mod ngpus, or with CUDA_VISIBLE_DEVICES the (r mod n)-th of the n
 * it shows (see topo_place); -1 without GPUs. */
static int rank_gpu(const topo_t *t, int r)
{
    if (t->vis_set)
        return t->nvis > 0 ? t->vis[r % t->nvis] : -1;
    return t->ngpus > 0 ? r % t->ngpus : -1;
}

const char *topo_gpu_visibility(const topo_t *t)
{
    return t->vis_note;
}

/* The run of core_order holding NUMA node numa's cores, -1 when it has none. */
static int node_run(const topo_t *t, int numa)
{
    for (int b = 0; numa >= 0 && b < t->nruns; b++)
        if (t->core_numa[t->run_start[b]] == numa)
            return b;
    return -1;
}

/* The run of rank r's GPU's NUMA node; -1 without a GPU, or when its node is unknown
 * or has no cores (the rank then falls back to core_block). */
static int gpu_run(const topo_t *t, int r)
{
    int g = rank_gpu(t, r);
    return g < 0 ? -1 : node_run(t, t->gpus[g].numa);
}

/* Cores [*begin, *end) of rank r of n, and whether other ranks share them. With a GPU on
 * a known node: that node's run of k cores split among the m ranks whose GPUs are on it,
 * the j-th of them taking [c + j*k/m, c + (j+1)*k/m), or core c + j*k/m when m > k,
 * and then every one of the m is shared. Otherwise core_block over the whole machine, for every rank when any of the n
 * has no such node (a cpuset that leaves a GPU's node no cores): the two schemes mixed
 * gave blocks that overlapped without being marked shared. */
static void rank_cores(const topo_t *t, int r, int n, int *begin, int *end, int *shared)
{
    /* one visible GPU, more ranks: most likely each rank sees its own (srun
     * --gpus-per-task), which this rank cannot know; splitting its GPU's node among all n
     * gave blocks that overlapped or left most of a node idle. NUMA blocks for all. */
    int one_each = t->vis_set && t->nvis == 1 && n > 1;
    int b = one_each ? -1 : gpu_run(t, r);
    for (int q = 0; q < n && b >= 0; q++)
        if (gpu_run(t, q) < 0)
            b = -1;
    if (b < 0) {
        core_block(t, r, n, begin, end);
        *shared = ranks_on_core(t, *begin, n) > 1;
        return;
    }
    long long m = 0, j = 0;
    for (int q = 0; q < n; q++)
        if (gpu_run(t, q) == b) {
            j += q < r;
            m++;
        }
    int c = t->run_start[b];
    long long k = t->run_start[b + 1] - c;
    *begin = c + (int)(j * k / m);
    if (m <= k) {
        *end = c + (int)((j + 1) * k / m);
        *shared = 0;
        return;
    }
    /* more ranks than cores on the node: one core each, and every one of them shared, so
     * that comm_bind leaves them all unbound, not some bound with the rest floating over
     * their cores (before 2026-11-27 only those that had to share were) */
    *end = *begin + 1;
    *shared = 1;
}

/* The NUMA node a rank's devices are measured from: its GPU's, else its cores'. */
static int rank_io_numa(const topo_t *t, int r, int n)
{
    int g = rank_gpu(t, r);
    if (g >= 0)
        return t->gpus[g].numa;
    int b, e, sh;
    rank_cores(t, r, n, &b, &e, &sh);
    return t->core_numa[b];
}

/* ---- network devices ----------------------------------------------------------- */

const char *topo_dist_name(topo_dist_t d)
{
    switch (d) {
    case TOPO_DIST_SWITCH: return "pcie-switch";
    case TOPO_DIST_HOSTBRIDGE: return "host-bridge";
    case TOPO_DIST_NUMA: return "numa";
    default: return "far";
    }
}

/* By hwloc's global index, not the bus id: exports can repeat a bus id (in
 * 2socket-4gpu-1ib.xml, 04:00.0 is a SAS controller on node 0 and the HCA on node 1). */
static hwloc_obj_t pci_obj(const topo_t *t, unsigned long long id)
{
    for (hwloc_obj_t o = NULL; id && (o = hwloc_get_next_pcidev(t->hw, o)) != NULL;)
        if (o->gp_index == id)
            return o;
    return NULL;
}

/* The nearest bridge above both a and b (PCI objects), or NULL when they share none.
 * Walks parent pointers: hwloc_get_common_ancestor_obj compares depths, which I/O
 * objects do not have in the usual sense. */
static hwloc_obj_t common_bridge(hwloc_obj_t a, hwloc_obj_t b)
{
    for (hwloc_obj_t x = a->parent; x && x->type == HWLOC_OBJ_BRIDGE; x = x->parent)
        for (hwloc_obj_t y = b->parent; y && y->type == HWLOC_OBJ_BRIDGE; y = y->parent)
            if (x == y)
                return x;
    return NULL;
}

/* Bridges between PCI object x and its ancestor bridge br. */
static int bridge_hops(hwloc_obj_t x, hwloc_obj_t br)
{
    int h = 0;
    for (hwloc_obj_t p = x->parent; p && p != br; p = p->parent)
        h++;
    return h;
}

/* Distance class of NIC i from GPU gpu (-1: none) whose node, or the cores' node, is
 * numa. A shared PCI-to-PCI bridge is a switch (or one root port holding both); a
 * shared host bridge only is the same root complex. *hops: within a class, the bridges
 * between the two and the one they share (0 outside the PCI classes), so that where
 * switches nest (a DGX-2's GPU pairs under switches under switches) the NIC beside a
 * GPU on its own switch wins over one reached through the switch above, as NCCL's PIX
 * over PXB. */
static topo_dist_t nic_dist(const topo_t *t, int i, int gpu, int numa, int *hops)
{
    const topo_nic_t *nic = &t->nics[i];
    hwloc_obj_t a = gpu >= 0 ? pci_obj(t, t->gpus[gpu].pci_id) : NULL;
    hwloc_obj_t b = a ? pci_obj(t, nic->pci_id) : NULL;
    hwloc_obj_t br = b ? common_bridge(a, b) : NULL;
    *hops = br ? bridge_hops(a, br) + bridge_hops(b, br) : 0;
    if (br)
        return br->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST
                   ? TOPO_DIST_HOSTBRIDGE : TOPO_DIST_SWITCH;
    return numa >= 0 && nic->numa == numa ? TOPO_DIST_NUMA : TOPO_DIST_FAR;
}

/* best_nics' key: class (times 2, plus not-InfiniBand, for ANY) first, hops next. */
#define NIC_HOPS_MAX 64

/* The name NIC i goes by for kind: "" when it has none (not a device of that kind). */
static const char *nic_name_for(const topo_nic_t *n, topo_nic_kind_t kind)
{
    return kind == TOPO_NIC_IB ? n->hca : kind == TOPO_NIC_SOCKET ? n->ifname : n->name;
}

/* The devices of the best class for a rank measured from (gpu, numa), as a mask of NIC
 * indices (< 64), with that class in *key (ANY: 2 * distance + not InfiniBand), times
 * NIC_HOPS_MAX, plus the hops (nic_dist). */
static uint64_t best_nics(const topo_t *t, int gpu, int numa, topo_nic_kind_t kind,
                          const topo_nic_filter_t *f, int *key)
{
    uint64_t mask = 0;
    int best = -1;
    for (int i = 0; i < t->nnics && i < 64; i++) {
        const char *name = nic_name_for(&t->nics[i], kind);
        if (!name[0] || !topo_nic_filter_allows(f, name, NULL))
            continue;
        int hops, k = (int)nic_dist(t, i, gpu, numa, &hops);
        if (kind == TOPO_NIC_ANY)
            k = 2 * k + !t->nics[i].is_ib;
        k = k * NIC_HOPS_MAX + WEFT_MIN(hops, NIC_HOPS_MAX - 1);
        if (best < 0 || k < best) {
            best = k;
            mask = 0;
        }
        if (k == best)
            mask |= 1ull << i;
    }
    *key = best;
    return mask;
}

/* The names of the devices of kind, for a message. */
static void nic_names(const topo_t *t, topo_nic_kind_t kind, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < t->nnics && len < cap; i++) {
        const char *name = nic_name_for(&t->nics[i], kind);
        if (name[0])
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? " " : "", name);
    }
    if (!buf[0])
        snprintf(buf, cap, "none");
}

int topo_cpus_numa(const topo_t *t, const int *cpus, int ncpus)
{
    if (!t || !cpus || ncpus < 1)
        return -1;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set == NULL)
        return -1;
    int known = 1;
    for (int i = 0; i < ncpus && known; i++) {
        hwloc_obj_t pu = cpus[i] >= 0 ? hwloc_get_pu_obj_by_os_index(t->hw, (unsigned)cpus[i])
                                      : NULL;
        known = pu != NULL;
        if (known)
            hwloc_bitmap_set(set, (unsigned)cpus[i]);
    }
    hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(t->hw);
    int numa = -1;
    if (known && !(all && hwloc_bitmap_isincluded(all, set))) {
        for (int i = 0; i < t->nnuma && numa < 0; i++) {
            hwloc_obj_t n = hwloc_get_obj_by_type(t->hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
            if (n && n->cpuset && hwloc_bitmap_isincluded(set, n->cpuset))
                numa = i;
        }
    }
    hwloc_bitmap_free(set);
    return numa;
}

weft_status_t topo_nic_for_rank(const topo_t *t, int local_rank, int local_size,
                                topo_nic_kind_t kind, const char *filter,
                                topo_nic_choice_t *out)
{
    return topo_nic_for_bound_rank(t, local_rank, local_size, kind, filter, -1, out);
}

weft_status_t topo_nic_for_bound_rank(const topo_t *t, int local_rank, int local_size,
                                      topo_nic_kind_t kind, const char *filter,
                                      int bound_numa, topo_nic_choice_t *out)
{
    const char *knob = kind == TOPO_NIC_SOCKET ? "WEFT_SOCKET_IFNAME" : "WEFT_IB_HCA";
    if (!t || !out || local_size < 1 || local_rank < 0 || local_rank >= local_size ||
        kind < TOPO_NIC_ANY || kind > TOPO_NIC_SOCKET)
        return weft_error(WEFT_ERR_INVALID_ARG, "topo_nic_for_rank: bad local rank %d of %d",
                          local_rank, local_size);
    topo_nic_filter_t f;
    RETURN_IF_ERR(topo_nic_filter_parse(filter, knob, &f));

    topo_nic_choice_t c;
    memset(&c, 0, sizeof(c));
    c.nic = -1;
    c.dist = TOPO_DIST_FAR;
    int key, gpu = rank_gpu(t, local_rank);
    int bound = gpu < 0 && bound_numa >= 0 && bound_numa < t->nnuma;
    int io_numa = bound ? bound_numa : rank_io_numa(t, local_rank, local_size);
    /* the other ranks' bindings are not known here: where this rank's node is not the
     * one weft's blocks give it, the launcher is taken to deal ranks out to the nodes in
     * turn (srun's default -m block:cyclic, mpirun --map-by numa), so that the ranks
     * sharing a node share its devices in turn (with the blocks, ranks 0 and 2 of 4 bound
     * to socket 0 both counted rank 1 there, and took the same one of its two HCAs) */
    int cyclic = bound && io_numa != rank_io_numa(t, local_rank, local_size) && t->nruns > 0;
    uint64_t mask = best_nics(t, gpu, io_numa, kind, &f, &key);
    if (mask == 0) {
        char have[256];
        nic_names(t, kind, have, sizeof(have));
        if (f.n > 0)
            return weft_error(WEFT_ERR_INVALID_ARG, "%s='%s' leaves no device to use "
                              "(this host has: %s)", knob, filter, have);
        *out = c;
        return WEFT_OK;
    }
    /* round-robin: the ranks before this one that see the same best set (whatever its
     * class for them: a far rank and a near one tied on the same two NICs share them) */
    int ord = 0;
    for (int q = 0; q < local_rank; q++) {
        int kq, gq = rank_gpu(t, q);
        if (gq >= 0 && gq == gpu)
            ord++;
        else if (best_nics(t, gq, cyclic && gq < 0 ? t->core_numa[t->run_start[q % t->nruns]]
                                                    : rank_io_numa(t, q, local_size),
                           kind, &f, &kq) == mask)
            ord++;
    }
    int tied = __builtin_popcountll(mask), want = ord % tied;
    for (int i = 0; i < 64; i++)
        if ((mask >> i & 1) && want-- == 0) {
            c.nic = i;
            break;
        }
    const topo_nic_t *n = &t->nics[c.nic];
    copy_str(c.name, sizeof(c.name), nic_name_for(n, kind));
    c.port = 1;
    topo_nic_filter_allows(&f, c.name, &c.port);
    if (kind == TOPO_NIC_SOCKET || (kind == TOPO_NIC_ANY && !n->hca[0]))
        c.port = 0;
    c.dist = kind == TOPO_NIC_ANY ? (topo_dist_t)(key / NIC_HOPS_MAX / 2)
                                  : (topo_dist_t)(key / NIC_HOPS_MAX);
    c.tied = tied;
    *out = c;
    return WEFT_OK;
}

/* hwloc list string into buf; an overlong list is cut and ends in "...". */
static void list_to_str(hwloc_const_bitmap_t set, char *buf, size_t cap)
{
    int len = hwloc_bitmap_list_snprintf(buf, cap, set);
    if (len >= (int)cap && cap > 4)
        memcpy(buf + cap - 4, "...", 4);
}

/* The OS PU set of core positions [begin, end), or NULL when out of memory. */
static hwloc_bitmap_t block_cpuset(const topo_t *t, int begin, int end, hwloc_bitmap_t cores)
{
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    if (!cpus)
        return NULL;
    for (int i = begin; i < end; i++) {
        hwloc_obj_t c = hwloc_get_obj_by_type(t->hw, t->core_type,
                                              (unsigned)t->core_order[i]);
        if (c)
            hwloc_bitmap_or(cpus, cpus, c->cpuset);
        if (cores)
            hwloc_bitmap_set(cores, (unsigned)t->core_order[i]);
    }
    return cpus;
}

static weft_status_t format_lists(const topo_t *t, topo_place_t *p)
{
    hwloc_bitmap_t cores = hwloc_bitmap_alloc();
    hwloc_bitmap_t cpus = cores ? block_cpuset(t, p->core_begin, p->core_end, cores) : NULL;
    if (!cpus) {
        hwloc_bitmap_free(cores);
        return weft_error(WEFT_ERR_NO_MEMORY, "topo: out of memory for a cpuset");
    }
    list_to_str(cores, p->cores, sizeof(p->cores));
    list_to_str(cpus, p->cpus, sizeof(p->cpus));
    hwloc_bitmap_free(cores);
    hwloc_bitmap_free(cpus);
    return WEFT_OK;
}

weft_status_t topo_place(const topo_t *t, int local_rank, int local_size,
                         topo_place_t *out)
{
    if (!t || !out || local_size < 1 || local_rank < 0 || local_rank >= local_size)
        return weft_error(WEFT_ERR_INVALID_ARG, "topo_place: bad local rank %d of %d",
                          local_rank, local_size);
    if (t->ncores < 1)
        return weft_error(WEFT_ERR_INTERNAL, "topo_place: topology has no cores");

    topo_place_t p;
    memset(&p, 0, sizeof(p));
    p.local_rank = local_rank;
    rank_cores(t, local_rank, local_size, &p.core_begin, &p.core_end, &p.shared);
    p.ncores = p.core_end - p.core_begin;
    p.numa = t->core_numa[p.core_begin];
    p.gpu = rank_gpu(t, local_rank);
    topo_nic_choice_t c;
    RETURN_IF_ERR(topo_nic_for_rank(t, local_rank, local_size, TOPO_NIC_ANY, NULL, &c));
    p.nic = c.nic;
    p.nic_dist = c.dist;
    RETURN_IF_ERR(format_lists(t, &p));
    *out = p;
    return WEFT_OK;
}

/* A topology read from a file cannot bind this process. */
static weft_status_t not_this_machine(const topo_t *t)
{
    return weft_error(WEFT_ERR_UNSUPPORTED, "topo_bind: topology '%s' is not this machine%s",
                      t->source, strncmp(t->source, "HWLOC_", 6) ? ""
                                 : ": unset HWLOC_XMLFILE for a binding");
}

weft_status_t topo_bind(const topo_t *t, const topo_place_t *p)
{
    if (!t || !p || p->core_begin < 0 || p->core_end > t->ncores ||
        p->core_begin >= p->core_end)
        return weft_error(WEFT_ERR_INVALID_ARG, "topo_bind: bad placement");
    if (t->is_xml)
        return not_this_machine(t);
    hwloc_bitmap_t cpus = block_cpuset(t, p->core_begin, p->core_end, NULL);
    if (!cpus)
        return weft_error(WEFT_ERR_NO_MEMORY, "topo: out of memory for a cpuset");
    weft_status_t st = WEFT_OK;
    if (hwloc_set_cpubind(t->hw, cpus, HWLOC_CPUBIND_PROCESS) != 0)
        st = weft_error(WEFT_ERR_SYSTEM, "topo_bind: cannot bind to cpus %s: %m", p->cpus);
    else
        LOG_INFO(LOG_TOPO, "topo: local rank %d bound to cpus %s", p->local_rank, p->cpus);
    hwloc_bitmap_free(cpus);
    return st;
}

int topo_bound_elsewhere(const topo_t *t, char *cpus, size_t cap)
{
    if (cap)
        cpus[0] = '\0';
    if (t->is_xml)
        return 0;
    hwloc_bitmap_t cur = hwloc_bitmap_alloc();
    hwloc_const_bitmap_t all = hwloc_topology_get_allowed_cpuset(t->hw);
    int narrower = 0;
    if (cur && hwloc_get_cpubind(t->hw, cur, HWLOC_CPUBIND_PROCESS) == 0) {
        hwloc_bitmap_and(cur, cur, all);
        narrower = !hwloc_bitmap_iszero(cur) && !hwloc_bitmap_isequal(cur, all);
        list_to_str(cur, cpus, cap);
    }
    hwloc_bitmap_free(cur);
    return narrower;
}

weft_status_t topo_bind_cpus(const topo_t *t, const char *cpus)
{
    if (t->is_xml)
        return not_this_machine(t);
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return weft_error(WEFT_ERR_NO_MEMORY, "topo: out of memory for a cpuset");
    weft_status_t st = WEFT_OK;
    hwloc_const_bitmap_t all = hwloc_topology_get_allowed_cpuset(t->hw);
    size_t n = strspn(cpus, "0123456789-,");
    if (cpus[0] == '\0' || cpus[n] != '\0' || hwloc_bitmap_list_sscanf(set, cpus) != 0 ||
        hwloc_bitmap_iszero(set))
        st = weft_error(WEFT_ERR_INVALID_ARG, "bind: '%s' is not a cpu list (e.g. 0-3,8)", cpus);
    else if (!hwloc_bitmap_isincluded(set, all)) {
        char have[TOPO_LIST_MAX];
        list_to_str(all, have, sizeof(have));
        st = weft_error(WEFT_ERR_INVALID_ARG, "bind: cpus %s are not all available here "
                        "(this process may use %s)", cpus, have);
    } else if (hwloc_set_cpubind(t->hw, set, HWLOC_CPUBIND_PROCESS) != 0)
        st = weft_error(WEFT_ERR_SYSTEM, "bind: cannot bind to cpus %s: %m", cpus);
    hwloc_bitmap_free(set);
    return st;
}

/* ---- device filters (WEFT_IB_HCA, WEFT_SOCKET_IFNAME) -------------------------------- */

static weft_status_t filter_error(const char *knob, const char *spec, const char *why)
{
    return weft_error(WEFT_ERR_INVALID_ARG, "%s='%s' is not valid: %s (e.g. mlx5_0:1,mlx5_1, "
                      "^mlx5_2 or =mlx5_0)", knob, spec, why);
}

weft_status_t topo_nic_filter_parse(const char *spec, const char *knob, topo_nic_filter_t *out)
{
    topo_nic_filter_t f;
    memset(&f, 0, sizeof(f));
    if (!out)
        return weft_error(WEFT_ERR_INVALID_ARG, "topo_nic_filter_parse: NULL output");
    spec = spec ? spec : "";
    const char *p = spec;
    f.exclude = *p == '^';
    p += f.exclude;
    f.exact = *p == '=';
    p += f.exact;
    if (*p == '\0') {
        if (p != spec)
            return filter_error(knob, spec, "no device after '^' or '='");
        *out = f;
        return WEFT_OK;
    }
    for (;; p += strcspn(p, ",") + 1) {
        size_t len = strcspn(p, ",");
        const char *colon = memchr(p, ':', len);
        size_t nlen = colon ? (size_t)(colon - p) : len;
        if (len == 0) {         /* as NCCL: empty entries ("mlx5_0,", ",,") are skipped */
            if (p[len] == '\0')
                break;
            continue;
        }
        if (f.n == TOPO_FILTER_MAX)
            return filter_error(knob, spec, "more than 16 devices");
        if (nlen == 0)
            return filter_error(knob, spec, "an entry without a device name");
        if (nlen >= TOPO_NAME_MAX)
            return filter_error(knob, spec, "a device name longer than 31 characters");
        for (size_t i = 0; i < nlen; i++)
            if (!isalnum((unsigned char)p[i]) && !strchr("_-.", p[i]))
                return filter_error(knob, spec, "a device name holds a character other "
                                    "than letters, digits, '_', '-' and '.'");
        memcpy(f.e[f.n].name, p, nlen);
        f.e[f.n].name[nlen] = '\0';
        if (colon && len - nlen - 1 > 0) {      /* "mlx5_0:" is any port, as NCCL */
            size_t plen = len - nlen - 1;
            int port = 0;
            for (size_t i = 0; i < plen && port <= 255; i++)
                port = isdigit((unsigned char)colon[1 + i]) ? port * 10 + colon[1 + i] - '0'
                                                            : 256;
            if (port < 1 || port > 255)
                return filter_error(knob, spec, "a port is not a number from 1 to 255");
            f.e[f.n].port = port;
        }
        f.n++;
        if (p[len] == '\0')
            break;
    }
    if (f.n == 0 && (f.exclude || f.exact))
        return filter_error(knob, spec, "no device after '^' or '='");
    *out = f;
    return WEFT_OK;
}

/* Whether entry i names device `name` (whole name with =, else a prefix). */
static int filter_names(const topo_nic_filter_t *f, int i, const char *name)
{
    const char *e = f->e[i].name;
    return f->exact ? strcmp(name, e) == 0 : strncmp(name, e, strlen(e)) == 0;
}

int topo_nic_filter_allows(const topo_nic_filter_t *f, const char *name, int *port)
{
    if (port)
        *port = 1;
    if (!f || f->n == 0)
        return 1;
    for (int i = 0; i < f->n; i++) {
        if (!filter_names(f, i, name))
            continue;
        if (f->exclude) {
            if (f->e[i].port <= 1)
                return 0;
            continue;                   /* another port of it: ours (1) stays allowed */
        }
        if (port && f->e[i].port)
            *port = f->e[i].port;
        return 1;
    }
    return f->exclude;
}

int topo_nic_filter_allows_port(const topo_nic_filter_t *f, const char *name, int port)
{
    if (!f || f->n == 0)
        return 1;
    for (int i = 0; i < f->n; i++) {
        if (!filter_names(f, i, name))
            continue;
        if (f->e[i].port == 0 || f->e[i].port == port)
            return !f->exclude;
    }
    return f->exclude;
}

/* ---- host identity, ring order, GPU presence ------------------------------------- */

/* The first line of a small file, without its newline; "" when unreadable. */
static void read_line(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(buf, (int)cap, f) == NULL)
        buf[0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    fclose(f);
}

uint64_t topo_host_id(const char *override, char *hostname, size_t cap)
{
    if (gethostname(hostname, cap) != 0)
        snprintf(hostname, cap, "unknown");
    hostname[cap - 1] = '\0';
    if (override && override[0]) {
        uint64_t h = hash_bytes(HASH_SEED, "WEFT_HOSTID", 12);
        return hash_bytes(h, override, strlen(override));
    }
    /* each field with its NUL, so no two splits of the same bytes hash alike */
    char boot[64], machine[64];
    read_line("/proc/sys/kernel/random/boot_id", boot, sizeof(boot));
    read_line("/etc/machine-id", machine, sizeof(machine));
    uint64_t h = hash_bytes(HASH_SEED, hostname, strlen(hostname) + 1);
    h = hash_bytes(h, boot, strlen(boot) + 1);
    return hash_bytes(h, machine, strlen(machine) + 1);
}

void topo_ring_order(const uint64_t *host_id, int n, int *order)
{
    int k = 0;
    for (int p = 0; p < n; p++) {
        int first = 1;
        for (int q = 0; q < p && first; q++)
            first = host_id[q] != host_id[p];
        for (int q = p; first && q < n; q++)
            if (host_id[q] == host_id[p])
                order[k++] = q;
    }
}

/* The hex number in a sysfs file ("0x10de"), -1 when unreadable. */
static long sysfs_hex(const char *dir, const char *name, const char *file)
{
    char path[512], line[32];
    snprintf(path, sizeof(path), "%s/%s/%s", dir, name, file);
    read_line(path, line, sizeof(line));
    char *end;
    long v = strtol(line, &end, 16);
    return end == line ? -1 : v;
}

int topo_machine_has_gpus(void)
{
    static const char dir[] = "/sys/bus/pci/devices";
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        long vendor = sysfs_hex(dir, e->d_name, "vendor");
        long cls = sysfs_hex(dir, e->d_name, "class") >> 8;    /* 0x030200 -> 0x0302 */
        if (vendor == 0x10de)
            found = (cls >> 8) == 0x03 || cls == 0x1200;
        else if (vendor == 0x1002)      /* as pci_is_gpu_class: not a plain VGA */
            found = cls == 0x0302 || cls == 0x0380 || cls == 0x1200;
    }
    closedir(d);
    return found;
}

/* ---- printing ------------------------------------------------------------------ */

void topo_print(const topo_t *t, FILE *out)
{
    fprintf(out, "topology: %s%s\n", t->source, t->is_xml ? " (xml)" : "");
    if (t->machine[0])
        fprintf(out, "machine: %s\n", t->machine);
    fprintf(out, "packages %d, numa nodes %d, cores %d, pus %d\n", t->npackages, t->nnuma,
            t->ncores, t->npus);
    static const char *const by[] = { "pci bus order", "CUDA ordinals: cudaN is gpu N",
                                      "NVML indices" };
    fprintf(out, "gpus: %d (%s)\n", t->ngpus, by[t->gpu_key]);
    for (int i = 0; i < t->ngpus; i++) {
        const topo_gpu_t *g = &t->gpus[i];
        fprintf(out, "  gpu %-2d %-12s %-12s numa %-2d %s\n", i, g->name,
                g->busid[0] ? g->busid : "-", g->numa, g->model);
    }
    if (t->nother)
        fprintf(out, "other gpus, without a %s device (no rank uses them): %d\n", t->gpu_key == GPU_KEY_CUDA ? "CUDA" : "NVML", t->nother);
    for (int i = t->ngpus; i < t->ngpus + t->nother; i++) {
        const topo_gpu_t *g = &t->gpus[i];
        fprintf(out, "  -      %-12s %-12s numa %-2d %s\n", g->name,
                g->busid[0] ? g->busid : "-", g->numa, g->model);
    }
    fprintf(out, "nics: %d\n", t->nnics);
    for (int i = 0; i < t->nnics; i++) {
        const topo_nic_t *n = &t->nics[i];
        char names[2 * TOPO_NAME_MAX + 2];
        snprintf(names, sizeof(names), "%s%s%s", n->hca, n->hca[0] && n->ifname[0] ? "/" : "",
                 n->ifname);
        fprintf(out, "  nic %-2d %-16s %-12s numa %-2d %s\n", i, names,
                n->busid[0] ? n->busid : "-", n->numa, n->is_ib ? "infiniband" : "ethernet");
    }
}

void topo_place_print(const topo_t *t, const topo_place_t *p, FILE *out)
{
    const topo_gpu_t *g = topo_gpu(t, p->gpu);
    const topo_nic_t *n = topo_nic(t, p->nic);
    fprintf(out, "rank %d: numa %d cores %s (cpus %s)%s gpu %s%s%s%s nic %s%s%s%s%s%s\n",
            p->local_rank, p->numa, p->cores, p->cpus, p->shared ? " shared" : "",
            g ? g->name : "none", g && g->busid[0] ? " (" : "", g ? g->busid : "",
            g && g->busid[0] ? ")" : "", n ? n->name : "none", n ? " (" : "",
            n && n->busid[0] ? n->busid : "", n && n->busid[0] ? ", " : "",
            n ? topo_dist_name(p->nic_dist) : "", n ? ")" : "");
}
