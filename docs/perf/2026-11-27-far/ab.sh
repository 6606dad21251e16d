#!/bin/bash
# usage: ab.sh TOOL(all_reduce|reduce_scatter|...) MPICOLL ROUNDS LO HI
# Alternating launches, 2 ranks one core each: weft with WEFT_SHM_FAR=0 (the ring, as
# before), weft at its defaults (auto: measured at init), weft with WEFT_ALGO=cma, and
# Open MPI 4.1.4 at its defaults; a core_rtt reading before each round.
cd "$(dirname "$0")/../../.." || exit 2
P=$1 M=$2 R=$3 LO=$4 HI=$5
for r in $(seq "$R"); do
  build/bin/core_rtt | sed 's/^/# /'
  for v in near auto cma; do
    case $v in
      near) e="WEFT_SHM_FAR=0" ;;
      auto) e="WEFT_SHM_FAR=auto" ;;
      cma)  e="WEFT_ALGO=cma" ;;
    esac
    env $e build/bin/weftrun -n 2 --bind-to core build/bin/${P}_perf -b "$LO" -e "$HI" -f 2 -n 40 -w 5 2>&1 |
      grep -E "^\s+[0-9]" | sed "s/^/$v /"
  done
  mpirun --allow-run-as-root -np 2 build/bin/mpi_coll_perf -c "$M" -b "$LO" -e "$HI" -f 2 -n 40 -w 5 2>&1 |
    grep -E "^\s+[0-9]" | sed "s/^/ompi /"
done
