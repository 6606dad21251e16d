/*
 * ucx_api.c - fills the UCX table (ucx_api.h) once per process.
 *
 * libucp.so.0 is opened with RTLD_LOCAL (its calls stay out of the application's symbol
 * namespace) and never closed (UCX does not support being unloaded); its dependencies,
 * libucs and libuct, load with it and the handle's lookups reach them. libucs installs
 * signal handlers as it loads: for SIGHUP one that prints UCX's debug information and
 * goes on (every process using the ucx transport would ignore the hangup a launcher
 * forwards or a closing terminal sends), and backtrace handlers for SIGSEGV, SIGBUS,
 * SIGILL and SIGFPE, replacing the application's own (Python's faulthandler, a crash
 * reporter). What the process had is put back (put_back), also where the load fails
 * halfway; UCX_DEBUG_SIGNO set keeps UCX's SIGHUP handler, and where the application had
 * left an error signal at its default, UCX's backtrace handler stays.
 */
#define UCX_API_DEFINE
#include "ucx_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "status.h"

#define UCX_LIB "libucp.so.0"

ucx_api_t ucx_api;
static int ok;
static char why[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The signals libucs takes as it loads, and what the process had for each before. */
static const int taken[] = { SIGHUP, SIGSEGV, SIGBUS, SIGILL, SIGFPE };
#define NTAKEN (int)(sizeof(taken) / sizeof(taken[0]))

/* Puts back what the process had: SIGHUP (with_hup: where ucs_debug_disable_signal could
 * not, and unless UCX_DEBUG_SIGNO asks for UCX's), the error signals where the
 * application had a handler of its own (or ignored them); where it had the default,
 * UCX's backtrace handler stays, as in any UCX program. (Where libucs was loaded before
 * weft, by Open MPI's UCX layer say, `before` holds UCX's SIGHUP handler: only
 * ucs_debug_disable_signal knows what it replaced.) */
static void put_back(const struct sigaction before[NTAKEN], int with_hup)
{
    for (int i = 0; i < NTAKEN; i++) {
        if (taken[i] == SIGHUP ? !with_hup || getenv("UCX_DEBUG_SIGNO") != NULL
                               : before[i].sa_handler == SIG_DFL)
            continue;
        sigaction(taken[i], &before[i], NULL);
    }
}

static void load(void)
{
    struct sigaction before[NTAKEN];
    for (int i = 0; i < NTAKEN; i++)
        sigaction(taken[i], NULL, &before[i]);
    void *h = dlopen(UCX_LIB, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(why, sizeof(why), "cannot load UCX (%s, Debian: libucx0): %s", UCX_LIB,
                 dlerror());
        return;
    }
    ucx_api_t t;
#define UCX_API_SYM(f)                                                                     \
    if ((*(void **)&t.f = dlsym(h, #f)) == NULL) {                                         \
        snprintf(why, sizeof(why), "%s lacks %s: not the UCX weft was built with (%d.%d)", \
                 UCX_LIB, #f, UCP_API_MAJOR, UCP_API_MINOR);                               \
        put_back(before, 1);                                                               \
        return;                                                                            \
    }
    UCX_API_CALLS(UCX_API_SYM)
#undef UCX_API_SYM
    ucx_api = t;
    if (getenv("UCX_DEBUG_SIGNO") == NULL)
        ucx_api.ucs_debug_disable_signal(SIGHUP);   /* what libucs replaced, whenever */
    put_back(before, 0);
    ok = 1;
}

weft_status_t ucx_api_load(void)
{
    pthread_once(&once, load);
    /* quiet: in auto mode a host without UCX just has no ucx transport; where ucx was
     * forced the caller's init fails with this message */
    return ok ? WEFT_OK : weft_error_quiet(WEFT_ERR_UNSUPPORTED, "ucx: %s", why);
}
