/*
 * probe_bind.c - where weft_comm_init left this rank (tests/test_bind.sh).
 *
 * Starts a communicator from the launcher's environment and prints one line,
 * "rank R of N cpus LIST", LIST being the OS cpus this process may run on after
 * init (sched_getaffinity), then destroys it. Exits 1 with weft's error when init fails.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>

#include "weft.h"

/* "0-3,8" from a cpu set */
static void cpu_list(const cpu_set_t *set, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && n + 24 < cap; c++) {
        if (!CPU_ISSET(c, set))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
            e++;
        n += (size_t)snprintf(buf + n, cap - n, n ? ",%d" : "%d", c);
        if (e > c)
            n += (size_t)snprintf(buf + n, cap - n, "-%d", e);
        c = e;
    }
}

int main(void)
{
    weft_comm_t *comm;
    weft_status_t st = weft_comm_init(&comm);
    if (st != WEFT_OK) {
        fprintf(stderr, "probe_bind: init failed: %s: %s\n", weft_status_str(st), weft_last_error());
        return 1;
    }
    cpu_set_t set;
    char list[512] = "?";
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        cpu_list(&set, list, sizeof(list));
    printf("rank %d of %d cpus %s\n", weft_comm_rank(comm), weft_comm_size(comm), list);
    fflush(stdout);
    weft_comm_destroy(comm);
    return 0;
}
