#!/bin/bash
# device call 7 (2026-11-26): the fused attention and the fixed-order sums on the GPU:
# test_train_gpu (multi-tile attention against a double reference, bit-equal reruns),
# compute-sanitizer memcheck and racecheck, two identical bf16 runs, 124M bf16 throughput
# fused against cuBLAS attention, ncu's split of a step, and the sharded runs (NR=2)
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
grep -E 'FAIL|fused|passed' $OUT/train_gpu.log | head -20
CS=/usr/local/cuda/bin/compute-sanitizer
timeout 100 $CS --tool memcheck --error-exitcode 9 build/tests/test_train_gpu > $OUT/memcheck.log 2>&1
el "memcheck rc=$?"; grep -E 'ERROR SUMMARY|passed' $OUT/memcheck.log
timeout 150 $CS --tool racecheck --error-exitcode 9 build/tests/test_train_gpu > $OUT/racecheck.log 2>&1
el "racecheck rc=$?"; grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|passed|hazard' $OUT/racecheck.log | head -5

T() { timeout 90 build/bin/weft-train --device cuda --dtype bf16 --data README.md --layers 4 --dim 256 \
        --heads 4 --ctx 128 -b 8 -t 128 --seed 1 --lr 1e-3 --steps 50 "$@"; }
T --save-model /tmp/d1.bin > $OUT/det1.log 2>&1; T --save-model /tmp/d2.bin > $OUT/det2.log 2>&1
cmp /tmp/d1.bin /tmp/d2.bin && el "two bf16 runs: the same model, bit for bit" || el "two bf16 runs differ"
grep -h "^step 50 " $OUT/det1.log $OUT/det2.log | cut -c1-60

M="--device cuda --dtype bf16 --data README.md --layers 12 --dim 768 --heads 12 --ctx 1024 -t 1024 --steps 8"
for a in matmul auto; do
  WEFT_TRAIN_ATTN=$a timeout 90 build/bin/weft-train $M -b 8 > $OUT/s124_$a.log 2>&1; el "124M -b 8 attention $a rc=$?"
  grep -E "attention|^step 8 " $OUT/s124_$a.log | cut -c1-200
done
WEFT_TRAIN_ATTN=auto timeout 90 build/bin/weft-train $M -b 32 > $OUT/s124_auto_b32.log 2>&1; el "124M -b 32 fused rc=$?"
grep -E "^step 8 " $OUT/s124_auto_b32.log | cut -c1-200

NCU=/usr/local/cuda/bin/ncu
timeout 100 $NCU --clock-control none --metrics gpu__time_duration.sum --csv \
    build/bin/weft-train $M -b 8 --steps 1 > $OUT/ncu.csv 2> $OUT/ncu.err
el "ncu rc=$?"
python3 - $OUT/ncu.csv <<'PY' > $OUT/ncu_sum.txt
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h = rows[0]; ki, mi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
t = collections.defaultdict(float); n = collections.Counter()
for r in rows[1:]:
    v = float(r[mi].replace(",", "")); v *= {"ns": 1e-6, "nsecond": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1, "ms": 1}.get(r[ui], 1)
    k = r[ki].split("(")[0][:70]; t[k] += v; n[k] += 1
tot = sum(t.values())
print("total %.2f ms over %d kernels" % (tot, sum(n.values())))
for k, v in sorted(t.items(), key=lambda x: -x[1])[:40]:
    print("%9.3f ms %5.1f%% %5d  %s" % (v, 100 * v / tot, n[k], k))
PY
head -n 24 $OUT/ncu_sum.txt
TRAIN_BIN=build/bin/weft-train TOL=1e-3 MTOL=1e-3 NR=2 timeout 100 bash tests/test_train_gpu_emu.sh > $OUT/emu2.log 2>&1
el "emu real NR=2 rc=$?"; grep -E 'FAIL|passed' $OUT/emu2.log
