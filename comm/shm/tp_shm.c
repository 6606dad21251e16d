/*
 * tp_shm.c - the shared-memory transport between processes on one host.
 *
 * Each rank creates one POSIX shm segment holding an inbound ring per possible sender
 * (slot s = frames from rank s). A sender maps the receiver's segment and writes frames
 * into its slot; the receiver reads them in place (the engine copies or reduces
 * straight out of the ring). A ring is single-producer single-consumer. A frame is a
 * 64-byte header line and its payload; the header line ends with a stamp, stored last
 * with release, that names the frame's ring position (xor the ring's random key). The
 * consumer polls the stamp where the next frame will start, so one cache-line miss
 * brings it the news and the header together (polling a separate tail word would cost
 * a second, dependent miss per frame). A payload of up to 16 bytes (an 8-byte
 * all-reduce's) rides in the header line itself, between the 40-byte header and the
 * stamp, so such a frame costs the consumer one miss, not two; of a longer one the
 * consumer prefetches the first lines as soon as it sees the stamp.
 * The consumer frees a frame with a release store of `head`, on its own cache line.
 * Frames are 64-byte aligned and never wrap: when one does not fit before the end, a
 * WRAP marker (a stamped line too) sends the reader back to offset 0.
 *
 * How a sender copies a frame of COPY_TIMED_MIN bytes or more into the ring (WEFT_SHM_NT,
 * auto by default): with plain stores, each line is first fetched for ownership from the
 * consumer's cache, where the consumer's last read left it. Where the two cores share a
 * last-level cache that costs little; where they do not (two sockets, two CCDs, or a VM
 * whose host moved its vCPUs apart for a while) it costs a slow round trip per line, and
 * streaming stores, which fetch nothing, are several times faster (docs/PERF.md: 2.4-2.9
 * against 18-20 GB/s). With a shared cache streaming is the worse choice end to end (the
 * consumer then reads the frame from memory, not the cache), even where a frame alone
 * goes in up to 2.4x faster streamed (6-7 against 12-17 GB/s per frame, mixed with
 * plain). So the sender times its copies: a running average of each way's rate, a few
 * frames copied the other way to keep both current (COPY_PROBE_PLAIN, COPY_PROBE_NT), and
 * streaming stores while they are more than COPY_NT_GAIN times as fast. The choice is the
 * sender's alone: the bytes are the same.
 *
 * Large messages can skip the ring: the single-copy algorithms read straight from the
 * peer's buffer (shm_rma.c: process_vm_readv, or a mapping of weft_mem_alloc memory),
 * one copy instead of two, when the kernel lets this process read the peer's memory
 * (checked at connect with a probe word).
 *
 * Invariants: a stamp is only ever written at a frame start, and a frame's payload lies
 * wholly after its own stamp or wholly before it in its header line, so the word the
 * consumer polls holds either the stamp it waits for or a stale stamp or payload of an
 * earlier lap (which matches only if it equals position ^ key, a 2^-64 chance with the
 * random key); a frame is at most ring/4 bytes, so a frame plus a wrap always fits in an
 * empty ring; the segment name is unlinked as soon as every peer has mapped it, so a
 * crashed job leaves nothing in /dev/shm.
 */
#define _GNU_SOURCE /* process_vm_readv */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shm_int.h"
#include "check.h"
#include "sock.h"
#include "log.h"
#include "status.h"
#include "util.h"
#include "reduce.h"

#define SHM_MAGIC  0x4d485354464557ull   /* "WEFTSHM" */
#define WRAP_MAGIC 0x50415257u           /* "WRAP" */
#define FRAME_HDR_SPACE 64
#define STAMP_OFF       56      /* the stamp: last word of the header line */
#define INLINE_OFF      40      /* a payload of up to INLINE_MAX bytes rides in the header
                                   line, between the header and the stamp */
#define INLINE_MAX      (STAMP_OFF - INLINE_OFF)
#define PREFETCH_BYTES  2112    /* a received frame's payload lines fetched ahead: 32 */
#define COPY_TIMED_MIN  (64u << 10)     /* frames whose copy-in is timed (auto WEFT_SHM_NT) */
#define COPY_PROBE_PLAIN 128            /* with plain stores, one timed frame in this many
                                           streams (1 in 32 cost 3-5% at 16-64 MB), and
                                           with streaming stores one in */
#define COPY_PROBE_NT   64              /* this many is plain (a slow one while the cores
                                           share no cache: 6-7x a streamed one) */
#define COPY_NT_GAIN    3.5             /* streaming only while this many times as fast:
                                           with a shared cache it was up to 2.4x per frame
                                           here (and the worse choice end to end), without
                                           one 6-8x */
_Static_assert(sizeof(frame_hdr_t) <= INLINE_OFF, "the frame header leaves room for the "
               "inline payload and the stamp");

/* Ring bytes a frame of len payload bytes takes, and where its payload starts. */
static inline uint64_t frame_bytes(uint32_t len)
{
    return len <= INLINE_MAX ? FRAME_HDR_SPACE : FRAME_HDR_SPACE + align_up(len, 64);
}

static inline size_t payload_off(uint32_t len)
{
    return len <= INLINE_MAX ? INLINE_OFF : FRAME_HDR_SPACE;
}

typedef struct shm_seg_hdr {
    uint64_t magic;
    uint64_t nslots;
    uint64_t slot_bytes;    /* distance between rings */
    uint64_t ring_bytes;    /* data bytes per ring */
    uint64_t key;           /* the owner's random stamp key: ring r's is ring_key(key, r) */
} shm_seg_hdr_t;

/* The producer also owns the mailbox: its latest tp_state_t under a sequence lock
 * (state_gen odd while it writes), and `gone`, set when it gave up on the consumer. */
typedef struct shm_ring_ctl {
    _Alignas(64) uint64_t head;     /* consumer: bytes consumed */
    _Alignas(64) uint64_t state_gen;
    uint64_t gone;
    uint64_t state[sizeof(tp_state_t) / 8];
} shm_ring_ctl_t;

#define SEG_HDR_BYTES 4096
/* The cores' round-trip probe (shm_core_rtt): a line of the header page that only the
 * peer writes (2-rank communicators). The lower rank writes k = 1, 2, ... into the
 * peer's line and waits for k in its own; the other echoes what it sees. A word with
 * RTT_VERDICT set is the lower rank's answer: the other stops echoing, both return it. */
#define RTT_OFF         128
#define RTT_VERDICT     (1ull << 63)
#define RTT_ROUNDS      200         /* round trips per batch */
#define RTT_BATCHES     5           /* the median batch's mean: about 0.3 ms in all */
#define RTT_ARRIVE_S    2.0         /* how long the lower rank waits for the other */
#define RTT_BUDGET_NS   20000000ull /* all batches longer than this: a scheduler's round
                                       trips (ranks sharing a core), not the caches' */
