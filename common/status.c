/*
 * status.c - status strings and the per-thread last-error message.
 *
 * Invariant: the message buffer is thread-local, so concurrent communicators on
 * different threads never see each other's errors.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "log.h"

static __thread char last_error[1024];

const char *weft_status_str(weft_status_t s)
{
    switch (s) {
    case WEFT_OK:               return "ok";
    case WEFT_IN_PROGRESS:      return "in progress";
    case WEFT_ERR_INVALID_ARG:  return "invalid argument";
    case WEFT_ERR_NO_MEMORY:    return "out of memory";
    case WEFT_ERR_SYSTEM:       return "system error";
    case WEFT_ERR_TIMEOUT:      return "timeout";
    case WEFT_ERR_PEER_LOST:    return "peer lost";
    case WEFT_ERR_MISMATCH:     return "collective mismatch";
    case WEFT_ERR_ABORTED:      return "aborted";
    case WEFT_ERR_AUTH:         return "authentication failed";
    case WEFT_ERR_UNSUPPORTED:  return "unsupported";
    case WEFT_ERR_INTERNAL:     return "internal error";
    }
    return "unknown status";
}

const char *weft_last_error(void)
{
    return last_error;
}

void weft_error_clear(void)
{
    last_error[0] = '\0';
}

void weft_error_save(weft_error_saved_t *s)
{
    _Static_assert(sizeof(s->msg) == sizeof(last_error), "a saved message fits");
    memcpy(s->msg, last_error, sizeof(s->msg));
}

void weft_error_restore(const weft_error_saved_t *s)
{
    memcpy(last_error, s->msg, sizeof(last_error));
}

/* Through a copy, so a message may quote weft_last_error() (adding context to it). */
static void error_vset(const char *fmt, va_list ap)
{
    char buf[sizeof(last_error)];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    memcpy(last_error, buf, sizeof(buf));
}

weft_status_t weft_error(weft_status_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vset(fmt, ap);
    va_end(ap);
    if (code < 0)
        LOG_WARN(LOG_ALL, "%s (%s)", last_error, weft_status_str(code));
    return code;
}

weft_status_t weft_error_quiet(weft_status_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vset(fmt, ap);
    va_end(ap);
    return code;
}
