/*
 * transport.h - the ops table every transport fills (shm, tcp; later ucx, verbs).
 *
 * A transport moves whole frames (frame_hdr_t + payload) between two ranks over an
 * endpoint. The engine is its only caller. Setup happens in three phases driven by
 * comm/connect.c:
 *   local_setup  before the address exchange: create listeners/segments and fill this
 *                rank's part of the peer info
 *   connect      after the exchange: one endpoint per peer this transport serves
 *   post_connect after every rank connected (a barrier): drop names others no longer
 *                need (shm unlinks its segment here, so a crash leaves nothing behind)
 * Data calls never block:
 *   send        pushes one frame; WEFT_OK once the frame is wholly taken (the payload
 *               may be reused), WEFT_IN_PROGRESS when it could not be (yet) - call again
 *               with the same frame; <0 on failure (WEFT_ERR_PEER_LOST...)
 *   recv_peek   WEFT_OK with the next frame's header (valid until recv_release) and,
 *               when the transport already holds it, its payload; WEFT_IN_PROGRESS when
 *               no header is complete yet, <0 on failure. A NULL *payload_p means the
 *               payload is still on the wire: the engine checks the header, then calls
 *   recv_payload to land it at dst (a plain receive: no staging copy) or, with dst NULL,
 *               in the transport's staging (*payload_p); WEFT_IN_PROGRESS until whole
 *   rget        single-copy read of len bytes at the peer's address raddr into dst
 *               (blocking, whole or error); transports without it return
 *               WEFT_ERR_UNSUPPORTED, and can_rget says whether this endpoint has it
 */
#ifndef WEFT_TRANSPORT_H
#define WEFT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#include "weft.h"
#include "frame.h"
#include "mem.h"

typedef struct weft_comm weft_comm_t;

/* Every transport's endpoint starts with this, so the engine can reach the ops. */
typedef struct tp_ep {
    const struct tp_ops *ops;
    int peer;                   /* rank in the communicator */
} tp_ep_t;

/* What every rank publishes about itself in the bootstrap exchange. Fixed size, so
 * it travels as a flat blob. */
typedef struct peer_info {
    uint32_t rank;
    uint32_t pid;
    uint64_t host_id;           /* hash of hostname and boot id: same value = same host */
    char hostname[64];
    char shm_name[64];          /* this rank's inbound shm segment */
    struct sockaddr_in tcp_addr;/* this rank's data listener */
    uint64_t cma_probe_addr;    /* where this rank keeps cma_probe_val, so peers can */
    uint64_t cma_probe_val;     /* check that they may read its memory (shm's rget) */
    uint32_t local_rank;        /* filled by the communicator after the exchange */
    uint32_t pad;
} peer_info_t;

typedef struct tp_ops {
    const char *name;

    /* -- setup -- */
    int (*can_connect)(const weft_comm_t *comm, const peer_info_t *self, const peer_info_t *peer);
    weft_status_t (*local_setup)(weft_comm_t *comm, peer_info_t *self);
    weft_status_t (*connect)(weft_comm_t *comm, int peer, tp_ep_t **ep_p);
    weft_status_t (*post_connect)(weft_comm_t *comm);
    void (*local_cleanup)(weft_comm_t *comm);   /* undoes local_setup */

    /* -- data -- */
    weft_status_t (*send)(tp_ep_t *ep, const frame_hdr_t *hdr, const void *payload);
    weft_status_t (*recv_peek)(tp_ep_t *ep, const frame_hdr_t **hdr_p, const void **payload_p);
    weft_status_t (*recv_payload)(tp_ep_t *ep, void *dst, const void **payload_p);
    void (*recv_release)(tp_ep_t *ep);
    weft_status_t (*rget)(tp_ep_t *ep, void *dst, uint64_t raddr, size_t len);
    int (*can_rget)(const tp_ep_t *ep);
    /* a pointer through which this process can read the peer's [raddr, raddr+len),
     * which lies in the peer's weft_mem_alloc region reg; NULL where it cannot (not
     * registered, out of the region, mapping refused): rget then. May be NULL. */
    const void *(*rptr)(tp_ep_t *ep, const mem_region_t *reg, uint64_t raddr, size_t len);
    /* WEFT_OK while the peer may still answer, WEFT_ERR_PEER_LOST (logged, naming it)
     * once it cannot; called by the engine only when a wait has been idle a while */
    weft_status_t (*check_alive)(tp_ep_t *ep);

    /* -- peer states (comm/fail.c): outside the data frames, never blocking -- */
    /* tells the peer s; the latest post wins; best effort, and never sets the last
     * error (it runs while a failure's message is being reported) */
    void (*post_state)(tp_ep_t *ep, const tp_state_t *s);
    /* the peer's latest post (kind TP_STATE_NONE before any); <0 when it is gone, with
     * *s still filled: the last state it posted before going; the last error then says
     * why, unlogged (a peer gone after its part is no failure: the caller judges) */
    weft_status_t (*peer_state)(tp_ep_t *ep, tp_state_t *s);
    /* from any thread, at any time: this rank gives up on the peer, which then sees
     * WEFT_ERR_PEER_LOST once it has read what was sent before (abort, destroy) */
    void (*abort)(tp_ep_t *ep);

    /* -- teardown -- */
    void (*close)(tp_ep_t *ep);
} tp_ops_t;

/* The transports, in preference order. */
extern const tp_ops_t tp_shm_ops;
extern const tp_ops_t tp_tcp_ops;

/* Unlinks the weft shm segments in /dev/shm whose creating process is gone. */
void shm_remove_stale_segments(void);

#endif