#define CTL_BYTES     256           /* ring data starts this far into its slot */
_Static_assert(sizeof(shm_ring_ctl_t) <= CTL_BYTES, "ring control fits before the data");
_Static_assert(sizeof(shm_seg_hdr_t) <= RTT_OFF - 64 && RTT_OFF + 64 <= SEG_HDR_BYTES,
               "the round-trip line has the header page's line to itself");

typedef struct shm_local {
    char name[64];
    char *base;
    size_t bytes;
    int fd;                         /* the segment's, for the communicator's life: connect
                                       takes each local peer's ring pages through it, and
                                       its lock (seg_lock) says this process lives */
    int unlinked;
    uint64_t cma_probe;             /* peers read this to test single-copy access */
    size_t fit;                     /* the host's rings' size where /dev/shm is small
                                       (host_fit; 0: not worked out yet) */
    uint64_t least_free;            /* the least free /dev/shm a rank of the host saw */
    int populate;                   /* madvise(MADV_POPULATE_WRITE) works here: 1, 0, or
                                       -1 not asked yet (lazy_rings) */
    int lazy_peers, tx_taken, rx_taken;   /* lazy rings: peers, and of their rings those
                                             taken at a first frame (closed endpoints) */
} shm_local_t;


/* shm's address blob in the exchange: the inbound segment and the single-copy probe */
typedef struct shm_addr {
    char name[64];                  /* this rank's inbound segment */
    uint64_t cma_probe_addr;        /* where this rank keeps cma_probe_val, so peers */
    uint64_t cma_probe_val;         /* can check that they may read its memory (rget) */
    uint64_t shm_free;              /* bytes free in its /dev/shm at setup (0: unknown) */
    uint64_t fits;                  /* 1: its rings shrink to the host's fit (WEFT_BUFFSIZE
                                       unset), 0: they keep its WEFT_BUFFSIZE */
    uint64_t promised;              /* bytes of its process's lazy rings (any
                                       communicator) not taken yet at setup: free space
                                       already spoken for (shm_promised) */
} shm_addr_t;

/* This process's lazy rings' bytes not taken yet, over all its communicators: the
 * rings in its own segments, counted from connect until the owner's first look at them
 * (ring_ready) or their close. A later communicator's budget (host_fit) leaves them out
 * of the free space it sees, as it did when they were taken at init: before, a split or
 * dup made before any traffic saw the parent's rings' space as free and overcommitted
 * /dev/shm, which failed at a ring's first frame (from a review). */
static uint64_t shm_promised;
_Static_assert(sizeof(shm_addr_t) <= TP_ADDR_BYTES, "shm address fits the blob");

/* A rank's shm address, 0 when it published none. */
static int shm_addr_of(const peer_info_t *pi, shm_addr_t *a)
{
    const tp_addr_t *t = &pi->addr[tp_slot(&tp_shm_ops)];
    if (t->len != sizeof(*a))
        return 0;
    memcpy(a, t->blob, sizeof(*a));   /* the blob is unaligned */
    a->name[sizeof(a->name) - 1] = '\0';
    return a->name[0] != '\0';
}

typedef struct shm_ep {
    tp_ep_t base;
    shm_ring_ctl_t *tx_ctl;         /* our slot in the peer's segment */
    char *tx_data;
    uint64_t tx_size, tx_tail, tx_head_seen, tx_key;
    int tx_blocked;                 /* the last send found no room (check_alive) */
    int tx_ready, rx_ready;         /* the ring's data pages are taken (lazy: at first
                                       use, ring_ready; else at connect) */
    int lazy;                       /* lazy_rings said so at connect */
    uint64_t promise;               /* what this ring adds to shm_promised until taken */
    int peer_fd;                    /* the peer's segment, where its pid means nothing
                                       here (another pid namespace): its lock says
                                       whether it lives; else -1 */
    shm_local_t *local;
    shm_ring_ctl_t *rx_ctl;         /* the peer's slot in our segment */
    char *rx_data;
    uint64_t rx_size, rx_head, rx_key;
    uint64_t rx_cur;                /* bytes of the frame handed out by recv_peek */
    void *peer_map;
    size_t peer_map_bytes;
    pid_t peer_pid;
    shm_rma_t *rma;                 /* one-sided access to the peer (shm_rma.c) */
    shm_copy_t copy;                /* how large frames go into the peer's ring */
} shm_ep_t;

shm_rma_t *shm_ep_rma(const tp_ep_t *ep)
{
    return ((const shm_ep_t *)ep)->rma;
}

static int shm_can_connect(const weft_comm_t *comm, const peer_info_t *self,
                           const peer_info_t *peer)
{
    shm_addr_t a;
    return self->host_id == peer->host_id && shm_addr_of(peer, &a);
}

/* The lock on byte 0 of a segment that its creator holds, from before the segment has
 * anything in it until the communicator is destroyed or the process ends (an open file
 * description's lock: the kernel drops it with the last fd, however the process died).
 * Ranks in another pid namespace (one container per rank sharing /dev/shm, docker
 * --ipc=host) cannot ask about the creator's pid; they test the lock instead. */
static int seg_lock(int fd)
{
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* 1 when a process holds fd's segment's lock (0 when none does; -1: cannot tell) */
static int seg_locked(int fd)
{
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return -1;
    return fl.l_type != F_UNLCK;
}

/* Whether segment name may still be someone's, though its pid is gone from this pid
 * namespace: its creator holds its lock (a rank of another namespace; seg_lock). One
 * not whole yet (no header magic: shm_open, then the lock, then its size and header) is
 * looked at again 100 ms later, once a creator that was between shm_open and its lock
 * holds it; a creator that died there (killed during init) left it unlocked for good.
 * Where the kernel cannot tell (no OFD locks), the pid alone decides, as before. Before
 * 2026-11-28 a rank whose peer lived in another pid namespace removed the peer's live
 * segment here, and init failed "it is not there". */
static int seg_in_use(const char *name)
{
    int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int locked = seg_locked(fd);
    uint64_t magic = 0;
    if (locked == 0 && (pread(fd, &magic, sizeof(magic), 0) != (ssize_t)sizeof(magic) ||
                        magic != SHM_MAGIC)) {
        usleep(100000);
        locked = seg_locked(fd);
    }
    close(fd);
    return locked == 1;
}

/* Segments are named /weft-<comm id>-<rank>-<random>-p<pid> (/weft-<comm id>-<rank>-p<pid>
 * before 2026-11-27: another user who saw a communicator's id in /dev/shm could create a
 * split's names first, and the split failed "File exists") and unlinked once every peer
 * has mapped them; only a job that died during init leaves one. The next job on the host
 * removes those whose creator no longer exists (a pid from another pid namespace looks
 * dead too, so the segment's lock must also be free: seg_in_use). Every
 * communicator init calls it, whatever its transports, so a tcp-only job cleans up too. */
void shm_remove_stale_segments(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *de;
    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        unsigned long long id, nonce;
        int rank, pid, end = 0;
        if ((sscanf(de->d_name, "weft-%16llx-%d-%16llx-p%d%n", &id, &rank, &nonce, &pid,
                    &end) != 4 || de->d_name[end] != '\0') &&
            (end = 0, sscanf(de->d_name, "weft-%16llx-%d-p%d%n", &id, &rank, &pid, &end) != 3 ||
             de->d_name[end] != '\0'))
            continue;
        if (pid <= 0)
            continue;
        char name[300];
        snprintf(name, sizeof(name), "/%s", de->d_name);
        if (kill(pid, 0) != 0 && errno == ESRCH && !seg_in_use(name)) {
            if (shm_unlink(name) == 0)
                LOG_INFO(LOG_SHM, "shm: removed %s, left by a job that died (pid %d)", name,
                         pid);
        }
    }
    closedir(d);
}

