/*
 * status.h - the error detail behind weft_last_error().
 *
 * weft_error() records a message in this thread's buffer, logs it at WARN level when
 * the code is an error, and returns the code, so a failure site reads
 *     return weft_error(WEFT_ERR_INVALID_ARG, "allreduce: unknown dtype %d", dtype);
 * Log once, where the error is first detected; callers above just propagate.
 */
#ifndef WEFT_STATUS_H
#define WEFT_STATUS_H

#include "weft.h"

weft_status_t weft_error(weft_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Same, but does not log: for bad input that the caller is told about directly. */
weft_status_t weft_error_quiet(weft_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void weft_error_clear(void);
/* An inner failure its caller gets over (a probe, a fallback): the message from before it
 * comes back, so weft_last_error() still says what the caller's last failing call did
 * (weft.h: it stays valid until the next failing call). */
typedef struct { char msg[1024]; } weft_error_saved_t;
void weft_error_save(weft_error_saved_t *s);
void weft_error_restore(const weft_error_saved_t *s);

#endif
