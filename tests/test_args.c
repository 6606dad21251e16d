/*
 * test_args.c - bad input to every public call: the exact error, a message, no writes.
 *
 * Runs as one process (weft_comm_init_rank(0, 1, "127.0.0.1:0")) or under weftrun
 * (weft_comm_init, any number of ranks). Every bad call must return WEFT_ERR_INVALID_ARG
 * with a non-empty weft_last_error(), must not crash, and must leave every buffer it was
 * given (and every output handle) as it was; afterwards the communicator must still work.
 * count == 0 must be a successful no-op for every collective.
 *
 * Invariants: every bad call is bad on every rank by its local arguments alone (a root or
 * peer of "this rank" where only that side would be wrong), so under weftrun the ranks
 * never disagree about which calls reach the network. A crash prints the check it was in.
 * Only the public API (weft.h) is used.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft.h"

#define ELEMS  64               /* elements per rank slot in the test buffers */
#define ARENA  (64 * 1024)      /* bytes: room for nranks slots of doubles and guards */
#define PAD    1024             /* send/recv sit this far into their arenas */

typedef struct {
    weft_comm_t *comm;
    int rank, nranks;
    long passed, failed;
    unsigned char *send_arena, *recv_arena;    /* ARENA bytes each */
    unsigned char *send, *recv;                /* PAD bytes into the arenas */
    unsigned char *send_ref, *recv_ref;        /* what the arenas must still hold */
} ctx_t;

static char current[256];       /* the check in progress, for the crash handler */

static void on_crash(int sig)
{
    static const char pre[] = "FAIL test_args crashed (signal) in: ";
    ssize_t rc = write(2, pre, sizeof(pre) - 1);
    rc = write(2, current, strlen(current));
    rc = write(2, "\n", 1);
    (void)rc;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void fail(ctx_t *c, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(ctx_t *c, const char *what, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL rank %d (nranks=%d) %s: %s\n", c->rank, c->nranks, what, msg);
    c->failed++;
}

static void fill_arenas(ctx_t *c)
{
    for (size_t i = 0; i < ARENA; i++) {
        c->send_arena[i] = (unsigned char)(i * 7 + 3);
        c->recv_arena[i] = (unsigned char)(0xa5 ^ (i * 13));
    }
    memcpy(c->send_ref, c->send_arena, ARENA);
    memcpy(c->recv_ref, c->recv_arena, ARENA);
}

/* 0 when both arenas are unchanged; else reports the first changed byte. */
static int arenas_intact(ctx_t *c, const char *what)
{
    for (int k = 0; k < 2; k++) {
        const unsigned char *a = k ? c->recv_arena : c->send_arena;
        const unsigned char *r = k ? c->recv_ref : c->send_ref;
        if (memcmp(a, r, ARENA) == 0)
            continue;
        size_t i = 0;
        while (a[i] == r[i])
            i++;
        fail(c, what, "%s buffer changed at byte %td (got 0x%02x expected 0x%02x)",
             k ? "recv" : "send", (ptrdiff_t)i - PAD, a[i], r[i]);
        fill_arenas(c);
        return 0;
    }
    return 1;
}

static void begin(const char *what)
{
    snprintf(current, sizeof(current), "%s", what);
}

static void expect_code(ctx_t *c, const char *what, weft_status_t got, weft_status_t want)
{
    int ok = 1;
    if (got != want) {
        const char *gs = weft_status_str(got);
        fail(c, what, "returned %d (%s), expected %d (%s)", (int)got, gs ? gs : "NULL",
             (int)want, weft_status_str(want));
        ok = 0;
    } else if (want != WEFT_OK) {
        const char *e = weft_last_error();
        if (e == NULL || e[0] == '\0') {
            fail(c, what, "returned %s but weft_last_error() is empty", weft_status_str(got));
            ok = 0;
        }
    }
    if (!arenas_intact(c, what))
        ok = 0;
    if (ok)
        c->passed++;
}

static void expect_invalid(ctx_t *c, const char *what, weft_status_t got)
{
    expect_code(c, what, got, WEFT_ERR_INVALID_ARG);
}

/* A sentinel handle that a failing call must leave alone. */
#define SENTINEL_REQ ((weft_request_t *)(uintptr_t)0x5e57)
#define SENTINEL_COMM ((weft_comm_t *)(uintptr_t)0x5e58)

static void expect_req_untouched(ctx_t *c, const char *what, weft_request_t *r)
{
    if (r != SENTINEL_REQ)
        fail(c, what, "*req_p was written (%p) by a failing call", (void *)r);
    else
        c->passed++;
}

/* ---- the checks ---- */

static void check_strings(ctx_t *c)
{
    begin("weft_status_str");
    for (int s = -12; s <= 2; s++) {
        const char *str = weft_status_str((weft_status_t)s);
        char what[64];
        snprintf(what, sizeof(what), "weft_status_str(%d)", s);
        if (str == NULL || (s >= WEFT_ERR_INTERNAL && s <= WEFT_IN_PROGRESS && !str[0]))
            fail(c, what, "returned %s", str ? "\"\"" : "NULL");
        else
            c->passed++;
    }
    begin("names of unknown dtypes and ops");
    int bad_d[] = { -1, WEFT_NUM_DTYPES, 99 };
    for (int k = 0; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof(what), "weft_dtype_name/size(%d)", bad_d[k]);
        if (weft_dtype_name((weft_dtype_t)bad_d[k]) != NULL ||
            weft_dtype_size((weft_dtype_t)bad_d[k]) != 0)
            fail(c, what, "expected NULL and 0");
        else
            c->passed++;
        snprintf(what, sizeof(what), "weft_op_name(%d)", bad_d[k]);
        if (weft_op_name((weft_op_t)bad_d[k]) != NULL)
            fail(c, what, "expected NULL");
        else
            c->passed++;
    }
    static const size_t sizes[WEFT_NUM_DTYPES] = { 1, 1, 4, 4, 8, 8, 2, 2, 4, 8 };
    for (int d = 0; d < WEFT_NUM_DTYPES; d++) {
        if (weft_dtype_name((weft_dtype_t)d) == NULL || weft_dtype_size((weft_dtype_t)d) != sizes[d])
            fail(c, "weft_dtype_name/size", "dtype %d: name %s size %zu, expected size %zu", d,
                 weft_dtype_name((weft_dtype_t)d) ? "set" : "NULL",
                 weft_dtype_size((weft_dtype_t)d), sizes[d]);
        else
            c->passed++;
    }
}

static void check_init_rank(ctx_t *c)
{
    static const struct { int rank, nranks; const char *rdv; const char *what; } bad[] = {
        { 0, 0, "127.0.0.1:0", "nranks 0" },
        { 0, -3, "127.0.0.1:0", "nranks -3" },
        { -1, 1, "127.0.0.1:0", "rank -1" },
        { 1, 1, "127.0.0.1:0", "rank == nranks" },
        { 5, 2, "127.0.0.1:0", "rank > nranks" },
        { 0, 1, NULL, "NULL rendezvous" },
        { 0, 1, "", "empty rendezvous" },
        { 0, 1, "nocolon", "rendezvous without a port" },
        { 0, 1, "host:notaport", "rendezvous port not a number" },
        { 0, 1, "127.0.0.1:", "rendezvous with an empty port" },
        { 0, 1, "127.0.0.1:70000", "rendezvous port out of range" },
        { 0, 1, "127.0.0.1:-5", "rendezvous negative port" },
        { 0, 1, "::1:29500", "an IPv6 rendezvous (IPv4 only, said at once)" },
        { 0, 1, "[::1]:29500", "a bracketed IPv6 rendezvous" },
        { 0, 2, "127.0.0.1:0", "2 ranks at port 0" },
    };
    /* a refused init leaves the process as it was: SIGUSR1 at its default (the
     * recorder's handler is set by an init that succeeds, none yet here; before
     * 2026-11-28 an init refused past the config, a rendezvous that does not resolve or
     * has port 0, had set it) */
    struct sigaction before, after;
    sigaction(SIGUSR1, NULL, &before);
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        char what[128];
        snprintf(what, sizeof(what), "comm_init_rank(%d, %d, %s%s%s): %s", bad[k].rank,
                 bad[k].nranks, bad[k].rdv ? "\"" : "", bad[k].rdv ? bad[k].rdv : "NULL",
                 bad[k].rdv ? "\"" : "", bad[k].what);
        begin(what);
        weft_comm_t *m = SENTINEL_COMM;
        expect_invalid(c, what, weft_comm_init_rank(bad[k].rank, bad[k].nranks, bad[k].rdv, &m));
        if (m != SENTINEL_COMM)
            fail(c, what, "*comm_p was written by a failing call");
    }
    begin("refused inits leave SIGUSR1 alone");
    sigaction(SIGUSR1, NULL, &after);
    if (after.sa_handler != before.sa_handler)
        fail(c, "refused inits leave SIGUSR1 alone", "a refused init changed SIGUSR1's handler");
    begin("comm_init_rank(comm_p NULL)");
    expect_invalid(c, "comm_init_rank(comm_p NULL)",
                   weft_comm_init_rank(0, 1, "127.0.0.1:0", NULL));
    begin("comm_init(comm_p NULL)");
    expect_invalid(c, "comm_init(comm_p NULL)", weft_comm_init(NULL));
}

