#!/bin/bash
# test_sim.sh - weft-sim's command line: tables, the model file, flags over the file,
# the sweep's -f and -i, rows past --max-frames and NICs past the ranks at 65536 ranks
# (under a 4 GB address-space limit), and bad input (exit 2, a message naming what is
# wrong, no table).
#
#   bash tests/test_sim.sh [BUILD]     (tests/run.sh runs it; ends "N passed, N failed")
set -u
cd "$(dirname "$0")/.." || exit 2
B=${1:-build}
SIM=$B/bin/weft-sim
PASS=0
FAIL=0
D=$(mktemp -d "${TMPDIR:-/tmp}/test_sim.XXXXXX")
trap 'rm -rf "$D"' EXIT
[ -x "$SIM" ] || { echo "test_sim.sh: $SIM is missing (make tools)"; exit 1; }

ok() { PASS=$((PASS + 1)); echo "ok - $1"; }
no() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; sed 's/^/     | /' "$D/out" "$D/err" | tail -n 8; }
# expect NAME STATUS [GREP-IN-STDOUT-OR-STDERR] -- ARGS...  (VMEM=KB: under ulimit -v KB)
expect() {
    local name=$1 want=$2 pat=$3
    shift 4
    ( if [ -n "${VMEM:-}" ]; then ulimit -v "$VMEM" || exit 99; fi
      exec timeout 60 "$SIM" "$@" ) > "$D/out" 2> "$D/err"
    local rc=$?
    if [ $rc != "$want" ]; then no "$name: status $rc, want $want"; return; fi
    if [ -n "$pat" ] && ! grep -qE -- "$pat" "$D/out" "$D/err"; then no "$name: no /$pat/"; return; fi
    if [ "$want" = 2 ] && grep -q '^# Algorithm' "$D/out"; then no "$name: a table after bad input"; return; fi
    ok "$name"
}

expect "--help" 0 "--model FILE" -- --help
expect "2x2 all-reduce: every registered algorithm that runs it" 0 "# Algorithm: ring" -- \
    --hosts 2 --ranks-per-host 2 --inter-bw 2 -b 1K -e 64M -f 4
grep -q "# Algorithm: direct" "$D/out" && ! grep -q "# Algorithm: cma" "$D/out" &&
    ok "direct listed, cma (no single-copy peers) not" || no "algorithm list"
grep -q "# Algorithm: hier" "$D/out" && ok "hier listed across hosts (the layouts carry the host map)" ||
    no "hier missing on 2x2"
# nccl-tests' columns; a 2x2 ring at 64 MB runs at the NIC's 2 GB/s (busbw)
bus=$(awk '/# Algorithm: ring/ { r = 1 } r && $1 == 67108864 { print $8; exit }' "$D/out")
awk -v b="$bus" 'BEGIN { exit !(b > 1.9 && b <= 2.0) }' && ok "ring busbw at 64 MB: $bus GB/s" ||
    no "ring busbw at 64 MB: '$bus', want 1.9-2.0"
# every listed algorithm prints all 9 sizes (how many are listed grows with the registry)
nalg=$(grep -c "^# Algorithm:" "$D/out")
[ "$nalg" -ge 2 ] && [ "$(grep -c "^ *[0-9]" "$D/out")" = $((9 * nalg)) ] &&
    ok "9 sizes x $nalg algorithms" || no "row count ($nalg algorithms)"
grep -q '#wrong' "$D/out" && grep -q 'N/A' "$D/out" && ok "header and N/A #wrong" || no "format"

printf '# a cluster\nhosts = 2\nranks_per_host = 4  # per host\ninter_bw = 3\n' > "$D/m"
expect "--model" 0 "2 host\(s\) x 4 rank\(s\)" -- --model "$D/m" -b 1M -e 1M --algo ring
expect "flags override the model file wherever they stand" 0 "4 host\(s\) x 4 rank\(s\)" -- \
    --hosts 4 --model "$D/m" -b 1M -e 1M --algo ring
