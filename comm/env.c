/*
 * env.c - where this process sits in the job, from the launcher's environment.
 *
 * Checked in order, the first whose rank and size are both set wins (one with only one
 * of them, such as a WORLD_SIZE exported for another tool, is passed over): weftrun
 * (WEFT_RANK/WEFT_WORLD_SIZE/WEFT_ADDR), torchrun (RANK/WORLD_SIZE/MASTER_ADDR/
 * MASTER_PORT), Open MPI (OMPI_COMM_WORLD_*), PMI (PMI_RANK/PMI_SIZE, MPICH's hydra),
 * Slurm (SLURM_PROCID and SLURM_STEP_NUM_TASKS, which srun sets for each task of a step:
 * a batch script's own process also has SLURM_PROCID=0 and SLURM_NTASKS, and is refused
 * with a message rather than taken for rank 0 of a job whose other ranks never come).
 * The rendezvous is WEFT_ADDR, else MASTER_ADDR:MASTER_PORT, except under
 * torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True: torchrun's own store
 * already listens on MASTER_PORT), where rank 0 listens on MASTER_PORT + 1. Under MPI or
 * Slurm without either, a job whose ranks all run on one host meets on 127.0.0.1 at a
 * port derived from the job id (Open MPI 4's OMPI_MCA_ess_base_jobid, else PMIx's
 * PMIX_NAMESPACE, which Open MPI 5 sets; PMI_JOBID, else under MPICH's hydra, which sets
 * none, its proxy process on this host; SLURM_JOB_ID and SLURM_STEP_ID); a multi-host job
 * must set WEFT_ADDR (or MASTER_ADDR/MASTER_PORT).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_int.h"
#include "log.h"
#include "sock.h"
#include "status.h"
#include "util.h"

static int env_int(const char *name, int *out)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end != '\0' || x < 0 || x > 1 << 24)
        return -1;
    *out = (int)x;
    return 1;
}

/* Slurm gives no local size: this node's entry of SLURM_STEP_TASKS_PER_NODE ("2(x3),1":
 * 2 tasks on each of the first three nodes, 1 on the fourth), SLURM_NODEID its index.
 * 1 with *out set; 0 when either is missing or malformed. */
