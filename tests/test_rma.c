/*
 * test_rma.c - the transports' one-sided ops (transport.h: mem_reg, rkey_unpack, get,
 * put, rma_test) between two ranks, below the engine; run under weftrun -n 2 with
 * WEFT_TRANSPORT=shm, ucx or tcp.
 *
 *   weftrun -n 2 build/tests/test_rma basic|peer_exit|...|posted (below)
 *
 * basic      rank 1 registers a malloc'd and a weft_mem_alloc'd buffer and sends their
 *            keys and addresses; rank 0 unpacks them, reads them back in sizes from 1 byte
 *            to 3 MB with up to 4 gets in flight, and writes a pattern into them with put;
 *            rank 1 then checks every byte. Refusals, with their messages: a key longer
 *            than TP_RKEY_BYTES, a key with its first or last byte flipped, a key of
 *            another transport, host memory registered as CUDA, and the CUDA copy and
 *            reduce tables. A transport without one-sided ops (tcp) must leave every op
 *            NULL and the communicator without single-copy (cma_all 0).
 * stale_key  (ib) rank 1 deregisters its buffer after sending the key; rank 0's get must
 *            fail with a remote access error naming rank 1, within 5 s.
 * peer_exit  rank 1 sends its key and exits without a word; rank 0's get from it must fail
 *            with WEFT_ERR_PEER_LOST (from the post, the test, or check_alive as the engine
 *            asks it) within 5 s, never hang.
 * regcache   (ib) the registration cache: rank 1 registers parts of one weft_mem_alloc
 *            region (three calls, two of them at once): one registration serves them all
 *            (the same key), and still serves after every handle was given back; a
 *            malloc'd buffer gets a registration per call (keys differ). Rank 0 reads
 *            through the cached key; then rank 1 frees the region (weft_mem_free) and
 *            rank 0's next read through that key must fail (remote access error, naming
 *            rank 1): the cache let go of it.
 * readonly   (WEFT_ALGO=cma) an all-gather and an all-reduce whose send buffers are
 *            read-only memory (mprotect PROT_READ), which peers read by single copy:
 *            right results (ib registered them for writing too, which the kernel, and
 *            the emulator, refuse on read-only pages). Run on shm and ib; ucx passes
 *            here only because this host's UCX pins no pages (it registers with write
 *            access whatever it is asked)
 * slot       (ib, rank 1 with a smaller WEFT_BUFFSIZE) a frame larger than rank 1's slots,
 *            sent below the engine (whose frames fit the smallest WEFT_BUFFSIZE): refused
 *            with WEFT_ERR_MISMATCH naming both sides, nothing written; a frame that
 *            fits, sent next, arrives whole
 * left       frames, not one-sided ops: rank 1 sends 3 frames, destroys its communicator
 *            and exits 0 (a rank that finished its part and left). Rank 0, once rank 1 is
 *            gone, takes frame 1 (its release answers a departed peer), then, while
 *            frames 2 and 3 wait unread, check_alive and peer_state must say the peer
 *            may still answer (what it sent is read before its departure counts; over
 *            ib the failed credit write to the departed peer said "lost", and
 *            peer_state still did until 2026-11-26); frames 2 and 3 are then
 *            delivered whole, and only after them is rank 1 reported lost (PEER_LOST
 *            naming it, within 5 s, from the next recv_peek or check_alive); a flush
 *            towards it, with nothing outstanding, still says done.
 * blocked    (shm) rank 0 fills its ring to rank 1, which reads nothing, sends rank 0 one
 *            frame and exits; with rank 0's send blocked and that frame unread (as an
 *            in-place receive that waits for its send leaves it), check_alive must
 *            report rank 1 lost within 5 s: nothing will drain the ring (before
 *            2026-11-28 the unread frame kept it "alive" until WEFT_TIMEOUT)
 * zcopy      (ib) posted receive buffers (transport.h recv_post; WEFT_IB_ZCOPY, whose
 *            value the test reads): rank 0 posts a buffer, tells rank 1 by a frame, and
 *            rank 1 sends; the frames must land in place (recv_peek says no payload,
 *            recv_payload points into the buffer, the bytes are rank 1's, a guard after
 *            the post untouched) where the setting covers that memory (reg: weft_mem_alloc
 *            memory; all: malloc'd too; 0: none), and come through the ring otherwise. A
 *            frame larger than what is left of a post comes through the ring and ends
 *            it (never written past it), and the next post serves again; a post withdrawn
 *            before the sender looked is not used; a post its frame beat is stale (rank 1
 *            sends through the ring, then rank 0 posts that frame without looking, the
 *            two ordered by a side communicator): rank 1 does not adopt it, both frames
 *            come through the ring, nothing lands in it, and a new post serves; with all, a post withdrawn after the
 *            sender adopted it (its pages deregistered) fails the sender's next write into
 *            it: rank 1 gets WEFT_ERR_PEER_LOST saying rank 0 withdrew the buffer, and
 *            nothing lands in the memory.
 * kept       (ib, ucx) payloads read where they lie (transport.h send_kept): rank 1 sends
 *            3 frames from weft_mem_alloc memory and 3 from malloc'd memory; rank 0 checks
 *            every byte; rank 1's flush completes, and the endpoint's frames_kept counts
 *            the first 3 (none with WEFT_IB_ZCOPY=0) and, on ucx only, the others. Then a
 *            2-rank all-gather through the engine, correct on both kinds of memory, sends
 *            from the weft_mem_alloc buffer where it lies (the schedule's keep flags reach
 *            the transport) and, on ucx only, from the malloc'd one. ucx: a frame of a
 *            failed call the peer has not taken is given up (its endpoint closed) and
 *            never delivers the bytes written after the failure.
 * posted     (ucx) a payload receive posted into the caller's buffer when a call fails:
 *            rank 1 sends a 1 MB frame and makes no progress for 1.5 s; rank 0 asks for
 *            the payload at its buffer and posts FAILED (a failing call's drain); once
 *            rank 1 progresses again, no byte lands in rank 0's buffer after the post.
 * get_cancel (ucx) a get cancelled after a failed call lands nothing later: rank 1 sends
 *            a key to a 3 MB buffer and makes no progress for 1.5 s (UCX's get within a
 *            host runs as active messages, answered by the peer's worker); rank 0 posts
 *            a get of it, cancels it as a failing call's end does, and once rank 1
 *            progresses again no byte lands in rank 0's buffer.
 * goodbyes   (ucx) late goodbyes do not pile up in the shared worker: the ranks split a
 *            communicator, rank 1 destroys it, then (after a barrier on the parent) rank
 *            0, whose goodbye reaches receives rank 1 has cancelled, ahead of the next
 *            barrier's message; rank 1 sees such a message held (the case happened), then
 *            after one more split, which rank 0 destroys first, none is left (each
 *            creation and close takes them).
 * cut        (ib) after a failed call nothing lands in an adopted post: rank 0 posts a
 *            weft_mem_alloc buffer (WEFT_IB_ZCOPY=reg keeps it registered after a
 *            withdrawal), rank 1 sends one frame into it, rank 0 withdraws it and ends
 *            the call (recv_post(NULL), fail_end); rank 1's next frame, into the post
 *            it adopted, fails with PEER_LOST, and rank 0's buffer is untouched.
 * Every wait is bounded, and alarm() ends a stuck rank. Exit 0 when every check passed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "comm_int.h"
#ifdef WEFT_HAVE_UCX
#include "ucx/ucx_int.h"
#endif

#define BIG (3u << 20)

static int rank, fails, checks;

static void check(int ok, const char *what)
{
    checks++;
    if (ok)
        return;
    fails++;
    printf("FAIL rank %d: %s (last error: %s)\n", rank, what, weft_last_error());
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* What rank 1 tells rank 0 about one buffer. */
typedef struct offer {
    uint64_t addr;
    tp_rkey_t key;
} offer_t;

/* Drives the transfer to its end as the engine does: progress, test, and check_alive
 * every 20 ms; max_s bounds it (WEFT_ERR_TIMEOUT then, after cancelling). */
static weft_status_t wait_xfer(weft_comm_t *comm, tp_ep_t *ep, tp_rma_t *x, weft_status_t st,
                               double max_s)
{
    double t0 = now_s(), next = t0;
    while (st == WEFT_IN_PROGRESS) {
        for (int i = 0; i < comm->nprogress; i++)
            comm->progress_tps[i]->progress(comm);
        st = ep->ops->rma_test(ep, x);
        if (st != WEFT_IN_PROGRESS)
            break;
        if (now_s() >= next) {
            next = now_s() + 0.02;
            weft_status_t a = ep->ops->check_alive(ep);
            if (a < 0)
                st = a;
        }
        if (now_s() - t0 > max_s)
            st = WEFT_ERR_TIMEOUT;
    }
    if (st < 0 && x->req)
        ep->ops->rma_cancel(ep, x);
    return st;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 9));
}

