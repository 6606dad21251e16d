/*
 * weftrun.c - the local launcher: starts N ranks of one program on this machine.
 *
 *   weftrun -n N [--tag-output] [--timeout SECS] [--addr HOST:PORT] [-x VAR[=VALUE]]...
 *           [--bind-to core|none] [--report-bindings]
 *           prog [args...]
 *
 * Each rank is a child process, leader of its own process group, with WEFT_RANK,
 * WEFT_WORLD_SIZE, WEFT_LOCAL_RANK, WEFT_LOCAL_SIZE, WEFT_ADDR (where rank 0 will listen)
 * and WEFT_SECRET (fresh per job unless already set) in its environment. One event loop,
 * poll() over a signalfd and, with --tag-output, the ranks' output pipes, reaps ranks,
 * forwards signals, enforces --timeout and relays tagged output. When a rank fails, the
 * job is stopped: SIGTERM to every other rank, SIGKILL after a 3 s grace period.
 *
 * A guardian, forked before the ranks, stops the ranks' process groups the same way
 * (SIGTERM, SIGKILL after 3 s) when weftrun ends without having reaped them: killed with
 * -9 or by the OOM killer, or dying on an error. PR_SET_PDEATHSIG, which each rank also
 * sets, reaches only the rank itself, not what it started (the program under a wrapper
 * script). The guardian reads a pipe whose write end only weftrun (and each rank until it
 * execs) holds: each rank writes its own pid there before exec, weftrun a rank's negated
 * pid once it has reaped it, and 0 when the job is over; end of file without that 0 is
 * weftrun's death. It sits in a process group of its own (a kill of weftrun's group, as
 * kill -9 %job or timeout -k send, does not reach it), ignores the signals weftrun
 * forwards, holds no other fd but stderr, is no rank, and weftrun waits for it to exit.
 * Not covered: processes that left a rank's process group (setsid, setpgid, a shell with
 * job control), which weftrun's own stop does not reach either; a rank already reaped
 * when weftrun died (what it left running is not stopped, as in a job weftrun ends); and
 * a guardian killed as well (pkill -f weftrun, which matches its command line; a cgroup
 * kill, which takes the ranks too).
 *
 * Invariants:
 *  - The launcher is single-threaded and every signal it acts on is blocked and read from
 *    the signalfd, so no code runs in signal context. Children get the original signal
 *    mask and SIGPIPE disposition back before exec.
 *  - A rank's process group is signalled only while the rank is not yet reaped, so a
 *    recycled pid is never hit. The guardian signals only groups of ranks weftrun had not
 *    reaped when it died, and stops at a group once it finds it empty (a pid can be
 *    reused only after its group has no member left).
 *  - The first cause of a stop (rank failure, launch failure, --timeout, SIGINT/SIGTERM)
 *    fixes the exit status and is reported once; exits after it are its consequences.
 *  - Once a stop begins, every live rank has been signalled and kill_ns is set; at kill_ns
 *    every rank still alive gets SIGKILL.
 *  - Tagged output is written one whole line at a time by this one process, so lines never
 *    interleave; a rank's pipes are drained and closed when the rank is reaped, and a
 *    partial last line is written with a newline added.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sock.h"
#include "topo.h"
#include "util.h"

#define MAX_RANKS   4096
#define GRACE_NS    (3ull * 1000000000ull)  /* SIGTERM -> SIGKILL */
#define READ_CHUNK  65536
#define CARRY_MAX   65536       /* a longer line is split into tagged pieces */
#define DRAIN_MAX   (1 << 20)   /* bytes still read from a reaped rank's pipe */
#define EXIT_USAGE  2
#define EXIT_TIMEOUT 124
#define EXIT_NOEXEC 127

typedef struct {
    int n;                  /* ranks */
    int tag_output;
    double timeout_s;       /* 0: none */
    const char *addr;       /* NULL: pick a free loopback port */
    char **xvars;           /* -x VAR=VALUE, borrowed from argv */
    int nx;
    char **prog;            /* the program and its arguments: argv's NULL-terminated tail */
    int bind_core;          /* --bind-to core: each rank on its own cores (topo_place) */
    int bind_none;          /* --bind-to none: WEFT_BIND=none, no binding by the library */
    int report_bindings;    /* --report-bindings: say where each rank is bound */
} opts_t;

typedef struct {
    int fd;                 /* read end of the pipe; -1 when closed or not tagging */
    int out_fd;             /* 1 or 2: where its tagged lines go */
    int rank;
    char *carry;            /* partial line not yet written */
    size_t ncarry;
} stream_t;

typedef struct {
    pid_t pid;              /* also the process group id */
    int alive;              /* launched and not yet reaped */
    stream_t out, err;
} rank_t;

typedef enum { CAUSE_NONE, CAUSE_RANK, CAUSE_LAUNCH, CAUSE_TIMEOUT, CAUSE_SIGNAL } cause_t;

typedef struct {
    const opts_t *o;
    rank_t *ranks;          /* [n] */
    int nalive;
    int sfd;                /* signalfd for SIGCHLD and the forwarded signals */
    sigset_t oldmask;       /* restored in children */
    struct sigaction oldpipe;
    struct pollfd *pfds;    /* [3 + 2n]: the signalfd, open pipes, stdout/stderr with output
                             * queued */
    stream_t **pstream;     /* [3 + 2n]: the stream behind each pfds entry (NULL: an
                             * output fd) */
    uint64_t deadline_ns;   /* --timeout; 0: none */
    uint64_t kill_ns;       /* SIGKILL escalation; 0: none pending */
    cause_t cause;
    int exit_code;
    int nstopped;           /* ranks still alive when the stop began */
    char *obuf;             /* tagged lines being assembled */
    size_t olen, ocap;
    int broken[3];          /* writing to fd 1 or 2 failed: drop further output */
    struct {                /* [1], [2]: tagged output waiting for stdout / stderr */
        char *buf;
        size_t start, len, cap, chunk;  /* chunk: bytes one ready poll lets us write */
        uint64_t dropped;               /* bytes refused past OUTQ_MAX */
    } q[3];
    topo_t *topo;           /* --bind-to core: this machine, and each rank's place */
    topo_place_t *places;
    int guard_fd;           /* write end of the guardian's pipe; -1: none */
    pid_t guard_pid;        /* the guardian; 0: none, or reaped */
} job_t;

