/*
 * sock.c - TCP/IPv4 socket helpers shared by the bootstrap and the tcp transport.
 *
 * Invariants: every descriptor created here is SOCK_CLOEXEC; every blocking helper
 * waits only in poll() with a timeout derived from its absolute deadline (time_ns()
 * clock, 0 = none), so a deadline is honoured whether the socket is blocking or not
 * (I/O uses MSG_DONTWAIT and never blocks inside send/recv). Sends use MSG_NOSIGNAL,
 * so a closed peer is an error code, never SIGPIPE. Outputs (*fd_p, *out) are written
 * only on success; on failure any descriptor created here is closed.
 */
#define _GNU_SOURCE   /* accept4 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "log.h"
#include "sock.h"
#include "status.h"
#include "topo.h"
#include "util.h"

#define CONNECT_BACKOFF_MIN_NS 1000000ull     /* 1 ms */
#define CONNECT_BACKOFF_MAX_NS 100000000ull   /* 100 ms */
#define WATCH_SLICE_MS 50                       /* how often a watched wait asks for news */

const char *sock_addr_str(const struct sockaddr_in *a, char *buf, size_t cap)
{
    char ip[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip)) == NULL)
        snprintf(ip, sizeof(ip), "?");
    snprintf(buf, cap, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
    return buf;
}

/* poll() timeout in ms for a deadline: -1 = none, 0 = already past (rounded up). */
static int deadline_ms(uint64_t deadline)
{
    if (deadline == 0)
        return -1;
    uint64_t now = time_ns();
    if (now >= deadline)
        return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

static int past(uint64_t deadline)
{
    return deadline != 0 && time_ns() >= deadline;
}

/* Waits for `events` on fd. Returns WEFT_OK when ready, TIMEOUT past the deadline, or
 * the watch's status when it reports one (asked every WATCH_SLICE_MS of waiting). */
static weft_status_t wait_fd(int fd, short events, uint64_t deadline, const char *what,
                             const sock_watch_t *w)
{
    for (;;) {
        struct pollfd p = { .fd = fd, .events = events };
        int ms = deadline_ms(deadline);
        if (w && w->fn && (ms < 0 || ms > WATCH_SLICE_MS))
            ms = WATCH_SLICE_MS;
        int r = poll(&p, 1, ms);
        if (r > 0)
            return WEFT_OK;
        if (r < 0 && errno != EINTR)
            return weft_error(WEFT_ERR_SYSTEM, "%s: poll: %m", what);
        if (past(deadline))
            return WEFT_ERR_TIMEOUT;   /* unlogged: the caller words the message */
        if (w && w->fn)
            RETURN_IF_ERR(w->fn(w->ctx));
    }
}

/* The peer of fd as "ip:port", or "unknown peer". */
static const char *peer_str(int fd, char *buf, size_t cap)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    if (getpeername(fd, (struct sockaddr *)&a, &len) != 0 || a.sin_family != AF_INET) {
        snprintf(buf, cap, "unknown peer");
        return buf;
    }
    return sock_addr_str(&a, buf, cap);
}

/* ---- address parsing -------------------------------------------------------- */

static weft_status_t parse_port(const char *s, const char *hostport, uint16_t *port_p)
{
    char *end;
    if (*s == '\0' || strspn(s, "0123456789") != strlen(s))
        return weft_error(WEFT_ERR_INVALID_ARG, "address '%s': port is not a number",
                          hostport);
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || v > 65535)
        return weft_error(WEFT_ERR_INVALID_ARG, "address '%s': port out of range 0-65535",
                          hostport);
    *port_p = (uint16_t)v;
    return WEFT_OK;
}

/* Whether getaddrinfo's rc may turn into an answer later: a name not in DNS yet (a job
 * whose rank 0 gets its service name as it starts, as on Kubernetes) or a resolver that
 * did not answer in time. */
