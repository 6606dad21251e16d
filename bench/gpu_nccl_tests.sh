#!/usr/bin/env bash
# gpu_nccl_tests.sh - nccl-tests against NCCL and against weft's shim, side by side, on a
# machine with a GPU (issue 23; the tables go into docs/GPU.md).
#
#   bash bench/gpu_nccl_tests.sh [OUT_DIR]      (from the repository root, after `make`)
#
# Builds ../shared/peers/nccl-tests (unmodified: copied to OUT_DIR/<lib>-src, the copy
# built, with MPI=1 against Debian's Open MPI) twice: against NCCL (CUDA_HOME's nccl.h and
# libnccl.so, i.e. /usr/local/cuda) and against weft (NCCL_HOME=build:
# build/include/nccl.h, build/lib/libnccl.so.2 = libweft_nccl.so). Then runs all_reduce,
# reduce_scatter, all_gather, broadcast and sendrecv with -b 8 -e 1G -f 2 -g 1 under
# mpirun: 1 rank on both; 2, 4 and 8 ranks on the one GPU for weft only (one process per
# rank, NCCL_TESTS_DEVICE=0 so every rank takes device 0: nccl-tests would otherwise give
# rank i device i; NCCL refuses several ranks on one GPU, "Duplicate GPU detected").
# Each run's output is OUT_DIR/<lib>_<test>_<n>.txt; the
# summary OUT_DIR/summary.md has, per run, the exit status, #wrong (the sum of the
# column, which must be 0; "N/A", sendrecv's in-place column, is not a check), the time
# of the smallest non-empty size, and the largest size's algbw and busbw (out of place)
# against the copy bound: the GPU's device-to-device copy rate D (a cudaMemcpy loop,
# bytes copied per second) spread over the fewest bytes the collective must read and
# write on the one GPU, as algbw: all_reduce and sendrecv D/N (N inputs read, N outputs
# written), reduce_scatter, all_gather and broadcast 2D/(N+1).
# SUMMARY_ONLY=1 D2D=GB/s rewrites the summary from the runs already in OUT_DIR.
#
# Environment: CUDA_HOME (default /usr/local/cuda), NCCL_TESTS_SRC (default
# ../shared/peers/nccl-tests), MAX_BYTES (default 1G), RANKS (default "2 4 8"), TESTS,
# GENCODE (default sm_90 + PTX), MPI_HOME (default Debian's Open MPI). For a GPU machine
# without weft's build dependencies: NT_PREBUILT=DIR takes the binaries from DIR/nccl and
# DIR/weft (built elsewhere with MPI=1) instead of building, NCCL_LIB_DIR says where the
# real libnccl.so.2 is (default CUDA_HOME/lib64), MPIRUN names the launcher (default
# mpirun; Open MPI's and MPICH's hydra are both understood).
# Exit status: 0 when every run ended 0 with #wrong 0.
set -u
cd "$(dirname "$0")/.." || exit 2
OUT=${1:-build/gpu_nccl_tests}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
SRC=${NCCL_TESTS_SRC:-../shared/peers/nccl-tests}
MAX_BYTES=${MAX_BYTES:-1G}
RANKS=${RANKS:-2 4 8}
TESTS=${TESTS:-all_reduce reduce_scatter all_gather broadcast sendrecv}
GENCODE=${GENCODE:--gencode=arch=compute_90,code=[sm_90,compute_90]}
MPI_HOME=${MPI_HOME:-/usr/lib/x86_64-linux-gnu/openmpi}
WEFT_HOME=$(pwd)/build
NT_PREBUILT=${NT_PREBUILT:-}
NCCL_LIB_DIR=${NCCL_LIB_DIR:-$CUDA_HOME/lib64}
MPIRUN=${MPIRUN:-mpirun}

die() { echo "gpu_nccl_tests.sh: $*" >&2; exit 2; }
SUMMARY_ONLY=${SUMMARY_ONLY:-0}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || die "cannot create $OUT"

