#!/bin/bash
# 5 alternating launches of weft's broadcast at 8-256 B with WEFT_ROOT_CHECK=auto (the
# default: unchecked below 64K) and =1, and Open MPI at its defaults; one line per size:
# rep variant size out-of-place-us in-place-us (ab.txt). Run from the repository root.
for r in 1 2 3 4 5; do
  for v in auto 1 ompi; do
    if [ $v = ompi ]; then
      mpirun --allow-run-as-root -np 2 build/bin/mpi_coll_perf -c broadcast -b 8 -e 256 -f 2 -n 20000 -w 2000 2>&1
    else
      WEFT_ROOT_CHECK=$v WEFT_TRANSPORT=shm build/bin/weftrun -n 2 --bind-to core \
        build/bin/broadcast_perf -b 8 -e 256 -f 2 -n 20000 -w 2000 2>&1
    fi | grep -E "^ +[0-9]" | awk -v v=$v -v r=$r '{print r, v, $1, $6, $10}'
  done
done
