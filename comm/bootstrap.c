/*
 * bootstrap.c - the rendezvous: rank 0 hosts a store the other ranks meet at.
 *
 * Rank 0 listens on the rendezvous address; every other rank connects (retrying until
 * rank 0 is up or WEFT_TIMEOUT passes), authenticates with WEFT_SECRET and says which
 * rank it is and how large it thinks the job is. The store then serves all-gathers of
 * fixed-size blobs (each rank's addresses), which is all communicator setup needs; it
 * is closed once the data connections are up.
 *
 * From RELAY_FROM ranks, the records of an exchange go back down a tree (NCCL's
 * bootstrap has a ring for the same reason): rank 0 sends them to its RELAY_FANOUT
 * children only, and each rank forwards them to its own (rank r's children are
 * r * F + 1 ... r * F + F), over connections the children open to a listener of their
 * parent's, whose address rank 0 handed out once (relay_setup). Rank 0 then sends
 * F * n records an exchange, not n * n (2.3 GB at 4096 ranks with shm and tcp
 * addresses). A parent forwards from a thread of its own (relay_main) while it goes on
 * with its setup. Everything else (hellos, folds, failure reports) stays between rank 0
 * and each rank, and a rank waiting for its parent watches rank 0's connection meanwhile.
 * The folds (bootstrap_reduce) send each rank one answer, not every rank's record.
 *
 * Invariants: rank 0 accepts exactly one connection per other rank; a connection that
 * fails authentication or names a bad or duplicate rank is logged and dropped without
 * disturbing the job. Every wait has the init deadline.
 */
#define _GNU_SOURCE     /* POLLRDHUP */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
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
    uint32_t job_tag;       /* bootstrap_open's: every hello must carry it */
    char dropped[160];      /* rank 0: the last rank it refused, and why ("" none) */
    int *fds;               /* rank 0: [nranks] connections to the others; else fds[0] */
    uint64_t deadline;
    int lost;               /* rank 0: a rank bootstrap_watch saw go, or -1 */
    weft_status_t news_st;  /* the failure the watch learnt (rank 0: saw; the others:
                               read rank 0's report), and its message, which every later
                               watch and exchange returns: a report is read only once */
    char news[320];
    int failed;             /* this rank could not connect (bootstrap_failed): its next
                               record says so (boot_msg_t.pad = BOOT_PAD_FAILED); or
                               listen for its relay children (BOOT_PAD_NOLISTEN) */
    uint64_t sent;          /* rank 0: bytes of answers sent (INFO at close) */
    int rounds;             /* rank 0: collections answered */
    /* the relay (0 fanout: none): parent and children by the rank's place in the tree */
    int fanout, parent;
    const char *secret;     /* WEFT_SECRET (the caller's, which outlives this), or NULL */
    struct sockaddr_in relay_addr;  /* where this rank's listener is to be (bootstrap_open) */
    int relay_addr_ok;      /* the caller gave one (it could not: a rank with children
                               says so in relay_setup) */
    struct sockaddr_in parent_addr; /* the parent's listener (a parent other than rank 0) */
    int lfd;                /* this rank's listener for its children, or -1 */
    int up_fd;              /* to the parent (parent other than rank 0), or -1 */
    int *down_fds;          /* [fanout] to the children, -1 until each connected */
    int kid0, nkids;        /* the children: kid0 .. kid0 + nkids - 1 */
    /* an answer being forwarded (relay_main's thread): its header and bytes, how far
     * each child got (down_off) */
    char *fwd;
    size_t fwd_len, *down_off;
    pthread_t fwd_thread;   /* relay_main, while fwd_on */
    int fwd_on, fwd_stop;
    struct pollfd *watch_pfd;   /* rank 0: bootstrap_watch's, [nranks - 1] */
};

/* Where rank 0 receives record r of a collection (collect), and what it does once the
 * record is there (got: NULL, nothing); what it answers rank r (answer: NULL, the
 * collection's out for every rank). */
typedef struct {
    void *(*slot)(void *arg, int r);
    void (*got)(void *arg, int r);
    void *arg;
    const void *(*answer)(void *arg, int r);
} bs_sink_t;
static weft_status_t collect(bootstrap_t *bs, const void *mine, size_t len,
                             const bs_sink_t *sink, void *out, size_t out_len, int relay);

#define RELAY_FROM 128      /* ranks from which exchanges are relayed */
#define RELAY_FANOUT 8

int bootstrap_fanout(int nranks)
{
    const char *t = getenv("WEFT_TEST_BOOT_FANOUT");     /* test hook: any size */
    if (t && *t)
        return atoi(t) >= 2 && atoi(t) <= 64 && nranks > 2 ? atoi(t) : 0;
    return nranks >= RELAY_FROM ? RELAY_FANOUT : 0;
}

/* How many ranks rank relays to (its children: rank * F + 1 ... rank * F + F). */
static int relay_kids(int rank, int nranks, int fanout)
{
    int64_t first = (int64_t)rank * fanout + 1;
    return fanout > 0 && first < nranks ? (int)WEFT_MIN((int64_t)fanout, nranks - first) : 0;
}

int bootstrap_relays(int rank, int nranks)
{
    return rank != 0 && nranks > 1 && relay_kids(rank, nranks, bootstrap_fanout(nranks)) > 0;
}

typedef struct {
    uint32_t magic, nranks, len, pad;   /* a hello: len 0, pad the job tag; a record to
                                           rank 0: pad BOOT_PAD_FAILED or 0 */
} boot_msg_t;

#define BOOT_MAGIC 0x544f4f42u   /* "BOOT" */
#define BOOT_FAIL  0x4c494146u   /* "FAIL": rank 0 tells the others init failed; len is
                                  * the rank to blame, pad the weft_status_t */
#define BOOT_DROP  0x504f5244u   /* "DROP": rank 0 refuses a rank that joined; pad is why
                                  * (DROP_*), len rank 0's size or the rank taken */
#define BOOT_NOCONN 0x4e4f434eu  /* "NCON": rank 0 tells the others that rank len could not
                                  * connect its data connections */
#define BOOT_LATE  0x4554414cu  /* "LATE": rank 0 tells the others that rank len, which
                                  * joined, sent nothing of an exchange before the deadline */
#define BOOT_NOLISTEN 0x4e53544cu /* "LTSN": rank 0 tells the others that rank len, which
                                  * relays a large job's records, cannot listen */
#define BOOT_PAD_FAILED 1u      /* a record's pad: its rank could not connect */
#define BOOT_PAD_NOLISTEN 2u    /* ... could not listen for the ranks it relays to */
enum { DROP_SIZE = 1, DROP_DUP = 2, DROP_JOB = 3 };

/* Rank 0, failing: tells every connected rank who is to blame (best effort, 0.2 s):
 * BOOT_FAIL (lost, or never arrived), BOOT_LATE (joined, then late) or BOOT_NOCONN (could
 * not connect). */
