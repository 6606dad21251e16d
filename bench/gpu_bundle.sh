#!/usr/bin/env bash
# gpu_bundle.sh - packs what the GPU checks need for a GPU machine that has CUDA but none
# of weft's build dependencies (no hwloc, OpenBLAS, UCX or MPI headers and libraries):
# weft's build outputs, the Debian shared libraries they load, MPICH's launcher and
# library, nccl-tests built here twice (against NCCL and against weft's shim), and the
# peers' sources (llm.c is built there by bench/gpu_train_vs_llmc.sh).
#
#   bash bench/gpu_bundle.sh [OUT.tar.xz]     (after `make all tests`, on the CI machine)
#
# On the GPU machine, from the repository root:
#   tar xf OUT.tar.xz && mkdir -p build && cp -a .dev/build/* build/
#   export LD_LIBRARY_PATH=$PWD/.dev/libs:$PWD/.dev/mpich/lib:/usr/local/cuda/lib64
#   export PATH=$PWD/.dev/mpich/bin:$PATH
#   RUN_FILTER='test_cuda|test_nccl_shim' bash tests/run.sh; build/tests/test_train_gpu
#   NT_PREBUILT=$PWD/.dev/nt MPIRUN=mpiexec NCCL_LIB_DIR=<dir of libnccl.so.2> \
#       bash bench/gpu_nccl_tests.sh
#   LLMC_SRC=$PWD/.dev/peers/llm.c bash bench/gpu_train_vs_llmc.sh --no-build
#   # PreMulSum through the shim (each rank's own scalar; #wrong must be 0), all dtypes:
#   for t in all_reduce reduce_scatter reduce; do LD_LIBRARY_PATH=build/lib:$LD_LIBRARY_PATH \
#       .dev/nt/weft/${t}_perf -b 8 -e 64M -f 8 -g 1 -o mulsum -d all; done
#   # grouped sends and receives in NCCL's step order (nccl/p2p_plan.c): gather and
#   # scatter at root 1, all-to-all, 3 ranks on the one GPU (#wrong must be 0):
#   for t in gather scatter alltoall; do mpiexec -n 3 -env NCCL_TESTS_DEVICE 0 \
#       -env LD_LIBRARY_PATH build/lib:$LD_LIBRARY_PATH .dev/nt/weft/${t}_perf \
#       -b 8 -e 16M -f 8 -g 1 -r 1; done
#   # sharded training on the GPU (issue 24 item 3), several ranks on the one GPU:
#   for nr in 2 4; do TRAIN_BIN=build/bin/weft-train TOL=1e-3 MTOL=1e-3 NR=$nr \
#       bash tests/test_train_gpu_emu.sh; done
#   # weft-sim against measurements with a core per rank (issue 21; 16 cores there; the
#   # namespace rows need root and iproute2, else add --no-net to both):
#   bench/sim_calibrate.sh -o $OUT/m16 && bench/sim_check.sh -m $OUT/m16 > $OUT/check16.txt
# (docs/GPU.md, "Measured on an H100", is a run made this way.)
#
# Environment: CUDA_HOME (default /usr/local/cuda), PEERS (default ../shared/peers).
# Writes the bundle's tree to .dev/ (keep it out of git: .git/info/exclude). Exit status
# 0, or 1 with the reason.
set -u
cd "$(dirname "$0")/.." || exit 1
OUTF=${1:-.devpack/dev.tar.xz}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PEERS=${PEERS:-../shared/peers}
LIBDIR=/usr/lib/x86_64-linux-gnu
die() { echo "gpu_bundle.sh: $*" >&2; exit 1; }
[ -e build/lib/libnccl.so.2 ] && [ -x build/tests/test_cuda ] ||
    die "build/ has no CUDA build: run make all tests (with $CUDA_HOME)"
[ -e "$LIBDIR/libmpich.so.12" ] && command -v mpiexec.hydra >/dev/null ||
    die "MPICH missing (Debian: mpich, libmpich-dev; make deps installs them)"
