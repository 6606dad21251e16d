/*
 * auth.c - the symmetric handshake at the start of every weft connection.
 *
 * Each side writes a fixed 48-byte hello, reads the peer's, checks it, then writes a
 * 32-byte MAC and reads and checks the peer's. Neither side waits before writing, so
 * two ranks may call this in either order (both messages fit in any socket buffer).
 * The rendezvous, which polls many connections, runs the accepting side in two steps
 * that read only what is already queued (auth_accept_hello, auth_accept_mac): it reads
 * the peer's hello before writing its own, and its MAC with it (or, refusing the peer's
 * hello, its own hello alone, so that the peer refuses for the same reason); the peer
 * cannot tell.
 *
 * Wire (little-endian, no padding):
 *   hello  0 magic "WEFTAUTH" | 8 u32 version | 12 u32 purpose | 16 u32 flags |
 *          20 u32 rank | 24 u64 comm id | 32 nonce[16]                      = 48 bytes
 *   mac    HMAC-SHA256(secret, "weft-auth" | u32 purpose | u64 comm id |
 *          u32 sender rank | u32 receiver rank | sender nonce | receiver nonce)
 *          or 32 zero bytes with AUTH_FLAG_NO_SECRET                        = 32 bytes
 *
 * Invariants: nothing received is used before it is validated, and never more than
 * the fixed sizes is read, so a hostile or confused peer cannot make us allocate,
 * index or wait without bound. Binding both ranks, both nonces and the direction
 * (sender before receiver) into the MAC means a MAC cannot be replayed on another
 * connection or reflected back to its author; a peer echoing our own nonce is
 * refused outright. *peer_rank_p is written only on success.
 */
#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "check.h"
#include "hmac.h"
#include "sock.h"
#include "status.h"
#include "util.h"

#define AUTH_MAGIC "WEFTAUTH"
#define AUTH_VERSION 1u
#define AUTH_NONCE_LEN 16
#define AUTH_FLAG_NO_SECRET 0x1u
#define AUTH_KNOWN_FLAGS AUTH_FLAG_NO_SECRET
/* Far above any real world size; keeps a forged rank from reaching callers as a huge
 * index. The caller still checks the rank against its own nranks. */
#define AUTH_RANK_LIMIT (1u << 24)

typedef struct auth_hello {
    uint32_t version, purpose, flags, rank;
    uint64_t comm_id;
    uint8_t nonce[AUTH_NONCE_LEN];
} auth_hello_t;

