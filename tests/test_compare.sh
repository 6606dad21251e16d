#!/usr/bin/env bash
# test_compare.sh - bench/compare end to end on a tiny shm sweep, and its refusals.
#
#   bash tests/test_compare.sh
#
# Runs weft (and Open MPI where mpirun.openmpi is installed; compare skips a missing peer
# with a note) over 8 B..8 KB with the small sizes split off: the table must hold every
# size once, say which iteration count timed which sizes, and the raw output of both
# sweeps must be kept. Bad options must fail before anything runs. Where weft is built
# with UCX, a tiny `--transports ucx` run must show weft over UCX beside Open MPI's pml ucx
# and weft's own shm (the extra column); else it is skipped with a note. Every run is
# bounded by `timeout`. BUILD: the build directory whose tools run (default build).
# A launch in a far placement (a fake core_rtt) is repeated and counted in the setup.
# Then bench/crossover.sh on a tiny shm sweep, and its refusals; sim_lib.sh's medians and
# its repeat of launches run while the cores were far apart; core_rtt and its refusals.
set -u
cd "$(dirname "$0")/.." || exit 2
B=${BUILD:-build}
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-compare.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

ok()  { PASS=$((PASS + 1)); echo "ok - $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && tail -n 15 "$2" | sed 's/^/   | /'; }

# (--placement off: a far placement here must not make the runs repeat; 2b turns it on)
compare() { timeout -k 5 120 /usr/bin/python3 bench/compare --build "$B" --colls allreduce \
                --reps 1 --peers ompi --transports shm --placement off "$@"; }

# 1. The split sweep: 8..1K with 50 calls per size, 2K..8K with 2.
if compare -b 8 -e 8K --iters 2 --warmup 1 --small-iters 50 --small-max 1K \
        --out "$OUT/split" >"$OUT/split.log" 2>&1; then
    md=$OUT/split/compare-shm.md
    # the sizes of one table (its '### ' title to the next blank line)
    table_sizes() { awk -F'|' -v t="$1" '$0 == t { on = 1; next } on && /^$/ && n { exit }
        on && /^\| [0-9]/ { gsub(/ /, "", $2); printf "%s ", $2; n++ }' "$md"; }
    want="8 16 32 64 128 256 512 1K 2K 4K 8K "
    for place in "out of place" "in place"; do
        sizes=$(table_sizes "### allreduce, $place")
        if [ "$sizes" = "$want" ]; then ok "$place: every size once: $sizes"
        else bad "$place: sizes in the table: '$sizes', want '$want'" "$md"; fi
    done
    # the bars row holds a ratio either side of the bar (bold when under it): timing
    if grep -q "^## Against the bars" "$md" && grep -Eq '^\| 8-256 B, level \| allreduce \| (\*\*)?[0-9.]+x at [0-9]+(\*\*)? / (\*\*)?[0-9.]+x at [0-9]+' "$md" &&
       [ "$(table_sizes "### allreduce, out of place" | wc -w)" -gt 0 ] &&
       grep -q "^## Launch to launch" "$md"
    then ok "the bars and launch-to-launch sections are there"
    else bad "no 'Against the bars' row for 8-256 B, or no launch-to-launch section" "$md"; fi
    if grep -q "Timed calls per size: 50 at 8-1K (after 5 warmup calls), 2 at 2K-8K (after 1 warmup calls)" "$md"
    then ok "the table says which count timed which sizes"
    else bad "no line naming both sweeps' iteration counts" "$md"; fi
    if grep -q -- "-n 50 " "$OUT/split/raw/shm-allreduce-weft-0-small.txt" 2>/dev/null &&
       grep -q -- "-b 2048 -e 8192 .*-n 2 " "$OUT/split/raw/shm-allreduce-weft-0.txt" 2>/dev/null
    then ok "raw output of both sweeps kept, with their commands"
    else bad "raw files of the two sweeps missing or with the wrong commands" "$OUT/split.log"; fi
    if [ -s "$OUT/split/compare-shm.png" ]; then ok "plot written"
    else bad "no plot" "$OUT/split.log"; fi
else
    bad "compare with a split sweep failed" "$OUT/split.log"
fi

# 2. --small-iters 0: one sweep, --iters for every size.
if compare -b 8 -e 256 --iters 3 --warmup 1 --small-iters 0 --out "$OUT/one" >"$OUT/one.log" 2>&1 &&
   grep -q "Timed calls per size: 3 at 8-256 (after 1 warmup calls)\." "$OUT/one/compare-shm.md"
then ok "--small-iters 0 runs one sweep"
else bad "--small-iters 0" "$OUT/one.log"; fi

# 2b. Placement: with a fake core_rtt reading 80 ns five times (the lowest; the fifth is
# the reading before weft's launch), 80 after it, then 80/400 around Open MPI's launch
# (repeated) and 80/80 around its repeat, the setup says one Open MPI launch was repeated
# and none of weft's; --placement off says it did not check.
cat >"$OUT/fake_rtt" <<'FAKE'
#!/bin/sh
n=$(cat "$FAKE_RTT_N" 2>/dev/null || echo 0); echo $((n + 1)) >"$FAKE_RTT_N"
set -- 80 80 80 80 80 80 80 400 80 80; shift $((n < 9 ? n : 9)); echo "$1"
FAKE
chmod +x "$OUT/fake_rtt"
if command -v mpirun.openmpi >/dev/null; then
    if FAKE_RTT_N=$OUT/rtt_n COMPARE_CORE_RTT=$OUT/fake_rtt compare -b 8 -e 64 --iters 3 \
            --warmup 1 --small-iters 0 --placement repeat --out "$OUT/place" \
            >"$OUT/place.log" 2>&1 &&
       grep -q "Placement: every launch bracketed by .core_rtt. (cores' round trip at its lowest 80 ns) .*launches repeated: Open MPI 1; kept although far (10 tries ran out): none; kept before a nearer reading was seen, far against the final lowest: none\." "$OUT/place/compare-shm.md"
    then ok "a launch in a far placement is repeated, and counted in the setup"
    else bad "placement: no line saying one Open MPI launch was repeated" "$OUT/place/compare-shm.md"; fi
else
    echo "ok - placement repeat skipped: no mpirun.openmpi"
fi
if compare -b 8 -e 64 --iters 3 --warmup 1 --small-iters 0 --placement off \
        --out "$OUT/noplace" >"$OUT/noplace.log" 2>&1 &&
   grep -q "Placement: not checked" "$OUT/noplace/compare-shm.md"
then ok "--placement off: the setup says placement was not checked"
else bad "--placement off" "$OUT/noplace.log"; fi

# 3. Refusals: a clear message, non-zero, and no table written.
for args in "--small-iters -1" "--small-max 12Q" "--iters 0" "-b 0" "-b 0.5"; do
    # shellcheck disable=SC2086  # the options are words on purpose
    if compare -b 8 -e 64 $args --out "$OUT/bad" >"$OUT/bad.log" 2>&1; then
        bad "'$args' was accepted" "$OUT/bad.log"
    elif ! grep -q "^compare: " "$OUT/bad.log" || [ -e "$OUT/bad/compare-shm.md" ]; then
        bad "'$args': no 'compare:' message, or a table was written anyway" "$OUT/bad.log"
    else
        ok "'$args' refused: $(grep -m1 '^compare: ' "$OUT/bad.log" | cut -c1-90)"
    fi
done

# 3b. Its pieces on fake input (bench/compare loaded as a module): a tool that prints a
# whole table and then exits non-zero fails the launch, every time (its status was
# missed when it closed its output first: kept as data about half the time); the
# smallest sizes of a gather, which print 0 (blocks rounded down to 16 bytes), keep one
# row, and any other size printed twice is refused; the peers' own knobs in the caller's
# environment (OMPI_MCA_*, UCX_*, ...) are left out, with a note; a launch kept as near
# while the run began in the far placement is counted far once a nearer reading comes.
cat >"$OUT/late_fail.sh" <<'EOF'
#!/bin/sh
printf '#  size count type redop root time algbw busbw wrong time algbw busbw wrong\n'
printf '   1024   256 float sum -1 1.0 1.0 1.0 0 1.0 1.0 1.0 0\n'
printf '# Out of bounds values : 0 OK\n'
exec >&- 2>&-
exit 7
EOF
chmod +x "$OUT/late_fail.sh"
if /usr/bin/python3 - "$OUT/late_fail.sh" >"$OUT/pieces.log" 2>&1 <<'EOF'
import importlib.machinery, importlib.util, os, sys
loader = importlib.machinery.SourceFileLoader("compare", "bench/compare")
spec = importlib.util.spec_from_loader("compare", loader)
c = importlib.util.module_from_spec(spec)
loader.exec_module(c)
bad = []
kept = 0
for _ in range(20):
    try:
        c.run_procs([[sys.argv[1]]], [dict(os.environ)], 30, "late")
        kept += 1
    except c.Failure:
        pass
if kept:
    bad.append("a launch that exited 7 after its table was kept %d times in 20" % kept)
row = "%7d %5d float sum -1 %s 1.0 1.0 0 %s 1.0 1.0 0"
ok = "\n# Out of bounds values : 0 OK\n"
rows = c.parse_rows("\n".join([row % (0, 0, "0.90", "0.91"), row % (0, 0, "0.50", "0.51"),
                                row % (32, 4, "1.00", "1.01")]) + ok, "t")
if rows != {0: (0.90, 0.91), 32: (1.00, 1.01)}:
    bad.append("size-0 rows: got %r" % rows)
try:
    c.parse_rows("\n".join([row % (32, 4, "1", "1"), row % (32, 4, "2", "2")]) + ok, "t")
    bad.append("a size printed twice was accepted")
except c.Failure:
    pass
# a run that begins in the far placement: its first readings (400 ns) pass for near
# until an 80 ns one comes; the launch kept then is reported far in the end
pl = c.Placement("build", True)
pl.on = True
seq = iter([400] * 5 + [400, 80, 80])
pl.reading = lambda: next(seq)
for side in ("weft", "Open MPI"):
    if pl.near():
        first = pl.last
        if pl.near():
            pl.kept_near(side, first, pl.last)
if pl.late_far() != {"weft": 1} or "far against the final lowest: weft 1." not in pl.line():
    bad.append("placement: late_far %r, line %r" % (pl.late_far(), pl.line()))
print("; ".join(bad) if bad else "pieces ok")
sys.exit(1 if bad else 0)
EOF
then ok "compare's pieces: a late non-zero exit fails the launch (20 of 20), size-0 rows kept once, repeats refused, a launch kept before the first near reading is reported far"
else bad "compare's pieces" "$OUT/pieces.log"; fi
OMPI_MCA_btl=self UCX_TLS=tcp compare -b 8 -e 8 --iters 2 --warmup 1 --small-iters 0 \
    --out "$OUT/envs" >"$OUT/envs.log" 2>&1
if grep -q "OMPI_MCA_btl=self left out" "$OUT/envs.log" &&
   grep -q "UCX_TLS=tcp left out" "$OUT/envs.log" && [ -s "$OUT/envs/compare-shm.md" ]; then
    ok "the caller's OMPI_MCA_*/UCX_* settings are left out, with a note"
else
    bad "the caller's peer settings" "$OUT/envs.log"
fi

# 4. --transports ucx (one host): weft over UCX, Open MPI's pml ucx, and weft shm.
if ! grep -q 'libucp\.so\.0' "$B/bin/all_reduce_perf"; then
    echo "skip - --transports ucx: weft is built without UCX ($B/bin/all_reduce_perf has no ucx transport)"
elif compare --transports ucx -b 8 -e 64K --iters 2 --warmup 1 --small-iters 20 --small-max 1K \
        --out "$OUT/ucx" >"$OUT/ucx.log" 2>&1; then
    md=$OUT/ucx/compare-ucx.md
    if grep -q "^| size | weft us | .*weft shm us | .*| weft/weft shm |$" "$md" &&
       grep -q "^| 64K | " "$md" && grep -q -- "--mca pml ucx --mca pml_ucx_tls any" "$md" &&
       grep -q "WEFT_TRANSPORT=ucx" "$md" && grep -q "^| range | collective | weft/Open MPI | weft/weft shm |$" "$md" &&
       grep -q -- "WEFT_TRANSPORT=shm .*weftrun -n 2 --bind-to core" "$OUT/ucx/raw/ucx-allreduce-weft-shm-0.txt" &&
       grep -q -- "WEFT_TRANSPORT=ucx .*weftrun -n 2 --bind-to core" "$OUT/ucx/raw/ucx-allreduce-weft-0.txt"
    then ok "--transports ucx: weft over UCX, the peers over UCX and a weft shm column"
    else bad "--transports ucx: the table, setup lines or raw runs are not as expected" "$md"; fi
else
    bad "--transports ucx failed" "$OUT/ucx.log"
fi

# 5. bench/crossover.sh on 2 shm ranks: a row per size with each forced algorithm's time,
# the tuner's pick by name; hier, which runs nothing on one host, shows "-" (the tuner's
# log says another algorithm ran), never the other's time. Bad options exit 2.
xo=$OUT/xover.md
if BUILD=$B timeout -k 5 120 bash bench/crossover.sh -n 2 --net "" -a "direct ring hier" -b 8 \
        -e 4K -f 8 -r 1 -o "$xo" >"$OUT/xover.log" 2>&1; then
    if grep -q "^| size | direct | ring | hier | fastest | tuner's pick | tuner / fastest |$" "$xo" &&
       [ "$(grep -cE '^\| [0-9]+ \| [0-9.]+ \| [0-9.]+ \| - \| (direct|ring) \| [a-z]+ \([0-9.]+\) \| [0-9.]+ \|$' "$xo")" = 4 ] &&
       grep -q "^tuner's pick the fastest at [0-9] of 4 sizes" "$xo"
    then ok "crossover.sh: 4 sizes, direct and ring timed, hier '-' on one host, the tuner's pick"
    else bad "crossover.sh: the table is not as expected" "$xo"; fi
else
    bad "crossover.sh failed" "$OUT/xover.log"
fi
for args in "-c nosuch" "-r 0" "--bogus"; do
    BUILD=$B timeout 20 bash bench/crossover.sh $args --net "" >"$OUT/xbad.log" 2>&1
    rc=$?
    if [ $rc = 2 ]; then ok "crossover.sh $args: exit 2 ($(head -n 1 "$OUT/xbad.log"))"
    else bad "crossover.sh $args: exit $rc, want 2" "$OUT/xbad.log"; fi
done

# 6. sim_lib.sh's medians (bench/sim_calibrate.sh, sim_check.sh): three launches of a
# fake tool whose 8 B row reads 30, 10, 20 us and whose 64 B row 5, 7, 9 give 20 and 7;
# sim_med of an even count is the mean of the middle two.
fake=$OUT/fake_tool
cat >"$fake" <<'FAKE'
#!/bin/sh
n=$(cat "$1" 2>/dev/null || echo 0); echo $((n + 1)) >"$1"
set -- 30 10 20; shift $((n % 3)); a=${1:-30}
set -- 5 7 9; shift $((n % 3)); b=${1:-5}
echo "# a comment row"
echo "           8   2 float sum -1 $a 0.00 0.00 0 $a 0.00 0.00 0"
echo "          64  16 float sum -1 $b 0.00 0.00 0 $b 0.00 0.00 0"
FAKE
chmod +x "$fake"
got=$(cd "$OUT" && SIM_RTT=0 && . "$OLDPWD/bench/sim_lib.sh" && sim_median 3 "$OUT/tables" "$fake" "$OUT/n" |
      tr '\n' ' '; printf '1\n4\n2\n3\n' | sim_med; rm -rf "$SIM_TMP")
if [ "$got" = "8 20 64 7 2.5" ]; then ok "sim_median: per-size medians of 3 launches; sim_med of 4 values"
else bad "sim_median/sim_med gave '$got', want '8 20 64 7 2.5'"; fi

# 7. sim_median repeats a launch that ran while the cores were far apart: a fake core_rtt
# reads 80 ns five times (the lowest; the fifth is the reading before launch 1), then 80
# after launch 1, 80/400 around launch 2 (repeated), 80/80 around its repeat and launch 3. The fake tool's second launch (10 us,
# 7 us) must be left out: medians of 30, 20, 30 and 5, 9, 5. With SIM_FAR_TRIES=1 the far
# launch is kept and counted.
mkdir -p "$OUT/fakeb/bin"
cat >"$OUT/fakeb/bin/core_rtt" <<'FAKE'
#!/bin/sh
n=$(cat "$FAKE_RTT_N" 2>/dev/null || echo 0); echo $((n + 1)) >"$FAKE_RTT_N"
set -- 80 80 80 80 80 80 80 400 80 80 80 80; shift $((n < 11 ? n : 11)); echo "$1"
FAKE
chmod +x "$OUT/fakeb/bin/core_rtt"
for tries in 10 1; do
    rm -f "$OUT/n" "$OUT/rn"
    # (not in a pipeline: sim_median's counters must reach the echo)
    got=$(cd "$OUT" && BUILD=$OUT/fakeb SIM_FAR_TRIES=$tries && export FAKE_RTT_N=$OUT/rn &&
          . "$OLDPWD/bench/sim_lib.sh" && sim_median 3 "$OUT/tables" "$fake" "$OUT/n" \
          >"$OUT/med" 2>"$OUT/prog" && tr '\n' ' ' <"$OUT/med" &&
          echo "$SIM_FAR_REPEATED $SIM_FAR_KEPT $SIM_RTT_LOW"; rm -rf "$SIM_TMP")
    want="8 30 64 5 1 0 80"
    [ $tries = 1 ] && want="8 20 64 7 0 1 80"
    if [ "$got" = "$want" ]; then ok "sim_median, SIM_FAR_TRIES=$tries: far launch handled ($got)"
    else bad "sim_median, SIM_FAR_TRIES=$tries: gave '$got', want '$want'"; fi
    # its progress lines: one per launch, the far one named with what became of it
    want="far: repeated"; [ $tries = 1 ] && want="far: kept (tries ran out)"
    nl=$(grep -c "launch [0-9] of 3, try [0-9]*: [0-9]* s; cores' round trip before/after" "$OUT/prog")
    if [ "$nl" = $((tries > 1 ? 4 : 3)) ] && [ "$(grep -c "80/400 ns (lowest 80); $want" "$OUT/prog")" = 1 ]
    then ok "sim_median, SIM_FAR_TRIES=$tries: a progress line per launch, the far one '$want'"
    else bad "sim_median, SIM_FAR_TRIES=$tries: progress lines:"; cat "$OUT/prog"; fi
done

# 7b. sim_net's pinning (sim_host_cpus): each namespace host gets its own half of the
# cpus this process may use, every cpu for both with SIM_NET_PIN=0, the one cpu for both
# where there is one.
pin() { (cd "$OUT" && . "$OLDPWD/bench/sim_lib.sh" &&
         echo "$(sim_host_cpus 0) $(sim_host_cpus 1) $(SIM_NET_PIN=0 sim_host_cpus 1)";
         rm -rf "$SIM_TMP"); }
if [ "$(nproc)" -ge 2 ]; then
    got=$(taskset -c 0,1 bash -c "$(declare -f pin); OUT=$OUT; pin")
    if [ "$got" = "0 1 0,1" ]; then ok "sim_host_cpus on cpus 0,1: $got"
    else bad "sim_host_cpus on cpus 0,1 gave '$got', want '0 1 0,1'"; fi
    got=$(taskset -c 1 bash -c "$(declare -f pin); OUT=$OUT; pin")
    if [ "$got" = "1 1 1" ]; then ok "sim_host_cpus on cpu 1 alone: $got"
    else bad "sim_host_cpus on cpu 1 alone gave '$got', want '1 1 1'"; fi
else
    echo "ok - sim_host_cpus runs skipped: one cpu here"
fi

# 8. core_rtt: a round trip in ns between two cpus, and its refusals.
rtt=$B/bin/core_rtt
if [ "$(nproc)" -ge 2 ]; then
    v=$(timeout -k 5 30 "$rtt" -q -r 3 -n 2000)
    if [[ $v =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ]; then ok "core_rtt -q: $v ns"
    else bad "core_rtt -q printed '$v'"; fi
    line=$(timeout -k 5 30 "$rtt" -r 1 -n 1000)
    if [[ $line == "core_rtt: cpus "*" ns per round trip"* ]]; then ok "core_rtt: '$line'"
    else bad "core_rtt printed '$line'"; fi
    timeout -k 5 30 taskset -c 0 "$rtt" >"$OUT/rtt1.log" 2>&1
    rc=$?
    if [ $rc = 1 ] && grep -q "one cpu only" "$OUT/rtt1.log"; then ok "core_rtt on one cpu: exit 1"
    else bad "core_rtt on one cpu: exit $rc" "$OUT/rtt1.log"; fi
else
    echo "ok - core_rtt runs skipped: one cpu here"
fi
for args in "-c 0,0" "-c 0" "-c 0,x" "-n 0" "-r 1001" "extra"; do
    # shellcheck disable=SC2086
    timeout -k 5 30 "$rtt" $args >"$OUT/rttbad.log" 2>&1
    rc=$?
    if [ $rc = 2 ] && grep -q "core_rtt" "$OUT/rttbad.log"; then ok "core_rtt $args: exit 2"
    else bad "core_rtt $args: exit $rc, want 2" "$OUT/rttbad.log"; fi
done
timeout -k 5 30 "$rtt" -c 0,1000 >"$OUT/rttbad.log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "cpu 1000 is not one" "$OUT/rttbad.log"; then ok "core_rtt -c 0,1000: exit 1"
else bad "core_rtt -c 0,1000: exit $rc, want 1" "$OUT/rttbad.log"; fi

echo "test_compare: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
