#!/usr/bin/env bash
# test_ib.sh - the ib transport's knobs and setup refusals, on weft's verbs emulator: which
# port WEFT_IB_HCA allows (NCCL's syntax), the HCA the topology places a rank on, bad values refused at init naming the knob, a
# missing verbs library or device named, ranks that disagree on WEFT_IB_QPS_PER_CONN,
# devices that are not InfiniBand or RoCE (EFA, iWARP) skipped, and the INFO line naming
# the provider: each a 2-rank test_rma basic job (a few hundred ms) under timeout. Then
# frame buffers made only for the peers that carry large frames, and sends that still
# complete: crossed large ones, small ones to a rank elsewhere (tests/probe_lazy).
#
#   bash tests/test_ib.sh [build]
set -u
B=${1:-build}
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-ib.XXXXXX")
FABRIC=/weft_ibemu.test_ib.$$
trap 'rm -rf "$OUT"; rm -f "/dev/shm$FABRIC"' EXIT
EMU=$(cd "$B/lib" && pwd)/libweft_ibemu.so

# judge NAME OK(1|0) OUTPUT WHY: counts the check, and shows the output's end when it failed
judge() {
    if [ "$2" = 1 ]; then
        PASS=$((PASS + 1))
        echo "ok - $1"
    else
        FAIL=$((FAIL + 1))
        echo "FAIL - $1 ($4)"
        tail -n 8 "$3" | sed 's/^/   | /'
    fi
}

# case NAME WANT(ok|fail) PATTERN [ENV...]: the job's outcome, and PATTERN in its output;
# RANK1 (a shell line) runs in each rank before test_rma, to give one rank other knobs.
case_() {
    local name=$1 want=$2 pat=$3 rc
    shift 3
    env WEFT_TRANSPORT=ib WEFT_IB_VERBS="$EMU" WEFT_IBEMU_FABRIC=$FABRIC WEFT_TIMEOUT=10 "$@" \
        timeout -k 5 60 "$B/bin/weftrun" -n 2 ${RANK1:+bash -c "$RANK1"' exec "$0" basic'} \
        "$B/tests/test_rma" ${RANK1:-basic} >"$OUT/$name" 2>&1
    rc=$?
    local ok=0
    if { [ "$want" = ok ] && [ $rc = 0 ]; } || { [ "$want" = fail ] && [ $rc != 0 ] &&
        [ $rc != 124 ] && [ $rc != 137 ]; } && grep -q -- "$pat" "$OUT/$name"; then
        ok=1
    fi
    judge "$name" $ok "$OUT/$name" "exit $rc, want $want and '$pat'"
}

case_ "default port, provider named" ok "weftemu0 port 1 .* via weft verbs emulator" \
    WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=NET
case_ "WEFT_IB_HCA=weftemu0:1" ok "passed" WEFT_IB_HCA=weftemu0:1
# The HCA topo/ places each local rank on (WEFT_TOPO_FILE: one with mlx5_0), not the
# verbs list's order (mlx5_1 first); WEFT_IB_HCA still has the last word. (Every GPU
# of the topology visible, whatever the caller's shell narrows: the HCA follows the GPU.)
unset CUDA_VISIBLE_DEVICES
# (the variant without its cuda0: all 4 GPUs indexed by bus, local rank 1 on the
# one near mlx5_0; with cuda0, CUDA's only device, every rank takes that GPU)
TOPO=$PWD/tests/data/topologies/2socket-4gpu-1ib-nocuda.xml
case_ "the HCA the topology chooses, not the first listed" ok \
    "mlx5_0 port 1 .*by the topology (host-bridge" WEFT_IBEMU_DEVICES=mlx5_1,mlx5_0 \
    WEFT_TOPO_FILE="$TOPO" WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=NET
# the same under srun, which gives no local size: this node's entry of
# SLURM_STEP_TASKS_PER_NODE (node 2 of "3,2(x2)": 2 tasks); before 2026-11-27 the ranks
# took the first listed HCA there
RANK1='export SLURM_PROCID=$WEFT_RANK SLURM_STEP_NUM_TASKS=$WEFT_WORLD_SIZE \
SLURM_LOCALID=$WEFT_LOCAL_RANK SLURM_STEP_TASKS_PER_NODE="3,2(x2)" SLURM_NODEID=2 \
SLURM_JOB_ID=77 SLURM_STEP_ID=0 SLURM_NNODES=3; \
unset WEFT_RANK WEFT_WORLD_SIZE WEFT_LOCAL_RANK WEFT_LOCAL_SIZE;' \
    case_ "under srun: the HCA the topology chooses" ok \
    "mlx5_0 port 1 .*nearest local rank 1 of 2 by the topology (host-bridge" \
    WEFT_IBEMU_DEVICES=mlx5_1,mlx5_0 WEFT_TOPO_FILE="$TOPO" WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=NET
