/*
 * weft_topo_cli.c - `weft-topo`: show the topology weft sees, its rank placement, and
 * the configuration knobs.
 *
 *   weft-topo                     this machine (or WEFT_TOPO_FILE)
 *   weft-topo --xml FILE          an hwloc XML export instead (--topo FILE: the same)
 *   weft-topo --ranks N           also one line per local rank: cores, NUMA, GPU, NIC
 *                                 (and its distance class), the InfiniBand HCA it would use
 *                                 and tcp's interface (WEFT_IB_HCA, WEFT_SOCKET_IFNAME),
 *                                 and the ring order of the ranks
 *   weft-topo --ranks N --hosts H the same for H such hosts, ranks host-major
 *   weft-topo --print-config      every WEFT_* knob with its value and doc
 *
 * Invariants: the program only reads; it never binds itself. Exit codes: 0 ok,
 * 1 a failure (bad topology, bad knob value), 2 bad command-line arguments.
 */
#include <errno.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "config.h"
#include "sock.h"
#include "topo.h"
#include "weft.h"

#define MAX_RANKS 4096

typedef struct cli_args {
    const char *xml;       /* NULL: WEFT_TOPO_FILE or this machine */
    int ranks;             /* 0: no placement table */
    int hosts;             /* hosts of `ranks` ranks each, for the ring order */
    int print_config;
} cli_args_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: weft-topo [--xml FILE] [--ranks N [--hosts H]] [--print-config] [-h]\n"
            "  --xml FILE       read an hwloc XML topology instead of this machine\n"
            "  --topo FILE      the same\n"
            "                   (default: WEFT_TOPO_FILE when set)\n"
            "  --ranks N        show the placement of N local ranks: cores, GPU, NIC and\n"
            "                   why (distance class), HCA and interface, ring order\n"
            "  --hosts H        the ring order for H hosts of N ranks each (default 1)\n"
            "  --print-config   list every WEFT_* setting with its value and meaning\n"
            "  -h, --help       this text\n");
}

static int parse_count(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < 1 || v > MAX_RANKS)
        return -1;
    *out = (int)v;
    return 0;
}

