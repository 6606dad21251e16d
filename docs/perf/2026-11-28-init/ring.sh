#!/bin/bash
# 2 ranks, shm, bound: the default 4M rings against 576K (8 ranks' fit in a 64 MB /dev/shm)
cd /work/main
for rep in 1 2 3; do
  for bs in 4M 576K; do
    WEFT_TRANSPORT=shm WEFT_BUFFSIZE=$bs build/bin/weftrun -n 2 --bind-to core build/bin/all_reduce_perf -b 64K -e 64M -f 4 -n 50 -w 5 > /tmp/meas/ar.$bs.$rep 2>&1
  done
done