static int same(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 131u + seed * 7u + (i >> 9)))
            return 0;
    return 1;
}

/* Rank 0: reads the buffer in several sizes, up to 4 gets in flight, then writes seed 9. */
static void read_and_write(weft_comm_t *comm, tp_ep_t *ep, const offer_t *o, unsigned seed,
                           const char *what)
{
    tp_rmem_t *rm = NULL;
    weft_status_t st = ep->ops->rkey_unpack(ep, &o->key, &rm);
    check(st == WEFT_OK, "unpack a good key");
    if (st != WEFT_OK)
        return;
    unsigned char *dst = malloc(BIG), *src = malloc(BIG);
    const size_t sizes[] = { 1, 63, 4096, 65537, BIG };
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s], piece = (n + 3) / 4;
        tp_rma_t x[4] = { { NULL } };
        weft_status_t r[4] = { WEFT_OK };
        memset(dst, 0, n);
        for (int k = 0; k < 4 && (size_t)k * piece < n; k++) {
            size_t off = (size_t)k * piece, len = n - off < piece ? n - off : piece;
            r[k] = ep->ops->get(ep, dst + off, rm, o->addr + off, len, &x[k]);
        }
        int ok = 1;
        for (int k = 0; k < 4; k++)
            ok &= wait_xfer(comm, ep, &x[k], r[k], 10) == WEFT_OK;
        char msg[128];
        snprintf(msg, sizeof(msg), "get %zu bytes of the %s buffer in 4 pieces", n, what);
        check(ok && same(dst, n, seed), msg);
    }
    fill(src, BIG, 9);
    tp_rma_t x = { NULL };
    st = ep->ops->put(ep, src, rm, o->addr, BIG, &x);
    check(wait_xfer(comm, ep, &x, st, 10) == WEFT_OK, "put 3 MB and see it complete");
    ep->ops->rkey_release(ep, rm);
    free(dst);
    free(src);
}

/* A key that is not one must be refused with a message, never crash or be used. */
static void refusals(tp_ep_t *ep, const offer_t *o)
{
    tp_rmem_t *rm = NULL;
    tp_rkey_t k = o->key;
    k.len = TP_RKEY_BYTES + 1;
    check(ep->ops->rkey_unpack(ep, &k, &rm) < 0 && strstr(weft_last_error(), "key"),
          "an oversized key is refused");
    k = o->key;
    k.blob[0] ^= 0x5a;
    check(ep->ops->rkey_unpack(ep, &k, &rm) < 0 && strstr(weft_last_error(), "garbled"),
          "a key with its first byte flipped is refused as garbled");
    if (!strcmp(ep->ops->name, "ucx")) {    /* the packed bytes are checksummed */
        k = o->key;
        k.blob[k.len - 1] ^= 0x01;
        check(ep->ops->rkey_unpack(ep, &k, &rm) < 0 && strstr(weft_last_error(), "garbled"),
              "a key with its last byte flipped is refused as garbled");
    }
    k = o->key;
    k.tp = (uint8_t)(k.tp + 1);
    check(ep->ops->rkey_unpack(ep, &k, &rm) < 0 && strstr(weft_last_error(), "not a"),
          "a key of another transport is refused");
}

static void cuda_refused(weft_comm_t *comm, tp_ep_t *ep)
{
    char buf[64] = { 0 }, out[64];
    tp_mem_t *mem = NULL;
    tp_rkey_t key;
    check(ep->ops->mem_reg(comm, buf, sizeof(buf), MEM_CUDA, &mem, &key) ==
          WEFT_ERR_UNSUPPORTED && strstr(weft_last_error(), "cuda"),
          "registering CUDA memory is refused, naming cuda");
    const mem_ops_t *cu = mem_ops_for(MEM_CUDA), *host = mem_ops_for(MEM_HOST);
    check(!cu->usable, "the engine refuses CUDA buffers");
    if (!mem_cuda_visible(NULL)) {  /* with a GPU the table works (tests/test_cuda.c) */
        check(cu->copy(out, buf, sizeof(buf), 0) == WEFT_ERR_UNSUPPORTED &&
              strstr(weft_last_error(), "cuda"), "the CUDA copy is refused, naming cuda");
        check(cu->reduce(out, buf, buf, 4, WEFT_FLOAT32, WEFT_SUM, 0, 0) ==
              WEFT_ERR_UNSUPPORTED, "the CUDA reduction is refused");
    }
    check(host->usable && host->copy(out, buf, sizeof(buf), 0) == WEFT_OK &&
          !memcmp(out, buf, sizeof(buf)), "the host table copies");
    check(mem_type_of(buf) == MEM_HOST, "host memory is typed HOST");
}

/* Rank 1: offers a malloc'd buffer (seed 1) and a weft_mem_alloc'd one (seed 2). */
static weft_status_t offer(weft_comm_t *comm, tp_ep_t *ep, unsigned char *buf, unsigned seed,
                           tp_mem_t **mem)
{
    offer_t o = { .addr = (uint64_t)(uintptr_t)buf };
    fill(buf, BIG, seed);
    weft_status_t st = ep->ops->mem_reg(comm, buf, BIG, MEM_HOST, mem, &o.key);
    check(st == WEFT_OK && o.key.len > 0 && o.key.len <= TP_RKEY_BYTES,
          "register a buffer and pack its key");
    printf("rank 1: %s key of %u bytes\n", ep->ops->name, o.key.len);
    return weft_send(&o, sizeof(o), WEFT_UINT8, 0, comm);
}

static void basic(weft_comm_t *comm)
{
    tp_ep_t *ep = comm->eps[1 - rank];
    if (ep->ops->get == NULL) {
        check(!ep->ops->mem_reg && !ep->ops->rkey_unpack && !ep->ops->put &&
              !ep->ops->rma_test && !comm->cma_all,
              "a transport without one-sided ops leaves them all NULL, and no single copy");
        printf("rank %d: %s has no one-sided ops, as expected\n", rank, ep->ops->name);
        return;
    }
    check(comm->cma_all, "the communicator agreed on single copy");
    unsigned char *heap = malloc(BIG), *reg = NULL;
    check(weft_mem_alloc((void **)&reg, BIG) == WEFT_OK, "weft_mem_alloc");
    tp_mem_t *m1 = NULL, *m2 = NULL;
    if (rank == 1) {
        check(offer(comm, ep, heap, 1, &m1) == WEFT_OK, "send the first key");
        check(offer(comm, ep, reg, 2, &m2) == WEFT_OK, "send the second key");
        check(weft_barrier(comm) == WEFT_OK, "barrier after rank 0's puts");
        check(same(heap, BIG, 9), "rank 0's put landed in the malloc'd buffer");
        check(same(reg, BIG, 9), "rank 0's put landed in the weft_mem_alloc'd buffer");
        if (m1)
            ep->ops->mem_dereg(comm, m1);
        if (m2)
            ep->ops->mem_dereg(comm, m2);
    } else {
        offer_t o1, o2;
        check(weft_recv(&o1, sizeof(o1), WEFT_UINT8, 1, comm) == WEFT_OK, "receive key 1");
        check(weft_recv(&o2, sizeof(o2), WEFT_UINT8, 1, comm) == WEFT_OK, "receive key 2");
        read_and_write(comm, ep, &o1, 1, "malloc'd");
        read_and_write(comm, ep, &o2, 2, "weft_mem_alloc'd");
        refusals(ep, &o1);
        refusals(ep, &o2);
        cuda_refused(comm, ep);
        check(weft_barrier(comm) == WEFT_OK, "barrier after the puts");
    }
    weft_mem_free(reg);
    free(heap);
}

