#!/bin/bash
# device call 11 (2026-11-26, session 26): issue 23's checks added without a GPU (PreMulSum
# through the shim and the CUDA kernel, grouped sends/receives in NCCL's step order, the
# queue's changes), issue 24's sharded check after the checkpoint changes, then issue 21's
# weft-sim calibration and check with a core per rank (16 cores), in what time is left.
cd "$(dirname "$0")/.." || exit 2
R=$PWD
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( ${BUDGET:-520} - ($(date +%s) - t0) )); }
rm -rf .dev build; tar xf .devpack/dev.tar.xz || exit 3
export LD_LIBRARY_PATH=$R/.dev/libs:$R/.dev/mpich/lib:/usr/local/cuda/lib64
export PATH=$R/.dev/mpich/bin:$PATH
mkdir -p build && cp -a .dev/build/* build/
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
  command -v ip; ls /usr/lib/x86_64-linux-gnu/libnccl.so* 2>/dev/null; } > $OUT/env.txt 2>&1
el "unpacked: $(head -n 1 $OUT/env.txt)"

RUN_TAIL=80 RUN_TIMEOUT=90 RUN_FILTER='test_cuda|test_nccl_shim' bash tests/run.sh > $OUT/unit.log 2>&1
el "unit rc=$?"; grep -E "^(ok|FAIL) |passed,|PreMulSum|premul" $OUT/unit.log | head -20
WEFT_CUDA_ASYNC=1 RUN_TAIL=80 RUN_TIMEOUT=90 RUN_FILTER='test_cuda|test_nccl_shim' bash tests/run.sh > $OUT/unit_queue.log 2>&1
el "unit WEFT_CUDA_ASYNC=1 rc=$?"; grep -E "^(ok|FAIL) |passed," $OUT/unit_queue.log | head

NT=.dev/nt/weft
{ for t in all_reduce reduce_scatter reduce; do
    LD_LIBRARY_PATH=build/lib:$LD_LIBRARY_PATH timeout 60 $NT/${t}_perf -b 8 -e 64M -f 8 -g 1 \
        -n 5 -w 2 -o mulsum -d all; echo "rc=$? $t mulsum"
  done
  for t in gather scatter alltoall; do
    timeout 60 mpiexec -n 3 -env NCCL_TESTS_DEVICE 0 -env LD_LIBRARY_PATH build/lib:$LD_LIBRARY_PATH \
        $NT/${t}_perf -b 8 -e 16M -f 8 -g 1 -r 1 -n 5 -w 2; echo "rc=$? $t 3 ranks root 1"
  done; } > $OUT/nt.log 2>&1
el "nccl-tests done"; grep -E "^rc=|Out of bounds|Avg bus|wrong" $OUT/nt.log
awk '/^ +[0-9]+ +[0-9]+ +[a-z0-9]+ +/ { if ($9 != "0" && $9 != "N/A") bad++; if ($13 != "0" && $13 != "N/A") bad++; rows++ }
     END { print rows " result rows, " bad+0 " with #wrong other than 0 or N/A" }' $OUT/nt.log

timeout 90 build/tests/test_train_gpu > $OUT/train_gpu.log 2>&1; el "test_train_gpu rc=$?"
tail -n 2 $OUT/train_gpu.log; grep FAIL $OUT/train_gpu.log | head -5
TRAIN_BIN=build/bin/weft-train TOL=1e-3 MTOL=1e-3 NR=2 timeout 90 bash tests/test_train_gpu_emu.sh > $OUT/emu.log 2>&1
el "sharded emu NR=2 rc=$?"; tail -n 3 $OUT/emu.log

# issue 21: a core per rank. Namespace rows need ip (iproute2) and root.
NN=; command -v ip >/dev/null || NN=--no-net
l=$(left); el "sim: ${l} s left ${NN}"
if [ "$l" -gt 60 ]; then
  timeout $(( l / 3 )) bench/sim_calibrate.sh -o $OUT/m16 -r 3 $NN > $OUT/cal.log 2>&1; el "calibrate rc=$?"
  cat $OUT/m16 2>/dev/null | grep -v '^#' | head -20
  l=$(left)
  [ -s $OUT/m16 ] && [ "$l" -gt 30 ] && { timeout $(( l - 10 )) bench/sim_check.sh -m $OUT/m16 -r 3 $NN > $OUT/check16.txt 2>&1
    el "check rc=$?"; tail -n 30 $OUT/check16.txt; }
fi
el "end"
