/*
 * env.c - where this process sits in the job, from the launcher's environment.
 *
 * Checked in order, the first whose rank and size are both set wins (one with only one
 * of them, such as a WORLD_SIZE exported for another tool, is passed over): weftrun
 * (WEFT_RANK/WEFT_WORLD_SIZE/WEFT_ADDR), torchrun (RANK/WORLD_SIZE/MASTER_ADDR/
 * MASTER_PORT), Open MPI (OMPI_COMM_WORLD_*), PMI (PMI_RANK/PMI_SIZE: MPICH's hydra,
 * Slurm's pmi2 plugin, Cray's), Slurm (SLURM_PROCID and SLURM_STEP_NUM_TASKS, which srun
 * sets for each task of a step: a batch script's own process also has SLURM_PROCID=0, and
 * SLURM_NTASKS where the job was given a task count, and is a job of one rank where the
 * job has one task, else refused with a message rather than taken for rank 0 of a job
 * whose other ranks never come). A value that is not a number is refused, naming its
 * variable. The local rank and size (the ib transport's HCA by topology): the launcher's
 * own variables (PMI: hydra's MPI_LOCALRANKID/MPI_LOCALNRANKS, else Cray's
 * PMI_LOCAL_RANK/PMI_LOCAL_SIZE), else, under srun (SLURM_PROCID and
 * SLURM_STEP_NUM_TASKS equal to the rank and size, as under srun --mpi=pmi2, whose PMI
 * variables name no local rank), SLURM_LOCALID and this node's count of the step's tasks.
 * The rendezvous is WEFT_ADDR, else MASTER_ADDR:MASTER_PORT, except under
 * torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True: torchrun's own store
 * already listens on MASTER_PORT), where rank 0 listens on MASTER_PORT + 1; a value that
 * is not host:port (a port) is refused naming its variable. Under MPI or
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

#include "check.h"
#include "comm_int.h"
#include "log.h"
#include "sock.h"
#include "status.h"
#include "util.h"

/* 1 with *out set where NAME is a number in [0, 2^24]; 0 where it is unset or empty; -1
 * where it is something else (*out untouched). */
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

static int env_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0';
}

/* local_rank[k] and local_size[k]: the launcher's names for them, the first set wins */
typedef struct {
    const char *source, *rank, *size, *local_rank[2], *local_size[2], *jobid[2];
} launcher_t;

static const launcher_t launchers[] = {
    { "weftrun", "WEFT_RANK", "WEFT_WORLD_SIZE", { "WEFT_LOCAL_RANK" }, { "WEFT_LOCAL_SIZE" },
      { 0 } },
    { "torchrun", "RANK", "WORLD_SIZE", { "LOCAL_RANK" }, { "LOCAL_WORLD_SIZE" }, { 0 } },
    { "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
      { "OMPI_COMM_WORLD_LOCAL_RANK" }, { "OMPI_COMM_WORLD_LOCAL_SIZE" },
      { "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE" } },
    /* MPICH's hydra names the local rank MPI_LOCALRANKID, Cray's PMI PMI_LOCAL_RANK;
     * Slurm's pmi2 plugin names none (SLURM_LOCALID then, env_local) */
    { "PMI", "PMI_RANK", "PMI_SIZE", { "MPI_LOCALRANKID", "PMI_LOCAL_RANK" },
      { "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE" }, { "PMI_JOBID" } },
    { "Slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", { "SLURM_LOCALID" }, { 0 },
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

/* A port's text: digits, at most 65535. */
static int is_port(const char *s)
{
    return *s != '\0' && strlen(s) <= 5 && strspn(s, "0123456789") == strlen(s) &&
           atol(s) <= 65535;
}

/* WEFT_OK where the host part (hlen bytes of host) names a host the way the sockets
 * take one, IPv4 only; else the error, naming var (its value: value). */
static weft_status_t check_host(const char *var, const char *value, const char *host,
                                size_t hlen)
{
    if (hlen == 0)
        return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: %s='%s' names no host: the "
                          "rendezvous is rank 0's host name or IPv4 address and a port "
                          "(WEFT_ADDR=node1:29500)", var, value);
    if (memchr(host, ':', hlen) || memchr(host, '[', hlen) || hlen > 255)
        return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: %s='%s' is not a host name or "
                          "IPv4 address (weft's sockets are IPv4 only; the rendezvous is rank "
                          "0's host and a port: WEFT_ADDR=node1:29500)", var, value);
    return WEFT_OK;
}