static size_t slot_bytes(size_t ring)
{
    return align_up(CTL_BYTES + ring, 4096);
}

/* The stamp key of ring r of a segment whose owner drew `key` (distinct per ring). */
static uint64_t ring_key(uint64_t key, int r)
{
    return key + (uint64_t)r * 0x9e3779b97f4a7c15ull;
}

/* What to do about a /dev/shm too small for the rings: each rank of a host takes
 * WEFT_BUFFSIZE (4M) for every other rank of its host, where it was set (unset, the
 * rings shrink to fit: host_fit, down to 64K). */
#define SHM_FULL_HINT "; /dev/shm is full: each rank takes WEFT_BUFFSIZE for every other " \
    "rank of its host; enlarge it (docker run --shm-size, a Kubernetes emptyDir with medium " \
    "Memory mounted there) or lower WEFT_BUFFSIZE (unset, the rings shrink to fit half of " \
    "/dev/shm's free space)"

static weft_status_t shm_local_setup(weft_comm_t *comm, tp_addr_t *addr)
{
    shm_local_t *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "shm: out of memory");
    l->fd = -1;
    l->populate = -1;
    size_t ring = align_up(comm->cfg.buffsize, 4096);
    l->bytes = SEG_HDR_BYTES + (size_t)comm->nranks * slot_bytes(ring);
    /* a random part, tried again on a name taken: the name travels in the address */
    int fd = -1;
    for (int tries = 0; tries < 8 && fd < 0; tries++) {
        uint64_t nonce;
        if (random_bytes(&nonce, sizeof(nonce)) != 0)
            nonce = time_ns() ^ ((uint64_t)tries << 56);
        snprintf(l->name, sizeof(l->name), "/weft-%016llx-%d-%016llx-p%d",
                 (unsigned long long)comm->id, comm->rank, (unsigned long long)nonce,
                 (int)getpid());
        fd = shm_open(l->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        weft_status_t st = weft_error(WEFT_ERR_SYSTEM, "shm: cannot create %s: %m%s", l->name,
                                      sock_fd_hint(errno));
        free(l);
        return st;
    }
    if (seg_lock(fd) != 0)      /* a kernel before 3.15: peers in this pid namespace only */
        LOG_INFO(LOG_SHM, "shm: cannot lock %s (%m): ranks in another pid namespace will "
                 "not see this one leave", l->name);
    if (ftruncate(fd, (off_t)l->bytes) != 0) {
        weft_status_t st = weft_error(WEFT_ERR_SYSTEM, "shm: cannot size %s to %zu bytes "
                                      "(is /dev/shm large enough?): %m", l->name, l->bytes);
        close(fd);
        shm_unlink(l->name);
        free(l);
        return st;
    }
    /* the segment is sparse, a slot for every rank of the job: the header page, written
     * below, is taken now, where a full /dev/shm is an error, not a SIGBUS at the first
     * store; a ring's pages (control block and data) at connect, for the local peers only
     * (take_slot). Before 2026-11-28 every rank's control page was taken here: a page per
     * rank of the job, remote ones included (128 MB at 4096 ranks, twice a container's
     * /dev/shm) */
    int fe = posix_fallocate(fd, 0, SEG_HDR_BYTES);
    if (fe != 0) {
        errno = fe;
        weft_status_t st = weft_error(WEFT_ERR_SYSTEM, "shm: cannot take the pages of %s: "
                                      "%m%s", l->name, fe == ENOSPC ? SHM_FULL_HINT : "");
        close(fd);
        shm_unlink(l->name);
        free(l);
        return st;
    }
    l->base = mmap(NULL, l->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (l->base == MAP_FAILED) {
        weft_status_t st = weft_error(WEFT_ERR_SYSTEM, "shm: cannot map %s: %m", l->name);
        close(fd);
        shm_unlink(l->name);
        free(l);
        return st;
    }
    shm_seg_hdr_t *h = (shm_seg_hdr_t *)l->base;
    h->nslots = (uint64_t)comm->nranks;
    h->slot_bytes = slot_bytes(ring);
    h->ring_bytes = ring;
    if (random_bytes(&h->key, sizeof(h->key)) != 0)
        h->key = time_ns() ^ ((uint64_t)getpid() << 32);
    l->fd = fd;
    __atomic_store_n(&h->magic, SHM_MAGIC, __ATOMIC_RELEASE);
    if (random_bytes(&l->cma_probe, sizeof(l->cma_probe)) != 0)
        l->cma_probe = time_ns() ^ SHM_MAGIC;
    /* /dev/shm's free bytes before any ring of this communicator is taken (tmpfs
     * without a size limit says 0: unknown) */
    struct statvfs vs;
    uint64_t shm_free = fstatvfs(fd, &vs) == 0 ? (uint64_t)vs.f_bavail * vs.f_frsize : 0;
    shm_addr_t a = { .cma_probe_addr = (uint64_t)(uintptr_t)&l->cma_probe,
                     .cma_probe_val = l->cma_probe, .shm_free = shm_free,
                     .promised = __atomic_load_n(&shm_promised, __ATOMIC_RELAXED),
                     .fits = !comm->cfg.buffsize_given };
    snprintf(a.name, sizeof(a.name), "%s", l->name);
    memcpy(addr->blob, &a, sizeof(a));
    addr->len = sizeof(a);
    tp_set_ctx(comm, &tp_shm_ops, l);
    return WEFT_OK;
}

/* The size of this host's shm rings where /dev/shm is small: the rings of its n ranks
 * (n(n-1) of them) fit half of the least free space any of them saw at setup, the rest
 * left to everything else that lives there (other jobs, a PyTorch DataLoader's tensors).
 * Every rank of the host works out the same from the same records, so both ends of a
 * ring agree on its size without asking each other; a ring is min(its owner's
 * WEFT_BUFFSIZE, this) when its owner's WEFT_BUFFSIZE was not set (shm_addr_t.fits),
 * else its owner's WEFT_BUFFSIZE (too large: init fails, saying so). At least 64K, the
 * least WEFT_BUFFSIZE takes. Before 2026-11-28 every rank took 4M per local peer, so 8
 * ranks needed 224 MB, and init failed in a container's default 64 MB /dev/shm. */
static size_t host_fit(const weft_comm_t *comm, uint64_t *least_p)
{
    uint64_t least = 0, n = 0, promised = 0;
    for (int p = 0; p < comm->nranks; p++) {
        shm_addr_t a;
        if (!shm_can_connect(comm, &comm->peers[comm->rank], &comm->peers[p]) ||
            !shm_addr_of(&comm->peers[p], &a))
            continue;
        n++;
        promised += a.promised;     /* lazy rings of earlier communicators (shm_promised) */
        if (a.shm_free && (least == 0 || a.shm_free < least))
            least = a.shm_free;
    }
    *least_p = least;
    if (n < 2 || least == 0)
        return SIZE_MAX;
    uint64_t avail = least > promised ? least - promised : 0;
    uint64_t per = avail / 2 / (n * (n - 1));
    per = per > CTL_BYTES ? (per - CTL_BYTES) & ~(uint64_t)4095 : 0;
    return (size_t)WEFT_MAX(per, (uint64_t)64 << 10);
}

/* The size of the ring in owner's segment whose address is a and configured size is
 * ring_bytes (its header's): see host_fit. */
static size_t ring_size(shm_local_t *l, const weft_comm_t *comm, const shm_addr_t *a,
                        uint64_t ring_bytes)
{
    if (l->fit == 0)
        l->fit = host_fit(comm, &l->least_free);
    return a->fits ? (size_t)WEFT_MIN(ring_bytes, (uint64_t)l->fit) : (size_t)ring_bytes;
}

/* This rank's rings came out smaller than its WEFT_BUFFSIZE (host_fit): frames are cut
 * to fit them (connect's barrier takes the smallest of the ranks' buffsize_shm or
 * WEFT_BUFFSIZE), and the host's first rank says so once a process, the others at INFO. */
static void shrunk(weft_comm_t *comm, const shm_local_t *l, size_t ring)
{
    static int said;
    if (ring >= comm->cfg.buffsize || comm->buffsize_shm == ring)
        return;
    /* (a split's rings are no larger than its parent's: the parent's warning said it) */
    int warn = comm->local_rank == 0 && comm->parent_ranks == NULL &&
               !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED);
    size_t was = comm->cfg.buffsize;
    comm->buffsize_shm = ring;
    LOG_AT(warn ? LOG_LVL_WARN : LOG_LVL_INFO, LOG_SHM, "shm: /dev/shm is small for the "
           "%d ranks of this host: rings of %zuK, not %s %zuK (the host's rings take at "
           "most half of the %llu MB free at init); large messages may run slower: enlarge "
           "/dev/shm (docker run --shm-size, a Kubernetes emptyDir with medium Memory) or "
           "set WEFT_BUFFSIZE, which is then kept", comm->local_size, ring >> 10,
           comm->parent_ranks ? "the parent's" : "WEFT_BUFFSIZE's", was >> 10,
           (unsigned long long)(l->least_free >> 20));
}