# srun --mpi=pmi2: Slurm's pmi2 plugin sets PMI_RANK, PMI_SIZE, PMI_JOBID and PMI_FD but
# no local rank (MPICH's hydra's MPI_LOCALRANKID, Cray's PMI_LOCAL_RANK), and the PMI
# variables win over SLURM_*: the local rank is SLURM_LOCALID (SLURM_PROCID is PMI_RANK),
# so on a DGX-2 with GPUs 0 and 2 the two ranks take the HCAs of their two GPUs' switches;
# before 2026-11-28 both took mlx5_0 (no local rank: the HCA by NUMA node)
DGX2=$PWD/tests/data/topologies/nvidia-dgx2-8ib.xml
SRUN='export SLURM_PROCID=$WEFT_RANK SLURM_STEP_NUM_TASKS=$WEFT_WORLD_SIZE \
SLURM_LOCALID=$WEFT_LOCAL_RANK SLURM_STEP_TASKS_PER_NODE=2 SLURM_NODEID=0 \
SLURM_JOB_ID=78 SLURM_STEP_ID=0 SLURM_NNODES=1;'
# hca_pair NAME: rank 0 on mlx5_0 and rank 1 on mlx5_1, each by its local rank
hca_pair() {
    grep -q "\[0\] .*mlx5_0 port 1 .*nearest local rank 0 of 2 by the topology" "$OUT/$1" &&
        grep -q "\[1\] .*mlx5_1 port 1 .*nearest local rank 1 of 2 by the topology" "$OUT/$1" ||
        { FAIL=$((FAIL + 1)); echo "FAIL - $1: rank 0 on mlx5_0, rank 1 on mlx5_1 wanted";
          grep "port 1 (InfiniBand" "$OUT/$1" | sed 's/^/   | /'; }
}
RANK1="$SRUN"' export PMI_RANK=$WEFT_RANK PMI_SIZE=$WEFT_WORLD_SIZE PMI_JOBID=78.0 PMI_FD=9; \
unset WEFT_RANK WEFT_WORLD_SIZE WEFT_LOCAL_RANK WEFT_LOCAL_SIZE;' CUDA_VISIBLE_DEVICES=0,2 \
    case_ "srun --mpi=pmi2 (PMI_* without a local rank): SLURM_LOCALID's HCA" ok \
    "mlx5_1 port 1 .*nearest local rank 1 of 2 by the topology (pcie-switch" \
    WEFT_IBEMU_DEVICES=mlx5_0,mlx5_1 WEFT_TOPO_FILE="$DGX2" WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=NET
hca_pair "srun --mpi=pmi2 (PMI_* without a local rank): SLURM_LOCALID's HCA"
# the same with SLURM_* only (the Slurm entry), and under Cray's PMI (PMI_LOCAL_RANK and
# PMI_LOCAL_SIZE, no SLURM_*)
RANK1="$SRUN"' unset WEFT_RANK WEFT_WORLD_SIZE WEFT_LOCAL_RANK WEFT_LOCAL_SIZE;' \
CUDA_VISIBLE_DEVICES=0,2 case_ "srun (SLURM_* only) on a DGX-2: SLURM_LOCALID's HCA" ok \
    "mlx5_1 port 1 .*nearest local rank 1 of 2 by the topology (pcie-switch" \
    WEFT_IBEMU_DEVICES=mlx5_0,mlx5_1 WEFT_TOPO_FILE="$DGX2" WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=NET
hca_pair "srun (SLURM_* only) on a DGX-2: SLURM_LOCALID's HCA"
RANK1='export PMI_RANK=$WEFT_RANK PMI_SIZE=$WEFT_WORLD_SIZE PMI_LOCAL_RANK=$WEFT_LOCAL_RANK \
PMI_LOCAL_SIZE=$WEFT_LOCAL_SIZE PMI_JOBID=79; \
unset WEFT_RANK WEFT_WORLD_SIZE WEFT_LOCAL_RANK WEFT_LOCAL_SIZE;' CUDA_VISIBLE_DEVICES=0,2 \
    case_ "Cray PMI (PMI_LOCAL_RANK, PMI_LOCAL_SIZE): its HCA" ok \
    "mlx5_1 port 1 .*nearest local rank 1 of 2 by the topology (pcie-switch" \
    WEFT_IBEMU_DEVICES=mlx5_0,mlx5_1 WEFT_TOPO_FILE="$DGX2" WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=NET
