#!/usr/bin/env bash
# gpu_train_vs_llmc.sh - weft-train --device cuda against llm.c's train_gpt2cu, side by side
# on one GPU: GPT-2 124M (12 layers, 768 channels, 12 heads, T=1024), bf16, one rank.
#
#   bench/gpu_train_vs_llmc.sh [--batches "64 32 16 8 4"] [--steps 30] [--warmup 5]
#                              [--out docs/perf/gpu_train] [--peak-tflops X] [--no-build]
#   bench/gpu_train_vs_llmc.sh --make-data FILE NTOKENS SEED   (the token shard only)
#   bench/gpu_train_vs_llmc.sh --parse LLMC_LOG WEFT_JSON B T WARMUP PEAK_TFLOPS
#                              (the figures from two finished runs; what the test checks)
#
# What it does: copies llm.c (LLMC_SRC, default ../shared/peers/llm.c or shared/peers/llm.c
# beside the repository; never modified) to OUT/work/llm.c and builds train_gpt2cu there
# (NO_MULTI_GPU=1 USE_CUDNN=0 GPU_COMPUTE_CAPABILITY=90, linking NVML through a scratch
# libnvidia-ml.so link where only the .so.1 exists, as shared/peers/README.md says);
# builds weft-train (make all); writes one token shard in the llm.c format both read (magic
# 20240520, version 1, uint16 tokens: seeded uniform tokens < 50257, no download) and runs
# both from a fresh GPT-2 init (llm.c: -e d12; weft: --layers 12 --dim 768 --heads 12 --ctx
# 1024) on that shard with the same B, T, lr 3e-4, no weight decay, clip 1.0, no
# validation or sampling. The batch is the largest of --batches at which both runs finish.
# --no-build uses the build/bin/weft-train that is there (built elsewhere: a GPU machine
# without weft's build dependencies) instead of running `make all`.
#
# Figures: each side's tokens/s is B*T / (median step time) over the steps after --warmup
# (llm.c: its "N ms" per step; weft: the sum of ms fwd/bwd/opt/data of its --json lines);
# MFU for both by one formula, 6*N + 12*L*C*T FLOPs per token (N = 124475904 parameters,
# the padded vocabulary's, as llm.c counts) over PEAK (bf16 dense Tensor Core TFLOP/s:
# --peak-tflops, else from the GPU's name: H100 SXM / H200 989.4, H100 PCIe 756); llm.c's own
# MFU column is shown as it printed it. weft's step split is forward, backward, optimizer
# (communication: none at one rank). Results: OUT/gpu_train_vs_llmc.md and the raw logs.
# Exit status: 0; 1 when a build or every batch fails; 2 on bad usage.
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD

die() { echo "gpu_train_vs_llmc: $*" >&2; exit 1; }

# --make-data FILE NTOKENS SEED: the llm.c token shard (256 int32 header + uint16 tokens)
make_data() {
    python3 - "$1" "$2" "$3" <<'PY' || return 1
import random, struct, sys
path, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if n < 2 or n > 2**31 - 1:
    sys.exit("gpu_train_vs_llmc: NTOKENS must be 2..2^31-1")
rng = random.Random(seed)
header = [20240520, 1, n] + [0] * 253
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *header))
    chunk = 1 << 20
    for s in range(0, n, chunk):
        k = min(chunk, n - s)
        f.write(struct.pack("<%dH" % k, *(rng.randrange(50257) for _ in range(k))))
PY
}