static void peer_exit(weft_comm_t *comm)
{
    tp_ep_t *ep = comm->eps[1 - rank];
    if (ep->ops->get == NULL) {
        printf("rank %d: %s has no one-sided ops: nothing to test\n", rank, ep->ops->name);
        return;
    }
    unsigned char *buf = malloc(BIG);
    if (rank == 1) {
        tp_mem_t *m = NULL;
        offer(comm, ep, buf, 1, &m);
        weft_barrier(comm);
        fflush(stdout);
        _exit(fails ? 1 : 0);        /* gone, with the key still out there */
    }
    offer_t o;
    check(weft_recv(&o, sizeof(o), WEFT_UINT8, 1, comm) == WEFT_OK, "receive the key");
    check(weft_barrier(comm) == WEFT_OK, "barrier before the peer exits");
    pid_t pid = (pid_t)comm->peers[1].pid;
    double t0 = now_s();
    while (!(kill(pid, 0) != 0 && errno == ESRCH) && now_s() - t0 < 5)
        usleep(1000);
    tp_rmem_t *rm = NULL;
    weft_status_t st = ep->ops->rkey_unpack(ep, &o.key, &rm);
    t0 = now_s();
    if (st == WEFT_OK) {
        tp_rma_t x = { NULL };
        st = ep->ops->get(ep, buf, rm, o.addr, BIG, &x);
        st = wait_xfer(comm, ep, &x, st, 5);
        ep->ops->rkey_release(ep, rm);
    }
    double secs = now_s() - t0;
    char msg[160];
    snprintf(msg, sizeof(msg), "a get from a rank that exited fails with PEER_LOST (got %s "
             "after %.3f s)", weft_status_str(st), secs);
    check(st == WEFT_ERR_PEER_LOST && secs < 5, msg);
    printf("rank 0: get from the exited rank: %s after %.3f s: %s\n", weft_status_str(st),
           secs, weft_last_error());
    free(buf);
}

/* ib: a key whose registration is gone. Rank 1 deregisters before rank 0 reads: the read
 * must fail (remote access error, naming rank 1), never read freed registrations or hang. */
static void stale_key(weft_comm_t *comm, weft_comm_t *side)
{
    tp_ep_t *ep = comm->eps[1 - rank];
    unsigned char *buf = malloc(BIG);
    if (strcmp(ep->ops->name, "ib") != 0) {
        printf("rank %d: stale_key is for ib (%s keeps no registration)\n", rank,
               ep->ops->name);
        free(buf);
        return;
    }
    if (rank == 1) {
        tp_mem_t *m = NULL;
        offer(comm, ep, buf, 1, &m);
        if (m)
            ep->ops->mem_dereg(comm, m);
        check(weft_barrier(comm) == WEFT_OK, "barrier after deregistering");
        /* rank 0 breaks the connection only once this rank's barrier has returned: its
         * last writes (a credit, a probe) could otherwise meet the broken QP first (a
         * flush error failed this barrier once in a CI run) */
        weft_barrier(side);
        weft_barrier(comm);     /* fails once rank 0's read broke the connection */
        free(buf);
        return;
    }
    offer_t o;
    check(weft_recv(&o, sizeof(o), WEFT_UINT8, 1, comm) == WEFT_OK, "receive the key");
    check(weft_barrier(comm) == WEFT_OK, "barrier after rank 1 deregistered");
    check(weft_barrier(side) == WEFT_OK, "side barrier: rank 1's barrier returned");
    tp_rmem_t *rm = NULL;
    weft_status_t st = ep->ops->rkey_unpack(ep, &o.key, &rm);
    check(st == WEFT_OK, "the key itself is well-formed");
    if (st == WEFT_OK) {
        tp_rma_t x = { NULL };
        st = ep->ops->get(ep, buf, rm, o.addr, 4096, &x);
        st = wait_xfer(comm, ep, &x, st, 5);
        ep->ops->rkey_release(ep, rm);
        check(st == WEFT_ERR_INTERNAL && strstr(weft_last_error(), "remote access error") &&
              strstr(weft_last_error(), "rank 1"),
              "a read through a deregistered key fails: remote access error, naming rank 1");
        printf("rank 0: stale key: %s: %s\n", weft_status_str(st), weft_last_error());
    }
    free(buf);
}

static void regcache(weft_comm_t *comm)
{
    tp_ep_t *ep = comm->eps[1 - rank];
    if (strcmp(ep->ops->name, "ib") != 0) {
        printf("rank %d: regcache is for ib (%s keeps no registrations)\n", rank,
               ep->ops->name);
        return;
    }
    offer_t o;
    if (rank == 1) {
        unsigned char *reg = NULL, *heap = malloc(BIG);
        check(weft_mem_alloc((void **)&reg, BIG) == WEFT_OK && heap, "allocate");
        if (!reg || !heap)
            return;
        fill(reg, BIG, 5);
        tp_mem_t *m[5] = { NULL };
        tp_rkey_t k[5];
        check(ep->ops->mem_reg(comm, reg + 4096, 1000, MEM_HOST, &m[0], &k[0]) == WEFT_OK &&
              ep->ops->mem_reg(comm, reg + 65536, 70000, MEM_HOST, &m[1], &k[1]) == WEFT_OK,
              "register two parts of a weft_mem_alloc region");
        check(k[0].len == k[1].len && !memcmp(k[0].blob, k[1].blob, k[0].len),
              "both parts: one registration (the same key)");
        ep->ops->mem_dereg(comm, m[0]);
        ep->ops->mem_dereg(comm, m[1]);
        check(ep->ops->mem_reg(comm, reg, BIG, MEM_HOST, &m[2], &k[2]) == WEFT_OK &&
              !memcmp(k[2].blob, k[0].blob, k[0].len),
              "after both were given back, the whole region: still that registration");
        ep->ops->mem_dereg(comm, m[2]);
        check(ep->ops->mem_reg(comm, heap, 5000, MEM_HOST, &m[3], &k[3]) == WEFT_OK &&
              ep->ops->mem_reg(comm, heap, 5000, MEM_HOST, &m[4], &k[4]) == WEFT_OK &&
              memcmp(k[3].blob, k[4].blob, k[3].len) != 0,
              "malloc'd memory: a registration per call (not cached)");
        ep->ops->mem_dereg(comm, m[3]);
        ep->ops->mem_dereg(comm, m[4]);
        o.addr = (uint64_t)(uintptr_t)reg;
        o.key = k[2];
        check(weft_send(&o, sizeof(o), WEFT_UINT8, 0, comm) == WEFT_OK, "send the key");
        check(weft_barrier(comm) == WEFT_OK, "barrier: rank 0 read through the cached key");
        check(weft_mem_free(reg) == WEFT_OK, "weft_mem_free");
        check(weft_barrier(comm) == WEFT_OK, "barrier after the free");
        weft_barrier(comm);     /* fails once rank 0's read broke the connection */
        free(heap);
        return;
    }
    unsigned char *buf = malloc(BIG);
    check(weft_recv(&o, sizeof(o), WEFT_UINT8, 1, comm) == WEFT_OK, "receive the key");
    tp_rmem_t *rm = NULL;
    check(ep->ops->rkey_unpack(ep, &o.key, &rm) == WEFT_OK, "unpack the cached key");
    if (rm) {
        tp_rma_t x = { NULL };
        weft_status_t st = ep->ops->get(ep, buf, rm, o.addr, BIG, &x);
        check(wait_xfer(comm, ep, &x, st, 10) == WEFT_OK && same(buf, BIG, 5),
              "read the region through the cached registration (every handle given back)");
    }
    check(weft_barrier(comm) == WEFT_OK, "barrier before rank 1 frees the region");
    check(weft_barrier(comm) == WEFT_OK, "barrier after the free");
    if (rm) {
        tp_rma_t x = { NULL };
        weft_status_t st = ep->ops->get(ep, buf, rm, o.addr, 4096, &x);
        st = wait_xfer(comm, ep, &x, st, 5);
        check(st == WEFT_ERR_INTERNAL && strstr(weft_last_error(), "remote access error") &&
              strstr(weft_last_error(), "rank 1"),
              "after weft_mem_free the cached registration is gone: the read fails");
        printf("rank 0: read after the free: %s: %s\n", weft_status_str(st),
               weft_last_error());
        ep->ops->rkey_release(ep, rm);
    }
    free(buf);
}

/* a frame of the test: payload bytes i * 7 + k */
static void left_frame(frame_hdr_t *h, unsigned char *pl, int k)
{
    memset(h, 0, sizeof(*h));
    h->magic = FRAME_MAGIC;
    h->version = FRAME_VERSION;
    h->coll = COLL_SEND;
    h->frame = (uint32_t)k;
    h->len = 512;
    h->src_rank = 1;
    for (int i = 0; i < 512; i++)
        pl[i] = (unsigned char)(i * 7 + k);
}

