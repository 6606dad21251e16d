/*
 * tp_tcp.c - the TCP transport, between hosts (and on one host when forced).
 *
 * One connection per peer, authenticated with WEFT_SECRET like the bootstrap, then
 * nonblocking with TCP_NODELAY and large buffers. Sends go out with one sendmsg of
 * header + payload; a partial send is remembered and resumed (the engine retries with
 * the same frame). Receives read the header and hand it to the engine, which checks it
 * and then has the payload read straight into the destination (plain receives) or
 * into a staging buffer (receives that reduce).
 *
 * Peer states (comm/fail.c) travel in the stream as COLL_STATE frames, sent between data
 * frames and consumed by recv_peek before the engine sees the next header; a peer's
 * state is therefore seen once the data it sent before has been read.
 *
 * Invariants: rank i connects to every j > i and accepts from every j < i (connect.c
 * orders the calls), so setup never waits in a circle; a closed or reset connection is
 * WEFT_ERR_PEER_LOST naming the peer.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm_int.h"
#include "auth.h"
#include "check.h"
#include "sock.h"
#include "status.h"
#include "util.h"

extern const tp_ops_t tp_tcp_ops;

/* A rank's tcp address (its data listener), 0 when it published none. The blob is the
 * sockaddr_in, copied out because the blob is unaligned. */
static int tcp_addr_of(const peer_info_t *pi, struct sockaddr_in *a)
{
    const tp_addr_t *t = &pi->addr[tp_slot(&tp_tcp_ops)];
    if (t->len != sizeof(*a))
        return 0;
    memcpy(a, t->blob, sizeof(*a));
    return a->sin_port != 0;
}

typedef struct tcp_local {
    int lfd;
    int *pending;           /* [nranks] accepted, authenticated, not yet claimed */
} tcp_local_t;

typedef struct state_frame {
    frame_hdr_t hdr;
    tp_state_t state;
} state_frame_t;

typedef struct tcp_ep {
    tp_ep_t base;
    int fd;
    size_t tx_off;          /* bytes of the current frame already sent */
    state_frame_t st_tx;    /* the state frame being sent, st_off bytes of it so far */
    size_t st_off;
    tp_state_t st_next;     /* posted while another state frame was half sent */
    int st_pending;         /* st_tx (1) or st_next too (2) waits to go out */
    tp_state_t st_rx;       /* the peer's latest */
    int broken;             /* the connection failed: only salvage reads it now */
    int closing;            /* tcp_close_start ran: this side's stream is ended */
    uint64_t close_end;     /* when tcp_close stops waiting for the peer's acks */
    int quiet;              /* in peer_state: a failure is the caller's to report */
    char st_rx_buf[sizeof(tp_state_t)];
    frame_hdr_t rx_hdr;
    size_t rx_got;          /* bytes of header + payload received */
    char *rx_buf;
    size_t rx_cap;
    size_t max_frame;
    int dead_ms;            /* WEFT_TCP_DEAD: data unacknowledged this long, the host is gone */
    int self;               /* this rank */
} tcp_ep_t;

static int tcp_can_connect(const weft_comm_t *comm, const peer_info_t *self,
                           const peer_info_t *peer)
{
    struct sockaddr_in a;
    return tcp_addr_of(peer, &a);
}

static weft_status_t tcp_local_setup(weft_comm_t *comm, tp_addr_t *self)
{
    tcp_local_t *l = calloc(1, sizeof(*l));
    int *pending = malloc((size_t)comm->nranks * sizeof(int));
    if (l == NULL || pending == NULL) {
        free(l);
        free(pending);
        return weft_error(WEFT_ERR_NO_MEMORY, "tcp: out of memory");
    }
    for (int i = 0; i < comm->nranks; i++)
        pending[i] = -1;
    l->pending = pending;
    l->lfd = -1;
    struct sockaddr_in addr;
    weft_status_t st = comm_local_addr(comm, &addr);
    if (st == WEFT_OK) {
        addr.sin_port = 0;
        st = sock_listen(&addr, comm->nranks, &l->lfd);
    }
    if (st != WEFT_OK) {
        free(pending);
        free(l);
        return st;
    }
    _Static_assert(sizeof(addr) <= TP_ADDR_BYTES, "tcp address fits the blob");
    memcpy(self->blob, &addr, sizeof(addr));
    self->len = sizeof(addr);
    tp_set_ctx(comm, &tp_tcp_ops, l);
    return WEFT_OK;
}

