/*
 * weft_topo_cli.c - `weft-topo`: show the topology weft sees, its rank placement, and
 * the configuration knobs.
 *
 *   weft-topo                     this machine (or WEFT_TOPO_FILE)
 *   weft-topo --xml FILE          an hwloc XML export instead
 *   weft-topo --ranks N           also one line per local rank: cores, NUMA, GPU, NIC
 *   weft-topo --print-config      every WEFT_* knob with its value and doc
 *
 * Invariants: the program only reads; it never binds itself. Exit codes: 0 ok,
 * 1 a failure (bad topology, bad knob value), 2 bad command-line arguments.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "algo.h"
#include "config.h"
#include "topo.h"
#include "weft.h"

#define MAX_RANKS 4096

typedef struct cli_args {
    const char *xml;       /* NULL: WEFT_TOPO_FILE or this machine */
    int ranks;             /* 0: no placement table */
    int print_config;
} cli_args_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: weft-topo [--xml FILE] [--ranks N] [--print-config] [-h]\n"
            "  --xml FILE       read an hwloc XML topology instead of this machine\n"
            "                   (default: WEFT_TOPO_FILE when set)\n"
            "  --ranks N        show the placement of N local ranks\n"
            "  --print-config   list every WEFT_* setting with its value and meaning\n"
            "  -h, --help       this text\n");
}

static int parse_ranks(const char *s, int *out)
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
        { "ranks", required_argument, NULL, 'n' },
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
            if (parse_ranks(optarg, &a->ranks) == 0)
                break;
            fprintf(stderr, "weft-topo: --ranks wants a number from 1 to %d, not '%s'\n",
                    MAX_RANKS, optarg);
            usage(stderr);
            return 2;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "weft-topo: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
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
    if (a->ranks > 0)
        printf("placement of %d local ranks:\n", a->ranks);
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
    topo_free(t);
    return 0;
}

int main(int argc, char **argv)
{
    cli_args_t a = { NULL, 0, 0 };
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
