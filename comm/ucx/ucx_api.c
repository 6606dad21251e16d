/*
 * ucx_api.c - fills the UCX table (ucx_api.h) once per process.
 *
 * libucp.so.0 is opened with RTLD_LOCAL (its calls stay out of the application's symbol
 * namespace) and never closed (UCX does not support being unloaded); its dependencies,
 * libucs and libuct, load with it and the handle's lookups reach them. libucs installs a
 * SIGHUP handler as it loads that prints UCX's debug information and goes on: every
 * process using the ucx transport would ignore the hangup a launcher forwards or a
 * closing terminal sends. Unless the user asked for it (UCX_DEBUG_SIGNO set), the
 * handler it replaced is put back (SIG_DFL, or SIG_IGN under nohup). Its handlers for
 * SIGSEGV, SIGBUS, SIGILL and SIGFPE stay (docs/TRANSPORTS.md: UCX_HANDLE_ERRORS).
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

static void load(void)
{
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
                 UCX_LIB, #f, UCP_API_MAJOR, UCP_API_MINOR);                                           \
        return;                                                                            \
    }
    UCX_API_CALLS(UCX_API_SYM)
#undef UCX_API_SYM
    ucx_api = t;
    if (getenv("UCX_DEBUG_SIGNO") == NULL)
        ucx_api.ucs_debug_disable_signal(SIGHUP);
    ok = 1;
}

weft_status_t ucx_api_load(void)
{
    pthread_once(&once, load);
    return ok ? WEFT_OK : weft_error(WEFT_ERR_UNSUPPORTED, "ucx: %s", why);
}

int ucx_api_loaded(void)
{
    return ok;
}