static weft_status_t new_ep(weft_comm_t *comm, int fd, tp_ep_t **ep_p)
{
    tcp_ep_t *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        close(fd);
        return weft_error(WEFT_ERR_NO_MEMORY, "tcp: out of memory");
    }
    e->fd = fd;
    e->self = comm->rank;
    e->max_frame = comm->cfg.buffsize;
    e->dead_ms = (int)(comm->cfg.tcp_dead_s * 1000);
    sock_tune(fd, comm->cfg.socket_buffsize);
    sock_dead_after(fd, comm->cfg.tcp_dead_s);
    weft_status_t st = sock_set_nonblock(fd);
    if (st != WEFT_OK) {
        close(fd);
        free(e);
        return st;
    }
    *ep_p = &e->base;
    return WEFT_OK;
}

static int tcp_taken(void *ctx, int who)
{
    return ((tcp_local_t *)ctx)->pending[who] >= 0;
}

/* Accepts until `peer` has connected; others that arrive first wait in pending. */
static weft_status_t accept_peer(weft_comm_t *comm, int peer, uint64_t deadline)
{
    tcp_local_t *l = tp_ctx(comm, &tp_tcp_ops);
    while (l->pending[peer] < 0) {
        int fd, who;
        RETURN_IF_ERR(connect_accept(comm, l->lfd, deadline, "tcp", tcp_taken, l, &fd, &who));
        l->pending[who] = fd;
    }
    return WEFT_OK;
}

static weft_status_t tcp_connect(weft_comm_t *comm, int peer, tp_ep_t **ep_p)
{
    tcp_local_t *l = tp_ctx(comm, &tp_tcp_ops);
    uint64_t deadline = comm_setup_deadline(comm);
    int fd, who;
    if (peer < comm->rank) {
        weft_status_t ast = accept_peer(comm, peer, deadline);
        if (ast != WEFT_OK)     /* which rank it waited for (the message names an address) */
            return weft_error_quiet(ast, "tcp: waiting for rank %d to connect: %s", peer,
                                    weft_last_error());
        fd = l->pending[peer];
        l->pending[peer] = -1;
        return new_ep(comm, fd, ep_p);
    }
    struct sockaddr_in to;
    if (!tcp_addr_of(&comm->peers[peer], &to))
        return weft_error(WEFT_ERR_INTERNAL, "tcp: rank %d published no listener", peer);
    weft_status_t st = sock_connect_watched(&to, deadline, &comm->setup_watch, &fd);
    if (st != WEFT_OK)
        return weft_error_quiet(st, "tcp: connecting to rank %d: %s", peer, weft_last_error());
    /* watched: a peer that died after its kernel took the connection never answers */
    st = auth_handshake_watched(fd, comm->has_secret ? comm->secret : NULL, AUTH_DATA,
                                comm->id, comm->rank, deadline, &comm->setup_watch, &who);
    if (st == WEFT_OK && who != peer)
        st = weft_error(WEFT_ERR_AUTH, "tcp: rank %d's address answered as rank %d", peer, who);
    else if (st != WEFT_OK)
        st = weft_error_quiet(st, "tcp: connecting to rank %d: %s", peer, weft_last_error());
    if (st != WEFT_OK) {
        close(fd);
        return st;
    }
    return new_ep(comm, fd, ep_p);
}

static void tcp_local_cleanup(weft_comm_t *comm);

/* Every rank has connected: the listener goes, so a stranger who finds the port later
 * is refused by the kernel instead of waiting in a backlog nobody reads. */
static weft_status_t tcp_post_connect(weft_comm_t *comm)
{
    tcp_local_cleanup(comm);
    return WEFT_OK;
}

static void tcp_local_cleanup(weft_comm_t *comm)
{
    tcp_local_t *l = tp_ctx(comm, &tp_tcp_ops);
    if (l == NULL)
        return;
    for (int i = 0; i < comm->nranks; i++)
        if (l->pending[i] >= 0)
            close(l->pending[i]);
    if (l->lfd >= 0)
        close(l->lfd);
    free(l->pending);
    free(l);
    tp_set_ctx(comm, &tp_tcp_ops, NULL);
}

