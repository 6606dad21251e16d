/*
 * flight.c - the flight recorder's ring of entries and its printer.
 *
 * Invariant: entry `id` lives at e[id % FLIGHT_SIZE] and is only valid while it is one
 * of the last FLIGHT_SIZE ids; updates for older ids are dropped.
 */
#include <signal.h>
#include <string.h>

#include "flight.h"
#include "frame.h"
#include "util.h"

static fr_entry_t *entry(flight_t *f, uint64_t id)
{
    fr_entry_t *e = &f->e[id % FLIGHT_SIZE];
    return e->id == id ? e : NULL;
}

uint64_t fr_queued(flight_t *f, const call_desc_t *call, uint64_t now)
{
    uint64_t id = f->next++;
    fr_entry_t *e = &f->e[id % FLIGHT_SIZE];
    memset(e, 0, sizeof(*e));
    e->id = id;
    e->call = *call;
    e->state = FR_QUEUED;
    e->t_queued = now;
    return id;
}

const fr_entry_t *fr_find_coll(const flight_t *f, uint32_t seq)
{
    for (uint64_t k = 0; k < FLIGHT_SIZE && k < f->next; k++) {
        const fr_entry_t *e = &f->e[(f->next - 1 - k) % FLIGHT_SIZE];
        if (e->call.seq == seq && e->call.coll != COLL_SEND && e->call.coll != COLL_RECV &&
            e->call.coll != COLL_SENDRECV)
            return e;
    }
    return NULL;
}

void fr_started(flight_t *f, uint64_t id, const char *algo, uint64_t now)
{
    fr_entry_t *e = entry(f, id);
    if (e) {
        e->state = FR_RUNNING;
        e->algo = algo;
        e->t_start = now;
    }
}

void fr_finished(flight_t *f, uint64_t id, weft_status_t st)
{
    fr_entry_t *e = entry(f, id);
    if (e) {
        e->state = st == WEFT_OK ? FR_DONE : FR_FAILED;
        e->status = st;
        e->t_end = time_ns_coarse();
    }
}

void fr_dump(const flight_t *f, FILE *out, int rank, int nranks, uint32_t comm_id,
             const char *why)
{
    static const char *states[] = { "queued", "running", "done", "failed" };
    uint64_t now = time_ns(), first = f->next > FLIGHT_SIZE ? f->next - FLIGHT_SIZE : 0;
    fprintf(out, "weft flight recorder: rank %d of %d, comm %#x, %s; last %llu call(s), "
            "oldest first\n", rank, nranks, comm_id, why,
            (unsigned long long)(f->next - first));
    fprintf(out, "  %6s %6s %-15s %12s %-8s %-4s %5s %-7s %-8s %10s %10s  %s\n", "call", "seq",
            "collective", "count", "dtype", "op", "root", "algo", "state", "ran_us", "age_ms",
            "status");
    for (uint64_t id = first; id < f->next; id++) {
        const fr_entry_t *e = &f->e[id % FLIGHT_SIZE];
        const call_desc_t *c = &e->call;
        const char *dt = weft_dtype_name((weft_dtype_t)c->dtype);
        const char *op = weft_op_name((weft_op_t)c->op);
        double ran = e->t_start ? ((e->t_end ? e->t_end : now) - e->t_start) / 1e3 : 0;
        fprintf(out, "  %6llu %6u %-15s %12llu %-8s %-4s %5d %-7s %-8s %10.1f %10.1f  %s\n",
                (unsigned long long)e->id, c->seq, coll_name(c->coll),
                (unsigned long long)c->count, dt ? dt : "?", op ? op : "?", (int)c->root,
                e->algo ? e->algo : "-", states[e->state], ran,
                (now - e->t_queued) / 1e6, weft_status_str(e->status));
    }
    fflush(out);
}

static volatile sig_atomic_t usr1_pending;

static void on_usr1(int sig)
{
    (void)sig;
    usr1_pending = 1;
}

void fr_install_signal(void)
{
    static int installed;
    struct sigaction old, sa;
    if (__atomic_exchange_n(&installed, 1, __ATOMIC_ACQ_REL))
        return;
    if (sigaction(SIGUSR1, NULL, &old) != 0 || old.sa_handler != SIG_DFL)
        return;     /* the application handles SIGUSR1 itself */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
}

int fr_signal_take(void)
{
    if (!usr1_pending)
        return 0;
    usr1_pending = 0;
    return 1;
}