/* the progress the engine makes between its calls (a UCX worker) */
static void progress_all(weft_comm_t *comm)
{
    for (int i = 0; i < comm->nprogress; i++)
        comm->progress_tps[i]->progress(comm);
}

static void readonly(weft_comm_t *comm)
{
    size_t n = 64 * 1024 / sizeof(float);   /* a 256K all-gather, single copy by WEFT_ALGO */
    size_t bytes = n * sizeof(float);
    float *ro = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    float *out = malloc(2 * bytes);
    if (ro == MAP_FAILED || out == NULL) {
        check(0, "readonly: buffers");
        return;
    }
    for (size_t i = 0; i < n; i++)
        ro[i] = (float)(rank * 1000 + (int)(i % 997));
    check(mprotect(ro, bytes, PROT_READ) == 0, "readonly: mprotect");
    weft_status_t st = weft_allgather(ro, out, n, WEFT_FLOAT32, comm);
    size_t bad = 0;
    for (int r = 0; st == WEFT_OK && r < 2; r++)
        for (size_t i = 0; i < n; i++)
            bad += out[(size_t)r * n + i] != (float)(r * 1000 + (int)(i % 997));
    char msg[200];
    snprintf(msg, sizeof(msg), "all-gather from read-only memory: %s, %zu wrong",
             weft_status_str(st), bad);
    check(st == WEFT_OK && bad == 0, msg);
    st = weft_allreduce(ro, out, n, WEFT_FLOAT32, WEFT_SUM, comm);
    bad = 0;
    for (size_t i = 0; st == WEFT_OK && i < n; i++)
        bad += out[i] != (float)(1000 + 2 * (int)(i % 997));
    snprintf(msg, sizeof(msg), "all-reduce from read-only memory: %s, %zu wrong",
             weft_status_str(st), bad);
    check(st == WEFT_OK && bad == 0, msg);
    munmap(ro, bytes);
    free(out);
}

static void slot(weft_comm_t *comm)
{
    tp_ep_t *ep = comm->eps[1 - rank];
    frame_hdr_t h;
    unsigned char pl[512];
    weft_status_t st;
    double t0;
    if (rank == 0) {
        size_t big = 128 << 10;     /* rank 1's slots (WEFT_BUFFSIZE=64K) take 16K */
        unsigned char *b = calloc(1, big);
        left_frame(&h, pl, 1);
        h.len = (uint32_t)big;
        st = b ? ep->ops->send(ep, &h, b) : WEFT_ERR_NO_MEMORY;
        check(st == WEFT_ERR_MISMATCH && strstr(weft_last_error(), "rank 0 sends a frame of "
                                                "131072 bytes, rank 1's slots take"),
              "a frame larger than the peer's slots: MISMATCH naming both sides");
        free(b);
        left_frame(&h, pl, 1);
        for (t0 = now_s(); (st = ep->ops->send(ep, &h, pl)) == WEFT_IN_PROGRESS &&
                           now_s() - t0 < 5;)
            progress_all(comm);
        check(st == WEFT_OK, "then a frame that fits is sent");
        for (t0 = now_s(); ep->ops->flush && ep->ops->flush(ep) == WEFT_IN_PROGRESS &&
                           now_s() - t0 < 5;)
            progress_all(comm);
        return;
    }
    const frame_hdr_t *got = NULL;
    const void *payload = NULL;
    for (t0 = now_s(); (st = ep->ops->recv_peek(ep, &got, &payload)) == WEFT_IN_PROGRESS &&
                       now_s() - t0 < 5;)
        progress_all(comm);
    check(st == WEFT_OK && got && got->frame == 1 && got->len == 512,
          "the first frame to arrive is the one that fits");
    if (st != WEFT_OK || got == NULL)
        return;
    if (payload == NULL) {
        for (t0 = now_s(); (st = ep->ops->recv_payload(ep, pl, &payload)) == WEFT_IN_PROGRESS &&
                           now_s() - t0 < 5;)
            progress_all(comm);
        payload = payload ? payload : pl;
    }
    unsigned char want[512];
    left_frame(&h, want, 1);
    check(st == WEFT_OK && memcmp(payload, want, 512) == 0, "its payload is whole");
    ep->ops->recv_release(ep);
}

static void left(weft_comm_t **comm_p)
{
    weft_comm_t *comm = *comm_p;
    tp_ep_t *ep = comm->eps[1 - rank];
    frame_hdr_t h;
    unsigned char pl[512];
    if (rank == 1) {
        for (int k = 1; k <= 3; k++) {
            left_frame(&h, pl, k);
            weft_status_t st;
            double t0 = now_s();
            while ((st = ep->ops->send(ep, &h, pl)) == WEFT_IN_PROGRESS && now_s() - t0 < 5)
                progress_all(comm);
            check(st == WEFT_OK, "send a frame");
        }
        weft_comm_destroy(comm);    /* its part is done: it leaves */
        *comm_p = NULL;
        return;
    }
    pid_t pid = (pid_t)comm->peers[1].pid;
    double t0 = now_s();
    while (!(kill(pid, 0) != 0 && errno == ESRCH) && now_s() - t0 < 5)
        usleep(1000);
    check(kill(pid, 0) != 0, "rank 1 left");
    for (int k = 1; k <= 3; k++) {
        const frame_hdr_t *got = NULL;
        const void *payload = NULL;
        weft_status_t st;
        t0 = now_s();
        while ((st = ep->ops->recv_peek(ep, &got, &payload)) == WEFT_IN_PROGRESS &&
               now_s() - t0 < 5)
            progress_all(comm);
        char msg[160];
        snprintf(msg, sizeof(msg), "frame %d from the departed rank is delivered (%s)", k,
                 weft_status_str(st));
        check(st == WEFT_OK && got && got->frame == (uint32_t)k && got->len == 512, msg);
        if (st != WEFT_OK)
            return;
        if (payload == NULL) {
            st = ep->ops->recv_payload(ep, pl, &payload);
            for (t0 = now_s(); st == WEFT_IN_PROGRESS && now_s() - t0 < 5;) {
                progress_all(comm);
                st = ep->ops->recv_payload(ep, pl, &payload);
            }
            if (payload == NULL)
                payload = pl;
        }
        unsigned char want[512];
        left_frame(&h, want, k);   /* what frame k carries */
        check(st == WEFT_OK && memcmp(payload, want, 512) == 0, "its payload is whole");
        ep->ops->recv_release(ep);
        if (k == 1) {   /* frames 2 and 3 wait: the peer still counts as there, for
                           check_alive and for peer_state (fail.c's probe as it idles) */
            weft_status_t a = WEFT_OK, b = WEFT_OK;
            for (t0 = now_s(); a == WEFT_OK && b == WEFT_OK && now_s() - t0 < 0.3;
                 usleep(5000)) {
                progress_all(comm);
                a = ep->ops->check_alive(ep);
                tp_state_t s;
                b = ep->ops->peer_state(ep, &s);
            }
            snprintf(msg, sizeof(msg), "check_alive and peer_state while the departed "
                     "rank's frames are unread: %s, %s", weft_status_str(a),
                     weft_status_str(b));
            check(a == WEFT_OK && b == WEFT_OK, msg);
        }
    }
    /* now nothing of it is left to read: the engine's calls (a wait for another frame,
     * and check_alive as it idles) must find it gone */
    weft_status_t a = WEFT_OK;
    for (t0 = now_s(); a >= 0 && now_s() - t0 < 5; usleep(5000)) {
        const frame_hdr_t *got = NULL;
        const void *payload = NULL;
        progress_all(comm);
        a = ep->ops->recv_peek(ep, &got, &payload);
        if (a >= 0)
            a = ep->ops->check_alive(ep);
    }
    check(a == WEFT_ERR_PEER_LOST && strstr(weft_last_error(), "rank 1"),
          "once its frames are read, the departed rank is reported lost");
    printf("rank 0: after the frames: %s: %s\n", weft_status_str(a), weft_last_error());
    /* but a call that owes it nothing still ends: the engine flushes every endpoint
     * before a call ends (ucx said PEER_LOST here until 2026-11-26) */
    weft_status_t f = ep->ops->flush ? ep->ops->flush(ep) : WEFT_OK;
    char fmsg[128];
    snprintf(fmsg, sizeof(fmsg), "flush towards the departed rank, nothing outstanding: %s",
             weft_status_str(f));
    check(f == WEFT_OK, fmsg);
}

