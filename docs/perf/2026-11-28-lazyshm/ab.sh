#!/bin/bash
# Wall time of initonly.c's job (weftrun, shm, WEFT_BUFFSIZE unset) linked against two
# builds, alternating, 3 launches each: N mode variant seconds.
#   docs/perf/2026-11-28-lazyshm/ab.sh /tmp/io_base /tmp/io_new > ab.txt
for n in 16 64; do
  for mode in 0 1; do
    for rep in 1 2 3; do
      for v in base new; do
        bin=$1; [ $v = new ] && bin=$2
        s=$(date +%s.%N)
        WEFT_TRANSPORT=shm timeout 300 build/bin/weftrun -n $n "$bin" $mode >/dev/null 2>&1 || echo "# exit $?"
        echo "$n $mode $v $(echo "$(date +%s.%N) - $s" | bc)"
      done
    done
  done
done
