B=/tmp/exp/build/bin
for r in $(seq 1 14); do for v in 0 1; do
 p1=$($B/core_rtt -q -r 3 -n 5000)
 out=$(WEFT_X_NT=$v $B/weftrun -n 2 $B/sendrecv_perf -b 64M -e 64M -n 10 -w 2 -c 1 2>&1)
 p2=$($B/core_rtt -q -r 3 -n 5000)
 t=$(echo "$out" | awk '!/^#/ && NF>8 {print $6; exit}')
 c=$(echo "$out" | grep XCOPY | awk '{printf "%s/%s ", $5, $8}')
 echo "nt=$v $p1 $p2 $t $c"
done; done
