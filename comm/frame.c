/*
 * frame.c - reading frame headers: names, descriptions, and the check every received
 * header passes before its payload is touched.
 *
 * Everything here takes bytes that came off a wire or out of a peer's memory, so it
 * must accept any value without reading out of bounds, dividing by zero or printing
 * an unterminated string (tests/fuzz/fuzz_frame.c feeds it random headers).
 */
#include <stdio.h>
#include <string.h>

#include "frame.h"
#include "weft.h"

const char *coll_name(int coll)
{
    static const char *names[COLL_NUM] = {
        [COLL_ALLREDUCE] = "allreduce", [COLL_REDUCE_SCATTER] = "reduce_scatter",
        [COLL_ALLGATHER] = "allgather", [COLL_BROADCAST] = "broadcast",
        [COLL_REDUCE] = "reduce", [COLL_ALLTOALL] = "alltoall", [COLL_SEND] = "send",
        [COLL_RECV] = "recv", [COLL_BARRIER] = "barrier", [COLL_SENDRECV] = "sendrecv",
    };
    return coll > 0 && coll < COLL_NUM && names[coll] ? names[coll] : "unknown";
}

const char *call_desc_str(const call_desc_t *d, char *buf, size_t cap)
{
    const char *dt = weft_dtype_name((weft_dtype_t)d->dtype);
    const char *op = weft_op_name((weft_op_t)d->op);
    if (d->coll == COLL_SEND || d->coll == COLL_RECV || d->coll == COLL_SENDRECV) {
        char peer[24] = "";     /* a frame's header names no peer (root -1): the sender is */
        if (d->root >= 0)
            snprintf(peer, sizeof(peer), ", peer=%d", (int)d->root);
        snprintf(buf, cap, "%s(count=%llu, %s%s) #%u with that peer", coll_name(d->coll),
                 (unsigned long long)d->count, dt ? dt : "?", peer, d->seq);
        return buf;                 /* no op; the number is among that pair's calls */
    }
    /* the op of a reduction only, the root of a rooted call only: a broadcast was said
     * as "broadcast(count=4, float, sum, root=0)", an op its caller never gave */
    int reduces = d->coll == COLL_ALLREDUCE || d->coll == COLL_REDUCE_SCATTER ||
                  d->coll == COLL_REDUCE;
    int rooted = d->coll == COLL_BROADCAST || d->coll == COLL_REDUCE;
    char ops[24] = "", roots[24] = "";
    if (reduces)
        snprintf(ops, sizeof(ops), ", %s", op ? op : "?");
    if (rooted)
        snprintf(roots, sizeof(roots), ", root=%d", (int)d->root);
    snprintf(buf, cap, "%s(count=%llu, %s%s%s) seq %u", coll_name(d->coll),
             (unsigned long long)d->count, dt ? dt : "?", ops, roots, d->seq);
    return buf;
}

void call_desc_of_hdr(const frame_hdr_t *h, call_desc_t *d)
{
    memset(d, 0, sizeof(*d));
    d->count = h->count;
    d->seq = h->seq;
    d->root = h->root;
    d->coll = h->coll;
    d->dtype = h->dtype;
    d->op = h->op;
}

static int same_call(const frame_hdr_t *h, const frame_expect_t *e)
{
    const call_desc_t *c = &e->call;
    if (e->p2p)
        return h->coll == COLL_SEND && h->count == c->count && h->dtype == c->dtype &&
               h->seq == c->seq;
    return h->coll == c->coll && h->count == c->count && h->dtype == c->dtype &&
           h->op == c->op && h->root == c->root && h->seq == c->seq;
}

frame_verdict_t frame_check(const frame_hdr_t *h, const frame_expect_t *e, char *why,
                            size_t cap)
{
    char theirs[128], ours[128];
    if (h->magic != FRAME_MAGIC || h->version != FRAME_VERSION) {
        snprintf(why, cap, "corrupt frame from rank %u (magic %#x version %u)", e->peer,
                 h->magic, h->version);
        return FRAME_CORRUPT;
    }
    if (h->comm_id != e->comm_id || h->src_rank != e->peer) {
        snprintf(why, cap, "frame from rank %u carries comm %#x rank %u, expected comm %#x",
                 e->peer, h->comm_id, h->src_rank, e->comm_id);
        return FRAME_CORRUPT;
    }
    if (!same_call(h, e)) {
        call_desc_t d;
        call_desc_of_hdr(h, &d);
        snprintf(why, cap, "%s mismatch: rank %u sent %s, but this rank called %s",
                 e->p2p ? "point-to-point" : "collective", e->peer,
                 call_desc_str(&d, theirs, sizeof(theirs)),
                 call_desc_str(&e->call, ours, sizeof(ours)));
        return FRAME_MISMATCH;
    }
    if (FRAME_INDEX(h->frame) != FRAME_INDEX(e->frame) ||
        FRAME_CHANNEL(h->frame) != e->channel || h->len > e->room || e->esz == 0 ||
        h->len % e->esz != 0 || (h->len == 0 && e->room != 0)) {
        snprintf(why, cap, "frame %u (channel %u) from rank %u has length %u (expected frame "
                 "%u of channel %u, at most %llu bytes)", FRAME_INDEX(h->frame),
                 FRAME_CHANNEL(h->frame), e->peer, h->len, FRAME_INDEX(e->frame), e->channel,
                 (unsigned long long)e->room);
        return FRAME_CORRUPT;
    }
    return FRAME_OK;
}