static const int fwd_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };

/* ---- command line ---------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: weftrun -n N [options] prog [args...]\n"
        "Start N ranks of prog on this machine, each with WEFT_RANK, WEFT_WORLD_SIZE,\n"
        "WEFT_LOCAL_RANK, WEFT_LOCAL_SIZE, WEFT_ADDR and WEFT_SECRET set.\n"
        "\n"
        "  -n, -np N           number of ranks (1..%d)\n"
        "  --tag-output        prefix every output line with \"[rank] \"\n"
        "  --timeout SECS      stop the job after SECS seconds and exit 124\n"
        "  --addr HOST:PORT    rendezvous address (default 127.0.0.1:<free port>)\n"
        "  -x VAR=VALUE|VAR    set VAR in every rank's environment (repeatable; VAR\n"
        "                      alone passes on its value here, as mpirun -x)\n"
        "  --bind-to core|none core: bind each rank to its own block of cores before it\n"
        "                      starts, as Open MPI does by default for 2 ranks (hwloc\n"
        "                      placement: NUMA-aware, within the cpus weftrun may use,\n"
        "                      ranks share cores only when there are more than cores,\n"
        "                      and weftrun then says so;\n"
        "                      see weft-topo); none: no binding, not\n"
        "                      even the library's (sets WEFT_BIND=none). Default: weftrun\n"
        "                      binds nothing, and weft's init binds each rank the same way\n"
        "                      when the host has a core per rank (WEFT_BIND=auto)\n"
        "  --report-bindings   print each rank's cores on stderr (without --bind-to core:\n"
        "                      that weftrun left it unbound, and who places it)\n"
        "  -h, --help          show this help\n"
        "  --version           show the version\n"
        "\n"
        "WEFT_SECRET is passed through when set, else a fresh one is made per job.\n"
        "A failing rank stops the job: the others get SIGTERM, then SIGKILL after 3 s,\n"
        "and weftrun exits with the failing rank's status (128+signal if killed).\n"
        "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to the ranks.\n"
        "Should weftrun itself be killed (even with -9), a guardian it forks stops each\n"
        "rank's process group, children included: SIGTERM, then SIGKILL after 3 s.\n",
        MAX_RANKS);
}

__attribute__((format(printf, 1, 2), noreturn))
static void die_usage(const char *fmt, ...)
{
    va_list ap;
    fputs("weftrun: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'weftrun --help' for more information.\n", stderr);
    exit(EXIT_USAGE);
}

__attribute__((format(printf, 1, 2), noreturn))
static void die(const char *fmt, ...)
{
    va_list ap;
    fputs("weftrun: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* Matches argv[*i] against option `name`; returns its value ("name=value" or the next
 * argument, advancing *i), or NULL when argv[*i] is another option. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    const char *a = argv[*i];
    size_t len = strlen(name);

    if (strncmp(a, name, len) != 0)
        return NULL;
    if (a[len] == '=')
        return a + len + 1;
    if (a[len] != '\0')
        return NULL;
    if (*i + 1 >= argc)
        die_usage("option '%s' needs a value", name);
    return argv[++*i];
}

static int parse_count(const char *v)
{
    char *end;
    long n;

    errno = 0;
    n = strtol(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end != '\0' || errno != 0)
        die_usage("-n expects a number of ranks, got '%s'", v);
    if (n < 1 || n > MAX_RANKS)
        die_usage("-n must be between 1 and %d, got %s", MAX_RANKS, v);
    return (int)n;
}

static double parse_timeout(const char *v)
{
    char *end;
    double t = strtod(v, &end);

    if (end == v || *end != '\0' || !isfinite(t) || t <= 0 || t > 1e9)
        die_usage("--timeout expects a positive number of seconds, got '%s'", v);
    return t;
}

static const char *parse_addr(const char *v)
{
    const char *colon = strrchr(v, ':');
    char *end;
    long port;

    if (!colon || colon == v)
        die_usage("--addr expects HOST:PORT, got '%s'", v);
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno != 0 || port < 1 || port > 65535)
        die_usage("--addr has a bad port in '%s'", v);
    return v;
}

static void parse_args(int argc, char **argv, opts_t *o)
{
    const char *v;
    int i;

    memset(o, 0, sizeof(*o));
    o->xvars = calloc((size_t)argc, sizeof(char *));
    if (!o->xvars)
        die("out of memory");
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--version")) {
            printf("weftrun (weft) %d.%d.%d\n", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR,
                   WEFT_VERSION_PATCH);
            exit(0);
        }
        if (!strcmp(a, "--tag-output"))
            o->tag_output = 1;
        else if ((v = opt_value(argc, argv, &i, "-n")) || (v = opt_value(argc, argv, &i, "-np")))
            o->n = parse_count(v);
        else if ((v = opt_value(argc, argv, &i, "--timeout")))
            o->timeout_s = parse_timeout(v);
        else if ((v = opt_value(argc, argv, &i, "--addr")))
            o->addr = parse_addr(v);
        else if ((v = opt_value(argc, argv, &i, "--bind-to"))) {
            if (strcmp(v, "core") && strcmp(v, "none"))
                die_usage("--bind-to expects core or none, got '%s'", v);
            o->bind_core = !strcmp(v, "core");
            o->bind_none = !strcmp(v, "none");
        } else if (!strcmp(a, "--report-bindings"))
            o->report_bindings = 1;
        else if ((v = opt_value(argc, argv, &i, "-x"))) {
            if (v[0] == '\0' || v[0] == '=')
                die_usage("-x expects VAR=VALUE or VAR, got '%s'", v);
            o->xvars[o->nx++] = (char *)v;   /* VAR alone: as mpirun, its value here */
        } else
            die_usage("unknown option '%s'", a);
    }
    if (o->n == 0)
        die_usage("missing -n N (the number of ranks)");
    if (i >= argc)
        die_usage("missing the program to run");
    o->prog = argv + i;
}

