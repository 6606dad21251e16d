/*
 * auth.h - the handshake at the start of every weft connection (bootstrap and data).
 *
 * Both sides send a hello {magic, version, purpose, comm id, rank, nonce}, then an
 * HMAC-SHA256 over (purpose, comm id, both ranks, both nonces, direction) keyed with
 * WEFT_SECRET, and check the peer's. Symmetric: neither side waits for the other
 * before writing, so the order in which two ranks call it does not matter. Without a
 * secret on both sides the MAC is skipped; a secret on only one side fails.
 *
 * On success *peer_rank_p is the peer's claimed (and, with a secret, proven) rank.
 * Errors: WEFT_ERR_AUTH (wrong secret, bad magic/version/purpose/comm id),
 * WEFT_ERR_TIMEOUT, WEFT_ERR_PEER_LOST. Failures are logged with the peer address.
 */
#ifndef WEFT_AUTH_H
#define WEFT_AUTH_H

#include <stdint.h>

#include "weft.h"
#include "sock.h"

enum { AUTH_BOOTSTRAP = 1, AUTH_DATA = 2, AUTH_RELAY = 3 };   /* RELAY: bootstrap.c's tree */
#define AUTH_HELLO_LEN 48       /* a hello's bytes on the wire, sent first by both sides */
#define AUTH_MAC_LEN 32         /* a MAC's, sent by each side once it has the other's hello */

weft_status_t auth_handshake(int fd, const char *secret, int purpose, uint64_t comm_id,
                             int my_rank, uint64_t deadline, int *peer_rank_p);
/* The same, asking `watch` during every wait (sock.h: sock_watch_t). */
weft_status_t auth_handshake_watched(int fd, const char *secret, int purpose,
                                     uint64_t comm_id, int my_rank, uint64_t deadline,
                                     const sock_watch_t *watch, int *peer_rank_p);

/* The accepting side of the same handshake in two steps that never wait, for a loop that
 * polls many connections (the rendezvous): the peer sees the same exchange. Call
 * auth_accept_hello once the peer's hello (AUTH_HELLO_LEN bytes) is queued on fd: it
 * reads and checks it, and writes this side's hello and MAC at once (80 bytes into a
 * new connection's send buffer). Then auth_accept_mac once the peer's MAC
 * (AUTH_MAC_LEN bytes) is queued: it reads and checks it and gives the peer's rank.
 * Called before the bytes are there, a read fails within a second (WEFT_ERR_TIMEOUT).
 * `a` holds the step's state (and `secret`, which must outlive it). */
typedef struct auth_accept {
    uint64_t opaque[16];
} auth_accept_t;
weft_status_t auth_accept_hello(int fd, const char *secret, int purpose, uint64_t comm_id,
                                int my_rank, auth_accept_t *a);
weft_status_t auth_accept_mac(int fd, const auth_accept_t *a, int *peer_rank_p);

#endif