# --parse LLMC_LOG WEFT_JSON B T WARMUP PEAK: prints "key value" lines
parse() {
    python3 - "$@" <<'PY'
import json, re, statistics, sys
llmc_log, weft_json, B, T, warm, peak = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
N, L, C = 124475904, 12, 768
fpt = 6 * N + 12 * L * C * T
def fail(msg):
    sys.exit("gpu_train_vs_llmc: " + msg)
# llm.c: "step    3/30 | loss ... | 123.45 ms | 45.6% bf16 MFU | 123456 tok/s"
ms, own = [], []
for line in open(llmc_log, errors="replace"):
    m = re.match(r"step\s+(\d+)/\d+ \|.*\| ([0-9.]+) ms \| (-?[0-9.]+)% bf16 MFU", line)
    if m and int(m.group(1)) > warm:
        ms.append(float(m.group(2)))
        own.append(float(m.group(3)))
if not ms:
    fail("%s: no llm.c step lines after the first %d" % (llmc_log, warm))
rows = []
for line in open(weft_json, errors="replace"):
    line = line.strip()
    if not line.startswith("{"):
        continue
    try:
        r = json.loads(line)
    except ValueError:
        fail("%s: a line is not JSON: %s" % (weft_json, line[:60]))
    if "step" in r and "ms_fwd" in r and r["step"] > warm:
        rows.append(r)
if not rows:
    fail("%s: no weft-train step lines after the first %d" % (weft_json, warm))
med = statistics.median
l_ms = med(ms)
w_ms = med([r["ms_fwd"] + r["ms_bwd"] + r["ms_opt"] + r["ms_data"] for r in rows])
l_tok, w_tok = B * T / (l_ms / 1e3), B * T / (w_ms / 1e3)
print("steps_timed llmc %d weft %d" % (len(ms), len(rows)))
print("llmc_ms %.2f" % l_ms)
print("llmc_tok_s %.0f" % l_tok)
print("llmc_mfu_pct %.1f" % (100 * l_tok * fpt / (peak * 1e12)))
print("llmc_own_mfu_pct %.1f" % med(own))
print("weft_ms %.2f" % w_ms)
print("weft_tok_s %.0f" % w_tok)
print("weft_mfu_pct %.1f" % (100 * w_tok * fpt / (peak * 1e12)))
for k in ("ms_fwd", "ms_bwd", "ms_opt", "ms_data"):
    print("weft_%s %.2f" % (k, med([r[k] for r in rows])))
print("weft_ms_comm 0.00")
print("ratio %.3f" % (w_tok / l_tok))
PY
}

case "${1:-}" in
--make-data) [ $# = 4 ] || { echo "usage: $0 --make-data FILE NTOKENS SEED" >&2; exit 2; }
             make_data "$2" "$3" "$4"; exit $? ;;
--parse)     [ $# = 7 ] || { echo "usage: $0 --parse LLMC_LOG WEFT_JSON B T WARMUP PEAK" >&2
                             exit 2; }
             shift; parse "$@"; exit $? ;;
esac

BATCHES="64 32 16 8 4" STEPS=30 WARMUP=5 OUT=docs/perf/gpu_train PEAK="" BUILD_WEFT=1
while [ $# -gt 0 ]; do
    case "$1" in
    --batches) BATCHES=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --peak-tflops) PEAK=$2; shift 2 ;;
    --no-build) BUILD_WEFT=0; shift ;;
    *) echo "gpu_train_vs_llmc: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
[ "$STEPS" -gt "$WARMUP" ] 2>/dev/null || { echo "gpu_train_vs_llmc: --steps must exceed --warmup" >&2; exit 2; }
T=1024
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this needs a GPU machine"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
if [ -z "$PEAK" ]; then
    case "$GPU" in
    *H100*PCIe*) PEAK=756 ;;
    *H100*|*H200*) PEAK=989.4 ;;
    *) die "no bf16 peak known for '$GPU': pass --peak-tflops" ;;
    esac
fi
LLMC_SRC=${LLMC_SRC:-}
for c in "$LLMC_SRC" ../shared/peers/llm.c shared/peers/llm.c; do
    [ -n "$c" ] && [ -f "$c/train_gpt2.cu" ] && { LLMC_SRC=$c; break; }
done
[ -f "$LLMC_SRC/train_gpt2.cu" ] || die "llm.c not found (set LLMC_SRC)"
mkdir -p "$OUT/raw" "$OUT/work" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
W=$OUT/work

echo "gpu_train_vs_llmc: building llm.c's train_gpt2cu in $W/llm.c"
rm -rf "$W/llm.c" && cp -r "$LLMC_SRC" "$W/llm.c" || die "cannot copy $LLMC_SRC"
NVML_FLAGS=""
if ! ldconfig -p | grep -q 'libnvidia-ml\.so '; then
    so1=$(ldconfig -p | awk '/libnvidia-ml\.so\.1 /{print $NF; exit}')
    [ -n "$so1" ] && mkdir -p "$W/nvml" && ln -sf "$so1" "$W/nvml/libnvidia-ml.so" &&
        NVML_FLAGS="NVCC_LDFLAGS+=-L$W/nvml"
