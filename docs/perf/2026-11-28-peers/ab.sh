#!/bin/bash
# A/B of pingpong.c linked against two builds of libweft.a (BASE and NEW binaries), at
# N ranks, 5 alternating launches each; a launch whose core_rtt reading before or after it
# is above 1.5 x the lowest seen + 20 ns (the vCPUs on cores that share no cache) is
# repeated, up to 5 times. Prints: N variant round-trip-us rtt-before rtt-after tries.
#   docs/perf/2026-11-28-peers/ab.sh /tmp/pp_base /tmp/pp_new 2 32 128 > ab.txt
BASE=$1 NEW=$2
shift 2
low=1000000
rtt() { build/bin/core_rtt -q -r 3 -n 5000; }
far() { awk -v t="$1" -v l="$low" 'BEGIN { exit !(t > 1.5 * l + 20) }'; }
for n in "$@"; do
  for rep in 1 2 3 4 5; do
    for v in base new; do
      bin=$BASE; [ $v = new ] && bin=$NEW
      for try in 1 2 3 4 5; do
        a=$(rtt); low=$(awk -v a="$a" -v l="$low" 'BEGIN { print (a < l ? a : l) }')
        us=$(WEFT_SPIN=2000 WEFT_TRANSPORT=shm timeout 200 build/bin/weftrun -n $n \
             --bind-to core "$bin" 2>&1 | sed -n 's/.*round trip \([0-9.]*\) us.*/\1/p')
        b=$(rtt); low=$(awk -v a="$b" -v l="$low" 'BEGIN { print (a < l ? a : l) }')
        if ! far "$a" && ! far "$b"; then break; fi
      done
      echo "$n $v $us $a $b $try"
    done
  done
done