/* Who is talking, for messages: "bootstrap connection from 1.2.3.4:5678". */
typedef struct auth_ctx {
    const char *purpose_name;
    char peer[64];
    const sock_watch_t *watch;  /* asked during every wait (sock.h), or NULL */
} auth_ctx_t;

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t get_le64(const uint8_t *p)
{
    return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

static void hello_encode(const auth_hello_t *h, uint8_t out[AUTH_HELLO_LEN])
{
    memcpy(out, AUTH_MAGIC, 8);
    put_le32(out + 8, h->version);
    put_le32(out + 12, h->purpose);
    put_le32(out + 16, h->flags);
    put_le32(out + 20, h->rank);
    put_le64(out + 24, h->comm_id);
    memcpy(out + 32, h->nonce, AUTH_NONCE_LEN);
}

/* Decodes and checks what a hello must be on its own (magic, version, flags, rank). */
static weft_status_t hello_decode(const uint8_t in[AUTH_HELLO_LEN], const auth_ctx_t *ctx,
                                  auth_hello_t *h)
{
    if (memcmp(in, AUTH_MAGIC, 8) != 0)
        return weft_error(WEFT_ERR_AUTH, "auth: refused %s connection with %s: not a weft "
                          "peer (bad magic)", ctx->purpose_name, ctx->peer);
    h->version = get_le32(in + 8);
    h->purpose = get_le32(in + 12);
    h->flags = get_le32(in + 16);
    h->rank = get_le32(in + 20);
    h->comm_id = get_le64(in + 24);
    memcpy(h->nonce, in + 32, AUTH_NONCE_LEN);
    if (h->version != AUTH_VERSION)
        return weft_error(WEFT_ERR_AUTH, "auth: refused %s connection with %s: peer speaks "
                          "handshake version %u, this rank %u", ctx->purpose_name,
                          ctx->peer, h->version, AUTH_VERSION);
    if (h->flags & ~AUTH_KNOWN_FLAGS)
        return weft_error(WEFT_ERR_AUTH, "auth: refused %s connection with %s: unknown "
                          "flags 0x%x", ctx->purpose_name, ctx->peer, h->flags);
    if (h->rank >= AUTH_RANK_LIMIT)
        return weft_error(WEFT_ERR_AUTH, "auth: refused %s connection with %s: peer claims "
                          "impossible rank %u", ctx->purpose_name, ctx->peer, h->rank);
    return WEFT_OK;
}

/* Checks the peer's hello against ours. Every check is symmetric, so when it fails
 * here it fails on the peer too, and both sides report the same cause. */
static weft_status_t hello_match(const auth_hello_t *me, const auth_hello_t *peer,
                                 const auth_ctx_t *ctx)
{
    int me_plain = (me->flags & AUTH_FLAG_NO_SECRET) != 0;
    int peer_plain = (peer->flags & AUTH_FLAG_NO_SECRET) != 0;
    const char *why = NULL;
    if (peer_plain && !me_plain)
        why = "peer has no WEFT_SECRET but this rank has one";
    else if (!peer_plain && me_plain)
        why = "peer has WEFT_SECRET set but this rank has none";
    else if (peer->purpose != me->purpose)
        why = "peer opened the connection for a different purpose";
    else if (peer->comm_id != me->comm_id)
        why = "peer belongs to a different communicator";
    else if (memcmp(peer->nonce, me->nonce, AUTH_NONCE_LEN) == 0)
        why = "peer echoed this rank's nonce (reflected handshake)";
    if (why == NULL)
        return WEFT_OK;
    return weft_error(WEFT_ERR_AUTH, "auth: refused %s connection with %s (peer rank %u, "
                      "comm 0x%llx; this rank's comm 0x%llx, purpose %u vs %u): %s",
                      ctx->purpose_name, ctx->peer, peer->rank,
                      (unsigned long long)peer->comm_id, (unsigned long long)me->comm_id,
                      peer->purpose, me->purpose, why);
}

/* The MAC that `sender` sends to `receiver`. */
static void mac_compute(const char *secret, const auth_hello_t *sender,
                        const auth_hello_t *receiver, uint8_t out[SHA256_LEN])
{
    static const char label[] = "weft-auth";
    uint8_t msg[sizeof(label) - 1 + 4 + 8 + 4 + 4 + 2 * AUTH_NONCE_LEN];
    uint8_t *p = msg;
    memcpy(p, label, sizeof(label) - 1);
    p += sizeof(label) - 1;
    put_le32(p, sender->purpose);
    p += 4;
    put_le64(p, sender->comm_id);
    p += 8;
    put_le32(p, sender->rank);
    p += 4;
    put_le32(p, receiver->rank);
    p += 4;
    memcpy(p, sender->nonce, AUTH_NONCE_LEN);
    p += AUTH_NONCE_LEN;
    memcpy(p, receiver->nonce, AUTH_NONCE_LEN);
    hmac_sha256(secret, strlen(secret), msg, sizeof(msg), out);
}

static weft_status_t mac_check(const char *secret, const auth_hello_t *me,
                               const auth_hello_t *peer, const uint8_t got[SHA256_LEN],
                               const auth_ctx_t *ctx)
{
    uint8_t want[SHA256_LEN] = { 0 };
    if (secret != NULL)
        mac_compute(secret, peer, me, want);
    if (digest_equal(want, got, SHA256_LEN))
        return WEFT_OK;
    return weft_error(WEFT_ERR_AUTH, "auth: refused %s connection with %s (claims rank %u): "
                      "%s", ctx->purpose_name, ctx->peer, peer->rank,
                      secret != NULL ? "wrong MAC; WEFT_SECRET differs between the ranks"
                                     : "nonzero MAC from a peer without a secret");
}

/* Adds the connection to the message of an I/O error that sock already logged. */
static weft_status_t io_context(weft_status_t st, const char *step, const auth_ctx_t *ctx)
{
    char detail[512];
    snprintf(detail, sizeof(detail), "%s", weft_last_error());
    return weft_error_quiet(st, "auth: %s handshake with %s failed while %s: %s",
                            ctx->purpose_name, ctx->peer, step, detail);
}

static void ctx_init(auth_ctx_t *ctx, int fd, int purpose)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    ctx->purpose_name = purpose == AUTH_BOOTSTRAP ? "bootstrap" :
                        purpose == AUTH_RELAY ? "bootstrap relay" : "data";
    if (getpeername(fd, (struct sockaddr *)&a, &len) == 0 && a.sin_family == AF_INET)
        sock_addr_str(&a, ctx->peer, sizeof(ctx->peer));
    else
        snprintf(ctx->peer, sizeof(ctx->peer), "unknown peer (fd %d)", fd);
}

