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

enum { AUTH_BOOTSTRAP = 1, AUTH_DATA = 2 };
#define AUTH_HELLO_LEN 48       /* a hello's bytes on the wire, sent first by both sides */

weft_status_t auth_handshake(int fd, const char *secret, int purpose, uint64_t comm_id,
                             int my_rank, uint64_t deadline, int *peer_rank_p);
/* The same, asking `watch` during every wait (sock.h: sock_watch_t). */
weft_status_t auth_handshake_watched(int fd, const char *secret, int purpose,
                                     uint64_t comm_id, int my_rank, uint64_t deadline,
                                     const sock_watch_t *watch, int *peer_rank_p);

#endif
