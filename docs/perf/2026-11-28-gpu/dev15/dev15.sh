#!/bin/bash
# device call 15 (2026-11-28, session 37), after a review: the queue's setup in two steps
# (rank 0's WEFT_CUDA_ASYNC counts, then every rank's resources), 64-bit GPU keys, the
# default back to 0 (weft-train: auto): the GPU tests again; ranks set differently; where
# a small queued call's time goes (the queue's INFO timing line per rank, nccl-tests of
# 8 B to 64 KB only), 2 and 8 processes on the one GPU, all_reduce and broadcast (325 us
# at 8 B with 8 processes in dev14), against blocking calls; then the sharded trainer on
# the GPU (weft-train asks shard/ for late stream failures, after syncing its
# collectives' stream, every step and before checkpoints).
# Needs .devpack/dev.tar.xz (bench/gpu_bundle.sh) carried.
cd "$(dirname "$0")/../../../.." || exit 2
R=$PWD
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( ${BUDGET:-200} - ($(date +%s) - t0) )); }
rm -rf .dev build; tar xf .devpack/dev.tar.xz || exit 3
export LD_LIBRARY_PATH=$R/build/lib:$R/.dev/libs:$R/.dev/mpich/lib:/usr/local/cuda/lib64
export PATH=$R/.dev/mpich/bin:$PATH
mkdir -p build && cp -a .dev/build/* build/
nvidia-smi -L > $OUT/env.txt 2>&1
el "unpacked: $(head -n 1 $OUT/env.txt)"
{ RUN_TAIL=60 RUN_TIMEOUT=90 RUN_FILTER='test_cuda|test_nccl_shim' bash tests/run.sh; echo "rc=$?"; } > $OUT/unit.log 2>&1
el "unit"; grep -E "^(ok|FAIL) |^rc=|FAIL:" $OUT/unit.log | head -20
NT=.dev/nt/weft
# rank 0 asks for the queue, rank 1 for none: one path for both (rank 0's)
timeout 40 mpiexec -genv NCCL_TESTS_DEVICE 0 -genv WEFT_DEBUG INFO -n 1 -env WEFT_CUDA_ASYNC 1 \
  $NT/all_reduce_perf -b 8 -e 1M -f 8 -g 1 : -n 1 -env WEFT_CUDA_ASYNC 0 $NT/all_reduce_perf \
  -b 8 -e 1M -f 8 -g 1 > $OUT/mixed.txt 2>&1
el "mixed settings rc=$?: $(grep -c 'cuda queue, ' $OUT/mixed.txt) queue lines, #wrong: $(awk '/^ +[0-9]+ +[0-9]+ +[a-z0-9]+ / { w += $9 + $13 } END { print w + 0 }' $OUT/mixed.txt)"
small() {  # test nranks async
  timeout 40 mpiexec -n $2 -genv NCCL_TESTS_DEVICE 0 -genv WEFT_CUDA_ASYNC $3 -genv WEFT_DEBUG INFO \
    $NT/$1_perf -b 8 -e 64K -f 4 -g 1 -n 50 -w 10 > /tmp/s.txt 2>&1
  echo "rc=$? $1 n=$2 async=$3: size time(out)/time(in) us: $(grep -E '^ +[0-9]+ +[0-9]+ +[a-z0-9]+ ' /tmp/s.txt |
    awk '{ printf "%s %s/%s  ", $1, $6, $10 }')"
  grep -h "cuda queue, " /tmp/s.txt | sed 's/.*\[\([0-9]*\)\].*cuda queue/  rank \1: queue/'
  cat /tmp/s.txt >> $OUT/small_raw.txt
}
{ small all_reduce 2 1; small all_reduce 2 0; small all_reduce 8 1; small all_reduce 8 0
  small broadcast 8 1; small broadcast 8 0; } > $OUT/small.log 2>&1
el "small calls"; cat $OUT/small.log
l=$(left); [ "$l" -gt 30 ] && { for a in unset 1; do
  if [ $a = unset ]; then (unset WEFT_CUDA_ASYNC; TRAIN_BIN=build/bin/weft-train TOL=1e-3 MTOL=1e-3 NR=2 timeout $(( l / 2 )) bash tests/test_train_gpu_emu.sh)
  else TRAIN_BIN=build/bin/weft-train TOL=1e-3 MTOL=1e-3 NR=2 WEFT_CUDA_ASYNC=$a timeout $(( l / 2 )) bash tests/test_train_gpu_emu.sh; fi
  echo "rc=$? WEFT_CUDA_ASYNC=$a"; done > $OUT/emu.log 2>&1; el "sharded"; grep -E "^rc=|passed" $OUT/emu.log; }
el end