fi
make -C "$W/llm.c" train_gpt2cu NO_MULTI_GPU=1 USE_CUDNN=0 GPU_COMPUTE_CAPABILITY=90 \
    ${NVML_FLAGS:+"$NVML_FLAGS"} >"$OUT/raw/llmc_build.log" 2>&1 ||
    { tail -n 20 "$OUT/raw/llmc_build.log"; die "llm.c build failed"; }
if [ "$BUILD_WEFT" = 1 ]; then
    echo "gpu_train_vs_llmc: building weft-train"
    make -j"$(nproc)" all NVCC="$NVCC" >"$OUT/raw/weft_build.log" 2>&1 ||
        { tail -n 20 "$OUT/raw/weft_build.log"; die "weft build failed"; }
fi
WEFT=$ROOT/build/bin/weft-train
[ -x "$WEFT" ] || die "$WEFT missing (run make, or drop --no-build)"
DATA=$W/tokens.bin
NTOK=$(( (64 * T + 1) * (STEPS + 2) ))
make_data "$DATA" "$NTOK" 1337 || die "cannot write $DATA"

best=""
for B in $BATCHES; do
    echo "gpu_train_vs_llmc: B=$B T=$T, $STEPS steps each"
    (cd "$W/llm.c" && ./train_gpt2cu -i "$DATA" -j "$DATA" -e d12 -b "$B" -t "$T" -x "$STEPS" \
        -l 3e-4 -c 0.0 -v 1000000 -s 1000000 -n 0 -h 0) >"$OUT/raw/llmc_b$B.log" 2>&1 ||
        { echo "  llm.c failed at B=$B (tail of its log below)"; tail -n 3 "$OUT/raw/llmc_b$B.log"; continue; }
    "$WEFT" --device cuda --dtype bf16 --data "$DATA" --val "$DATA" --layers 12 --dim 768 \
        --heads 12 --ctx 1024 --vocab 50257 -b "$B" -t "$T" --steps "$STEPS" --lr 3e-4 \
        --wd 0 --clip 1.0 --no-shuffle --json "$OUT/raw/weft_b$B.json" \
        >"$OUT/raw/weft_b$B.log" 2>&1 ||
        { echo "  weft-train failed at B=$B"; tail -n 3 "$OUT/raw/weft_b$B.log"; continue; }
    best=$B
    break
done
[ -n "$best" ] || die "no batch of '$BATCHES' ran on both"
B=$best
FIG=$(parse "$OUT/raw/llmc_b$B.log" "$OUT/raw/weft_b$B.json" "$B" "$T" "$WARMUP" "$PEAK") ||
    die "cannot read the runs' figures"
get() { awk -v k="$1" '$1 == k { print $2 }' <<<"$FIG"; }
{
    echo "# weft-train --device cuda vs llm.c train_gpt2cu ($(date -u +%Y-%m-%d))"
    echo
    echo "GPU: $GPU (bf16 peak $PEAK TFLOP/s). GPT-2 124M, B=$B T=$T, bf16, 1 rank, $STEPS steps,"
    echo "the first $WARMUP untimed; medians. MFU = tokens/s x (6N + 12LCT) / peak for both."
    echo
    echo "| | tokens/s | ms/step | MFU | llm.c's own MFU |"
    echo "|---|---:|---:|---:|---:|"
    echo "| llm.c train_gpt2cu | $(get llmc_tok_s) | $(get llmc_ms) | $(get llmc_mfu_pct)% | $(get llmc_own_mfu_pct)% |"
    echo "| weft-train --device cuda | $(get weft_tok_s) | $(get weft_ms) | $(get weft_mfu_pct)% | |"
    echo
    echo "weft / llm.c tokens/s: **$(get ratio)x**"
    echo
    echo "weft's step split (ms): forward $(get weft_ms_fwd), backward $(get weft_ms_bwd),"
    echo "optimizer $(get weft_ms_opt), data $(get weft_ms_data), communication $(get weft_ms_comm) (one rank)."
    echo
    echo "Raw logs: raw/llmc_b$B.log, raw/weft_b$B.json."
} | tee "$OUT/gpu_train_vs_llmc.md"