/* A bad knob in the environment fails init with INVALID_ARG naming the knob, before any
 * socket exists; the variable is restored afterwards (weftrun may have set it). */
static void check_bad_config(ctx_t *c)
{
    static const struct { const char *var, *val; } bad[] = {
        { "WEFT_SOCKET_BUFFSIZE", "lots" },
        { "WEFT_SOCKET_BUFFSIZE", "32K" },          /* below 64K */
        { "WEFT_SOCKET_BUFFSIZE", "2G" },           /* above 1G */
        { "WEFT_SOCKET_BUFFSIZE", "-4M" },
        { "WEFT_BUFFSIZE", "1K" },                  /* below 64K */
        { "WEFT_BUFFSIZE", "18446744073709551615" }, /* the shm ring's size wrapped to 0 */
        { "WEFT_BUFFSIZE", "8G" },                  /* above 4G */
        { "WEFT_BUFFSIZE", " -1" },                 /* strtoull: 2^64 - 1 */
        { "WEFT_REG_MIN", " -64" },
        { "WEFT_DIRECT_MAX", " -5" },
        { "WEFT_CHUNK", "100" },                    /* below 256 */
        { "WEFT_ALGO", "fastest" },
        { "WEFT_TRANSPORT", "carrier-pigeon" },
        { "WEFT_TIMEOUT", "soon" },
        { "WEFT_TIMEOUT", "inf" },                  /* deadlines are uint64_t ns */
        { "WEFT_TIMEOUT", "1e30" },
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        char what[128], *old = getenv(bad[k].var);
        old = old ? strdup(old) : NULL;
        snprintf(what, sizeof(what), "comm_init_rank with %s=%s", bad[k].var, bad[k].val);
        begin(what);
        setenv(bad[k].var, bad[k].val, 1);
        weft_comm_t *m = SENTINEL_COMM;
        expect_invalid(c, what, weft_comm_init_rank(0, 1, "127.0.0.1:0", &m));
        if (m != SENTINEL_COMM)
            fail(c, what, "*comm_p was written by a failing call");
        const char *err = weft_last_error();
        if (err == NULL || strstr(err, bad[k].var) == NULL)
            fail(c, what, "the error does not name %s: %s", bad[k].var, err ? err : "NULL");
        if (old) {
            setenv(bad[k].var, old, 1);
            free(old);
        } else {
            unsetenv(bad[k].var);
        }
    }
    /* a frame of 4 GiB + 64 (its 32-bit length cut to 64: the sender returned OK with
     * nothing sent) is refused even where WEFT_BUFFSIZE would hold it */
    const char *what = "comm_init_rank with WEFT_BUFFSIZE=4G WEFT_CHUNK=4294967360";
    char *old_b = getenv("WEFT_BUFFSIZE"), *old_c = getenv("WEFT_CHUNK");
    old_b = old_b ? strdup(old_b) : NULL;
    old_c = old_c ? strdup(old_c) : NULL;
    begin(what);
    setenv("WEFT_BUFFSIZE", "4G", 1);
    setenv("WEFT_CHUNK", "4294967360", 1);
    weft_comm_t *m = SENTINEL_COMM;
    expect_invalid(c, what, weft_comm_init_rank(0, 1, "127.0.0.1:0", &m));
    if (m != SENTINEL_COMM)
        fail(c, what, "*comm_p was written by a failing call");
    if (strstr(weft_last_error(), "1G at most") == NULL)
        fail(c, what, "the error does not give the ceiling: %s", weft_last_error());
    old_b ? setenv("WEFT_BUFFSIZE", old_b, 1) : unsetenv("WEFT_BUFFSIZE");
    old_c ? setenv("WEFT_CHUNK", old_c, 1) : unsetenv("WEFT_CHUNK");
    free(old_b);
    free(old_c);

    /* a WEFT_SECRET longer than weft keeps is refused, not cut to its first 255 bytes
     * (two jobs whose secrets differed past them authenticated each other) */
    what = "comm_init_rank with a WEFT_SECRET of 300 bytes";
    begin(what);
    char long_secret[301], *old_s = getenv("WEFT_SECRET");
    old_s = old_s ? strdup(old_s) : NULL;
    memset(long_secret, 'k', 300);
    long_secret[300] = '\0';
    setenv("WEFT_SECRET", long_secret, 1);
    m = SENTINEL_COMM;
    expect_invalid(c, what, weft_comm_init_rank(0, 1, "127.0.0.1:0", &m));
    if (m != SENTINEL_COMM)
        fail(c, what, "*comm_p was written by a failing call");
    if (strstr(weft_last_error(), "WEFT_SECRET") == NULL)
        fail(c, what, "the error does not name WEFT_SECRET: %s", weft_last_error());
    old_s ? setenv("WEFT_SECRET", old_s, 1) : unsetenv("WEFT_SECRET");
    free(old_s);
}