static void tell_failure(bootstrap_t *bs, uint32_t magic, int culprit, weft_status_t st)
{
    boot_msg_t m = { magic, (uint32_t)bs->nranks, (uint32_t)culprit, (uint32_t)st };
    uint64_t deadline = time_ns() + 200000000ull;
    char keep[512];
    snprintf(keep, sizeof(keep), "%s", weft_last_error());
    for (int r = 1; r < bs->nranks; r++)
        if (bs->fds[r] >= 0 && r != culprit)
            sock_send_all(bs->fds[r], &m, sizeof(m), deadline);
    weft_error_quiet(st, "%s", keep);       /* the sends may have overwritten it */
}

/* Checks a message header from rank 0 (any bytes); WEFT_OK when it announces len bytes. */
weft_status_t bootstrap_check_msg(const void *buf, int nranks, size_t len)
{
    boot_msg_t m;
    memcpy(&m, buf, sizeof(m));
    if (m.magic == BOOT_DROP) {
        if (m.pad == DROP_SIZE)
            return weft_error(WEFT_ERR_MISMATCH, "bootstrap: rank 0 refused this rank: its "
                              "job has %u ranks, this rank was started for %d (the ranks "
                              "were launched with different sizes)", m.len, nranks);
        if (m.pad == DROP_DUP)
            return weft_error(WEFT_ERR_MISMATCH, "bootstrap: rank 0 refused this rank: rank "
                              "%u had joined already (two processes were started as the same "
                              "rank)", m.len);
        return weft_error(WEFT_ERR_MISMATCH, "bootstrap: rank 0 refused this rank: it "
                          "belongs to another job (its launcher's job id differs; two jobs "
                          "met at one rendezvous port: set WEFT_ADDR)");
    }
    if (m.magic == BOOT_NOLISTEN && m.nranks == (uint32_t)nranks)
        return weft_error(WEFT_ERR_PEER_LOST, "bootstrap: init failed: rank %u cannot listen "
                          "for the ranks it relays init's records to (rank 0 says; its own "
                          "error says why)", m.len);
    if (m.magic == BOOT_NOCONN && m.nranks == (uint32_t)nranks)
        return weft_error(WEFT_ERR_PEER_LOST, "bootstrap: init failed: rank %u could not "
                          "connect its data connections (rank 0 says; its own error says "
                          "why)", m.len);
    if (m.magic == BOOT_LATE && m.nranks == (uint32_t)nranks)
        return weft_error(WEFT_ERR_TIMEOUT, "bootstrap: init failed: rank %u joined but sent "
                          "nothing of the setup's next exchange before WEFT_TIMEOUT ran out "
                          "(rank 0 says): it is stalled, or slow to set up", m.len);
    if (m.magic == BOOT_FAIL && m.nranks == (uint32_t)nranks) {
        weft_status_t st = (int32_t)m.pad == WEFT_ERR_TIMEOUT ? WEFT_ERR_TIMEOUT
                                                              : WEFT_ERR_PEER_LOST;
        if (m.len > 0 && m.len < (uint32_t)nranks)
            return weft_error(st, "bootstrap: init failed: rank %u %s (rank 0 says)", m.len,
                              st == WEFT_ERR_TIMEOUT ? "never arrived" : "was lost");
        return weft_error(st, "bootstrap: init failed at rank 0 (its own error says why)");
    }
    if (m.magic != BOOT_MAGIC || m.nranks != (uint32_t)nranks || m.len != len)
        return weft_error(WEFT_ERR_MISMATCH, "bootstrap: rank 0 sent a %u-byte record for %u "
                          "ranks (magic %#x), expected %zu for %d (different weft versions?)",
                          m.len, m.nranks, m.magic, len, nranks);
    return WEFT_OK;
}

/* Rank 0: tells a weft rank it refused why (best effort), and lets the connection end
 * with a FIN after that record, not a reset that could discard it: its own write side
 * closed, what the rank sends meanwhile is read and dropped, 0.2 s at most. */
static void tell_dropped(int fd, uint32_t why, uint32_t arg, uint32_t nranks)
{
    boot_msg_t m = { BOOT_DROP, nranks, arg, why };
    uint64_t end = time_ns() + 200000000ull;
    if (sock_send_all(fd, &m, sizeof(m), end) != WEFT_OK)
        return;
    shutdown(fd, SHUT_WR);
    char sink[256];
    while (time_ns() < end) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 20) > 0 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) == 0)
            break;              /* the rank closed: done */
    }
}

/* Rank 0 at its deadline with have of the ranks: which one is missing, to every rank
 * that joined (and to the caller). */
static weft_status_t report_missing(bootstrap_t *bs, int have, weft_status_t st)
{
    int missing = 1;
    while (missing < bs->nranks && bs->fds[missing] >= 0)
        missing++;
    weft_error_quiet(st, "bootstrap: %d of %d ranks arrived; rank %d (and any other missing) "
                     "did not%s%s: %s", have, bs->nranks, missing,
                     bs->dropped[0] ? "; refused: " : "", bs->dropped, weft_last_error());
    tell_failure(bs, BOOT_FAIL, missing, st);
    return st;
}

/* Rank 0: a connection that sent something it does not take: closed, and whether rank 0
 * goes on (0) or failed itself (-1, *st_p says why: out of fds or memory, not a
 * stranger's doing; the ranks that joined are told, the others' connections close with
 * the listener). */
static int drop(bootstrap_t *bs, int fd, weft_status_t st, weft_status_t *st_p)
{
    close(fd);
    if (st != WEFT_ERR_SYSTEM && st != WEFT_ERR_NO_MEMORY)
        return 0;       /* a stray or hostile connection: keep waiting */
    tell_failure(bs, BOOT_FAIL, 0, st);
    *st_p = st;
    return -1;
}

/* Rank 0: a connection's BOOT hello, its MAC read: 1 when it is a rank (registered), 0
 * when it was dropped. */
static int admit(bootstrap_t *bs, int fd, int peer, weft_status_t *st_p)
{
    boot_msg_t m;
    weft_status_t st = sock_recv_all(fd, &m, sizeof(m), time_ns() + 1000000000ull);
    if (st == WEFT_OK && (m.magic != BOOT_MAGIC || m.nranks != (uint32_t)bs->nranks ||
                          m.pad != bs->job_tag || peer <= 0 || peer >= bs->nranks ||
                          bs->fds[peer] >= 0)) {
        int dup = peer > 0 && peer < bs->nranks && bs->fds[peer] >= 0;
        LOG_WARN(LOG_BOOT, "bootstrap: dropped a connection claiming rank %d of %u "
                 "(job has %d ranks%s%s)", peer, m.nranks, bs->nranks,
                 dup ? ", duplicate" : "", m.magic == BOOT_MAGIC && m.pad != bs->job_tag ?
                 ", from another job: its launcher's job id differs" : "");
        if (m.magic == BOOT_MAGIC)
            snprintf(bs->dropped, sizeof(bs->dropped), "rank %d %s", peer,
                     m.pad != bs->job_tag ? "of another job" :
                     m.nranks != (uint32_t)bs->nranks ? "started for another job size" :
                     "a second time");
        if (m.magic == BOOT_MAGIC)  /* a weft rank: it learns why, not "rank 0 lost" */
            tell_dropped(fd, m.pad != bs->job_tag ? DROP_JOB :
                         m.nranks != (uint32_t)bs->nranks ? DROP_SIZE : DROP_DUP,
                         m.nranks != (uint32_t)bs->nranks ? (uint32_t)bs->nranks
                                                          : (uint32_t)peer,
                         (uint32_t)bs->nranks);
        st = WEFT_ERR_AUTH;
    }
    if (st != WEFT_OK)
        return drop(bs, fd, st, st_p);
    bs->fds[peer] = fd;
    return 1;
}

