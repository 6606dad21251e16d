#!/bin/sh
# WEFT_SOCKET_BUFFSIZE=4M (the old fixed buffers) against 0 (kernel autotuning, the new
# default), alternating, 2 ranks in the two namespaces of bench/netns.sh (run `up` first).
# usage: run.sh OUTDIR REPS
out=$1; reps=${2:-3}
B=$(cd "$(dirname "$0")/../../../.." && pwd)/build/bin
for r in $(seq "$reps"); do
  for sb in 4M 0; do
    port=$((20000 + ($$ + r) % 30000)); S=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    for side in 1 0; do
      ns=weftA; [ $side = 1 ] && ns=weftB
      ip netns exec $ns env WEFT_RANK=$side WEFT_WORLD_SIZE=2 WEFT_ADDR=10.77.0.1:$port \
        WEFT_TRANSPORT=tcp WEFT_SECRET=$S WEFT_SOCKET_BUFFSIZE=$sb \
        timeout 300 "$B/all_reduce_perf" -b 16M -e 256M -f 2 -n 10 -w 5 -B 0 \
        > "$out/sb$sb.$r.r$side" 2>&1 &
    done
    wait
  done
done
