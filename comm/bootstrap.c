/*
 * bootstrap.c - the rendezvous: rank 0 hosts a store the other ranks meet at.
 *
 * Rank 0 listens on the rendezvous address; every other rank connects (retrying until
 * rank 0 is up or WEFT_TIMEOUT passes), authenticates with WEFT_SECRET and says which
 * rank it is and how large it thinks the job is. The store then serves all-gathers of
 * fixed-size blobs (each rank's addresses), which is all communicator setup needs; it
 * is closed once the data connections are up.
 *
 * Invariants: rank 0 accepts exactly one connection per other rank; a connection that
 * fails authentication or names a bad or duplicate rank is logged and dropped without
 * disturbing the job. Every wait has the init deadline.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_int.h"
#include "auth.h"
#include "check.h"
#include "sock.h"
#include "status.h"
#include "util.h"

struct bootstrap {
    int rank, nranks;
    int *fds;               /* rank 0: [nranks] connections to the others; else fds[0] */
    uint64_t deadline;
};

typedef struct {
    uint32_t magic, nranks, len, pad;
} boot_msg_t;

#define BOOT_MAGIC 0x544f4f42u   /* "BOOT" */

/* Rank 0: accept until every other rank is connected. */
static weft_status_t accept_all(bootstrap_t *bs, int lfd, const char *secret)
{
    int have = 1;
    while (have < bs->nranks) {
        int fd, peer;
        RETURN_IF_ERR(sock_accept(lfd, bs->deadline, &fd));
        weft_status_t st = auth_handshake(fd, secret, AUTH_BOOTSTRAP, 0, 0, bs->deadline, &peer);
        boot_msg_t m;
        if (st == WEFT_OK)
            st = sock_recv_all(fd, &m, sizeof(m), bs->deadline);
        if (st == WEFT_OK && (m.magic != BOOT_MAGIC || m.nranks != (uint32_t)bs->nranks ||
                              peer <= 0 || peer >= bs->nranks || bs->fds[peer] >= 0)) {
            LOG_WARN(LOG_BOOT, "bootstrap: dropped a connection claiming rank %d of %u "
                     "(job has %d ranks%s)", peer, m.nranks, bs->nranks,
                     peer > 0 && peer < bs->nranks && bs->fds[peer] >= 0 ? ", duplicate" : "");
            st = WEFT_ERR_AUTH;
        }
        if (st != WEFT_OK) {
            close(fd);
            if (st == WEFT_ERR_TIMEOUT)
                return st;
            continue;       /* a stray or hostile connection: keep waiting */
        }
        bs->fds[peer] = fd;
        have++;
    }
    return WEFT_OK;
}

static weft_status_t join(bootstrap_t *bs, const struct sockaddr_in *addr, const char *secret)
{
    int fd, peer;
    RETURN_IF_ERR(sock_connect(addr, bs->deadline, &fd));
    weft_status_t st = auth_handshake(fd, secret, AUTH_BOOTSTRAP, 0, bs->rank, bs->deadline,
                                      &peer);
    boot_msg_t m = { BOOT_MAGIC, (uint32_t)bs->nranks, 0, 0 };
    if (st == WEFT_OK && peer != 0)
        st = weft_error(WEFT_ERR_AUTH, "bootstrap: rendezvous answered as rank %d", peer);
    if (st == WEFT_OK)
        st = sock_send_all(fd, &m, sizeof(m), bs->deadline);
    if (st != WEFT_OK) {
        close(fd);
        return st;
    }
    bs->fds[0] = fd;
    return WEFT_OK;
}

weft_status_t bootstrap_open(int rank, int nranks, const char *rendezvous, const char *secret,
                             double timeout_s, bootstrap_t **bs_p)
{
    struct sockaddr_in addr;
    RETURN_IF_ERR(sock_parse_addr(rendezvous, &addr));
    bootstrap_t *bs = calloc(1, sizeof(*bs));
    int *fds = malloc((size_t)nranks * sizeof(int));
    if (bs == NULL || fds == NULL) {
        free(bs);
        free(fds);
        return weft_error(WEFT_ERR_NO_MEMORY, "bootstrap: out of memory");
    }
    for (int i = 0; i < nranks; i++)
        fds[i] = -1;
    bs->rank = rank;
    bs->nranks = nranks;
    bs->fds = fds;
    bs->deadline = time_ns() + (uint64_t)(timeout_s * 1e9);
    weft_status_t st = WEFT_OK;
    if (rank == 0 && nranks > 1) {
        int lfd;
        st = sock_listen(&addr, nranks, &lfd);
        if (st == WEFT_OK) {
            st = accept_all(bs, lfd, secret);
            close(lfd);
        }
    } else if (rank != 0) {
        st = join(bs, &addr, secret);
    }
    if (st != WEFT_OK) {
        bootstrap_close(bs);
        return st;
    }
    *bs_p = bs;
    return WEFT_OK;
}

weft_status_t bootstrap_exchange(void *ctx, const void *mine, void *all, size_t len)
{
    bootstrap_t *bs = ctx;
    boot_msg_t m = { BOOT_MAGIC, (uint32_t)bs->nranks, (uint32_t)len, 0 };
    if (bs->rank != 0) {
        RETURN_IF_ERR(sock_send_all(bs->fds[0], &m, sizeof(m), bs->deadline));
        RETURN_IF_ERR(sock_send_all(bs->fds[0], mine, len, bs->deadline));
        return sock_recv_all(bs->fds[0], all, len * (size_t)bs->nranks, bs->deadline);
    }
    memcpy(all, mine, len);
    for (int r = 1; r < bs->nranks; r++) {
        boot_msg_t got;
        RETURN_IF_ERR(sock_recv_all(bs->fds[r], &got, sizeof(got), bs->deadline));
        if (got.magic != BOOT_MAGIC || got.len != len)
            return weft_error(WEFT_ERR_MISMATCH, "bootstrap: rank %d sent a %u-byte record, "
                              "expected %zu (different weft versions?)", r, got.len, len);
        RETURN_IF_ERR(sock_recv_all(bs->fds[r], (char *)all + (size_t)r * len, len,
                                    bs->deadline));
    }
    for (int r = 1; r < bs->nranks; r++)
        RETURN_IF_ERR(sock_send_all(bs->fds[r], all, len * (size_t)bs->nranks, bs->deadline));
    return WEFT_OK;
}

void bootstrap_close(bootstrap_t *bs)
{
    if (bs == NULL)
        return;
    for (int i = 0; i < bs->nranks; i++)
        if (bs->fds[i] >= 0)
            close(bs->fds[i]);
    free(bs->fds);
    free(bs);
}