/* Every call with comm == NULL. */
static void check_null_comm(ctx_t *c)
{
    void *s = c->send, *r = c->recv;
    weft_dtype_t f = WEFT_FLOAT32;
    weft_request_t *q;
#define NC(name, call) do { begin(name " (NULL comm)"); expect_invalid(c, name " (NULL comm)", call); } while (0)
    NC("allreduce", weft_allreduce(s, r, 4, f, WEFT_SUM, NULL));
    NC("reduce_scatter", weft_reduce_scatter(s, r, 4, f, WEFT_SUM, NULL));
    NC("allgather", weft_allgather(s, r, 4, f, NULL));
    NC("broadcast", weft_broadcast(s, r, 4, f, 0, NULL));
    NC("reduce", weft_reduce(s, r, 4, f, WEFT_SUM, 0, NULL));
    NC("alltoall", weft_alltoall(s, r, 4, f, NULL));
    NC("send", weft_send(s, 4, f, 0, NULL));
    NC("recv", weft_recv(r, 4, f, 0, NULL));
    NC("sendrecv", weft_sendrecv(s, 4, 0, r, 4, 0, f, NULL));
    NC("barrier", weft_barrier(NULL));
    NC("comm_destroy", weft_comm_destroy(NULL));
    NC("comm_abort", weft_comm_abort(NULL));
    weft_comm_t *sub = SENTINEL_COMM;
    NC("comm_split", weft_comm_split(NULL, 0, 0, &sub));
    if (sub != SENTINEL_COMM)
        fail(c, "comm_split (NULL comm)", "*comm_p was written by a failing call");
    q = SENTINEL_REQ;
    NC("iallreduce", weft_iallreduce(s, r, 4, f, WEFT_SUM, NULL, &q));
    expect_req_untouched(c, "iallreduce (NULL comm)", q);
    NC("ireduce_scatter", weft_ireduce_scatter(s, r, 4, f, WEFT_SUM, NULL, &q));
    expect_req_untouched(c, "ireduce_scatter (NULL comm)", q);
    NC("iallgather", weft_iallgather(s, r, 4, f, NULL, &q));
    expect_req_untouched(c, "iallgather (NULL comm)", q);
    NC("ibroadcast", weft_ibroadcast(s, r, 4, f, 0, NULL, &q));
    expect_req_untouched(c, "ibroadcast (NULL comm)", q);
#undef NC
}

