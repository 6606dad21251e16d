#!/usr/bin/env bash
# test_gpu_bench.sh - bench/gpu_train_vs_llmc.sh without a GPU: its token shard, its figures
# from canned llm.c and weft-train runs, and its refusals.
#
#   bash tests/test_gpu_bench.sh [BUILD]
#
# The shard must be an llm.c token file (header magic 20240520, version 1, the count; uint16
# tokens) that weft-train reads; the parser must take the median step time after the warmup
# from llm.c's step lines and weft's --json lines and give tokens/s, MFU and their ratio;
# logs without step lines, bad JSON and bad options must fail with a message. Where no GPU
# is visible the full run must stop at once saying so. Ends "N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 2
B=${1:-${BUILD:-build}}
S=bench/gpu_train_vs_llmc.sh
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-gpubench.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
ok()  { PASS=$((PASS + 1)); echo "ok - $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && tail -n 10 "$2" | sed 's/^/   | /'; }

# 1. the shard: 1024-byte header, 2 bytes a token, read by weft-train as an llm.c shard
if bash $S --make-data "$OUT/t.bin" 5000 1 >"$OUT/mk.log" 2>&1 &&
   [ "$(stat -c %s "$OUT/t.bin")" = $((1024 + 2 * 5000)) ] &&
   [ "$(od -An -t d4 -N 12 "$OUT/t.bin" | tr -s ' ')" = " 20240520 1 5000" ]; then
    ok "make-data writes the llm.c header and 5000 tokens"
else
    bad "make-data" "$OUT/mk.log"
fi
if timeout 60 "$B/bin/weft-train" --data "$OUT/t.bin" --steps 0 --layers 1 --dim 32 \
        --heads 2 --ctx 16 >"$OUT/rd.log" 2>&1 && grep -q "llm.c shard" "$OUT/rd.log"; then
    ok "weft-train reads the shard"
else
    bad "weft-train reads the shard" "$OUT/rd.log"
fi
bash $S --make-data "$OUT/t2.bin" 1 1 >"$OUT/mk2.log" 2>&1 && bad "1 token accepted" ||
    ok "a shard of 1 token refused"

# 2. the figures: steps 1..4, warmup 1 -> medians of steps 2..4
cat >"$OUT/llmc.log" <<'L'
num_parameters: 124475904 => bytes: 248951808
step    1/4 | loss 11.0 (+nanz)| norm 1.0 (+nanz)| lr 3.00e-04 | 500.00 ms | 1.0% bf16 MFU | 8192 tok/s
step    2/4 | loss 10.9 (+nanz)| norm 1.0 (+nanz)| lr 3.00e-04 | 100.00 ms | 40.0% bf16 MFU | 40960 tok/s
step    3/4 | loss 10.8 (+nanz)| norm 1.0 (+nanz)| lr 3.00e-04 | 120.00 ms | 30.0% bf16 MFU | 34133 tok/s
step    4/4 | loss 10.7 (+nanz)| norm 1.0 (+nanz)| lr 3.00e-04 | 110.00 ms | 35.0% bf16 MFU | 37236 tok/s
L
: >"$OUT/weft.json"
for r in "1 300 1 1 1" "2 20 30 4 1" "3 25 25 4 1" "4 15 30 5 10"; do
    set -- $r
    echo "{\"step\": $1, \"loss\": 10.0, \"tokens_per_s\": 1.0, \"ms_fwd\": $2, \"ms_bwd\": $3, \"ms_opt\": $4, \"ms_data\": $5}" >>"$OUT/weft.json"
done
echo '{"step": 4, "val_loss": 10.0, "val_batches": 8}' >>"$OUT/weft.json"
if bash $S --parse "$OUT/llmc.log" "$OUT/weft.json" 4 1024 1 989.4 >"$OUT/fig" 2>&1; then
    v() { awk -v k="$1" '$1 == k { print $2 }' "$OUT/fig"; }
    # llm.c: median 110 ms -> 4096 / 0.110 = 37236 tok/s; weft: steps sum to 55, 55, 60
    # -> 55 ms -> 74473 tok/s; MFU with 6*124475904 + 12*12*768*1024 FLOPs per token
    mfu=$(awk 'BEGIN { printf "%.1f", 100 * 37236.36 * (6 * 124475904 + 12 * 12 * 768 * 1024) / 989.4e12 }')
    if [ "$(v llmc_ms)" = 110.00 ] && [ "$(v llmc_tok_s)" = 37236 ] && [ "$(v weft_ms)" = 55.00 ] &&
       [ "$(v weft_tok_s)" = 74473 ] && [ "$(v ratio)" = 2.000 ] && [ "$(v llmc_mfu_pct)" = "$mfu" ] &&
       [ "$(v llmc_own_mfu_pct)" = 35.0 ] && [ "$(v weft_ms_fwd)" = 20.00 ] &&
       [ "$(v weft_ms_bwd)" = 30.00 ] && [ "$(v weft_ms_opt)" = 4.00 ]; then
        ok "figures: medians after warmup, tokens/s, MFU $mfu%, ratio 2.000, step split"
    else
        bad "figures" "$OUT/fig"
    fi
else
    bad "parse" "$OUT/fig"
fi

# 3. refusals
grep -v '^step' "$OUT/llmc.log" >"$OUT/empty.log"
bash $S --parse "$OUT/empty.log" "$OUT/weft.json" 4 1024 1 989.4 >"$OUT/e1" 2>&1 &&
    bad "llm.c log without steps accepted" || { grep -q "no llm.c step lines" "$OUT/e1" &&
    ok "llm.c log without step lines refused" || bad "message" "$OUT/e1"; }
echo '{"step": 5, "ms_fwd": ' >>"$OUT/weft.json"
bash $S --parse "$OUT/llmc.log" "$OUT/weft.json" 4 1024 1 989.4 >"$OUT/e2" 2>&1 &&
    bad "bad JSON accepted" || { grep -q "not JSON" "$OUT/e2" && ok "bad JSON refused" ||
    bad "message" "$OUT/e2"; }
bash $S --bogus >"$OUT/e3" 2>&1; [ $? = 2 ] && ok "unknown option: exit 2" || bad "unknown option" "$OUT/e3"
bash $S --steps 3 --warmup 5 >"$OUT/e4" 2>&1; [ $? = 2 ] && ok "steps <= warmup: exit 2" ||
    bad "steps <= warmup" "$OUT/e4"
if ! command -v nvidia-smi >/dev/null; then
    timeout 30 bash $S --out "$OUT/run" >"$OUT/e5" 2>&1
    [ $? = 1 ] && grep -q "needs a GPU machine" "$OUT/e5" && ok "no GPU: stops at once" ||
        bad "no GPU" "$OUT/e5"
fi
echo "test_gpu_bench.sh: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
