#!/usr/bin/env bash
# test_train_data.sh - weft-train's checks of its data against the run's shape, and of
# its optimizer settings.
#
#   bash tests/test_train_data.sh [BUILD]        (tests/run.sh runs it)
#
# 1. --val of another kind than --data (text bytes against an llm.c token shard, either
#    way round) is refused at start, naming both files; the same kind trains.
# 2. Data of fewer windows than a step takes (-b x ranks x --accum) trains, with a warning
#    that windows repeat within every step; a larger file gives no warning. The same for
#    the val data against an evaluation's rows.
# 3. --model without -t: the val split is cut for the model's context (maxT 32 here), not
#    --ctx's default of 128 (a 200-byte text was refused as too short to split).
# 4. --beta1 or --beta2 outside [0, 1) is refused at start (--beta2 1 trained to NaN with
#    exit 0: AdamW divides by 1 - beta^step).
# 5. Options that do not fit together (-b 0, --heads not dividing --dim, -t above --ctx)
#    exit 2, before the data is read (they exited 1, some after a data error).
# 6. One process: --param-dtype, --reduce-dtype, --prefetch, --shard, and --ckpt-keep or
#    --ckpt-fail without --ckpt-every, each get a note that they are ignored.
# Every run is bounded by `timeout`. Ends "test_train_data.sh: N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 2
B=${1:-build}
PASS=0
FAIL=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_train_data.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
check() {
    if [ "$1" = 0 ]; then PASS=$((PASS + 1)); echo "ok - $2"
    else FAIL=$((FAIL + 1)); echo "FAIL - $2"; fi
}
TRAIN=$B/bin/weft-train
SMALL=(--layers 2 --dim 64 --heads 4 --ctx 32 --lr 1e-3)
yes "in the beginning god created the heaven and the earth" | head -c 20000 >"$TMP/text.txt"
# an llm.c token shard: a 256-int header (magic 20240520, version 1, count), uint16 tokens
/usr/bin/python3 -c '
import struct, sys
n = 20000
toks = [(i * 7) % 256 for i in range(n)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *toks))
' "$TMP/tokens.bin"

# 1. --val of another kind
timeout 60 "$TRAIN" "${SMALL[@]}" --vocab 256 --data "$TMP/tokens.bin" --val "$TMP/text.txt" \
    --steps 1 -b 2 >"$TMP/k1.out" 2>&1
rc=$?
check "$([ $rc != 0 ] && [ $rc != 124 ] &&
         grep -q "val $TMP/text.txt is text but --data $TMP/tokens.bin is an llm.c shard" \
             "$TMP/k1.out" && ! grep -q '^step 1 ' "$TMP/k1.out" && echo 0 || echo 1)" \
    "text --val with a token-shard --data: refused at start (exit $rc): $(grep -m1 -o 'val .*shards' "$TMP/k1.out")"
timeout 60 "$TRAIN" "${SMALL[@]}" --data "$TMP/text.txt" --val "$TMP/tokens.bin" \
    --steps 1 -b 2 >"$TMP/k2.out" 2>&1
rc=$?
check "$([ $rc != 0 ] && [ $rc != 124 ] &&
         grep -q "is an llm.c shard but --data $TMP/text.txt is text" "$TMP/k2.out" &&
         echo 0 || echo 1)" \
    "token-shard --val with a text --data: refused at start (exit $rc)"
timeout 60 "$TRAIN" "${SMALL[@]}" --data "$TMP/text.txt" --val "$TMP/text.txt" \
    --steps 1 -b 2 >"$TMP/k3.out" 2>&1
rc=$?
check "$([ $rc = 0 ] && grep -q '^step 1 ' "$TMP/k3.out" && echo 0 || echo 1)" \
    "text --val with a text --data trains (exit $rc)"

# 2. fewer windows than a step's rows: 300 bytes, 270 for training = 8 windows of 32
head -c 300 "$TMP/text.txt" >"$TMP/tiny.txt"
timeout 60 "$TRAIN" "${SMALL[@]}" --data "$TMP/tiny.txt" --steps 1 -b 4 --accum 3 \
    --val-every 1 --val-batches 2 >"$TMP/w1.out" 2>&1
rc=$?
check "$([ $rc = 0 ] && grep -q '^step 1 ' "$TMP/w1.out" &&
         grep -q 'has 8 train windows of 32 tokens, fewer than a step.s 12 rows' "$TMP/w1.out" &&
         grep -q 'val data has 1 windows of 32 tokens, fewer than an evaluation.s 8 rows' "$TMP/w1.out" &&
         echo 0 || echo 1)" \
    "8 train windows for a step of 4 x 3 rows: trains, and warns: $(grep -m1 -o 'has 8 train windows.*' "$TMP/w1.out")"
timeout 60 "$TRAIN" "${SMALL[@]}" --data "$TMP/text.txt" --steps 1 -b 4 --accum 3 \
    --val-every 1 --val-batches 2 >"$TMP/w2.out" 2>&1
