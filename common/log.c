/*
 * log.c - the logger behind log.h.
 *
 * Lines look like "host:pid [rank] weft WARN msg" and go to stderr in one write, so
 * lines from ranks sharing a terminal do not interleave mid-line.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"

int log_level_cached = -1;
unsigned log_subsys_mask = LOG_ALL;
static int log_rank = -1;
static char log_host[64];
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static const struct { const char *name; unsigned bit; } subsys_names[] = {
    { "INIT", LOG_INIT }, { "BOOT", LOG_BOOT }, { "NET", LOG_NET }, { "SHM", LOG_SHM },
    { "COLL", LOG_COLL }, { "ENGINE", LOG_ENGINE }, { "TOPO", LOG_TOPO },
    { "TUNE", LOG_TUNE }, { "ALL", LOG_ALL },
};

static int parse_level(const char *s)
{
    if (s == NULL || *s == '\0')  return LOG_LVL_WARN;
    if (!strcasecmp(s, "NONE"))   return LOG_LVL_NONE;
    if (!strcasecmp(s, "WARN"))   return LOG_LVL_WARN;
    if (!strcasecmp(s, "INFO"))   return LOG_LVL_INFO;
    if (!strcasecmp(s, "DEBUG"))  return LOG_LVL_DEBUG;
    if (!strcasecmp(s, "TRACE"))  return LOG_LVL_TRACE;
    fprintf(stderr, "weft: WEFT_DEBUG=%s not understood (NONE/WARN/INFO/DEBUG/TRACE); "
            "using WARN\n", s);
    return LOG_LVL_WARN;
}

/* "NET,SHM" enables those; "^NET" enables all but NET. */
static unsigned parse_subsys(const char *s)
{
    if (s == NULL || *s == '\0')
        return LOG_ALL;
    int invert = (*s == '^');
    unsigned mask = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s + invert);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        size_t i;
        for (i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
            if (!strcasecmp(tok, subsys_names[i].name)) {
                mask |= subsys_names[i].bit;
                break;
            }
        if (i == sizeof(subsys_names) / sizeof(subsys_names[0]))
            fprintf(stderr, "weft: WEFT_DEBUG_SUBSYS: unknown subsystem '%s'\n", tok);
    }
    return invert ? (LOG_ALL & ~mask) : mask;
}

static void log_init_once(void)
{
    if (gethostname(log_host, sizeof(log_host)) != 0)
        snprintf(log_host, sizeof(log_host), "?");
    log_host[sizeof(log_host) - 1] = '\0';
    char *dot = strchr(log_host, '.');
    if (dot)
        *dot = '\0';
    log_subsys_mask = parse_subsys(getenv("WEFT_DEBUG_SUBSYS"));
    __atomic_store_n(&log_level_cached, parse_level(getenv("WEFT_DEBUG")), __ATOMIC_RELEASE);
}

void log_init(void)
{
    pthread_once(&log_once, log_init_once);
}

void log_set_rank(int rank)
{
    log_rank = rank;
}

void log_emit(int level, unsigned subsys, const char *fmt, ...)
{
    static const char *lvl_name[] = { "NONE", "WARN", "INFO", "DEBUG", "TRACE" };
    char line[2048];
    int n = snprintf(line, sizeof(line), "%s:%d [%d] weft %s ", log_host, (int)getpid(),
                     log_rank, lvl_name[level]);
    (void)subsys;
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line) - 1)
        n = sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}
