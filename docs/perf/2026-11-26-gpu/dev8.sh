#!/bin/bash
# device call 8 (2026-11-26): fused attention with batched tile loads and prefetch, bf16
# operands for the linear layers; correctness, determinism, the step's split, and the
# speed against llm.c's train_gpt2cu on the same GPU
cd "$(dirname "$0")/.." || exit 2
R=$PWD
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
rm -rf .dev build; tar xf .devpack/dev.tar.xz || exit 3
export LD_LIBRARY_PATH=$R/.dev/libs:$R/.dev/mpich/lib:/usr/local/cuda/lib64
export PATH=$R/.dev/mpich/bin:$PATH
mkdir -p build && cp -a .dev/build/* build/
el "unpacked: $(nvidia-smi -L)"
timeout 120 build/tests/test_train_gpu > $OUT/train_gpu.log 2>&1; el "test_train_gpu rc=$?"
grep -E 'FAIL|fused|passed|within' $OUT/train_gpu.log | head -12
timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_train_gpu > $OUT/memcheck.log 2>&1
el "memcheck rc=$?"; grep -E 'ERROR SUMMARY|passed' $OUT/memcheck.log
T() { timeout 90 build/bin/weft-train --device cuda --dtype bf16 --data README.md --layers 4 --dim 256 \
        --heads 4 --ctx 128 -b 8 -t 128 --seed 1 --lr 1e-3 --steps 50 "$@"; }
T --save-model /tmp/d1.bin > $OUT/det1.log 2>&1; T --save-model /tmp/d2.bin > $OUT/det2.log 2>&1
cmp /tmp/d1.bin /tmp/d2.bin && el "two bf16 runs: the same model, bit for bit" || el "two bf16 runs differ"
grep -h "^step 50 " $OUT/det1.log | cut -c1-60
M="--device cuda --dtype bf16 --data README.md --layers 12 --dim 768 --heads 12 --ctx 1024 -t 1024 --steps 8"
for a in matmul auto; do
  WEFT_TRAIN_ATTN=$a timeout 90 build/bin/weft-train $M -b 8 > $OUT/s124_$a.log 2>&1; el "124M -b 8 attention $a rc=$?"
  grep -E "^step 8 " $OUT/s124_$a.log | cut -c1-150
done
timeout 100 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    build/bin/weft-train $M -b 8 --steps 1 > $OUT/ncu.csv 2> $OUT/ncu.err
el "ncu rc=$?"
python3 .devpack/ncu_sum.py $OUT/ncu.csv > $OUT/ncu_sum.txt; head -n 22 $OUT/ncu_sum.txt
LLMC_SRC=$R/.dev/peers/llm.c timeout 230 bash bench/gpu_train_vs_llmc.sh --no-build --batches "32" \
    --steps 15 --warmup 5 --out /tmp/gt > $OUT/llmc.log 2>&1
el "llm.c comparison rc=$?"; tail -n 25 $OUT/llmc.log
cp /tmp/gt/gpu_train_vs_llmc.md $OUT/ 2>/dev/null
(cd /tmp/gt/raw 2>/dev/null && tar czf $OUT/llmc_raw.tgz .)
