#!/usr/bin/env bash
# test_ckpt_faults.sh - training checkpoints under a full disk and a rank killed mid-save.
#
#   bash tests/test_ckpt_faults.sh [BUILD]        (tests/run.sh runs it)
#
# 1. A 2 MiB tmpfs (needs root to mount; skipped, saying so, where it cannot be mounted)
#    holds one checkpoint of the small model, not two: the second save fails with "No
#    space left", the first stays `latest` and whole, training goes on; with --ckpt-fail
#    stop the run ends non-zero with that message; a resume from the tmpfs then works.
# 2. Rank 1 of 2 is killed (SIGKILL) in the middle of a save, its file written and the
#    checkpoint incomplete (the WEFT_TEST_CKPT_KILL fault point): `latest` stays on the
#    previous checkpoint, which the next run resumes; the partial one is ignored and
#    replaced when that step is saved again.
# 3. The directory's bookkeeping: --ckpt-keep never prunes the checkpoint `latest` names
#    (a step above it, from a run that crashed before naming it, is left alone) and
#    removes a save's leftover .tmp; a step saved again replaces its copy; a manifest
#    whose text was edited (its data position, also with its format set back to 1) or lost
#    its manifest_hash line is refused;
#    resuming with another -t, shuffled data with another --seed, or another --data, is
#    refused; another --lr goes on with a note; ranks that
#    disagree on --ckpt-every stop at start instead of waiting in a save.
# 4. --ckpt-dir checked at start, --resume appending to --json, bad numbers refused.
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

# 2. a rank killed during a save: rank 1 kills itself (SIGKILL) in the save of step 3,
#    its file written, the checkpoint not complete (WEFT_TEST_CKPT_KILL, ckpt_dir.c)
BIG="--data $TMP/text.txt --layers 4 --dim 256 --heads 4 --ctx 64 -b 2 --shard full"
CK=$TMP/kill
timeout 120 "$WEFTRUN" -n 2 --timeout 100 -x WEFT_TEST_CKPT_KILL=3:1 "$TRAIN" $BIG \
    --steps 10 --ckpt-dir "$CK" --ckpt-every 1 --ckpt-keep 2 >"$TMP/kill.out" 2>&1
rc=$?
latest=$(cat "$CK/latest" 2>/dev/null)
partial=$(ls -d "$CK"/.step-00000003.tmp 2>/dev/null | wc -l)
check "$([ $rc != 0 ] && [ "$latest" = step-00000002 ] && [ "$partial" = 1 ] && echo 0 || echo 1)" \
    "rank 1 killed during the save of step 3: the job fails (exit $rc), latest stays $latest, the partial step 3 is left as .step-00000003.tmp"
timeout 120 "$WEFTRUN" -n 2 --timeout 100 "$TRAIN" $BIG --steps 4 --ckpt-dir "$CK" --resume \
    --ckpt-every 1 >"$TMP/res.out" 2>&1
rc=$?
check "$([ $rc = 0 ] && grep -q 'resumed from.*step-00000002' "$TMP/res.out" &&
         grep -q 'checkpoint .*step-00000004' "$TMP/res.out" && [ "$(cat "$CK/latest")" = step-00000004 ] &&
         ! ls -d "$CK"/.step-*.tmp >/dev/null 2>&1 && echo 0 || echo 1)" \
    "the next run resumes from step-00000002, saves steps 3 and 4 (the partial directory replaced), latest step-00000004 (exit $rc)"

# 3. the directory's bookkeeping, one process unless said
ONE="--data $TMP/text.txt --layers 2 --dim 64 --heads 4 --ctx 32 --lr 1e-3 -b 6"
CK=$TMP/book
timeout 60 "$TRAIN" $ONE --steps 4 --ckpt-dir "$CK" --ckpt-every 2 >"$TMP/b1.out" 2>&1
#    a run that saved step 6 and crashed before `latest` named it, and a save's leftover
cp -r "$CK/step-00000004" "$CK/step-00000006" && mkdir "$CK/.step-00000003.tmp"
timeout 60 "$TRAIN" $ONE --steps 5 --ckpt-dir "$CK" --resume --ckpt-every 1 --ckpt-keep 1 \
    >"$TMP/b2.out" 2>&1
rc=$?
check "$([ $rc = 0 ] && [ "$(cat "$CK/latest")" = step-00000005 ] && [ -d "$CK/step-00000005" ] &&
         [ ! -d "$CK/step-00000004" ] && [ -d "$CK/step-00000006" ] &&
         [ ! -d "$CK/.step-00000003.tmp" ] && echo 0 || echo 1)" \
    "--ckpt-keep 1 with a step-6 above latest: step 5 saved and kept (it is latest), step 4 pruned, step 6 left, the stale .step-00000003.tmp removed (exit $rc; $(ls "$CK" | tr '\n' ' '))"
