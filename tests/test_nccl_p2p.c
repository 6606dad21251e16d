/*
 * test_nccl_p2p.c - the NCCL shim's schedule of a group's sends and receives
 * (nccl/p2p_plan.c), which needs no GPU: every rank's plan is run in lockstep by a model
 * of weft_sendrecv in which a pair completes only together with the pairs it meets: its
 * send with the receive its peer is running, its receive with its source's send (no
 * buffering at all: the strictest case). Each case must complete without a cycle, with
 * every call in exactly one pair, and as many messages received from each rank as it
 * sent (the j-th send to a peer meets the j-th receive from it: matches are in order per
 * pair of ranks). Cases:
 * gather to root 1 and scatter from root 2 on 3 ranks (nccl-tests' calls: the root's own
 * send first), all-to-all on 4 and 5 ranks with the calls in a different order on every
 * rank, a ring, two messages each way to a neighbour, and 1 rank (self only). Ends
 * "test_nccl_p2p: N passed, N failed".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p2p_plan.h"

#define MAXR 8
#define MAXC 64

static int passed, failed;

static void check(int ok, const char *what)
{
    if (ok) {
        passed++;
    } else {
        failed++;
        printf("FAIL: %s\n", what);
    }
}

typedef struct {
    int n;
    int ncalls[MAXR];
    int is_send[MAXR][MAXC], peer[MAXR][MAXC];
} job_t;

static void add(job_t *j, int r, int is_send, int peer)
{
    int k = j->ncalls[r]++;
    j->is_send[r][k] = is_send;
    j->peer[r][k] = peer;
}

/* Runs the plans in lockstep; returns 1 when every pair completed and every message
 * landed in order. */
static int run(const job_t *j, const char *name)
{
    p2p_pair_t plan[MAXR][MAXC];
    size_t np[MAXR], at[MAXR] = { 0 };
    int used[MAXR][MAXC] = { { 0 } };
    int sent[MAXR][MAXR] = { { 0 } }, got[MAXR][MAXR] = { { 0 } };  /* messages r->p */
    int ok = 1;
    char msg[160];
    for (int r = 0; r < j->n; r++) {
        np[r] = p2p_plan(r, j->n, j->is_send[r], j->peer[r], (size_t)j->ncalls[r], plan[r]);
        for (size_t k = 0; k < np[r]; k++) {
            int s = plan[r][k].send, v = plan[r][k].recv;
            if ((s < 0 && v < 0) || (s >= 0 && (!j->is_send[r][s] || used[r][s]++)) ||
                (v >= 0 && (j->is_send[r][v] || used[r][v]++)))
                ok = 0;
        }
        for (int c = 0; c < j->ncalls[r]; c++)
            ok &= used[r][c] == 1;
    }
    snprintf(msg, sizeof(msg), "%s: every call in exactly one pair, sends as sends", name);
    check(ok, msg);
    if (!ok)
        return 0;
    for (int round = 0; round < MAXR * MAXC; round++) {
        int can[MAXR] = { 0 }, any = 0, left = 0;
        for (int r = 0; r < j->n; r++) {
            if (at[r] >= np[r])
                continue;
            left = 1;
            const p2p_pair_t *p = &plan[r][at[r]];
            int c = 1;
            if (p->send >= 0) {
                int d = j->peer[r][p->send];
                c &= at[d] < np[d] && plan[d][at[d]].recv >= 0 &&
                     j->peer[d][plan[d][at[d]].recv] == r;
            }
            if (p->recv >= 0) {
                int s = j->peer[r][p->recv];
                c &= at[s] < np[s] && plan[s][at[s]].send >= 0 &&
                     j->peer[s][plan[s][at[s]].send] == r;
            }
            can[r] = c;
            any |= c;
        }
        if (!left)
            break;
        /* a pair completes only together with the pairs it meets: drop those whose
         * partner cannot complete, until nothing changes */
        for (int changed = 1; changed;) {
            changed = 0;
            any = 0;
            for (int r = 0; r < j->n; r++) {
                if (!can[r])
                    continue;
                const p2p_pair_t *p = &plan[r][at[r]];
                if ((p->send >= 0 && !can[j->peer[r][p->send]]) ||
                    (p->recv >= 0 && !can[j->peer[r][p->recv]])) {
                    can[r] = 0;
                    changed = 1;
                }
                any |= can[r];
            }
        }
        if (!any) {
            snprintf(msg, sizeof(msg), "%s: the ranks wait on each other in a cycle", name);
            check(0, msg);
            return 0;
        }
        for (int r = 0; r < j->n; r++) {
            if (!can[r])
                continue;
            const p2p_pair_t *p = &plan[r][at[r]];
            if (p->send >= 0)
                sent[r][j->peer[r][p->send]]++;
            if (p->recv >= 0)      /* its sender's pair completes in this round too */
                got[j->peer[r][p->recv]][r]++;
            at[r]++;
        }
    }
    for (int r = 0; r < j->n; r++)
        for (int p = 0; p < j->n; p++)
            ok &= sent[r][p] == got[r][p];
    snprintf(msg, sizeof(msg), "%s: completes, every message in its receive, in order", name);
    check(ok, msg);
    return ok;
}

int main(void)
{
    job_t j;
    /* gather to root 1: the root sends to itself first, then receives from everyone */
    memset(&j, 0, sizeof(j));
    j.n = 3;
    for (int r = 0; r < 3; r++)
        add(&j, r, 1, 1);
    for (int p = 0; p < 3; p++)
        add(&j, 1, 0, p);
    run(&j, "gather to root 1, 3 ranks");
    /* scatter from root 2 */
    memset(&j, 0, sizeof(j));
    j.n = 3;
    for (int p = 0; p < 3; p++)
        add(&j, 2, 1, p);
    for (int r = 0; r < 3; r++)
        add(&j, r, 0, 2);
    run(&j, "scatter from root 2, 3 ranks");
    /* all-to-all, the calls in another order on every rank */
    for (int n = 4; n <= 5; n++) {
        memset(&j, 0, sizeof(j));
        j.n = n;
        for (int r = 0; r < n; r++) {
            for (int i = 0; i < n; i++)
                add(&j, r, 1, (r * 3 + i) % n);
            for (int i = n - 1; i >= 0; i--)
                add(&j, r, 0, (i + r) % n);
        }
        char name[64];
        snprintf(name, sizeof(name), "all-to-all, %d ranks, calls permuted", n);
        run(&j, name);
    }
    /* a ring, receives listed first */
    memset(&j, 0, sizeof(j));
    j.n = 4;
    for (int r = 0; r < 4; r++) {
        add(&j, r, 0, (r + 3) % 4);
        add(&j, r, 1, (r + 1) % 4);
    }
    run(&j, "ring, 4 ranks");
    /* two messages each way between neighbours, and a one-way extra to rank 0 */
    memset(&j, 0, sizeof(j));
    j.n = 3;
    for (int r = 0; r < 3; r++) {
        add(&j, r, 1, (r + 1) % 3);
        add(&j, r, 0, (r + 2) % 3);
        add(&j, r, 1, (r + 1) % 3);
        add(&j, r, 0, (r + 2) % 3);
    }
    add(&j, 2, 1, 0);
    add(&j, 0, 0, 2);
    run(&j, "two messages each way, and one more from 2 to 0");
    /* one rank: to itself */
    memset(&j, 0, sizeof(j));
    j.n = 1;
    add(&j, 0, 0, 0);
    add(&j, 0, 1, 0);
    run(&j, "1 rank, a receive then a send to itself");
    printf("test_nccl_p2p: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
