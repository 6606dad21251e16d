/*
 * probe_hup.c - a process linked with weft dies of SIGHUP, as any process does (run.sh
 * wants exit 129 from a shell). libucs, which libweft links for its ucx transport,
 * installs a SIGHUP handler as it loads that prints UCX's debug information and goes on:
 * before 2026-11-27 every rank ignored the hangup a launcher forwards. Started with SIGHUP
 * ignored (nohup), it keeps ignoring it (run.sh wants exit 1). UCX_DEBUG_SIGNO set in the
 * environment keeps UCX's handler (the user asked for it).
 */
#include <signal.h>
#include <stdio.h>

#include "weft.h"

int main(void)
{
    printf("probe_hup: raising SIGHUP (%s)\n", weft_status_str(WEFT_OK));
    fflush(stdout);
    raise(SIGHUP);
    printf("probe_hup: SIGHUP was ignored\n");
    return 1;
}
