#!/usr/bin/env bash
# test_ckpt_faults.sh - training checkpoints under a full disk and a rank killed mid-save.
#
#   bash tests/test_ckpt_faults.sh [BUILD]        (tests/run.sh runs it)
#
# 1. A 2 MiB tmpfs (needs root to mount; skipped, saying so, where it cannot be mounted)
#    holds one checkpoint of the small model, not two: the second save fails with "No
#    space left", the first stays `latest` and whole, training goes on; with --ckpt-fail
#    stop the run ends non-zero with that message; a resume from the tmpfs then works.
# 2. One rank is killed (SIGKILL; weftrun then stops the other) while 2 ranks save a checkpoint every step (a model big
#    enough that saving takes a good part of a step); whatever the moment, `latest` then
#    names a complete checkpoint that resumes, and a half-written one (.tmp) is ignored.
#    The kill is repeated until it lands inside a save (a .tmp left behind), up to 6 times.
# Ends "test_ckpt_faults.sh: N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 2
B=${1:-build}
PASS=0
FAIL=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_ckpt_faults.XXXXXX")
MNT=$TMP/small
cleanup() {
    umount "$MNT" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
check() {
    if [ "$1" = 0 ]; then PASS=$((PASS + 1)); echo "ok - $2"
    else FAIL=$((FAIL + 1)); echo "FAIL - $2"; fi
}
TRAIN=$B/bin/weft-train
WEFTRUN=$B/bin/weftrun
yes "in the beginning god created the heaven and the earth" | head -c 200000 >"$TMP/text.txt"
SMALL="--data $TMP/text.txt --layers 2 --dim 64 --heads 4 --ctx 32 --lr 1e-3 -b 6 --shard full"

# 1. a full disk
mkdir -p "$MNT"
if mount -t tmpfs -o size=2m tmpfs "$MNT" 2>/dev/null; then
    timeout 120 "$WEFTRUN" -n 2 --timeout 100 "$TRAIN" $SMALL --steps 6 --ckpt-dir "$MNT/ck" \
        --ckpt-every 2 >"$TMP/full.out" 2>&1
    rc=$?
    latest=$(cat "$MNT/ck/latest" 2>/dev/null)
    fails=$(grep -c 'failed, training goes on.*No space left' "$TMP/full.out")
    check "$([ $rc = 0 ] && [ "$latest" = step-00000002 ] && [ "$fails" = 2 ] &&
             grep -q '^step 6 ' "$TMP/full.out" && ! ls -d "$MNT"/ck/.step-* 2>/dev/null &&
             echo 0 || echo 1)" \
        "full disk: saves of steps 4 and 6 fail ($fails \"No space left\"), training goes on to step 6, latest stays $latest, no partial directory left (exit $rc)"
    timeout 120 "$WEFTRUN" -n 2 --timeout 100 "$TRAIN" $SMALL --steps 6 --ckpt-dir "$MNT/ck" \
        --ckpt-every 2 --resume --ckpt-fail stop >"$TMP/stop.out" 2>&1
    rc=$?
    check "$([ $rc != 0 ] && grep -q 'resumed from.*step-00000002' "$TMP/stop.out" &&
             grep -q 'No space left' "$TMP/stop.out" && ! grep -q '^step 5 ' "$TMP/stop.out" &&
             echo 0 || echo 1)" \
        "--ckpt-fail stop: resumes from step-00000002, then the failed save of step 4 ends the run (exit $rc): $(grep -m1 'weft-train: rank' "$TMP/stop.out" | cut -c1-150)"
    umount "$MNT"
else
    echo "skip - cannot mount a tmpfs here (not root?): the full-disk case is not tested"
fi

# 2. a rank killed during a save
BIG="--data $TMP/text.txt --layers 4 --dim 256 --heads 4 --ctx 64 -b 2 --shard full"
CK=$TMP/kill
landed=0
for try in 1 2 3 4 5 6; do
    rm -rf "$CK"
    timeout 120 "$WEFTRUN" -n 2 --timeout 100 "$TRAIN" $BIG --steps 100000 --ckpt-dir "$CK" \
        --ckpt-every 1 --ckpt-keep 2 >"$TMP/kill.out" 2>&1 &
    job=$!
    for _ in $(seq 1 200); do   # until a first checkpoint exists
        [ -f "$CK/latest" ] && break
        sleep 0.05
    done
    sleep "0.$((RANDOM % 9 + 1))"
    pids=($(pgrep -f -- "^$TRAIN .*--ckpt-dir $CK"))   # the ranks, not weftrun
    [ ${#pids[@]} -gt 0 ] && kill -KILL "${pids[$((RANDOM % ${#pids[@]}))]}" 2>/dev/null
    wait $job 2>/dev/null
    if ls -d "$CK"/.step-*.tmp >/dev/null 2>&1; then
        landed=1
        break
    fi
done
latest=$(cat "$CK/latest" 2>/dev/null)
timeout 120 "$WEFTRUN" -n 2 --timeout 100 "$TRAIN" $BIG --steps $(( ${latest#step-} + 1 )) \
    --ckpt-dir "$CK" --resume >"$TMP/res.out" 2>&1
rc=$?
check "$([ -n "$latest" ] && [ $rc = 0 ] && grep -q "resumed from.*$latest" "$TMP/res.out" &&
         echo 0 || echo 1)" \
    "ranks killed $([ $landed = 1 ] && echo "inside a save (a .tmp directory left behind, try $try)" || echo "(no kill landed inside a save in 6 tries)"): $latest resumes (exit $rc)"
check "$([ $landed = 1 ] && echo 0 || echo 1)" "a kill landed inside a save at least once in 6 tries"

echo "test_ckpt_faults.sh: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
