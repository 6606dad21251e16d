#!/bin/bash
# Host-side checks of weft on the device machine (16 cores): facts, tests, perf sweeps.
D=.dev; export LD_LIBRARY_PATH=$PWD/$D/lib
exec > >(tee $OUT/host.log) 2>&1
echo "== host"; nproc; lscpu | grep -E 'Model name|Socket|Core|Thread|NUMA|L1d|L2|L3|MHz'; lscpu | grep Flags | tr ' ' '\n' | grep -E 'avx512|avx2|f16c|amx' | tr '\n' ' '; echo; free -g; nvidia-smi -L; uname -r; cat /etc/os-release | head -2
echo "== topo"; $D/bin/weft-topo --ranks 8 2>&1 | head -80
echo "== tests"
t0=$(date +%s)
RUN_TIMEOUT=120 RUN_FILTER='^(test_kernels|test_topo|test_coll|test_fail (mismatch (count|op|coll)|peer_exit|abort))' BUILD=$D bash tests/run.sh > $OUT/tests.log 2>&1; echo "run.sh rc=$?"
for n in 7 8 16; do timeout 200 $D/bin/weftrun -n $n $D/tests/test_coll --quick > $OUT/t.txt 2>&1; echo "test_coll -n $n shm --quick rc=$? $(grep -E 'passed' $OUT/t.txt | tail -1)"; done
WEFT_TRANSPORT=tcp timeout 200 $D/bin/weftrun -n 8 $D/tests/test_coll --quick > $OUT/t.txt 2>&1; echo "test_coll -n 8 tcp --quick rc=$? $(grep -E 'passed' $OUT/t.txt | tail -1)"
rm -f $OUT/t.txt
tail -3 $OUT/tests.log; grep -c '^ok' $OUT/tests.log; grep '^FAIL' $OUT/tests.log; echo "tests took $(( $(date +%s) - t0 )) s"
echo "== perf"
P=$OUT/perf.log
for r in 1 2 3; do for c in all_reduce reduce_scatter all_gather broadcast; do
  b=8; [ $c != all_reduce ] && b=64K
  echo "### $c -n 2 rep $r" >> $P
  timeout 120 $D/bin/weftrun -n 2 $D/bin/${c}_perf -b $b -e 256M -f 2 -n 20 -w 5 >> $P 2>&1
done; done
for n in 4 8; do echo "### all_reduce -n $n" >> $P; timeout 200 $D/bin/weftrun -n $n $D/bin/all_reduce_perf -b 8 -e 256M -f 4 -n 20 -w 5 >> $P 2>&1; done
echo "perf took $(( $(date +%s) - t0 )) s"
grep -E '^###|Host copy|^#  +(268435456|67108864)|^ +(8|268435456) ' $P