static int resolve_later(int rc)
{
#ifdef EAI_NODATA
    if (rc == EAI_NODATA)
        return 1;
#endif
    return rc == EAI_NONAME || rc == EAI_AGAIN;
}

/* deadline 0: one try; else names that may resolve later are tried again (from 50 ms,
 * doubling, to 1 s apart) until the deadline, with a warning at the first miss. */
static weft_status_t resolve_host(const char *host, const char *hostport, uint64_t deadline,
                                  struct in_addr *out)
{
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
    struct addrinfo *res = NULL;
    uint64_t t0 = time_ns(), nap = 50000000ull;
    int rc;
    uint64_t now;
    while ((rc = getaddrinfo(host, NULL, &hints, &res)) != 0 && resolve_later(rc) &&
           deadline != 0 && (now = time_ns()) < deadline) {
        if (nap == 50000000ull)
            LOG_WARN(LOG_BOOT, "address '%s': cannot resolve '%s' yet (%s): trying again "
                     "until WEFT_TIMEOUT", hostport, host, gai_strerror(rc));
        uint64_t d = WEFT_MIN(nap, deadline - now);   /* a last try at the deadline */
        struct timespec ts = { (time_t)(d / 1000000000ull), (long)(d % 1000000000ull) };
        nanosleep(&ts, NULL);
        nap = WEFT_MIN(nap * 2, 1000000000ull);
    }
    if (rc != 0) {
        weft_status_t code = (rc == EAI_NONAME || rc == EAI_FAIL) ? WEFT_ERR_INVALID_ARG
                                                                  : WEFT_ERR_SYSTEM;
        if (deadline != 0 && resolve_later(rc))
            code = WEFT_ERR_TIMEOUT;
        return weft_error(code, "address '%s': cannot resolve '%s': %s%s", hostport, host,
                          rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc),
                          code == WEFT_ERR_TIMEOUT ? " (tried until WEFT_TIMEOUT)" : "");
    }
    if (time_ns() - t0 > 100000000ull)
        LOG_INFO(LOG_BOOT, "address '%s': '%s' resolved after %.1f s", hostport, host,
                 (double)(time_ns() - t0) / 1e9);
    *out = ((const struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return WEFT_OK;
}

weft_status_t sock_parse_addr(const char *hostport, struct sockaddr_in *out)
{
    return sock_resolve_addr(hostport, 0, out);
}

weft_status_t sock_resolve_addr(const char *hostport, uint64_t deadline, struct sockaddr_in *out)
{
    char host[256];
    if (hostport == NULL || *hostport == '\0')
        return weft_error(WEFT_ERR_INVALID_ARG, "empty address (expected host:port)");
    const char *colon = strrchr(hostport, ':');
    if (colon == NULL || colon == hostport)
        return weft_error(WEFT_ERR_INVALID_ARG, "address '%s': expected host:port",
                          hostport);
    size_t hlen = (size_t)(colon - hostport);
    if (hlen >= sizeof(host))
        return weft_error(WEFT_ERR_INVALID_ARG, "address '%.64s...': host name too long",
                          hostport);
    memcpy(host, hostport, hlen);
    host[hlen] = '\0';
    if (host[0] == '[' || strchr(host, ':') != NULL)
        return weft_error(WEFT_ERR_INVALID_ARG, "address '%s': weft's sockets are IPv4 only: "
                          "name the host by an IPv4 address or a name that has one", hostport);

    uint16_t port;
    struct in_addr ip = { 0 };
    weft_status_t st = parse_port(colon + 1, hostport, &port);
    if (st != WEFT_OK)
        return st;
    if ((st = resolve_host(host, hostport, deadline, &ip)) != WEFT_OK)
        return st;
    memset(out, 0, sizeof(*out));
    out->sin_family = AF_INET;
    out->sin_addr = ip;
    out->sin_port = htons(port);
    return WEFT_OK;
}

/* What to do about errno e when it says the process is out of descriptors (""
 * otherwise): at init a rank holds about two per peer for a while (rank 0: one per
 * rank to the rendezvous and one per peer's data connection), which meets the common
 * soft limit of 1024 at about 500 ranks. */
const char *sock_fd_hint(int e)
{
    static __thread char hint[200];
    struct rlimit rl;
    if (e != EMFILE && e != ENFILE)
        return "";
    if (e == ENFILE)
        return " (the system's file table is full)";
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return " (raise the open-file limit: ulimit -n)";
    if (rl.rlim_cur >= rl.rlim_max)     /* init raised the soft limit as far as it goes */
        snprintf(hint, sizeof(hint), " (this process may open %llu files, its hard limit; a "
                 "rank needs about two per peer at init: raise the hard limit, ulimit -Hn as "
                 "root, limits.conf or the launcher's)", (unsigned long long)rl.rlim_cur);
    else
        snprintf(hint, sizeof(hint), " (this process may open %llu files; a rank needs about "
                 "two per peer at init: raise the limit, ulimit -n, up to the hard limit %llu)",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
    return hint;
}

/* The common soft limit of 1024 is there for programs that use select(), which weft
 * does not; the hard limit is the administrator's, and stays. */
void sock_fd_room(int nranks)
{
    struct rlimit rl;
    if (nranks < 2 || getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t open_now = 0, need;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *de; d && (de = readdir(d)) != NULL;)
        open_now += de->d_name[0] != '.';
    if (d)
        closedir(d);
    need = open_now + 2 * (rlim_t)nranks + 64;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    if (rl.rlim_cur <= was || setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    LOG_INFO(LOG_INIT, "raised the open-file limit from %llu to %llu for %d ranks (the "
             "hard limit is %llu)", (unsigned long long)was, (unsigned long long)rl.rlim_cur,
             nranks, rl.rlim_max == RLIM_INFINITY ? ~0ull : (unsigned long long)rl.rlim_max);
}

/* ---- listen / accept -------------------------------------------------------- */

weft_status_t sock_listen(struct sockaddr_in *addr, int backlog, int *fd_p)
{
    char as[64];
    sock_addr_str(addr, as, sizeof(as));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return weft_error(WEFT_ERR_SYSTEM, "listen %s: socket: %m%s", as, sock_fd_hint(errno));
    int one = 1;
    struct sockaddr_in bound;
    socklen_t len = sizeof(bound);
    const char *step;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0)
        step = "setsockopt(SO_REUSEADDR)";
    else if (bind(fd, (const struct sockaddr *)addr, sizeof(*addr)) != 0)
        step = "bind";
    else if (listen(fd, backlog > 0 ? backlog : SOMAXCONN) != 0)
        step = "listen";
    else if (getsockname(fd, (struct sockaddr *)&bound, &len) != 0)
        step = "getsockname";
    else {
        *addr = bound;
        *fd_p = fd;
        return WEFT_OK;
    }
    int err = errno;
    close(fd);
    errno = err;
    return weft_error(WEFT_ERR_SYSTEM, "listen %s: %s: %m", as, step);
}

weft_status_t sock_accept_watched(int lfd, uint64_t deadline, const sock_watch_t *w, int *fd_p)
{
    for (;;) {
        weft_status_t st = wait_fd(lfd, POLLIN, deadline, "accept", w);
        if (st == WEFT_ERR_TIMEOUT)
            return weft_error(WEFT_ERR_TIMEOUT, "accept: no connection before the deadline");
        if (st != WEFT_OK)
            return st;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            *fd_p = fd;
            return WEFT_OK;
        }
        /* the connection may have gone away between poll and accept: wait again */
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK ||
            errno == ECONNABORTED || errno == EPROTO)
            continue;
        return weft_error(WEFT_ERR_SYSTEM, "accept: %m%s", sock_fd_hint(errno));
    }
}

