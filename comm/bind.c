/*
 * bind.c - WEFT_BIND: where a rank runs, decided once per process when its first
 * communicator comes up (weft_comm_init_rank), by the hwloc topology.
 *
 *   auto       when the launcher left the process free to run anywhere and the host has
 *              at least a core per local rank: bind the process (every thread) to its own
 *              block of cores (topo_place), as Open MPI binds by default: on a host with
 *              GPUs, cores of the NUMA node of the rank's GPU (local rank i: GPU i mod
 *              ngpus, or of those CUDA_VISIBLE_DEVICES shows), split among the ranks whose GPUs share that node (left unbound
 *              when that node has fewer cores than such ranks); without GPUs,
 *              NUMA-aware blocks. A process already bound (mpirun's default, srun --cpu-bind,
 *              weftrun --bind-to core, taskset) keeps its binding; an oversubscribed host
 *              (more local ranks than cores) is left unbound, as Open MPI does.
 *   none       never bind.
 * Several ranks in one process (threads) leave it unbound: a binding holds every thread,
 * and one rank's block would hold them all.
 *   cores:LIST local rank i on the i-th comma-separated item of LIST (an OS cpu or a
 *              range): a clear error when LIST has fewer items than local ranks or names
 *              cpus this process may not use.
 *
 * I/O discovery (hwloc's pci plugin) happens only when sysfs shows a GPU, since only
 * then do the cores depend on the devices, and never in a sanitizer build: the plugin
 * leaves libpciaccess allocations that LeakSanitizer reports at exit (such a build binds
 * GPU hosts by NUMA blocks, and says so in the log).
 *
 * Why a default binding: two unbound ranks on this 2-vCPU VM spent whole phases on the
 * same core (the scheduler's wake-up placement), and those launches ran large collectives
 * at a half to a fifth of the speed (docs/PERF.md, "Launch to launch").
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "comm_int.h"
#include "log.h"
#include "status.h"
#include "topo.h"

/* The i-th comma-separated item of list, into out; 0 when there is none. */
static int list_item(const char *list, int i, char *out, size_t cap)
{
    const char *p = list;
    for (; i > 0 && p; i--) {
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    if (p == NULL)
        return 0;
    size_t n = strcspn(p, ",");
    if (n >= cap)
        return 0;
    memcpy(out, p, n);
    out[n] = '\0';
    return 1;
}

/* comm_bind once per process (the first init that gets there); bind_before: the cpus the
 * process ran on before comm_bind bound it ("" when it did not), which comm_unbind puts
 * back when that init fails after all */
static atomic_int bind_done;
static char bind_before[TOPO_LIST_MAX];

static weft_status_t bind_with(const weft_comm_t *c, topo_t *t)
{
    const char *mode = c->cfg.bind;
    char cpus[TOPO_LIST_MAX], before[TOPO_LIST_MAX];
    topo_bound_elsewhere(t, before, sizeof(before));   /* what the process runs on now */
    if (!strncmp(mode, "cores:", 6)) {
        if (!list_item(mode + 6, c->local_rank, cpus, sizeof(cpus)))
            return weft_error(WEFT_ERR_INVALID_ARG, "bind: WEFT_BIND=%s has no item for local "
                              "rank %d (%d local ranks: one comma-separated item each)",
                              mode, c->local_rank, c->local_size);
        RETURN_IF_ERR(topo_bind_cpus(t, cpus));
        snprintf(bind_before, sizeof(bind_before), "%s", before);
        LOG_INFO(LOG_TOPO, "bind: local rank %d on cpus %s (WEFT_BIND)", c->local_rank, cpus);
        return WEFT_OK;
    }
    /* auto */
    if (topo_bound_elsewhere(t, cpus, sizeof(cpus))) {
        LOG_INFO(LOG_TOPO, "bind: already bound to cpus %s (by the launcher): kept", cpus);
        return WEFT_OK;
    }
    if (c->local_size > topo_num_cores(t)) {
        LOG_INFO(LOG_TOPO, "bind: %d local ranks on %d cores: left unbound", c->local_size,
                 topo_num_cores(t));
        return WEFT_OK;
    }
    topo_place_t p;
    RETURN_IF_ERR(topo_place(t, c->local_rank, c->local_size, &p));
    if (p.shared) {     /* more ranks on its GPU's node than cores there */
        LOG_INFO(LOG_TOPO, "bind: local rank %d would share core %s near gpu %d: left unbound",
                 c->local_rank, p.cores, p.gpu);
        return WEFT_OK;
    }
    RETURN_IF_ERR(topo_bind(t, &p));
    snprintf(bind_before, sizeof(bind_before), "%s", before);
    return WEFT_OK;
}

#if defined(__SANITIZE_ADDRESS__)
#define BIND_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BIND_SANITIZED 1
#endif
#endif

/* 1 when the placement needs the GPUs (and so hwloc's I/O discovery). */
static int want_devices(void)
{
    if (!topo_machine_has_gpus())
        return 0;
#ifdef BIND_SANITIZED
    LOG_INFO(LOG_TOPO, "bind: sanitizer build: GPUs ignored, NUMA blocks (pci plugin leaks)");
    return 0;
#else
    return 1;
#endif
}

/* Ranks of this communicator that run in this process besides this one (ranks as
 * threads: ncclCommInitAll, nccl-tests -g, weft_comm_init_rank from several threads). */
static int ranks_in_process(const weft_comm_t *c)
{
    int n = 0;
    for (int p = 0; p < c->nranks; p++)
        n += p != c->rank && peer_same_process(&c->peers[p], &c->peers[c->rank]);
    return n;
}

weft_status_t comm_bind(weft_comm_t *c)
{
    if (!strcmp(c->cfg.bind, "none") || atomic_exchange(&bind_done, 1))
        return WEFT_OK;
    bind_before[0] = '\0';
    int others = ranks_in_process(c);
    if (others > 0) {   /* a binding is the process's: one rank's block would hold them all */
        if (!strcmp(c->cfg.bind, "auto"))
            LOG_INFO(LOG_TOPO, "bind: %d ranks run in this process (threads): left unbound",
                     others + 1);
        else
            LOG_WARN(LOG_TOPO, "bind: %d ranks run in this process (threads), and a binding "
                     "is the whole process's: WEFT_BIND=%s not applied", others + 1,
                     c->cfg.bind);
        return WEFT_OK;
    }
    if (c->cfg.topo_file[0] && !strcmp(c->cfg.bind, "auto")) {
        LOG_INFO(LOG_TOPO, "bind: WEFT_TOPO_FILE describes another machine: not binding");
        return WEFT_OK;
    }
    topo_t *t = NULL;
    weft_status_t st = want_devices() ? topo_load(NULL, &t) : topo_load_cpus(&t);
    if (st == WEFT_OK) {
        st = bind_with(c, t);
        topo_free(t);
    }
    c->bound_process = st == WEFT_OK && bind_before[0] != '\0';
    if (st != WEFT_OK && !strcmp(c->cfg.bind, "auto")) {
        /* a default must not stop a job that would run unbound */
        LOG_WARN(LOG_TOPO, "bind: not binding (WEFT_BIND=none hides this): %s", weft_last_error());
        return WEFT_OK;
    }
    if (st != WEFT_OK)
        atomic_store(&bind_done, 0);     /* nothing bound: a later init may try again */
    return st;
}

void comm_unbind(void)
{
    if (bind_before[0] == '\0')
        return;
    /* init's own failure stays what weft_last_error() says */
    weft_error_saved_t saved;
    weft_error_save(&saved);
    topo_t *t = NULL;
    weft_status_t st = topo_load_cpus(&t);
    if (st == WEFT_OK) {
        st = topo_bind_cpus(t, bind_before);
        topo_free(t);
    }
    if (st == WEFT_OK)
        LOG_INFO(LOG_TOPO, "bind: init failed: back on cpus %s, as before it", bind_before);
    else
        LOG_WARN(LOG_TOPO, "bind: init failed, and the binding before it (cpus %s) could "
                 "not be put back: %s", bind_before, weft_last_error());
    weft_error_restore(&saved);
    bind_before[0] = '\0';
    atomic_store(&bind_done, 0);        /* the next init places this process anew */
}
