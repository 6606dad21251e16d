#!/bin/bash
# usage: var3.sh BIN ROUNDS NR PROG MIN MAX VARIANT...
B=$1; R=$2; NR=$3; P=$4; MN=$5; MX=$6; shift 6
for r in $(seq 1 $R); do for v in "$@"; do
  e=(); [ "$v" != base ] && IFS=, read -ra e <<< "$v"
  p1=$($B/core_rtt -q -r 3 -n 5000)
  x=$(env "${e[@]}" $B/weftrun -n $NR $B/$P -b $MN -e $MX -f 2 -n 10 -w 2 -c 1 2>&1 | awk '!/^#/ && NF>8 {printf "%s:%s:%s ", $1, $6, $10}')
  p2=$($B/core_rtt -q -r 3 -n 5000)
  echo "$v $p1 $p2 $x"
done; done
