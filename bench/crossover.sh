#!/usr/bin/env bash
# crossover.sh - where weft's algorithms cross over, measured, beside the tuner's choice.
#
#   bench/crossover.sh [-c COLL] [-n "5 8"] [--net "2"] [-a "direct tree rhd ring"]
#                      [-b 8] [-e 4M] [-f 4] [-r 3] [-o FILE]
#
# For each layout (-n: N ranks on this machine's shared memory; --net: 2 network
# namespace hosts x PER ranks, tcp between them, bench/netns.sh) it runs weft's perf tool
# for COLL (allreduce by default; its nccl-tests name: all_reduce_perf) once per
# algorithm (WEFT_ALGO=NAME; -a lists them, hier is added across hosts) and once with
# the tuner's choice (WEFT_ALGO unset), the launches alternating, -r rounds of them. It
# prints per size the median out-of-place time of each algorithm, which one was fastest
# (measured), what the tuner picked, the tuner's time and its ratio to the fastest; then
# how many sizes the tuner's pick was the fastest or within 10% of it.
# Which algorithm ran each size comes from the tuner's own log (WEFT_DEBUG_SUBSYS=TUNE,
# rank 0), so a forced algorithm that does not run a call (WEFT_ALGO then leaves the
# call to the tuner) shows "-", never someone else's time. Every launch runs under
# timeout (SIM_RANK_TIMEOUT); -o also writes the table to FILE.
# Defaults to 5 and 8 ranks on shm and 2 x 2 namespace hosts. On a machine with fewer
# cores than ranks the ranks time-share them (this VM: 2 cores): say so beside any result.
set -u
cd "$(dirname "$0")/.." || exit 2
. bench/sim_lib.sh
trap sim_cleanup EXIT

COLL=allreduce SHM="5 8" NET=2 ALGOS="direct tree rhd ring" MINB=8 MAXB=4M FACTOR=4
ROUNDS=3 OUT=
while [ $# -gt 0 ]; do
    case $1 in
    -c) COLL=$2; shift ;;
    -n) SHM=$2; shift ;;
    --net) NET=$2; shift ;;
    -a) ALGOS=$2; shift ;;
    -b) MINB=$2; shift ;;
    -e) MAXB=$2; shift ;;
    -f) FACTOR=$2; shift ;;
    -r) ROUNDS=$2; shift ;;
    -o) OUT=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) sim_die "unknown argument '$1' (--help)" ;;
    esac
    shift
done
case $COLL in
allreduce) TOOL=all_reduce_perf ;;
reduce_scatter) TOOL=reduce_scatter_perf ;;
allgather) TOOL=all_gather_perf ;;
broadcast) TOOL=broadcast_perf ;;
reduce) TOOL=reduce_perf ;;
*) sim_die "-c $COLL: want allreduce, reduce_scatter, allgather, broadcast or reduce" ;;
esac
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || sim_die "-r $ROUNDS: want a whole number of rounds"
sim_need bin/weftrun "bin/$TOOL"
[ -n "$OUT" ] && : >"$OUT"
say() { echo "$@"; [ -z "$OUT" ] || echo "$@" >>"$OUT"; }

# one LAYOUT ALGO: one launch; appends "algo size time ran" lines (ran: the algorithm
# rank 0's tuner built for that size) to $SIM_TMP/rows.
one() {
    local layout=$1 algo=$2 out=$SIM_TMP/out kind=${1%%:*} arg=${1#*:}
    (
        export WEFT_DEBUG=DEBUG WEFT_DEBUG_SUBSYS=TUNE
        [ "$algo" = auto ] || export WEFT_ALGO="$algo"
        if [ "$kind" = shm ]; then
            sim_shm "$arg" "$TOOL" -b "$MINB" -e "$MAXB" -f "$FACTOR" 2>&1
        else
            sim_net "$arg" "$TOOL" -b "$MINB" -e "$MAXB" -f "$FACTOR"   # rank 0's, with its log
        fi
    ) >"$out" || return 1
    # the tuner's lines of rank 0: "... [0] weft DEBUG allreduce count C float: algo X, ..."
    grep "\[0\] weft DEBUG $COLL count [0-9]* float: algo " "$out" |
        sed -E 's/.* count ([0-9]+) float: algo ([a-z0-9_]+).*/\1 \2/' | sort -u >"$out.ran"
    sim_rows <"$out" | while read -r size t; do
        local c=$((size / 4)) ran
        case $COLL in allgather|reduce_scatter) c=$((c / N_RANKS)) ;; esac
        ran=$(awk -v c=$c '$1 == c { print $2; exit }' "$out.ran")
        echo "$algo $size $t ${ran:-?}"
    done >>"$SIM_TMP/rows"
}

