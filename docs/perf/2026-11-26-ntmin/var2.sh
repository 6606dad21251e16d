#!/bin/bash
# usage: var2.sh ROUNDS NR PROG MIN MAX VARIANT...
cd /work/main; B=build/bin; R=$1; NR=$2; P=$3; MN=$4; MX=$5; shift 5
for r in $(seq 1 $R); do for v in "$@"; do
  e=(); [ "$v" != base ] && IFS=, read -ra e <<< "$v"
  p1=$(/tmp/probe/pp)
  x=$(env "${e[@]}" $B/weftrun -n $NR $B/$P -b $MN -e $MX -f 2 -n 10 -w 2 -c 1 2>&1 | awk '!/^#/ && NF>8 {printf "%s:%s:%s ", $1, $6, $10}')
  p2=$(/tmp/probe/pp)
  echo "$v $p1 $p2 $x"
done; done