hca_pair "Cray PMI (PMI_LOCAL_RANK, PMI_LOCAL_SIZE): its HCA"
case_ "WEFT_IB_HCA=mlx5_1 over the topology's choice" ok "mlx5_1 port 1 (InfiniBand, lid 1, gid index 0) via" \
    WEFT_IBEMU_DEVICES=mlx5_1,mlx5_0 WEFT_TOPO_FILE="$TOPO" WEFT_IB_HCA=mlx5_1 \
    WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=NET
case_ "WEFT_IB_HCA=weft (a prefix)" ok "passed" WEFT_IB_HCA=weft
case_ "WEFT_IB_HCA==weftemu0" ok "passed" WEFT_IB_HCA==weftemu0
case_ "WEFT_IB_HCA=^mlx5 (all but)" ok "passed" WEFT_IB_HCA=^mlx5
case_ "WEFT_IB_HCA==weftemu (exact: no such name)" fail "passes WEFT_IB_HCA='=weftemu'" \
    WEFT_IB_HCA==weftemu
case_ "WEFT_IB_HCA=^weftemu0" fail "passes WEFT_IB_HCA='^weftemu0'" WEFT_IB_HCA=^weftemu0
case_ "WEFT_IB_HCA=weftemu0:2 (no such port)" fail "no active port" WEFT_IB_HCA=weftemu0:2
case_ "WEFT_IB_HCA=weftemu0:x refused" fail "WEFT_IB_HCA='weftemu0:x' is not valid" \
    WEFT_IB_HCA=weftemu0:x
case_ "WEFT_IB_QPS_PER_CONN=4" ok "passed" WEFT_IB_QPS_PER_CONN=4
case_ "WEFT_IB_QPS_PER_CONN=5 refused" fail "WEFT_IB_QPS_PER_CONN='5' is not valid" \
    WEFT_IB_QPS_PER_CONN=5
case_ "WEFT_IB_TIMEOUT=0 refused" fail "WEFT_IB_TIMEOUT=0 must be in" WEFT_IB_TIMEOUT=0
case_ "WEFT_IB_ZCOPY=yes refused" fail "WEFT_IB_ZCOPY='yes' is not valid" WEFT_IB_ZCOPY=yes
case_ "WEFT_IB_GID_INDEX=1 (no such GID)" fail "no active port" WEFT_IB_GID_INDEX=1
# NCCL_IB_SL / NCCL_IB_TC / NCCL_IB_PKEY's counterparts: in the QPs and the INFO line,
# out-of-range values refused naming the knob, a pkey index the port lacks fails setup
case_ "WEFT_IB_SL=3 WEFT_IB_TC=96" ok "service level 3, traffic class 96, pkey index 0" \
    WEFT_IB_SL=3 WEFT_IB_TC=96 WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=NET
case_ "WEFT_IB_SL=16 refused" fail "WEFT_IB_SL=16 must be in \[0, 15\]" WEFT_IB_SL=16
case_ "WEFT_IB_TC=256 refused" fail "WEFT_IB_TC=256 in \[0, 255\]" WEFT_IB_TC=256
case_ "WEFT_IB_PKEY=1 (no such index)" fail "QP to INIT on weftemu0 failed" WEFT_IB_PKEY=1
case_ "WEFT_IB_VERBS without a table" fail "WEFT_IB_VERBS=/nonexistent.so" \
    WEFT_IB_VERBS=/nonexistent.so
# ranks that disagree on the QPs per connection: refused at connect, naming the knob
RANK1='[ "$WEFT_RANK" = 1 ] && export WEFT_IB_QPS_PER_CONN=2;' \
    case_ "QPs per connection differ" fail "WEFT_IB_QPS_PER_CONN differs"
# (a topology file: with several devices and none, hwloc's I/O discovery runs, whose pci
# plugin leaks under LeakSanitizer)
# devices of another kind are skipped, not taken: AWS EFA (no RC queue pairs) and iWARP
# (QPs through rdma_cm); before 2026-11-27 the first active port was taken whatever its
# kind, and init failed creating an RC queue pair on EFA
case_ "an EFA device skipped for the next one" ok \
    "efa0 skipped: its transport is another one, not InfiniBand or RoCE.*" \
    WEFT_IBEMU_DEVICES=efa0,weftemu0 WEFT_TOPO_FILE="$TOPO" WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=NET
grep -q "weftemu0 port 1 (InfiniBand" "$OUT/an EFA device skipped for the next one" || {
    FAIL=$((FAIL + 1)); echo "FAIL - the EFA case did not go on to weftemu0"; }
case_ "only iWARP and EFA devices: refused, naming them" fail \
    "no active port among 2 device(s) .*not InfiniBand or RoCE: iwarp0, efa0" \
    WEFT_IBEMU_DEVICES=iwarp0,efa0 WEFT_TOPO_FILE="$TOPO"