/* ---- connect ---------------------------------------------------------------- */

static int connect_retryable(int err)
{
    return err == ECONNREFUSED || err == ENETUNREACH || err == ETIMEDOUT ||
           err == EHOSTUNREACH || err == ECONNRESET || err == EAGAIN;
}

/* Linux may connect a socket to itself (TCP simultaneous open) when the target is a
 * free local port in the ephemeral range; such a connection is not a listener. */
static int is_self_connect(int fd)
{
    struct sockaddr_in l, p;
    socklen_t ll = sizeof(l), pl = sizeof(p);
    if (getsockname(fd, (struct sockaddr *)&l, &ll) != 0 ||
        getpeername(fd, (struct sockaddr *)&p, &pl) != 0)
        return 0;
    return l.sin_port == p.sin_port && l.sin_addr.s_addr == p.sin_addr.s_addr;
}

/* One nonblocking connect attempt bounded by the deadline. Returns 0 with a connected
 * (blocking) fd in *fd_p, or an errno value (ETIME past the deadline; fd closed). */
static int connect_once(const struct sockaddr_in *addr, uint64_t deadline,
                        const sock_watch_t *w, weft_status_t *wst, int *fd_p)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    int err = 0;
    if (connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) != 0) {
        err = errno;
        if (err == EINPROGRESS || err == EINTR) {
            weft_status_t st = wait_fd(fd, POLLOUT, deadline, "connect", w);
            socklen_t len = sizeof(err);
            if (st == WEFT_ERR_TIMEOUT)
                err = ETIME;
            else if (st != WEFT_OK)
                err = EIO, *wst = st;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                err = errno;
        }
    }
    if (err == 0 && is_self_connect(fd))
        err = ECONNREFUSED;
    if (err == 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        err = errno;
    if (err != 0) {
        close(fd);
        return err;
    }
    *fd_p = fd;
    return 0;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ull),
                           .tv_nsec = (long)(ns % 1000000000ull) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