static weft_status_t io_error(tcp_ep_t *e, const char *what)
{
    weft_status_t (*err)(weft_status_t, const char *, ...) =
        e->quiet ? weft_error_quiet : weft_error;
    e->broken = 1;
    if (errno == EPIPE || errno == ECONNRESET || errno == 0)
        return err(WEFT_ERR_PEER_LOST, "tcp: connection to rank %d %s%s", e->base.peer,
                   errno == 0 ? "closed by the peer" : "reset",
                   e->rx_got > 0 ? " in the middle of a frame (its call failed there, or "
                   "it exited: its log says why)" : "");
    if (errno == ETIMEDOUT || errno == EHOSTUNREACH || errno == ENETUNREACH ||
        errno == EHOSTDOWN)   /* its host stopped answering (WEFT_TCP_DEAD) */
        return err(WEFT_ERR_PEER_LOST, "tcp: rank %d's host stopped answering (%m): host "
                   "down or network cut", e->base.peer);
    return err(WEFT_ERR_SYSTEM, "tcp: %s rank %d: %m", what, e->base.peer);
}

/* Sends pending state frames, never splitting a data frame: WEFT_OK when none is left,
 * WEFT_IN_PROGRESS when the socket is full. Quiet: errors show up on the data path. */
static weft_status_t flush_states(tcp_ep_t *e)
{
    while (e->st_pending) {
        char *p = (char *)&e->st_tx;
        ssize_t w = send(e->fd, p + e->st_off, sizeof(e->st_tx) - e->st_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
                   ? WEFT_IN_PROGRESS : WEFT_ERR_PEER_LOST;
        e->st_off += (size_t)w;
        if (e->st_off < sizeof(e->st_tx))
            continue;
        e->st_off = 0;
        e->st_pending--;
        e->st_tx.state = e->st_next;
    }
    return WEFT_OK;
}

static void tcp_post_state(tp_ep_t *ep, const tp_state_t *s)
{
    tcp_ep_t *e = (tcp_ep_t *)ep;
    if (s->kind == TP_STATE_FAILED && e->tx_off > 0 && s->origin == e->self &&
        s->other == e->base.peer) {
        /* This rank's call failed over this very peer (waiting for it, or at odds with
         * it) with a data frame to it half sent: nothing finishes that frame now, and a
         * state cannot pass it, so the peer would wait in it until its own WEFT_TIMEOUT.
         * Ending the stream makes its read fail at once (PEER_LOST naming this rank;
         * test_fail cutframe). Not for failures relayed or about another rank: the
         * peer then learns the real cause from the others, and an end of stream here
         * would blame this rank instead. */
        shutdown(e->fd, SHUT_WR);
        return;
    }
    if (e->st_pending && e->st_off > 0) {   /* the one on the wire must finish first */
        e->st_next = *s;
        e->st_pending = 2;
    } else {
        memset(&e->st_tx.hdr, 0, sizeof(e->st_tx.hdr));
        e->st_tx.hdr.magic = FRAME_MAGIC;
        e->st_tx.hdr.version = FRAME_VERSION;
        e->st_tx.hdr.coll = COLL_STATE;
        e->st_tx.hdr.len = sizeof(tp_state_t);
        e->st_tx.state = *s;
        e->st_next = *s;
        e->st_pending = 1;
    }
    if (e->tx_off == 0)
        flush_states(e);
}

static weft_status_t tcp_send(tp_ep_t *ep, const frame_hdr_t *hdr, const void *payload)
{
    tcp_ep_t *e = (tcp_ep_t *)ep;
    size_t hl = sizeof(*hdr), total = hl + hdr->len;
    if (e->tx_off == 0 && e->st_pending) {
        weft_status_t fs = flush_states(e);
        if (fs == WEFT_IN_PROGRESS)
            return WEFT_IN_PROGRESS;
        /* the stream is broken: the state cannot go, and the data send below fails
         * with why (before 2026-11-27 every send returned IN_PROGRESS from here on, and
         * a wait on it ran to WEFT_TIMEOUT) */
        if (fs != WEFT_OK)
            e->st_pending = 0;
    }
    while (e->tx_off < total) {
        struct iovec iov[2];
        int n = 0;
        if (e->tx_off < hl)
            iov[n++] = (struct iovec){ (char *)hdr + e->tx_off, hl - e->tx_off };
        size_t poff = e->tx_off > hl ? e->tx_off - hl : 0;
        if (hdr->len > poff)
            iov[n++] = (struct iovec){ (char *)payload + poff, hdr->len - poff };
        struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };
        ssize_t w = sendmsg(e->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return WEFT_IN_PROGRESS;
            return io_error(e, "send to");
        }
        e->tx_off += (size_t)w;
    }
    e->tx_off = 0;
    if (e->st_pending)
        flush_states(e);
    return WEFT_OK;
}