static void blocked(weft_comm_t *comm)
{
    tp_ep_t *ep = comm->eps[1 - rank];
    frame_hdr_t h;
    unsigned char pl[512];
    weft_status_t st;
    double t0;
    if (rank == 1) {
        left_frame(&h, pl, 1);
        for (t0 = now_s(); (st = ep->ops->send(ep, &h, pl)) == WEFT_IN_PROGRESS &&
                           now_s() - t0 < 5;)
            progress_all(comm);
        check(st == WEFT_OK, "rank 1 sends its frame");
        fflush(stdout);
        usleep(200000);             /* rank 0's ring to it fills meanwhile */
        _exit(fails ? 1 : 0);       /* gone, the frame unread there */
    }
    int sent = 0;
    left_frame(&h, pl, 1);
    h.src_rank = 0;
    for (t0 = now_s(); (st = ep->ops->send(ep, &h, pl)) == WEFT_OK && now_s() - t0 < 5;)
        sent++;
    check(st == WEFT_IN_PROGRESS, "rank 0's ring to rank 1 fills (its send waits)");
    pid_t pid = (pid_t)comm->peers[1].pid;
    for (t0 = now_s(); !(kill(pid, 0) != 0 && errno == ESRCH) && now_s() - t0 < 5;)
        usleep(1000);
    check(kill(pid, 0) != 0, "rank 1 exited");
    const frame_hdr_t *got = NULL;
    const void *payload = NULL;
    check(ep->ops->recv_peek(ep, &got, &payload) == WEFT_OK, "its frame waits unread");
    weft_status_t a = WEFT_OK;
    for (t0 = now_s(); a == WEFT_OK && now_s() - t0 < 5; usleep(5000)) {
        if (ep->ops->send(ep, &h, pl) != WEFT_IN_PROGRESS)
            break;
        a = ep->ops->check_alive(ep);
    }
    char msg[300];
    snprintf(msg, sizeof(msg), "a send to an exited rank that cannot go, its frame unread "
             "here: check_alive says %s after %.2f s (%d frames sent): %s",
             weft_status_str(a), now_s() - t0, sent, a < 0 ? weft_last_error() : "");
    check(a == WEFT_ERR_PEER_LOST && strstr(weft_last_error(), "rank 1"), msg);
}

/* ---- zcopy: frames below the engine, raw ---- */

#define ZF (64u << 10)          /* payload of one data frame */

static weft_status_t raw_send(weft_comm_t *comm, tp_ep_t *ep, uint32_t k, size_t len,
                              unsigned seed)
{
    static unsigned char pl[ZF];
    frame_hdr_t h = { .magic = FRAME_MAGIC, .version = FRAME_VERSION, .coll = COLL_SEND,
                      .frame = k, .len = (uint32_t)len, .src_rank = (uint32_t)rank };
    fill(pl, len, seed);
    weft_status_t st;
    double t0 = now_s();
    while ((st = ep->ops->send(ep, &h, pl)) == WEFT_IN_PROGRESS && now_s() - t0 < 5)
        progress_all(comm);
    return st;
}

/* The next frame's header (5 s at most). */
static weft_status_t peek_wait(weft_comm_t *comm, tp_ep_t *ep, const frame_hdr_t **h,
                               const void **payload)
{
    weft_status_t st;
    double t0 = now_s();
    while ((st = ep->ops->recv_peek(ep, h, payload)) == WEFT_IN_PROGRESS && now_s() - t0 < 5)
        progress_all(comm);
    return st;
}

/* The next frame, as the engine takes it: recv_post (when post is set) after each peek
 * that finds none, the payload asked for at dst when it is not in hand; *in_place says
 * whether it came without a payload (landed in a posted buffer). Checks frame number k
 * and seed. */
static weft_status_t raw_recv(weft_comm_t *comm, tp_ep_t *ep, uint32_t k, size_t len,
                              unsigned seed, unsigned char *post, size_t room,
                              unsigned char *dst, int *in_place, const void **where)
{
    const frame_hdr_t *h = NULL;
    const void *payload = NULL;
    weft_status_t st;
    double t0 = now_s();
    do {
        progress_all(comm);
        st = ep->ops->recv_peek(ep, &h, &payload);
        if (st == WEFT_IN_PROGRESS && post)
            ep->ops->recv_post(ep, post, room);
    } while (st == WEFT_IN_PROGRESS && now_s() - t0 < 5);
    if (st != WEFT_OK)
        return st;
    *in_place = payload == NULL;
    t0 = now_s();
    while (payload == NULL &&   /* ucx: a rendezvous, done in later progress */
           (st = ep->ops->recv_payload(ep, dst, &payload)) == WEFT_IN_PROGRESS &&
           now_s() - t0 < 5)
        progress_all(comm);
    char msg[160];
    snprintf(msg, sizeof(msg), "frame %u: %u bytes of seed %u (%s)", k, h->len, seed,
             weft_status_str(st));
    check(st == WEFT_OK && h->frame == k && h->len == len && same(payload, len, seed), msg);
    if (where)
        *where = payload;
    ep->ops->recv_release(ep);
    return st;
}

/* Rank 0 tells rank 1 to send n frames of len bytes. */
static void go(weft_comm_t *comm, tp_ep_t *ep, uint32_t n, uint32_t len)
{
    frame_hdr_t h = { .magic = FRAME_MAGIC, .version = FRAME_VERSION, .coll = COLL_SEND,
                      .frame = n, .len = sizeof(len) };
    weft_status_t st;
    double t0 = now_s();
    while ((st = ep->ops->send(ep, &h, &len)) == WEFT_IN_PROGRESS && now_s() - t0 < 5)
        progress_all(comm);
    check(st == WEFT_OK, "tell rank 1 to go");
}

/* Rank 1 takes rank 0's "go" (go() above): the frame count and length it asks for;
 * -1 (checked) when none came. */
static int wait_go(weft_comm_t *comm, tp_ep_t *ep, uint32_t *nframes, uint32_t *len)
{
    unsigned char pl[ZF];
    const frame_hdr_t *h = NULL;
    const void *payload = NULL;
    weft_status_t st = peek_wait(comm, ep, &h, &payload);
    check(st == WEFT_OK, "rank 0 says go");
    if (st != WEFT_OK)
        return -1;
    if (payload == NULL && ep->ops->recv_payload(ep, pl, &payload) != WEFT_OK)
        return -1;
    *nframes = h->frame;
    *len = h->len ? ((const uint32_t *)payload)[0] : ZF;
    ep->ops->recv_release(ep);
    return 0;
}

/* Whether n bytes at b still hold the 0xee fill: nothing landed there. */
static int untouched(const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0xee)
            return 0;
    return 1;
}

/* Rank 0 posts buf for frame *k, has rank 1 send it, and checks it landed there. */
static void post_serves(weft_comm_t *comm, tp_ep_t *ep, unsigned char *buf, uint32_t *k,
                        const char *what)
{
    int in_place = 0;
    const void *where = NULL;
    ep->ops->recv_post(ep, buf, ZF);
    go(comm, ep, 1, ZF);
    raw_recv(comm, ep, *k, ZF, *k, buf, ZF, buf, &in_place, &where);
    (*k)++;
    check(in_place && where == (const void *)buf, what);
}

