/*
 * frame.h - the header every data frame carries, on every transport.
 *
 * The receiver checks each header against the operation it is running before it
 * touches the payload: magic and version (garbage), communicator id (crossed wires),
 * sequence number and the collective's description (coll, count, dtype, op, root):
 * a rank that called something else fails with WEFT_ERR_MISMATCH naming both calls;
 * the frame counter (lost or replayed frames), and the length (never more than the
 * step still expects, a whole number of elements).
 */
#ifndef WEFT_FRAME_H
#define WEFT_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define FRAME_MAGIC   0x54464557u   /* "WEFT" little-endian */
#define FRAME_VERSION 2   /* 2: the frame word carries the channel */

typedef enum {
    COLL_ALLREDUCE = 1, COLL_REDUCE_SCATTER, COLL_ALLGATHER, COLL_BROADCAST, COLL_REDUCE,
    COLL_ALLTOALL, COLL_SEND, COLL_RECV, COLL_BARRIER, COLL_SENDRECV, COLL_NUM,
    COLL_STATE = 0x7f   /* not a call: a tp_state_t frame (transports that have no side
                         * channel carry peer states in the stream; never seen by the engine) */
} coll_kind_t;

typedef struct frame_hdr {
    uint32_t magic;
    uint8_t version;
    uint8_t coll;       /* coll_kind_t; a send frame carries COLL_SEND, checked vs RECV */
    uint8_t dtype;
    uint8_t op;
    uint32_t comm_id;
    uint32_t seq;       /* collective sequence number on this communicator */
    int32_t root;       /* root, or -1 */
    uint32_t frame;     /* FRAME_WORD: bits 0-23 the index of this frame within the op
                           on this connection (mod 2^24), bits 24-31 its channel */
    uint64_t count;     /* the collective's count argument */
    uint32_t len;       /* payload bytes that follow */
    uint32_t src_rank;
} frame_hdr_t;          /* 40 bytes */

_Static_assert(sizeof(frame_hdr_t) == 40, "frame header is part of the wire format");

/* A schedule's channels (sched_step_t.channel) share one connection per peer: their
 * frames interleave in an order both ends derive (sched.c), and each frame says which
 * channel and which frame on the connection it is. */
#define FRAME_CHANNELS 256
#define FRAME_INDEX_MASK 0xffffffu
static inline uint32_t frame_word(uint32_t index, unsigned channel)
{
    return (index & FRAME_INDEX_MASK) | (uint32_t)(channel & 0xffu) << 24;
}
#define FRAME_INDEX(w)   ((w) & FRAME_INDEX_MASK)
#define FRAME_CHANNEL(w) ((w) >> 24)

/* One call as two ranks compare it. */
typedef struct call_desc {
    uint64_t count;
    uint32_t seq;
    int32_t root;
    uint8_t coll, dtype, op, pad[5];
} call_desc_t;          /* 24 bytes */

/* What a rank tells its peers about itself outside the data frames (comm/fail.c): the
 * call it has been waiting in for a while, or that its communicator failed and why;
 * SPLIT_FAILED (comm.c): it could not connect the communicator of its split number
 * `other` (status: why), so the members waiting for it stop. */
enum { TP_STATE_NONE = 0, TP_STATE_WAITING = 1, TP_STATE_FAILED = 2, TP_STATE_SPLIT_FAILED = 3 };
typedef struct tp_state {
    uint32_t kind;      /* TP_STATE_* */
    int32_t status;     /* FAILED: the weft_status_t */
    int32_t origin;     /* the rank that saw the failure first (relays keep it) */
    int32_t other;      /* the rank it blames (the mismatching or lost one), or -1 */
    call_desc_t call;   /* the origin's call */
    call_desc_t other_call; /* mismatch: the call other's frame described */
} tp_state_t;           /* 64 bytes */

_Static_assert(sizeof(call_desc_t) == 24 && sizeof(tp_state_t) == 64,
               "peer states are part of the wire format");

/* What frame_check compares a header with: the receiving step's view. */
typedef struct frame_expect {
    uint32_t comm_id;
    uint32_t peer;      /* the rank the frame must come from */
    call_desc_t call;   /* this rank's call (p2p: count and seq of this direction) */
    int p2p;            /* point-to-point: a SEND frame, op and root not compared */
    uint32_t frame;     /* the next frame number from this peer (any 32 bits: compared
                           mod 2^24) */
    uint32_t channel;   /* the channel the receiving step belongs to */
    uint64_t room;      /* bytes the step still expects */
    uint32_t esz;       /* element size */
} frame_expect_t;

typedef enum { FRAME_OK = 0, FRAME_MISMATCH, FRAME_CORRUPT } frame_verdict_t;

const char *coll_name(int coll);
/* "allreduce(count=17, float32, sum, root=-1) seq 5"; any bytes give a printable line */
const char *call_desc_str(const call_desc_t *d, char *buf, size_t cap);
void call_desc_of_hdr(const frame_hdr_t *h, call_desc_t *d);
/* Checks header h (any bytes) against e. FRAME_OK, or a verdict with `why` filled
 * (FRAME_MISMATCH: a different call; FRAME_CORRUPT: garbage, wrong sender, wrong frame
 * number or a length the step has no room for). Reads nothing beyond *h. */
frame_verdict_t frame_check(const frame_hdr_t *h, const frame_expect_t *e, char *why,
                            size_t cap);

#endif