/* One dtype or op value, through every call that takes it. */
static void check_dtype_op(ctx_t *c, int dt, int op, const char *tag)
{
    void *s = c->send, *r = c->recv;
    weft_comm_t *m = c->comm;
    int me = c->rank, peer = (c->rank + 1) % c->nranks;
    weft_dtype_t d = (weft_dtype_t)dt;
    weft_op_t o = (weft_op_t)op;
    weft_request_t *q = SENTINEL_REQ;
    char what[128];
#define DC(name, call) do { snprintf(what, sizeof(what), "%s (%s)", name, tag); begin(what); \
        expect_invalid(c, what, call); } while (0)
    DC("allreduce", weft_allreduce(s, r, 4, d, o, m));
    DC("reduce_scatter", weft_reduce_scatter(s, r, 4, d, o, m));
    DC("reduce", weft_reduce(s, r, 4, d, o, me, m));
    DC("iallreduce", weft_iallreduce(s, r, 4, d, o, m, &q));
    expect_req_untouched(c, what, q);
    DC("ireduce_scatter", weft_ireduce_scatter(s, r, 4, d, o, m, &q));
    expect_req_untouched(c, what, q);
    if (op != WEFT_SUM)
        return;                         /* the rest take no op */
    DC("allgather", weft_allgather(s, r, 4, d, m));
    DC("broadcast", weft_broadcast(s, r, 4, d, me, m));
    DC("alltoall", weft_alltoall(s, r, 4, d, m));
    if (c->nranks > 1) {
        DC("send", weft_send(s, 4, d, peer, m));
        DC("recv", weft_recv(r, 4, d, peer, m));
    }
    DC("sendrecv", weft_sendrecv(s, 4, peer, r, 4, (me + c->nranks - 1) % c->nranks, d, m));
    DC("iallgather", weft_iallgather(s, r, 4, d, m, &q));
    expect_req_untouched(c, what, q);
    DC("ibroadcast", weft_ibroadcast(s, r, 4, d, me, m, &q));
    expect_req_untouched(c, what, q);
#undef DC
}

static void check_ranks(ctx_t *c)
{
    void *s = c->send, *r = c->recv;
    weft_comm_t *m = c->comm;
    int P = c->nranks, me = c->rank, ok_peer = (me + 1) % P;
    weft_dtype_t f = WEFT_FLOAT32;
    weft_request_t *q = SENTINEL_REQ;
    int bad[] = { -1, P, P + 7, -100 };
    char what[128];
#define RC(fmt, call) do { snprintf(what, sizeof(what), fmt, b); begin(what); \
        expect_invalid(c, what, call); } while (0)
    for (int k = 0; k < 4; k++) {
        int b = bad[k];
        RC("broadcast root %d", weft_broadcast(s, r, 4, f, b, m));
        RC("reduce root %d", weft_reduce(s, r, 4, f, WEFT_SUM, b, m));
        RC("ibroadcast root %d", weft_ibroadcast(s, r, 4, f, b, m, &q));
        expect_req_untouched(c, what, q);
        RC("send peer %d", weft_send(s, 4, f, b, m));
        RC("recv peer %d", weft_recv(r, 4, f, b, m));
        RC("sendrecv dst %d", weft_sendrecv(s, 4, b, r, 4, (me + P - 1) % P, f, m));
        RC("sendrecv src %d", weft_sendrecv(s, 4, ok_peer, r, 4, b, f, m));
    }
#undef RC
}

/* NULL buffers with count > 0; each is wrong on this rank by itself. */
static void check_null_buffers(ctx_t *c)
{
    void *s = c->send, *r = c->recv;
    weft_comm_t *m = c->comm;
    int P = c->nranks, me = c->rank, next = (me + 1) % P, prev = (me + P - 1) % P;
    weft_dtype_t f = WEFT_FLOAT32;
    weft_request_t *q = SENTINEL_REQ;
#define NB(name, call) do { begin(name); expect_invalid(c, name, call); } while (0)
    NB("allreduce NULL send", weft_allreduce(NULL, r, 4, f, WEFT_SUM, m));
    NB("allreduce NULL recv", weft_allreduce(s, NULL, 4, f, WEFT_SUM, m));
    NB("allreduce NULL both", weft_allreduce(NULL, NULL, 4, f, WEFT_SUM, m));
    NB("reduce_scatter NULL send", weft_reduce_scatter(NULL, r, 4, f, WEFT_SUM, m));
    NB("reduce_scatter NULL recv", weft_reduce_scatter(s, NULL, 4, f, WEFT_SUM, m));
    NB("allgather NULL send", weft_allgather(NULL, r, 4, f, m));
    NB("allgather NULL recv", weft_allgather(s, NULL, 4, f, m));
    NB("broadcast NULL send at root", weft_broadcast(NULL, r, 4, f, me, m));
    NB("broadcast NULL recv", weft_broadcast(s, NULL, 4, f, me, m));
    NB("reduce NULL send", weft_reduce(NULL, r, 4, f, WEFT_SUM, me, m));
    NB("reduce NULL recv at root", weft_reduce(s, NULL, 4, f, WEFT_SUM, me, m));
    NB("alltoall NULL send", weft_alltoall(NULL, r, 4, f, m));
    NB("alltoall NULL recv", weft_alltoall(s, NULL, 4, f, m));
    if (P > 1) {
        NB("send NULL", weft_send(NULL, 4, f, next, m));
        NB("recv NULL", weft_recv(NULL, 4, f, prev, m));
    }
    NB("sendrecv NULL send", weft_sendrecv(NULL, 4, next, r, 4, prev, f, m));
    NB("sendrecv NULL recv", weft_sendrecv(s, 4, next, NULL, 4, prev, f, m));
    NB("iallreduce NULL recv", weft_iallreduce(s, NULL, 4, f, WEFT_SUM, m, &q));
    expect_req_untouched(c, "iallreduce NULL recv", q);
    NB("ireduce_scatter NULL send", weft_ireduce_scatter(NULL, r, 4, f, WEFT_SUM, m, &q));
    expect_req_untouched(c, "ireduce_scatter NULL send", q);
    NB("iallgather NULL recv", weft_iallgather(s, NULL, 4, f, m, &q));
    expect_req_untouched(c, "iallgather NULL recv", q);
    NB("ibroadcast NULL send at root", weft_ibroadcast(NULL, r, 4, f, me, m, &q));
    expect_req_untouched(c, "ibroadcast NULL send at root", q);
    /* NULL request pointers. */
    NB("iallreduce req_p NULL", weft_iallreduce(s, r, 4, f, WEFT_SUM, m, NULL));
    NB("ireduce_scatter req_p NULL", weft_ireduce_scatter(s, r, 4, f, WEFT_SUM, m, NULL));
    NB("iallgather req_p NULL", weft_iallgather(s, r, 4, f, m, NULL));
    NB("ibroadcast req_p NULL", weft_ibroadcast(s, r, 4, f, me, m, NULL));
    NB("wait(NULL)", weft_wait(NULL));
    int done = 7;
    NB("test(NULL, &done)", weft_test(NULL, &done));
    if (done != 7)
        fail(c, "test(NULL, &done)", "*done_p was written by a failing call");
    weft_comm_t *sub = SENTINEL_COMM;
    (void)sub;
    NB("comm_split comm_p NULL", weft_comm_split(m, 0, 0, NULL));
#undef NB
}