static void zcopy(weft_comm_t *comm, weft_comm_t *side)
{
    tp_ep_t *ep = comm->eps[1 - rank];
    if (strcmp(ep->ops->name, "ib") != 0 || ep->ops->recv_post == NULL) {
        printf("rank %d: zcopy is for ib (%s posts no receive buffers)\n", rank, ep->ops->name);
        return;
    }
    const char *z = getenv("WEFT_IB_ZCOPY");
    int all = z && !strcmp(z, "all"), none = z && !strcmp(z, "0");
    int in_place = 0;
    const void *where = NULL;
    uint32_t k = 1;             /* data frames rank 1 -> 0, and "go" frames 0 -> 1 */
    if (rank == 1) {
        /* each round: wait for "go" (its frame number says how many frames to send) */
        for (int round = 0; round < (none ? 2 : all ? 9 : 7); round++) {
            uint32_t nframes, len;
            weft_status_t st;
            if (wait_go(comm, ep, &nframes, &len) != 0)
                return;
            for (uint32_t i = 0; i < nframes; i++, k++) {
                if (round == 5 && i == 1) {     /* the stale post: rank 0 posts now */
                    check(weft_barrier(side) == WEFT_OK, "side barrier: frame sent");
                    check(weft_barrier(side) == WEFT_OK, "side barrier: rank 0 posted");
                }
                st = raw_send(comm, ep, k, len, k);
                if (round == 8) {       /* all: the write into a withdrawn post */
                    for (double t0 = now_s(); st == WEFT_OK && now_s() - t0 < 5; usleep(1000))
                        st = ep->ops->check_alive(ep);
                    check(st == WEFT_ERR_PEER_LOST && strstr(weft_last_error(), "rank 0") &&
                          strstr(weft_last_error(), "withdrew"), "a write into a post rank 0 "
                          "withdrew fails: PEER_LOST, saying rank 0 withdrew its buffer");
                    printf("rank 1: %s: %s\n", weft_status_str(st), weft_last_error());
                    return;
                }
                check(st == WEFT_OK, "send a data frame");
            }
        }
        return;
    }
    size_t cap = 4 * ZF, guard = 4096;
    unsigned char *reg = NULL, *heap = malloc(cap + guard);
    check(weft_mem_alloc((void **)&reg, cap + guard) == WEFT_OK && heap, "allocate");
    if (!reg || !heap)
        return;
    struct { unsigned char *buf; const char *name; int postable; } mem[2] = {
        { reg, "weft_mem_alloc", !none }, { heap, "malloc'd", all },
    };
    for (int m = 0; m < 2; m++) {
        unsigned char *b = mem[m].buf;
        memset(b, 0xee, cap + guard);
        /* two frames into a post of two */
        ep->ops->recv_post(ep, b, 2 * ZF);
        go(comm, ep, 2, ZF);
        char msg[200];
        for (int i = 0; i < 2; i++, k++) {
            raw_recv(comm, ep, k, ZF, k, b + i * ZF, 2 * ZF - i * ZF, b + i * ZF, &in_place,
                     &where);
            snprintf(msg, sizeof(msg), "%s memory, frame %d of 2: %s (want %s)", mem[m].name,
                     i + 1, in_place ? "in place" : "through the ring",
                     mem[m].postable ? "in place" : "ring");
            check(in_place == mem[m].postable &&
                  (!in_place || where == (const void *)(b + i * ZF)), msg);
        }
        snprintf(msg, sizeof(msg), "%s memory: nothing written past the post", mem[m].name);
        check(untouched(b + 2 * ZF, cap + guard - 2 * ZF), msg);
    }
    if (none) {
        free(heap);
        weft_mem_free(reg);
        return;
    }
    /* a frame larger than what is left of the post: through the ring, never past it */
    memset(reg, 0xee, cap + guard);
    ep->ops->recv_post(ep, reg, ZF / 2);
    go(comm, ep, 1, ZF);
    raw_recv(comm, ep, k, ZF, k, reg, ZF / 2, reg, &in_place, &where);
    k++;
    check(!in_place && untouched(reg, cap + guard), "a frame larger than the post comes "
          "through the ring, and nothing is written into the post");
    /* that ended the post: the next one serves */
    post_serves(comm, ep, reg, &k, "after it, a new post serves");
    /* withdrawn before the sender looked: not used */
    memset(reg, 0xee, cap + guard);
    ep->ops->recv_post(ep, reg, ZF);
    ep->ops->recv_post(ep, NULL, 0);
    go(comm, ep, 1, ZF);
    raw_recv(comm, ep, k, ZF, k, NULL, 0, reg + ZF, &in_place, &where);
    k++;
    check(!in_place && untouched(reg, cap + guard),
          "a post withdrawn before the sender looked is not used");
    /* a post the sender did not see in time: rank 1 sends its frame through the ring
     * first; then (the side communicator tells when) rank 0 posts that frame, without
     * looking at what arrived. The post is stale: rank 1 does not adopt it for its next
     * frame, both come through the ring, nothing lands in the post, the ring frame ends
     * it, and a new post serves again */
    memset(reg, 0xee, cap + guard);
    go(comm, ep, 2, ZF);
    check(weft_barrier(side) == WEFT_OK, "side barrier: rank 1 sent its first frame");
    ep->ops->recv_post(ep, reg, 2 * ZF);
    check(weft_barrier(side) == WEFT_OK, "side barrier: the post is out");
    int through_ring = 1;
    for (int i = 0; i < 2; i++, k++) {
        raw_recv(comm, ep, k, ZF, k, NULL, 0, heap, &in_place, &where);
        through_ring &= !in_place;
    }
    check(through_ring && untouched(reg, cap + guard), "a post its frame beat is stale: "
          "both frames come through the ring, nothing lands in it");
    post_serves(comm, ep, reg, &k, "after a stale post, a new post serves");
    if (all) {
        /* withdrawn after the sender adopted it: its next write fails there */
        memset(heap, 0xee, cap + guard);
        ep->ops->recv_post(ep, heap, 2 * ZF);
        go(comm, ep, 1, ZF);
        raw_recv(comm, ep, k, ZF, k, heap, 2 * ZF, heap, &in_place, &where);
        check(in_place, "the first frame of the post lands in place");
        ep->ops->recv_post(ep, NULL, 0);    /* as a failed call does */
        go(comm, ep, 1, ZF);        /* rank 1 goes on to the second frame */
        usleep(300000);
        check(untouched(heap + ZF, cap + guard - ZF), "nothing lands in a withdrawn post");
    }
    free(heap);
    weft_mem_free(reg);
}

/* ---- cut: after a failed call, nothing lands in an adopted post (ib) ---- */

/* With WEFT_IB_ZCOPY=reg a withdrawn post stays registered (the region's cached
 * registration), and a sender that adopted it does not look at the FIFO again while it
 * writes into it. Rank 0 posts a weft_mem_alloc buffer of two frames, rank 1 sends the
 * first (it lands in place), rank 0 withdraws the post and ends the failed call
 * (recv_post(NULL), fail_end), then rank 1 sends the second frame into the post it
 * adopted: it must fail (PEER_LOST naming rank 0) and nothing land in rank 0's buffer. */
static void cut(weft_comm_t *comm, weft_comm_t *side)
{
    tp_ep_t *ep = comm->eps[1 - rank];
    if (strcmp(ep->ops->name, "ib") != 0 || ep->ops->fail_end == NULL) {
        printf("rank %d: cut is for ib (%s has no fail_end)\n", rank, ep->ops->name);
        return;
    }
    if (rank == 1) {
        uint32_t nframes, len;
        if (wait_go(comm, ep, &nframes, &len) != 0)
            return;
        check(raw_send(comm, ep, 1, ZF, 1) == WEFT_OK, "cut: send the first frame");
        check(weft_barrier(side) == WEFT_OK, "cut: side barrier (rank 0 ended its call)");
        weft_status_t st = raw_send(comm, ep, 2, ZF, 2);
        for (double t0 = now_s(); st == WEFT_OK && now_s() - t0 < 5; usleep(1000))
            st = ep->ops->check_alive(ep);
        char msg[300];
        snprintf(msg, sizeof(msg), "cut: the write into the adopted post fails (%s: %s)",
                 weft_status_str(st), weft_last_error());
        check(st == WEFT_ERR_PEER_LOST && strstr(weft_last_error(), "rank 0"), msg);
        check(weft_barrier(side) == WEFT_OK, "cut: side barrier (rank 1 tried)");
        return;
    }
    size_t guard = 4096;
    unsigned char *reg = NULL;
    check(weft_mem_alloc((void **)&reg, 2 * ZF + guard) == WEFT_OK, "allocate");
    if (reg == NULL)
        return;
    memset(reg, 0xee, 2 * ZF + guard);
    int in_place = 0;
    const void *where = NULL;
    ep->ops->recv_post(ep, reg, 2 * ZF);
    go(comm, ep, 1, ZF);
    raw_recv(comm, ep, 1, ZF, 1, reg, 2 * ZF, reg, &in_place, &where);
    check(in_place, "cut: the first frame lands in the post");
    ep->ops->recv_post(ep, NULL, 0);            /* as a failed call ends (engine.c) */
    ep->ops->fail_end(ep);
    check(weft_barrier(side) == WEFT_OK, "cut: side barrier (rank 0 ended its call)");
    check(weft_barrier(side) == WEFT_OK, "cut: side barrier (rank 1 tried)");
    check(untouched(reg + ZF, ZF + guard), "cut: nothing lands in the adopted post after "
          "the failed call ended");
    weft_mem_free(reg);
}

/* ---- kept: payloads read where they lie (send_kept) ---- */