[ -d "$PEERS/nccl-tests/src" ] || die "no nccl-tests at $PEERS"

rm -rf .dev && mkdir -p .dev/build/lib .dev/build/bin .dev/build/tests .dev/libs \
    .dev/mpich/bin .dev/mpich/lib .dev/mpich/include .dev/mpich/real .dev/peers || exit 1
cp -a build/lib/libweft.so* build/lib/libweft_nccl.so build/lib/libnccl.so* .dev/build/lib/ &&
cp -a build/include .dev/build/ &&
cp build/bin/weft-train build/bin/weftrun build/bin/all_reduce_perf build/bin/sendrecv_perf \
    build/bin/weft-sim build/bin/core_rtt .dev/build/bin/ &&
cp build/tests/test_cuda build/tests/test_nccl_shim build/tests/test_train_gpu .dev/build/tests/ ||
    die "copying build outputs failed"
# the Debian libraries weft's binaries and MPICH load (the GPU image has libc and libstdc++)
# (and UCX, which weft opens only when its ucx transport is used)
for f in .dev/build/lib/libweft.so.0 .dev/build/bin/* .dev/build/tests/test_train_gpu \
         "$LIBDIR/libmpich.so.12" "$(command -v mpiexec.hydra)" "$LIBDIR/libucp.so.0"; do
    [ -e "$f" ] && ldd "$f" | awk '/=> \// { print $3 }'
    case $f in *libucp*) [ -e "$f" ] && echo "$f" ;; esac
done | sort -u | grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    while read -r l; do cp -L "$l" .dev/libs/; done
# MPICH: launcher, library, headers (C only: nccl-tests is C++, MPICH's C++ bindings are
# another library)
cp "$(command -v mpiexec.hydra)" "$(command -v hydra_pmi_proxy)" .dev/mpich/bin/ &&
ln -sf mpiexec.hydra .dev/mpich/bin/mpiexec &&
cp -L "$LIBDIR/libmpich.so.12" .dev/mpich/lib/ && ln -sf libmpich.so.12 .dev/mpich/lib/libmpi.so &&
cp /usr/include/x86_64-linux-gnu/mpich/{mpi.h,mpi_proto.h,mpio.h} .dev/mpich/real/ &&
cp .dev/mpich/real/mpi_proto.h .dev/mpich/real/mpio.h .dev/mpich/include/ &&
printf '#define MPICH_SKIP_MPICXX 1\n#include "../real/mpi.h"\n' >.dev/mpich/include/mpi.h ||
    die "copying MPICH failed"
# nccl-tests, twice (a copy each: the peers' tree stays untouched)
for lib in nccl weft; do
    home=$([ "$lib" = weft ] && echo "$PWD/build" || echo "$CUDA_HOME")
    w=$(mktemp -d) && cp -r "$PEERS/nccl-tests" "$w/src" || die "cannot copy nccl-tests"
    make -C "$w/src/src" -j"$(nproc)" CUDA_HOME="$CUDA_HOME" NCCL_HOME="$home" MPI=1 \
        MPI_HOME="$PWD/.dev/mpich" NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
        BUILDDIR="$w/build" >"$w/build.log" 2>&1 || { tail -n 20 "$w/build.log"; die "nccl-tests ($lib) failed to build"; }
    mkdir -p ".dev/nt/$lib" && cp "$w"/build/*_perf ".dev/nt/$lib/" && rm -rf "$w"
done
cp -r "$PEERS/nccl-tests" "$PEERS/llm.c" .dev/peers/ || die "cannot copy the peers"
strip --strip-debug .dev/nt/*/*_perf .dev/build/lib/*.so* .dev/build/bin/* .dev/build/tests/* 2>/dev/null
mkdir -p "$(dirname "$OUTF")" && tar cf - .dev | xz -T0 -3 >"$OUTF" || die "cannot write $OUTF"
ls -la "$OUTF"