/* count * size (or * nranks) overflows size_t: must be refused before any copy. */
static void check_overflow(ctx_t *c)
{
    void *s = c->send, *r = c->recv;
    weft_comm_t *m = c->comm;
    int P = c->nranks, me = c->rank, next = (me + 1) % P, prev = (me + P - 1) % P;
    weft_request_t *q = SENTINEL_REQ;
    size_t huge = SIZE_MAX / 2;
    weft_dtype_t f = WEFT_FLOAT32, d = WEFT_FLOAT64;
#define OV(name, call) do { begin(name); expect_invalid(c, name, call); } while (0)
    OV("allreduce count SIZE_MAX/2 float", weft_allreduce(s, r, huge, f, WEFT_SUM, m));
    OV("allreduce count SIZE_MAX/2 double", weft_allreduce(s, r, huge, d, WEFT_MAX, m));
    OV("reduce_scatter count SIZE_MAX/2", weft_reduce_scatter(s, r, huge, f, WEFT_SUM, m));
    OV("allgather count SIZE_MAX/2", weft_allgather(s, r, huge, f, m));
    OV("broadcast count SIZE_MAX/2", weft_broadcast(s, r, huge, f, me, m));
    /* count * size fits, beyond the bound: refused on a non-root too (it sends nothing,
     * and used to accept what its root refused) */
    if (P > 1)
        OV("broadcast count SIZE_MAX/8 at a non-root",
           weft_broadcast(s, r, SIZE_MAX / 8, f, next, m));
    OV("reduce count SIZE_MAX/2", weft_reduce(s, r, huge, f, WEFT_SUM, me, m));
    OV("alltoall count SIZE_MAX/2", weft_alltoall(s, r, huge, f, m));
    if (P > 1) {
        OV("send count SIZE_MAX/2", weft_send(s, huge, f, next, m));
        OV("recv count SIZE_MAX/2", weft_recv(r, huge, f, prev, m));
    }
    OV("sendrecv sendcount SIZE_MAX/2", weft_sendrecv(s, huge, next, r, 4, prev, f, m));
    OV("sendrecv recvcount SIZE_MAX/2", weft_sendrecv(s, 4, next, r, huge, prev, f, m));
    /* bytes = count for uint8: the product does not overflow, the bound must hold (a
     * negative int passed as a count crashed the process in the self copy) */
    OV("sendrecv uint8 sendcount SIZE_MAX",
       weft_sendrecv(s, SIZE_MAX, next, r, 4, prev, WEFT_UINT8, m));
    OV("sendrecv uint8 recvcount SIZE_MAX",
       weft_sendrecv(s, 4, next, r, SIZE_MAX, prev, WEFT_UINT8, m));
    OV("iallreduce count SIZE_MAX/2", weft_iallreduce(s, r, huge, f, WEFT_SUM, m, &q));
    expect_req_untouched(c, "iallreduce count SIZE_MAX/2", q);
    OV("ibroadcast count SIZE_MAX/2", weft_ibroadcast(s, r, huge, d, me, m, &q));
    expect_req_untouched(c, "ibroadcast count SIZE_MAX/2", q);
    if (P > 1) {
        /* count * size fits, times nranks does not. */
        size_t third = SIZE_MAX / 6;
        OV("allgather sendcount*nranks overflow", weft_allgather(s, r, third, f, m));
        OV("reduce_scatter recvcount*nranks overflow",
           weft_reduce_scatter(s, r, third, f, WEFT_SUM, m));
        OV("alltoall count*nranks overflow", weft_alltoall(s, r, third, f, m));
        OV("iallgather sendcount*nranks overflow", weft_iallgather(s, r, third, f, m, &q));
        expect_req_untouched(c, "iallgather sendcount*nranks overflow", q);
    }
#undef OV
}