expect "--write-model" 0 "^inter_bw = 3$" -- --model "$D/m" --write-model - -b 8 -e 8 --algo ring
sed -n '/^hosts/,/^staging/p' "$D/out" > "$D/m2"
expect "a written model reads back" 0 "2 host\(s\) x 4 rank\(s\)" -- --model "$D/m2" -b 8 -e 8
expect "broadcast with a root" 0 "# Algorithm: ring" -- --hosts 1 \
    --ranks-per-host 3 -c broadcast -r 2 -b 4K -e 4K

expect "bad: --hosts 0" 2 "hosts = '0'" -- --hosts 0
expect "bad: --intra-bw abc" 2 "intra_bw = 'abc'" -- --intra-bw abc
expect "bad: --channels 65" 2 "channels = '65'" -- --channels 65
expect "--channels 2 in the header and the model" 0 "^channels = 2$" -- --channels 2 \
    --write-model - -b 1M -e 1M --algo ring
expect "bad: one rank" 2 "1 ranks" -- --hosts 1 --ranks-per-host 1
expect "bad: missing model file" 2 "cannot open model file" -- --model "$D/nope"
printf 'hosts = 2\nlatency = 3\n' > "$D/bad"
expect "bad: unknown key in the model file, with its line" 2 ":2: cluster: unknown key 'latency'" -- --model "$D/bad"
expect "bad: --algo" 2 "not a registered algorithm" -- --algo nosuch
expect "bad: -c" 2 "not a collective" -- -c allfoo
expect "bad: -b above -e" 2 "-b is above -e" -- -b 1M -e 1K
expect "bad: -e nan" 2 "-e nan: not a size" -- -e nan
expect "bad: -e 1e30 (past 8E)" 2 "-e 1e30: not a size" -- -b 8 -e 1e30
expect "bad: --max-frames nan" 2 "--max-frames nan" -- --max-frames nan
expect "bad: root outside the cluster" 2 "root" -- -c broadcast -r 9
expect "bad: chunk above a quarter of the staging" 2 "chunk" -- --chunk 2M
# a bandwidth whose bytes take forever (1/(1e-320 GB/s) is inf: a time of inf, busbw 0 and
# exit 0 before 2026-11-27), and a directory as the model file (read as empty before)
expect "bad: --intra-bw 1e-320" 2 "from 1e-9 to 1e6" -- --intra-bw 1e-320 -b 1M -e 1M --algo ring
expect "bad: --model a directory" 2 "cannot read it as a model file" -- --model "$D" -b 1M -e 1M
# the average line: every busbw printed, in place and out of place, as nccl-tests
expect "4 ranks all-gather, rhd" 0 "Avg bus bandwidth" -- --ranks-per-host 4 -c allgather \
    -b 64K -e 256K -f 4 --algo rhd