static int slurm_local_size(int *out)
{
    const char *v = getenv("SLURM_STEP_TASKS_PER_NODE");
    int node;
    if (v == NULL || *v == '\0' || env_int("SLURM_NODEID", &node) != 1)
        return 0;
    for (const char *p = v; *p;) {
        char *end;
        long tasks = strtol(p, &end, 10), times = 1;
        if (end == p || tasks < 1 || tasks > 1 << 24)
            return 0;
        if (strncmp(end, "(x", 2) == 0) {
            p = end + 2;
            times = strtol(p, &end, 10);
            if (end == p || times < 1 || *end != ')')
                return 0;
            end++;
        }
        if (node < times) {
            *out = (int)tasks;
            return 1;
        }
        node -= (int)times;
        if (*end != ',' && *end != '\0')
            return 0;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

typedef struct {
    const char *source, *rank, *size, *local_rank, *local_size, *jobid[2];
} launcher_t;

static const launcher_t launchers[] = {
    { "weftrun", "WEFT_RANK", "WEFT_WORLD_SIZE", "WEFT_LOCAL_RANK", "WEFT_LOCAL_SIZE", { 0 } },
    { "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", { 0 } },
    { "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE", { "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE" } },
    { "PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", { "PMI_JOBID" } },
    { "Slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", NULL,
      { "SLURM_JOB_ID" } },
};

/* "NAME:PID:START" of the nearest ancestor of this process whose command is `name`
 * (/proc/PID/stat: its start time tells it from a later process with the same pid), or
 * "" when there is none within a few generations. */
static void ancestor_id(const char *name, char *out, size_t cap)
{
    long pid = (long)getppid();
    out[0] = '\0';
    for (int depth = 0; depth < 8 && pid > 1; depth++) {
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            return;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        char *open = strchr(buf, '('), *close = strrchr(buf, ')');
        if (open == NULL || close == NULL || close < open)
            return;
        /* after ") ": state, ppid, pgrp, session, tty, tpgid, flags, minflt, cminflt,
         * majflt, cmajflt, utime, stime, cutime, cstime, priority, nice, threads,
         * itrealvalue, starttime (field 22) */
        long ppid = 0;
        unsigned long long start = 0;
        char *p = close + 2;
        for (int field = 3; *p && field <= 22; field++) {
            if (field == 4)
                ppid = strtol(p, NULL, 10);
            if (field == 22)
                start = strtoull(p, NULL, 10);
            while (*p && !isspace((unsigned char)*p))
                p++;
            while (*p && isspace((unsigned char)*p))
                p++;
        }
        if ((size_t)(close - open - 1) == strlen(name) && !strncmp(open + 1, name, strlen(name))) {
            snprintf(out, cap, "%s:%ld:%llu", name, pid, start);
            return;
        }
        pid = ppid;
    }
}

/* The launcher's job (its job id, and under Slurm the step): 0 when it names none.
 * Every rank of one job computes the same, and the bootstrap's job tag is made from it.
 * one_host: for the job-id port of a job all on one host, where MPICH's hydra, which
 * names no job, stands in with its proxy process on this host (one proxy per host: as
 * a job tag it would set the hosts of one job apart). */
static uint64_t job_hash(const launcher_t *l, int one_host)
{
    const char *jobid = NULL, *step = getenv("SLURM_STEP_ID");
    char proxy[128];
    for (int k = 0; k < 2 && (jobid == NULL || *jobid == '\0'); k++)
        jobid = l->jobid[k] ? getenv(l->jobid[k]) : NULL;
    if ((jobid == NULL || *jobid == '\0') && one_host && !strcmp(l->source, "PMI")) {
        ancestor_id("hydra_pmi_proxy", proxy, sizeof(proxy));
        jobid = proxy;
    }
    if (jobid == NULL || *jobid == '\0')
        return 0;
    uint64_t h = hash_bytes(HASH_SEED, jobid, strlen(jobid));
    if (step && !strcmp(l->source, "Slurm"))
        h = hash_bytes(h, step, strlen(step));
    return h;
}

/* A port from the job, so all ranks of one job agree on it, among the ports no bind(0)
 * or outgoing connection takes (sock_fixed_ports; one that did made rank 0's listen
 * fail: "bind: Address already in use", seen in a test run). The ranks share the host,
 * so the range. */
static int port_from_job(uint64_t h)
{
    int lo, span;
    sock_fixed_ports(&lo, &span);
    return lo + (int)(h % (uint64_t)span);
}

static weft_status_t find_rendezvous(const launcher_t *l, launch_env_t *env)
{
    const char *addr = getenv("WEFT_ADDR");
    const char *maddr = getenv("MASTER_ADDR"), *mport = getenv("MASTER_PORT");
    if (addr && *addr) {
        snprintf(env->rendezvous, sizeof(env->rendezvous), "%s", addr);
        return WEFT_OK;
    }
    if (maddr && *maddr && mport && *mport) {
        const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
        char *end;
        long port = strtol(mport, &end, 10);
        if (agent && !strcmp(agent, "True") && *end == '\0' && port > 0 && port < 65535) {
            /* torchrun's agent (static rendezvous) serves its store on MASTER_PORT of
             * MASTER_ADDR, where group rank 0, and so weft's rank 0, runs */
            snprintf(env->rendezvous, sizeof(env->rendezvous), "%s:%ld", maddr, port + 1);
            LOG_INFO(LOG_BOOT, "torchrun's agent store holds MASTER_PORT %ld: the rendezvous "
                     "is %s (WEFT_ADDR=host:port chooses another)", port, env->rendezvous);
            return WEFT_OK;
        }
        snprintf(env->rendezvous, sizeof(env->rendezvous), "%s:%s", maddr, mport);
        return WEFT_OK;
    }
    uint64_t job = job_hash(l, 1);
    int single_host = env->local_size == env->nranks ||
                      (getenv("SLURM_NNODES") && !strcmp(getenv("SLURM_NNODES"), "1"));
    if (job && single_host) {
        snprintf(env->rendezvous, sizeof(env->rendezvous), "127.0.0.1:%d",
                 port_from_job(job));
        return WEFT_OK;
    }
    if (env->nranks == 1) {
        snprintf(env->rendezvous, sizeof(env->rendezvous), "127.0.0.1:0");
        return WEFT_OK;
    }
    return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: ranks found through %s, but no "
                      "rendezvous: set WEFT_ADDR=host:port (rank 0's host) or "
                      "MASTER_ADDR and MASTER_PORT", l->source);
}

/* The launcher whose rank and size variables are both set (the first, in the table's
 * order), its values in *rank and *size: the launcher, or NULL with *why 0 where none
 * is, 1 where a Slurm batch script's own process is (no srun step), 2 where the values
 * do not describe a rank (*bad: that launcher). Touches no error state. */
static const launcher_t *find_launcher(int *rank, int *size, int *why,
                                       const launcher_t **bad)
{
    *why = 0;
    for (size_t i = 0; i < WEFT_ARRAY_LEN(launchers); i++) {
        const launcher_t *l = &launchers[i];
        int r = env_int(l->rank, rank), s = env_int(l->size, size);
        if (!strcmp(l->source, "Slurm") && r != 0 && s == 0 && getenv("SLURM_NTASKS")) {
            /* a batch script's own process: the job's only task where it has one (sbatch
             * -n 1 running the program directly), else not a rank of it */
            if (env_int("SLURM_NTASKS", size) == 1 && *size == 1)
                return l;
            *why = 1;
            return NULL;
        }
        if (r == 0 || s == 0)
            continue;           /* not this launcher's job (or only part of its variables) */
        if (r != 1 || s != 1 || *size < 1 || *rank >= *size) {
            *why = 2;
            *bad = l;
            return NULL;
        }
        return l;
    }
    return NULL;
}

int weft_launch_size(void)
{
    int rank = 0, size = 0, why = 0;
    const launcher_t *bad;
    if (find_launcher(&rank, &size, &why, &bad))
        return size;
    return why ? -1 : 0;
}

weft_status_t env_detect(launch_env_t *env)
{
    memset(env, 0, sizeof(*env));
    int why = 0;
    const launcher_t *bad = NULL;
    const launcher_t *l = find_launcher(&env->rank, &env->nranks, &why, &bad);
    if (why == 1)
        return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: SLURM_PROCID and "
                          "SLURM_NTASKS are set but not SLURM_STEP_NUM_TASKS: this "
                          "process runs in a Slurm job (a batch script or an allocation's "
                          "shell), not as a task that srun started; start the ranks with "
                          "srun (or weftrun, mpirun, torchrun)");
    if (why == 2)
        return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: %s=%s and %s=%s do not "
                          "describe a rank in a job", bad->rank, getenv(bad->rank) ?: "",
                          bad->size, getenv(bad->size) ?: "");
    if (l == NULL)
        return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: no launcher environment found "
                          "(WEFT_RANK/WEFT_WORLD_SIZE, RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK, "
                          "PMI_RANK or SLURM_PROCID); start the job with weftrun, torchrun, "
                          "mpirun or srun, or call weft_comm_init_rank");
    env->source = l->source;
    env->local_rank = -1;
    env->local_size = -1;
    if (l->local_rank)
        env_int(l->local_rank, &env->local_rank);
    if (l->local_size)
        env_int(l->local_size, &env->local_size);
    else if (!strcmp(l->source, "Slurm"))      /* the ib transport's HCA by topology */
        slurm_local_size(&env->local_size);
    uint64_t job = job_hash(l, 0);
    if (job)                    /* two jobs that meet at one port never mix */
        env->job_tag = (uint32_t)(job ^ (job >> 32)) | 1u;
    return find_rendezvous(l, env);
}
