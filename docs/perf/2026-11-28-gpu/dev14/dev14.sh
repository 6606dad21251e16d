#!/bin/bash
# device call 14 (2026-11-28, session 37): WEFT_CUDA_ASYNC=auto (the queue where no two
# ranks share a GPU), GPUs told apart by PCI address, each process running its own share
# (WEFT_TEST_CUDA_SHARES=each, the several-GPU path, on the one GPU); nccl-tests through
# the queue against blocking calls on this GPU (bench/gpu_nccl_tests.sh); sharded training
# with the queue and blocking calls, with and without MPS.
# Moved into this folder after the run (its cd adjusted to the new depth).
# (Its tar line put --exclude after the names, where GNU tar ignores it: the nccl-tests
# binaries came back too and were deleted here.)
# Needs .devpack/dev.tar.xz (bench/gpu_bundle.sh) carried.
cd "$(dirname "$0")/../../../.." || exit 2
R=$PWD
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( ${BUDGET:-400} - ($(date +%s) - t0) )); }
rm -rf .dev build; tar xf .devpack/dev.tar.xz || exit 3
export LD_LIBRARY_PATH=$R/build/lib:$R/.dev/libs:$R/.dev/mpich/lib:/usr/local/cuda/lib64
export PATH=$R/.dev/mpich/bin:$PATH
mkdir -p build && cp -a .dev/build/* build/
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
  ls /usr/lib/x86_64-linux-gnu/libnccl.so* /usr/local/cuda/lib64/libnccl.so* 2>/dev/null; } > $OUT/env.txt 2>&1
el "unpacked: $(head -n 1 $OUT/env.txt)"
NCCLDIR=/usr/lib/x86_64-linux-gnu; [ -e $NCCLDIR/libnccl.so.2 ] || NCCLDIR=/usr/local/cuda/lib64

# A: unit tests (queue choice, kernels, fetch, stream calls, IPC processes with the queue,
# with each process its own share, the shim)
{ RUN_TAIL=60 RUN_TIMEOUT=90 RUN_FILTER='test_cuda|test_nccl_shim' bash tests/run.sh; echo "rc=$?"; } > $OUT/unit.log 2>&1
el "A unit"; grep -E "^(ok|FAIL) |^rc=|FAIL:" $OUT/unit.log | head -20

# B: nccl-tests, -b 8 -e 1G -f 2: the queue (WEFT_CUDA_ASYNC=1) for every test at 1-8 ranks
# and NCCL at 1; blocking (0) all_reduce and sendrecv at 2, 4, 8 ranks
WEFT_CUDA_ASYNC=1 RUN_TIMEOUT=60 NT_PREBUILT=$R/.dev/nt MPIRUN=mpiexec NCCL_LIB_DIR=$NCCLDIR \
  timeout $(( $(left) - 150 )) bash bench/gpu_nccl_tests.sh /tmp/ntq > /tmp/ntq.log 2>&1
el "B queue rc=$?"; cat /tmp/ntq/summary.md
l=$(left); [ "$l" -gt 130 ] && { WEFT_CUDA_ASYNC=0 RUN_TIMEOUT=60 NT_PREBUILT=$R/.dev/nt MPIRUN=mpiexec \
  NCCL_LIB_DIR=$NCCLDIR TESTS="all_reduce all_gather" RANKS="2 4 8" \
  timeout $(( l - 110 )) bash bench/gpu_nccl_tests.sh /tmp/ntb > /tmp/ntb.log 2>&1
  el "B blocking rc=$?"; grep -E "^\| weft" /tmp/ntb/summary.md; }
(cd /tmp && tar cf - ntq ntb ntq.log ntb.log --exclude='*/nccl' --exclude='*/weft' --exclude='*/d2d' 2>/dev/null | xz -3 > $OUT/nt.tar.xz)

# C: GPT-2 124M body, 2 ranks sharded full on the one GPU: auto (blocking there), the
# queue; then both under MPS (one context for both processes)
M="--device cuda --dtype bf16 --data README.md --layers 12 --dim 768 --heads 12 --ctx 1024 -t 1024 --steps 8"
tr() { l=$(left); [ "$l" -gt 25 ] || { echo "skipped $1: $l s left"; return; }
  WEFT_CUDA_ASYNC=$2 timeout $(( l - 5 < 50 ? l - 5 : 50 )) build/bin/weftrun -n 2 build/bin/weft-train $M -b 4 --shard full > /tmp/tr.log 2>&1
  echo "rc=$? $1: $(grep '^step 8 ' /tmp/tr.log | cut -c1-190)"; }
{ tr "auto" auto; tr "queue" 1
  if timeout 20 nvidia-cuda-mps-control -d; then tr "MPS blocking" 0; tr "MPS queue" 1
    echo quit | timeout 20 nvidia-cuda-mps-control; else echo "no MPS"; fi; } > $OUT/train.log 2>&1
el "C"; cat $OUT/train.log
el end