/* Reads into dst up to want bytes; WEFT_OK when all arrived. */
static weft_status_t read_some(tcp_ep_t *e, char *dst, size_t want, size_t *got)
{
    while (*got < want) {
        ssize_t r = recv(e->fd, dst + *got, want - *got, MSG_DONTWAIT);
        if (r == 0) {
            errno = 0;
            return io_error(e, "recv from");
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return WEFT_IN_PROGRESS;
            return io_error(e, "recv from");
        }
        *got += (size_t)r;
    }
    return WEFT_OK;
}

/* Reads the payload of a state frame whose header is in rx_hdr; WEFT_OK once whole. */
static weft_status_t read_state(tcp_ep_t *e)
{
    size_t hl = sizeof(e->rx_hdr), pgot = e->rx_got - hl;
    if (e->rx_hdr.len != sizeof(tp_state_t) || e->rx_hdr.magic != FRAME_MAGIC)
        return weft_error(WEFT_ERR_INTERNAL, "tcp: state frame from rank %d has %u bytes",
                          e->base.peer, e->rx_hdr.len);
    weft_status_t st = read_some(e, e->st_rx_buf, sizeof(tp_state_t), &pgot);
    e->rx_got = hl + pgot;
    if (st == WEFT_OK) {
        memcpy(&e->st_rx, e->st_rx_buf, sizeof(e->st_rx));
        e->rx_got = 0;
    }
    return st;
}

/* The header first: the engine checks it before any payload byte is read. State
 * frames are taken here and never reach the engine. */
static weft_status_t tcp_recv_peek(tp_ep_t *ep, const frame_hdr_t **hdr_p,
                                   const void **payload_p)
{
    tcp_ep_t *e = (tcp_ep_t *)ep;
    size_t hl = sizeof(e->rx_hdr);
    for (;;) {
        if (e->rx_got < hl) {
            weft_status_t st = read_some(e, (char *)&e->rx_hdr, hl, &e->rx_got);
            if (st != WEFT_OK)
                return st;
        }
        if (e->rx_hdr.coll != COLL_STATE)
            break;
        weft_status_t st = read_state(e);
        if (st != WEFT_OK)
            return st;
    }
    if (e->rx_hdr.len > e->max_frame)
        return weft_error(WEFT_ERR_INTERNAL, "tcp: frame from rank %d claims %u bytes "
                          "(limit %zu)", ep->peer, e->rx_hdr.len, e->max_frame);
    *hdr_p = &e->rx_hdr;
    *payload_p = e->rx_hdr.len == 0 ? e->rx_buf : NULL;
    return WEFT_OK;
}

/* Reads the payload to dst (or to staging when dst is NULL), resuming partial reads. */
static weft_status_t tcp_recv_payload(tp_ep_t *ep, void *dst, const void **payload_p)
{
    tcp_ep_t *e = (tcp_ep_t *)ep;
    size_t hl = sizeof(e->rx_hdr);
    if (dst == NULL) {
        if (e->rx_hdr.len > e->rx_cap) {
            char *p = realloc(e->rx_buf, e->rx_hdr.len);
            if (p == NULL)
                return weft_error(WEFT_ERR_NO_MEMORY, "tcp: out of memory");
            e->rx_buf = p;
            e->rx_cap = e->rx_hdr.len;
        }
        dst = e->rx_buf;
    }
    size_t pgot = e->rx_got - hl;
    weft_status_t st = read_some(e, dst, e->rx_hdr.len, &pgot);
    e->rx_got = hl + pgot;
    if (st == WEFT_OK)
        *payload_p = dst;
    return st;
}

