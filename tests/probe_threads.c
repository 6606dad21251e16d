/*
 * probe_threads.c - ranks as threads of one process (nccl-tests -g, ncclCommInitAll):
 * N threads each weft_comm_init_rank one rank of a job on a loopback rendezvous, then run
 * 20 all-to-alls whose every element says who sent it, in which call, to whom.
 *
 *   probe_threads N        (no launcher; run by tests/run.sh with WEFT_TRANSPORT set)
 *
 * Every call must return WEFT_OK with every element right, or init must refuse on every
 * rank with an error; a call that returns WEFT_OK with a wrong element fails the probe.
 * Over ucx (one worker per process, tags that name no receiver) two ranks' receives took
 * each other's frames before 2026-11-28; ucx now stays out of such communicators.
 * Prints one line per rank and "ok" or "FAIL"; exit 0 when it holds.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "weft.h"

#define MAXN 8
#define C 1024
#define ITERS 20

static char addr[64];
static int nranks;

typedef struct {
    int rank, iters;
    long wrong;
    weft_status_t init, st;
    char msg[300];
} rank_t;

static int value(int it, int from, int to, int k)
{
    return it * 1000000 + from * 100000 + to * 10000 + k % 1000;
}

static void *rank_main(void *v)
{
    rank_t *a = v;
    weft_comm_t *c = NULL;
    a->init = a->st = weft_comm_init_rank(a->rank, nranks, addr, &c);
    if (a->st != WEFT_OK) {
        snprintf(a->msg, sizeof(a->msg), "%s", weft_last_error());
        return NULL;
    }
    int *s = malloc(sizeof(int) * nranks * C), *r = malloc(sizeof(int) * nranks * C);
    for (int it = 0; s && r && it < ITERS; it++) {
        for (int j = 0; j < nranks; j++)
            for (int k = 0; k < C; k++)
                s[j * C + k] = value(it, a->rank, j, k);
        a->st = weft_alltoall(s, r, C, WEFT_INT32, c);
        if (a->st != WEFT_OK) {
            snprintf(a->msg, sizeof(a->msg), "all-to-all %d: %s", it, weft_last_error());
            break;
        }
        for (int j = 0; j < nranks; j++)
            for (int k = 0; k < C; k++)
                a->wrong += r[j * C + k] != value(it, j, a->rank, k);
        a->iters = it + 1;
    }
    free(s);
    free(r);
    weft_comm_destroy(c);
    return NULL;
}

int main(int argc, char **argv)
{
    nranks = argc > 1 ? atoi(argv[1]) : 3;
    if (nranks < 2 || nranks > MAXN) {
        fprintf(stderr, "usage: probe_threads N (2-%d)\n", MAXN);
        return 2;
    }
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        printf("FAIL no free loopback port\n");
        return 1;
    }
    close(fd);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
    alarm(100);                 /* a rank that waits for one that gave up: fail, not hang */
    pthread_t t[MAXN];
    rank_t r[MAXN];
    for (int i = 0; i < nranks; i++) {
        memset(&r[i], 0, sizeof(r[i]));
        r[i].rank = i;
        if (pthread_create(&t[i], NULL, rank_main, &r[i]) != 0) {
            printf("FAIL pthread_create\n");
            return 1;
        }
    }
    int wrong = 0, refused = 0, ok = 0;
    for (int i = 0; i < nranks; i++) {
        pthread_join(t[i], NULL);
        printf("rank %d: init %s, %d all-to-alls, %s, %ld wrong elements%s%s\n", i,
               weft_status_str(r[i].init), r[i].iters, weft_status_str(r[i].st), r[i].wrong,
               r[i].msg[0] ? ": " : "", r[i].msg);
        wrong += r[i].wrong != 0;
        refused += r[i].init != WEFT_OK;
        ok += r[i].st == WEFT_OK && r[i].iters == ITERS;
    }
    int good = wrong == 0 && (ok == nranks || refused == nranks);
    printf("%s: %s\n", good ? "ok" : "FAIL",
           wrong ? "a call returned WEFT_OK with wrong elements"
           : ok == nranks ? "every all-to-all right"
           : refused == nranks ? "init refused on every rank" : "some ranks failed");
    return !good;
}