weft_status_t sock_connect_watched(const struct sockaddr_in *addr, uint64_t deadline,
                                   const sock_watch_t *w, int *fd_p)
{
    char as[64];
    sock_addr_str(addr, as, sizeof(as));
    uint64_t backoff = CONNECT_BACKOFF_MIN_NS;
    for (;;) {
        weft_status_t wst = WEFT_OK;
        int err = connect_once(addr, deadline, w, &wst, fd_p);
        if (err == 0)
            return WEFT_OK;
        if (wst != WEFT_OK)
            return wst;            /* the watch's news, or poll failing (logged) */
        if (err == ETIME)
            return weft_error(WEFT_ERR_TIMEOUT, "connect %s: no answer before the deadline",
                              as);
        if (!connect_retryable(err)) {
            errno = err;
            return weft_error(WEFT_ERR_SYSTEM, "connect %s: %m%s", as, sock_fd_hint(err));
        }
        uint64_t now = time_ns();
        if (deadline != 0 && now >= deadline) {
            errno = err;
            return weft_error(WEFT_ERR_TIMEOUT, "connect %s: gave up at the deadline "
                              "(last error: %m)", as);
        }
        uint64_t nap = backoff;
        if (deadline != 0 && deadline - now < nap)
            nap = deadline - now;
        sleep_ns(nap);
        backoff = WEFT_MIN(backoff * 2, CONNECT_BACKOFF_MAX_NS);
        if (w && w->fn)
            RETURN_IF_ERR(w->fn(w->ctx));
    }
}

weft_status_t sock_connect(const struct sockaddr_in *addr, uint64_t deadline, int *fd_p)
{
    return sock_connect_watched(addr, deadline, NULL, fd_p);
}

weft_status_t sock_accept(int lfd, uint64_t deadline, int *fd_p)
{
    return sock_accept_watched(lfd, deadline, NULL, fd_p);
}

/* ---- whole-buffer I/O --------------------------------------------------------- */

static int peer_gone(int err)
{
    return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ETIMEDOUT ||
           err == ECONNABORTED || err == EHOSTUNREACH;
}

