#!/bin/bash
# device call 12 (2026-11-26): why sim_check's shm:4 row took over 400 s on 16 cores
# (call 11): the cores' round trips, then all-reduce on 4 and 8 ranks, each launch timed
cd "$(dirname "$0")/.." || exit 2
R=$PWD; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
rm -rf .dev build; tar xf .devpack/dev.tar.xz || exit 3
export LD_LIBRARY_PATH=$R/.dev/libs:$R/.dev/mpich/lib:/usr/local/cuda/lib64
mkdir -p build && cp -a .dev/build/* build/
L=/tmp/l; mkdir -p $L; trap 'tar czf $OUT/logs.tgz -C $L .' EXIT
lscpu | grep -E 'Model name|Socket|Core|Thread|NUMA|L3' > $OUT/lscpu.txt; cat $OUT/lscpu.txt
for c in 0,1 0,8 0,15 2,3; do echo "core_rtt $c: $(timeout 10 build/bin/core_rtt -c $c -q -r 3 -n 5000) ns"; done
for n in 4 8 4; do
  for s in 1M 64M; do
    a=$(date +%s.%N)
    WEFT_ALGO=ring WEFT_TIMEOUT=10 timeout -k 5 20 build/bin/weftrun -n $n --report-bindings build/bin/all_reduce_perf \
        -b $s -e $s -n 20 -w 2 -c 1 > $L/ar$n.$s.log 2>&1; rc=$?
    b=$(date +%s.%N)
    echo "n=$n $s rc=$rc wall=$(awk -v a=$a -v b=$b 'BEGIN{printf "%.1f", b-a}') s: $(awk '$1 ~ /^[0-9]+$/ {print $6 " us, " $8 " GB/s"}' $L/ar$n.$s.log)"
    [ $rc = 0 ] || tail -n 8 $L/ar$n.$s.log
  done
done
grep -h -i bound $L/ar4.1M.log | head -4
el "short runs"
# the full ranges for the model check, 3 launches each
for n in 4 8; do for i in 1 2 3; do
  WEFT_ALGO=ring timeout -k 5 40 build/bin/weftrun -n $n build/bin/all_reduce_perf -b 1M -e 64M -f 2 \
      -n 20 -w 2 -c 1 > $L/full$n.$i.log 2>&1; echo "full n=$n #$i rc=$?"
done; done
el end
