/*
 * probe_hup.c - what loading weft does to a process's signals.
 *
 *   probe_hup [ucx]   raises SIGHUP; with `ucx`, after a 1-rank communicator over the ucx
 *                     transport (WEFT_TRANSPORT=ucx), which loads UCX
 *   probe_hup lazy    a 1-rank communicator over shm leaves UCX unloaded and the process's
 *                     SIGSEGV handler in place; one over ucx then loads it, and the
 *                     handler is still the process's (exit 0: all held; 1 and why on
 *                     stdout otherwise)
 *
 * A process using weft dies of SIGHUP, as any process does (run.sh wants exit 129 from a
 * shell). libucs installs a SIGHUP handler as it loads that prints UCX's debug
 * information and goes on: before 2026-11-27 every rank ignored the hangup a launcher
 * forwards. Started with SIGHUP ignored (nohup), it keeps ignoring it (run.sh wants exit
 * 1). UCX_DEBUG_SIGNO set in the environment keeps UCX's handler (the user asked for it).
 * libucs also replaces the SIGSEGV, SIGBUS, SIGILL and SIGFPE handlers: libweft links no
 * UCX and opens it only for the ucx transport (or an RDMA host), and then puts back the
 * handlers the process had (a Python process that set its own keeps them).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft.h"

static int ucx_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f))
        found = strstr(line, "/libucp.so") != NULL || strstr(line, "/libucs.so") != NULL;
    if (f)
        fclose(f);
    return found;
}

/* A 1-rank communicator over `transport`, an all-reduce on it, destroyed. */
static int one_rank(const char *transport)
{
    weft_comm_t *c;
    float x = 1.0f;
    setenv("WEFT_TRANSPORT", transport, 1);
    if (weft_comm_init_rank(0, 1, "127.0.0.1:0", &c) != WEFT_OK) {
        printf("probe_hup: init over %s failed: %s\n", transport, weft_last_error());
        return 1;
    }
    weft_status_t st = weft_allreduce(&x, &x, 1, WEFT_FLOAT32, WEFT_SUM, c);
    weft_comm_destroy(c);
    if (st != WEFT_OK) {
        printf("probe_hup: all-reduce over %s failed: %s\n", transport, weft_last_error());
        return 1;
    }
    return 0;
}

static void on_segv(int sig)
{
    (void)sig;
    _exit(3);
}

static int lazy(void)
{
    struct sigaction sa = { .sa_handler = on_segv }, now;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    if (ucx_mapped() || one_rank("shm"))
        return printf("probe_hup: UCX mapped before any communicator\n"), 1;
    sigaction(SIGSEGV, NULL, &now);
    if (ucx_mapped())
        return printf("probe_hup: a communicator over shm loaded UCX\n"), 1;
    if (now.sa_handler != on_segv)
        return printf("probe_hup: the SIGSEGV handler was replaced under shm\n"), 1;
    if (one_rank("ucx"))
        return 1;
    if (!ucx_mapped())
        return printf("probe_hup: a communicator over ucx ran without UCX loaded\n"), 1;
    sigaction(SIGSEGV, NULL, &now);
    if (now.sa_handler != on_segv)
        return printf("probe_hup: loading UCX replaced the SIGSEGV handler\n"), 1;
    printf("probe_hup: UCX loaded for the ucx transport only; the SIGSEGV handler kept\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "lazy"))
        return lazy();
    if (argc > 1 && !strcmp(argv[1], "ucx") && one_rank("ucx"))
        return 2;
    printf("probe_hup: raising SIGHUP (%s)\n", weft_status_str(WEFT_OK));
    fflush(stdout);
    raise(SIGHUP);
    printf("probe_hup: SIGHUP was ignored\n");
    return 1;
}
