/*
 * flight.h - the flight recorder: the last FLIGHT_SIZE operations of a communicator.
 *
 * Every call is recorded when queued, when it starts running and when it ends, with
 * its description and timing, so that a timeout, a lost peer, SIGUSR1 or
 * weft_comm_dump() can show what this rank was doing and how far each call got.
 */
#ifndef WEFT_FLIGHT_H
#define WEFT_FLIGHT_H

#include <stdint.h>
#include <stdio.h>

#include "frame.h"
#include "weft.h"

#define FLIGHT_SIZE 64

typedef enum { FR_QUEUED = 0, FR_RUNNING, FR_DONE, FR_FAILED } fr_state_t;

typedef struct fr_entry {
    uint64_t id;             /* running number of the call on this communicator */
    call_desc_t call;        /* as frames describe it (point-to-point: that direction's seq) */
    uint8_t state;
    const char *algo;        /* static string, or NULL before the schedule exists */
    weft_status_t status;
    uint64_t t_queued, t_start, t_end;   /* time_ns_coarse(): at the clock's tick */
} fr_entry_t;

typedef struct flight {
    fr_entry_t e[FLIGHT_SIZE];
    uint64_t next;           /* id of the next call */
} flight_t;

/* Returns the id to pass to the later calls. */
/* Times are time_ns_coarse() values the caller already has (util.h: a precise clock read
 * costs a tenth of a small all-reduce in a VM), so durations of the recorder are
 * multiples of the coarse clock's tick (4 ms here). */
uint64_t fr_queued(flight_t *f, const call_desc_t *call, uint64_t now);
/* The most recent collective (not point-to-point) call with sequence number seq. */
const fr_entry_t *fr_find_coll(const flight_t *f, uint32_t seq);
void fr_started(flight_t *f, uint64_t id, const char *algo, uint64_t now);
void fr_finished(flight_t *f, uint64_t id, weft_status_t st);
void fr_dump(const flight_t *f, FILE *out, int rank, int nranks, uint32_t comm_id,
             const char *why);

/* SIGUSR1 asks every rank waiting in weft to dump its recorder. The handler only sets a
 * flag (async-signal-safe); idle waits look at it. Installed once per process, and only
 * where the application has no SIGUSR1 handler of its own. */
void fr_install_signal(void);
int fr_signal_take(void);

#endif