/* Overlapping send and recv that are not the legal in-place layout. */
static void check_layout(ctx_t *c)
{
    weft_comm_t *m = c->comm;
    int me = c->rank;
    size_t n = 8, es = 4;
    unsigned char *b = c->send;         /* send arena: room on both sides */
    weft_dtype_t f = WEFT_FLOAT32;
    weft_request_t *q = SENTINEL_REQ;
    unsigned char *legal_rs = b + (size_t)me * n * es;   /* reduce_scatter recv */
    char what[128];
#define LC(desc, call) do { snprintf(what, sizeof(what), "%s (rank %d)", desc, me); begin(what); \
        expect_invalid(c, what, call); } while (0)
    LC("reduce_scatter recv one element past the in-place slot",
       weft_reduce_scatter(b, legal_rs + es, n, f, WEFT_SUM, m));
    LC("reduce_scatter recv one element before the in-place slot",
       weft_reduce_scatter(b, legal_rs - es, n, f, WEFT_SUM, m));
    LC("ireduce_scatter recv one element past the in-place slot",
       weft_ireduce_scatter(b, legal_rs + es, n, f, WEFT_SUM, m, &q));
    expect_req_untouched(c, what, q);
    if (me != 0) {
        LC("reduce_scatter recv == send on a rank other than 0",
           weft_reduce_scatter(b, b, n, f, WEFT_SUM, m));
    }
    /* allgather: send must be recv + rank*sendcount*size */
    unsigned char *legal_ag = b + (size_t)me * n * es;   /* send when recv == b */
    LC("allgather send one element past the in-place slot",
       weft_allgather(legal_ag + es, b, n, f, m));
    LC("allgather send one element before the in-place slot",
       weft_allgather(legal_ag - es, b, n, f, m));
    LC("iallgather send one element past the in-place slot",
       weft_iallgather(legal_ag + es, b, n, f, m, &q));
    expect_req_untouched(c, what, q);
    if (me != 0)
        LC("allgather send == recv on a rank other than 0", weft_allgather(b, b, n, f, m));
    LC("allreduce recv overlapping send by one element", weft_allreduce(b, b + es, n, f,
                                                                        WEFT_SUM, m));
    LC("sendrecv overlapping buffers", weft_sendrecv(b, n, (me + 1) % c->nranks, b + es, n,
                                                      (me + c->nranks - 1) % c->nranks, f, m));
    LC("sendrecv to self with sendcount != recvcount",
       weft_sendrecv(c->send, 4, me, c->recv, 3, me, f, m));
#undef LC
}

/* count == 0: a successful no-op, with real buffers and with NULL ones. */
static void check_count0(ctx_t *c)
{
    weft_comm_t *m = c->comm;
    int P = c->nranks, me = c->rank, next = (me + 1) % P, prev = (me + P - 1) % P;
    for (int pass = 0; pass < 2; pass++) {
        void *s = pass ? NULL : c->send, *r = pass ? NULL : c->recv;
        const char *tag = pass ? "NULL buffers" : "real buffers";
        char what[128];
        for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++) {
            weft_dtype_t d = (weft_dtype_t)dt;
#define Z(name, call) do { snprintf(what, sizeof(what), "%s count 0 %s dtype %d", name, tag, dt); \
        begin(what); expect_code(c, what, call, WEFT_OK); } while (0)
            Z("allreduce", weft_allreduce(s, r, 0, d, WEFT_AVG, m));
            Z("reduce_scatter", weft_reduce_scatter(s, r, 0, d, WEFT_PROD, m));
            Z("allgather", weft_allgather(s, r, 0, d, m));
            Z("broadcast", weft_broadcast(s, r, 0, d, P - 1, m));
            Z("reduce", weft_reduce(s, r, 0, d, WEFT_MIN, 0, m));
            Z("alltoall", weft_alltoall(s, r, 0, d, m));
            Z("sendrecv", weft_sendrecv(s, 0, next, r, 0, prev, d, m));
            /* a direction of count 0 is no direction: its rank is not looked at */
            Z("sendrecv both ways empty, ranks -1", weft_sendrecv(s, 0, -1, r, 0, -1, d, m));
            if (P > 1 && me % 2 == 0 && me + 1 < P)
                Z("send", weft_send(s, 0, d, me + 1, m));
            if (P > 1 && me % 2 == 1)
                Z("recv", weft_recv(r, 0, d, me - 1, m));
        }
        weft_request_t *q[4] = { 0 };
        const char *names[4] = { "iallreduce", "ireduce_scatter", "iallgather", "ibroadcast" };
        weft_status_t st[4];
        st[0] = weft_iallreduce(s, r, 0, WEFT_FLOAT32, WEFT_SUM, m, &q[0]);
        st[1] = weft_ireduce_scatter(s, r, 0, WEFT_INT8, WEFT_MAX, m, &q[1]);
        st[2] = weft_iallgather(s, r, 0, WEFT_FLOAT64, m, &q[2]);
        st[3] = weft_ibroadcast(s, r, 0, WEFT_BFLOAT16, 0, m, &q[3]);
        for (int k = 0; k < 4; k++) {
            snprintf(what, sizeof(what), "%s count 0 %s", names[k], tag);
            begin(what);
            expect_code(c, what, st[k], WEFT_OK);
            if (st[k] != WEFT_OK)
                continue;
            if (q[k] == NULL) {
                fail(c, what, "returned WEFT_OK but no request to wait on");
                continue;
            }
            int done = 0;
            weft_status_t t = weft_test(q[k], &done);
            if (t != WEFT_OK || !done)
                fail(c, what, "weft_test: %s, done=%d (expected ok, 1)", weft_status_str(t), done);
            expect_code(c, what, weft_wait(q[k]), WEFT_OK);
        }
    }
#undef Z
    /* one-way sendrecv, the empty direction's rank out of range (MPI_PROC_NULL-like),
     * in buffers of its own (the arena's must stay as they are) */
    float one[4] = { 1, 2, 3, 4 }, got[4] = { 0 };
    weft_status_t st = WEFT_OK;
    if (P > 1 && me + 1 < P && me % 2 == 0)
        st = weft_sendrecv(one, 4, me + 1, got, 0, -1, WEFT_FLOAT32, m);
    else if (P > 1 && me % 2 == 1)
        st = weft_sendrecv(one, 0, -1, got, 4, me - 1, WEFT_FLOAT32, m);
    if (st != WEFT_OK || (P > 1 && me % 2 == 1 && (got[0] != 1 || got[3] != 4)))
        fail(c, "one-way sendrecv, the empty direction's rank -1", "%s: %s (got %g..%g)",
             weft_status_str(st), weft_last_error(), got[0], got[3]);
}

