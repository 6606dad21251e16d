#!/bin/bash
# device call 5 (2026-11-26): issue 24's checks never run on a GPU (shard/'s device table,
# several ranks sharded on the one GPU for real, the queue, checkpoints and --resume in bf16,
# compute-sanitizer), then issue 23's unit tests again (regression after the shm changes).
cd "$(dirname "$0")/.." || exit 2
R=$PWD
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
rm -rf .dev build; tar xf .devpack/dev.tar.xz || exit 3
export LD_LIBRARY_PATH=$R/.dev/libs:$R/.dev/mpich/lib:/usr/local/cuda/lib64
export PATH=$R/.dev/mpich/bin:$PATH
mkdir -p build && cp -a .dev/build/* build/
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; which python3; } > $OUT/env.txt 2>&1
el "unpacked: $(head -n 1 $OUT/env.txt)"

timeout 120 build/tests/test_train_gpu > $OUT/train_gpu.log 2>&1; el "test_train_gpu rc=$?"
tail -n 4 $OUT/train_gpu.log; grep FAIL $OUT/train_gpu.log | head

{ for nr in 2 4; do
    TRAIN_BIN=build/bin/weft-train TOL=1e-3 MTOL=1e-3 NR=$nr timeout 150 bash tests/test_train_gpu_emu.sh
    el "emu real NR=$nr rc=$?"
  done
  WEFT_CUDA_ASYNC=1 TRAIN_BIN=build/bin/weft-train TOL=1e-3 MTOL=1e-3 NR=2 timeout 150 bash tests/test_train_gpu_emu.sh
  el "emu real NR=2 WEFT_CUDA_ASYNC=1 rc=$?"; } > $OUT/emu.log 2>&1
grep -E '^\[|FAIL|passed' $OUT/emu.log

RUN_TAIL=60 RUN_TIMEOUT=90 RUN_FILTER='test_cuda|test_nccl_shim' bash tests/run.sh > $OUT/unit.log 2>&1
el "unit rc=$?"; grep -E "^(ok|FAIL) |passed," $OUT/unit.log

# bf16 end to end with checkpoints: straight 100 steps against 50 + resumed to 100
T() { timeout 90 build/bin/weft-train --device cuda --dtype bf16 --data README.md --layers 4 --dim 256 \
        --heads 4 --ctx 128 -b 8 -t 128 --seed 1 --lr 1e-3 --val-batches 4 "$@"; }
{ T --steps 100 --ckpt-dir /tmp/ck1 --ckpt-every 50 --val-every 50 --save-model /tmp/str.bin --sample 32
  echo "rc=$?"; T --steps 50 --ckpt-dir /tmp/ck2 --ckpt-every 50; echo "rc=$?"
  T --steps 100 --ckpt-dir /tmp/ck2 --resume --val-every 50 --save-model /tmp/res.bin; echo "rc=$?"
  python3 - /tmp/str.bin /tmp/res.bin <<'PY'
import struct, sys
f = lambda p: (lambda d: struct.unpack("<%df" % ((len(d) - 1024) // 4), d[1024:]))(open(p, "rb").read())
a, b = f(sys.argv[1]), f(sys.argv[2])
print("resumed vs straight: %d vs %d floats, max diff %g of largest %g" % (len(a), len(b),
      max(abs(x - y) for x, y in zip(a, b)), max(abs(x) for x in a)))
PY
} > $OUT/e2e.log 2>&1
el "e2e"; grep -E "^(step (1|50|51|100) |val|resumed|rc=|sample)" $OUT/e2e.log | cut -c1-150

# GPT-2 124M body (V=256 text), global batch 8 x 1024: 1 rank, then 2 ranks on the one GPU
# sharded full, blocking calls and the queue
M="--device cuda --dtype bf16 --data README.md --layers 12 --dim 768 --heads 12 --ctx 1024 -t 1024 --steps 8"
timeout 90 build/bin/weft-train $M -b 8 > $OUT/s124_1.log 2>&1; el "124M 1 rank rc=$?"
for a in 0 1; do
  WEFT_CUDA_ASYNC=$a timeout 100 build/bin/weftrun -n 2 build/bin/weft-train $M -b 4 --shard full > $OUT/s124_full_async$a.log 2>&1
  el "124M 2 ranks full ASYNC=$a rc=$?"
done
grep -h "^step 8 " $OUT/s124_*.log | cut -c1-220

CS=/usr/local/cuda/bin/compute-sanitizer
left=$(( 440 - ($(date +%s) - t0) ))
if [ -x $CS ] && [ $left -gt 30 ]; then
  timeout $left $CS --tool memcheck --error-exitcode 9 build/tests/test_train_gpu > $OUT/sanitizer.log 2>&1
  el "compute-sanitizer memcheck test_train_gpu rc=$? (limit $left s)"; tail -n 6 $OUT/sanitizer.log
else
  el "compute-sanitizer skipped ($CS, $left s left)"
fi
