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

#include <stdint.h>

#define FRAME_MAGIC   0x54464557u   /* "WEFT" little-endian */
#define FRAME_VERSION 1

typedef enum {
    COLL_ALLREDUCE = 1, COLL_REDUCE_SCATTER, COLL_ALLGATHER, COLL_BROADCAST, COLL_REDUCE,
    COLL_ALLTOALL, COLL_SEND, COLL_RECV, COLL_BARRIER, COLL_SENDRECV, COLL_NUM
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
    uint32_t frame;     /* index of this frame within the op on this channel */
    uint64_t count;     /* the collective's count argument */
    uint32_t len;       /* payload bytes that follow */
    uint32_t src_rank;
} frame_hdr_t;          /* 40 bytes */

_Static_assert(sizeof(frame_hdr_t) == 40, "frame header is part of the wire format");

const char *coll_name(int coll);

#endif