/* Rank 0: accept until every other rank is connected. Every connection is accepted at once
 * into a pending set and goes through two steps, each taken only once its bytes are all
 * queued (SO_RCVLOWAT makes poll say so), so that no connection ever holds the loop:
 * HELLO, until the auth hello has come (auth_accept_hello then answers it), and REST,
 * until the MAC and the BOOT hello have (auth_accept_mac, admit). A real rank sends each
 * as soon as it can, so strangers that connect and say nothing, or send part of a hello,
 * or a whole hello and then nothing, cost nothing and cannot fill the listen queue
 * ahead of a rank (before 2026-11-27 they were taken one at a time, each holding the loop
 * up to 2 s, and a few held it through the deadline). The set holds every rank still to
 * come and STRANGERS_MAX more; past that, one that has not sent its hello, or stalled
 * after rank 0's answer, is closed, else the newcomer (evictee; a rank closed so
 * connects again: join) (with a fixed 64 in all, a job of more
 * than about 64 ranks arriving at once lost ranks that had connected but not yet said
 * their hello: "rank 0 (the rendezvous) was lost", found 2026-11-27). */
#define STRANGERS_MAX 64
enum { STEP_HELLO = 0, STEP_REST = 1 };
#define REST_LEN (AUTH_MAC_LEN + (int)sizeof(boot_msg_t))

typedef struct pending {
    int fd;
    int step;
    int part;               /* fewer bytes queued than the step needs, though poll said
                               readable (no SO_RCVLOWAT): polled for a hang-up only, and
                               looked at again each pass (100 ms at most), not to spin */
    uint64_t since;         /* when it entered its step */
    auth_accept_t auth;     /* REST: the handshake's state */
} pending_t;

/* Bytes waiting on fd (0 when unknown). */
static int queued_bytes(int fd)
{
    int q = 0;
    return ioctl(fd, FIONREAD, &q) == 0 ? q : 0;
}

/* Makes poll report fd readable only once `need` bytes are queued (or it hung up). */
static void want_bytes(int fd, int need)
{
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &need, sizeof(need));
}

/* Whether p's step has all its bytes queued: it is taken on the next pass. */
static int step_ready(const pending_t *p)
{
    return queued_bytes(p->fd) >= (p->step == STEP_HELLO ? AUTH_HELLO_LEN : REST_LEN);
}

/* A connection that answered rank 0's hello is a rank's unless it stalls this long. */
#define REST_GRACE_NS 1000000000ull

/* The pending connection to close for a new one, -1 for the new one itself: the oldest
 * that has not sent its whole hello, else one that has stalled in REST past REST_GRACE_NS.
 * A rank's connection is closed so only before rank 0 answered it, and the rank then
 * connects again (join); one in REST, whose MAC comes within a round trip, is closed only
 * after that grace (a review's flood of 3000 strangers sending whole hellos closed a rank's
 * connection there, and the rank, its side of the handshake done, found rank 0 "lost"). */
static int evictee(const pending_t *pend, int np, uint64_t now)
{
    int v = -1;
    for (int i = 0; i < np; i++)
        if (pend[i].step == STEP_HELLO && !step_ready(&pend[i]) &&
            (v < 0 || pend[i].since < pend[v].since))
            v = i;
    for (int i = 0; i < np && v < 0; i++)
        if (pend[i].step == STEP_REST && now - pend[i].since > REST_GRACE_NS &&
            !step_ready(&pend[i]))
            v = i;
    return v;
}

/* One step of pending connection p, whose bytes are queued (or which hung up): 1 when it
 * became a rank, 0 when it moved on a step or was dropped (*gone set), -1 when rank 0
 * failed itself (*st_p). */
static int step(bootstrap_t *bs, pending_t *p, const char *secret, int *gone,
                weft_status_t *st_p)
{
    int peer;
    *gone = 1;
    if (p->step == STEP_HELLO) {
        weft_status_t st = auth_accept_hello(p->fd, secret, AUTH_BOOTSTRAP, 0, 0, &p->auth);
        if (st != WEFT_OK)
            return drop(bs, p->fd, st, st_p);
        p->step = STEP_REST;
        p->since = time_ns();
        want_bytes(p->fd, REST_LEN);
        *gone = 0;
        return 0;
    }
    weft_status_t st = auth_accept_mac(p->fd, &p->auth, &peer);
    if (st != WEFT_OK)
        return drop(bs, p->fd, st, st_p);
    want_bytes(p->fd, 1);   /* the store's reads from here on take what comes */
    return admit(bs, p->fd, peer, st_p);
}

static weft_status_t accept_all(bootstrap_t *bs, int lfd, const char *secret)
{
    int have = 1, np = 0, crowded = 0, cap = bs->nranks - 1 + STRANGERS_MAX;
    pending_t *pend = malloc((size_t)cap * sizeof(*pend));
    struct pollfd *pf = malloc((size_t)(1 + cap) * sizeof(*pf));
    weft_status_t st = WEFT_OK;
    if (pend == NULL || pf == NULL)
        st = weft_error(WEFT_ERR_NO_MEMORY, "bootstrap: no memory for %d pending "
                        "connections", cap);
    else if (sock_set_nonblock(lfd) != WEFT_OK)
        st = WEFT_ERR_SYSTEM;
    if (st != WEFT_OK) {
        free(pend);
        free(pf);
        tell_failure(bs, BOOT_FAIL, 0, st);
        return st;
    }
    while (have < bs->nranks && st == WEFT_OK) {
        uint64_t now = time_ns();
        if (now >= bs->deadline) {
            st = report_missing(bs, have, weft_error_quiet(WEFT_ERR_TIMEOUT, "accept: no "
                                "connection before the deadline"));
            break;
        }
        pf[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
        for (int i = 0; i < np; i++)
            pf[1 + i] = (struct pollfd){ .fd = pend[i].fd, .events = pend[i].part
                                         ? POLLRDHUP : POLLIN | POLLRDHUP };
        int ms = (int)WEFT_MIN((bs->deadline - now + 999999) / 1000000, 100);
        int n = poll(pf, (nfds_t)(1 + np), ms);
        if (n < 0 && errno != EINTR) {
            st = weft_error(WEFT_ERR_SYSTEM, "bootstrap: poll: %m");
            tell_failure(bs, BOOT_FAIL, 0, st);
            break;
        }
        /* the pending ones whose step's bytes are queued or that hung up (greeted, a
         * hang-up fails and is logged at once), newest first: a swap with the last moves
         * only one already looked at */
        for (int i = np - 1; i >= 0 && st == WEFT_OK && have < bs->nranks; i--) {
            int hup = n > 0 && (pf[1 + i].revents & (POLLHUP | POLLERR | POLLRDHUP));
            if (!hup && !pend[i].part && !(n > 0 && (pf[1 + i].revents & POLLIN)))
                continue;
            int need = pend[i].step == STEP_HELLO ? AUTH_HELLO_LEN : REST_LEN;
            pend[i].part = !hup && queued_bytes(pend[i].fd) < need;
            if (pend[i].part)
                continue;
            int gone, r = step(bs, &pend[i], secret, &gone, &st);
            have += r > 0;
            if (gone)
                pend[i] = pend[--np];
        }
        /* at most STRANGERS_MAX a pass: the pending ones' steps come between bursts */
        for (int took = 0; n > 0 && (pf[0].revents & POLLIN) && st == WEFT_OK &&
                           have < bs->nranks && took < STRANGERS_MAX; took++) {
            int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    break;
                st = weft_error(WEFT_ERR_SYSTEM, "accept: %m%s", sock_fd_hint(errno));
                tell_failure(bs, BOOT_FAIL, 0, st);    /* rank 0's own (out of fds) */
                break;
            }
            if (np - (bs->nranks - have) >= STRANGERS_MAX) {
                int v = evictee(pend, np, time_ns());
                if (!crowded++)
                    LOG_WARN(LOG_BOOT, "bootstrap: %d connections at the rendezvous, more "
                             "than the %d ranks still to come, have not finished their "
                             "handshake (strangers that said nothing or stalled): closing "
                             "the longest waiting, or the newcomer, as each other comes", np,
                             bs->nranks - have);
                if (v < 0) {
                    close(fd);
                    continue;
                }
                close(pend[v].fd);
                pend[v] = pend[--np];
            }
            want_bytes(fd, AUTH_HELLO_LEN);
            pend[np++] = (pending_t){ .fd = fd, .step = STEP_HELLO, .since = time_ns() };
        }
    }
    for (int i = 0; i < np; i++)
        close(pend[i].fd);
    free(pend);
    free(pf);
    return st;
}

