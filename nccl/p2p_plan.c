/*
 * p2p_plan.c - a group's sends and receives as steps (p2p_plan.h).
 */
#include "p2p_plan.h"

size_t p2p_plan(int rank, int n, const int *is_send, const int *peer, size_t ncalls,
                p2p_pair_t *out)
{
    size_t np = 0;
    for (int s = 0; s < n; s++) {
        int dst = (rank + s) % n, src = ((rank - s) % n + n) % n;
        size_t si = 0, ri = 0;
        for (;;) {
            while (si < ncalls && !(is_send[si] && peer[si] == dst))
                si++;
            while (ri < ncalls && !(!is_send[ri] && peer[ri] == src))
                ri++;
            if (si >= ncalls && ri >= ncalls)
                break;
            out[np++] = (p2p_pair_t){ si < ncalls ? (int)si : -1, ri < ncalls ? (int)ri : -1 };
            si += si < ncalls;
            ri += ri < ncalls;
        }
    }
    return np;
}