/* Error for a failed send/recv; errno holds the cause. */
static weft_status_t io_error(int fd, const char *what, size_t done, size_t n)
{
    int err = errno;
    char ps[64];
    peer_str(fd, ps, sizeof(ps));
    errno = err;
    if (peer_gone(err))
        return weft_error(WEFT_ERR_PEER_LOST, "%s %s: connection lost after %zu of %zu "
                          "bytes: %m", what, ps, done, n);
    return weft_error(WEFT_ERR_SYSTEM, "%s %s: %m", what, ps);
}

static weft_status_t io_timeout(int fd, const char *what, size_t done, size_t n)
{
    char ps[64];
    return weft_error(WEFT_ERR_TIMEOUT, "%s %s: deadline passed after %zu of %zu bytes",
                      what, peer_str(fd, ps, sizeof(ps)), done, n);
}

weft_status_t sock_send_all_watched(int fd, const void *buf, size_t n, uint64_t deadline,
                                    const sock_watch_t *w)
{
    const char *p = (const char *)buf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r >= 0) {
            done += (size_t)r;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return io_error(fd, "send to", done, n);
        weft_status_t st = wait_fd(fd, POLLOUT, deadline, "send", w);
        if (st == WEFT_ERR_TIMEOUT)
            return io_timeout(fd, "send to", done, n);
        if (st != WEFT_OK)
            return st;
    }
    return WEFT_OK;
}

weft_status_t sock_recv_all_watched(int fd, void *buf, size_t n, uint64_t deadline,
                                    const sock_watch_t *w)
{
    char *p = (char *)buf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = recv(fd, p + done, n - done, MSG_DONTWAIT);
        if (r > 0) {
            done += (size_t)r;
            continue;
        }
        if (r == 0) {
            char ps[64];
            return weft_error(WEFT_ERR_PEER_LOST, "recv from %s: connection closed by peer "
                              "after %zu of %zu bytes", peer_str(fd, ps, sizeof(ps)),
                              done, n);
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return io_error(fd, "recv from", done, n);
        weft_status_t st = wait_fd(fd, POLLIN, deadline, "recv", w);
        if (st == WEFT_ERR_TIMEOUT)
            return io_timeout(fd, "recv from", done, n);
        if (st != WEFT_OK)
            return st;
    }
    return WEFT_OK;
}

weft_status_t sock_send_all(int fd, const void *buf, size_t n, uint64_t deadline)
{
    return sock_send_all_watched(fd, buf, n, deadline, NULL);
}

weft_status_t sock_recv_all(int fd, void *buf, size_t n, uint64_t deadline)
{
    return sock_recv_all_watched(fd, buf, n, deadline, NULL);
}

/* ---- local address ------------------------------------------------------------ */

/* Appends the IPv4 interface names of `ifs` to buf as "lo, eth0". */
static void list_ifaces(const struct ifaddrs *ifs, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const struct ifaddrs *i = ifs; i != NULL && used < cap; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
            continue;
        int w = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", i->ifa_name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    if (buf[0] == '\0')
        snprintf(buf, cap, "none");
}

static void fill_addr(const struct ifaddrs *i, struct sockaddr_in *out)
{
    memset(out, 0, sizeof(*out));
    out->sin_family = AF_INET;
    out->sin_addr = ((const struct sockaddr_in *)i->ifa_addr)->sin_addr;
}

static int is_ipv4(const struct ifaddrs *i)
{
    return i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET &&
           (i->ifa_flags & IFF_UP);   /* an interface that is down reaches nobody */
}

/* The interface WEFT_SOCKET_IFNAME picks, in NCCL's syntax (topo.h's device filter):
 * a list ("ib0,eth", each a prefix, "=" for whole names) picks the first interface that
 * matches the first entry that matches any, so the list is an order of preference; an
 * exclusion ("^docker,lo") keeps the interface that reaches the rendezvous `to` when it
 * is allowed, else the first allowed one that is not a loopback, else an allowed
 * loopback. */