/* A rank: connects to rank 0 and joins. Rank 0, alive, closes a connection during the
 * handshake only to make room in a crowded rendezvous (accept_all): the rank then
 * connects again until the deadline, backing off to 160 ms. A connection refused on such
 * a retry (within 1 s) means rank 0 is gone or done (it crashed, timed out, or closed
 * its listener with this rank a duplicate): the first failure is the answer. */
#define JOIN_AGAIN_NS 1000000000ull
static weft_status_t join(bootstrap_t *bs, const struct sockaddr_in *addr, const char *secret)
{
    int fd, peer;
    weft_status_t st;
    RETURN_IF_ERR(sock_connect(addr, bs->deadline, &fd));
    for (int tries = 0;; tries++) {
        st = auth_handshake(fd, secret, AUTH_BOOTSTRAP, 0, bs->rank, bs->deadline, &peer);
        uint64_t now = time_ns(), pause = 10000000ull << WEFT_MIN(tries, 4);
        if (st != WEFT_ERR_PEER_LOST || now + pause >= bs->deadline)
            break;
        weft_error_saved_t first;
        weft_error_save(&first);
        close(fd);
        LOG_INFO(LOG_BOOT, "bootstrap: rank 0 closed the connection during the handshake "
                 "(it makes room so in a crowded rendezvous); connecting again");
        usleep((useconds_t)(pause / 1000));
        if (sock_connect(addr, WEFT_MIN(bs->deadline, time_ns() + JOIN_AGAIN_NS), &fd) !=
            WEFT_OK) {
            weft_error_restore(&first);
            return st;
        }
    }
    boot_msg_t m = { BOOT_MAGIC, (uint32_t)bs->nranks, 0, bs->job_tag };
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

/* A relay listener's address as relay_setup carries it (network order; port 0: none). */
typedef struct {
    uint32_t ip;
    uint16_t port, pad;
} relay_rec_t;

typedef struct {
    relay_rec_t *all;
    int fanout;
} relay_tab_t;

static void *relay_slot(void *arg, int r)
{
    return &((relay_tab_t *)arg)->all[r];
}

static const void *relay_parent_of(void *arg, int r)
{
    relay_tab_t *t = arg;
    return &t->all[(r - 1) / t->fanout];
}

/* Every rank with children listens (at the caller's address, a port of the kernel's);
 * rank 0 collects the listeners and tells each rank its parent's. */
static weft_status_t relay_setup(bootstrap_t *bs)
{
    int first = bs->rank * bs->fanout + 1;
    int kids = relay_kids(bs->rank, bs->nranks, bs->fanout);
    relay_rec_t mine = { 0, 0, 0 }, got = { 0, 0, 0 };
    bs->parent = bs->rank == 0 ? -1 : (bs->rank - 1) / bs->fanout;
    bs->kid0 = first;
    bs->nkids = kids;
    bs->down_fds = malloc((size_t)bs->fanout * sizeof(int));
    bs->down_off = calloc((size_t)bs->fanout, sizeof(size_t));
    if (bs->down_fds == NULL || bs->down_off == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "bootstrap: out of memory");
    for (int k = 0; k < bs->fanout; k++)
        bs->down_fds[k] = -1;
    /* a rank that cannot listen (no address: the caller said why) still sends its record,
     * marked (BOOT_PAD_NOLISTEN), so that rank 0 tells the others at once (BOOT_NOLISTEN),
     * not at their deadline */
    weft_status_t own = WEFT_OK;
    char why[512] = "";
    if (bs->rank != 0 && kids > 0) {
        struct sockaddr_in a = bs->relay_addr;
        socklen_t alen = sizeof(a);
        a.sin_port = 0;
        own = !bs->relay_addr_ok ? WEFT_ERR_SYSTEM : sock_listen(&a, 0, &bs->lfd);
        if (own == WEFT_OK)
            own = sock_set_nonblock(bs->lfd);   /* relay_main's accept never blocks */
        if (own == WEFT_OK && getsockname(bs->lfd, (struct sockaddr *)&a, &alen) != 0)
            own = weft_error(WEFT_ERR_SYSTEM, "bootstrap: getsockname: %m");
        if (own == WEFT_OK)
            mine = (relay_rec_t){ a.sin_addr.s_addr, a.sin_port, 0 };
        else
            snprintf(why, sizeof(why), "bootstrap: cannot listen for the ranks this rank "
                     "relays to: %s", bs->relay_addr_ok ? weft_last_error() : "no address");
    }
    if (own != WEFT_OK) {
        /* the record, flagged, and no wait for an answer: rank 0 tells the others */
        boot_msg_t m = { BOOT_MAGIC, (uint32_t)bs->nranks, sizeof(mine), BOOT_PAD_NOLISTEN };
        if (sock_send_all(bs->fds[0], &m, sizeof(m), bs->deadline) == WEFT_OK)
            (void)sock_send_all(bs->fds[0], &mine, sizeof(mine), bs->deadline);
        return weft_error_quiet(own, "%s", why);
    }
    relay_tab_t t = { NULL, bs->fanout };
    if (bs->rank == 0 && (t.all = calloc((size_t)bs->nranks, sizeof(*t.all))) == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "bootstrap: out of memory");
    bs_sink_t sink = { relay_slot, NULL, &t, relay_parent_of };
    weft_status_t st = collect(bs, &mine, sizeof(mine), &sink, &got, sizeof(got), 0);
    free(t.all);
    if (st == WEFT_OK && bs->parent > 0) {
        if (got.port == 0)
            return weft_error(WEFT_ERR_INTERNAL, "bootstrap: rank 0 gave no relay address "
                              "for rank %d", bs->parent);
        bs->parent_addr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = got.port,
                                                .sin_addr.s_addr = got.ip };
    }
    if (st == WEFT_OK && bs->rank == 0)
        LOG_INFO(LOG_BOOT, "bootstrap: %d ranks: the exchanges' records go down a tree of "
                 "fanout %d", bs->nranks, bs->fanout);
    return st;
}