/* Maps rank peer's segment; *fd_p is left open (the caller takes ring pages through it
 * and closes it). */
static weft_status_t map_peer(int peer, const char *name, void **base_p, size_t *bytes_p,
                              int *fd_p)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    /* unlinked (its setup or connect failed, and it let go: the others hear it from
     * that rank, so this is no failure of this rank's own to tell them: before
     * 2026-11-28 every rank that found a segment gone told the job it had failed, and
     * the others blamed it), or in another /dev/shm */
    if (fd < 0 && errno == ENOENT)
        return weft_error(WEFT_ERR_PEER_LOST, "shm: cannot open rank %d's segment %s: it is "
                          "not there (rank %d's setup failed, or it left; or the two do not "
                          "share /dev/shm: containers with their own need WEFT_HOSTID apart)",
                          peer, name, peer);
    if (fd < 0)
        return weft_error(WEFT_ERR_SYSTEM, "shm: cannot open peer segment %s: %m", name);
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < SEG_HDR_BYTES) {
        close(fd);
        return weft_error(WEFT_ERR_SYSTEM, "shm: peer segment %s is truncated", name);
    }
    void *base = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        close(fd);
        return weft_error(WEFT_ERR_SYSTEM, "shm: cannot map peer segment %s: %m", name);
    }
    *base_p = base;
    *bytes_p = (size_t)sb.st_size;
    *fd_p = fd;
    return WEFT_OK;
}

/* Single copy works when we can read the peer's probe word and it holds what it said. */
static int cma_probe(const shm_ep_t *e, const peer_info_t *peer, const shm_addr_t *a)
{
    uint64_t v = 0;
    if (shm_cma_read(e->peer_pid, &v, a->cma_probe_addr, sizeof(v)) != WEFT_OK) {
        LOG_INFO(LOG_SHM, "shm: no single-copy access to rank %u (pid %u): %m", peer->rank,
                 peer->pid);
        return 0;
    }
    return v == a->cma_probe_val;
}

/* Maps every page of a ring now, in this process, so the first laps of real traffic do
 * not stall on page faults (a few microseconds each in a VM: a 4 MB ring is 1024 of
 * them, which showed up as one slow row in every benchmark sweep). -1 (errno) where the
 * tmpfs behind /dev/shm has no room for them: a store there would be a SIGBUS (a
 * container's default /dev/shm is 64 MB), so the caller says so instead. */
static int ring_populate(char *data, size_t bytes)
{
#ifdef MADV_POPULATE_WRITE
    /* from the page that holds the data's start (a ring's data begins CTL_BYTES into its
     * slot; madvise wants a page-aligned address, and refused every ring with EINVAL
     * until 2026-11-27, leaving the stores below to do the work) */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)data & ~(page - 1);
    if (madvise((void *)lo, (uintptr_t)data + bytes - lo, MADV_POPULATE_WRITE) == 0)
        return 0;
    if (errno != EINVAL)    /* EINVAL: a kernel before 5.14; EFAULT: the tmpfs has no page
                               for it; ENOMEM: the memory (or its cgroup's limit) has none */
        return -1;
#endif
    for (size_t off = 0; off < bytes; off += 4096)   /* no frames flow before init ends */
        __atomic_fetch_add((volatile uint8_t *)data + off, 0, __ATOMIC_RELAXED);
    return 0;
}

/* Takes the tmpfs pages of the slot at off in the segment behind fd (a ring's control
 * block and data), before anything is stored there: where /dev/shm is full that is an
 * errno here, not a SIGBUS at the first store. ring_populate's madvise says so too, but
 * a kernel before 5.14 has none (EINVAL) and its fallback stores (before 2026-11-28 a
 * rank died of SIGBUS there). Both ends take the same pages: the second finds them. */