static void tcp_recv_release(tp_ep_t *ep)
{
    ((tcp_ep_t *)ep)->rx_got = 0;
}

/* A lost peer shows up as EOF or a reset on the socket, which recv and send report; an
 * idle connection to a host that vanished fails by its keepalive probes (sock_dead_after).
 * Here (every 20 ms of a wait on the peer): data sent that its host has not acknowledged,
 * nor anything else, for WEFT_TCP_DEAD: the host is gone, where the kernel would go on
 * retransmitting for about 15 minutes. */
static weft_status_t tcp_check_alive(tp_ep_t *ep)
{
    tcp_ep_t *e = (tcp_ep_t *)ep;
    if (e->dead_ms <= 0 || e->broken)
        return WEFT_OK;
    int ms = sock_unanswered_ms(e->fd);
    if (ms < e->dead_ms)
        return WEFT_OK;
    e->broken = 1;
    return weft_error(WEFT_ERR_PEER_LOST, "tcp: rank %d's host stopped answering: nothing "
                      "acknowledged for %d ms, data sent or, its window closed, the kernel's "
                      "probes (WEFT_TCP_DEAD): host down or network cut", e->base.peer, ms);
}

/* recv without a message: 1 once got reached want, 0 when the stream has no more. */
static int recv_quiet(tcp_ep_t *e, char *dst, size_t want, size_t *got)
{
    while (*got < want) {
        ssize_t r = recv(e->fd, dst ? dst + *got : e->st_rx_buf,
                         dst ? want - *got : WEFT_MIN(want - *got, sizeof(e->st_rx_buf)),
                         MSG_DONTWAIT);
        if (r <= 0)
            return 0;
        *got += (size_t)r;
    }
    return 1;
}

/* The connection failed, but what the peer sent before it went is still queued here:
 * read it all, keeping the state frames (a FAILED one says why the peer left) and
 * dropping data (the call that wanted it has failed). Quiet: the failure is reported. */
static void salvage(tcp_ep_t *e)
{
    size_t hl = sizeof(e->rx_hdr);
    for (;;) {
        if (e->rx_got < hl && !recv_quiet(e, (char *)&e->rx_hdr, hl, &e->rx_got))
            return;
        if (e->rx_hdr.magic != FRAME_MAGIC)
            return;
        size_t pgot = e->rx_got - hl;
        int is_state = e->rx_hdr.coll == COLL_STATE && e->rx_hdr.len == sizeof(tp_state_t);
        if (!recv_quiet(e, is_state ? e->st_rx_buf : NULL, e->rx_hdr.len, &pgot))
            return;
        if (is_state)
            memcpy(&e->st_rx, e->st_rx_buf, sizeof(e->st_rx));
        e->rx_got = 0;
    }
}

/* Reads up to the next data header (taking state frames on the way): a peer that
 * closed or reset shows up here too, without a log line (the caller judges it). *s is
 * filled even then: the last state the peer sent before its connection failed. */
static weft_status_t tcp_peer_state(tp_ep_t *ep, tp_state_t *s)
{
    tcp_ep_t *e = (tcp_ep_t *)ep;
    const frame_hdr_t *h;
    const void *payload;
    weft_status_t st = WEFT_OK;
    /* (a header read in part still holds the last frame's coll: read on until it is
     * whole, else a state frame that follows a data frame waited for the next receive) */
    if (!e->broken && (e->rx_got < sizeof(e->rx_hdr) || e->rx_hdr.coll == COLL_STATE)) {
        e->quiet = 1;   /* a peer that closed after its part is no failure (fail_probe) */
        st = tcp_recv_peek(ep, &h, &payload);
        e->quiet = 0;
    }
    if (e->broken) {
        salvage(e);
        st = WEFT_ERR_PEER_LOST;
    }
    *s = e->st_rx;
    return st < 0 ? st : WEFT_OK;
}

/* shutdown, not close: the fd stays ours until tcp_close, and any thread may call it. */
static void tcp_abort(tp_ep_t *ep)
{
    shutdown(((tcp_ep_t *)ep)->fd, SHUT_RDWR);
}

/* The child's copy of the socket, closed: the connection lives on in the parent alone,
 * so that its peers see its death (before 2026-11-27 a forked worker that outlived its
 * rank kept the connection open, and the peers waited until WEFT_TIMEOUT). */