timeout 60 "$TRAIN" $ONE --steps 6 --ckpt-dir "$CK" --resume --ckpt-every 1 --ckpt-keep 1 \
    >"$TMP/b3.out" 2>&1
rc=$?
check "$([ $rc = 0 ] && grep -q 'resumed from.*step-00000005' "$TMP/b3.out" &&
         [ "$(cat "$CK/latest")" = step-00000006 ] && [ "$(ls -A "$CK" | grep -c step)" = 1 ] &&
         echo 0 || echo 1)" \
    "the next run resumes from step 5 and saves step 6 over the stale copy: only step-00000006 left (exit $rc; $(ls -A "$CK" | tr '\n' ' '))"
MF=$CK/step-00000006/manifest
cp "$MF" "$TMP/manifest.keep"
sed -i 's/^loader_cursor \([0-9]*\)/loader_cursor 1\1/' "$MF"
timeout 60 "$TRAIN" $ONE --steps 7 --ckpt-dir "$CK" --resume >"$TMP/b4.out" 2>&1
rc=$?
check "$([ $rc != 0 ] && ! cmp -s "$MF" "$TMP/manifest.keep" &&
         grep -q 'does not match its manifest_hash' "$TMP/b4.out" && echo 0 || echo 1)" \
    "a manifest whose loader_cursor was edited is refused (exit $rc): $(grep -m1 -o 'checkpoint .*manifest.*' "$TMP/b4.out" | cut -c1-140)"
sed '/^manifest_hash/a loader_cursor 3' "$TMP/manifest.keep" >"$MF"
timeout 60 "$TRAIN" $ONE --steps 7 --ckpt-dir "$CK" --resume >"$TMP/b4b.out" 2>&1
rc=$?
check "$([ $rc != 0 ] && grep -q 'does not match its manifest_hash' "$TMP/b4b.out" && echo 0 || echo 1)" \
    "a manifest with a loader_cursor line added after its manifest_hash is refused (exit $rc)"
sed -e 's/^loader_cursor \([0-9]*\)/loader_cursor 1\1/' -e 's/^weft-checkpoint 2$/weft-checkpoint 1/' \
    "$TMP/manifest.keep" >"$MF"
timeout 60 "$TRAIN" $ONE --steps 7 --ckpt-dir "$CK" --resume >"$TMP/b4c.out" 2>&1
rc=$?
check "$([ $rc != 0 ] && grep -q '^weft-checkpoint 1$' "$MF" &&
         grep -q 'does not match its manifest_hash' "$TMP/b4c.out" && echo 0 || echo 1)" \
    "a manifest whose loader_cursor was edited and whose format was set back to 1 (keeping its manifest_hash line) is refused (exit $rc)"
grep -v '^manifest_hash' "$TMP/manifest.keep" >"$MF"
timeout 60 "$TRAIN" $ONE --steps 7 --ckpt-dir "$CK" --resume >"$TMP/b5.out" 2>&1
rc=$?
check "$([ $rc != 0 ] && grep -q 'manifest_hash line is missing' "$TMP/b5.out" && echo 0 || echo 1)" \
    "a manifest without its manifest_hash line is refused (exit $rc)"
cp "$TMP/manifest.keep" "$MF"
timeout 60 "$TRAIN" $ONE -t 16 --steps 7 --ckpt-dir "$CK" --resume >"$TMP/b6.out" 2>&1
rc=$?
check "$([ $rc != 0 ] && grep -q 'trained with --seq 32, this run has 16' "$TMP/b6.out" && echo 0 || echo 1)" \
    "resuming with another -t is refused (exit $rc)"
timeout 60 "$TRAIN" $ONE --seed 99 --steps 7 --ckpt-dir "$CK" --resume >"$TMP/b7.out" 2>&1
rc=$?
check "$([ $rc != 0 ] && grep -q 'trained with --seed 1337, this run has 99' "$TMP/b7.out" && echo 0 || echo 1)" \
    "resuming shuffled data with another --seed is refused (exit $rc): $(grep -m1 -o 'trained with --seed[^:]*' "$TMP/b7.out")"
#    another data set: the saved position would mean other tokens (and a shuffled order
#    over another window count); before 2026-11-27 it resumed without a word
head -c 190000 "$TMP/text.txt" >"$TMP/text2.txt"
timeout 60 "$TRAIN" ${ONE/text.txt/text2.txt} --steps 7 --ckpt-dir "$CK" --resume \
    >"$TMP/b7b.out" 2>&1
rc=$?
check "$([ $rc != 0 ] && grep -q 'trained on [0-9]* train tokens.*this run has' "$TMP/b7b.out" &&
         ! grep -q '^step 7 ' "$TMP/b7b.out" && echo 0 || echo 1)" \
    "resuming on another --data is refused (exit $rc): $(grep -m1 -o 'trained on [0-9]* train tokens[^:]*' "$TMP/b7b.out")"
