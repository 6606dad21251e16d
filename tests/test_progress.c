/*
 * test_progress.c - nonblocking collectives move while the caller computes (comm/progress.c).
 *
 *   weftrun -n N build/tests/test_progress MODE
 *
 * background  iallgather, ireduce_scatter, iallreduce and ibroadcast queued on one comm,
 *             each larger than the shm staging ring, then a busy loop that makes no weft
 *             call and only reads the requests' status (an internal read-only check): all
 *             must complete within 10 s (they do in milliseconds with the progress thread;
 *             with WEFT_PROGRESS_THREAD=0 they never do, and the check fails), in issue
 *             order; weft_test then says done at once, and every result is right
 * order       blocking and nonblocking calls interleaved: a blocking call returns only
 *             after every earlier request completed, completions are seen in issue order,
 *             and every result is right; count-0 calls and a sendrecv to self, behind a
 *             request still pending, complete in order as well
 * peer_kill   (N >= 2) the last rank SIGKILLs itself 100 ms after all ranks queued four
 *             all-gathers; the others compute without weft calls and must see their
 *             requests fail in the background within 2 s of the kill, weft_wait returns
 *             WEFT_ERR_PEER_LOST naming the victim, a later call fails too, and destroy
 *             with requests still unwaited returns (weftrun then exits 137)
 * abort       rank 0's requests wait on rank 1, which is silent; another thread aborts
 *             rank 0's comm after 0.3 s: its requests fail with WEFT_ERR_ABORTED in the
 *             background, and rank 1's next call fails with WEFT_ERR_PEER_LOST
 * timeout     (WEFT_TIMEOUT=1) rank 1 is silent for 3 s: rank 0's request fails with
 *             WEFT_ERR_TIMEOUT in the background within 2.5 s
 * destroy     every rank queues four large ops and rank 0 destroys its comm at once (the
 *             thread is stopped and joined mid-flight); its requests then report done
 *             (ok or WEFT_ERR_ABORTED) and are freed by weft_wait; the other ranks' waits
 *             end (ok or an error) within 3 s, and they destroy theirs
 * small       (N >= 2) a 64 KB iallreduce on the communicator (its first nonblocking
 *             call), then rank 0 calls weft_barrier on a split of all ranks before it
 *             waits, the others wait first: rank 0's progress thread must finish the
 *             small call meanwhile (before 2026-11-27 only a call over 64 KB started the
 *             thread: every rank hung until WEFT_TIMEOUT); done within 5 s, sum right
 * Each rank prints one ok/FAIL line per check and exits 0 when all its checks passed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"
#include "comm_int.h"       /* op_status: reads a request's status without progressing it */

#define BIG ((size_t)1 << 20)  /* floats per rank: 4 MB, more than the 4 MB shm ring holds
                                  once frame headers are counted */
#define NREQ 4