weft_status_t bootstrap_open(int rank, int nranks, const char *rendezvous,
                             const struct sockaddr_in *rdv_addr, int named_lo,
                             const struct sockaddr_in *relay_addr, const char *secret,
                             uint32_t job_tag, uint64_t deadline, bootstrap_t **bs_p)
{
    /* resolved once, by the caller (comm.c, which waits for a name not in DNS yet): a
     * second lookup could fail, or give another address */
    struct sockaddr_in addr = *rdv_addr;
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
    bs->job_tag = job_tag;
    bs->fds = fds;
    bs->lost = -1;
    bs->deadline = deadline;
    bs->lfd = bs->up_fd = -1;
    bs->secret = secret;
    bs->fanout = bootstrap_fanout(nranks);
    bs->relay_addr_ok = relay_addr != NULL;
    if (relay_addr)
        bs->relay_addr = *relay_addr;
    weft_status_t st = WEFT_OK;
    if (rank == 0 && nranks > 1) {
        int lfd;
        if (named_lo) {
            /* its name resolves to a loopback address here only (/etc/hosts): the
             * other hosts reach this one by another address, at the same port */
            char as[64];
            LOG_INFO(LOG_BOOT, "rendezvous %s resolves to %s on this host: rank 0 listens "
                     "on every interface at port %d", rendezvous,
                     sock_addr_str(&addr, as, sizeof(as)), ntohs(addr.sin_port));
            addr.sin_addr.s_addr = htonl(INADDR_ANY);
        }
        st = sock_listen(&addr, 0, &lfd);     /* SOMAXCONN: strangers never fill it */
        if (st != WEFT_OK)
            st = weft_error(st, "bootstrap: rank 0 of %d cannot listen at the rendezvous %s: "
                            "%s (it must name this host, and its port must be free: another "
                            "job, or a second process that also took rank 0?)", nranks,
                            rendezvous, weft_last_error());
        if (st == WEFT_OK) {
            st = accept_all(bs, lfd, secret);
            close(lfd);
        }
    } else if (rank != 0) {
        st = join(bs, &addr, secret);
        if (st != WEFT_OK && st != WEFT_ERR_AUTH)
            weft_error_quiet(st, "bootstrap: cannot join rank 0 at %s: %s", rendezvous,
                             weft_last_error());
    }
    if (st == WEFT_OK && bs->fanout > 0)
        st = relay_setup(bs);
    if (st != WEFT_OK) {
        bootstrap_close(bs);
        return st;
    }
    *bs_p = bs;
    return WEFT_OK;
}

/* Rank 0: 1 when the record queued on fd says its rank could not connect, 0 when it is
 * another record, -1 when no whole header is there yet. Reads nothing. */
static int peek_failed(int fd)
{
    boot_msg_t m;
    if (recv(fd, &m, sizeof(m), MSG_PEEK | MSG_DONTWAIT) != (ssize_t)sizeof(m))
        return -1;
    return m.magic == BOOT_MAGIC ? (int)m.pad : 0;
}

/* Keeps the failure just set (weft_last_error) as the setup's news, and returns it. */
static weft_status_t keep_news(bootstrap_t *bs, weft_status_t st)
{
    bs->news_st = st;
    snprintf(bs->news, sizeof(bs->news), "%s", weft_last_error());
    return st;
}

/* Rank 0: a rank could not connect (its record says so): the others are told, and the
 * exchange or watch that saw it fails. */
static weft_status_t report_noconn(bootstrap_t *bs, int r, int pad)
{
    bs->lost = r;
    weft_status_t st = pad == BOOT_PAD_NOLISTEN
        ? weft_error(WEFT_ERR_PEER_LOST, "bootstrap: rank %d cannot listen for the ranks it "
                     "relays init's records to (its own error says why)", r)
        : weft_error(WEFT_ERR_PEER_LOST, "bootstrap: rank %d could not connect its data "
                     "connections (its own error says why)", r);
    tell_failure(bs, pad == BOOT_PAD_NOLISTEN ? BOOT_NOLISTEN : BOOT_NOCONN, r, st);
    return keep_news(bs, st);
}

/* Rank 0: waits until rank r has sent something, watching every other rank's connection
 * meanwhile for a close, or a record saying it could not connect (seen[q]: q's record
 * was looked at already): a rank lost or failed while r is still busy (r may be waiting
 * for that very rank) is reported at once. Returns that rank (*noconn: it could not
 * connect), or -1 when r's turn came (or the deadline passed: r's recv words that). */
static int wait_turn(bootstrap_t *bs, int r, struct pollfd *p, char *seen, int *noconn)
{
    *noconn = 0;
    /* r's record queued already (most are, the ranks sending at once): no poll of every
     * connection (n of them for each of n records made an exchange O(n^2) here) */
    struct pollfd one = { .fd = bs->fds[r], .events = POLLIN };
    if (poll(&one, 1, 0) > 0)
        return -1;
    for (;;) {
        int n = 0;
        for (int q = 1; q < bs->nranks; q++)
            p[n++] = (struct pollfd){ .fd = bs->fds[q], .events = q == r ? POLLIN :
                                      POLLRDHUP | (seen[q] ? 0 : POLLIN) };
        uint64_t now = time_ns();
        if (now >= bs->deadline)
            return -1;
        int ms = (int)WEFT_MIN((bs->deadline - now) / 1000000 + 1, 100);
        if (poll(p, (nfds_t)n, ms) <= 0)
            continue;
        if (p[r - 1].revents)
            return -1;
        for (int q = 1; q < bs->nranks; q++) {
            int f = q != r && (p[q - 1].revents & POLLIN) ? peek_failed(bs->fds[q]) : -1;
            if (f > 0) {
                *noconn = f;
                return q;
            }
            seen[q] |= f == 0;
            if (p[q - 1].revents & (POLLRDHUP | POLLHUP | POLLERR))
                return q;
        }
    }
}

void bootstrap_failed(void *ctx, weft_status_t why)
{
    bootstrap_t *bs = ctx;
    if (bs->rank != 0) {
        bs->failed = 1;     /* the next record says so, and rank 0 tells the others */
        return;
    }
    bs->lost = 0;
    tell_failure(bs, BOOT_NOCONN, 0, why);
}


/* ---- the relay ------------------------------------------------------------------- */

static weft_status_t watch_rank0(void *ctx)
{
    return bootstrap_watch(ctx);
}

/* The relay parent failed this rank (st: lost, garbled, or silent until the deadline):
 * rank 0's word first, where it comes within 0.5 s (the parent's failure may be another
 * rank's, which rank 0 names), else the parent's. */
