#!/bin/bash
# Knob sweep of the 2-rank (and 8-rank) all-reduce on the device machine's CPU.
D=.dev; P=$OUT/sweep.log
exec > >(tee $OUT/sweep-summary.log) 2>&1
V=("default" "WEFT_ALGO=cma" "WEFT_CHUNK=32768" "WEFT_CHUNK=524288" "WEFT_BUFFSIZE=1048576" "WEFT_BUFFSIZE=16777216 WEFT_CHUNK=1048576" "WEFT_NT_MIN=0" "WEFT_NT_MIN=1048576" "WEFT_SPIN=200000")
t0=$(date +%s)
for r in 1 2 3; do for v in "${V[@]}"; do
  e=(); [ "$v" != default ] && e=($v)
  echo "### n2 $v rep $r" >> $P
  env "${e[@]}" timeout 60 $D/bin/weftrun -n 2 $D/bin/all_reduce_perf -b 1M -e 256M -f 4 -n 10 -w 3 -B 10 >> $P 2>&1
done; done
for v in default "WEFT_ALGO=cma" "WEFT_CHUNK=32768"; do e=(); [ "$v" != default ] && e=($v)
  echo "### n2 sendrecv $v" >> $P; env "${e[@]}" timeout 60 $D/bin/weftrun -n 2 $D/bin/sendrecv_perf -b 1M -e 256M -f 4 -n 10 -w 3 -B 10 >> $P 2>&1
done
for r in 1 2; do for v in default "WEFT_ALGO=cma" "WEFT_CHUNK=32768" "WEFT_NT_MIN=0"; do e=(); [ "$v" != default ] && e=($v)
  echo "### n8 $v rep $r" >> $P; env "${e[@]}" timeout 90 $D/bin/weftrun -n 8 $D/bin/all_reduce_perf -b 8 -e 256M -f 16 -n 10 -w 3 -B 0 >> $P 2>&1
done; done
echo "sweep took $(( $(date +%s) - t0 )) s"
awk '/^###/{h=$0; next} /^ +[0-9]+ +[0-9]+ +float/{if ($1==1048576||$1==16777216||$1==268435456||$1==8) printf "%-60s %10s %9s %9s\n", h, $1, $6, $10}' $P
