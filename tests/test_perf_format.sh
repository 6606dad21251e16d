#!/usr/bin/env bash
# test_perf_format.sh - the perf tools print what nccl-tests 2.19.6 prints, line for line
# where the numbers do not differ: its opening and closing lines, its column layout, its
# per-rank block sizes (a rank's block rounded down to 16 bytes: an all-gather of 32 B on
# 4 ranks has blocks of 0), and its exit status 7 with "FAILED" when the average bus
# bandwidth is under NCCL_TESTS_MIN_BW.
#
#   bash tests/test_perf_format.sh [BUILD]
#
# Every job runs under `timeout`. Ends "test_perf_format: N passed, N failed".
set -u
B=${1:-build}
W=$B/bin/weftrun
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-perffmt.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

ok()  { PASS=$((PASS + 1)); echo "ok - $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && sed 's/^/   | /' "$2" | tail -n 30; }
sizes() { awk '/^ +[0-9]+ +[0-9]+ / { printf "%s ", $1 }' "$1"; }

# 1. all-gather on 4 ranks, 8-64 B: blocks of 0, 0, 0 and 4 floats
timeout 60 "$W" -n 4 "$B/bin/all_gather_perf" -b 8 -e 64 -f 2 -n 1 -w 1 -B 0 >"$OUT/ag" 2>&1
rc=$?
got=$(sizes "$OUT/ag")
if [ $rc = 0 ] && [ "$got" = "0 0 0 64 " ]; then
    ok "all_gather_perf -n 4, 8-64 B: sizes 0 0 0 64, as nccl-tests rounds a rank's block"
else
    bad "all_gather_perf -n 4 sizes '$got' (exit $rc), want '0 0 0 64 '" "$OUT/ag"
fi

# 2. reduce-scatter on 3 ranks, 1 MiB of floats: 87380 floats a rank, 1048560 B
timeout 60 "$W" -n 3 "$B/bin/reduce_scatter_perf" -b 1M -e 1M -n 1 -w 1 -B 0 >"$OUT/rs" 2>&1
rc=$?
got=$(sizes "$OUT/rs")
if [ $rc = 0 ] && [ "$got" = "1048560 " ] && grep -qE '^ +1048560 +87380 ' "$OUT/rs"; then
    ok "reduce_scatter_perf -n 3, 1 MiB: 1048560 B, count 87380"
else
    bad "reduce_scatter_perf -n 3 sizes '$got' (exit $rc), want '1048560 '" "$OUT/rs"
fi

# 3. the lines around the table, and its column layout (widths as nccl-tests prints them)
f=$OUT/ag
want_lines=(    # whole lines, exactly (the header lines end in a space, as nccl-tests')
    '# Collective test starting: all_gather_perf'
    '# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 1 iters: 1 agg iters: 1 validation: 1 graph: 0 unalign: 0'
    '#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong '
    '#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         '
    '# Out of bounds values : 0 OK'
    '# Collective test concluded: all_gather_perf'
)
miss=""
for l in "${want_lines[@]}"; do grep -qxF "$l" "$f" || miss="$miss [$l]"; done
row=$(grep -E '^ +64 +4 ' "$f")
# a row: %12 size, %12 count, %8 type, %6 op, %6 root, then per column group "  %7s  %6s
# %6s  %6g": 12+2+12+2+8+2+6+2+6 + 2*(2+7+2+6+2+6+2+6) = 52 + 2*33 = 118 characters
if [ -z "$miss" ] && [ "${#row}" = 118 ] && [ -z "$(tail -n 1 "$f")" ]; then
    ok "nccl-tests' opening and closing lines, header and a row of 118 characters"
else
    bad "format: missing$miss; row '$row' (${#row} characters, want 118); last line '$(tail -n 1 "$f")'" "$f"
fi

# 4. under NCCL_TESTS_MIN_BW: "FAILED" on the average line and exit status 7
NCCL_TESTS_MIN_BW=1000000 timeout 60 "$W" -n 2 "$B/bin/all_reduce_perf" -b 8 -e 64 -n 1 -w 1 \
    -B 0 >"$OUT/bw" 2>&1
rc=$?
if [ $rc = 7 ] && grep -qE '^# Avg bus bandwidth    : [0-9.e+-]+ FAILED$' "$OUT/bw"; then
    ok "NCCL_TESTS_MIN_BW above the average: FAILED, exit status 7 (nccl-tests' testNumResults)"
else
    bad "NCCL_TESTS_MIN_BW: exit $rc, want 7 and a FAILED average line" "$OUT/bw"
fi

# 5. sizes that are not sizes, and a sweep that cannot grow: exit 2 naming the option,
# before any job starts (NaN went through as 2^63; -b 0 -f 2 printed one row and exit 0)
while IFS='|' read -r args want; do
    # shellcheck disable=SC2086
    timeout 20 "$B/bin/all_reduce_perf" $args >"$OUT/arg" 2>&1
    rc=$?
    if [ $rc = 2 ] && grep -q -- "$want" "$OUT/arg"; then
        ok "all_reduce_perf $args: exit 2, '$(head -n 1 "$OUT/arg")'"
    else
        bad "all_reduce_perf $args: exit $rc, want 2 and '$want'" "$OUT/arg"
    fi
done <<'EOF'
-b nan -e 1K|invalid size 'nan' for -b
-b 8 -e nan|invalid size 'nan' for -e
-b 8 -e inf|invalid size 'inf' for -e
-b 8 -e 12Q|invalid size '12Q' for -e
-b 0 -e 1K -f 2|-b 0 with -f 2 never grows
EOF

echo "test_perf_format: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