/* ---- job environment -------------------------------------------------------------- */

/* Writes "127.0.0.1:PORT" for a free port below the kernel's ephemeral range
 * (sock_pick_loopback_port): a port bind(0) chose and released could be taken by any
 * other job's bind(0) before rank 0 binds it. Returns 0 or -1. */
static int pick_port(char *buf, size_t len)
{
    int port = sock_pick_loopback_port();
    if (port < 0)
        return -1;
    snprintf(buf, len, "127.0.0.1:%d", port);
    return 0;
}

static void set_env(const char *name, const char *value)
{
    if (setenv(name, value, 1) != 0)
        die("cannot set %s: %m", name);
}

/* Sets what every rank shares in weftrun's own environment, which the children inherit:
 * the -x variables first, then the job variables (so -x cannot break the job, except
 * WEFT_SECRET, which -x may provide like the caller's environment can). */
static void setup_env(const opts_t *o)
{
    char addr[300], num[16];

    for (int i = 0; i < o->nx; i++) {   /* "VAR" alone is inherited as it is (putenv of a
                                           name without '=' would unset it) */
        if (!strncmp(o->xvars[i], "WEFT_SECRET=", 12))
            fprintf(stderr, "weftrun: -x WEFT_SECRET=... puts the secret on the command line, "
                    "which every user of this host can read (ps); export WEFT_SECRET and "
                    "pass -x WEFT_SECRET, or let weftrun make one\n");
        if (strchr(o->xvars[i], '=') && putenv(o->xvars[i]) != 0)
            die("cannot set %s: %m", o->xvars[i]);
    }
    /* read after -x: a secret given there is the job's (before 2026-11-27 a fresh one
     * replaced it when the caller's environment had none) */
    const char *secret = getenv("WEFT_SECRET");
    if (!secret || !*secret) {
        unsigned char raw[16];
        char hex[33];
        if (random_bytes(raw, sizeof(raw)) != 0)
            die("cannot read /dev/urandom for WEFT_SECRET: %m");
        for (size_t i = 0; i < sizeof(raw); i++)
            snprintf(hex + 2 * i, 3, "%02x", raw[i]);
        set_env("WEFT_SECRET", hex);
    }
    if (o->addr)
        snprintf(addr, sizeof(addr), "%s", o->addr);
    else if (pick_port(addr, sizeof(addr)) != 0)
        die("cannot find a free port on 127.0.0.1: %m");
    set_env("WEFT_ADDR", addr);
    snprintf(num, sizeof(num), "%d", o->n);
    set_env("WEFT_WORLD_SIZE", num);
    set_env("WEFT_LOCAL_SIZE", num);
}

/* fds 0-2 must be open so that pipes never land on them. */
static void ensure_std_fds(void)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0)
            die("cannot open /dev/null: %m");
}

/* --tag-output holds two pipes per rank: raise the soft fd limit if that needs it. */
static void ensure_fd_limit(const opts_t *o)
{
    struct rlimit rl;
    rlim_t need = 2 * (rlim_t)o->n + 32;

    if (!o->tag_output || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < need)
        die("--tag-output with %d ranks needs %lu open files; the limit is %lu (ulimit -n)",
            o->n, (unsigned long)need, (unsigned long)rl.rlim_cur);
}

/* Blocks the signals weftrun acts on and opens the signalfd that delivers them. */
static void setup_signals(job_t *job)
{
    struct sigaction ign = { .sa_handler = SIG_IGN };
    sigset_t set;

    sigemptyset(&set);
    for (size_t i = 0; i < WEFT_ARRAY_LEN(fwd_signals); i++)
        sigaddset(&set, fwd_signals[i]);
    sigaddset(&set, SIGCHLD);
    signal(SIGCHLD, SIG_DFL);  /* an inherited SIG_IGN would make children unwaitable */
    sigaction(SIGPIPE, &ign, &job->oldpipe);
    sigprocmask(SIG_BLOCK, &set, &job->oldmask);
    job->sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (job->sfd < 0)
        die("signalfd: %m");
}

/* ---- the guardian ---------------------------------------------------------------- */

/* One message to the guardian: a rank's pid (the rank, before exec), its negation (reaped),
 * or 0 (the job is over). 4 bytes: atomic on a pipe. */
static void guard_send(int fd, int32_t msg)
{
    if (fd < 0)
        return;
    while (write(fd, &msg, sizeof(msg)) < 0 && errno == EINTR)
        ;   /* EPIPE: the guardian is gone, nothing to tell */
}

