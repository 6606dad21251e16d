#!/bin/bash
# usage: ar.sh COLL(all_reduce|reduce_scatter|all_gather|broadcast) MPICOLL reps lo hi
cd "$(dirname "$0")/../../../.." || exit 2
P=$1 M=$2 R=$3 LO=$4 HI=$5
for r in $(seq $R); do
  build/bin/core_rtt | sed 's/^/# /'
  for v in default cma; do
    a=; [ $v = cma ] && a=cma
    WEFT_ALGO=$a build/bin/weftrun -n 2 --bind-to core build/bin/${P}_perf -b $LO -e $HI -f 2 -n 40 -w 5 2>&1 | grep -E "^\s+[0-9]" | sed "s/^/$v /"
  done
  mpirun --allow-run-as-root -np 2 build/bin/mpi_coll_perf -c $M -b $LO -e $HI -f 2 -n 40 -w 5 2>&1 | grep -E "^\s+[0-9]" | sed "s/^/ompi /"
done