static int bad;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void check(int rank, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(int rank, int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s rank %d: ", ok ? "ok" : "FAIL", rank);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    bad |= !ok;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n, sz);
    if (p == NULL) {
        fprintf(stderr, "test_progress: out of memory\n");
        exit(2);
    }
    return p;
}

/* Computes (no weft call) until every request is done or failed, or `secs` pass;
 * returns the seconds it took (or more than secs). Checks that completions appear in
 * issue order. */
static volatile double sink;
static double compute_until_done(weft_request_t **req, int n, double secs,
                                 int *in_order)
{
    double t0 = now_s(), x = 1.0;
    *in_order = 1;
    for (;;) {
        for (int i = 0; i < 20000; i++)    /* ~20-50 us of arithmetic */
            x = x * 1.0000001 + 1e-9;
        sink = x;
        int ndone = 0;
        for (int i = 0; i < n; i++) {
            int done = op_status(&req[i]->op) != WEFT_IN_PROGRESS;
            if (done && ndone != i)
                *in_order = 0;      /* a later one done before an earlier one */
            ndone += done;
        }
        double t = now_s() - t0;
        if (ndone == n || t > secs)
            return t;
    }
}

/* Inputs: rank r's element i is r * 1000 + i % 1000 (exact in float for every sum). */
static float val(int r, size_t i) { return (float)(r * 1000 + (int)(i % 1000)); }

static void fill(float *b, size_t n, int rank)
{
    for (size_t i = 0; i < n; i++)
        b[i] = val(rank, i);
}

/* Sum over ranks of val(r, i). */
static float sum_val(int nranks, size_t i)
{
    float s = 0;
    for (int r = 0; r < nranks; r++)
        s += val(r, i);
    return s;
}

typedef struct {
    float *ag_send, *ag_recv, *rs_send, *rs_recv, *ar, *bc;
} bufs_t;

static void bufs_init(bufs_t *b, int rank, int nranks)
{
    b->ag_send = xcalloc(BIG, sizeof(float));
    b->ag_recv = xcalloc(BIG * (size_t)nranks, sizeof(float));
    b->rs_send = xcalloc(BIG * (size_t)nranks, sizeof(float));
    b->rs_recv = xcalloc(BIG, sizeof(float));
    b->ar = xcalloc(BIG, sizeof(float));
    b->bc = xcalloc(BIG, sizeof(float));
    fill(b->ag_send, BIG, rank);
    fill(b->rs_send, BIG * (size_t)nranks, rank);
    fill(b->ar, BIG, rank);
    if (rank == 0)
        fill(b->bc, BIG, 7);
}

static void bufs_free(bufs_t *b)
{
    free(b->ag_send);
    free(b->ag_recv);
    free(b->rs_send);
    free(b->rs_recv);
    free(b->ar);
    free(b->bc);
}

/* Returns the first wrong index of the four results, or -1. */
static long verify(const bufs_t *b, int rank, int nranks, const char **what)
{
    for (size_t i = 0; i < BIG * (size_t)nranks; i++)
        if (b->ag_recv[i] != val((int)(i / BIG), i % BIG))
            return *what = "allgather", (long)i;
    for (size_t i = 0; i < BIG; i++)
        if (b->rs_recv[i] != sum_val(nranks, (size_t)rank * BIG + i))
            return *what = "reduce_scatter", (long)i;
    for (size_t i = 0; i < BIG; i++)
        if (b->ar[i] != sum_val(nranks, i))
            return *what = "allreduce", (long)i;
    for (size_t i = 0; i < BIG; i++)
        if (b->bc[i] != val(7, i))
            return *what = "broadcast", (long)i;
    return -1;
}

/* Queues the four; returns how many were queued (4, or up to the first failure). */
static int issue_four(weft_comm_t *c, bufs_t *b, weft_request_t **req)
{
    if (weft_iallgather(b->ag_send, b->ag_recv, BIG, WEFT_FLOAT32, c, &req[0]))
        return 0;
    if (weft_ireduce_scatter(b->rs_send, b->rs_recv, BIG, WEFT_FLOAT32, WEFT_SUM, c, &req[1]))
        return 1;
    if (weft_iallreduce(b->ar, b->ar, BIG, WEFT_FLOAT32, WEFT_SUM, c, &req[2]))
        return 2;
    if (weft_ibroadcast(b->bc, b->bc, BIG, WEFT_FLOAT32, 0, c, &req[3]))
        return 3;
    return 4;
}

static void background(weft_comm_t *c, int rank, int nranks)
{
    bufs_t b;
    weft_request_t *req[NREQ];
    bufs_init(&b, rank, nranks);
    if (issue_four(c, &b, req) != NREQ) {
        check(rank, 0, "issue: %s", weft_last_error());
        return;
    }
    int in_order;
    weft_status_t st;
    double t = compute_until_done(req, NREQ, 10.0, &in_order);
    int ndone = 0;
    for (int i = 0; i < NREQ; i++)
        ndone += op_status(&req[i]->op) != WEFT_IN_PROGRESS;
    check(rank, ndone == NREQ, "%d of %d requests completed in the background while the "
          "caller computed (%.3f s, limit 10 s)", ndone, NREQ, t);
    check(rank, in_order, "completions seen in issue order");
    int all_done = 1;
    for (int i = 0; i < NREQ; i++) {
        int done = 0;
        st = weft_test(req[i], &done);
        all_done &= done && st == WEFT_OK;
    }
    check(rank, all_done, "weft_test says done and ok for every request at once");
    for (int i = 0; i < NREQ; i++)
        if ((st = weft_wait(req[i])) != WEFT_OK)
            check(rank, 0, "wait %d: %s: %s", i, weft_status_str(st), weft_last_error());
    const char *what = "";
    long at = verify(&b, rank, nranks, &what);
    check(rank, at < 0, "results of all four are right%s%s", at < 0 ? "" : ", wrong: ", what);
    bufs_free(&b);
}

/* Calls that move nothing complete in order too: the other ranks come 0.3 s late to a
 * large all-reduce, so rank 0's request for it is still pending when it issues a count-0
 * iallreduce (which must not be done before it), a blocking count-0 all-reduce (which
 * returns only once it is done), and, after another late all-reduce, a sendrecv to
 * itself (blocking: the same). Before 2026-11-27 all three were done at once. */
static void order_zero(weft_comm_t *c, int rank, int nranks, float *big)
{
    weft_request_t *e, *z;
    float x = 1.0f, y = 0.0f;
    int ok = 1;
    if (rank != 0)
        usleep(300000);
    ok &= weft_iallreduce(big, big, BIG, WEFT_FLOAT32, WEFT_SUM, c, &e) == WEFT_OK;
    ok &= weft_iallreduce(NULL, NULL, 0, WEFT_FLOAT32, WEFT_SUM, c, &z) == WEFT_OK;
    int z_done = 0;
    ok &= weft_test(z, &z_done) == WEFT_OK;
    int z_early = z_done && op_status(&e->op) == WEFT_IN_PROGRESS;
    ok &= weft_allreduce(NULL, NULL, 0, WEFT_FLOAT32, WEFT_SUM, c) == WEFT_OK;
    int e_after_zero = op_status(&e->op) == WEFT_OK;
    ok &= weft_wait(z) == WEFT_OK && weft_wait(e) == WEFT_OK;
    if (rank != 0)
        usleep(300000);
    ok &= weft_iallreduce(big, big, BIG, WEFT_FLOAT32, WEFT_SUM, c, &e) == WEFT_OK;
    ok &= weft_sendrecv(&x, 1, rank, &y, 1, rank, WEFT_FLOAT32, c) == WEFT_OK;
    int e_after_self = op_status(&e->op) == WEFT_OK;
    ok &= weft_wait(e) == WEFT_OK && y == 1.0f;
    if (rank != 0)
        usleep(300000);
    ok &= weft_iallreduce(big, big, BIG, WEFT_FLOAT32, WEFT_SUM, c, &e) == WEFT_OK;
    ok &= weft_sendrecv(NULL, 0, -1, NULL, 0, -1, WEFT_FLOAT32, c) == WEFT_OK;   /* empty */
    e_after_self &= op_status(&e->op) == WEFT_OK;
    ok &= weft_wait(e) == WEFT_OK;
    check(rank, ok, "count-0 and to-self calls issued: %s", ok ? "ok" : weft_last_error());
    check(rank, !z_early && e_after_zero && e_after_self, "behind a pending request, a "
          "count-0 request is not done before it (%s), a blocking count-0 all-reduce, and "
          "a sendrecv to self or with both directions empty return after it (%s, %s)", z_early ? "it was" : "ok",
          e_after_zero ? "ok" : "it was pending", e_after_self ? "ok" : "it was pending");
    (void)nranks;
}

static void order(weft_comm_t *c, int rank, int nranks)
{
    bufs_t b;
    weft_request_t *req[NREQ];
    bufs_init(&b, rank, nranks);
    float mine = (float)rank, *every = xcalloc((size_t)nranks, sizeof(float));
    /* A (nb), B (blocking), C, D (nb), E (blocking), F (nb) */
    int ok = 1;
    weft_status_t st = weft_iallgather(b.ag_send, b.ag_recv, BIG, WEFT_FLOAT32, c, &req[0]);
    ok &= st == WEFT_OK;
    st = weft_allgather(&mine, every, 1, WEFT_FLOAT32, c);
    ok &= st == WEFT_OK;
    int a_done = op_status(&req[0]->op) == WEFT_OK;
    ok &= weft_ireduce_scatter(b.rs_send, b.rs_recv, BIG, WEFT_FLOAT32, WEFT_SUM, c,
                               &req[1]) == WEFT_OK;
    ok &= weft_iallreduce(b.ar, b.ar, BIG, WEFT_FLOAT32, WEFT_SUM, c, &req[2]) == WEFT_OK;
    float s = (float)rank;
    ok &= weft_allreduce(&s, &s, 1, WEFT_FLOAT32, WEFT_MAX, c) == WEFT_OK;
    int cd_done = op_status(&req[1]->op) == WEFT_OK && op_status(&req[2]->op) == WEFT_OK;
    ok &= weft_ibroadcast(b.bc, b.bc, BIG, WEFT_FLOAT32, 0, c, &req[3]) == WEFT_OK;
    check(rank, ok, "interleaved calls issued: %s", ok ? "ok" : weft_last_error());
    check(rank, a_done && cd_done, "each blocking call returned after every earlier "
          "request had completed");
    int in_order;
    compute_until_done(&req[3], 1, 10.0, &in_order);
    for (int i = 0; i < NREQ; i++)
        if ((st = weft_wait(req[i])) != WEFT_OK)
            check(rank, 0, "wait %d: %s: %s", i, weft_status_str(st), weft_last_error());
    int small_ok = s == (float)(nranks - 1);
    for (int r = 0; r < nranks; r++)
        small_ok &= every[r] == (float)r;
    free(every);
    const char *what = "";
    long at = verify(&b, rank, nranks, &what);
    check(rank, at < 0 && small_ok, "results of all six are right%s%s",
          at < 0 ? "" : ", wrong: ", what);
    order_zero(c, rank, nranks, b.ar);
    bufs_free(&b);
}

/* The first failure among the requests, seen without weft calls, within secs. */
static weft_status_t await_failure(weft_request_t **req, int n, double secs, double *t_p)
{
    double t0 = now_s(), x = 1.0;
    for (;;) {
        for (int i = 0; i < 20000; i++)
            x = x * 1.0000001 + 1e-9;
        sink = x;
        for (int i = 0; i < n; i++) {
            weft_status_t st = op_status(&req[i]->op);
            if (st < 0 || now_s() - t0 > secs) {
                *t_p = now_s();
                return st;
            }
        }
    }
}

static void peer_kill(weft_comm_t *c, int rank, int nranks)
{
    int victim = nranks - 1;
    float *send = xcalloc(BIG, sizeof(float)), *recv[NREQ];
    weft_request_t *req[NREQ];
    signal(SIGTERM, SIG_IGN);           /* weftrun stops the job: report first */
    for (int i = 0; i < NREQ; i++)
        recv[i] = xcalloc(BIG * (size_t)nranks, sizeof(float));
    if (weft_barrier(c) != WEFT_OK) {
        check(rank, 0, "barrier: %s", weft_last_error());
        return;
    }
    double t_kill = now_s() + 0.1;      /* the barrier ends together on every rank */
    /* the victim queues only the first two: the others' last two can never complete */
    for (int i = 0; i < (rank == victim ? 2 : NREQ); i++)
        if (weft_iallgather(send, recv[i], BIG, WEFT_FLOAT32, c, &req[i]) != WEFT_OK) {
            check(rank, 0, "iallgather: %s", weft_last_error());
            return;
        }
    if (rank == victim) {
        while (now_s() < t_kill)
            ;
        raise(SIGKILL);
    }
    double t;
    weft_status_t st = await_failure(req, NREQ, 2.5, &t);
    check(rank, st == WEFT_ERR_PEER_LOST && t - t_kill <= 2.0, "a request failed in the "
          "background %.2f s after the kill (want peer lost within 2 s): %s", t - t_kill,
          weft_status_str(st));
    char needle[32], msg[1024] = "";
    snprintf(needle, sizeof(needle), "rank %d", victim);
    int quick = 1, nfail = 0;
    for (int i = 0; i < NREQ - 1; i++) {  /* the last one stays unwaited until destroy */
        double t0 = now_s();
        st = weft_wait(req[i]);
        quick &= now_s() - t0 < 1.0;
        if (st < 0 && nfail++ == 0) {
            snprintf(msg, sizeof(msg), "%s", weft_last_error());
            quick &= st == WEFT_ERR_PEER_LOST;
        }
    }
    check(rank, quick && nfail >= 1 && strstr(msg, needle), "weft_wait returns at once; "
          "the first failure (%d of %d) is peer lost naming %s: %s", nfail, NREQ - 1,
          needle, msg);
    st = weft_allreduce(send, send, 1, WEFT_FLOAT32, WEFT_SUM, c);
    check(rank, st == WEFT_ERR_PEER_LOST, "a later call fails too: %s", weft_status_str(st));
    double t0 = now_s();
    weft_comm_destroy(c);
    st = weft_wait(req[NREQ - 1]);
    check(rank, st < 0 && now_s() - t0 < 1.0, "destroy after the failure, then the "
          "unwaited request: %s", weft_status_str(st));
}

typedef struct { weft_comm_t *c; double t; } abort_arg_t;

static void *abort_later(void *p)
{
    abort_arg_t *a = p;
    usleep(300000);
    a->t = now_s();
    weft_comm_abort(a->c);
    return NULL;
}

static void abort_mode(weft_comm_t *c, int rank, int nranks)
{
    float *send = xcalloc(BIG, sizeof(float)), *recv = xcalloc(BIG * (size_t)nranks, 4);
    if (rank != 0) {        /* silent until rank 0 is aborted: then its call fails */
        sleep(1);
        double t0 = now_s();
        weft_status_t st = weft_allgather(send, recv, BIG, WEFT_FLOAT32, c);
        check(rank, st == WEFT_ERR_PEER_LOST, "call after the peer's abort: %s in %.2f s",
              weft_status_str(st), now_s() - t0);
        return;
    }
    weft_request_t *req[2];
    abort_arg_t a = { c, 0 };
    pthread_t th;
    if (weft_iallgather(send, recv, BIG, WEFT_FLOAT32, c, &req[0]) != WEFT_OK ||
        weft_iallgather(send, recv, BIG, WEFT_FLOAT32, c, &req[1]) != WEFT_OK ||
        pthread_create(&th, NULL, abort_later, &a) != 0) {
        check(rank, 0, "setup: %s", weft_last_error());
        return;
    }
    double t;
    weft_status_t st = await_failure(req, 2, 3.0, &t);
    pthread_join(th, NULL);
    check(rank, st == WEFT_ERR_ABORTED && t - a.t < 1.0, "a request failed in the "
          "background %.2f s after the abort: %s", t - a.t, weft_status_str(st));
    weft_status_t s0 = weft_wait(req[0]), s1 = weft_wait(req[1]);
    check(rank, s0 == WEFT_ERR_ABORTED && s1 < 0, "weft_wait: %s, %s",
          weft_status_str(s0), weft_status_str(s1));
    weft_comm_destroy(c);
}

static void timeout_mode(weft_comm_t *c, int rank, int nranks)
{
    float *send = xcalloc(BIG, sizeof(float)), *recv = xcalloc(BIG * (size_t)nranks, 4);
    if (rank != 0) {
        sleep(3);
        return;             /* rank 0 has failed by now; its comm is gone */
    }
    weft_request_t *req;
    double t0 = now_s(), t;
    if (weft_iallgather(send, recv, BIG, WEFT_FLOAT32, c, &req) != WEFT_OK) {
        check(rank, 0, "iallgather: %s", weft_last_error());
        return;
    }
    weft_status_t st = await_failure(&req, 1, 4.0, &t);
    check(rank, st == WEFT_ERR_TIMEOUT && t - t0 < 2.5, "the request timed out in the "
          "background after %.2f s (WEFT_TIMEOUT=1): %s", t - t0, weft_status_str(st));
    st = weft_wait(req);
    check(rank, st == WEFT_ERR_TIMEOUT && strstr(weft_last_error(), "rank(s) 1"),
          "weft_wait repeats it: %s", weft_last_error());
}

static void destroy_mode(weft_comm_t *c, int rank, int nranks)
{
    bufs_t b;
    weft_request_t *req[NREQ];
    bufs_init(&b, rank, nranks);
    weft_status_t st = weft_barrier(c);
    /* the others may find the comm failed (rank 0 gone) before they queued all four */
    int n = st == WEFT_OK ? issue_four(c, &b, req) : 0;
    if (rank == 0 && n != NREQ) {
        check(rank, 0, "issue: %s", weft_last_error());
        return;
    }
    double t0 = now_s();
    if (rank == 0) {
        usleep(2000);                   /* the thread is mid-flight */
        weft_comm_destroy(c);
        int ok = 1;
        for (int i = 0; i < n; i++) {
            st = weft_wait(req[i]);
            ok &= st == WEFT_OK || st == WEFT_ERR_ABORTED;
        }
        check(rank, ok && now_s() - t0 < 1.0, "destroy with four ops pending took %.3f s; "
              "the requests then report ok or aborted", now_s() - t0);
    } else {
        for (int i = 0; i < n; i++)
            st = weft_wait(req[i]);
        check(rank, now_s() - t0 < 3.0, "waits on the ops rank 0 dropped ended in %.2f s "
              "(%s)", now_s() - t0, weft_status_str(st));
        weft_comm_destroy(c);
    }
    bufs_free(&b);
}

/* small: a small nonblocking call progresses while its caller blocks on another
 * communicator. */
static void small_mode(weft_comm_t *c, int rank, int nranks)
{
    weft_comm_t *sub = NULL;
    weft_status_t st = weft_comm_split(c, 0, rank, &sub);
    if (st != WEFT_OK) {
        check(rank, 0, "split: %s", weft_last_error());
        return;
    }
    /* 64 KB, the most that still counts as small: past WEFT_DIRECT_MAX, so a ring whose
     * first pass cannot finish rank 0's part (it forwards what it has not received yet) */
    enum { N = 16384 };
    static float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(rank + 1);
    weft_request_t *req = NULL;
    double t0 = now_s();
    st = weft_iallreduce(x, x, N, WEFT_FLOAT32, WEFT_SUM, c, &req);
    if (st == WEFT_OK && rank == 0)
        st = weft_barrier(sub);         /* the others are in weft_wait on c */
    weft_status_t ws = st == WEFT_OK ? weft_wait(req) : st;
    if (ws == WEFT_OK && rank != 0)
        ws = weft_barrier(sub);
    int sum_ok = 1;
    for (int i = 0; i < N; i++)
        sum_ok &= x[i] == (float)(nranks * (nranks + 1) / 2);
    check(rank, ws == WEFT_OK && sum_ok && now_s() - t0 < 5.0, "a 64 KB iallreduce "
          "completes while rank 0 blocks in a barrier on another communicator: %s in "
          "%.2f s, sum %s%s%s", weft_status_str(ws), now_s() - t0, sum_ok ? "right" : "wrong",
          ws == WEFT_OK ? "" : ": ", ws == WEFT_OK ? "" : weft_last_error());
    weft_comm_destroy(sub);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    weft_comm_t *c;
    weft_status_t st = weft_comm_init(&c);
    if (st != WEFT_OK) {
        printf("FAIL init: %s: %s\n", weft_status_str(st), weft_last_error());
        return 1;
    }
    int rank = weft_comm_rank(c), nranks = weft_comm_size(c);
    if (!strcmp(mode, "background") || !strcmp(mode, "order")) {
        if (mode[0] == 'b')
            background(c, rank, nranks);
        else
            order(c, rank, nranks);
        weft_comm_destroy(c);
    } else if (!strcmp(mode, "peer_kill") && nranks >= 2) {
        peer_kill(c, rank, nranks);
    } else if (!strcmp(mode, "abort") && nranks >= 2) {
        abort_mode(c, rank, nranks);
    } else if (!strcmp(mode, "timeout") && nranks >= 2) {
        timeout_mode(c, rank, nranks);
    } else if (!strcmp(mode, "destroy") && nranks >= 2) {
        destroy_mode(c, rank, nranks);
    } else if (!strcmp(mode, "small") && nranks >= 2) {
        small_mode(c, rank, nranks);
        weft_comm_destroy(c);
    } else {
        fprintf(stderr, "usage: test_progress background|order|peer_kill|abort|timeout|"
                "destroy|small (all but the first two need 2 ranks or more)\n");
        return 2;
    }
    fflush(stdout);
    _exit(bad);             /* peers may be gone: no atexit work */
}