/* Exchanges hellos: sends ours, receives and validates the peer's. */
static weft_status_t hello_exchange(int fd, const auth_hello_t *me, uint64_t deadline,
                                    const auth_ctx_t *ctx, auth_hello_t *peer)
{
    uint8_t out[AUTH_HELLO_LEN], in[AUTH_HELLO_LEN];
    hello_encode(me, out);
    weft_status_t st = sock_send_all_watched(fd, out, sizeof(out), deadline, ctx->watch);
    if (st != WEFT_OK)
        return io_context(st, "sending its hello", ctx);
    st = sock_recv_all_watched(fd, in, sizeof(in), deadline, ctx->watch);
    if (st != WEFT_OK)
        return io_context(st, "receiving the peer's hello", ctx);
    if ((st = hello_decode(in, ctx, peer)) != WEFT_OK)
        return st;
    return hello_match(me, peer, ctx);
}

/* Exchanges MACs: sends ours, receives and checks the peer's. */
static weft_status_t mac_exchange(int fd, const char *secret, const auth_hello_t *me,
                                  const auth_hello_t *peer, uint64_t deadline,
                                  const auth_ctx_t *ctx)
{
    uint8_t out[SHA256_LEN] = { 0 }, in[SHA256_LEN];
    if (secret != NULL)
        mac_compute(secret, me, peer, out);
    weft_status_t st = sock_send_all_watched(fd, out, sizeof(out), deadline, ctx->watch);
    if (st != WEFT_OK)
        return io_context(st, "sending its MAC", ctx);
    st = sock_recv_all_watched(fd, in, sizeof(in), deadline, ctx->watch);
    if (st != WEFT_OK)
        return io_context(st, "receiving the peer's MAC", ctx);
    return mac_check(secret, me, peer, in, ctx);
}

/* Checks the caller's arguments and makes this side's hello (a fresh nonce). */
static weft_status_t hello_make(int fd, const char *secret, int purpose, uint64_t comm_id,
                                int my_rank, auth_hello_t *me)
{
    if (fd < 0 || my_rank < 0 || (unsigned)my_rank >= AUTH_RANK_LIMIT ||
        (purpose != AUTH_BOOTSTRAP && purpose != AUTH_DATA && purpose != AUTH_RELAY))
        return weft_error(WEFT_ERR_INVALID_ARG, "auth_handshake: bad arguments (fd %d, "
                          "rank %d, purpose %d)", fd, my_rank, purpose);
    *me = (auth_hello_t){
        .version = AUTH_VERSION, .purpose = (uint32_t)purpose,
        .flags = secret != NULL ? 0 : AUTH_FLAG_NO_SECRET,
        .rank = (uint32_t)my_rank, .comm_id = comm_id,
    };
    if (random_bytes(me->nonce, sizeof(me->nonce)) != 0)
        return weft_error(WEFT_ERR_SYSTEM, "auth: no random bytes for a nonce (getrandom, "
                          "/dev/urandom): %m");
    return WEFT_OK;
}

/* auth_accept_t's contents */
typedef struct accept_state {
    auth_hello_t me, peer;
    const char *secret;
} accept_state_t;
_Static_assert(sizeof(accept_state_t) <= sizeof(((auth_accept_t *)0)->opaque),
               "auth_accept_t too small");
_Static_assert(SHA256_LEN == AUTH_MAC_LEN, "AUTH_MAC_LEN is a SHA-256 digest");

/* bytes the caller says are queued are read within this (a guard, not a wait) */
#define AUTH_QUEUED_NS 1000000000ull

