/*
 * sock.h - socket helpers shared by the bootstrap and the tcp transport.
 *
 * Every blocking helper takes an absolute deadline (time_ns() clock, 0 = none) and
 * returns WEFT_ERR_TIMEOUT past it; WEFT_ERR_PEER_LOST when the peer closed or reset;
 * WEFT_ERR_SYSTEM (logged with %m) on other failures. Descriptors are CLOEXEC.
 */
#ifndef WEFT_SOCK_H
#define WEFT_SOCK_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#include "weft.h"

/* "host:port" -> address (IPv4; host may be a name or dotted quad). */
weft_status_t sock_parse_addr(const char *hostport, struct sockaddr_in *out);
/* Same, but a host name that does not resolve yet (not in DNS yet, the resolver late) is
 * tried again until deadline (time_ns(); 0: once), saying so in a warning; then
 * WEFT_ERR_TIMEOUT. A malformed address fails at once. */
weft_status_t sock_resolve_addr(const char *hostport, uint64_t deadline, struct sockaddr_in *out);
/* Listens on addr (port 0 = any free port); *addr gets the bound address. */
weft_status_t sock_listen(struct sockaddr_in *addr, int backlog, int *fd_p);
/* Connects, retrying refused/unreachable until the deadline (the listener may not be up yet). */
weft_status_t sock_connect(const struct sockaddr_in *addr, uint64_t deadline, int *fd_p);
/* Accepts one connection before the deadline. */
weft_status_t sock_accept(int lfd, uint64_t deadline, int *fd_p);

/* Whole-buffer blocking I/O on a (blocking or nonblocking) socket. */
weft_status_t sock_send_all(int fd, const void *buf, size_t n, uint64_t deadline);
weft_status_t sock_recv_all(int fd, void *buf, size_t n, uint64_t deadline);
/* The waits above, asking w->fn every 50 ms of waiting whether to go on (w NULL or
 * w->fn NULL: never): a status other than WEFT_OK ends the wait with that status. The
 * tcp transport's setup watches the bootstrap this way, so that a rank lost elsewhere
 * ends every rank's wait for a connection. */
typedef struct sock_watch {
    weft_status_t (*fn)(void *ctx);
    void *ctx;
} sock_watch_t;
weft_status_t sock_connect_watched(const struct sockaddr_in *addr, uint64_t deadline,
                                   const sock_watch_t *w, int *fd_p);
weft_status_t sock_accept_watched(int lfd, uint64_t deadline, const sock_watch_t *w, int *fd_p);
weft_status_t sock_send_all_watched(int fd, const void *buf, size_t n, uint64_t deadline,
                                    const sock_watch_t *w);
weft_status_t sock_recv_all_watched(int fd, void *buf, size_t n, uint64_t deadline,
                                    const sock_watch_t *w);
/* The local address this host uses to reach `to` (a UDP connect trick, no traffic),
 * or, when ifname is non-empty, that of the interface it picks in NCCL's syntax
 * ("eth0,ib" in order of preference, each a prefix; "=eth0" whole names; "^docker,lo"
 * anything else, the one that reaches `to` first). Bad syntax or no match:
 * WEFT_ERR_INVALID_ARG naming the interfaces there are. */
weft_status_t sock_local_addr(const struct sockaddr_in *to, const char *ifname,
                              struct sockaddr_in *out);
/* 1 when hostport names its host (not a dotted quad, not "localhost...") and that name
 * resolved to a loopback address (*resolved): Debian and Ubuntu map a host's own name to
 * 127.0.1.1 in /etc/hosts, while the other hosts resolve it to an address they reach. */
int sock_named_loopback(const char *hostport, const struct sockaddr_in *resolved);
weft_status_t sock_set_nonblock(int fd);
void sock_tune(int fd, size_t buf_bytes);   /* TCP_NODELAY; buffers if buf_bytes != 0 */
/* An idle connection fails (ETIMEDOUT) after about dead_s seconds without an answer from
 * the peer's host: keepalive probes (half the time idle, then probes over the rest).
 * 0: the kernel's defaults. (Not TCP_USER_TIMEOUT: since Linux 5.11 it also ends a
 * connection whose peer, alive, keeps its window closed that long, a rank busy outside
 * weft; sock_unanswered_ms covers data in flight instead.) */
void sock_dead_after(int fd, long dead_s);
/* Milliseconds since the peer's host last acknowledged anything, where data sent is
 * still unacknowledged, or where its window is closed and three zero-window probes in a
 * row went unanswered (TCP_INFO); 0 otherwise. A closed window that the peer's kernel
 * answers is not unanswered. */
int sock_unanswered_ms(int fd);
/* "1.2.3.4:5678" into buf. */
const char *sock_addr_str(const struct sockaddr_in *a, char *buf, size_t cap);
/* For a failure with errno e: what to do when it says the process is out of file
 * descriptors (the limit, and that init needs about two per peer), else "". */
const char *sock_fd_hint(int e);
/* Raises this process's soft open-file limit, up to its hard limit, so that it has room
 * for a communicator of nranks (about two descriptors per peer at init, beyond those
 * open now); never lowers it. Logged at INFO when raised. */
void sock_fd_room(int nranks);

/* Ports a rendezvous can be given ahead of time: [*lo, *lo + *span) = [20000, E), E the
 * start of the kernel's ephemeral range (ip_local_port_range, 32768 by default), from
 * which bind(0) and outgoing connections take their ports, so none of those holds one
 * (one that did made rank 0's listen fail, "Address already in use"). Where that range
 * starts at 21000 or below: [1024, E) or the ports above its end, whichever are more;
 * [20000, 60000) where both are under 1000 ports or the range cannot be read. */
void sock_fixed_ports(int *lo, int *span);
/* A port in that range that 127.0.0.1 can bind now (random tries; bind(0)'s choice if
 * none can), or -1. The caller's rank 0 binds it later: between the two only another
 * such pick could take it, not the kernel. */
int sock_pick_loopback_port(void);

#endif