static weft_status_t route_addr(const struct sockaddr_in *to, struct sockaddr_in *out);

static weft_status_t iface_addr(const char *spec, const struct sockaddr_in *to,
                                struct sockaddr_in *out)
{
    topo_nic_filter_t f;
    RETURN_IF_ERR(topo_nic_filter_parse(spec, "WEFT_SOCKET_IFNAME", &f));
    if (f.n == 0 && to != NULL)     /* only empty entries (","): as if unset */
        return route_addr(to, out);
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0)
        return weft_error(WEFT_ERR_SYSTEM, "getifaddrs: %m");
    const struct ifaddrs *pick = NULL;
    if (!f.exclude) {
        for (int e = 0; e < f.n && pick == NULL; e++) {
            topo_nic_filter_t one = f;
            one.n = 1;
            one.e[0] = f.e[e];
            for (const struct ifaddrs *i = ifs; i != NULL && pick == NULL; i = i->ifa_next)
                if (is_ipv4(i) && topo_nic_filter_allows(&one, i->ifa_name, NULL))
                    pick = i;
        }
    } else {
        struct sockaddr_in r;
        if (to != NULL && route_addr(to, &r) == WEFT_OK)
            for (const struct ifaddrs *i = ifs; i != NULL && pick == NULL; i = i->ifa_next)
                if (is_ipv4(i) && topo_nic_filter_allows(&f, i->ifa_name, NULL) &&
                    ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
                        r.sin_addr.s_addr)
                    pick = i;
        for (int lo = 0; lo < 2 && pick == NULL; lo++)
            for (const struct ifaddrs *i = ifs; i != NULL && pick == NULL; i = i->ifa_next)
                if (is_ipv4(i) && topo_nic_filter_allows(&f, i->ifa_name, NULL) &&
                    !(i->ifa_flags & IFF_LOOPBACK) == !lo)
                    pick = i;
    }
    if (pick != NULL) {
        fill_addr(pick, out);
        freeifaddrs(ifs);
        return WEFT_OK;
    }
    char names[512];
    list_ifaces(ifs, names, sizeof(names));
    freeifaddrs(ifs);
    return weft_error(WEFT_ERR_INVALID_ARG, "no IPv4 interface matches WEFT_SOCKET_IFNAME="
                      "'%s' (available: %s)", spec, names);
}

/* Connecting a UDP socket sends nothing but makes the kernel pick a route and source. */
static weft_status_t route_addr(const struct sockaddr_in *to, struct sockaddr_in *out)
{
    char as[64];
    sock_addr_str(to, as, sizeof(as));
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return weft_error(WEFT_ERR_SYSTEM, "local address for %s: socket: %m%s", as,
                          sock_fd_hint(errno));
    struct sockaddr_in dst = *to, me;
    socklen_t len = sizeof(me);
    if (dst.sin_port == 0)
        dst.sin_port = htons(9);   /* any nonzero port; nothing is sent */
    if (connect(fd, (const struct sockaddr *)&dst, sizeof(dst)) != 0 ||
        getsockname(fd, (struct sockaddr *)&me, &len) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return weft_error(WEFT_ERR_SYSTEM, "local address for %s: no route: %m", as);
    }
    close(fd);
    me.sin_port = 0;
    *out = me;
    return WEFT_OK;
}

weft_status_t sock_local_addr(const struct sockaddr_in *to, const char *ifname,
                              struct sockaddr_in *out)
{
    if (ifname != NULL && *ifname != '\0')
        return iface_addr(ifname, to, out);
    if (to == NULL)
        return weft_error(WEFT_ERR_INVALID_ARG, "sock_local_addr: no peer and no interface");
    return route_addr(to, out);
}

/* ---- options ------------------------------------------------------------------ */

