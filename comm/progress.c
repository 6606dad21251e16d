/*
 * progress.c - the communicator's lock, and the thread that moves nonblocking
 * collectives while the caller computes.
 *
 * Without it an operation moves only inside weft calls (weft_test, weft_wait, later
 * calls), so nothing moves during a matmul. With WEFT_PROGRESS_THREAD=1 (the default) the
 * first nonblocking call on a communicator starts one thread for it, which drives engine
 * passes (engine_poll) whenever something is queued and nobody on the user's thread is
 * doing so, and sleeps on a condition variable otherwise. A program that only makes
 * blocking calls never has one.
 *
 * Locking. comm->lock guards all engine state (comm_int.h). The user's thread takes it
 * for every call (comm_enter/comm_leave): a blocking call and weft_wait hold it from
 * queueing to completion and drive the engine themselves, exactly as without the thread,
 * so their latency is unchanged; with no thread running the whole extra cost of a call is
 * one uncontended lock and unlock. While the thread exists, comm_enter first counts the
 * caller in comm->fg: the thread, which checks fg each time it holds the lock, then goes
 * to sleep instead of competing for the lock (glibc mutexes are not fair: a thread that
 * unlocks and locks again in a loop would starve a waiter), and comm_leave wakes it when
 * ops remain queued. weft_test only tries the lock, so it never waits behind a pass. A
 * nonblocking call of more than PROGRESS_EAGER_MAX only queues its op (the thread starts
 * it, off the caller's time); a smaller one makes one pass itself first, and so does
 * every call without the thread.
 *
 * Backoff. The machines this runs on give each rank one core, which the compute thread
 * owns. After a pass that moved something the thread passes again at once; after a pass
 * that moved nothing (a peer has not reached the call yet, or its data is not there) it
 * gives the core back: YIELD_PASSES passes each followed by sched_yield() (cheap when the
 * core is free, and hands the core to the compute thread when it is not), then sleeps of
 * SLEEP_MIN_NS doubling up to SLEEP_MAX_NS, with the thread's timer slack set to
 * SLACK_NS so that a sleep lasts about what it asks (the default slack, 50 us, would
 * stretch each one). docs/PERF.md ("Overlap") measured the trade-off on 2 ranks on
 * 2 cores, with a thread waiting 35 ms for a late peer beside a compute thread: the
 * thread's share of the core was 5.3-5.5 % with sleeps up to 50 us, 4-5 % up to 100 us,
 * 2.5-3.2 % up to 200 us and 1 % up to 1 ms; yielding alone costs less CPU but CFS then
 * runs the thread so rarely beside a busy compute thread that the peer waited for ms.
 * 200 us keeps the cost to a few percent while bounding how late the thread sees data.
 * A busy thread passes back to back: its work is the collective's own copying.
 *
 * Invariants:
 *   - the thread touches engine state only with comm->lock held, and starts no pass
 *     while comm->fg > 0;
 *   - it sleeps on comm->wake when the queue is empty (no polling while idle) and is
 *     woken by comm_leave when a caller leaves ops queued, and by progress_fini;
 *   - thread_on is written only by the user's thread (progress_kick, progress_fini);
 *   - an error the thread meets fails the head op as on the user's thread (engine.c),
 *     and the op's message is kept in its request for weft_wait/weft_test to repeat.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>

#include "comm_int.h"
#include "log.h"
#include "status.h"

#define YIELD_PASSES 8           /* idle passes followed by sched_yield() */
#define SLEEP_MIN_NS 20000ul     /* then the first sleep, doubling ... */
#define SLEEP_MAX_NS 200000ul    /* ... up to this (see above) */
#define SLACK_NS     5000ul      /* the thread's timer slack */

weft_status_t progress_init(weft_comm_t *comm)
{
    if (pthread_mutex_init(&comm->lock, NULL) != 0)
        return weft_error(WEFT_ERR_SYSTEM, "comm_init: pthread_mutex_init failed");
    if (pthread_cond_init(&comm->wake, NULL) != 0) {
        pthread_mutex_destroy(&comm->lock);
        return weft_error(WEFT_ERR_SYSTEM, "comm_init: pthread_cond_init failed");
    }
    return WEFT_OK;
}

int comm_enter(weft_comm_t *comm)
{
    int counted = comm->thread_on;
    if (counted)
        __atomic_add_fetch(&comm->fg, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&comm->lock);
    return counted;
}

void comm_leave(weft_comm_t *comm, int entered)
{
    if (entered)
        __atomic_sub_fetch(&comm->fg, 1, __ATOMIC_ACQ_REL);
    if (comm->thread_on && comm->q_head != NULL)
        pthread_cond_signal(&comm->wake);
    pthread_mutex_unlock(&comm->lock);
}

/* After the idle-th pass in a row that moved nothing: give the core away a while. */
static void back_off(unsigned idle)
{
    if (idle <= YIELD_PASSES) {
        sched_yield();
        return;
    }
    unsigned k = idle - YIELD_PASSES - 1;
    unsigned long ns = k >= 8 ? SLEEP_MAX_NS : SLEEP_MIN_NS << k;
    struct timespec ts = { 0, (long)(ns < SLEEP_MAX_NS ? ns : SLEEP_MAX_NS) };
    nanosleep(&ts, NULL);
}

static void *progress_main(void *arg)
{
    weft_comm_t *comm = arg;
    unsigned idle = 0;
    prctl(PR_SET_TIMERSLACK, SLACK_NS, 0, 0, 0);
    pthread_mutex_lock(&comm->lock);
    while (!comm->thread_stop) {
        if (comm->q_head == NULL || __atomic_load_n(&comm->fg, __ATOMIC_ACQUIRE) > 0) {
            idle = 0;
            pthread_cond_wait(&comm->wake, &comm->lock);
            continue;
        }
        int moved;
        engine_poll(comm, &moved);     /* failures end up in the ops (engine.c) */
        if (moved) {
            idle = 0;
            continue;
        }
        pthread_mutex_unlock(&comm->lock);
        back_off(++idle);
        pthread_mutex_lock(&comm->lock);
    }
    pthread_mutex_unlock(&comm->lock);
    return NULL;
}

void progress_kick(weft_comm_t *comm)
{
    if (comm->thread_on || !comm->cfg.progress_thread)
        return;
    sigset_t all, old;
    sigfillset(&all);              /* the application's signals go to its own threads */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&comm->thread, NULL, progress_main, comm);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        LOG_WARN(LOG_ENGINE, "comm %#x: cannot start the progress thread (error %d); "
                 "nonblocking calls progress inside weft calls only", comm->id32, rc);
        comm->cfg.progress_thread = 0;
        return;
    }
    pthread_setname_np(comm->thread, "weft-progress");
    comm->thread_on = 1;
    LOG_INFO(LOG_ENGINE, "comm %#x: progress thread started", comm->id32);
}

void progress_fini(weft_comm_t *comm)
{
    if (comm->thread_on) {
        int entered = comm_enter(comm);
        comm->thread_stop = 1;
        pthread_cond_broadcast(&comm->wake);
        comm_leave(comm, entered);
        pthread_join(comm->thread, NULL);
        comm->thread_on = 0;
    }
    pthread_cond_destroy(&comm->wake);
    pthread_mutex_destroy(&comm->lock);
}
