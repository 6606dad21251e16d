#!/bin/bash
# sim_scale.sh - weft-sim's scale predictions for docs/SCALE.md: one 8-GPU host with
# NVLink-class links, and 512 such hosts with one 400 Gb/s NIC per GPU, every registered
# algorithm that runs all-reduce, 8 B to 8 GB; then the plots.
#
#   bench/sim_scale.sh [OUTDIR]      (default docs/scale; needs build/bin/weft-sim, gnuplot)
#   SIM_SCALE_PLOT_ONLY=1 bench/sim_scale.sh   redraws the plots and markdown tables (and
#                                              docs/SCALE.md's copies) from the tables
#
# The cluster parameters are stated in the model files it writes (OUTDIR/*.model) and in
# docs/SCALE.md. Nothing here is measured: weft-sim replays weft's schedules.
# The 4096-rank sweep uses 2M frames and 8M of staging so that a 2 MB ring step is one
# frame (the replay's cost grows with frames, about 0.3-1 us each), and steps by
# SIM_SCALE_FACTOR (8: 8 B, 64 B, ... 8 GB); a row takes 30-60 s and 3-4 GB here.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/scale}
FACTOR=${SIM_SCALE_FACTOR:-8}
SIM=${WEFT_SIM:-build/bin/weft-sim}
mkdir -p "$OUT"

if [ -z "${SIM_SCALE_PLOT_ONLY:-}" ]; then
    [ -x "$SIM" ] || { echo "sim_scale.sh: $SIM not built (make tools)" >&2; exit 2; }
    cat > "$OUT/nvlink8.model" <<'M'
# One host, 8 GPUs, NVLink-class links: NVLink4's 900 GB/s is 450 GB/s per direction per GPU
hosts = 1
ranks_per_host = 8
nics = 8
intra_bw = 450
intra_lat = 2.5
inter_bw = 50
inter_lat = 4
# GPU reductions and copies run at HBM speed (~3.35 TB/s on H100; a reduction reads 2, writes 1)
reduce_bw = 1000
copy_bw = 1500
M
    sed -e 's/^hosts = 1$/hosts = 512/' \
        -e 's/^# One host.*/# 512 hosts x 8 GPUs, NVLink-class inside a host, one 400 Gb\/s (50 GB\/s) NIC per GPU/' \
        "$OUT/nvlink8.model" > "$OUT/512x8.model"
    # a NIC send costs a work request, a doorbell, a completion and a proxy step: 1 us of
    # the NIC's time per frame (what makes a one-shot exchange with 4095 peers slow)
    printf 'inter_overhead = 1\nchunk = 2M\nstaging = 8M\n' >> "$OUT/512x8.model"
    "$SIM" --model "$OUT/nvlink8.model" -c allreduce -b 8 -e 8G -f 2 --inplace 0 \
        > "$OUT/nvlink8.txt"
    "$SIM" --model "$OUT/512x8.model" -c allreduce -b 8 -e 8G -f "$FACTOR" --inplace 0 -v \
        > "$OUT/512x8.txt" 2> "$OUT/512x8.log"
fi

# One data file per (table, algorithm): size and busbw of the out-of-place column.
split() {   # table prefix
    awk -v pre="$2" '/^# Algorithm:/ { f = pre "_" $3 ".dat"; printf "" > f; next }
                     /^ *[0-9]/ && f && $8 != "N/A" { print $1, $6, $8 > f }' "$1"
}
split "$OUT/nvlink8.txt" "$OUT/nvlink8"
split "$OUT/512x8.txt" "$OUT/512x8"

