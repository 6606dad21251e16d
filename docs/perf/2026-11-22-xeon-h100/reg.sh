#!/bin/bash
# Registered buffers on the device machine: tests, then ring (-R 0) against registered (-R 1).
D=.dev; export LD_LIBRARY_PATH=$PWD/$D/lib
exec > >(tee $OUT/reg-summary.log) 2>&1
t0=$(date +%s)
bash tests/test_reg.sh $D
for n in 8 16; do WEFT_REG_MIN=1 WEFT_DIRECT_MAX=0 timeout 200 $D/bin/weftrun -n $n $D/tests/test_coll --quick --reg all --colls allreduce,reduce_scatter,allgather > $OUT/t.txt 2>&1; echo "test_coll -n $n --reg all rc=$? $(grep passed $OUT/t.txt | tail -1)"; done; rm -f $OUT/t.txt
echo "tests took $(( $(date +%s) - t0 )) s"
P=$OUT/reg.log
for r in 1 2 3; do for R in 0 1; do echo "### all_reduce -n 2 R$R rep $r" >> $P
  timeout 120 $D/bin/weftrun -n 2 $D/bin/all_reduce_perf -b 64M -e 256M -f 2 -n 10 -w 5 -R $R >> $P 2>&1; done; done
for c in reduce_scatter all_gather; do for R in 0 1; do echo "### $c -n 2 R$R" >> $P
  timeout 120 $D/bin/weftrun -n 2 $D/bin/${c}_perf -b 128M -e 256M -f 2 -n 10 -w 5 -R $R >> $P 2>&1; done; done
for R in 0 1; do echo "### all_reduce -n 8 R$R" >> $P
  timeout 120 $D/bin/weftrun -n 8 $D/bin/all_reduce_perf -b 64M -e 256M -f 4 -n 5 -w 2 -R $R >> $P 2>&1; done
echo "all took $(( $(date +%s) - t0 )) s"
awk '/^###/{h=$0; next} /^ +[0-9]+ +[0-9]+ +float/{printf "%-34s %10s %9s %9s\n", h, $1, $6, $10} /^#  +[0-9]+ /{printf "%-34s %10s bound %s %s\n", h, $2, $4, $5}' $P