static int take_slot(int fd, size_t off, size_t bytes)
{
    int fe = posix_fallocate(fd, (off_t)off, (off_t)bytes);
    errno = fe == ENOSPC ? EFAULT : fe;     /* ring_populate's errno for a full tmpfs */
    return fe == 0 ? 0 : -1;
}

/* Whether a ring's data pages may wait for its first use (ring_ready), where most
 * pairs of a host never exchange a frame (a ring algorithm talks to 2 neighbours):
 * at 64 ranks on one host here, 63 rings a rank of 3 MB each made a job that only
 * inits take 10-16 s (0.6 s with them lazy: docs/PERF.md) and 12 GB of /dev/shm. Only where both rings'
 * sizes came from the host's budget (shm_addr_t.fits: half of the free space, so a
 * later take finds room unless something else filled /dev/shm meanwhile; a size the
 * user set is taken at connect, where too large fails init, saying so) and where the
 * kernel can take pages with an errno instead of a SIGBUS (MADV_POPULATE_WRITE, Linux
 * 5.14: asked once, on the segment's header page, which is ours already). */
static int lazy_rings(shm_local_t *l, const shm_addr_t *peer, const shm_addr_t *me)
{
    if (l->populate < 0) {
#ifdef MADV_POPULATE_WRITE
        l->populate = madvise(l->base, SEG_HDR_BYTES, MADV_POPULATE_WRITE) == 0;
#else
        l->populate = 0;
#endif
    }
    return l->populate && peer->fits && me->fits && l->fit != SIZE_MAX;
}

/* A lazy ring's data pages, at this end's first use of it (the sender's first frame,
 * the receiver's first look for one): both ends take the same pages, the second finds
 * them. Where /dev/shm has filled up since init, the call fails saying so. */
static weft_status_t ring_ready(shm_ep_t *e, int tx)
{
    /* the advice alone: never the stores ring_populate falls back to where the advice is
     * unknown (lazy_rings found it known), which would SIGBUS on a full tmpfs */
    char *data = tx ? e->tx_data : e->rx_data;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)data & ~(page - 1);
    size_t size = tx ? e->tx_size : e->rx_size;
#ifdef MADV_POPULATE_WRITE
    int rc = madvise((void *)lo, (uintptr_t)data + size - lo, MADV_POPULATE_WRITE);
#else
    int rc = -1;
    errno = EINVAL;
#endif
    if (rc != 0) {
        int full = errno == EFAULT;
        return weft_error(WEFT_ERR_SYSTEM, "shm: %s for the ring %s rank %d (%llu bytes, "
                          "taken at its first frame)%s%s", full ? "no room in /dev/shm" :
                          "no memory", tx ? "to" : "from", e->base.peer,
                          (unsigned long long)(tx ? e->tx_size : e->rx_size),
                          full ? "" : ": ", full ? SHM_FULL_HINT : strerror(errno));
    }
    *(tx ? &e->tx_ready : &e->rx_ready) = 1;
    if (!tx) {                      /* our ring: taken now (by us or by its sender) */
        __atomic_sub_fetch(&shm_promised, e->promise, __ATOMIC_RELAXED);
        e->promise = 0;
    }
    return WEFT_OK;
}

static weft_status_t shm_connect(weft_comm_t *comm, int peer, tp_ep_t **ep_p)
{
    shm_local_t *l = tp_ctx(comm, &tp_shm_ops);
    shm_addr_t a;
    if (!shm_addr_of(&comm->peers[peer], &a))
        return weft_error(WEFT_ERR_INTERNAL, "shm: rank %d published no segment", peer);
    shm_ep_t *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "shm: out of memory");
    e->peer_fd = -1;
    e->copy.mode = comm->cfg.shm_nt;
    int pfd = -1;
    weft_status_t st = map_peer(peer, a.name, &e->peer_map, &e->peer_map_bytes, &pfd);
    if (st != WEFT_OK) {
        free(e);
        return st;
    }
    const shm_seg_hdr_t *ph = e->peer_map, *mh = (const shm_seg_hdr_t *)l->base;
    if (__atomic_load_n(&ph->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC ||
        ph->nslots != (uint64_t)comm->nranks ||
        SEG_HDR_BYTES + ph->nslots * ph->slot_bytes > e->peer_map_bytes) {
        close(pfd);
        munmap(e->peer_map, e->peer_map_bytes);
        free(e);
        return weft_error(WEFT_ERR_INTERNAL, "shm: segment of rank %d is not a weft "
                          "segment of this communicator", peer);
    }
    char *tx_slot = (char *)e->peer_map + SEG_HDR_BYTES + (size_t)comm->rank * ph->slot_bytes;
    char *rx_slot = l->base + SEG_HDR_BYTES + (size_t)peer * mh->slot_bytes;
    e->tx_ctl = (shm_ring_ctl_t *)tx_slot;
    e->tx_data = tx_slot + CTL_BYTES;
    shm_addr_t me;
    shm_addr_of(&comm->peers[comm->rank], &me);
    e->tx_size = ring_size(l, comm, &a, ph->ring_bytes);
    e->rx_ctl = (shm_ring_ctl_t *)rx_slot;
    e->rx_data = rx_slot + CTL_BYTES;
    e->rx_size = ring_size(l, comm, &me, mh->ring_bytes);
    shrunk(comm, l, e->rx_size);
    e->tx_key = ring_key(ph->key, comm->rank);  /* written before the magic we acquired */
    e->rx_key = ring_key(mh->key, peer);
    e->peer_pid = (pid_t)comm->peers[peer].pid;
    e->local = l;
    /* a peer in another pid namespace: its pid is not its pid here (no single copy by
     * pid, no asking whether it exited); its segment's lock tells whether it lives */
    int same_ns = peer_pid_comparable(&comm->peers[peer], &comm->peers[comm->rank]);
    e->peer_fd = same_ns ? -1 : pfd;
    if (!same_ns)
        LOG_INFO(LOG_SHM, "shm: rank %d is in another pid namespace: no single copy with it, "
                 "its liveness from its segment's lock", peer);
    e->rma = shm_rma_create(peer, e->peer_pid, same_ns && cma_probe(e, &comm->peers[peer], &a));
    if (e->rma == NULL) {
        close(pfd);
        munmap(e->peer_map, e->peer_map_bytes);
        free(e);
        return weft_error(WEFT_ERR_NO_MEMORY, "shm: out of memory");
    }
    /* lazy: the control page now (both ends post states there), the rest at first use */
    int lazy = lazy_rings(l, &a, &me);
    size_t first = 4096 - CTL_BYTES;    /* the data that shares the control's page */
    int taken = take_slot(l->fd, (size_t)(rx_slot - l->base),
                          lazy ? 4096 : slot_bytes(e->rx_size)) == 0 &&
                take_slot(pfd, (size_t)(tx_slot - (char *)e->peer_map),
                          lazy ? 4096 : slot_bytes(e->tx_size)) == 0;
    int errno_taken = errno;
    if (e->peer_fd < 0)
        close(pfd);
    errno = errno_taken;
    e->tx_ready = e->rx_ready = !lazy;
    e->lazy = lazy;
    if (!taken || ring_populate(e->rx_data, lazy ? first : e->rx_size) != 0 ||
        ring_populate(e->tx_data, lazy ? first : e->tx_size) != 0) {
        int full = errno == EFAULT;
        st = weft_error(WEFT_ERR_SYSTEM, "shm: %s for the rings from and to rank %d (%zu and "
                        "%zu bytes)%s%s", full ? "no room in /dev/shm" : "no memory",
                        peer, e->rx_size, e->tx_size, full ? "" : ": ",
                        full ? SHM_FULL_HINT : strerror(errno));
        if (e->peer_fd >= 0)
            close(e->peer_fd);
        shm_rma_destroy(e->rma);
        munmap(e->peer_map, e->peer_map_bytes);
        free(e);
        return st;
    }
    e->promise = lazy ? slot_bytes(e->rx_size) - 4096 : 0;   /* our ring: its data pages */
    __atomic_add_fetch(&shm_promised, e->promise, __ATOMIC_RELAXED);
    *ep_p = &e->base;
    return WEFT_OK;
}