/* The communicator still works: a checked allreduce, reduce_scatter in place, iallreduce. */
static void check_still_works(ctx_t *c, const char *when)
{
    int P = c->nranks, me = c->rank;
    char what[128];
    float in[ELEMS], out[ELEMS];
    for (int i = 0; i < ELEMS; i++) {
        in[i] = (float)(me + i);
        out[i] = -1.0f;
    }
    snprintf(what, sizeof(what), "allreduce after %s", when);
    begin(what);
    weft_status_t st = weft_allreduce(in, out, ELEMS, WEFT_FLOAT32, WEFT_SUM, c->comm);
    int bad = st != WEFT_OK;
    for (int i = 0; i < ELEMS && !bad; i++)
        if (out[i] != (float)(P * i + P * (P - 1) / 2))
            bad = 1;
    if (bad)
        fail(c, what, "status %s, out[0] %g", weft_status_str(st), out[0]);
    else
        c->passed++;

    int32_t *buf = calloc((size_t)P * ELEMS, sizeof(int32_t));
    for (int i = 0; i < P * ELEMS; i++)
        buf[i] = i;
    snprintf(what, sizeof(what), "in-place reduce_scatter after %s", when);
    begin(what);
    st = weft_reduce_scatter(buf, buf + me * ELEMS, ELEMS, WEFT_INT32, WEFT_SUM, c->comm);
    bad = st != WEFT_OK;
    for (int i = 0; i < ELEMS && !bad; i++)
        if (buf[me * ELEMS + i] != P * (me * ELEMS + i))
            bad = 1;
    if (bad)
        fail(c, what, "status %s", weft_status_str(st));
    else
        c->passed++;
    free(buf);

    snprintf(what, sizeof(what), "iallreduce after %s", when);
    begin(what);
    weft_request_t *q = NULL;
    int64_t x = me + 1, y = 0;
    st = weft_iallreduce(&x, &y, 1, WEFT_INT64, WEFT_MAX, c->comm, &q);
    if (st == WEFT_OK)
        st = weft_wait(q);
    if (st != WEFT_OK || y != P)
        fail(c, what, "status %s, got %" PRId64 " expected %d", weft_status_str(st), y, P);
    else
        c->passed++;
}

/* Threads allocating at once: each keeps 40 regions live, writes its own byte into each,
 * and checks them before freeing (a registry that lost or doubled an entry fails a free;
 * an overrun of it is an ASan report in CI's sanitizer run). */
#define MEM_THREADS 4
#define MEM_PER_THREAD 40

static void *mem_thread(void *arg)
{
    unsigned char tag = (unsigned char)(uintptr_t)arg;
    void *p[MEM_PER_THREAD];
    long bad = 0;
    for (int i = 0; i < MEM_PER_THREAD; i++) {
        if (weft_mem_alloc(&p[i], 4096 + (size_t)i) != WEFT_OK) {
            p[i] = NULL;
            bad++;
            continue;
        }
        memset(p[i], tag, 4096);
    }
    for (int i = 0; i < MEM_PER_THREAD; i++) {
        if (p[i] == NULL)
            continue;
        for (size_t j = 0; j < 4096; j++)
            bad += ((unsigned char *)p[i])[j] != tag;
        bad += weft_mem_free(p[i]) != WEFT_OK;
    }
    return (void *)(uintptr_t)bad;
}

static void check_mem_threads(ctx_t *c)
{
    pthread_t th[MEM_THREADS];
    long bad = 0;
    begin("weft_mem_alloc and weft_mem_free from 4 threads at once");
    for (int t = 0; t < MEM_THREADS; t++)
        if (pthread_create(&th[t], NULL, mem_thread, (void *)(uintptr_t)(t + 1)) != 0) {
            fail(c, current, "pthread_create failed");
            return;
        }
    for (int t = 0; t < MEM_THREADS; t++) {
        void *r = NULL;
        pthread_join(th[t], &r);
        bad += (long)(uintptr_t)r;
    }
    if (bad)
        fail(c, current, "%ld failed allocations, frees or overwritten bytes", bad);
    else
        c->passed++;
}

/* weft_mem_alloc and weft_mem_free: bad arguments fail and change nothing; good memory
 * is zeroed, writable, and freed once. */
static void check_mem(ctx_t *c)
{
    void *p = SENTINEL_REQ, *q = NULL;
    begin("weft_mem_alloc(NULL, 4096)");
    expect_invalid(c, current, weft_mem_alloc(NULL, 4096));
    begin("weft_mem_alloc(&p, 0)");
    expect_invalid(c, current, weft_mem_alloc(&p, 0));
    if (p != SENTINEL_REQ)
        fail(c, current, "*ptr_p was written by a failing call");
    begin("weft_mem_alloc(&p, SIZE_MAX)");
    expect_invalid(c, current, weft_mem_alloc(&p, SIZE_MAX));
    if (p != SENTINEL_REQ)
        fail(c, current, "*ptr_p was written by a failing call");
    begin("weft_mem_free(malloc'd memory)");
    expect_invalid(c, current, weft_mem_free(c->send_arena));
    begin("weft_mem_free(NULL)");
    expect_code(c, current, weft_mem_free(NULL), WEFT_OK);

    begin("weft_mem_alloc(&q, 10000)");
    weft_status_t st = weft_mem_alloc(&q, 10000);
    int bad = st != WEFT_OK || q == NULL || ((uintptr_t)q & 4095) != 0;
    for (size_t i = 0; i < 10000 && !bad; i++)
        bad = ((unsigned char *)q)[i] != 0;
    if (bad) {
        fail(c, current, "status %s, ptr %p: not zeroed page-aligned memory",
             weft_status_str(st), q);
        return;
    }
    memset(q, 0x5a, 10000);
    c->passed++;
    begin("weft_mem_free(inside an allocation)");
    expect_invalid(c, current, weft_mem_free((char *)q + 64));
    begin("weft_mem_free(the allocation)");
    expect_code(c, current, weft_mem_free(q), WEFT_OK);
    begin("weft_mem_free(the same allocation again)");
    expect_invalid(c, current, weft_mem_free(q));
}

