/*
 * peerinfo.c - peer_info_t packed for the init exchange (comm_int.h: peer_pack,
 * peer_unpack). Every rank's record goes to every rank through rank 0 there (N^2 of
 * them), so a record carries each transport's address to its length rather than the
 * struct's fixed 2 KB. In a file of its own so that the fuzz target links it alone.
 *
 * Format (host byte order: every rank of a job runs on one architecture, as the struct
 * exchange before it assumed): a version byte, the fixed fields, the hostname's length
 * and bytes, then per transport slot a 16-bit length and the address; zeros pad the
 * record to the longest in the exchange.
 */
#include <stdint.h>
#include <string.h>

#include "comm_int.h"

#define PEER_PACK_VERSION 1

size_t peer_pack(const peer_info_t *p, uint8_t *b)
{
    uint8_t *o = b;
    *o++ = PEER_PACK_VERSION;
#define PUT(x) (memcpy(o, &(x), sizeof(x)), o += sizeof(x))
    PUT(p->rank);
    PUT(p->pid);
    PUT(p->host_id);
    PUT(p->pidns);
    PUT(p->local_rank);
    PUT(p->setup_failed);
    uint8_t hl = (uint8_t)strnlen(p->hostname, sizeof(p->hostname) - 1);
    PUT(hl);
    memcpy(o, p->hostname, hl);
    o += hl;
    for (int k = 0; k < TP_MAX; k++) {
        /* (a transport never writes more than TP_ADDR_BYTES: tp_addr_t's bound) */
        uint16_t len = p->addr[k].len <= TP_ADDR_BYTES ? p->addr[k].len : 0;
        PUT(len);
        memcpy(o, p->addr[k].blob, len);
        o += len;
    }
#undef PUT
    return (size_t)(o - b);
}

int peer_unpack(const uint8_t *b, size_t n, peer_info_t *p)
{
    size_t at = 1;
    memset(p, 0, sizeof(*p));
    if (n < 1 || b[0] != PEER_PACK_VERSION)
        return -1;
#define TAKE(dst, sz) do { if ((sz) > n - at) return -1; memcpy((dst), b + at, (sz)); \
                           at += (sz); } while (0)
    TAKE(&p->rank, sizeof(p->rank));
    TAKE(&p->pid, sizeof(p->pid));
    TAKE(&p->host_id, sizeof(p->host_id));
    TAKE(&p->pidns, sizeof(p->pidns));
    TAKE(&p->local_rank, sizeof(p->local_rank));
    TAKE(&p->setup_failed, sizeof(p->setup_failed));
    uint8_t hl;
    TAKE(&hl, 1);
    if (hl >= sizeof(p->hostname) || memchr(b + at, 0, hl < n - at ? hl : n - at) != NULL)
        return -1;
    TAKE(p->hostname, hl);
    for (int k = 0; k < TP_MAX; k++) {
        uint16_t len;
        TAKE(&len, sizeof(len));
        if (len > TP_ADDR_BYTES)
            return -1;
        p->addr[k].len = len;
        TAKE(p->addr[k].blob, len);
    }
#undef TAKE
    for (; at < n; at++)        /* the rest pads to the longest record: zeros */
        if (b[at] != 0)
            return -1;
    return 0;
}