static weft_status_t kept_send(weft_comm_t *comm, tp_ep_t *ep, uint32_t k, const void *pl,
                               size_t len)
{
    frame_hdr_t h = { .magic = FRAME_MAGIC, .version = FRAME_VERSION, .coll = COLL_SEND,
                      .frame = k, .len = (uint32_t)len, .src_rank = (uint32_t)rank };
    weft_status_t st;
    double t0 = now_s();
    while ((st = ep->ops->send_kept(ep, &h, pl)) == WEFT_IN_PROGRESS && now_s() - t0 < 5)
        progress_all(comm);
    return st;
}

/* ucx: a failed call's kept frames that the peer has not taken are given up with their
 * endpoint, so that no byte the caller writes after the call reaches the peer. Rank 1
 * sends a frame from malloc'd memory, rank 0 leaves it (the side communicator orders
 * them), rank 1 posts FAILED (the failing call's drain, 0.5 s), then rewrites and frees
 * the buffer; rank 0's receive of that payload never completes with the new bytes. */
static void kept_withdrawn(weft_comm_t *comm, weft_comm_t *side, tp_ep_t *ep, uint32_t k)
{
    unsigned char *buf = malloc(ZF);
    check(buf != NULL, "allocate");
    if (buf == NULL)
        return;
    if (rank == 1) {
        fill(buf, ZF, 200);
        check(kept_send(comm, ep, k, buf, ZF) == WEFT_OK, "withdrawn: send_kept a frame");
        tp_state_t s = { .kind = TP_STATE_FAILED, .status = WEFT_ERR_INTERNAL,
                         .origin = rank, .other = -1 };
        ep->ops->post_state(ep, &s);
        weft_status_t st = ep->ops->flush(ep);
        char msg[160];
        snprintf(msg, sizeof(msg), "withdrawn: after the failure, flush fails (%s) instead "
                 "of waiting for the peer", weft_status_str(st));
        check(st < 0, msg);
        fill(buf, ZF, 201);
    }
    check(weft_barrier(side) == WEFT_OK, "side barrier: rank 1 gave its frame up");
    if (rank == 0) {
        const frame_hdr_t *h = NULL;
        const void *payload = NULL;
        weft_status_t st = peek_wait(comm, ep, &h, &payload);
        memset(buf, 0xee, ZF);
        if (st == WEFT_OK && payload == NULL) {
            double t0 = now_s();
            while ((st = ep->ops->recv_payload(ep, buf, &payload)) == WEFT_IN_PROGRESS &&
                   now_s() - t0 < 1)
                progress_all(comm);
        }
        char msg[200];
        snprintf(msg, sizeof(msg), "withdrawn: the payload (%s) is the sent bytes or none, "
                 "never those written after the failure", weft_status_str(st));
        check(st == WEFT_OK ? payload != NULL && same(payload, ZF, 200) : untouched(buf, ZF),
              msg);
    }
    free(buf);
}

static void kept(weft_comm_t *comm, weft_comm_t *side)
{
    tp_ep_t *ep = comm->eps[1 - rank];
    if (ep->ops->send_kept == NULL || ep->ops->flush == NULL) {
        printf("rank %d: kept is for ib and ucx (%s reads no payload where it lies)\n", rank,
               ep->ops->name);
        return;
    }
    /* ib: weft_mem_alloc memory, unless WEFT_IB_ZCOPY=0; ucx: any host memory, for a
     * payload over its small-frame bound (32K: ucx_int.h) */
    int ucx = !strcmp(ep->ops->name, "ucx");
    const char *z = getenv("WEFT_IB_ZCOPY");
    int none = !ucx && z && !strcmp(z, "0");
    size_t cap = 3 * ZF;
    unsigned char *reg = NULL, *heap = malloc(cap);
    check(weft_mem_alloc((void **)&reg, cap) == WEFT_OK && heap, "allocate");
    if (!reg || !heap)
        return;
    /* below the engine: rank 1 sends 3 frames from weft_mem_alloc memory (read where
     * they lie, unless WEFT_IB_ZCOPY=0), then 3 from malloc'd memory (copied) */
    struct { unsigned char *buf; const char *name; int in_place; } mem[2] = {
        { reg, "weft_mem_alloc", !none }, { heap, "malloc'd", ucx },
    };
    uint32_t k = 1;
    for (int m = 0; m < 2; m++) {
        char msg[200];
        if (rank == 1) {
            uint64_t before = ep->frames_kept;
            for (int i = 0; i < 3; i++, k++) {
                fill(mem[m].buf + i * ZF, ZF, k);
                check(kept_send(comm, ep, k, mem[m].buf + i * ZF, ZF) == WEFT_OK,
                      "send_kept a frame");
            }
            weft_status_t st;
            double t0 = now_s();
            while ((st = ep->ops->flush(ep)) == WEFT_IN_PROGRESS && now_s() - t0 < 5)
                progress_all(comm);
            snprintf(msg, sizeof(msg), "%s memory: flush after the frames (%s)", mem[m].name,
                     weft_status_str(st));
            check(st == WEFT_OK, msg);
            uint64_t n = ep->frames_kept - before;
            snprintf(msg, sizeof(msg), "%s memory: %llu of 3 frames sent from where they lay "
                     "(want %d)", mem[m].name, (unsigned long long)n, mem[m].in_place ? 3 : 0);
            check(n == (mem[m].in_place ? 3u : 0u), msg);
        } else {
            unsigned char dst[ZF];
            int in_place;
            for (int i = 0; i < 3; i++, k++)
                raw_recv(comm, ep, k, ZF, k, NULL, 0, dst, &in_place, NULL);
        }
    }
    /* through the engine: an all-gather on weft_mem_alloc buffers sends from them (every
     * send of a 2-rank all-gather keeps: schedule.h), one on malloc'd buffers copies (ib;
     * ucx sends from both, frames over 32K) */
    size_t n = ucx ? ZF : ZF / 2;
    for (int m = 0; m < 2; m++) {
        unsigned char *out = m ? heap : reg, *in = out + 2 * ZF;
        fill(in, n, 100u + (unsigned)rank);
        uint64_t before = ep->frames_kept;
        weft_status_t st = weft_allgather(in, out, n, WEFT_UINT8, comm);
        char msg[200];
        snprintf(msg, sizeof(msg), "%s memory: all-gather (%s) has both ranks' bytes",
                 mem[m].name, weft_status_str(st));
        check(st == WEFT_OK && same(out, n, 100) && same(out + n, n, 101), msg);
        uint64_t nk = ep->frames_kept - before;
        snprintf(msg, sizeof(msg), "%s memory: the all-gather sent %llu frame(s) from where "
                 "they lay (want %s)", mem[m].name, (unsigned long long)nk,
                 mem[m].in_place ? "some" : "none");
        check(mem[m].in_place ? nk > 0 : nk == 0, msg);
    }
    free(heap);
    weft_mem_free(reg);
    if (ucx)
        kept_withdrawn(comm, side, ep, k);
}

/* ---- posted: a failed call's payload receive into the caller's buffer (ucx) ---- */

/* A payload receive that ucx posted at the caller's destination must not complete
 * after the failed call returns (else the caller's freed or reused buffer is written).
 * Rank 1 sends a frame of PF bytes, more than UCX moves without rank 1's progress (a
 * rendezvous over shared memory or tcp, or the rest of a long eager message), then
 * makes none for 1.5 s; rank 0 takes the header, asks for the payload at its buffer,
 * and posts FAILED, as a failing call does (the drain, then ucx_withdraw_posted). Once
 * rank 1 progresses again (the side barrier) and 0.5 s more, rank 0's buffer must be
 * as it was when the post returned. */