rc=$?
check "$([ $rc = 0 ] && ! grep -q 'warning' "$TMP/w2.out" && echo 0 || echo 1)" \
    "562 train windows for a step of 12 rows: no warning (exit $rc)"

# 3. --model without -t: the split follows the model's maxT
timeout 60 "$TRAIN" "${SMALL[@]}" --data "$TMP/text.txt" --steps 1 -b 2 \
    --save-model "$TMP/m.bin" >"$TMP/m1.out" 2>&1
head -c 200 "$TMP/text.txt" >"$TMP/short.txt"
timeout 60 "$TRAIN" --model "$TMP/m.bin" --data "$TMP/short.txt" --steps 1 -b 2 \
    >"$TMP/m2.out" 2>&1
rc=$?
check "$([ $rc = 0 ] && grep -q '^step 1 ' "$TMP/m2.out" &&
         grep -q '167 train tokens, 33 val tokens' "$TMP/m2.out" &&
         echo 0 || echo 1)" \
    "--model of maxT 32, no -t, 200 bytes: the val split is cut for T=32 (exit $rc): $(grep -m1 -o '[0-9]* train tokens, [0-9]* val tokens' "$TMP/m2.out")$(grep -m1 -o 'error.*' "$TMP/m2.out")"

# 4. AdamW's betas
bad=""
for a in "--beta2 1" "--beta1 1" "--beta1 1.5"; do
    # shellcheck disable=SC2086
    timeout 60 "$TRAIN" "${SMALL[@]}" --data "$TMP/text.txt" --steps 2 -b 2 $a \
        >"$TMP/beta.out" 2>&1
    rc=$?
    { [ $rc = 2 ] && grep -q 'must be in \[0, 1)' "$TMP/beta.out" &&
      ! grep -q '^step 1 ' "$TMP/beta.out"; } || bad="$bad '$a' (exit $rc)"
done
check "$([ -z "$bad" ] && echo 0 || echo 1)" \
    "--beta1/--beta2 of 1 or more refused at start, exit 2${bad:+: not refused:$bad}"

# 5. options that do not fit together are usage errors (exit 2), said before the data is
#    read (--data names no file here: that error must not come first)
bad=""
while IFS='|' read -r a want; do
    # shellcheck disable=SC2086
    timeout 60 "$TRAIN" "${SMALL[@]}" --data "$TMP/nosuch.txt" --steps 2 -b 2 $a \
        >"$TMP/use.out" 2>&1
    rc=$?
    { [ $rc = 2 ] && grep -q -- "$want" "$TMP/use.out"; } || bad="$bad '$a' (exit $rc)"
done <<'EOF'
-b 0|-b, --accum, --val-batches must be positive
--accum 0|-b, --accum, --val-batches must be positive
--heads 3|channels 64 not divisible by heads 3
--ctx 0|model sizes must be positive
-t 999|-t 999 is above --ctx 32
EOF
check "$([ -z "$bad" ] && echo 0 || echo 1)" \
    "-b 0, --accum 0, --heads 3, --ctx 0, -t above --ctx: exit 2 before the data is read${bad:+: not so:$bad}"

# 6. one process: the sharding options and the checkpoint options without --ckpt-every
#    have no effect, and weft-train says so (they were ignored without a word); none of
#    them given, nothing is said
bad=""
while IFS='|' read -r a want; do
    # shellcheck disable=SC2086
    timeout 60 "$TRAIN" "${SMALL[@]}" --data "$TMP/text.txt" --steps 1 -b 2 $a \
        >"$TMP/one.out" 2>&1
    rc=$?
    if [ -n "$want" ]; then
        { [ $rc = 0 ] && grep -q -- "$want" "$TMP/one.out"; } || bad="$bad '$a' (exit $rc)"
    else
        { [ $rc = 0 ] && ! grep -q -e 'ignored' "$TMP/one.out"; } || bad="$bad '$a' (exit $rc)"
    fi
done <<'EOF'
--param-dtype bf16|--param-dtype, --reduce-dtype and --prefetch have nothing to split
--reduce-dtype bf16|--param-dtype, --reduce-dtype and --prefetch have nothing to split
--prefetch 3|--param-dtype, --reduce-dtype and --prefetch have nothing to split
--shard full|--param-dtype, --reduce-dtype and --prefetch have nothing to split
--ckpt-keep 5|--ckpt-keep and --ckpt-fail apply to checkpoints saved by --ckpt-every
--ckpt-fail stop|--ckpt-keep and --ckpt-fail apply to checkpoints saved by --ckpt-every
--prefetch 1 --ckpt-keep 2|
EOF
check "$([ -z "$bad" ] && echo 0 || echo 1)" \
    "one process: --param-dtype, --reduce-dtype, --prefetch, --shard, and --ckpt-keep/--ckpt-fail without --ckpt-every each get a note that they are ignored; the defaults none${bad:+: not so:$bad}"

echo "test_train_data.sh: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