static weft_status_t shm_post_connect(weft_comm_t *comm)
{
    shm_local_t *l = tp_ctx(comm, &tp_shm_ops);
    if (l && !l->unlinked) {
        shm_unlink(l->name);
        l->unlinked = 1;
    }
    return WEFT_OK;
}

static void shm_local_cleanup(weft_comm_t *comm)
{
    shm_local_t *l = tp_ctx(comm, &tp_shm_ops);
    if (l == NULL)
        return;
    if (l->lazy_peers)
        LOG_INFO(LOG_SHM, "shm: rank %d: of the rings with its %d local peers, %d to and %d "
                 "from them carried frames (their pages taken then); the others took none",
                 comm->rank, l->lazy_peers, l->tx_taken, l->rx_taken);
    if (!l->unlinked)
        shm_unlink(l->name);
    if (l->fd >= 0)
        close(l->fd);
    munmap(l->base, l->bytes);
    free(l);
    tp_set_ctx(comm, &tp_shm_ops, NULL);
}

static inline void stamp_store(char *line, uint64_t v)
{
    __atomic_store_n((uint64_t *)(line + STAMP_OFF), v, __ATOMIC_RELEASE);
}

static inline uint64_t stamp_load(const char *line)
{
    return __atomic_load_n((const uint64_t *)(line + STAMP_OFF), __ATOMIC_ACQUIRE);
}

/* 1 when a whole frame waits at the consumer's position, behind a wrap marker or not:
 * the stamp is the producer's last store, so a producer killed mid-frame leaves none. */
static int frame_waiting(const shm_ep_t *e)
{
    uint64_t head = e->rx_head, pos = head % e->rx_size;
    if (stamp_load(e->rx_data + pos) != (head ^ e->rx_key))
        return 0;
    if (*(const uint32_t *)(e->rx_data + pos) != WRAP_MAGIC)
        return 1;
    head += e->rx_size - pos;
    return stamp_load(e->rx_data) == (head ^ e->rx_key);
}

int shm_copy_timed(const shm_copy_t *c, size_t bytes)
{
    return c->mode < 0 && bytes >= COPY_TIMED_MIN;
}

int shm_copy_next(shm_copy_t *c, size_t bytes)
{
    if (c->mode >= 0 || bytes < COPY_TIMED_MIN)
        return c->mode == 1 && bytes >= COPY_TIMED_MIN;
    int nt = c->nt;
    if (++c->frames % (nt ? COPY_PROBE_NT : COPY_PROBE_PLAIN) == 0)
        nt = !nt;
    return nt;
}

int shm_copy_note(shm_copy_t *c, int nt, double rate)
{
    double *avg = &c->rate[nt != 0];
    *avg = *avg > 0 ? 0.75 * *avg + 0.25 * rate : rate;
    int want = c->rate[0] > 0 && c->rate[1] > COPY_NT_GAIN * c->rate[0];
    if (want == c->nt)
        return 0;
    c->nt = want;
    return 1;
}

/* Copies a frame's payload into the ring: plain or streaming stores (see the top; the
 * streaming copy ends with a store fence, so the stamp stored after it comes later). */
static void copy_in(shm_ep_t *e, void *dst, const void *src, size_t n)
{
    int nt = shm_copy_next(&e->copy, n), timed = shm_copy_timed(&e->copy, n);
    uint64_t t0 = timed ? time_ns() : 0;
    if (nt)
        kern_copy_nt(dst, src, n);
    else
        memcpy(dst, src, n);
    if (timed && shm_copy_note(&e->copy, nt, (double)n / (double)(time_ns() - t0 + 1)))
        LOG_INFO(LOG_SHM, "shm: frames to rank %d now with %s stores (plain %.1f GB/s, "
                 "streaming %.1f GB/s)", e->base.peer, e->copy.nt ? "streaming" : "plain",
                 e->copy.rate[0], e->copy.rate[1]);
}

static weft_status_t shm_send(tp_ep_t *ep, const frame_hdr_t *hdr, const void *payload)
{
    shm_ep_t *e = (shm_ep_t *)ep;
    if (!e->tx_ready)
        RETURN_IF_ERR(ring_ready(e, 1));
    uint64_t total = frame_bytes(hdr->len);
    uint64_t pos = e->tx_tail % e->tx_size, contig = e->tx_size - pos;
    uint64_t need = contig < total ? contig + total : total;
    if (e->tx_size - (e->tx_tail - e->tx_head_seen) < need) {
        e->tx_head_seen = __atomic_load_n(&e->tx_ctl->head, __ATOMIC_ACQUIRE);
        if (e->tx_size - (e->tx_tail - e->tx_head_seen) < need) {
            e->tx_blocked = 1;
            return WEFT_IN_PROGRESS;
        }
    }
    e->tx_blocked = 0;
    uint64_t tail = e->tx_tail;
    if (contig < total) {
        *(uint32_t *)(e->tx_data + pos) = WRAP_MAGIC;
        stamp_store(e->tx_data + pos, tail ^ e->tx_key);
        tail += contig;
        pos = 0;
    }
    if (hdr->len)
        copy_in(e, e->tx_data + pos + payload_off(hdr->len), payload, hdr->len);
    memcpy(e->tx_data + pos, hdr, sizeof(*hdr));
    stamp_store(e->tx_data + pos, tail ^ e->tx_key);
    e->tx_tail = tail + total;
    return WEFT_OK;
}