static int cmp_pid(const void *a, const void *b)
{
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

/* Marks live[i] for each group g[i] (sorted) that has a member still running, not a
 * zombie: with weftrun gone, its ranks are left for init to reap, and one that reaps late
 * would keep the group from looking empty to kill(-pgid, 0). Returns 0, or -1 when /proc
 * cannot tell (not mounted, or another pid namespace's). */
static int guard_scan(const pid_t *g, int n, char *live)
{
    char buf[512], self[32];
    ssize_t k = readlink("/proc/self", self, sizeof(self) - 1);
    DIR *d;
    struct dirent *e;

    if (k <= 0 || (self[k] = '\0', atoi(self) != getpid()) || !(d = opendir("/proc")))
        return -1;
    memset(live, 0, (size_t)n);
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(buf, sizeof(buf), "/proc/%s/stat", e->d_name);
        int fd = open(buf, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        k = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (k <= 0)
            continue;
        buf[k] = '\0';
        char state;
        int ppid, pgrp;
        const char *rp = strrchr(buf, ')');   /* the command name may hold anything */
        if (!rp || sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) != 3 ||
            state == 'Z' || state == 'X')
            continue;
        pid_t key = pgrp;
        const pid_t *hit = bsearch(&key, g, (size_t)n, sizeof(*g), cmp_pid);
        if (hit)
            live[hit - g] = 1;
    }
    closedir(d);
    return 0;
}

/* Drops from g (sorted, miss alongside) the groups that kill(-pgid, 0) finds empty or not
 * ours to signal (EPERM), and those /proc showed with no member but zombies twice in a
 * row (a scan can miss a process forked while it reads). */
static void guard_prune(pid_t *g, char *miss, char *live, int *n)
{
    int k = 0, scanned = guard_scan(g, *n, live) == 0;
    for (int i = 0; i < *n; i++) {
        if (kill(-g[i], 0) != 0)
            continue;
        miss[i] = scanned && !live[i] ? miss[i] + 1 : 0;
        if (miss[i] >= 2)
            continue;
        miss[k] = miss[i];
        g[k++] = g[i];
    }
    *n = k;
}

/* The guardian's life: learn the ranks from the pipe; at end of file after weftrun's 0,
 * exit; at end of file without it, weftrun is gone: SIGTERM to each unreaped rank's
 * process group, SIGKILL after GRACE_NS to those that still have a member, then exit. */
__attribute__((noreturn))
static void guardian(int rfd, int nranks, pid_t launcher)
{
    pid_t *g = calloc((size_t)nranks, sizeof(*g));
    int n = 0, done = 0;
    int32_t msg;
    size_t have = 0;

    if (!g)
        _exit(1);
    for (;;) {
        ssize_t k = read(rfd, (char *)&msg + have, sizeof(msg) - have);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        have += (size_t)k;
        if (have < sizeof(msg))
            continue;
        have = 0;
        if (msg == 0) {
            done = 1;
        } else if (msg > 0) {
            if (n < nranks)
                g[n++] = msg;
        } else {
            for (int i = 0; i < n; i++)
                if (g[i] == -msg) {
                    g[i] = g[--n];
                    break;
                }
        }
    }
    if (done || n == 0)
        _exit(0);
    dprintf(2, "weftrun: guardian: weftrun (pid %d) ended with %d rank(s) not reaped; "
            "stopping their process groups (SIGTERM, SIGKILL after %llu s)\n",
            (int)launcher, n, GRACE_NS / 1000000000ull);
    char *live = malloc((size_t)n), *miss = calloc((size_t)n, 1);
    if (!live || !miss)
        _exit(1);
    qsort(g, (size_t)n, sizeof(*g), cmp_pid);
    for (int i = 0; i < n; i++)         /* at once: no scan between the EOF and these */
        kill(-g[i], SIGTERM);
    uint64_t end = time_ns() + GRACE_NS;
    while (n > 0 && time_ns() < end) {
        struct timespec ts = { 0, 50 * 1000000L };
        nanosleep(&ts, NULL);
        guard_prune(g, miss, live, &n);
    }
    if (n > 0) {
        for (int i = 0; i < n; i++)
            kill(-g[i], SIGKILL);
        dprintf(2, "weftrun: guardian: %d rank process group(s) still running after "
                "SIGTERM; sent SIGKILL\n", n);
    }
    _exit(0);
}

/* Closes every fd from lo up. */
static void close_from(int lo)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lo, ~0u, 0u) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    for (int fd = lo; fd < (max > 0 && max < 1 << 20 ? max : 1 << 20); fd++)
        close(fd);
}

/* Forks the guardian (after setup_signals, before any rank). Without one (no pipe or no
 * fork) the job runs as before, with a warning. */
static void start_guardian(job_t *job)
{
    int p[2];
    pid_t launcher = getpid(), pid;

    job->guard_fd = -1;
    if (pipe2(p, O_CLOEXEC) < 0) {
        fprintf(stderr, "weftrun: cannot start the guardian (pipe: %s); ranks' children may "
                "outlive a killed weftrun\n", strerror(errno));
        return;
    }
    pid = fork();
    if (pid == 0) {
        struct sigaction ign = { .sa_handler = SIG_IGN };
        sigset_t none;
        int null;

        setpgid(0, 0);
        /* a name `pkill weftrun` does not match (it matches names by substring); its
         * command line is still weftrun's (`pkill -f weftrun` takes it too) */
        prctl(PR_SET_NAME, "weft-guard");
        for (size_t i = 0; i < WEFT_ARRAY_LEN(fwd_signals); i++)
            sigaction(fwd_signals[i], &ign, NULL);
        sigaction(SIGTSTP, &ign, NULL);
        sigaction(SIGTTIN, &ign, NULL);
        sigaction(SIGTTOU, &ign, NULL);   /* its message to a terminal, from the background */
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        /* only the pipe and stderr: holding the caller's stdout (or any pipe it inherited)
         * would keep a reader such as $(weftrun ...) waiting */
        if ((null = open("/dev/null", O_RDWR)) >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            if (null > 2)
                close(null);
        }
        if (p[0] != 3 && dup2(p[0], 3) < 0)    /* fds 0-2 are open: the pipe is above */
            _exit(1);
        close_from(4);
        guardian(3, job->o->n, launcher);
    }
    close(p[0]);
    if (pid < 0) {
        fprintf(stderr, "weftrun: cannot start the guardian (fork: %s); ranks' children may "
                "outlive a killed weftrun\n", strerror(errno));
        close(p[1]);
        return;
    }
    setpgid(pid, pid);
    job->guard_fd = p[1];
    job->guard_pid = pid;
}