int main(void)
{
    ctx_t c = { 0 };
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGFPE, on_crash);
    signal(SIGABRT, on_crash);
    setvbuf(stderr, NULL, _IOLBF, 0);
    c.send_arena = calloc(1, ARENA);
    c.recv_arena = calloc(1, ARENA);
    c.send_ref = calloc(1, ARENA);
    c.recv_ref = calloc(1, ARENA);
    c.send = c.send_arena + PAD;
    c.recv = c.recv_arena + PAD;
    fill_arenas(&c);

    check_strings(&c);
    check_init_rank(&c);
    check_bad_config(&c);
    check_mem(&c);
    check_mem_threads(&c);

    weft_status_t st;
    begin("communicator init");
    if (getenv("WEFT_RANK") || getenv("RANK") || getenv("OMPI_COMM_WORLD_RANK") ||
        getenv("PMI_RANK") || getenv("SLURM_PROCID"))
        st = weft_comm_init(&c.comm);
    else
        st = weft_comm_init_rank(0, 1, "127.0.0.1:0", &c.comm);
    if (st != WEFT_OK || c.comm == NULL) {
        fprintf(stderr, "FAIL test_args: communicator init: %s: %s\n", weft_status_str(st),
                weft_last_error());
        printf("test_args: %ld passed, %ld failed\n", c.passed, c.failed + 1);
        return 1;
    }
    c.rank = weft_comm_rank(c.comm);
    c.nranks = weft_comm_size(c.comm);
    if (c.nranks < 1 || c.nranks * ELEMS * 8 > ARENA - 2 * PAD || c.rank < 0 ||
        c.rank >= c.nranks) {
        fprintf(stderr, "FAIL test_args: rank %d of %d is not usable here\n", c.rank, c.nranks);
        return 1;
    }

    check_still_works(&c, "init");
    check_null_comm(&c);
    check_dtype_op(&c, 99, WEFT_SUM, "dtype 99");
    check_dtype_op(&c, -1, WEFT_SUM, "dtype -1");
    check_dtype_op(&c, WEFT_NUM_DTYPES, WEFT_SUM, "dtype WEFT_NUM_DTYPES");
    check_dtype_op(&c, WEFT_FLOAT32, 99, "op 99");
    check_dtype_op(&c, WEFT_FLOAT32, -1, "op -1");
    check_dtype_op(&c, WEFT_INT32, WEFT_NUM_OPS, "op WEFT_NUM_OPS");
    check_ranks(&c);
    check_null_buffers(&c);
    check_overflow(&c);
    check_layout(&c);
    check_still_works(&c, "the bad calls");
    check_count0(&c);
    check_still_works(&c, "the count-0 calls");

    /* weft_test with a NULL done_p on a live request. */
    begin("test(req, NULL)");
    weft_request_t *q = NULL;
    float one = 1.0f, sum = 0.0f;
    st = weft_iallreduce(&one, &sum, 1, WEFT_FLOAT32, WEFT_SUM, c.comm, &q);
    if (st != WEFT_OK) {
        fail(&c, "iallreduce for test(req, NULL)", "%s", weft_status_str(st));
    } else {
        expect_invalid(&c, "test(req, NULL)", weft_test(q, NULL));
        st = weft_wait(q);
        if (st != WEFT_OK || sum != (float)c.nranks)
            fail(&c, "wait after test(req, NULL)", "%s, sum %g", weft_status_str(st), sum);
        else
            c.passed++;
    }

    /* weft_last_error() stays valid until the next failing call: a split that succeeds
     * (its transports probed, ib's finding no device) leaves it as it was. */
    begin("last error kept by a good split");
    float x = 0.0f;
    weft_allreduce(&x, &x, 1, (weft_dtype_t)77, WEFT_SUM, c.comm);   /* refused */
    weft_comm_t *half = NULL;
    st = weft_comm_split(c.comm, 0, c.rank, &half);
    if (st != WEFT_OK || strstr(weft_last_error(), "unknown dtype 77") == NULL)
        fail(&c, "last error kept by a good split", "split %s, then weft_last_error() '%s'",
             weft_status_str(st), weft_last_error());
    else
        c.passed++;
    if (half)
        weft_comm_destroy(half);

    /* Totals over all ranks. */
    begin("final allreduce of the counts");
    int64_t mine[2] = { c.passed, c.failed }, all[2] = { 0, 0 };
    st = weft_allreduce(mine, all, 2, WEFT_INT64, WEFT_SUM, c.comm);
    if (st != WEFT_OK) {
        fprintf(stderr, "FAIL rank %d: final allreduce: %s\n", c.rank, weft_status_str(st));
        all[0] = c.passed;
        all[1] = c.failed + 1;
    }
    begin("comm_destroy");
    weft_status_t dst = weft_comm_destroy(c.comm);
    if (dst != WEFT_OK) {
        fprintf(stderr, "FAIL rank %d: comm_destroy: %s\n", c.rank, weft_status_str(dst));
        all[1]++;
    }
    if (c.rank == 0 || st != WEFT_OK)
        printf("test_args: %" PRId64 " passed, %" PRId64 " failed%s\n", all[0], all[1],
               c.nranks > 1 ? " (all ranks)" : "");
    free(c.send_arena);
    free(c.recv_arena);
    free(c.send_ref);
    free(c.recv_ref);
    return all[1] != 0;
}
