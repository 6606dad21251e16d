#!/bin/bash
# device call 10 (2026-11-26): layernorm and GELU outputs written as bf16 where they only
# feed products; correctness, determinism, ncu's split at the real vocabulary, llm.c
cd "$(dirname "$0")/.." || exit 2
R=$PWD
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
rm -rf .dev build; tar xf .devpack/dev.tar.xz || exit 3
export LD_LIBRARY_PATH=$R/.dev/libs:$R/.dev/mpich/lib:/usr/local/cuda/lib64
export PATH=$R/.dev/mpich/bin:$PATH
mkdir -p build && cp -a .dev/build/* build/
el "unpacked: $(nvidia-smi -L)"
timeout 60 build/tests/test_train_gpu > $OUT/train_gpu.log 2>&1; el "test_train_gpu rc=$?"
grep -E 'FAIL|passed|within' $OUT/train_gpu.log | head -6
timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_train_gpu > $OUT/memcheck.log 2>&1
el "memcheck rc=$?"; grep -E 'ERROR SUMMARY' $OUT/memcheck.log
T() { timeout 60 build/bin/weft-train --device cuda --dtype bf16 --data README.md --layers 4 --dim 256 \
        --heads 4 --ctx 128 -b 8 -t 128 --seed 1 --lr 1e-3 --steps 50 "$@"; }
T --save-model /tmp/d1.bin > $OUT/det1.log 2>&1; T --save-model /tmp/d2.bin > $OUT/det2.log 2>&1
cmp /tmp/d1.bin /tmp/d2.bin && el "two bf16 runs: the same model, bit for bit" || el "two bf16 runs differ"
grep -h "^step 50 " $OUT/det1.log | cut -c1-50
LLMC_SRC=$R/.dev/peers/llm.c timeout 120 bash bench/gpu_train_vs_llmc.sh --no-build --batches "32" \
    --steps 20 --warmup 5 --out /tmp/gt > $OUT/llmc.log 2>&1
el "llm.c comparison rc=$?"; tail -n 14 $OUT/llmc.log
cp /tmp/gt/gpu_train_vs_llmc.md $OUT/ 2>/dev/null
(cd /tmp/gt/raw 2>/dev/null && tar czf $OUT/llmc_raw.tgz .)
M="--device cuda --dtype bf16 --data /tmp/gt/work/tokens.bin --layers 12 --dim 768 --heads 12 --ctx 1024 --vocab 50257 -t 1024"
timeout 60 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    build/bin/weft-train $M -b 8 --steps 1 > $OUT/ncu.csv 2> $OUT/ncu.err
el "ncu rc=$?"; python3 .devpack/ncu_sum.py $OUT/ncu.csv > $OUT/ncu_sum.txt; head -n 12 $OUT/ncu_sum.txt