/* The job is over (every rank reaped): tell the guardian, and wait for it, a second at
 * most (it exits at once; a stopped one is not waited for). */
static void stop_guardian(job_t *job)
{
    if (job->guard_fd < 0)
        return;
    guard_send(job->guard_fd, 0);
    close(job->guard_fd);
    job->guard_fd = -1;
    for (int i = 0; i < 1000 && job->guard_pid > 0; i++) {
        pid_t r = waitpid(job->guard_pid, NULL, WNOHANG);
        if (r != 0) {
            job->guard_pid = 0;
            break;
        }
        struct timespec ts = { 0, 1000000L };
        nanosleep(&ts, NULL);
    }
}

/* ---- launching -------------------------------------------------------------------- */

/* --bind-to core: this machine's topology and each rank's place, before any fork, within
 * the cpus weftrun itself may use (taskset, numactl, srun -c: not a core beyond them). */
static void plan_bindings(job_t *job)
{
    int n = job->o->n;
    if (topo_load_bound(&job->topo) != WEFT_OK)
        die("--bind-to core: cannot read this machine's topology: %s", weft_last_error());
    job->places = calloc((size_t)n, sizeof(*job->places));
    if (!job->places)
        die("out of memory");
    int shared = 0;
    for (int r = 0; r < n; r++) {
        if (topo_place(job->topo, r, n, &job->places[r]) != WEFT_OK)
            die("--bind-to core: no place for rank %d of %d: %s", r, n, weft_last_error());
        shared += job->places[r].shared;
    }
    if (shared)     /* Open MPI refuses this without --oversubscribe; say it at least */
        fprintf(stderr, "weftrun: --bind-to core: %d ranks on %d cores: %d of them share a "
                "core (oversubscribed; --bind-to none lets the kernel move them)\n", n,
                topo_num_cores(job->topo), shared);
}

/* In the child: own process group, original signal state, output pipes, rank variables,
 * then exec. Rank 0 keeps stdin unless it is a terminal (a background process group
 * reading the terminal would be stopped); the other ranks read /dev/null. */
__attribute__((noreturn))
static void child_exec(const job_t *job, int r, int out_w, int err_w, pid_t launcher)
{
    char num[16];
    int null;

    setpgid(0, 0);
    /* a rank outlives no weftrun: killed with -9 (or by the OOM killer), it cannot stop
     * the ranks, which sit in process groups of their own; the kernel sends SIGTERM to
     * the rank, and the guardian, told here (before exec, while this rank still holds the
     * pipe, so before it can see weftrun gone), stops the rank's whole process group */
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != launcher)
        _exit(EXIT_NOEXEC);     /* weftrun was gone before this rank could ask */
    guard_send(job->guard_fd, (int32_t)getpid());
    sigaction(SIGPIPE, &job->oldpipe, NULL);
    sigprocmask(SIG_SETMASK, &job->oldmask, NULL);
    if (out_w >= 0 && (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0))
        _exit(EXIT_NOEXEC);
    if ((r != 0 || isatty(0)) && (null = open("/dev/null", O_RDONLY)) >= 0) {
        dup2(null, 0);
        close(null);
    }
    if (job->places) {   /* inherited across exec */
        if (topo_bind(job->topo, &job->places[r]) != WEFT_OK) {
            dprintf(2, "weftrun: rank %d: cannot bind: %s\n", r, weft_last_error());
            _exit(EXIT_NOEXEC);
        }
        if (job->o->report_bindings) {   /* one write: ranks' lines never interleave */
            char line[512];
            FILE *m = fmemopen(line, sizeof(line), "w");
            if (m != NULL) {
                fprintf(m, "weftrun: ");
                topo_place_print(job->topo, &job->places[r], m);
                ssize_t w = fclose(m) == 0 ? write(2, line, strlen(line)) : 0;
                (void)w;                    /* a closed stderr is no reason to fail */
            }
        }
    }
    if (job->o->report_bindings && !job->places)
        dprintf(2, "weftrun: rank %d: not bound by weftrun (%s)\n", r, job->o->bind_none
                ? "--bind-to none: nor by weft, WEFT_BIND=none"
                : "weft's init places it as WEFT_BIND says: WEFT_DEBUG=INFO shows where");
    if (job->o->bind_none)
        setenv("WEFT_BIND", "none", 1);
    snprintf(num, sizeof(num), "%d", r);
    setenv("WEFT_RANK", num, 1);
    setenv("WEFT_LOCAL_RANK", num, 1);
    execvp(job->o->prog[0], job->o->prog);
    dprintf(2, "weftrun: cannot execute '%s': %s\n", job->o->prog[0], strerror(errno));
    _exit(EXIT_NOEXEC);
}