if ! compgen -G "/sys/class/infiniband/*" >/dev/null; then
    case_ "rdma-core without a device" fail "finds no RDMA device" WEFT_IB_VERBS=
    # rdma-core loaded, its ibv_fork_init called before anything else (a kernel of 5.13
    # or later needs nothing, and rdma-core says yes): no warning
    if grep -q "ibv_fork_init failed" "$OUT/rdma-core without a device"; then
        FAIL=$((FAIL + 1)); echo "FAIL - ibv_fork_init failed on this kernel ($(uname -r))"
    fi
fi
# Frame buffers only for the peers that carry large frames: 5 ranks' ring all-reduces
# move frames to one peer and from one other, so each rank makes one receive ring and one
# staging area (8 slots of 1 MB each at the default WEFT_BUFFSIZE), not 4 of each (only
# the 32K of eager slots per peer): the INFO line says so, and the emulator's peak
# registration (what an HCA would pin) stays under 3 of them (every peer's at init: 67 MB
# per rank before 2026-11-28)
# (the frame sizes are the defaults': a caller's WEFT_CHUNK or WEFT_BUFFSIZE is dropped)
LAZY=(env -u WEFT_CHUNK -u WEFT_BUFFSIZE WEFT_TRANSPORT=ib WEFT_IB_VERBS="$EMU"
      WEFT_IBEMU_FABRIC=$FABRIC)
ring_bytes=$(( (8 * (1048576 + 64) + 4095) / 4096 * 4096 ))
"${LAZY[@]}" WEFT_TIMEOUT=20 WEFT_ALGO=ring WEFT_IBEMU_REPORT=1 WEFT_DEBUG=INFO \
    WEFT_DEBUG_SUBSYS=NET timeout -k 5 60 "$B/bin/weftrun" -n 5 "$B/tests/probe_lazy" ring \
    >"$OUT/lazy" 2>&1
rc=$?
rings=$(grep -c "large receive rings for 1 of its 4 ib peers, large send staging for 1 " "$OUT/lazy")
peaks=$(sed -n 's/^ibemu: pid [0-9]*: at most \([0-9]*\) bytes.*/\1/p' "$OUT/lazy")
over=$(for p in $peaks; do [ "$p" -ge $((3 * ring_bytes)) ] && echo "$p"; done | wc -l)
ok=0
[ $rc = 0 ] && [ "$rings" = 5 ] && [ "$(echo "$peaks" | wc -w)" = 5 ] && [ "$over" = 0 ] && ok=1
judge "large frame buffers for the ring's two peers only (peaks $(echo $peaks))" $ok \
    "$OUT/lazy" "exit $rc, $rings of 5 INFO lines, want each peak under $((3 * ring_bytes))"

# Both ranks of a pair send 256K first, then receive: frames too large for the eager
# slots, to a peer that is itself blocked in a send, get their ring from that peer's
# progress (its doorbell), as they did when rings were made at init (without it both wait
# until WEFT_TIMEOUT). And small sends complete while the receiver is in a call of
# another communicator, or outside weft, as they did then (eager slots: without them,
# rank 2 times out in the other communicator's barrier)
for m in crossed elsewhere; do
    "${LAZY[@]}" WEFT_TIMEOUT=10 WEFT_ALGO=ring timeout -k 5 60 "$B/bin/weftrun" -n 4 \
        "$B/tests/probe_lazy" $m >"$OUT/$m" 2>&1
    rc=$?
    ok=0
    [ $rc = 0 ] && [ "$(grep -c "probe_lazy $m rank .: passed" "$OUT/$m")" = 4 ] && ok=1
    judge "probe_lazy $m" $ok "$OUT/$m" "exit $rc"
done
# A receiver that cannot make its large ring (registrations over 1 MB fail, as over the
# pinned memory limit) says so, and the sender's large send fails naming it at once,
# where it would wait for the ring until WEFT_TIMEOUT (60 s here)
"${LAZY[@]}" WEFT_TIMEOUT=60 WEFT_IBEMU_MR_MAX=1048576 timeout -k 5 50 "$B/bin/weftrun" -n 2 \
    "$B/tests/probe_lazy" crossed >"$OUT/refused" 2>&1
rc=$?
ok=0
[ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] &&
    grep -q "rank [01] refuses rank [01]'s frames over 2048 bytes: .*ibv_reg_mr" \
        "$OUT/refused" &&
    grep -Eq "FAIL rank (0: .*rank 1|1: .*rank 0) could not make a receive ring for rank" \
        "$OUT/refused" && ok=1
judge "a large ring refused: the sender fails naming the receiver" $ok "$OUT/refused" "exit $rc"
echo "test_ib.sh: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