avg=$(awk '/^ +[0-9]+ +[0-9]+ / { s += $(NF - 5) + $(NF - 1); k += 2 }
      END { if (k) printf "%.3f", s / k }' "$D/out")
got=$(sed -n 's/# Avg bus bandwidth *: *//p' "$D/out" | awk '{ printf "%.3f", $1 }')
if [ -n "$avg" ] && awk -v a="$avg" -v g="$got" 'BEGIN { exit !(a - g < 0.002 && g - a < 0.002) }'
then ok "Avg bus bandwidth is the mean of both busbw columns ($got)"
else no "Avg bus bandwidth $got, the columns' mean $avg"; fi
expect "bad: unknown flag" 2 "" -- --frobnicate
expect "an algorithm that does not run the call" 1 "does not run" -- --algo ring -c alltoall
expect "hier on one host does not run" 1 "hier does not run" -- --hosts 1 --ranks-per-host 4 \
    --algo hier -b 4K -e 4K
expect "--max-frames leaves the row N/A" 0 "more than the limit" -- --hosts 1 \
    --ranks-per-host 4 -b 64M -e 64M --algo ring --max-frames 10

# A row past --max-frames is N/A at once, before the schedules are kept: a 65536-rank ring
# of 8 bytes kept every rank's (12.5 MB a rank, 825 GB) before it compared (out of
# memory under 4 GB here, or killed by the timeout). The sanitizers' shadow memory needs
# more address space than the limit: no limit under them.
vmem=4000000
grep -qa -e __asan_init -e __tsan_init -e __msan_init "$SIM" && vmem=
VMEM=$vmem expect "--max-frames: 65536-rank ring N/A before its schedules are kept" 0 \
    "more than the limit" -- --hosts 16384 --ranks-per-host 4 --algo ring -b 8 -e 8 --inplace 0
grep -qE "^ +8 +2 +float +sum +-1 +N/A" "$D/out" && ok "... and its row says N/A" || no "N/A row"
# NICs beyond a host's ranks carry nothing: 4096 hosts of 65536 NICs asked for 8.6 GB of
# ports; the header says how many are used
VMEM=$vmem expect "--nics above --ranks-per-host" 0 "65536 NIC\(s\) per host \(2 used" -- \
    --hosts 4096 --ranks-per-host 2 --nics 65536 --algo tree -b 8 -e 8 --inplace 0
# A model-file line is one line at any length: fgets into 512 bytes read the tail of a
# long comment as a line ("hosts = 3" set hosts)
{ printf '#%0510d' 0; printf 'hosts = 3\nranks_per_host = 4\n'; } > "$D/long"
expect "a 520-byte comment line in the model file is a comment" 0 "1 host\(s\) x 4 rank\(s\)" -- \
    --model "$D/long" -b 8 -e 8 --algo ring
# A count of 0 moves nothing, as in the engine (coll_run: no schedule): an 8-byte
# all-gather of 4 ranks is 0 elements a rank (replayed, 0.50 us before)
expect "count 0: no time" 0 "" -- -c allgather -b 8 -e 8 --hosts 1 --ranks-per-host 4 --algo ring
awk '$1 == 0 && $2 == 0 && $6 == "0.00" && $10 == "0.00" { f = 1 } END { exit !f }' "$D/out" &&
    ok "... 0.00 us in both columns" || no "count 0 row: $(grep -E '^ +0 ' "$D/out")"
# -f and -i as nccl-tests and the perf tools read them: a factor above 1 wins over -i
# wherever they stand, -f 1 (or 0) steps by -i, 1M by default; -i alone steps by it
sizes() { awk '/^ +[0-9]+ +[0-9]+ / { printf "%s%s", s, $1; s = " " }' "$D/out"; }
M=1048576
expect "-f 1 without -i steps by 1M" 0 "" -- -b 1M -e 3M -f 1 --algo ring
[ "$(sizes)" = "$M $((2 * M)) $((3 * M))" ] && ok "... 1M, 2M, 3M" || no "-f 1 sizes: $(sizes)"
expect "-f 2 -i 1M: the factor wins" 0 "" -- -b 1M -e 4M -f 2 -i 1M --algo ring
[ "$(sizes)" = "$M $((2 * M)) $((4 * M))" ] && ok "... 1M, 2M, 4M" || no "-f 2 -i 1M sizes: $(sizes)"
expect "-i 1M alone steps by it" 0 "" -- -b 1M -e 3M -i 1M --algo ring
[ "$(sizes)" = "$M $((2 * M)) $((3 * M))" ] && ok "... 1M, 2M, 3M" || no "-i 1M sizes: $(sizes)"
expect "-f 0 steps by -i" 0 "" -- -b 1M -e 2M -f 0 --algo ring
[ "$(sizes)" = "$M $((2 * M))" ] && ok "... 1M, 2M" || no "-f 0 sizes: $(sizes)"
expect "bad: -f 1 -i 0 below -e" 2 "-i 0 with a factor of 1" -- -b 1M -e 2M -f 1 -i 0
expect "-f 1 -i 0 with -b = -e: one row" 0 "" -- -b 1M -e 1M -f 1 -i 0 --algo ring
[ "$(sizes)" = "$M" ] && ok "... 1M" || no "-f 1 -i 0, one size: $(sizes)"

echo "test_sim.sh: $PASS passed, $FAIL failed"
[ $FAIL = 0 ]