weft_status_t auth_accept_hello(int fd, const char *secret, int purpose, uint64_t comm_id,
                                int my_rank, auth_accept_t *a)
{
    if (secret != NULL && *secret == '\0')
        secret = NULL;
    accept_state_t s = { .secret = secret };
    if (a == NULL)
        return weft_error(WEFT_ERR_INVALID_ARG, "auth_accept_hello: NULL state");
    RETURN_IF_ERR(hello_make(fd, secret, purpose, comm_id, my_rank, &s.me));
    auth_ctx_t ctx = { 0 };
    ctx_init(&ctx, fd, purpose);
    uint8_t in[AUTH_HELLO_LEN], out[AUTH_HELLO_LEN + SHA256_LEN] = { 0 };
    weft_status_t st = sock_recv_all(fd, in, sizeof(in), time_ns() + AUTH_QUEUED_NS);
    if (st != WEFT_OK)
        return io_context(st, "receiving the peer's hello", &ctx);
    hello_encode(&s.me, out);
    if ((st = hello_decode(in, &ctx, &s.peer)) != WEFT_OK ||
        (st = hello_match(&s.me, &s.peer, &ctx)) != WEFT_OK) {
        /* the peer gets this side's hello all the same (best effort), as in the
         * symmetric exchange: it then refuses for the same reason, and says so, where it
         * would otherwise see a closed connection ("peer lost") */
        (void)send(fd, out, AUTH_HELLO_LEN, MSG_DONTWAIT | MSG_NOSIGNAL);
        return st;
    }
    if (secret != NULL)
        mac_compute(secret, &s.me, &s.peer, out + AUTH_HELLO_LEN);
    st = sock_send_all(fd, out, sizeof(out), time_ns() + AUTH_QUEUED_NS);
    if (st != WEFT_OK)
        return io_context(st, "sending its hello and MAC", &ctx);
    memcpy(a->opaque, &s, sizeof(s));
    return WEFT_OK;
}

weft_status_t auth_accept_mac(int fd, const auth_accept_t *a, int *peer_rank_p)
{
    accept_state_t s;
    if (a == NULL || peer_rank_p == NULL)
        return weft_error(WEFT_ERR_INVALID_ARG, "auth_accept_mac: bad arguments");
    memcpy(&s, a->opaque, sizeof(s));
    auth_ctx_t ctx = { 0 };
    ctx_init(&ctx, fd, (int)s.me.purpose);
    uint8_t in[SHA256_LEN];
    weft_status_t st = sock_recv_all(fd, in, sizeof(in), time_ns() + AUTH_QUEUED_NS);
    if (st != WEFT_OK)
        return io_context(st, "receiving the peer's MAC", &ctx);
    RETURN_IF_ERR(mac_check(s.secret, &s.me, &s.peer, in, &ctx));
    *peer_rank_p = (int)s.peer.rank;
    return WEFT_OK;
}

weft_status_t auth_handshake(int fd, const char *secret, int purpose, uint64_t comm_id,
                             int my_rank, uint64_t deadline, int *peer_rank_p)
{
    return auth_handshake_watched(fd, secret, purpose, comm_id, my_rank, deadline, NULL,
                                  peer_rank_p);
}

weft_status_t auth_handshake_watched(int fd, const char *secret, int purpose,
                                     uint64_t comm_id, int my_rank, uint64_t deadline,
                                     const sock_watch_t *watch, int *peer_rank_p)
{
    if (peer_rank_p == NULL)
        return weft_error(WEFT_ERR_INVALID_ARG, "auth_handshake: NULL peer rank");
    if (secret != NULL && *secret == '\0')
        secret = NULL;
    auth_hello_t me;
    RETURN_IF_ERR(hello_make(fd, secret, purpose, comm_id, my_rank, &me));
    auth_ctx_t ctx;
    ctx_init(&ctx, fd, purpose);
    ctx.watch = watch;

    auth_hello_t peer;
    weft_status_t st = hello_exchange(fd, &me, deadline, &ctx, &peer);
    if (st != WEFT_OK)
        return st;
    if ((st = mac_exchange(fd, secret, &me, &peer, deadline, &ctx)) != WEFT_OK)
        return st;
    *peer_rank_p = (int)peer.rank;
    return WEFT_OK;
}