static weft_status_t shm_recv_peek(tp_ep_t *ep, const frame_hdr_t **hdr_p,
                                   const void **payload_p)
{
    shm_ep_t *e = (shm_ep_t *)ep;
    if (!e->rx_ready)
        RETURN_IF_ERR(ring_ready(e, 0));
    if (!frame_waiting(e))
        return WEFT_IN_PROGRESS;
    uint64_t pos = e->rx_head % e->rx_size;
    if (*(const uint32_t *)(e->rx_data + pos) == WRAP_MAGIC) {
        e->rx_head += e->rx_size - pos;     /* released with the frame that follows */
        pos = 0;
    }
    const frame_hdr_t *h = (const frame_hdr_t *)(e->rx_data + pos);
    uint64_t total = frame_bytes(h->len);
    if (total > e->rx_size - pos)
        return weft_error(WEFT_ERR_INTERNAL, "shm: frame from rank %d claims %u bytes, more "
                          "than its ring holds", ep->peer, h->len);
    /* the payload's first lines are still in the producer's cache: ask for them now,
     * so they travel while the engine checks the header (once: the engine may peek at
     * a frame again before it takes it) */
    if (e->rx_cur == 0)
        for (uint64_t off = FRAME_HDR_SPACE; off < WEFT_MIN(total, (uint64_t)PREFETCH_BYTES);
             off += 64)
            __builtin_prefetch(e->rx_data + pos + off, 0, 3);
    e->rx_cur = total;
    *hdr_p = h;
    *payload_p = e->rx_data + pos + payload_off(h->len);
    return WEFT_OK;
}

/* Never called: recv_peek always hands out the payload in place. */
static weft_status_t shm_recv_payload(tp_ep_t *ep, void *dst, const void **payload_p)
{
    return weft_error(WEFT_ERR_INTERNAL, "shm: payload requested separately");
}

static void shm_recv_release(tp_ep_t *ep)
{
    shm_ep_t *e = (shm_ep_t *)ep;
    e->rx_head += e->rx_cur;
    e->rx_cur = 0;
    __atomic_store_n(&e->rx_ctl->head, e->rx_head, __ATOMIC_RELEASE);
}

/* A peer that exited or gave up will never advance its rings; what it wrote before
 * is still ours to read (our segment outlives it), so it is lost only once drained. */
static int peer_left(const shm_ep_t *e, int *exited)
{
    *exited = e->peer_fd >= 0 ? seg_locked(e->peer_fd) == 0   /* another pid namespace */
                              : pid_exited((int)e->peer_pid);  /* a zombie too */
    return *exited || __atomic_load_n(&e->rx_ctl->gone, __ATOMIC_ACQUIRE) != 0;
}

static weft_status_t shm_check_alive(tp_ep_t *ep)
{
    shm_ep_t *e = (shm_ep_t *)ep;
    int exited;
    if (!peer_left(e, &exited))
        return WEFT_OK;
    /* what it sent is read before its departure counts; but a send to an exited peer
     * that found no room never goes (nothing drains its ring), whatever waits here: an
     * in-place receive behind that send waited until WEFT_TIMEOUT (before 2026-11-28) */
    /* (a ring not taken yet: rx_head is 0 until the first look, so frame_waiting reads
     * only the first line of the data, in the control page taken at connect) */
    if (frame_waiting(e) && !(exited && e->tx_blocked))
        return WEFT_OK;
    if (exited && e->peer_fd >= 0)     /* its pid means nothing here */
        return weft_error(WEFT_ERR_PEER_LOST, "shm: rank %d (in another pid namespace) has "
                          "left: the lock on its segment was released (it exited, or "
                          "destroyed its communicator)", ep->peer);
    if (exited)
        return weft_error(WEFT_ERR_PEER_LOST, "shm: rank %d (pid %d) has exited", ep->peer,
                          (int)e->peer_pid);
    return weft_error(WEFT_ERR_PEER_LOST, "shm: rank %d (pid %d) aborted or destroyed its "
                      "communicator", ep->peer, (int)e->peer_pid);
}

static inline void cpu_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The lower rank: waits for the other to echo 1 (RTT_ARRIVE_S at most), times
 * RTT_BATCHES x RTT_ROUNDS round trips, then tells the verdict. */
static weft_status_t rtt_lead(tp_ep_t *ep, uint64_t *out, const uint64_t *in,
                              uint64_t deadline, uint32_t *rtt_ns)
{
    uint64_t k = 1, polls = 0;
    if (*rtt_ns == TP_RTT_MEASURE) {
        *rtt_ns = 0;
        __atomic_store_n(out, k, __ATOMIC_RELEASE);
        uint64_t arrive = WEFT_MIN(deadline, time_ns() + (uint64_t)(RTT_ARRIVE_S * 1e9));
        int came = 1;
        while (__atomic_load_n(in, __ATOMIC_ACQUIRE) != k) {
            if ((++polls & 1023) == 0) {
                RETURN_IF_ERR(shm_check_alive(ep));
                if (time_ns() > arrive) {
                    came = 0;
                    break;
                }
                sched_yield();          /* it may need this core to come */
            }
            cpu_pause();
        }
        uint64_t batch[RTT_BATCHES], start = time_ns();
        int over = !came;
        for (int b = 0; b < RTT_BATCHES && !over; b++) {
            uint64_t t0 = time_ns();
            for (int r = 0; r < RTT_ROUNDS && !over; r++) {
                __atomic_store_n(out, ++k, __ATOMIC_RELEASE);
                while (__atomic_load_n(in, __ATOMIC_ACQUIRE) != k && !over) {
                    if ((++polls & 4095) == 0)
                        over = time_ns() - start > RTT_BUDGET_NS;
                    cpu_pause();
                }
            }
            batch[b] = (time_ns() - t0) / RTT_ROUNDS;
        }
        if (over && came)
            RETURN_IF_ERR(shm_check_alive(ep));     /* slow, or gone? */
        if (!over) {
            qsort(batch, RTT_BATCHES, sizeof(batch[0]), cmp_u64);
            *rtt_ns = (uint32_t)WEFT_MIN(batch[RTT_BATCHES / 2], (uint64_t)UINT32_MAX - 1);
            if (*rtt_ns == 0)
                *rtt_ns = 1;
        }
        LOG_INFO(LOG_SHM, "shm: cores' round trip to rank %d: %s%u ns", ep->peer,
                 !came ? "not measured (it came late) " : over ? "not measured (over "
                 "20 ms: time-shared cores) " : "", *rtt_ns);
    }
    __atomic_store_n(out, RTT_VERDICT | *rtt_ns, __ATOMIC_RELEASE);
    return WEFT_OK;
}

