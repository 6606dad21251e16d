/*
 * core_rtt.c - `core_rtt`: how long one cache line takes to go from one core to another
 * and back, measured now.
 *
 *   core_rtt [-c A,B] [-n ITERS] [-r REPS] [-q]
 *
 * Two processes, pinned to cpus A and B (default: the first two this process may run
 * on), pass a counter back and forth through one shared cache line, ITERS round trips
 * per repetition; it prints the median over REPS repetitions in ns per round trip (-q:
 * the number alone). Cores that share a last-level cache answer in tens of ns; cores
 * that do not (two sockets, two CCDs, or a VM's vCPUs that the host has put there for
 * now) in hundreds, and then every byte weft's shm ring passes from one rank's cache to
 * the other's moves several times slower (docs/PERF.md, "Launch-to-launch slow mode").
 * The bench scripts run it around each launch to tell the two apart (bench/sim_lib.sh).
 *
 * Exit codes: 0 ok, 1 a failure (fork, affinity, a partner that stopped answering for
 * 10 s), 2 bad arguments. Both processes spin: run it on an otherwise idle machine.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS 1000
#define WATCHDOG_S 10

/* the line the two processes bounce, alone on its cache line; ready words elsewhere */
typedef struct shared {
    _Alignas(64) volatile uint64_t ball;
    _Alignas(64) volatile uint64_t ready[2];
} shared_t;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: core_rtt [-c A,B] [-n ITERS] [-r REPS] [-q]\n"
                 "  -c A,B    the two cpus (default: the first two this process may use)\n"
                 "  -n ITERS  round trips per repetition (default 20000)\n"
                 "  -r REPS   repetitions; the median is printed (default 5, at most %d)\n"
                 "  -q        print the ns per round trip alone\n", MAX_REPS);
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return sched_setaffinity(0, sizeof(s), &s);
}

/* side 0 serves odd values and waits for the next even one; side 1 answers */
static void rally(shared_t *sh, int side, uint64_t base, int iters)
{
    for (uint64_t i = base; i < base + (uint64_t)iters; i++) {
        if (side == 0) {
            sh->ball = 2 * i + 1;
            while (sh->ball != 2 * i + 2)
                ;
        } else {
            while (sh->ball != 2 * i + 1)
                ;
            sh->ball = 2 * i + 2;
        }
    }
}

int main(int argc, char **argv)
{
    int cpu[2] = { -1, -1 }, iters = 20000, reps = 5, quiet = 0, opt;
    while ((opt = getopt(argc, argv, "c:n:r:qh")) != -1) {
        switch (opt) {
        case 'c': {
            char *comma = strchr(optarg, ',');
            if (!comma)
                goto bad_cpus;
            *comma = 0;
            if (parse_int(optarg, 0, CPU_SETSIZE - 1, &cpu[0]) ||
                parse_int(comma + 1, 0, CPU_SETSIZE - 1, &cpu[1]) || cpu[0] == cpu[1]) {
                *comma = ',';
            bad_cpus:
                fprintf(stderr, "core_rtt: -c %s: want two different cpu numbers, A,B\n",
                        optarg);
                return 2;
            }
            break;
        }
        case 'n':
            if (parse_int(optarg, 1, 100000000, &iters)) {
                fprintf(stderr, "core_rtt: -n %s: want a count from 1 to 100000000\n", optarg);
                return 2;
            }
            break;
        case 'r':
            if (parse_int(optarg, 1, MAX_REPS, &reps)) {
                fprintf(stderr, "core_rtt: -r %s: want a count from 1 to %d\n", optarg,
                        MAX_REPS);
                return 2;
            }
            break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "core_rtt: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }

    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed)) {
        perror("core_rtt: sched_getaffinity");
        return 1;
    }
    if (cpu[0] < 0) {
        for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; c++)
            if (CPU_ISSET(c, &allowed))
                cpu[k++] = c;
        if (cpu[1] < 0) {
            fprintf(stderr, "core_rtt: this process may run on one cpu only: nothing to "
                            "measure between\n");
            return 1;
        }
    }
    for (int k = 0; k < 2; k++)
        if (!CPU_ISSET(cpu[k], &allowed)) {
            fprintf(stderr, "core_rtt: cpu %d is not one this process may run on\n", cpu[k]);
            return 1;
        }

    shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    if (sh == MAP_FAILED) {
        perror("core_rtt: mmap");
        return 1;
    }
    memset((void *)sh, 0, sizeof(*sh));
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("core_rtt: fork");
        return 1;
    }
    int side = child == 0;
    /* a partner that dies leaves the other spinning: the alarm ends both */
    alarm(WATCHDOG_S + (unsigned)((double)iters * reps / 1e6));
    if (pin(cpu[side])) {
        fprintf(stderr, "core_rtt: cannot run on cpu %d\n", cpu[side]);
        if (side)
            _exit(1);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        return 1;
    }
    sh->ready[side] = 1;
    while (!sh->ready[!side])
        ;
    rally(sh, side, 0, iters < 1000 ? iters : 1000);        /* warm the line's path */
    double ns[MAX_REPS];
    uint64_t base = 1000;
    for (int r = 0; r < reps; r++, base += (uint64_t)iters) {
        double t0 = now_ns();
        rally(sh, side, base, iters);
        ns[r] = (now_ns() - t0) / iters;
    }
    if (side)
        _exit(0);
    int st;
    if (waitpid(child, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "core_rtt: the process on cpu %d failed\n", cpu[1]);
        return 1;
    }
    qsort(ns, (size_t)reps, sizeof(ns[0]), cmp_double);
    double med = reps % 2 ? ns[reps / 2] : (ns[reps / 2 - 1] + ns[reps / 2]) / 2;
    if (quiet)
        printf("%.0f\n", med);
    else
        printf("core_rtt: cpus %d,%d: %.0f ns per round trip (median of %d x %d; "
               "fastest %.0f, slowest %.0f)\n", cpu[0], cpu[1], med, reps, iters, ns[0],
               ns[reps - 1]);
    return 0;
}