static weft_status_t relay_lost(bootstrap_t *bs, weft_status_t st)
{
    char keep[512];
    snprintf(keep, sizeof(keep), "%s", weft_last_error());
    struct pollfd p = { .fd = bs->fds[0], .events = POLLIN | POLLRDHUP };
    if (poll(&p, 1, 500) > 0) {
        weft_status_t said = bootstrap_watch(bs);
        if (said != WEFT_OK)
            return said;
    }
    if (st == WEFT_ERR_TIMEOUT)
        return weft_error_quiet(st, "bootstrap: rank %d, which relays the setup's records to "
                                "this rank, sent nothing before WEFT_TIMEOUT ran out: it is "
                                "stalled, or slow to set up (%s)", bs->parent, keep);
    return weft_error_quiet(WEFT_ERR_PEER_LOST, "bootstrap: rank %d, which relays the "
                            "setup's records to this rank, was lost (%s)", bs->parent, keep);
}

/* A rank whose parent is not rank 0: its connection to the parent's listener, once. */
static weft_status_t relay_up(bootstrap_t *bs)
{
    if (bs->up_fd >= 0)
        return WEFT_OK;
    sock_watch_t w = { watch_rank0, bs };
    int fd, peer;
    weft_status_t st = sock_connect_watched(&bs->parent_addr, bs->deadline, &w, &fd);
    if (st == WEFT_OK) {
        st = auth_handshake_watched(fd, bs->secret, AUTH_RELAY, bs->job_tag, bs->rank,
                                    bs->deadline, &w, &peer);
        if (st == WEFT_OK && peer != bs->parent)
            st = weft_error(WEFT_ERR_AUTH, "bootstrap: rank %d's relay listener answered as "
                            "rank %d", bs->parent, peer);
        if (st != WEFT_OK)
            close(fd);
    }
    /* this rank's own failure (fds, memory), or rank 0's news: as they are */
    if (st != WEFT_OK && (bs->news_st != WEFT_OK || st == WEFT_ERR_SYSTEM ||
                          st == WEFT_ERR_NO_MEMORY || st == WEFT_ERR_INVALID_ARG))
        return st;
    if (st != WEFT_OK)
        return relay_lost(bs, st);
    bs->up_fd = fd;
    return WEFT_OK;
}

/* A rank whose parent is not rank 0: the exchange's answer from the parent, while rank
 * 0's connection is watched for its failure reports. */
static weft_status_t relay_recv(bootstrap_t *bs, void *out, size_t out_len)
{
    RETURN_IF_ERR(relay_up(bs));
    for (;;) {
        struct pollfd p[2] = { { .fd = bs->up_fd, .events = POLLIN },
                               { .fd = bs->fds[0], .events = POLLIN | POLLRDHUP } };
        uint64_t now = time_ns();
        if (now >= bs->deadline)
            return relay_lost(bs, weft_error(WEFT_ERR_TIMEOUT, "bootstrap: nothing from "
                                             "rank %d", bs->parent));
        int ms = (int)WEFT_MIN((bs->deadline - now) / 1000000 + 1, 100);
        if (poll(p, 2, ms) <= 0)
            continue;
        if (p[1].revents)
            RETURN_IF_ERR(bootstrap_watch(bs));
        if (!p[0].revents)
            continue;
        boot_msg_t m;
        weft_status_t st = sock_recv_all(bs->up_fd, &m, sizeof(m), bs->deadline);
        if (st == WEFT_OK && (m.magic != BOOT_MAGIC || m.nranks != (uint32_t)bs->nranks ||
                              m.len != out_len))
            st = weft_error(WEFT_ERR_MISMATCH, "bootstrap: rank %d relayed a %u-byte answer "
                            "for %u ranks (magic %#x), expected %zu for %d", bs->parent,
                            m.len, m.nranks, m.magic, out_len, bs->nranks);
        sock_watch_t w = { watch_rank0, bs };
        if (st == WEFT_OK)
            st = sock_recv_all_watched(bs->up_fd, out, out_len, bs->deadline, &w);
        if (st != WEFT_OK && bs->news_st != WEFT_OK)
            return st;
        return st == WEFT_OK ? WEFT_OK : relay_lost(bs, st);
    }
}

/* A rank with children forwards an answer to them from a thread of its own while it
 * goes on with its own setup: the thread accepts each child as it connects (with its
 * handshake) and sends each connected child what its socket takes, until every child
 * has the answer, or bootstrap_close stops it. So a child that stalls before it
 * connects, or stops reading, holds up neither this rank nor its other children, and
 * rank 0 names that child when it misses the next exchange (before, this rank waited
 * for every child, missed that exchange itself, and was named; a first fix served the
 * children only while this rank waited, which left a late child waiting for this rank's
 * whole connect phase). A child lost is not this rank's failure: rank 0 sees it go. The
 * thread touches only the relay's own state (listener, children, the answer) and
 * never rank 0's connection, which stays the caller's. */
static weft_status_t relay_stopped(void *ctx)
{
    bootstrap_t *bs = ctx;
    return __atomic_load_n(&bs->fwd_stop, __ATOMIC_ACQUIRE)
           ? weft_error_quiet(WEFT_ERR_PEER_LOST, "bootstrap: relay stopped") : WEFT_OK;
}

static void relay_take_child(bootstrap_t *bs)
{
    int fd = accept4(bs->lfd, NULL, NULL, SOCK_CLOEXEC), who;
    if (fd < 0)
        return;
    /* as the rendezvous: a silent stranger holds this 2 s at most */
    sock_watch_t w = { relay_stopped, bs };
    weft_status_t st = auth_handshake_watched(fd, bs->secret, AUTH_RELAY, bs->job_tag,
                                              bs->rank, WEFT_MIN(bs->deadline, time_ns() +
                                                                 2000000000ull), &w, &who);
    if (st == WEFT_OK && (who < bs->kid0 || who >= bs->kid0 + bs->nkids ||
                          bs->down_fds[who - bs->kid0] >= 0)) {
        LOG_WARN(LOG_BOOT, "bootstrap: dropped a relay connection claiming rank %d (this rank "
                 "relays to ranks %d-%d)", who, bs->kid0, bs->kid0 + bs->nkids - 1);
        st = WEFT_ERR_AUTH;
    }
    if (st != WEFT_OK) {
        close(fd);
        return;
    }
    bs->down_fds[who - bs->kid0] = fd;
}

