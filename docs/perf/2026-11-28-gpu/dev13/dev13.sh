#!/bin/bash
# device call 13 (2026-11-28, session 37): the stream queue (WEFT_CUDA_ASYNC=1) with its
# kernels' work fetched once into device memory, against the queue as it was (every block
# read the work across PCIe from mapped host memory: .devbase/ holds the shim built at
# e959aa3), with the queue's new per-call timing at INFO; then the GPU tests of the code
# changed without a GPU since 2026-11-26 (shim, queue, IPC across pid namespaces).
# Moved into this folder after the run (its cd adjusted to the new depth).
# Needs .devpack/dev.tar.xz (bench/gpu_bundle.sh) and .devbase/ carried.
cd "$(dirname "$0")/../../../.." || exit 2
R=$PWD
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( ${BUDGET:-330} - ($(date +%s) - t0) )); }
rm -rf .dev build; tar xf .devpack/dev.tar.xz || exit 3
# weft's libnccl.so.2 before any other (a CUDA lib64 may hold NCCL's own)
export LD_LIBRARY_PATH=$R/build/lib:$R/.dev/libs:$R/.dev/mpich/lib:/usr/local/cuda/lib64
export PATH=$R/.dev/mpich/bin:$PATH
mkdir -p build && cp -a .dev/build/* build/
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; nproc; } > $OUT/env.txt 2>&1
el "unpacked: $(head -n 1 $OUT/env.txt)"
NT=.dev/nt/weft
rows() { grep -E "^ +[0-9]+ +[0-9]+ +[a-z0-9]+ " "$@" | awk '{ printf "%s %s/%s  ", $1, $6, $10 } END { print "" }'; }
# A: the queue, new against old, 2 and 4 ranks; blocking for reference
ab() {  # lib nranks async label
  timeout 60 mpiexec -n $2 -genv NCCL_TESTS_DEVICE 0 -genv WEFT_CUDA_ASYNC $3 -genv WEFT_DEBUG INFO \
    -genv LD_LIBRARY_PATH $1:$LD_LIBRARY_PATH $NT/all_reduce_perf -b 1M -e 1G -f 8 -g 1 -n 10 -w 3 > $OUT/ab_$4.txt 2>&1
  echo "rc=$? $4: size time(out)/time(in) us: $(rows $OUT/ab_$4.txt)"
  grep -h "cuda queue, " $OUT/ab_$4.txt | head -n 2 | sed 's/.*cuda queue/  queue/'
}
{ ab $R/build/lib 2 1 new2q; ab $R/.devbase 2 1 old2q; ab $R/build/lib 2 0 new2b
  ab $R/build/lib 4 1 new4q; ab $R/.devbase 4 1 old4q; ab $R/build/lib 8 1 new8q; } > $OUT/ab.log 2>&1
el "A done"; cat $OUT/ab.log; cat $OUT/ab_*.txt > $OUT/ab_raw.txt; rm -f $OUT/ab_*.txt

# B: unit tests (kernels, fetch, stream calls, IPC processes, shim), blocking and queue
{ RUN_TAIL=60 RUN_TIMEOUT=90 RUN_FILTER='test_cuda|test_nccl_shim' bash tests/run.sh
  echo "rc=$?"; WEFT_CUDA_ASYNC=1 RUN_TAIL=60 RUN_TIMEOUT=90 RUN_FILTER='test_cuda|test_nccl_shim' bash tests/run.sh
  echo "rc=$? (WEFT_CUDA_ASYNC=1 throughout)"; } > $OUT/unit.log 2>&1
el "B unit"; grep -E "^(ok|FAIL) |^rc=|FAIL:" $OUT/unit.log | head -20

# C: nccl-tests on weft, #wrong, 2/4/8 ranks on the one GPU, queue (and blocking at 4)
{ for a in 1 0; do for n in 2 4 8; do [ $a = 0 ] && [ $n != 4 ] && continue
    for t in all_reduce reduce_scatter all_gather broadcast sendrecv; do
      timeout 40 mpiexec -n $n -genv NCCL_TESTS_DEVICE 0 -genv WEFT_CUDA_ASYNC $a \
        -genv LD_LIBRARY_PATH $R/build/lib:$LD_LIBRARY_PATH $NT/${t}_perf -b 8 -e 64M -f 8 -g 1 -n 3 -w 1
      echo "rc=$? $t n=$n async=$a"; done; done; done; } > $OUT/nt.log 2>&1
el "C nccl-tests"; grep -c "^rc=0" $OUT/nt.log; grep "^rc=[^0]" $OUT/nt.log
awk '/^ +[0-9]+ +[0-9]+ +[a-z0-9]+ +/ { if ($9 != "0" && $9 != "N/A") bad++; if ($13 != "0" && $13 != "N/A") bad++; rows++ }
     END { print rows " result rows, " bad+0 " with #wrong other than 0 or N/A" }' $OUT/nt.log

# D: trainer on the GPU
timeout 90 build/tests/test_train_gpu > $OUT/train_gpu.log 2>&1; el "D test_train_gpu rc=$?"
tail -n 1 $OUT/train_gpu.log; grep FAIL $OUT/train_gpu.log | head -5
# E: 124M body, 2 ranks sharded full on the one GPU: blocking calls and the queue
M="--device cuda --dtype bf16 --data README.md --layers 12 --dim 768 --heads 12 --ctx 1024 -t 1024 --steps 8"
l=$(left); if [ "$l" -gt 70 ]; then
{ for a in 0 1; do WEFT_CUDA_ASYNC=$a timeout 60 build/bin/weftrun -n 2 build/bin/weft-train $M -b 4 --shard full
  echo "rc=$? ASYNC=$a"; done; } > $OUT/s124.log 2>&1; el "E"; grep -E "^step 8 |^rc=" $OUT/s124.log | cut -c1-200; fi
l=$(left); if [ "$l" -gt 40 ]; then
  TRAIN_BIN=build/bin/weft-train TOL=1e-3 MTOL=1e-3 NR=2 WEFT_CUDA_ASYNC=1 timeout $((l - 5)) bash tests/test_train_gpu_emu.sh > $OUT/emu.log 2>&1
  el "F sharded emu NR=2 ASYNC=1 rc=$?"; tail -n 2 $OUT/emu.log; fi
el end