static weft_status_t find_rendezvous(const launcher_t *l, launch_env_t *env)
{
    const char *addr = getenv("WEFT_ADDR");
    const char *maddr = getenv("MASTER_ADDR"), *mport = getenv("MASTER_PORT");
    if (addr && *addr) {
        const char *colon = strrchr(addr, ':');
        if (colon == NULL || !is_port(colon + 1))
            return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: WEFT_ADDR='%s' is not "
                              "host:port (rank 0's host name or IPv4 address, then a port, "
                              "a number up to 65535: WEFT_ADDR=node1:29500)", addr);
        RETURN_IF_ERR(check_host("WEFT_ADDR", addr, addr, (size_t)(colon - addr)));
        snprintf(env->rendezvous, sizeof(env->rendezvous), "%s", addr);
        return WEFT_OK;
    }
    if (maddr && *maddr && mport && *mport) {
        const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
        if (!is_port(mport))
            return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: MASTER_PORT='%s' is not a "
                              "port (a number up to 65535: with MASTER_ADDR the "
                              "rendezvous where WEFT_ADDR is not set)",
                              mport);
        RETURN_IF_ERR(check_host("MASTER_ADDR", maddr, maddr, strlen(maddr)));
        long port = atol(mport);
        if (agent && !strcmp(agent, "True") && port > 0 && port < 65535) {
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

/* find_launcher's verdict where it finds no launcher to use */
typedef struct {
    int why;                    /* 0: none found; one of the below */
    const launcher_t *bad;      /* NOT_A_RANK: the launcher */
    const char *var;            /* NOT_A_NUMBER: the variable; BATCH: the tasks' count's */
    int tasks;                  /* BATCH: the job's tasks */
} verdict_t;
enum { NONE, BATCH, NOT_A_RANK, NOT_A_NUMBER };

/* A Slurm job's own process, outside any srun step (SLURM_PROCID without
 * SLURM_STEP_NUM_TASKS: a batch script, or an allocation's shell): rank 0 of 1 where the
 * job has one task (SLURM_NTASKS; sbatch without -n sets none, and the job then has a
 * task per node, Slurm's default: SLURM_JOB_NUM_NODES, itself unset taken for 1); else
 * NULL with *v saying why. */
static const launcher_t *slurm_batch(const launcher_t *l, int r, int *rank, int *size,
                                     verdict_t *v)
{
    static const char *const count[] = { "SLURM_NTASKS", "SLURM_JOB_NUM_NODES",
                                         "SLURM_NNODES" };
    if (r < 0) {
        v->why = NOT_A_NUMBER;
        v->var = l->rank;
        return NULL;
    }
    *size = 1;
    v->var = NULL;
    for (size_t k = 0; k < WEFT_ARRAY_LEN(count) && v->var == NULL; k++) {
        int got = env_int(count[k], size);
        if (got < 0 || (got == 1 && *size < 1)) {
            v->why = NOT_A_NUMBER;
            v->var = count[k];
            return NULL;
        }
        if (got == 1)
            v->var = count[k];
    }
    if (*size == 1 && *rank == 0)
        return l;
    v->why = BATCH;
    v->tasks = *size;
    return NULL;
}

/* The launcher whose rank and size variables are both set (the first, in the table's
 * order), its values in *rank and *size: the launcher, or NULL with v->why NONE where
 * none is, BATCH where a Slurm job's own process is (no srun step) in a job of more than
 * one task, NOT_A_RANK where the values do not describe a rank, NOT_A_NUMBER where a
 * variable it needs is not a number. Touches no error state. */
static const launcher_t *find_launcher(int *rank, int *size, verdict_t *v)
{
    memset(v, 0, sizeof(*v));
    for (size_t i = 0; i < WEFT_ARRAY_LEN(launchers); i++) {
        const launcher_t *l = &launchers[i];
        int r = env_int(l->rank, rank), s = env_int(l->size, size);
        if (!strcmp(l->source, "Slurm") && r != 0 && s == 0 &&
            (env_set("SLURM_NTASKS") || env_set("SLURM_JOB_ID")))
            return slurm_batch(l, r, rank, size, v);
        if (r == 0 || s == 0)
            continue;           /* not this launcher's job (or only part of its variables) */
        if (r != 1 || s != 1 || *size < 1 || *rank >= *size) {
            v->why = NOT_A_RANK;
            v->bad = l;
            return NULL;
        }
        return l;
    }
    return NULL;
}

int weft_launch_size(void)
{
    int rank = 0, size = 0;
    verdict_t v;
    if (find_launcher(&rank, &size, &v))
        return size;
    return v.why != NONE ? -1 : 0;
}

/* One local variable into *out (left as it is where unset): WEFT_OK, or an error
 * naming it where it is not a number. */
static weft_status_t local_var(const char *name, int *out)
{
    if (name == NULL || *out >= 0)
        return WEFT_OK;
    if (env_int(name, out) < 0)
        return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: %s='%s' is not a number (the "
                          "local rank or size of this process)", name, getenv(name));
    return WEFT_OK;
}

/* The local rank and size: the launcher's own variables, else srun's where this process
 * is the task of an srun step that the launcher's rank is (srun --mpi=pmi2 sets PMI_RANK
 * and PMI_SIZE but no local rank: with none, every rank of a node took the same HCA). */
static weft_status_t env_local(const launcher_t *l, launch_env_t *env)
{
    int procid, ntasks;
    env->local_rank = -1;
    env->local_size = -1;
    for (int k = 0; k < 2; k++) {
        RETURN_IF_ERR(local_var(l->local_rank[k], &env->local_rank));
        RETURN_IF_ERR(local_var(l->local_size[k], &env->local_size));
    }
    int slurm = !strcmp(l->source, "Slurm");
    if (!slurm && (env->local_rank < 0 || env->local_size < 0) &&
        env_int("SLURM_PROCID", &procid) == 1 && procid == env->rank &&
        env_int("SLURM_STEP_NUM_TASKS", &ntasks) == 1 && ntasks == env->nranks) {
        RETURN_IF_ERR(local_var("SLURM_LOCALID", &env->local_rank));
        slurm = 1;
    }
    if (slurm && env->local_size < 0)
        slurm_local_size(&env->local_size);   /* Slurm names no local size */
    return WEFT_OK;
}

weft_status_t env_detect(launch_env_t *env)
{
    memset(env, 0, sizeof(*env));
    verdict_t v;
    const launcher_t *l = find_launcher(&env->rank, &env->nranks, &v);
    if (v.why == BATCH) {
        /* where the count came from (none: a job of one task, Slurm's default) */
        char from[96];
        if (v.var == NULL)
            snprintf(from, sizeof(from), "no SLURM_NTASKS, SLURM_JOB_NUM_NODES or "
                     "SLURM_NNODES: one task");
        else
            snprintf(from, sizeof(from), "%s%s=%d", strcmp(v.var, "SLURM_NTASKS")
                     ? "no SLURM_NTASKS: a task on each node, " : "", v.var, v.tasks);
        return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: SLURM_PROCID=%s is set but not "
                          "SLURM_STEP_NUM_TASKS, in a job of %d task(s) (%s): this process "
                          "runs in a Slurm job (a batch script or an allocation's shell), not "
                          "as a task that srun started, and only rank 0 of a one-task job "
                          "runs so; start the ranks with srun (or weftrun, mpirun, torchrun)",
                          getenv("SLURM_PROCID") ?: "", v.tasks, from);
    }
    if (v.why == NOT_A_NUMBER)
        return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: %s='%s' is not a number in range "
                          "(a rank or local rank from 0, a count from 1, from the launcher)",
                          v.var, getenv(v.var) ?: "");
    if (v.why == NOT_A_RANK)
        return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: %s=%s and %s=%s do not "
                          "describe a rank in a job", v.bad->rank, getenv(v.bad->rank) ?: "",
                          v.bad->size, getenv(v.bad->size) ?: "");
    if (l == NULL)
        return weft_error(WEFT_ERR_INVALID_ARG, "comm_init: no launcher environment found "
                          "(WEFT_RANK/WEFT_WORLD_SIZE, RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK, "
                          "PMI_RANK, or SLURM_PROCID with SLURM_STEP_NUM_TASKS or "
                          "SLURM_JOB_ID); start the job with weftrun, torchrun, mpirun or "
                          "srun, or call weft_comm_init_rank");
    env->source = l->source;
    RETURN_IF_ERR(env_local(l, env));
    uint64_t job = job_hash(l, 0);
    if (job)                    /* two jobs that meet at one port never mix */
        env->job_tag = (uint32_t)(job ^ (job >> 32)) | 1u;
    return find_rendezvous(l, env);
}