static void stream_init(stream_t *s, int fd, int out_fd, int r)
{
    s->fd = fd;
    s->out_fd = out_fd;
    s->rank = r;
    s->carry = NULL;
    s->ncarry = 0;
    if (fd >= 0)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void close_pair(int p[2])
{
    for (int i = 0; i < 2; i++)
        if (p[i] >= 0)
            close(p[i]);
}

/* Starts rank r. Returns 0, or -1 with errno set and nothing left open. */
static int launch_rank(job_t *job, int r)
{
    int out[2] = { -1, -1 }, err[2] = { -1, -1 };
    rank_t *rk = &job->ranks[r];
    pid_t pid;

    if (job->o->tag_output && (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)) {
        int e = errno;
        close_pair(out);
        close_pair(err);
        errno = e;
        return -1;
    }
    pid_t self = getpid();
    pid = fork();
    if (pid == 0)
        child_exec(job, r, out[1], err[1], self);
    if (pid < 0) {
        int e = errno;
        close_pair(out);
        close_pair(err);
        errno = e;
        return -1;
    }
    setpgid(pid, pid);  /* also done by the child: whichever runs first wins the race */
    if (out[1] >= 0) {
        close(out[1]);
        close(err[1]);
    }
    rk->pid = pid;
    rk->alive = 1;
    job->nalive++;
    stream_init(&rk->out, out[0], 1, r);
    stream_init(&rk->err, err[0], 2, r);
    return 0;
}

/* ---- stopping --------------------------------------------------------------------- */

/* Sends sig to the process group of every live rank; returns how many were signalled. */
static int signal_ranks(job_t *job, int sig)
{
    int n = 0;

    for (int r = 0; r < job->o->n; r++) {
        rank_t *rk = &job->ranks[r];
        if (!rk->alive)
            continue;
        if (kill(-rk->pid, sig) < 0 && errno == ESRCH)
            kill(rk->pid, sig);  /* it left its group (setsid): reach it at least */
        n++;
    }
    return n;
}

static void begin_stop(job_t *job, cause_t cause, int code, int sig)
{
    job->cause = cause;
    job->exit_code = code;
    job->nstopped = signal_ranks(job, sig);
    job->kill_ns = time_ns() + GRACE_NS;
}

/* ---- tagged output ---------------------------------------------------------------- */

static void out_put(job_t *job, const void *p, size_t n)
{
    if (n == 0)
        return;
    if (job->olen + n > job->ocap) {
        size_t cap = job->ocap ? job->ocap : READ_CHUNK;
        while (cap < job->olen + n)
            cap *= 2;
        job->obuf = realloc(job->obuf, cap);
        if (!job->obuf)
            die("out of memory");
        job->ocap = cap;
    }
    memcpy(job->obuf + job->olen, p, n);
    job->olen += n;
}

/* Writes what fd's queue holds while fd takes it, waiting up to wait_ms (-1: as long as
 * it takes) for room, in writes no larger than one ready poll guarantees (so a blocking
 * pipe or terminal never blocks weftrun: a reader that stops reading must not stop the
 * event loop, its --timeout and its signals). An error such as EPIPE marks the stream
 * broken: output to it is dropped from then on. */
static void out_drain(job_t *job, int fd, int wait_ms)
{
    __typeof__(job->q[0]) *q = &job->q[fd];
    if (q->chunk == 0) {
        struct stat sb;
        q->chunk = fstat(fd, &sb) != 0 ? 256 : S_ISREG(sb.st_mode) ? 1 << 16 :
                   S_ISFIFO(sb.st_mode) || S_ISSOCK(sb.st_mode) ? PIPE_BUF : 256;
    }
    while (q->len > 0 && !job->broken[fd]) {
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        int r = poll(&p, 1, wait_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return;             /* full: the event loop comes back when it has room */
        if (r < 0 || (p.revents & (POLLERR | POLLNVAL))) {
            job->broken[fd] = 1;
            break;
        }
        ssize_t k = write(fd, q->buf + q->start, WEFT_MIN(q->len, q->chunk));
        if (k > 0) {
            q->start += (size_t)k;
            q->len -= (size_t)k;
        } else if (!(k < 0 && (errno == EINTR || errno == EAGAIN))) {
            job->broken[fd] = 1;
        }
    }
    if (job->broken[fd] || q->len == 0)
        q->start = q->len = 0;
}

/* Queues the assembled lines for fd and writes what fd takes now. Past OUTQ_MAX queued
 * (a reader that stopped), new output is dropped and counted (said at exit). */
#define OUTQ_MAX (64u << 20)
static void out_flush(job_t *job, int fd)
{
    __typeof__(job->q[0]) *q = &job->q[fd];
    if (job->broken[fd] || job->olen == 0) {
        job->olen = 0;
        return;
    }
    if (q->len + job->olen > OUTQ_MAX) {
        q->dropped += job->olen;
    } else {
        if (q->start > 0 && q->start + q->len + job->olen > q->cap) {
            memmove(q->buf, q->buf + q->start, q->len);
            q->start = 0;
        }
        if (q->start + q->len + job->olen > q->cap) {
            size_t cap = q->cap ? q->cap : READ_CHUNK;
            while (cap < q->start + q->len + job->olen)
                cap *= 2;
            if (!(q->buf = realloc(q->buf, cap)))
                die("out of memory");
            q->cap = cap;
        }
        memcpy(q->buf + q->start + q->len, job->obuf, job->olen);
        q->len += job->olen;
    }
    job->olen = 0;
    out_drain(job, fd, 0);
}

/* Appends one tagged line: the carried partial line, then p[0..n), then a newline
 * unless p already ends with one. */
static void put_line(job_t *job, stream_t *s, const char *p, size_t n)
{
    char tag[16];
    int tl = snprintf(tag, sizeof(tag), "[%d] ", s->rank);

    out_put(job, tag, (size_t)tl);
    out_put(job, s->carry, s->ncarry);
    out_put(job, p, n);
    if (n == 0 || p[n - 1] != '\n')
        out_put(job, "\n", 1);
    s->ncarry = 0;
}

static void carry_append(stream_t *s, const char *p, size_t n)
{
    char *c = realloc(s->carry, s->ncarry + n);
    if (!c)
        die("out of memory");
    memcpy(c + s->ncarry, p, n);
    s->carry = c;
    s->ncarry += n;
}

/* Tags every complete line of p[0..n) and keeps the rest for the next read. */
static void relay(job_t *job, stream_t *s, const char *p, size_t n)
{
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t len = nl ? (size_t)(nl - p) + 1 : n;
        if (nl || s->ncarry + n >= CARRY_MAX) {
            if (!nl)
                len = WEFT_MIN(n, CARRY_MAX - WEFT_MIN(s->ncarry, CARRY_MAX));
            put_line(job, s, p, len);
        } else {
            carry_append(s, p, n);
        }
        p += len;
        n -= len;
    }
    out_flush(job, s->out_fd);
}

static void stream_close(job_t *job, stream_t *s)
{
    if (s->ncarry > 0) {
        put_line(job, s, NULL, 0);
        out_flush(job, s->out_fd);
    }
    free(s->carry);
    s->carry = NULL;
    close(s->fd);
    s->fd = -1;
}

/* Reads once from s and relays it. Returns bytes read, 0 after EOF (stream closed),
 * or -1 when nothing is ready. */
static ssize_t stream_pump(job_t *job, stream_t *s)
{
    char buf[READ_CHUNK];
    ssize_t k = read(s->fd, buf, sizeof(buf));

    if (k > 0) {
        relay(job, s, buf, (size_t)k);
        return k;
    }
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
        return -1;
    stream_close(job, s);
    return 0;
}

/* The rank is gone: relay what it left in the pipe, then close it. A grandchild that
 * still holds the pipe open does not keep the job alive. */
static void stream_drain(job_t *job, stream_t *s)
{
    size_t total = 0;
    ssize_t k;

    if (s->fd < 0)
        return;
    while (total < DRAIN_MAX && (k = stream_pump(job, s)) > 0)
        total += (size_t)k;
    if (s->fd >= 0)
        stream_close(job, s);
}

/* ---- events ----------------------------------------------------------------------- */

static void report_failure(int r, pid_t pid, int status)
{
    if (WIFEXITED(status)) {
        fprintf(stderr, "weftrun: rank %d (pid %d) exited with status %d\n", r, (int)pid,
                WEXITSTATUS(status));
        return;
    }
    fprintf(stderr, "weftrun: rank %d (pid %d) killed by signal %d (%s)%s\n", r, (int)pid,
            WTERMSIG(status), strsignal(WTERMSIG(status)),
            WCOREDUMP(status) ? " (core dumped)" : "");
}

static void rank_exited(job_t *job, int r, int status)
{
    rank_t *rk = &job->ranks[r];

    rk->alive = 0;
    job->nalive--;
    guard_send(job->guard_fd, -(int32_t)rk->pid);  /* its group is no longer ours to signal */
    stream_drain(job, &rk->out);
    stream_drain(job, &rk->err);
    if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || job->cause != CAUSE_NONE)
        return;
    report_failure(r, rk->pid, status);
    begin_stop(job, CAUSE_RANK,
               WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), SIGTERM);
}