/* Returns 0, or the exit code to leave with. */
static int parse_args(int argc, char **argv, cli_args_t *a)
{
    static const struct option opts[] = {
        { "xml", required_argument, NULL, 'x' },
        { "topo", required_argument, NULL, 'x' },
        { "ranks", required_argument, NULL, 'n' },
        { "hosts", required_argument, NULL, 'H' },
        { "print-config", no_argument, NULL, 'c' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'x': a->xml = optarg; break;
        case 'c': a->print_config = 1; break;
        case 'h': usage(stdout); exit(0);
        case 'n':
        case 'H':
            if (parse_count(optarg, c == 'n' ? &a->ranks : &a->hosts) == 0)
                break;
            fprintf(stderr, "weft-topo: --%s wants a number from 1 to %d, not '%s'\n",
                    c == 'n' ? "ranks" : "hosts", MAX_RANKS, optarg);
            usage(stderr);
            return 2;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (a->hosts > 0 && a->ranks == 0) {
        fprintf(stderr, "weft-topo: --hosts needs --ranks\n");
        usage(stderr);
        return 2;
    }
    if ((long)a->ranks * (a->hosts > 0 ? a->hosts : 1) > MAX_RANKS) {
        fprintf(stderr, "weft-topo: --ranks times --hosts is more than %d ranks\n", MAX_RANKS);
        return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "weft-topo: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    return 0;
}

/* The name of this host's IPv4 interface that holds address a and that the filter f
 * allows ("" when none): sock_local_addr gives the address of its pick, not the name. */
static void ifname_of(const struct sockaddr_in *a, const topo_nic_filter_t *f, char *buf,
                      size_t cap)
{
    struct ifaddrs *ifs;
    buf[0] = '\0';
    if (getifaddrs(&ifs) != 0)
        return;
    for (const struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
                a->sin_addr.s_addr &&
            topo_nic_filter_allows(f, i->ifa_name, NULL)) {
            snprintf(buf, cap, "%s", i->ifa_name);
            break;
        }
    freeifaddrs(ifs);
}

/* The interface the tcp transport uses, for every rank of the host alike: on this
 * machine, the one comm/sock.c's sock_local_addr picks (the same call, over getifaddrs:
 * bonds, VLANs and loopback count, as at init); WEFT_SOCKET_IFNAME unset, or an exclusion,
 * leave it to the route to the rendezvous, which only the running job knows. For another
 * machine's hwloc export: WEFT_SOCKET_IFNAME's first entry that names one of its
 * interfaces; the export lists PCI network devices only, so an entry it lacks may still
 * name an interface there (before, "init would fail" was said of bond0 or lo, which init
 * uses). */
static int show_socket(const topo_t *t, const weft_config_t *cfg)
{
    topo_nic_filter_t f;
    if (topo_nic_filter_parse(cfg->socket_ifname, "WEFT_SOCKET_IFNAME", &f) != WEFT_OK) {
        fprintf(stderr, "weft-topo: %s\n", weft_last_error());
        return 1;
    }
    printf("  socket (tcp, one for every rank): ");
    if (!topo_is_xml(t) && f.n > 0) {
        struct sockaddr_in a;
        char name[64], as[64];
        if (sock_local_addr(NULL, cfg->socket_ifname, &a) != WEFT_OK) {
            printf("none: %s (init would fail)\n", weft_last_error());
            return 0;
        }
        ifname_of(&a, &f, name, sizeof(name));
        sock_addr_str(&a, as, sizeof(as));
        as[strcspn(as, ":")] = '\0';
        if (f.exclude)
            printf("the interface that routes to the rendezvous if WEFT_SOCKET_IFNAME "
                   "allows it, else %s (%s)\n", name[0] ? name : "?", as);
        else
            printf("%s (%s, WEFT_SOCKET_IFNAME's first match)\n", name[0] ? name : "?", as);
        return 0;
    }
    if (f.n == 0 || f.exclude) {
        printf("the interface that routes to the rendezvous%s\n", f.n ?
               " if WEFT_SOCKET_IFNAME allows it, else the first it allows" : "");
        return 0;
    }
    for (int e = 0; e < f.n; e++) {
        topo_nic_filter_t one = f;
        one.n = 1;
        one.e[0] = f.e[e];
        for (int i = 0; i < topo_num_nics(t); i++) {
            const topo_nic_t *nic = topo_nic(t, i);
            if (nic->ifname[0] && topo_nic_filter_allows(&one, nic->ifname, NULL)) {
                printf("%s (WEFT_SOCKET_IFNAME's first match%s)\n", nic->ifname, e == 0 ? "" :
                       " among the topology's interfaces; an earlier entry may name one "
                       "it does not list");
                return 0;
            }
        }
    }
    printf("none of the topology's interfaces matches WEFT_SOCKET_IFNAME; an hwloc "
           "export lists PCI network devices only, so bonds, VLANs, loopback and other "
           "virtual interfaces cannot be judged from it\n");
    return 0;
}

/* One line per local rank: the HCA the ib transport would open, and why; then tcp's
 * interface. */
static int show_nics(const topo_t *t, int n, const weft_config_t *cfg)
{
    printf("network devices (WEFT_IB_HCA='%s', WEFT_SOCKET_IFNAME='%s'):\n", cfg->ib_hca,
           cfg->socket_ifname);
    for (int r = 0; r < n; r++) {
        topo_nic_choice_t ib;
        if (topo_nic_for_rank(t, r, n, TOPO_NIC_IB, cfg->ib_hca, &ib) != WEFT_OK) {
            fprintf(stderr, "weft-topo: %s\n", weft_last_error());
            return 1;
        }
        printf("  rank %d: ib ", r);
        if (ib.nic >= 0)
            printf("%s:%d (%s, 1 of %d)\n", ib.name, ib.port, topo_dist_name(ib.dist),
                   ib.tied);
        else
            printf("none\n");
    }
    return show_socket(t, cfg);
}

/* The ring of `hosts` hosts with n ranks each, global ranks host-major (how weftrun,
 * mpirun --map-by slot and srun's block distribution number them). */
/* The double binary tree of an all-reduce among n ranks (the tree algorithm's links,
 * algo_tree_links): each tree's top, then every interior rank with its children. Long
 * layouts print the first TREE_SHOW interior ranks of each tree. */
#define TREE_SHOW 64
static void show_trees(int n)
{
    if (n < 2)
        return;
    printf("double binary tree (all-reduce; half the data each; rank: children):\n");
    for (int t = 0; t < 2; t++) {
        int top = -1, shown = 0, interior = 0;
        for (int r = 0; r < n; r++) {
            int parent, child[2];
            algo_tree_links(r, n, t, &parent, child);
            if (parent < 0)
                top = r;
            if (child[0] >= 0 || child[1] >= 0)
                interior++;
        }
        printf("  tree %d, top %d:", t, top);
        for (int r = 0; r < n && shown < TREE_SHOW; r++) {
            int parent, child[2];
            algo_tree_links(r, n, t, &parent, child);
            if (child[0] < 0 && child[1] < 0)
                continue;
            printf(" %d:", r);
            for (int c = 0; c < 2; c++)
                if (child[c] >= 0)
                    printf("%s%d", c && child[0] >= 0 ? "," : "", child[c]);
            shown++;
        }
        printf("%s\n", interior > shown ? " ..." : "");
    }
}

static int show_ring(int n, int hosts)
{
    int total = n * hosts;
    uint64_t *host_id = malloc((size_t)total * sizeof(*host_id));
    int *order = malloc((size_t)total * sizeof(*order));
    if (!host_id || !order) {
        free(host_id);
        free(order);
        fprintf(stderr, "weft-topo: out of memory\n");
        return 1;
    }
    for (int g = 0; g < total; g++)
        host_id[g] = (uint64_t)(g / n);
    topo_ring_order(host_id, total, order);
    printf("ring order, %d host%s x %d ranks (host-major; '|' crosses hosts):\n ", hosts,
           hosts == 1 ? "" : "s", n);
    for (int i = 0; i < total;) {   /* runs of consecutive ranks on one host as a-b */
        int j = i;
        while (j + 1 < total && order[j + 1] == order[j] + 1 &&
               host_id[order[j + 1]] == host_id[order[i]])
            j++;
        int cross = i > 0 && host_id[order[i]] != host_id[order[i - 1]];
        if (j > i)
            printf("%s %d-%d", cross ? " |" : "", order[i], order[j]);
        else
            printf("%s %d", cross ? " |" : "", order[i]);
        i = j + 1;
    }
    printf("%s\n", hosts > 1 ? " | (back to the first)" : "");
    show_trees(total);
    free(host_id);
    free(order);
    return 0;
}

static int show_topology(const cli_args_t *a, const weft_config_t *cfg)
{
    const char *xml = a->xml ? a->xml : cfg->topo_file;
    topo_t *t;
    if (topo_load(xml, &t) != WEFT_OK) {
        fprintf(stderr, "weft-topo: %s\n", weft_last_error());
        return 1;
    }
    topo_print(t, stdout);
    if (a->ranks > 0 && topo_gpu_visibility(t)[0])
        printf("placement of %d local ranks (%s):\n", a->ranks, topo_gpu_visibility(t));
    else if (a->ranks > 0 && topo_num_gpus(t) > 0)
        printf("placement of %d local ranks (local rank i uses gpu i mod %d):\n", a->ranks,
               topo_num_gpus(t));
    else if (a->ranks > 0)
        printf("placement of %d local ranks (no GPU on this host):\n", a->ranks);
    for (int r = 0; r < a->ranks; r++) {
        topo_place_t p;
        if (topo_place(t, r, a->ranks, &p) != WEFT_OK) {
            fprintf(stderr, "weft-topo: %s\n", weft_last_error());
            topo_free(t);
            return 1;
        }
        fputs("  ", stdout);
        topo_place_print(t, &p, stdout);
    }
    int rc = a->ranks > 0 ? show_nics(t, a->ranks, cfg) : 0;
    topo_free(t);
    if (rc == 0 && a->ranks > 0)
        rc = show_ring(a->ranks, a->hosts > 0 ? a->hosts : 1);
    return rc;
}

int main(int argc, char **argv)
{
    cli_args_t a = { NULL, 0, 0, 0 };
    int rc = parse_args(argc, argv, &a);
    if (rc != 0)
        return rc;

    weft_config_t cfg;
    if (cfg_load(&cfg) != WEFT_OK || algo_check_config(&cfg) != WEFT_OK) {
        fprintf(stderr, "weft-topo: %s\n", weft_last_error());
        return 1;
    }
    if (a.print_config) {
        char names[256];
        cfg_print(stdout, &cfg);
        printf("# WEFT_ALGO names: %s\n", algo_choices(names, sizeof(names)));
        return 0;
    }
    return show_topology(&a, &cfg);
}
