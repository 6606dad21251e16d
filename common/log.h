/*
 * log.h - logging by level and subsystem, configured from the environment.
 *
 * WEFT_DEBUG=WARN|INFO|DEBUG|TRACE picks the level (default WARN);
 * WEFT_DEBUG_SUBSYS=INIT,BOOT,NET,SHM,COLL,ENGINE,TOPO,TUNE,ALL (or ^X to exclude) picks
 * subsystems. A disabled LOG_* costs one load and a branch; LOG_TRACE is compiled out
 * unless WEFT_TRACE is defined at build time.
 *
 * The log settings are the one piece of process-wide state in weft: they are read once
 * from the environment and never change afterwards (except the rank label).
 */
#ifndef WEFT_LOG_H
#define WEFT_LOG_H

enum { LOG_LVL_NONE = 0, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG, LOG_LVL_TRACE };

enum {
    LOG_INIT = 1u << 0, LOG_BOOT = 1u << 1, LOG_NET = 1u << 2, LOG_SHM = 1u << 3,
    LOG_COLL = 1u << 4, LOG_ENGINE = 1u << 5, LOG_TOPO = 1u << 6, LOG_TUNE = 1u << 7,
    LOG_ALL = 0xffffu
};

extern int log_level_cached;     /* -1 until log_init ran */
extern unsigned log_subsys_mask;

void log_init(void);
void log_set_rank(int rank);
void log_emit(int level, unsigned subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline int log_enabled(int level, unsigned subsys)
{
    if (log_level_cached < 0)
        log_init();
    /* warnings whatever WEFT_DEBUG_SUBSYS says, as NCCL's: a list of unknown names
     * (mask 0) silenced them all before 2026-11-28 */
    return level <= log_level_cached && (level == LOG_LVL_WARN || (subsys & log_subsys_mask));
}

#define LOG_AT(lvl, subsys, ...) do {                                         \
        if (log_enabled((lvl), (subsys)))                                     \
            log_emit((lvl), (subsys), __VA_ARGS__);                           \
    } while (0)

#define LOG_WARN(subsys, ...)  LOG_AT(LOG_LVL_WARN, subsys, __VA_ARGS__)
#define LOG_INFO(subsys, ...)  LOG_AT(LOG_LVL_INFO, subsys, __VA_ARGS__)
#define LOG_DEBUG(subsys, ...) LOG_AT(LOG_LVL_DEBUG, subsys, __VA_ARGS__)
#ifdef WEFT_TRACE
#define LOG_TRACE(subsys, ...) LOG_AT(LOG_LVL_TRACE, subsys, __VA_ARGS__)
#else
#define LOG_TRACE(subsys, ...) do { } while (0)
#endif

#endif
