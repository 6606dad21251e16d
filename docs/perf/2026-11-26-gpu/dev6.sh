#!/bin/bash
# device call 6 (2026-11-26): the 4-rank sharded check with the bf16-reduction tolerance,
# where a GPT-2 124M bf16 step spends its GPU time (ncu, per kernel), and the queue
# (WEFT_CUDA_ASYNC=1) of several processes on one GPU under MPS
cd "$(dirname "$0")/.." || exit 2
R=$PWD
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
rm -rf .dev build; tar xf .devpack/dev.tar.xz || exit 3
export LD_LIBRARY_PATH=$R/.dev/libs:$R/.dev/mpich/lib:/usr/local/cuda/lib64
export PATH=$R/.dev/mpich/bin:$PATH
mkdir -p build && cp -a .dev/build/* build/
el "unpacked: $(nvidia-smi -L)"

TRAIN_BIN=build/bin/weft-train TOL=1e-3 MTOL=1e-3 NR=4 timeout 150 bash tests/test_train_gpu_emu.sh > $OUT/emu4.log 2>&1
el "emu real NR=4 rc=$?"; grep -E 'FAIL|passed' $OUT/emu4.log

NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
M="--device cuda --dtype bf16 --data README.md --layers 12 --dim 768 --heads 12 --ctx 1024 -t 1024 -b 8"
timeout 150 $NCU --clock-control none --metrics gpu__time_duration.sum --csv \
    build/bin/weft-train $M --steps 1 > $OUT/ncu.csv 2> $OUT/ncu.err
el "ncu rc=$? ($NCU)"
python3 - $OUT/ncu.csv <<'PY' > $OUT/ncu_sum.txt
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h = rows[0]; ki, mi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
t = collections.defaultdict(float); n = collections.Counter()
for r in rows[1:]:
    v = float(r[mi].replace(",", "")); v *= {"ns": 1e-6, "nsecond": 1e-6, "usecond": 1e-3, "msecond": 1}.get(r[ui], 1)
    k = r[ki].split("(")[0][:70]; t[k] += v; n[k] += 1
tot = sum(t.values())
print("total %.2f ms over %d kernels" % (tot, sum(n.values())))
for k, v in sorted(t.items(), key=lambda x: -x[1])[:40]:
    print("%9.3f ms %5.1f%% %5d  %s" % (v, 100 * v / tot, n[k], k))
PY
head -n 30 $OUT/ncu_sum.txt

export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog
if timeout 20 nvidia-cuda-mps-control -d; then
  el "MPS started"
  M="--device cuda --dtype bf16 --data README.md --layers 12 --dim 768 --heads 12 --ctx 1024 -t 1024 --steps 8"
  for a in 0 1; do
    WEFT_CUDA_ASYNC=$a timeout 100 build/bin/weftrun -n 2 build/bin/weft-train $M -b 4 --shard full > $OUT/mps_full_async$a.log 2>&1
    el "MPS 124M 2 ranks full ASYNC=$a rc=$?"; grep "^step 8 " $OUT/mps_full_async$a.log | cut -c1-220
  done
  for a in 0 1; do
    timeout 100 mpiexec -n 2 -genv NCCL_TESTS_DEVICE 0 -genv WEFT_CUDA_ASYNC $a \
      -genv LD_LIBRARY_PATH $R/build/lib:$LD_LIBRARY_PATH .dev/nt/weft/all_reduce_perf -b 8 -e 1G -f 8 -g 1 > $OUT/mps_ar_async$a.txt 2>&1
    el "MPS all_reduce 2 ranks ASYNC=$a rc=$?"; grep -E "^ +[0-9]+ +[0-9]+ |Avg bus|wrong" $OUT/mps_ar_async$a.txt | cut -c1-120
  done
  echo quit | timeout 20 nvidia-cuda-mps-control; el "MPS stopped"
else
  el "MPS did not start"; ls /tmp/mpslog; cat /tmp/mpslog/* 2>/dev/null | tail -n 5
fi