static void *relay_main(void *v)
{
    bootstrap_t *bs = v;
    int left = bs->nkids;
    while (left > 0 && !__atomic_load_n(&bs->fwd_stop, __ATOMIC_ACQUIRE) &&
           time_ns() < bs->deadline) {
        struct pollfd p[1 + 64];
        int np = 0, listen_on = 0, map[64];
        for (int k = 0; k < bs->nkids; k++)
            if (bs->down_fds[k] < 0)
                listen_on = 1;
            else if (bs->down_off[k] < bs->fwd_len) {
                map[np] = k;
                p[np++] = (struct pollfd){ .fd = bs->down_fds[k], .events = POLLOUT };
            }
        if (listen_on)
            p[np++] = (struct pollfd){ .fd = bs->lfd, .events = POLLIN };
        if (poll(p, (nfds_t)np, 50) <= 0)
            continue;
        for (int i = 0; i < np - listen_on; i++) {
            int k = map[i];
            if (!p[i].revents)
                continue;
            ssize_t w = send(bs->down_fds[k], bs->fwd + bs->down_off[k],
                             bs->fwd_len - bs->down_off[k], MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0)
                bs->down_off[k] += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                LOG_INFO(LOG_BOOT, "bootstrap: relaying to rank %d: %m (rank 0 sees it go)",
                         bs->kid0 + k);
                bs->down_off[k] = bs->fwd_len;
            }
            left -= bs->down_off[k] == bs->fwd_len;
        }
        if (listen_on && (p[np - 1].revents & POLLIN))
            relay_take_child(bs);
    }
    return NULL;
}

/* Waits for the relay's thread to end (stop: at once, else when every child has the
 * answer or the deadline passed). */
static void relay_join(bootstrap_t *bs, int stop)
{
    if (!bs->fwd_on)
        return;
    if (stop)
        __atomic_store_n(&bs->fwd_stop, 1, __ATOMIC_RELEASE);
    pthread_join(bs->fwd_thread, NULL);
    bs->fwd_on = 0;
}

/* Forwards out to this rank's children from now on (relay_main). Every child had the
 * last answer (each sent its next record to rank 0 before this answer existed, and that
 * came after it had read the last one): the last thread is done. */
static weft_status_t relay_down(bootstrap_t *bs, const void *out, size_t out_len)
{
    if (bs->nkids == 0)
        return WEFT_OK;
    relay_join(bs, 0);
    boot_msg_t m = { BOOT_MAGIC, (uint32_t)bs->nranks, (uint32_t)out_len, 0 };
    char *f = malloc(sizeof(m) + out_len);
    if (f == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "bootstrap: out of memory");
    memcpy(f, &m, sizeof(m));
    memcpy(f + sizeof(m), out, out_len);
    free(bs->fwd);
    bs->fwd = f;
    bs->fwd_len = sizeof(m) + out_len;
    for (int k = 0; k < bs->nkids; k++)
        bs->down_off[k] = 0;
    int e = pthread_create(&bs->fwd_thread, NULL, relay_main, bs);
    if (e != 0)
        return weft_error(WEFT_ERR_SYSTEM, "bootstrap: cannot start the relay's thread: %s",
                          strerror(e));
    bs->fwd_on = 1;
    return WEFT_OK;
}

static weft_status_t collect(bootstrap_t *bs, const void *mine, size_t len,
                             const bs_sink_t *sink, void *out, size_t out_len, int relay)
{
    boot_msg_t m = { BOOT_MAGIC, (uint32_t)bs->nranks, (uint32_t)len,
                     (uint32_t)bs->failed };
    weft_status_t st;
    relay = relay && bs->fanout > 0;
    if (bs->rank != 0) {
        int fd = bs->fds[0];
        st = sock_send_all(fd, &m, sizeof(m), bs->deadline);
        if (st == WEFT_OK)
            st = sock_send_all(fd, mine, len, bs->deadline);
        int sent = st == WEFT_OK;
        if (st == WEFT_OK && relay && bs->parent != 0) {
            st = relay_recv(bs, out, out_len);
            return st == WEFT_OK ? relay_down(bs, out, out_len) : st;
        }
        if (st == WEFT_OK)
            st = sock_recv_all(fd, &m, sizeof(m), bs->deadline);
        if (st == WEFT_OK) {    /* rank 0's own report needs no prefix */
            st = bootstrap_check_msg(&m, bs->nranks, out_len);
            if (st != WEFT_OK)
                return st;
            st = sock_recv_all(fd, out, out_len, bs->deadline);
        }
        if (st != WEFT_OK && (st != WEFT_ERR_TIMEOUT || sent)) {
            /* rank 0 may have said why before it went: its report is queued here. Or,
             * this rank's deadline passed while it waited for rank 0's answer: rank 0,
             * whose deadline is as far from its own start, may be about to say which
             * rank it waited for (BOOT_LATE) - 0.5 s more for that, not "rank 0 did not
             * answer" (ranks start some milliseconds apart) */
            char keep[512];
            snprintf(keep, sizeof(keep), "%s", weft_last_error());
            boot_msg_t f;
            uint64_t grace = st == WEFT_ERR_TIMEOUT ? 500000000ull : 100000000ull;
            if (sock_recv_all(fd, &f, sizeof(f), time_ns() + grace) == WEFT_OK &&
                (f.magic == BOOT_FAIL || f.magic == BOOT_DROP || f.magic == BOOT_NOCONN ||
                 f.magic == BOOT_NOLISTEN ||
                 f.magic == BOOT_LATE))
                return bootstrap_check_msg(&f, bs->nranks, 0);
            weft_error_quiet(st, "%s", keep);
        }
        if (st != WEFT_OK)
            return weft_error_quiet(st, "bootstrap: rank 0 (the rendezvous) %s: %s",
                                    st == WEFT_ERR_TIMEOUT ? "did not answer" : "was lost",
                                    weft_last_error());
        return relay ? relay_down(bs, out, out_len) : WEFT_OK;
    }
    if (bs->news_st != WEFT_OK)     /* the others have been told (bootstrap_watch) */
        return weft_error_quiet(bs->news_st, "%s", bs->news);
    if (bs->lost >= 0)
        return weft_error_quiet(WEFT_ERR_PEER_LOST, "bootstrap: rank %d was lost during "
                                "setup", bs->lost);
    memcpy(sink->slot(sink->arg, 0), mine, len);
    if (sink->got)
        sink->got(sink->arg, 0);
    struct pollfd *pfd = malloc((size_t)bs->nranks * sizeof(*pfd));
    char *seen = calloc((size_t)bs->nranks, 1);
    if (pfd == NULL || seen == NULL) {
        free(pfd);
        free(seen);
        return weft_error(WEFT_ERR_NO_MEMORY, "bootstrap: out of memory");
    }
    for (int r = 1; r < bs->nranks; r++) {
        boot_msg_t got;
        int noconn, lost = wait_turn(bs, r, pfd, seen, &noconn);
        if (lost > 0 && noconn) {
            free(pfd);
            free(seen);
            return report_noconn(bs, lost, noconn);
        }
        if (lost > 0) {
            free(pfd);
            free(seen);
            bs->lost = lost;
            st = weft_error(WEFT_ERR_PEER_LOST, "bootstrap: rank %d was lost (its rendezvous "
                            "connection closed)", lost);
            tell_failure(bs, BOOT_FAIL, lost, st);
            return st;
        }
        st = sock_recv_all(bs->fds[r], &got, sizeof(got), bs->deadline);
        if (st == WEFT_OK && (got.magic != BOOT_MAGIC || got.len != len))
            st = weft_error(WEFT_ERR_MISMATCH, "bootstrap: rank %d sent a %u-byte record, "
                            "expected %zu (different weft versions?)", r, got.len, len);
        if (st == WEFT_OK)
            st = sock_recv_all(bs->fds[r], sink->slot(sink->arg, r), len, bs->deadline);
        if (st == WEFT_OK && got.pad != 0) {
            free(pfd);      /* others may be waiting for r to connect: stop them now */
            free(seen);
            return report_noconn(bs, r, (int)got.pad);
        }
        if (st != WEFT_OK) {
            free(pfd);
            free(seen);
            if (st == WEFT_ERR_TIMEOUT)
                weft_error_quiet(st, "bootstrap: rank %d joined but sent nothing of this "
                                 "exchange before WEFT_TIMEOUT ran out: it is stalled, or "
                                 "slow to set up (%s)", r, weft_last_error());
            else
                weft_error_quiet(st, "bootstrap: rank %d: %s", r, weft_last_error());
            tell_failure(bs, st == WEFT_ERR_TIMEOUT ? BOOT_LATE : BOOT_FAIL, r, st);
            return st;
        }
        if (sink->got)
            sink->got(sink->arg, r);
    }
    free(pfd);
    free(seen);
    bs->rounds++;
    m.len = (uint32_t)out_len;
    int last = relay ? WEFT_MIN(bs->fanout, bs->nranks - 1) : bs->nranks - 1;
    for (int r = 1; r <= last; r++) {
        const void *o = sink->answer ? sink->answer(sink->arg, r) : out;
        st = sock_send_all(bs->fds[r], &m, sizeof(m), bs->deadline);
        if (st == WEFT_OK)
            st = sock_send_all(bs->fds[r], o, out_len, bs->deadline);
        bs->sent += sizeof(m) + out_len;
        if (st != WEFT_OK) {
            weft_error_quiet(st, "bootstrap: rank %d: %s", r, weft_last_error());
            tell_failure(bs, BOOT_FAIL, r, st);
            return st;
        }
    }
    return WEFT_OK;
}

