/*
 * transport.c - the registry of transports and the per-communicator slots they use.
 *
 * Adding a transport: a folder comm/<name>/ with its tp_ops_t (transport.h says what
 * each op must do), one line below, and nothing else in comm/: connect.c picks among
 * the enabled ones by preference and can_connect, the tuner reads their chunk, the
 * engine only calls their ops. A transport's slot (its index here) names its address
 * in the bootstrap exchange and its context in the communicator.
 */
#include "comm_int.h"

extern const tp_ops_t tp_shm_ops;
extern const tp_ops_t tp_tcp_ops;
#ifdef WEFT_HAVE_UCX
extern const tp_ops_t tp_ucx_ops;   /* built when pkg-config finds ucx (Makefile) */
#endif
extern const tp_ops_t tp_ib_ops;    /* verbs, through a table loaded at run time */

const tp_ops_t *const tp_registry[] = {
    &tp_shm_ops,
    &tp_tcp_ops,
#ifdef WEFT_HAVE_UCX
    &tp_ucx_ops,
#endif
    &tp_ib_ops,
    NULL,
};

_Static_assert(sizeof(tp_registry) / sizeof(tp_registry[0]) - 1 <= TP_MAX,
               "more transports than TP_MAX slots");

int tp_slot(const tp_ops_t *t)
{
    for (int i = 0; tp_registry[i]; i++)
        if (tp_registry[i] == t)
            return i;
    return -1;
}

const tp_addr_t *tp_peer_addr(const weft_comm_t *comm, const tp_ops_t *t, int peer)
{
    return &comm->peers[peer].addr[tp_slot(t)];
}

void *tp_ctx(const weft_comm_t *comm, const tp_ops_t *t)
{
    return comm->tp_ctx[tp_slot(t)];
}

void tp_set_ctx(weft_comm_t *comm, const tp_ops_t *t, void *ctx)
{
    comm->tp_ctx[tp_slot(t)] = ctx;
}