static void tcp_fork_child(tp_ep_t *ep)
{
    tcp_ep_t *e = (tcp_ep_t *)ep;
    if (e->fd >= 0)
        close(e->fd);
    e->fd = -1;
}

/* How long a close waits for the peer to acknowledge what this rank sent (tcp_close). */
#define TCP_LINGER_NS 1000000000ull

/* Ends this side's stream (every endpoint's first: their waits in tcp_close overlap). */
static void tcp_close_start(tp_ep_t *ep)
{
    tcp_ep_t *e = (tcp_ep_t *)ep;
    if (e->closing)
        return;
    e->closing = 1;
    e->close_end = time_ns() + TCP_LINGER_NS;
    /* a state frame still pending (a FAILED one says why this rank's call failed, and
     * nothing else sends it now): one more try; one that went out in part is finished
     * in tcp_close before the stream ends (else the peer reads half a frame, then EOF) */
    if (e->tx_off == 0 && e->st_pending && !e->broken)
        flush_states(e);
    if (!(e->st_pending && e->st_off > 0))
        shutdown(e->fd, SHUT_WR);
}

static void tcp_close(tp_ep_t *ep)
{
    tcp_ep_t *e = (tcp_ep_t *)ep;
    tcp_close_start(ep);
    char sink[4096];
    while (e->st_pending && e->st_off > 0 && !e->broken && time_ns() < e->close_end &&
           flush_states(e) == WEFT_IN_PROGRESS) {
        /* reading what the peer sends meanwhile: a peer that does the same waits for
         * room here too */
        while (recv(e->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
            ;
        struct pollfd p = { .fd = e->fd, .events = POLLOUT | POLLIN };
        poll(&p, 1, 1);
    }
    shutdown(e->fd, SHUT_WR);       /* (again where close_start did: harmless) */
    /* A send completes once its bytes are in the kernel's queue, so some may not have
     * left yet. Closed, the socket still sends them, but anything the peer writes to it
     * then (the state frame a waiting call posts after 50 ms) makes the kernel reset the
     * connection and drop what is unsent: the peer lost the end of a frame and reported
     * this rank lost (test_multihost.sh send_leave). So wait, up to TCP_LINGER_NS, until
     * the peer has acknowledged every byte (SIOCOUTQ: only the FIN, which counts one,
     * may be left), reading what it sends meanwhile (unread bytes at close reset the
     * connection too); a peer that closed or reset ends the wait, and a connection known
     * broken is not waited on. */
    for (;;) {
        ssize_t r;
        while ((r = recv(e->fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0)
            ;
        int outq = 0;
        if (e->broken || r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
            ioctl(e->fd, SIOCOUTQ, &outq) != 0 || outq <= 1 || time_ns() >= e->close_end)
            break;
        struct pollfd p = { .fd = e->fd, .events = POLLIN };
        poll(&p, 1, 1);
    }
    close(e->fd);
    free(e->rx_buf);
    free(e);
}

const tp_ops_t tp_tcp_ops = {
    .name = "tcp",
    .preference = 10,               /* across hosts, or where shm cannot reach */
    .chunk = 512 * 1024,            /* fewer, larger writes (docs/PERF.md) */
    /* setup */
    .can_connect = tcp_can_connect,
    .local_setup = tcp_local_setup,
    .connect = tcp_connect,
    .post_connect = tcp_post_connect,
    .local_cleanup = tcp_local_cleanup,
    /* progress: every endpoint call makes its own */
    .progress = NULL,
    /* data */
    .send = tcp_send,
    .recv_peek = tcp_recv_peek,
    .recv_payload = tcp_recv_payload,
    .recv_release = tcp_recv_release,
    .flush = NULL,                  /* the kernel delivers what write() took */
    .check_alive = tcp_check_alive,
    /* peer states */
    .post_state = tcp_post_state,
    .peer_state = tcp_peer_state,
    .abort = tcp_abort,
    .fork_child = tcp_fork_child,
    /* one-sided: none (every op NULL), so the engine never schedules single-copy steps
     * over tcp (connect.c: cma_all) */
    /* teardown */
    .close_start = tcp_close_start,
    .close = tcp_close,
};
