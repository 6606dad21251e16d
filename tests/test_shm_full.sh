#!/usr/bin/env bash
# test_shm_full.sh - a /dev/shm too small for the shm rings (a container's default is
# 64 MB; each rank takes WEFT_BUFFSIZE for every other rank of its host): init fails on
# every rank with an error that says so, instead of a SIGBUS at the first store into a
# page the tmpfs cannot give (before 2026-11-27: a rank killed by SIGBUS in init).
#
#   bash tests/test_shm_full.sh [build]
#
# Runs in a mount namespace of its own (unshare -m) with a 6 MB tmpfs on /dev/shm (needs
# root: else skipped, saying so):
#   - 2 ranks at WEFT_BUFFSIZE=4M (8 MB of rings): init fails on both within 10 s, no
#     rank dies of a signal, and one names /dev/shm and WEFT_BUFFSIZE;
#   - the same at WEFT_BUFFSIZE=1M: the all-reduce runs.
set -u
B=${1:-build}
W=$B/bin/weftrun
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-shmfull.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

ok()  { PASS=$((PASS + 1)); echo "ok - $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && sed 's/^/   | /' "$2" | tail -n 12; }

if ! unshare -m sh -c 'mount -t tmpfs -o size=1M tmpfs /dev/shm' 2>/dev/null; then
    echo "skip - cannot mount a tmpfs on /dev/shm in a mount namespace (needs root)"
    echo "test_shm_full.sh: 0 passed, 0 failed"
    exit 0
fi

# job BUFFSIZE: 2 shm ranks in a namespace whose /dev/shm holds 6 MB
job() {
    env WEFT_TRANSPORT=shm WEFT_BUFFSIZE="$1" WEFT_TIMEOUT=10 timeout 60 unshare -m sh -c \
        'mount -t tmpfs -o size=6M tmpfs /dev/shm && exec "$@"' sh \
        "$W" -n 2 "$B/bin/all_reduce_perf" -b 1M -e 1M -n 5 -w 1
}

t0=$(date +%s)
job 4M >"$OUT/full" 2>&1
rc=$?
dt=$(( $(date +%s) - t0 ))
if [ $rc != 0 ] && [ $rc != 124 ] && [ $dt -lt 10 ] && grep -q 'no room in /dev/shm' "$OUT/full" &&
   grep -q 'lower WEFT_BUFFSIZE' "$OUT/full" && ! grep -qi 'signal\|bus error\|SIGBUS' "$OUT/full"; then
    ok "rings larger than /dev/shm: init fails in ${dt}s saying so, no rank killed by a signal"
else
    bad "rings larger than /dev/shm: exit $rc after ${dt}s" "$OUT/full"
fi
job 1M >"$OUT/fits" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q '^ *1048576 ' "$OUT/fits"; then
    ok "WEFT_BUFFSIZE=1M in the same /dev/shm: the all-reduce runs"
else
    bad "WEFT_BUFFSIZE=1M in the same /dev/shm: exit $rc" "$OUT/fits"
fi
echo "test_shm_full.sh: $PASS passed, $FAIL failed"
[ $FAIL = 0 ]