timeout 60 "$TRAIN" $ONE --steps 7 --ckpt-dir "$CK" --resume >"$TMP/b8.out" 2>&1
rc=$?
check "$([ $rc = 0 ] && grep -q 'resumed from.*step-00000006' "$TMP/b8.out" &&
         ! grep -q 'note: the checkpoint' "$TMP/b8.out" && echo 0 || echo 1)" \
    "the restored manifest resumes, no note on the schedule (exit $rc)"
#    another learning rate: allowed (a run extended on purpose), and said
timeout 60 "$TRAIN" ${ONE/--lr 1e-3/--lr 5e-3} --steps 8 --ckpt-dir "$CK" --resume \
    >"$TMP/b8b.out" 2>&1
rc=$?
check "$([ $rc = 0 ] && grep -q "note: the checkpoint's run had --schedule constant --lr 0.001" \
         "$TMP/b8b.out" && grep -q '^step 8 .*lr 5.000e-03' "$TMP/b8b.out" && echo 0 || echo 1)" \
    "resuming with another --lr goes on and says so (exit $rc)"
#    2 ranks, --ckpt-every on rank 1 only: refused at start, not a save that waits for ever
t0=$(date +%s)
timeout 60 "$WEFTRUN" -n 2 --timeout 40 sh -c \
    'if [ "$WEFT_RANK" = 1 ]; then exec "$@" --ckpt-every 2; else exec "$@"; fi' sh \
    "$TRAIN" $SMALL --steps 4 --ckpt-dir "$TMP/agree" >"$TMP/b9.out" 2>&1
rc=$?
dt=$(( $(date +%s) - t0 ))
check "$([ $rc != 0 ] && [ $rc != 124 ] && [ $dt -lt 30 ] &&
         grep -q 'ranks disagree on --ckpt-every' "$TMP/b9.out" && ! grep -q '^step 1 ' "$TMP/b9.out" &&
         echo 0 || echo 1)" \
    "--ckpt-every on rank 1 only: the job stops at start in ${dt}s (exit $rc): $(grep -m1 -o 'ranks disagree[^(]*' "$TMP/b9.out")"

# 4. Where checkpoints go is checked at start: missing parents are made; a path under a
# file fails before step 1 (before 2026-11-27: at the first save, the run going on without
# checkpoints). A resumed run appends to its --json log (it truncated it before), and
# numbers that are empty, negative or not finite are refused.
ONE="--data $TMP/text.txt --layers 2 --dim 64 --heads 4 --ctx 32 --lr 1e-3 -b 4"
timeout 120 "$TRAIN" $ONE --steps 4 --ckpt-dir "$TMP/deep/er/ck" --ckpt-every 2 \
    --json "$TMP/log.json" >"$TMP/deep.out" 2>&1
rc=$?
check "$([ $rc = 0 ] && [ "$(cat "$TMP/deep/er/ck/latest" 2>/dev/null)" = step-00000004 ] &&
         echo 0 || echo 1)" "--ckpt-dir with missing parents: made, latest step-00000004 (exit $rc)"
timeout 120 "$TRAIN" $ONE --steps 6 --ckpt-dir "$TMP/deep/er/ck" --ckpt-every 2 --resume \
    --json "$TMP/log.json" >"$TMP/append.out" 2>&1
rc=$?
steps=$(grep -c '"loss"' "$TMP/log.json")
check "$([ $rc = 0 ] && [ "$steps" = 6 ] && echo 0 || echo 1)" \
    "--resume appends to the --json log: $steps step records (want 6: 1-4, then 5-6) (exit $rc)"
timeout 60 "$TRAIN" $ONE --steps 4 --ckpt-dir "$TMP/text.txt/ck" --ckpt-every 2 \
    >"$TMP/badck.out" 2>&1
rc=$?
check "$([ $rc != 0 ] && grep -q 'ckpt-dir.*cannot create' "$TMP/badck.out" &&
         ! grep -q '^step 1 ' "$TMP/badck.out" && echo 0 || echo 1)" \
    "--ckpt-dir under a file: refused before step 1 (exit $rc): $(grep -m1 'ckpt-dir' "$TMP/badck.out" | cut -c1-120)"
bad=""
for a in "--lr=" "--steps=-3" "--lr=nan" "--seed=-1" "--lr=-1e-3" "--ckpt-every="; do
    timeout 20 "$TRAIN" $ONE "${a%%=*}" "${a#*=}" >"$TMP/val.out" 2>&1
    rc=$?
    [ $rc = 2 ] && grep -q "needs a valid value" "$TMP/val.out" || bad="$bad $a(exit $rc)"
done
check "$([ -z "$bad" ] && echo 0 || echo 1)" \
    "empty, negative and non-finite numbers refused (exit 2)${bad:+: not refused:$bad}"

echo "test_ckpt_faults.sh: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