report() {
    local layout=$1 algos=$2 rows=$SIM_TMP/rows size a t best bt pick pt within=0 fastest=0 nsz=0
    local head="size" line
    for a in $algos; do head="$head | $a"; done
    say ""
    say "### $COLL, $layout: median out-of-place time (us) of $ROUNDS launches each"
    say ""
    say "| $head | fastest | tuner's pick | tuner / fastest |"
    say "|$(for a in size $algos x y z; do printf -- '---:|'; done)"
    for size in $(awk '{ print $2 }' "$rows" | sort -n -u); do
        line="$size" best=- bt=
        for a in $algos; do
            # only launches where the tuner's log shows the named algorithm ran this size
            t=$(awk -v a="$a" -v s="$size" '$1 == a && $2 == s && $4 == a { print $3 }' "$rows" | sim_med)
            line="$line | ${t:--}"
            if [ -n "$t" ] && { [ -z "$bt" ] || awk -v x="$t" -v y="$bt" 'BEGIN { exit !(x < y) }'; }; then
                best=$a bt=$t
            fi
        done
        pick=$(awk -v s="$size" '$1 == "auto" && $2 == s { print $4 }' "$rows" | sort | uniq -c |
               sort -rn | awk 'NR == 1 { print $2 }')
        pt=$(awk -v s="$size" '$1 == "auto" && $2 == s { print $3 }' "$rows" | sim_med)
        local ratio=-
        [ -n "$bt" ] && [ -n "$pt" ] && ratio=$(awk -v p="$pt" -v b="$bt" 'BEGIN { printf "%.2f", p / b }')
        say "| $line | $best | ${pick:-?} ($pt) | $ratio |"
        nsz=$((nsz + 1))
        [ "$pick" = "$best" ] && fastest=$((fastest + 1))
        [ "$ratio" != - ] && awk -v r="$ratio" 'BEGIN { exit !(r <= 1.10) }' && within=$((within + 1))
    done
    say ""
    say "tuner's pick the fastest at $fastest of $nsz sizes, within 10% of the fastest at $within"
}

if [ -n "$NET" ] && ! ip netns list 2>/dev/null | grep -qw weftA; then
    [ "$(id -u)" = 0 ] || sim_die "namespace hosts need root (--net '' runs shm only)"
    sh bench/netns.sh up >/dev/null || sim_die "bench/netns.sh up failed"
    SIM_NS_MADE=1
fi
for layout in $(for n in $SHM; do echo "shm:$n"; done; for p in $NET; do echo "net:$p"; done); do
    rm -f "$SIM_TMP/rows"
    algos=$ALGOS
    if [ "${layout%%:*}" = net ]; then
        N_RANKS=$((2 * ${layout#*:})) desc="2 namespace hosts x ${layout#*:} ranks (tcp between, shm inside)"
        case " $algos " in *" hier "*) ;; *) algos="$algos hier" ;; esac
    else
        N_RANKS=${layout#*:} desc="$N_RANKS ranks, shm"
    fi
    echo "crossover.sh: $desc: $ROUNDS rounds of $(echo auto $algos | wc -w) launches" >&2
    for ((round = 1; round <= ROUNDS; round++)); do
        for a in auto $algos; do
            one "$layout" "$a" || sim_die "$TOOL on $desc with WEFT_ALGO=$a failed"
        done
    done
    report "$desc" "$algos"
done
say ""
say "# machine: $(nproc) cores, $(uname -n); $(date -u +%Y-%m-%d); shm ranks unbound beyond weft's default (WEFT_BIND); each namespace host on its own half of the cpus"