static void reap(job_t *job)
{
    pid_t pid;
    int status;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == job->guard_pid) {    /* killed by someone: no rank, no cause */
            job->guard_pid = 0;
            fprintf(stderr, "weftrun: the guardian (pid %d) ended (%s %d) while ranks run: "
                    "should weftrun be killed now, what the ranks started may outlive "
                    "them\n", (int)pid, WIFSIGNALED(status) ? "signal" : "status",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            continue;
        }
        for (int r = 0; r < job->o->n; r++) {
            if (job->ranks[r].alive && job->ranks[r].pid == pid) {
                rank_exited(job, r, status);
                break;
            }
        }
    }
}

/* SIGINT/SIGTERM stop the job (a second one kills at once); the others are forwarded. */
static void on_signal(job_t *job, int sig)
{
    if (sig == SIGCHLD) {
        reap(job);
    } else if (sig != SIGINT && sig != SIGTERM) {
        signal_ranks(job, sig);
    } else if (job->cause == CAUSE_NONE) {
        fprintf(stderr, "weftrun: caught signal %d (%s); stopping %d rank(s)\n", sig,
                strsignal(sig), job->nalive);
        begin_stop(job, CAUSE_SIGNAL, 128 + sig, sig);
    } else {
        signal_ranks(job, sig);
        job->kill_ns = time_ns();
    }
}