# launch_cmd N VAR=VALUE... -- CMD...: sets LAUNCH to the command line that runs N
# processes on this host with those variables
OMPI=0
launch_cmd() {
    local n=$1
    shift
    if [ "$OMPI" = 1 ]; then
        LAUNCH=("$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np "$n")
    else
        LAUNCH=("$MPIRUN" -n "$n")     # MPICH's hydra
    fi
    while [ "$1" != -- ]; do
        if [ "$OMPI" = 1 ]; then LAUNCH+=(-x "$1"); else LAUNCH+=(-genv "${1%%=*}" "${1#*=}"); fi
        shift
    done
    shift
    LAUNCH+=("$@")
}

# build LIB NCCL_HOME: a copy of nccl-tests built into OUT/LIB
build() {
    local lib=$1 home=$2
    rm -rf "$OUT/$lib-src" && cp -r "$SRC" "$OUT/$lib-src" || return 1
    make -C "$OUT/$lib-src/src" -j"$(nproc)" CUDA_HOME="$CUDA_HOME" NCCL_HOME="$home" \
        MPI=1 MPI_HOME="$MPI_HOME" NVCC_GENCODE="$GENCODE" BUILDDIR="$OUT/$lib" \
        >"$OUT/build_$lib.log" 2>&1
}

if [ "$SUMMARY_ONLY" != 1 ]; then
    [ -n "$NT_PREBUILT" ] || [ -d "$SRC/src" ] || die "no nccl-tests at $SRC"
    [ -e "$WEFT_HOME/lib/libnccl.so.2" ] && [ -e "$WEFT_HOME/include/nccl.h" ] ||
        die "build/lib/libnccl.so.2 missing: run make (with CUDA) first"
    command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 ||
        die "no GPU visible (nvidia-smi -L fails): nothing to run here"
    command -v "$MPIRUN" >/dev/null || die "$MPIRUN missing (Debian: openmpi-bin)"
    "$MPIRUN" --version 2>&1 | grep -q "Open MPI\|OpenRTE" && OMPI=1
    if [ -n "$NT_PREBUILT" ]; then
        for lib in nccl weft; do
            rm -rf "${OUT:?}/$lib" && cp -r "$NT_PREBUILT/$lib" "$OUT/$lib" || die "no $NT_PREBUILT/$lib"
        done
    else
        build nccl "$CUDA_HOME" || die "building nccl-tests against NCCL failed ($OUT/build_nccl.log)"
        build weft "$WEFT_HOME" || die "building nccl-tests against weft failed ($OUT/build_weft.log)"
    fi
    # the copy bound: device-to-device cudaMemcpy of 1 GB (reads + writes 2 GB per copy)
    cat >"$OUT/d2d.cu" <<'CU'
#include <cstdio>
#include <cuda_runtime.h>
int main() {
    size_t n = 1ull << 30; void *a, *b; cudaEvent_t s, e; float ms;
    if (cudaMalloc(&a, n) || cudaMalloc(&b, n)) return 1;
    cudaEventCreate(&s); cudaEventCreate(&e);
    cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(s);
    for (int i = 0; i < 20; i++) cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e); cudaEventSynchronize(e); cudaEventElapsedTime(&ms, s, e);
    printf("%.1f\n", 20.0 * n / (ms / 1e3) / 1e9);   /* GB/s copied (algbw) */
    return 0;
}
CU
    "$CUDA_HOME/bin/nvcc" -O2 -o "$OUT/d2d" "$OUT/d2d.cu" && D2D=$("$OUT/d2d") || D2D="?"
    nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 >"$OUT/gpu.txt"
    echo "$D2D" >"$OUT/d2d.txt"
fi
D2D=${D2D:-$(cat "$OUT/d2d.txt" 2>/dev/null || echo "?")}

STATUS=0
{
    echo "# nccl-tests on $(cat "$OUT/gpu.txt" 2>/dev/null || echo "?")"
    echo
    echo "device-to-device copy (cudaMemcpy, 1 GB): $D2D GB/s (D)"
    echo
    echo "| library | test | ranks | exit | #wrong | smallest size: time (us) | algbw at $MAX_BYTES (GB/s) | busbw (GB/s) | copy bound, algbw (GB/s) | of the bound |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
} >"$OUT/summary.md"

# one LIB TEST NRANKS: runs it (unless SUMMARY_ONLY), appends its row
one() {
    local lib=$1 t=$2 n=$3 f="$OUT/$1_$2_$3.txt" ld rc=0
    if [ "$SUMMARY_ONLY" != 1 ]; then
        ld=$([ "$lib" = weft ] && echo "$WEFT_HOME/lib" || echo "$NCCL_LIB_DIR")
        launch_cmd "$n" LD_LIBRARY_PATH="$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            NCCL_TESTS_DEVICE=0 -- "$OUT/$lib/${t}_perf" -b 8 -e "$MAX_BYTES" -f 2 -g 1
        timeout "${RUN_TIMEOUT:-600}" "${LAUNCH[@]}" >"$f" 2>&1
        rc=$?
        echo "$rc" >"$f.rc"
    else
        rc=$(cat "$f.rc" 2>/dev/null || echo "?")
    fi
    # data rows: size count type redop root, then time algbw busbw #wrong out of place
    # ($6-$9) and in place ($10-$13); a row that is not a number counts as wrong, except
    # N/A (no check made)
    local wrong small big bound
    wrong=$(awk '/^ +[0-9]+ +[0-9]+ / { w += ($9 ~ /^[0-9]+$/ ? $9 : ($9 == "N/A" ? 0 : 1));
                                         w += ($13 ~ /^[0-9]+$/ ? $13 : ($13 == "N/A" ? 0 : 1)); n++ }
                 END { print n ? w : "no rows" }' "$f")
    small=$(awk '/^ +[0-9]+ +[0-9]+ / && $1 > 0 { print $1 " B: " $6; exit }' "$f")
    big=$(awk '/^ +[0-9]+ +[0-9]+ / { a = $7; b = $8 } END { print a " | " b }' "$f")
    bound=$(awk -v d="$D2D" -v n="$n" -v t="$t" -v a="${big%% *}" 'BEGIN {
        if (d !~ /^[0-9.]+$/ || a !~ /^[0-9.e+]+$/) { print "? | ?"; exit }
        b = (t == "all_reduce" || t == "sendrecv") ? d / n : 2 * d / (n + 1)
        printf "%.0f | %.0f%%\n", b, 100 * a / b }')
    [ "$rc" = 0 ] && [ "$wrong" = 0 ] || STATUS=1
    echo "| $lib | $t | $n | $rc | $wrong | ${small:-?} | ${big:-? | ?} | $bound |" >>"$OUT/summary.md"
}
for t in $TESTS; do
    one nccl "$t" 1
    one weft "$t" 1
    for n in $RANKS; do one weft "$t" "$n"; done
done
cat "$OUT/summary.md"
exit $STATUS