#define PF (1u << 20)
static void posted(weft_comm_t *comm, weft_comm_t *side)
{
    tp_ep_t *ep = comm->eps[1 - rank];
    if (strcmp(ep->ops->name, "ucx")) {
        printf("rank %d: posted is for ucx (%s lands no payload in a posted buffer later, "
               "or withdraws it in the engine: recv_post)\n", rank, ep->ops->name);
        return;
    }
    unsigned char *buf = malloc(PF), *snap = malloc(PF);
    check(buf && snap, "allocate");
    if (!buf || !snap) {
        free(buf);
        free(snap);
        return;
    }
    if (rank == 1) {
        frame_hdr_t h = { .magic = FRAME_MAGIC, .version = FRAME_VERSION, .coll = COLL_SEND,
                          .frame = 1, .len = PF, .src_rank = (uint32_t)rank };
        fill(buf, PF, 77);
        weft_status_t st;
        double t0 = now_s();
        while ((st = ep->ops->send(ep, &h, buf)) == WEFT_IN_PROGRESS && now_s() - t0 < 5)
            progress_all(comm);
        check(st == WEFT_OK, "posted: send a 1 MB frame");
        usleep(1500000);                /* no progress: its bytes wait here */
    } else {
        const frame_hdr_t *h = NULL;
        const void *payload = NULL;
        weft_status_t st = peek_wait(comm, ep, &h, &payload);
        check(st == WEFT_OK && h && h->len == PF, "posted: the frame's header");
        memset(buf, 0xee, PF);
        if (st == WEFT_OK && payload == NULL)
            st = ep->ops->recv_payload(ep, buf, &payload);
        char msg[160];
        snprintf(msg, sizeof(msg), "posted: the payload is still coming (%s) while rank 1 "
                 "makes no progress", weft_status_str(st));
        check(st == WEFT_IN_PROGRESS, msg);
        tp_state_t s = { .kind = TP_STATE_FAILED, .status = WEFT_ERR_INTERNAL,
                         .origin = rank, .other = -1 };
        ep->ops->post_state(ep, &s);
        memcpy(snap, buf, PF);
    }
    check(weft_barrier(side) == WEFT_OK, "posted: side barrier (rank 1 progresses again)");
    if (rank == 0) {
        double t0 = now_s();
        while (now_s() - t0 < 0.5)
            progress_all(comm);
        check(memcmp(buf, snap, PF) == 0, "posted: no byte landed in the buffer after the "
              "failure was handled");
    }
    free(buf);
    free(snap);
}

/* ---- goodbyes: late goodbyes of closed communicators (ucx) ---- */

#ifdef WEFT_HAVE_UCX
/* A split of comm that `first` destroys, then the other rank, ordered by barriers on
 * comm: the second's goodbye reaches the first's worker ahead of the second barrier's
 * message (one shared-memory fifo, in order). */
static void split_close(weft_comm_t *comm, int first, const char *what)
{
    weft_comm_t *c = NULL;
    check(weft_comm_split(comm, 0, rank, &c) == WEFT_OK, what);
    for (int turn = 0; turn < 2; turn++) {
        if (c && (rank == first) == (turn == 0)) {
            weft_comm_destroy(c);
            c = NULL;
        }
        check(weft_barrier(comm) == WEFT_OK, "goodbyes: barrier after a split's destroy");
    }
}

static void goodbyes(weft_comm_t *comm)
{
    if (strcmp(comm->eps[1 - rank]->ops->name, "ucx")) {
        printf("rank %d: goodbyes is for ucx (%s)\n", rank, comm->eps[1 - rank]->ops->name);
        return;
    }
    split_close(comm, 1, "goodbyes: split (rank 1 destroys first)");
    int before = ucx_closed_messages();
    split_close(comm, 0, "goodbyes: split (rank 0 destroys first)");
    int after = ucx_closed_messages();
    if (rank == 1) {
        check(before, "goodbyes: rank 0's late goodbyes reached rank 1's closed receives "
              "(the case this checks happened)");
        check(!after, "goodbyes: none of them is left in the worker after one more "
              "communicator's creation and close");
    }
}
#else
static void goodbyes(weft_comm_t *comm)
{
    printf("rank %d: goodbyes is for ucx (not built)\n", rank);
}
#endif

/* ---- get_cancel: a get still running when its call fails (ucx) ---- */

/* rma_cancel ends the failed call's transfers: when it returns, the get must not write
 * the caller's buffer any more, whenever the peer answers. */
static void get_cancel(weft_comm_t *comm, weft_comm_t *side)
{
    tp_ep_t *ep = comm->eps[1 - rank];
    if (strcmp(ep->ops->name, "ucx")) {
        printf("rank %d: get_cancel is for ucx (%s)\n", rank, ep->ops->name);
        return;
    }
    unsigned char *buf = malloc(BIG), *snap = malloc(BIG);
    check(buf && snap, "allocate");
    if (!buf || !snap) {
        free(buf);
        free(snap);
        return;
    }
    tp_mem_t *m = NULL;
    if (rank == 1) {
        check(offer(comm, ep, buf, 3, &m) == WEFT_OK, "get_cancel: send the key");
        usleep(1500000);                /* no progress: a get of ours waits for it */
    } else {
        offer_t o;
        tp_rmem_t *rm = NULL;
        check(weft_recv(&o, sizeof(o), WEFT_UINT8, 1, comm) == WEFT_OK,
              "get_cancel: receive the key");
        weft_status_t st = ep->ops->rkey_unpack(ep, &o.key, &rm);
        check(st == WEFT_OK, "get_cancel: unpack the key");
        memset(buf, 0xee, BIG);
        tp_rma_t x = { NULL };
        if (st == WEFT_OK)
            st = ep->ops->get(ep, buf, rm, o.addr, BIG, &x);
        double t0 = now_s();
        while (st == WEFT_IN_PROGRESS && now_s() - t0 < 0.1) {
            progress_all(comm);
            st = ep->ops->rma_test(ep, &x);
        }
        char msg[160];
        snprintf(msg, sizeof(msg), "get_cancel: the get is still running (%s) while rank 1 "
                 "makes no progress", weft_status_str(st));
        check(st == WEFT_IN_PROGRESS, msg);
        if (x.req)
            ep->ops->rma_cancel(ep, &x);
        check(x.req == NULL, "get_cancel: the cancelled transfer's request is let go");
        if (rm)
            ep->ops->rkey_release(ep, rm);
        memcpy(snap, buf, BIG);
    }
    check(weft_barrier(side) == WEFT_OK, "get_cancel: side barrier (rank 1 progresses "
          "again)");
    if (rank == 0) {
        double t0 = now_s();
        while (now_s() - t0 < 0.5)
            progress_all(comm);
        check(memcmp(buf, snap, BIG) == 0, "get_cancel: no byte landed in the buffer after "
              "the cancel");
    }
    check(weft_barrier(side) == WEFT_OK, "get_cancel: side barrier (rank 0 has looked)");
    if (m)
        ep->ops->mem_dereg(comm, m);
    free(buf);
    free(snap);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "basic";
    weft_comm_t *comm;
    alarm(60);
    weft_status_t st = weft_comm_init(&comm);
    if (st != WEFT_OK) {
        printf("FAIL: weft_comm_init: %s\n", weft_last_error());
        return 1;
    }
    rank = weft_comm_rank(comm);
    if (weft_comm_size(comm) != 2) {
        printf("FAIL: test_rma runs on 2 ranks\n");
        return 1;
    }
    if (!strcmp(mode, "basic"))
        basic(comm);
    else if (!strcmp(mode, "peer_exit"))
        peer_exit(comm);
    else if (!strcmp(mode, "left"))
        left(&comm);
    else if (!strcmp(mode, "blocked"))
        blocked(comm);
    else if (!strcmp(mode, "slot"))
        slot(comm);
    else if (!strcmp(mode, "readonly"))
        readonly(comm);
    else if (!strcmp(mode, "regcache"))
        regcache(comm);
    else if (!strcmp(mode, "goodbyes"))
        goodbyes(comm);
    else if (!strcmp(mode, "zcopy") || !strcmp(mode, "kept") || !strcmp(mode, "posted") ||
             !strcmp(mode, "cut") || !strcmp(mode, "stale_key") ||
             !strcmp(mode, "get_cancel")) {
        /* a second communicator (its own connection) orders the ranks' steps without
         * touching the first one's queues */
        weft_comm_t *side = NULL;
        st = weft_comm_split(comm, 0, rank, &side);
        check(st == WEFT_OK, "split a side communicator");
        if (st == WEFT_OK) {
            if (!strcmp(mode, "zcopy"))
                zcopy(comm, side);
            else if (!strcmp(mode, "stale_key"))
                stale_key(comm, side);
            else if (!strcmp(mode, "kept"))
                kept(comm, side);
            else if (!strcmp(mode, "cut"))
                cut(comm, side);
            else if (!strcmp(mode, "get_cancel"))
                get_cancel(comm, side);
            else
                posted(comm, side);
            weft_comm_destroy(side);
        }
    }
    else {
        printf("usage: test_rma basic|peer_exit|stale_key|slot|readonly|left|regcache|zcopy|kept|posted|get_cancel|goodbyes|cut\n");
        return 2;
    }
    /* after a lost peer too: destroy must still release everything (LeakSanitizer
     * checks it in the sanitizer suite) */
    if (comm)
        weft_comm_destroy(comm);
    printf("test_rma %s rank %d: %d passed, %d failed\n", mode, rank, checks - fails, fails);
    return fails ? 1 : 0;
}