static void read_signals(job_t *job)
{
    struct signalfd_siginfo si;

    while (read(job->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
        on_signal(job, (int)si.ssi_signo);
}

static void check_timers(job_t *job)
{
    uint64_t now = time_ns();

    if (job->cause == CAUSE_NONE && job->deadline_ns && now >= job->deadline_ns) {
        fprintf(stderr, "weftrun: job exceeded --timeout of %g s; stopping\n",
                job->o->timeout_s);
        begin_stop(job, CAUSE_TIMEOUT, EXIT_TIMEOUT, SIGTERM);
    }
    if (job->kill_ns && now >= job->kill_ns) {
        int n = signal_ranks(job, SIGKILL);
        if (n > 0)
            fprintf(stderr, "weftrun: %d rank(s) still running after SIGTERM; sent SIGKILL\n", n);
        job->kill_ns = 0;
    }
}

/* Milliseconds until the next timer, or -1 when none is pending. */
static int poll_timeout_ms(const job_t *job)
{
    uint64_t next = job->kill_ns, now = time_ns();

    if (job->cause == CAUSE_NONE && job->deadline_ns && (!next || job->deadline_ns < next))
        next = job->deadline_ns;
    if (!next)
        return -1;
    if (next <= now)
        return 0;
    return (int)WEFT_MIN((next - now + 999999) / 1000000, (uint64_t)INT_MAX);
}

static void add_poll(job_t *job, int *np, stream_t *s)
{
    if (s->fd < 0)
        return;
    job->pfds[*np] = (struct pollfd){ .fd = s->fd, .events = POLLIN };
    job->pstream[*np] = s;
    (*np)++;
}

static void run_loop(job_t *job)
{
    while (job->nalive > 0) {
        int np = 1;
        job->pfds[0] = (struct pollfd){ .fd = job->sfd, .events = POLLIN };
        for (int r = 0; r < job->o->n; r++) {
            add_poll(job, &np, &job->ranks[r].out);
            add_poll(job, &np, &job->ranks[r].err);
        }
        for (int fd = 1; fd <= 2; fd++)     /* queued output: written as room comes */
            if (job->q[fd].len > 0 && !job->broken[fd]) {
                job->pfds[np] = (struct pollfd){ .fd = fd, .events = POLLOUT };
                job->pstream[np++] = NULL;
            }
        if (poll(job->pfds, (nfds_t)np, poll_timeout_ms(job)) < 0 && errno != EINTR)
            die("poll: %m");
        if (job->pfds[0].revents)
            read_signals(job);
        for (int i = 1; i < np; i++) {
            stream_t *s = job->pstream[i];
            if (s == NULL && job->pfds[i].revents)
                out_drain(job, job->pfds[i].fd, 0);
            else if (s && job->pfds[i].revents && s->fd == job->pfds[i].fd)  /* not closed by reap */
                stream_pump(job, s);
        }
        check_timers(job);
    }
}

/* After the last rank: the queued output, waiting for the reader while the job's
 * --timeout has not passed and no signal came (they are still read, from the signalfd,
 * every 100 ms), then 2 s at most (the reader may be what stalled); what could not be
 * written is said on stderr. */
static void out_finish(job_t *job)
{
    uint64_t end = 0;
    for (int fd = 1; fd <= 2; fd++) {
        while (job->q[fd].len > 0 && !job->broken[fd]) {
            read_signals(job);
            uint64_t now = time_ns();
            if (!end && (job->cause == CAUSE_TIMEOUT || job->cause == CAUSE_SIGNAL ||
                         (job->deadline_ns && now >= job->deadline_ns)))
                end = now + 2000000000ull;
            if (end && now >= end)
                break;
            out_drain(job, fd, end ? (int)WEFT_MIN((end - now) / 1000000 + 1, 100) : 100);
        }
        uint64_t lost = job->q[fd].dropped + job->q[fd].len;
        if (lost > 0)
            fprintf(stderr, "weftrun: %llu bytes of the ranks' %s were not written (it was "
                    "not being read)\n", (unsigned long long)lost, fd == 1 ? "stdout" : "stderr");
        free(job->q[fd].buf);
    }
}

/* ---- main ------------------------------------------------------------------------- */

static void launch_all(job_t *job)
{
    for (int r = 0; r < job->o->n; r++) {
        if (launch_rank(job, r) == 0)
            continue;
        fprintf(stderr, "weftrun: cannot start rank %d: %s\n", r, strerror(errno));
        begin_stop(job, CAUSE_LAUNCH, 1, SIGTERM);
        return;
    }
}

static void report_end(const job_t *job)
{
    switch (job->cause) {
    case CAUSE_RANK:
        fprintf(stderr, "weftrun: job failed: stopped %d other rank(s)\n", job->nstopped);
        break;
    case CAUSE_LAUNCH:
        fprintf(stderr, "weftrun: job failed: stopped %d started rank(s)\n", job->nstopped);
        break;
    case CAUSE_TIMEOUT:
        fprintf(stderr, "weftrun: job timed out: stopped %d rank(s)\n", job->nstopped);
        break;
    default:
        break;
    }
}

static void job_free(job_t *job)
{
    if (job->guard_fd >= 0)
        close(job->guard_fd);
    close(job->sfd);
    free(job->obuf);
    free(job->pstream);
    free(job->pfds);
    free(job->ranks);
    free(job->places);
    topo_free(job->topo);
}

int main(int argc, char **argv)
{
    int code;

    opts_t o;
    job_t job;

    parse_args(argc, argv, &o);
    memset(&job, 0, sizeof(job));
    job.o = &o;
    job.guard_fd = -1;
    ensure_std_fds();
    ensure_fd_limit(&o);
    setup_env(&o);
    free(o.xvars);  /* the strings stay: they are argv's, and now in environ */
    o.xvars = NULL;
    job.ranks = calloc((size_t)o.n, sizeof(*job.ranks));
    job.pfds = calloc(2 * (size_t)o.n + 3, sizeof(*job.pfds));   /* + stdout, stderr */
    job.pstream = calloc(2 * (size_t)o.n + 3, sizeof(*job.pstream));
    if (!job.ranks || !job.pfds || !job.pstream)
        die("out of memory");
    if (o.bind_core)
        plan_bindings(&job);
    setup_signals(&job);
    if (o.timeout_s > 0)
        job.deadline_ns = time_ns() + (uint64_t)(o.timeout_s * 1e9);
    start_guardian(&job);
    launch_all(&job);
    run_loop(&job);
    stop_guardian(&job);
    out_finish(&job);
    report_end(&job);
    code = job.cause == CAUSE_NONE ? 0 : job.exit_code;
    job_free(&job);
    return code;
}
