#!/bin/bash
# sim_calibrate.sh - measures this machine's parameters for weft-sim with weft's own perf
# tools and writes them as a model file (docs/SCALE.md describes the keys).
#
#   bench/sim_calibrate.sh [-o FILE] [-n ITERS] [-r ROUNDS] [--big BYTES] [--no-net]
#
# Every figure is the median over ROUNDS launches (default 5): weft's launches differ. A
# launch during which the cores did not share a cache is repeated (bench/sim_lib.sh).
#   intra_lat  sendrecv_perf, 2 ranks on shm, 8 B: the time of one hop
#   shm_copies 1: weft's shm transport moves a frame with the ranks' own CPUs (the sender
#              copies it into the ring, the receiver copies or reduces it out)
#   copy_bw    sendrecv_perf, 2 ranks on shm, BIG bytes (64M): each rank copies BIG in and
#              BIG out on its core, so 2 BIG / time
#   intra_bw   BIG / that time (what a frame costs when no CPU moves it: single-copy reads)
#   reduce_bw  all_reduce_perf WEFT_ALGO=direct, 2 ranks on shm, BIG: each rank copies BIG
#              in and reduces BIG out, one after the other on its core, so BIG / (time -
#              BIG / copy_bw)
#   cores      this machine's cpus (nproc): more ranks than that time-share them
#   inter_lat, inter_bw  sendrecv_perf, 2 namespace hosts x 1 rank (tcp over bench/netns.sh's
#              veth), 8 B and BIG; nics = 1 (one veth per namespace host); net_copies = 1:
#              tcp's bytes are copied by the kernel on both sides, each rank's core doing
#              BIG out and BIG in, so inter_bw = 2 BIG / time
# With --no-net (or without root) the inter-host keys keep weft's defaults (algo.c).
# The machine must be quiet for the numbers to mean anything; -n 2 --big 1M is a smoke test.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/sim_lib.sh
trap sim_cleanup EXIT

OUT=bench/sim_model.txt ITERS=20 BIG=64M NET=1 ROUNDS=5
while [ $# -gt 0 ]; do
    case $1 in
    -o) OUT=$2; shift 2 ;;
    -n) ITERS=$2; shift 2 ;;
    -r) ROUNDS=$2; shift 2 ;;
    --big) BIG=$2; shift 2 ;;
    --no-net) NET=; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) sim_die "unknown argument '$1' (--help)" ;;
    esac
done
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || sim_die "-n $ITERS: want a count of 1 or more"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || sim_die "-r $ROUNDS: want a count of 1 or more"
sim_need bin/weftrun bin/sendrecv_perf bin/all_reduce_perf bin/weft-sim
BIGB=$(numfmt --from=iec "$BIG" 2>/dev/null) || sim_die "--big $BIG: not a size"
[ "$BIGB" -ge 4096 ] || sim_die "--big $BIG: want 4K or more"
ARGS=(-n "$ITERS" -w 2 -c 1)

# us(size, medians): the time, or fail saying which measurement had none
us() {
    local t
    t=$(sim_pair "$1" < "$2")
    [ -n "$t" ] && [ "$t" != N/A ] || sim_die "no $1-byte row in $(basename "$2")"
    echo "$t"
}

echo "sim_calibrate.sh: shm, 2 ranks" >&2
sim_median "$ROUNDS" "$SIM_TMP/t" sim_shm 2 sendrecv_perf -b 8 -e 8 "${ARGS[@]}" > "$SIM_TMP/sr_lat"
sim_median "$ROUNDS" "$SIM_TMP/sr_tables" sim_shm 2 sendrecv_perf -b "$BIGB" -e "$BIGB" \
    "${ARGS[@]}" > "$SIM_TMP/sr_bw"
WEFT_ALGO=direct sim_median "$ROUNDS" "$SIM_TMP/t" sim_shm 2 all_reduce_perf -b "$BIGB" \
    -e "$BIGB" "${ARGS[@]}" > "$SIM_TMP/ar"
lat=$(us 8 "$SIM_TMP/sr_lat")
sr=$(us "$BIGB" "$SIM_TMP/sr_bw")
ar=$(us "$BIGB" "$SIM_TMP/ar")
copy=$(sed -n 's/^# Host copy bandwidth : \([0-9.]*\) GB.*/\1/p' "$SIM_TMP/sr_tables" | sim_med)
[ -n "$copy" ] || copy=$(awk -v s="$BIGB" -v t="$sr" 'BEGIN { print s / t / 1e3 }')
intra_bw=$(awk -v s="$BIGB" -v t="$sr" 'BEGIN { printf "%.4g", s / t / 1e3 }')
# (the tools' "Host copy bandwidth" line, $copy, is a lone memcpy: kept as a comment)
copy_bw=$(awk -v s="$BIGB" -v t="$sr" 'BEGIN { printf "%.4g", 2 * s / t / 1e3 }')
reduce_bw=$(awk -v s="$BIGB" -v t="$ar" -v r="$sr" 'BEGIN {
    d = t - r / 2; if (d < r / 4) d = r / 4; printf "%.4g", s / d / 1e3 }')
cores=$(nproc)

{
    echo "# weft-sim model of $(hostname) measured by bench/sim_calibrate.sh on $(date -u +%F)"
    echo "# (-n $ITERS, -r $ROUNDS, --big $BIG; shm medians: sendrecv $lat us at 8 B, $sr us and all-reduce(direct) $ar us at $BIGB B;"
    echo "#  a lone memcpy: $copy GB/s)"
    echo "hosts = 1"
    echo "ranks_per_host = 2"
    echo "cores = $cores"
    echo "shm_copies = 1"
    echo "intra_lat = $lat"
    echo "intra_bw = $intra_bw"
    echo "reduce_bw = $reduce_bw"
    echo "copy_bw = $copy_bw"
} > "$SIM_TMP/model"

if [ -n "$NET" ] && [ "$(id -u)" = 0 ]; then
    echo "sim_calibrate.sh: 2 namespace hosts x 1 rank" >&2
    sim_median "$ROUNDS" "$SIM_TMP/t" sim_net 1 sendrecv_perf -b 8 -e 8 "${ARGS[@]}" \
        > "$SIM_TMP/net_lat"
    sim_median "$ROUNDS" "$SIM_TMP/t" sim_net 1 sendrecv_perf -b "$BIGB" -e "$BIGB" \
        "${ARGS[@]}" > "$SIM_TMP/net_bw"
    nlat=$(us 8 "$SIM_TMP/net_lat")
    nt=$(us "$BIGB" "$SIM_TMP/net_bw")
    {
        echo "# namespace hosts (tcp over a veth, WEFT_SPIN=0): median sendrecv $nlat us at 8 B, $nt us at $BIGB B"
        echo "nics = 1"
        echo "inter_lat = $nlat"
        echo "net_copies = 1"
        echo "inter_bw = $(awk -v s="$BIGB" -v t="$nt" 'BEGIN { printf "%.4g", 2 * s / t / 1e3 }')"
    } >> "$SIM_TMP/model"
else
    echo "# inter-host keys: weft's defaults (not measured: --no-net or not root)" >> "$SIM_TMP/model"
fi
echo "# $(sim_far_note)" >> "$SIM_TMP/model"
# weft-sim reads it back (a bad value fails here, not later)
"$B/bin/weft-sim" --model "$SIM_TMP/model" -b 8 -e 8 > /dev/null ||
    sim_die "weft-sim refuses the model it measured: $SIM_TMP/model"
cp "$SIM_TMP/model" "$OUT"
echo "sim_calibrate.sh: wrote $OUT" >&2
cat "$OUT"
