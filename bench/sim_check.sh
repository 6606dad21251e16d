#!/bin/bash
# sim_check.sh - weft-sim's predictions against measurements on this machine: all-reduce
# on 2, 4 and 8 ranks on shm and on 2 namespace hosts x 2 ranks, from 1 MB up, the
# measured time (all_reduce_perf, out of place), the predicted one (weft-sim with the
# model file) and the error in %; last, how many rows are within 15%.
#
#   bench/sim_check.sh [-m MODEL] [-n ITERS] [-r ROUNDS] [-b MIN] [-e MAX] [-a ALGO] [--no-net]
#
# The measured time is the median over ROUNDS launches (default 5); a launch during which
# the cores did not share a cache is repeated (bench/sim_lib.sh, sim_near; SIM_RTT=0: not).
# MODEL: bench/sim_calibrate.sh's output (default bench/sim_model.txt). ALGO (default
# ring) is forced on both sides (WEFT_ALGO, --algo), so both time the same schedules.
# The machine must be quiet and have a core per rank for the numbers to mean anything
# (8 ranks on 2 cores measure the scheduler); -n 2 -e 2M is a smoke test.
# Exit status: 0 when every row is within SIM_CHECK_TOL % (default 15), 1 when not,
# 2 on bad input or a failed run.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/sim_lib.sh
trap sim_cleanup EXIT

MODEL=bench/sim_model.txt ITERS=20 MIN=1M MAX=64M ALGO=ring NET=1 ROUNDS=5
TOL=${SIM_CHECK_TOL:-15}
while [ $# -gt 0 ]; do
    case $1 in
    -m) MODEL=$2; shift 2 ;;
    -n) ITERS=$2; shift 2 ;;
    -r) ROUNDS=$2; shift 2 ;;
    -b) MIN=$2; shift 2 ;;
    -e) MAX=$2; shift 2 ;;
    -a) ALGO=$2; shift 2 ;;
    --no-net) NET=; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) sim_die "unknown argument '$1' (--help)" ;;
    esac
done
[ -r "$MODEL" ] || sim_die "no model file $MODEL (bench/sim_calibrate.sh writes one)"
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || sim_die "-n $ITERS: want a count of 1 or more"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || sim_die "-r $ROUNDS: want a count of 1 or more"
sim_need bin/weftrun bin/all_reduce_perf bin/weft-sim
SIZES=(-b "$MIN" -e "$MAX" -f 2)

printf "%-10s %12s %12s %12s %8s\n" "# config" "size(B)" "measured(us)" "predicted(us)" "error%"
within=0 total=0
compare() {     # config hosts per measured "size time" lines [weft-sim flags...]
    local cfg=$1 hosts=$2 per=$3 table=$4
    shift 4
    "$B/bin/weft-sim" --model "$MODEL" --hosts "$hosts" --ranks-per-host "$per" "$@" \
        "${SIZES[@]}" --algo "$ALGO" --inplace 0 > "$SIM_TMP/pred" ||
        sim_die "weft-sim failed on $cfg"
    local size t p
    while read -r size t; do
        p=$(sim_time "$size" < "$SIM_TMP/pred")
        [ -n "$p" ] || continue
        awk -v c="$cfg" -v s="$size" -v t="$t" -v p="$p" -v tol="$TOL" 'BEGIN {
            e = (p - t) / t * 100
            printf "%-10s %12d %12.1f %12.1f %+8.1f%s\n", c, s, t, p, e, (e < -tol || e > tol) ? "  *" : "" }'
        total=$((total + 1))
        if awk -v t="$t" -v p="$p" -v tol="$TOL" \
            'BEGIN { e = (p - t) / t * 100; exit !(e >= -tol && e <= tol) }'; then
            within=$((within + 1))
        fi
    done < "$table"
}

for n in 2 4 8; do
    WEFT_ALGO=$ALGO sim_median "$ROUNDS" "$SIM_TMP/t" sim_shm "$n" all_reduce_perf "${SIZES[@]}" \
        -n "$ITERS" -w 2 -c 1 > "$SIM_TMP/m" ||
        sim_die "all_reduce_perf on $n ranks failed"
    compare "shm:$n" 1 "$n" "$SIM_TMP/m"
done
if [ -n "$NET" ]; then
    WEFT_ALGO=$ALGO sim_median "$ROUNDS" "$SIM_TMP/t" sim_net 2 all_reduce_perf "${SIZES[@]}" \
        -n "$ITERS" -w 2 -c 1 > "$SIM_TMP/m" ||
        sim_die "all_reduce_perf on 2x2 namespace hosts failed"
    # each namespace "host" runs on its own half of this machine's cpus (sim_net)
    cores=$(( $(nproc) / 2 )); [ "$cores" -ge 1 ] || cores=1
    compare "net:2x2" 2 2 "$SIM_TMP/m" --cores "$cores"
fi
echo "# within ${TOL}%: $within of $total rows (* marks the others)"
echo "# $(sim_far_note)"
[ "$within" = "$total" ] && [ "$total" -gt 0 ]