# Markdown tables for docs/SCALE.md: per size, each algorithm's time and busbw (every
# row of the 512 x 8 sweep, every 4th size of the 8-rank one).
mdtable() {   # table every-nth
    awk -v every="$2" '
        /^# Algorithm:/ { a = $3; if (!(a in seen)) { seen[a] = 1; order[++na] = a }; k = 0; next }
        /^ *[0-9]/ && a { k++; if ((k - 1) % every) next
                          if (!($1 in have)) { have[$1] = 1; sizes[++ns] = $1 }
                          t[a, $1] = $6; b[a, $1] = $8 }
        END {
            printf "| size |"; for (i = 1; i <= na; i++) printf " %s time (us) | %s busbw (GB/s) |", order[i], order[i]
            printf "\n| ---: |"; for (i = 1; i <= na; i++) printf " ---: | ---: |"; printf "\n"
            for (j = 1; j <= ns; j++) {
                s = sizes[j]; printf "| %s |", s
                for (i = 1; i <= na; i++) printf " %s | %s |", (order[i], s) in t ? t[order[i], s] : "", (order[i], s) in b ? b[order[i], s] : ""
                printf "\n"
            }
        }' "$1"
}
mdtable "$OUT/nvlink8.txt" 4 > "$OUT/nvlink8.md"
mdtable "$OUT/512x8.txt" 1 > "$OUT/512x8.md"
# docs/SCALE.md shows them between <!-- table: scale/NAME.md --> and <!-- end table -->
if [ "$OUT" = docs/scale ] && [ -f docs/SCALE.md ]; then
    python3 - <<'P'
import re
p = "docs/SCALE.md"
s = open(p).read()
s = re.sub(r"<!-- table: (\S+) -->\n.*?\n<!-- end table -->",
           lambda m: "<!-- table: %s -->\n%s\n<!-- end table -->"
           % (m.group(1), open("docs/" + m.group(1)).read().strip()), s, flags=re.S)
open(p, "w").write(s)
P
fi

command -v gnuplot > /dev/null || { echo "sim_scale.sh: no gnuplot (apt-get install gnuplot-nox)" >&2; exit 2; }
plot() {    # name title refs-gnuplot-commands [time]: busbw, or with "time" the time (log)
    local name=$1 title=$2 refs=$3 col=3 out=$1 ylabel='busbw (GB/s)' cmd="" f
    if [ "${4:-}" = time ]; then
        col=2 out=${name}_time ylabel='time (us, log scale)'
        refs="set logscale y 10"
    fi
    for f in "$OUT/${name}"_*.dat; do
        [ -s "$f" ] || continue
        local algo=${f##*/${name}_}; algo=${algo%.dat}
        cmd+="${cmd:+, }'$f' using 1:$col with linespoints title 'weft-sim: $algo'"
    done
    gnuplot <<G
set terminal png size 900,560 noenhanced
set output '$OUT/$out.png'
set title '$title'
set logscale x 2
set format x '%.0b%B'
set xlabel 'size (bytes, all-reduce, float)'
set ylabel '$ylabel'
set key left center
set grid
$refs
plot $cmd
G
}
plot nvlink8 "8 GPUs, one host, NVLink-class (450 GB/s/dir, 2.5 us): predicted all-reduce busbw" \
    "set arrow from graph 0, first 367 to graph 1, first 367 nohead dt 2 lc rgb 'black'
set label 'NCCL published, 8xH100 ring ~365-370' at graph 0.02, first 380
set arrow from graph 0, first 480 to graph 1, first 480 nohead dt 3 lc rgb 'black'
set label 'NCCL published, NVLS ~480' at graph 0.02, first 493
set yrange [0:520]"
plot 512x8 "512 hosts x 8 GPUs (4096 ranks), 400 Gb/s NIC per GPU: predicted all-reduce busbw" \
    "set arrow from graph 0, first 47 to graph 1, first 47 nohead dt 2 lc rgb 'black'
set label 'NCCL published, 46-48 GB/s per NDR NIC (one NIC)' at graph 0.02, first 60
set arrow from graph 0, first 376 to graph 1, first 376 nohead dt 3 lc rgb 'black'
set label 'x 8 NICs per host: ~376 (derived from the per-NIC figure)' at graph 0.02, first 389
set yrange [0:420]"
plot nvlink8 "8 GPUs, one host, NVLink-class: predicted all-reduce time" "" time
plot 512x8 "512 hosts x 8 GPUs (4096 ranks): predicted all-reduce time" "" time
echo "sim_scale.sh: tables and plots in $OUT"
