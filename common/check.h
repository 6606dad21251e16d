/*
 * check.h - status checks that say they leave.
 *
 * Each macro leaves a "file:line" breadcrumb at DEBUG level when it propagates an error,
 * so a failure deep in the stack can be traced without a debugger (NCCL's habit).
 */
#ifndef WEFT_CHECK_H
#define WEFT_CHECK_H

#include "log.h"

#define RETURN_IF_ERR(expr) do {                                              \
        weft_status_t st_ = (expr);                                           \
        if (st_ < 0) {                                                        \
            LOG_DEBUG(LOG_ALL, "%s:%d %s -> %s", __FILE__, __LINE__, #expr,    \
                      weft_status_str(st_));                                  \
            return st_;                                                       \
        }                                                                     \
    } while (0)

#define GOTO_IF_ERR(expr, st, label) do {                                     \
        (st) = (expr);                                                        \
        if ((st) < 0) {                                                       \
            LOG_DEBUG(LOG_ALL, "%s:%d %s -> %s", __FILE__, __LINE__, #expr,    \
                      weft_status_str(st));                                   \
            goto label;                                                       \
        }                                                                     \
    } while (0)

#endif