int sock_named_loopback(const char *hostport, const struct sockaddr_in *resolved)
{
    char host[256];
    const char *colon = hostport ? strrchr(hostport, ':') : NULL;
    struct in_addr lit;
    if (colon == NULL || (size_t)(colon - hostport) >= sizeof(host) ||
        (ntohl(resolved->sin_addr.s_addr) >> 24) != 127)
        return 0;
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    return inet_pton(AF_INET, host, &lit) != 1 && strncasecmp(host, "localhost", 9) != 0;
}

weft_status_t sock_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)
        return weft_error(WEFT_ERR_SYSTEM, "fcntl(O_NONBLOCK) on fd %d: %m", fd);
    return WEFT_OK;
}

/* Failures are ignored: these are performance hints, and a socket without them works.
 * Buffer sizes are set only when asked: a set SO_RCVBUF turns off the kernel's receive
 * autotuning, which on a veth measured 0.9-1.0 GB/s at 256 MB against 1.4-1.5 autotuned
 * (docs/PERF.md), and a fixed size would also cap a cluster tuned for a fatter pipe. */
void sock_tune(int fd, size_t buf_bytes)
{
    int one = 1, bytes = (int)buf_bytes;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (buf_bytes == 0)
        return;
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

void sock_dead_after(int fd, long dead_s)
{
    if (dead_s <= 0)
        return;
    /* half the time idle, then up to 127 probes (the kernel's most) spread over the rest */
    int on = 1, idle = (int)(dead_s / 2 > 0 ? dead_s / 2 : 1);
    long rest = dead_s - idle > 0 ? dead_s - idle : 1;
    int cnt = (int)(rest < 127 ? rest : 127), intvl = (int)((rest + cnt - 1) / cnt);
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

int sock_unanswered_ms(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return 0;
    /* data unacknowledged; or, the peer's window closed (everything sent acknowledged,
     * the rest waiting here), three of the kernel's zero-window probes in a row
     * unanswered: a live host answers each, which clears the count (three, not two: one
     * lost probe or answer must not make a busy peer lost), and each goes only once the
     * one before went unanswered for its backed-off timeout (before 2026-11-28 a host
     * that died while its rank was not reading was found only at WEFT_TIMEOUT) */
    if (ti.tcpi_unacked == 0 && ti.tcpi_probes < 3)
        return 0;
    return (int)(ti.tcpi_last_ack_recv > INT32_MAX ? INT32_MAX : ti.tcpi_last_ack_recv);
}

void sock_fixed_ports(int *lo_p, int *span_p)
{
    int lo = 0, hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 0;
        fclose(f);
    }
    *lo_p = 20000;
    *span_p = 40000;
    if (lo > 21000 && lo <= 65536) {
        *span_p = lo - 20000;
    } else if (lo >= 1024 && hi >= lo && hi <= 65535 &&
               (lo - 1024 >= 1000 || 65535 - hi >= 1000)) {
        /* a range from 21000 down (20000-59999 lay in it): the ports below it from 1024,
         * else those above its end, whichever are more */
        *lo_p = lo - 1024 >= 65535 - hi ? 1024 : hi + 1;
        *span_p = lo - 1024 >= 65535 - hi ? lo - 1024 : 65535 - hi;
    }
}

/* 1: 127.0.0.1:port (0: any) can be bound now; *got is the port bound */
static int loopback_free(int port, int *got)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok = 0;
    if (fd < 0)
        return 0;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
        *got = ntohs(sa.sin_port);
        ok = 1;
    }
    close(fd);
    return ok;
}

int sock_pick_loopback_port(void)
{
    int lo, span, got = -1;
    uint64_t seed = 0;
    sock_fixed_ports(&lo, &span);
    if (random_bytes(&seed, sizeof(seed)) != 0)
        seed = time_ns() ^ ((uint64_t)getpid() << 32);
    for (int i = 0; i < 64; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        if (loopback_free(lo + (int)((seed >> 33) % (uint64_t)span), &got))
            return got;
    }
    return loopback_free(0, &got) ? got : -1;
}