/* The other rank: echoes until the verdict comes (or the setup's deadline). */
static weft_status_t rtt_follow(tp_ep_t *ep, uint64_t *out, const uint64_t *in,
                                uint64_t deadline, double timeout_s, uint32_t *rtt_ns)
{
    uint64_t last = 0, idle = 0;
    for (;;) {
        uint64_t v = __atomic_load_n(in, __ATOMIC_ACQUIRE);
        if (v & RTT_VERDICT) {
            *rtt_ns = (uint32_t)v;
            return WEFT_OK;
        }
        if (v != last) {
            __atomic_store_n(out, v, __ATOMIC_RELEASE);
            last = v;
            idle = 0;
            continue;
        }
        if ((++idle & 4095) == 0) {
            /* the verdict may have come just before the lower rank left (its init done,
             * its communicator destroyed at once): that is an answer, not a loss */
            int exited, left = peer_left((const shm_ep_t *)ep, &exited);
            if (left || time_ns() > deadline) {
                v = __atomic_load_n(in, __ATOMIC_ACQUIRE);
                if (v & RTT_VERDICT) {
                    *rtt_ns = (uint32_t)v;
                    return WEFT_OK;
                }
                if (left)
                    RETURN_IF_ERR(shm_check_alive(ep));
                if (time_ns() > deadline)
                    return weft_error(WEFT_ERR_TIMEOUT, "shm: init's WEFT_TIMEOUT (%g s, "
                                      "counted from its start) ran out before rank %d had "
                                      "timed the cores' round trip (slow or stalled in "
                                      "init)", timeout_s, ep->peer);
            }
            if (idle >= (1u << 16))
                sched_yield();          /* it may need this core */
        }
        cpu_pause();
    }
}

static weft_status_t shm_core_rtt(weft_comm_t *comm, tp_ep_t *ep, uint32_t *rtt_ns)
{
    shm_local_t *l = tp_ctx(comm, &tp_shm_ops);
    shm_ep_t *e = (shm_ep_t *)ep;
    uint64_t *out = (uint64_t *)((char *)e->peer_map + RTT_OFF);
    const uint64_t *in = (const uint64_t *)(l->base + RTT_OFF);
    uint64_t deadline = comm_setup_deadline(comm);
    return comm->rank < ep->peer ? rtt_lead(ep, out, in, deadline, rtt_ns)
                                 : rtt_follow(ep, out, in, deadline, comm->cfg.timeout_s,
                                              rtt_ns);
}

/* Sequence lock, word by word so that neither side ever reads a torn word. */
static void shm_post_state(tp_ep_t *ep, const tp_state_t *s)
{
    shm_ep_t *e = (shm_ep_t *)ep;
    uint64_t w[sizeof(*s) / 8], gen = __atomic_load_n(&e->tx_ctl->state_gen, __ATOMIC_RELAXED);
    memcpy(w, s, sizeof(w));
    __atomic_store_n(&e->tx_ctl->state_gen, gen + 1, __ATOMIC_RELAXED);
    /* release stores, acquire loads (not fences: ThreadSanitizer has no fences): a reader
     * that sees one new word also sees the odd generation after it */
    for (size_t i = 0; i < sizeof(w) / 8; i++)
        __atomic_store_n(&e->tx_ctl->state[i], w[i], __ATOMIC_RELEASE);
    __atomic_store_n(&e->tx_ctl->state_gen, gen + 2, __ATOMIC_RELEASE);
}

static weft_status_t shm_peer_state(tp_ep_t *ep, tp_state_t *s)
{
    shm_ep_t *e = (shm_ep_t *)ep;
    uint64_t w[sizeof(*s) / 8];
    for (int tries = 0; tries < 1000; tries++) {
        uint64_t g1 = __atomic_load_n(&e->rx_ctl->state_gen, __ATOMIC_ACQUIRE);
        for (size_t i = 0; i < sizeof(w) / 8; i++)
            w[i] = __atomic_load_n(&e->rx_ctl->state[i], __ATOMIC_ACQUIRE);
        if ((g1 & 1) == 0 && __atomic_load_n(&e->rx_ctl->state_gen, __ATOMIC_RELAXED) == g1) {
            memcpy(s, w, sizeof(*s));
            return WEFT_OK;
        }
    }
    memset(s, 0, sizeof(*s));       /* a writer that died mid-post: nothing to read */
    return WEFT_OK;
}

static void shm_abort(tp_ep_t *ep)
{
    shm_ep_t *e = (shm_ep_t *)ep;
    __atomic_store_n(&e->tx_ctl->gone, 1, __ATOMIC_RELEASE);
}

/* fork(): the child's copies of the segments' fds go, so that the lock a rank holds
 * (seg_lock) ends with the rank, not with a data-loader worker that outlives it */
static void shm_fork_child(tp_ep_t *ep)
{
    shm_ep_t *e = (shm_ep_t *)ep;
    if (e->local->fd >= 0) {
        close(e->local->fd);
        e->local->fd = -1;
    }
    if (e->peer_fd >= 0) {
        close(e->peer_fd);
        e->peer_fd = -1;
    }
}

static void shm_close(tp_ep_t *ep)
{
    shm_ep_t *e = (shm_ep_t *)ep;
    __atomic_sub_fetch(&shm_promised, e->promise, __ATOMIC_RELAXED);
    if (e->lazy) {
        e->local->lazy_peers++;
        e->local->tx_taken += e->tx_ready;
        e->local->rx_taken += e->rx_ready;
    }
    shm_abort(ep);          /* a peer still waiting on us must not wait for our pid */
    if (e->peer_fd >= 0)
        close(e->peer_fd);
    munmap(e->peer_map, e->peer_map_bytes);
    shm_rma_destroy(e->rma);
    free(e);
}

const tp_ops_t tp_shm_ops = {
    .name = "shm",
    .preference = 20,               /* within a host, before tcp */
    .chunk = 128 * 1024,            /* frames that stay in the caches (docs/PERF.md) */
    .get_blocks = 1,                /* process_vm_readv / _writev, or a mapping: done at once */
    .get_cost = shm_cma_cost,
    .core_rtt = shm_core_rtt,
    /* setup */
    .can_connect = shm_can_connect,
    .local_setup = shm_local_setup,
    .connect = shm_connect,
    .post_connect = shm_post_connect,
    .local_cleanup = shm_local_cleanup,
    /* progress: every endpoint call makes its own */
    .progress = NULL,
    /* data */
    .send = shm_send,
    .recv_peek = shm_recv_peek,
    .recv_payload = shm_recv_payload,
    .recv_release = shm_recv_release,
    .flush = NULL,                  /* a frame in the ring needs nothing more of us */
    .check_alive = shm_check_alive,
    /* peer states */
    .post_state = shm_post_state,
    .peer_state = shm_peer_state,
    .abort = shm_abort,
    /* one-sided: process_vm_readv/writev, regions mapped (shm_rma.c) */
    .mem_reg = shm_mem_reg,
    .mem_dereg = shm_mem_dereg,
    .rma_reach = shm_rma_reach,
    .rkey_unpack = shm_rkey_unpack,
    .rkey_release = shm_rkey_release,
    .get = shm_get,
    .put = shm_put,
    .rma_test = shm_rma_test,
    .rma_cancel = shm_rma_cancel,
    .rptr = shm_rptr,
    /* teardown */
    .close = shm_close,
    .fork_child = shm_fork_child,
};
