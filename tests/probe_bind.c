/*
 * probe_bind.c - where weft_comm_init left this rank (tests/test_bind.sh).
 *
 * Starts a communicator from the launcher's environment and prints one line,
 * "rank R of N cpus LIST", LIST being the OS cpus this process may run on after
 * init (sched_getaffinity), then destroys it. Exits 1 with weft's error when init fails.
 * `probe_bind threads HOST:PORT`: two ranks as threads of this process instead.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

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

typedef struct { int rank; const char *rdv; weft_comm_t *comm; weft_status_t st; } th_t;

static void *th_init(void *p)
{
    th_t *t = p;
    t->st = weft_comm_init_rank(t->rank, 2, t->rdv, &t->comm);
    return NULL;
}

/* threads RENDEZVOUS: two ranks as threads of this process; prints "threads cpus LIST",
 * the cpus the process may use once both are up. */
static int threads(const char *rdv)
{
    th_t t[2] = { { 0, rdv, NULL, WEFT_OK }, { 1, rdv, NULL, WEFT_OK } };
    pthread_t id[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&id[i], NULL, th_init, &t[i]) != 0)
            return 1;
    for (int i = 0; i < 2; i++)
        pthread_join(id[i], NULL);
    for (int i = 0; i < 2; i++)
        if (t[i].st != WEFT_OK) {
            fprintf(stderr, "probe_bind: thread rank %d: init failed: %s\n", i, weft_last_error());
            return 1;
        }
    cpu_set_t set;
    char list[512] = "?";
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        cpu_list(&set, list, sizeof(list));
    printf("threads cpus %s\n", list);
    for (int i = 0; i < 2; i++)
        weft_comm_destroy(t[i].comm);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 2 && !strcmp(argv[1], "threads"))
        return threads(argv[2]);
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