typedef struct {
    char *base;
    size_t len;
} rows_t;

static void *row_slot(void *arg, int r)
{
    rows_t *w = arg;
    return w->base + (size_t)r * w->len;
}

weft_status_t bootstrap_exchange(void *ctx, const void *mine, void *all, size_t len)
{
    bootstrap_t *bs = ctx;
    rows_t w = { all, len };
    bs_sink_t sink = { row_slot, NULL, &w, NULL };
    return collect(bs, mine, len, &sink, all, len * (size_t)bs->nranks, 1);
}

typedef struct {
    const fold_t *f;
    void *acc, *rec;
} fold_run_t;

static void *fold_slot(void *arg, int r)
{
    (void)r;
    return ((fold_run_t *)arg)->rec;
}

static void fold_got(void *arg, int r)
{
    fold_run_t *x = arg;
    x->f->fold(x->acc, x->rec, r);
}

weft_status_t bootstrap_reduce(void *ctx, const void *mine, void *acc, const fold_t *f)
{
    bootstrap_t *bs = ctx;
    void *rec = bs->rank == 0 ? malloc(f->rec_len) : NULL;
    if (bs->rank == 0 && rec == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "bootstrap: out of memory");
    memset(acc, 0, f->acc_len);
    fold_run_t x = { f, acc, rec };
    bs_sink_t sink = { fold_slot, fold_got, &x, NULL };
    weft_status_t st = collect(bs, mine, f->rec_len, &sink, acc, f->acc_len, 0);
    free(rec);
    return st;
}

weft_status_t bootstrap_watch(void *ctx)
{
    bootstrap_t *bs = ctx;
    if (bs->news_st != WEFT_OK)
        return weft_error_quiet(bs->news_st, "%s", bs->news);
    if (bs->lost >= 0)
        return weft_error_quiet(WEFT_ERR_PEER_LOST, "bootstrap: rank %d was lost during "
                                "setup", bs->lost);
    if (bs->rank != 0) {
        /* rank 0 sends nothing between exchanges but a failure report: its words */
        struct pollfd p = { .fd = bs->fds[0], .events = POLLIN | POLLRDHUP };
        boot_msg_t f;
        if (bs->fds[0] < 0 || poll(&p, 1, 0) <= 0)
            return WEFT_OK;
        weft_status_t said;
        if ((p.revents & POLLIN) &&
            sock_recv_all(bs->fds[0], &f, sizeof(f), time_ns() + 100000000ull) == WEFT_OK &&
            (said = bootstrap_check_msg(&f, bs->nranks, 0)) != WEFT_OK)
            return keep_news(bs, weft_error_quiet(said == WEFT_ERR_TIMEOUT ? said :
                                                  WEFT_ERR_PEER_LOST, "%s",
                                                  weft_last_error()));
        return keep_news(bs, weft_error_quiet(WEFT_ERR_PEER_LOST, "bootstrap: rank 0 stopped "
                                              "the setup"));
    }
    /* the others may have sent their next record already: only a close, or a record
     * saying its rank could not connect, is news. One poll of every connection, then a
     * look at those with something (two calls per rank each 50 ms before: 8000 at 4096
     * ranks) */
    if (bs->watch_pfd == NULL &&
        (bs->watch_pfd = malloc((size_t)bs->nranks * sizeof(*bs->watch_pfd))) == NULL)
        return WEFT_OK;         /* no memory to watch with: the next wait says more */
    struct pollfd *p = bs->watch_pfd;
    for (int r = 1; r < bs->nranks; r++)
        p[r - 1] = (struct pollfd){ .fd = bs->fds[r], .events = POLLIN | POLLRDHUP };
    if (bs->nranks < 2 || poll(p, (nfds_t)(bs->nranks - 1), 0) <= 0)
        return WEFT_OK;
    for (int r = 1; r < bs->nranks; r++) {
        short ev = p[r - 1].revents;
        int f = (ev & POLLIN) ? peek_failed(bs->fds[r]) : -1;
        if (f > 0)
            return report_noconn(bs, r, f);
        if (ev & (POLLRDHUP | POLLHUP | POLLERR)) {
            bs->lost = r;
            weft_status_t st = weft_error(WEFT_ERR_PEER_LOST, "bootstrap: rank %d was lost "
                                          "during setup (its rendezvous connection closed)", r);
            tell_failure(bs, BOOT_FAIL, r, st);
            return keep_news(bs, st);
        }
    }
    return WEFT_OK;
}

void bootstrap_close(bootstrap_t *bs)
{
    if (bs == NULL)
        return;
    relay_join(bs, 1);
    if (bs->rank == 0 && bs->rounds)
        LOG_INFO(LOG_BOOT, "bootstrap: rank 0 answered %d exchanges of %d ranks with %llu "
                 "bytes in all", bs->rounds, bs->nranks, (unsigned long long)bs->sent);
    for (int i = 0; i < bs->nranks; i++)
        if (bs->fds[i] >= 0)
            close(bs->fds[i]);
    for (int k = 0; bs->down_fds && k < bs->fanout; k++)
        if (bs->down_fds[k] >= 0)
            close(bs->down_fds[k]);
    if (bs->lfd >= 0)
        close(bs->lfd);
    if (bs->up_fd >= 0)
        close(bs->up_fd);
    free(bs->down_fds);
    free(bs->down_off);
    free(bs->fwd);
    free(bs->watch_pfd);
    free(bs->fds);
    free(bs);
}
