#!/usr/bin/env bash
# test_llmc.sh - weft's checkpoints interchange with llm.c.
#
#   bash tests/test_llmc.sh [BUILD]        (tests/run.sh runs it)
#
# 1. 2 ranks train with --shard full and --ckpt-dir; `weft-train --export-model` turns
#    the sharded checkpoint into an llm.c file (under a launcher it is refused: every
#    rank would write that file at once);
# 2. llm.c's own test program (test_gpt2.c from the llm.c peer, compiled here, unmodified)
#    loads that file and compares its forward and backward with a debug state that weft
#    wrote from the same file: logits, loss and all 16 gradient tensors must be OK (its
#    per-step losses are compared with GPT-2 124M's and are not ours to pass);
# 3. a sharded run starts from the llm.c file (--model) and computes the same first loss
#    as one process from it.
# The llm.c peer is looked for in $LLMC_DIR, ../shared/peers/llm.c beside the checkout,
# /work/shared/peers/llm.c; without it the llm.c part is skipped, saying so.
# Ends "test_llmc.sh: N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 2
B=${1:-build}
PASS=0
FAIL=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_llmc.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
check() {
    if [ "$1" = 0 ]; then PASS=$((PASS + 1)); echo "ok - $2"
    else FAIL=$((FAIL + 1)); echo "FAIL - $2"; fi
}
TRAIN=$B/bin/weft-train
RUN="timeout 120 $B/bin/weftrun -n 2 --timeout 100"
yes "in the beginning god created the heaven and the earth" | head -c 60000 >"$TMP/text.txt"
M="--data $TMP/text.txt --layers 2 --dim 64 --heads 4 --ctx 64 --lr 1e-3 --no-shuffle"

$RUN $TRAIN $M -b 4 --steps 4 --shard full --ckpt-dir "$TMP/ck" --ckpt-every 4 \
    >"$TMP/train.out" 2>&1
check $? "2 ranks, --shard full, checkpoint at step 4"
timeout 60 $TRAIN --ckpt-dir "$TMP/ck" --export-model "$TMP/gpt2_124M.bin" >"$TMP/exp.out" 2>&1
rc=$?
head -c 4 "$TMP/gpt2_124M.bin" 2>/dev/null | od -An -tu4 | grep -q 20240326
check $((rc || $?)) "--export-model writes an llm.c checkpoint (magic 20240326): $(tail -1 "$TMP/exp.out")"
# in a Slurm batch script's own process (SLURM_PROCID and SLURM_NTASKS, no step): one
# process, the conversion runs
env SLURM_JOB_ID=77 SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_NNODES=1 \
    timeout 60 $TRAIN --ckpt-dir "$TMP/ck" --export-model "$TMP/batch.bin" >"$TMP/exp3.out" 2>&1
rc=$?
check "$([ $rc = 0 ] && cmp -s "$TMP/batch.bin" "$TMP/gpt2_124M.bin" && echo 0 || echo 1)" \
    "--export-model in a Slurm batch script's process (no step) writes the same file (exit $rc)"
# under a launcher every rank would write that file at once: refused, nothing written
$RUN $TRAIN --ckpt-dir "$TMP/ck" --export-model "$TMP/two_ranks.bin" >"$TMP/exp2.out" 2>&1
rc=$?
check "$([ $rc != 0 ] && [ ! -e "$TMP/two_ranks.bin" ] && [ ! -e "$TMP/two_ranks.bin.tmp" ] &&
         grep -q 'export-model is a conversion for one process' "$TMP/exp2.out" && echo 0 || echo 1)" \
    "--export-model under weftrun -n 2 is refused, nothing written (exit $rc): $(grep -m1 -o 'export-model is a conversion[^:]*' "$TMP/exp2.out")"

# a sharded run from the llm.c file: the same first loss as one process from it
first() { grep -m1 '^step 1 ' "$1" | sed 's/.*loss \([0-9.]*\).*/\1/'; }
timeout 60 $TRAIN $M -b 8 --steps 1 --model "$TMP/gpt2_124M.bin" >"$TMP/one.out" 2>&1
$RUN $TRAIN $M -b 4 --steps 1 --shard full --model "$TMP/gpt2_124M.bin" >"$TMP/two.out" 2>&1
l1=$(first "$TMP/one.out")
l2=$(first "$TMP/two.out")
check "$([ -n "$l1" ] && [ "$l1" = "$l2" ] && echo 0 || echo 1)" \
    "a 2-rank --shard full run starts from the exported llm.c file: first loss $l2, one process $l1"

LLMC=""
for d in "${LLMC_DIR:-}" ../shared/peers/llm.c /work/shared/peers/llm.c; do
    if [ -n "$d" ] && [ -f "$d/test_gpt2.c" ] && [ -f "$d/train_gpt2.c" ]; then
        LLMC=$d
        break
    fi
done
if [ -z "$LLMC" ]; then
    echo "skip - llm.c's test_gpt2.c not found (LLMC_DIR, ../shared/peers/llm.c): the llm.c load is not tested here"
else
    cc -O2 -fopenmp -o "$TMP/test_gpt2" "$LLMC/test_gpt2.c" -lm 2>"$TMP/cc.err"
    check $? "llm.c's test_gpt2.c compiles ($LLMC)"
    "$B/tests/test_train" --write-state "$TMP/gpt2_124M_debug_state.bin" "$TMP/gpt2_124M.bin" \
        4 64 3 >/dev/null 2>&1
    check $? "weft writes llm.c's debug state from the exported file"
    (cd "$TMP" && OMP_NUM_THREADS=1 timeout 120 ./test_gpt2) >"$TMP/llmc.out" 2>&1
    logits=$(grep -c '^OK (LOGITS)' "$TMP/llmc.out")
    loss=$(grep -c '^LOSS OK' "$TMP/llmc.out")
    tensors=$(grep -c '^TENSOR OK' "$TMP/llmc.out")
    bad=$(grep -cE 'NOT OK|MISMATCH|Bad ' "$TMP/llmc.out")
    check "$([ "$logits" = 1 ] && [ "$loss" = 1 ] && [ "$tensors" = 16 ] && [ "$bad" = 0 ] && echo 0 || echo 1)" \
        "llm.c's train_gpt2.c loads weft's export: logits, loss and $tensors/16 gradient tensors match weft's ($(grep -m1 '^LOSS' "$TMP/llmc.out"))"
fi
echo "test_llmc.sh: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
