#!/usr/bin/env bash
# test_launchers.sh - weft_comm_init finds its rank under every launcher convention.
#
#   bash tests/test_launchers.sh [build/bin]
#
# Starts 2-rank jobs the way torchrun, Open MPI's mpirun (4 and 5), MPICH/PMI and Slurm
# would (their environment variables, set by hand where the launcher is not installed; the
# real mpirun, mpirun.mpich and torchrun where they are), runs all_reduce_perf (which checks
# its results and exits non-zero on a wrong element), and checks the failure paths: no
# launcher environment, a batch script's own process under Slurm (a job of one task runs),
# a variable that is not a number or not host:port (refused, naming it), a rendezvous
# with port 0 or a taken port, a wrong secret, a rank that disagrees about the job size.
# Every job runs under `timeout`.
set -u
HERE=$(dirname "$0")
BIN=${1:-build/bin}
PERF=$BIN/all_reduce_perf
ARGS=(-b 8 -e 64K -f 8 -n 2 -w 1)
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-launch.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

ok()   { PASS=$((PASS + 1)); echo "ok - $1"; }
bad()  { FAIL=$((FAIL + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && sed 's/^/   | /' "$2" | tail -n 15; }
# port: a free loopback port and the one after it (torchrun's store and weft), outside the
# kernel's ephemeral range: a random pick from 30000-59999 collided with a connection's
# local port ("bind: Address already in use", a test failed).
port() { /usr/bin/python3 "$HERE/weftlib.py" 2; }

# clean_env CMD...: runs CMD without any launcher's variables from our own environment.
clean_env() {
    env -u WEFT_RANK -u WEFT_WORLD_SIZE -u WEFT_ADDR -u WEFT_LOCAL_RANK -u WEFT_LOCAL_SIZE \
        -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u OMPI_COMM_WORLD_RANK \
        -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_LOCAL_SIZE -u OMPI_MCA_ess_base_jobid \
        -u PMIX_NAMESPACE -u PMI_RANK -u PMI_SIZE -u PMI_JOBID -u MPI_LOCALNRANKS \
        -u SLURM_PROCID -u SLURM_NTASKS -u SLURM_STEP_NUM_TASKS \
        -u TORCHELASTIC_USE_AGENT_STORE -u WEFT_SECRET -u LOCAL_RANK -u LOCAL_WORLD_SIZE \
        -u OMPI_COMM_WORLD_LOCAL_RANK -u MPI_LOCALRANKID -u PMI_LOCAL_RANK -u PMI_LOCAL_SIZE \
        -u PMI_FD -u SLURM_LOCALID -u SLURM_JOB_ID -u SLURM_JOBID -u SLURM_STEP_ID \
        -u SLURM_NNODES -u SLURM_JOB_NUM_NODES -u SLURM_NODEID -u SLURM_STEP_TASKS_PER_NODE "$@"
}

# two_ranks NAME VARS_FOR_RANK_0 -- VARS_FOR_RANK_1: both must exit 0.
two_ranks() {
    local name=$1 v0=$2 v1=$3 rc0 rc1
    clean_env $v0 timeout 60 "$PERF" "${ARGS[@]}" >"$OUT/r0" 2>&1 &
    local p0=$!
    clean_env $v1 timeout 60 "$PERF" "${ARGS[@]}" >"$OUT/r1" 2>&1 &
    local p1=$!
    wait $p0; rc0=$?
    wait $p1; rc1=$?
    if [ $rc0 = 0 ] && [ $rc1 = 0 ] && grep -q "Avg bus bandwidth" "$OUT/r0"; then
        ok "$name"
    else
        cat "$OUT/r0" "$OUT/r1" >"$OUT/both"
        bad "$name (exit $rc0, $rc1)" "$OUT/both"
    fi
}

# launched NAME FILE CMD...: a real launcher's 2-rank job must run and print its results.
launched() {
    local name=$1 f=$OUT/$2
    shift 2
    if clean_env "$@" >"$f" 2>&1 && grep -q "Avg bus bandwidth" "$f"; then
        ok "$name"
    else
        bad "$name" "$f"
    fi
}

p=$(port)
two_ranks "torchrun variables (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)" \
    "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p" \
    "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p"

p=$(port)
two_ranks "PMI variables (PMI_RANK/PMI_SIZE) with WEFT_ADDR" \
    "PMI_RANK=0 PMI_SIZE=2 WEFT_ADDR=127.0.0.1:$p" "PMI_RANK=1 PMI_SIZE=2 WEFT_ADDR=127.0.0.1:$p"
# no WEFT_SECRET: nothing said where only this host's processes reach the rendezvous (the
# loopback above), a warning from rank 0 where others can (0.0.0.0, every interface)
if grep -q "no WEFT_SECRET" "$OUT/r0" "$OUT/r1"; then
    bad "no WEFT_SECRET, loopback rendezvous: no warning wanted" "$OUT/r0"
else
    ok "no WEFT_SECRET, loopback rendezvous: no warning"
fi
p=$(port)
two_ranks "no WEFT_SECRET, rendezvous 0.0.0.0: the job runs" \
    "WEFT_RANK=0 WEFT_WORLD_SIZE=2 WEFT_ADDR=0.0.0.0:$p" "WEFT_RANK=1 WEFT_WORLD_SIZE=2 WEFT_ADDR=0.0.0.0:$p"
if [ "$(grep -c "no WEFT_SECRET: any process that reaches the rendezvous 0.0.0.0:$p" \
        "$OUT/r0" "$OUT/r1" | awk -F: '{ s += $2 } END { print s }')" = 1 ]; then
    ok "no WEFT_SECRET, rendezvous 0.0.0.0: rank 0 (only) warns that anyone can join"
else
    cat "$OUT/r0" "$OUT/r1" >"$OUT/nosecret"
    bad "no WEFT_SECRET, rendezvous 0.0.0.0: one warning wanted" "$OUT/nosecret"
fi

job=$((100000 + RANDOM))
# srun's step count wins over the allocation's, and a WORLD_SIZE exported for another
# tool (torchrun's name, without RANK) does not take over the detection
two_ranks "Slurm variables with SLURM_STEP_NUM_TASKS=2 of SLURM_NTASKS=4, WORLD_SIZE=16 exported" \
    "SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_STEP_NUM_TASKS=2 SLURM_LOCALID=0 SLURM_NNODES=1 SLURM_JOB_ID=$job SLURM_STEP_ID=3 WORLD_SIZE=16" \
    "SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_STEP_NUM_TASKS=2 SLURM_LOCALID=1 SLURM_NNODES=1 SLURM_JOB_ID=$job SLURM_STEP_ID=3 WORLD_SIZE=16"

job=$((100000 + RANDOM))
two_ranks "Slurm variables on one node, rendezvous port from the job id" \
    "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 SLURM_LOCALID=0 SLURM_NNODES=1 SLURM_JOB_ID=$job SLURM_STEP_ID=0" \
    "SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 SLURM_LOCALID=1 SLURM_NNODES=1 SLURM_JOB_ID=$job SLURM_STEP_ID=0"

# Open MPI 5 (PRRTE) sets PMIx's PMIX_NAMESPACE, not Open MPI 4's OMPI_MCA_ess_base_jobid:
# the job-id port comes from it.
ns="prterun-vm-$RANDOM@1"
two_ranks "Open MPI 5 variables on one host (PMIX_NAMESPACE, no ess jobid), port from the namespace" \
    "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=2 PMIX_NAMESPACE=$ns" \
    "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2 PMIX_NAMESPACE=$ns"

# A process of a batch script (or an allocation's shell) has SLURM_PROCID=0 and the job's
# SLURM_NTASKS but is no task of an srun step (no SLURM_STEP_NUM_TASKS): refused at once,
# not taken for rank 0 of 2 waiting for a rank 1 that never comes.
if clean_env WEFT_TIMEOUT=20 SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_NNODES=1 SLURM_JOB_ID=$job \
        timeout 15 "$PERF" "${ARGS[@]}" >"$OUT/batch" 2>&1; then
    bad "a batch script's process (no SLURM_STEP_NUM_TASKS): should fail" "$OUT/batch"
elif grep -q "not as a task that srun started" "$OUT/batch"; then
    ok "a batch script's process (no SLURM_STEP_NUM_TASKS): refused, start the ranks with srun"
else
    bad "a batch script's process (no SLURM_STEP_NUM_TASKS): message" "$OUT/batch"
fi

# sbatch without -n sets SLURM_PROCID=0 and SLURM_JOB_ID but no SLURM_NTASKS: a job of one
# task per node, so on one node the script's own process is a job of one rank (it was
# refused with "no launcher environment found" although SLURM_PROCID was set), on two it
# is refused as above.
if clean_env SLURM_PROCID=0 SLURM_JOB_ID=$job SLURM_JOB_NUM_NODES=1 SLURM_NNODES=1 \
        timeout 20 "$PERF" -b 8 -e 8 -n 1 -w 0 >"$OUT/batch1" 2>&1 &&
        grep -q "Avg bus bandwidth" "$OUT/batch1"; then
    ok "a batch script's process, no SLURM_NTASKS (sbatch without -n), one node: a job of one rank"
else
    bad "a batch script's process, no SLURM_NTASKS (sbatch without -n), one node: should run" \
        "$OUT/batch1"
fi
if clean_env WEFT_TIMEOUT=20 SLURM_PROCID=0 SLURM_JOB_ID=$job SLURM_JOB_NUM_NODES=2 \
        SLURM_NNODES=2 timeout 15 "$PERF" "${ARGS[@]}" >"$OUT/batch2" 2>&1; then
    bad "a batch script's process, no SLURM_NTASKS, two nodes: should fail" "$OUT/batch2"
elif grep -q "a task on each node, SLURM_JOB_NUM_NODES=2).*not as a task that srun started" \
        "$OUT/batch2"; then
    ok "a batch script's process, no SLURM_NTASKS, two nodes: refused, start the ranks with srun"
else
    bad "a batch script's process, no SLURM_NTASKS, two nodes: message" "$OUT/batch2"
fi

# refused NAME GREP VARS...: one process with VARS must fail at once (not by `timeout`),
# weft_comm_init returning WEFT_ERR_INVALID_ARG with GREP (a basic regex) in its message.
refused() {
    local name=$1 want=$2 rc
    shift 2
    clean_env WEFT_TIMEOUT=5 "$@" timeout 15 "$PERF" -b 8 -e 8 -n 1 -w 0 >"$OUT/refused" 2>&1
    rc=$?
    if [ $rc != 0 ] && [ $rc != 124 ] && grep -q "invalid argument: comm_init: $want" "$OUT/refused"; then
        ok "$name"
    else
        bad "$name (exit $rc)" "$OUT/refused"
    fi
}
# A variable that is not a number is refused, naming it: a garbage SLURM_PROCID in a batch
# script's process was taken for rank 0 of 1, and a garbage local rank for none.
refused "SLURM_PROCID=garbage (batch, SLURM_NTASKS=1): refused, naming it" \
    "SLURM_PROCID='garbage' is not a number" \
    SLURM_PROCID=garbage SLURM_NTASKS=1 SLURM_JOB_ID=$job
refused "SLURM_NTASKS=x (batch): refused, naming it" "SLURM_NTASKS='x' is not a number" \
    SLURM_PROCID=0 SLURM_NTASKS=x SLURM_JOB_ID=$job
refused "SLURM_NTASKS=0 (batch): refused, naming it" "SLURM_NTASKS='0' is not a number in range" \
    SLURM_PROCID=0 SLURM_NTASKS=0 SLURM_JOB_ID=$job
# rank 1 of a job's own process, with no task count (a segfault until 2026-11-28) or a
# count of 1: refused, saying so
refused "SLURM_PROCID=1, SLURM_JOB_ID only: refused" \
    "SLURM_PROCID=1 is set but not SLURM_STEP_NUM_TASKS, in a job of 1 task(s) (no SLURM_NTASKS, SLURM_JOB_NUM_NODES or SLURM_NNODES" \
    SLURM_PROCID=1 SLURM_JOB_ID=$job
refused "SLURM_PROCID=1 SLURM_NTASKS=1 (batch): refused" \
    "SLURM_PROCID=1 is set but not SLURM_STEP_NUM_TASKS, in a job of 1 task(s) (SLURM_NTASKS=1)" \
    SLURM_PROCID=1 SLURM_NTASKS=1 SLURM_JOB_ID=$job
refused "RANK=x WORLD_SIZE=1: refused, naming them" "RANK=x and WORLD_SIZE=1 do not describe" \
    RANK=x WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500
refused "PMI_SIZE=two: refused, naming it" "PMI_RANK=0 and PMI_SIZE=two do not describe" \
    PMI_RANK=0 PMI_SIZE=two
refused "LOCAL_RANK=x under torchrun: refused, naming it" "LOCAL_RANK='x' is not a number" \
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=x
refused "OMPI_COMM_WORLD_LOCAL_SIZE=-1: refused, naming it" \
    "OMPI_COMM_WORLD_LOCAL_SIZE='-1' is not a number" \
    OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 OMPI_COMM_WORLD_LOCAL_SIZE=-1
refused "SLURM_LOCALID=x under srun: refused, naming it" "SLURM_LOCALID='x' is not a number" \
    SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=1 SLURM_LOCALID=x SLURM_JOB_ID=$job SLURM_STEP_ID=0
refused "SLURM_LOCALID=x under srun --mpi=pmi2 (PMI_* without a local rank): refused, naming it" \
    "SLURM_LOCALID='x' is not a number" PMI_RANK=0 PMI_SIZE=1 PMI_JOBID=$job.0 \
    SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=1 SLURM_LOCALID=x SLURM_JOB_ID=$job SLURM_STEP_ID=0
# A rendezvous that is not host:port is refused naming the variable it came from (the
# message named only the address: "address '127.0.0.1:abc': port is not a number").
refused "MASTER_PORT=abc: refused, naming MASTER_PORT" "MASTER_PORT='abc' is not a port" \
    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=abc
refused "MASTER_PORT=70000: refused, naming MASTER_PORT" "MASTER_PORT='70000' is not a port" \
    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=70000
refused "MASTER_ADDR=::1: refused, naming MASTER_ADDR (IPv4 only)" \
    "MASTER_ADDR='::1' is not a host name or IPv4 address" \
    RANK=0 WORLD_SIZE=1 MASTER_ADDR=::1 MASTER_PORT=29500
refused "WEFT_ADDR=myhost: refused, naming WEFT_ADDR" "WEFT_ADDR='myhost' is not host:port" \
    WEFT_RANK=0 WEFT_WORLD_SIZE=1 WEFT_ADDR=myhost
refused "WEFT_ADDR=myhost:abc: refused, naming WEFT_ADDR" \
    "WEFT_ADDR='myhost:abc' is not host:port" WEFT_RANK=0 WEFT_WORLD_SIZE=1 WEFT_ADDR=myhost:abc
refused "WEFT_ADDR=:29500: refused, naming WEFT_ADDR" "WEFT_ADDR=':29500' names no host" \
    PMI_RANK=0 PMI_SIZE=1 WEFT_ADDR=:29500

# A rendezvous with port 0, and a rank 0 whose rendezvous port is taken: a clear error.
if clean_env WEFT_RANK=0 WEFT_WORLD_SIZE=2 WEFT_ADDR=127.0.0.1:0 timeout 15 "$PERF" "${ARGS[@]}" \
        >"$OUT/port0" 2>&1 || ! grep -q "has port 0" "$OUT/port0"; then
    bad "WEFT_ADDR with port 0: a clear error" "$OUT/port0"
else
    ok "WEFT_ADDR with port 0: refused, name a port"
fi
p=$(port)
/usr/bin/python3 -c "import socket, sys, time
s = socket.socket(); s.bind(('127.0.0.1', $p)); s.listen(1); print('up', flush=True); time.sleep(20)" \
    >"$OUT/holder" 2>&1 &
holder=$!
for _ in $(seq 50); do grep -q up "$OUT/holder" && break; sleep 0.1; done
if clean_env WEFT_RANK=0 WEFT_WORLD_SIZE=2 WEFT_ADDR=127.0.0.1:$p timeout 15 "$PERF" "${ARGS[@]}" \
        >"$OUT/busy" 2>&1 || ! grep -q "cannot listen at the rendezvous.*must name this host" "$OUT/busy"; then
    bad "rank 0's rendezvous port taken: a clear error" "$OUT/busy"
else
    ok "rank 0's rendezvous port taken: says it must name this host and a free port"
fi
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null

# The job-id port stays out of the kernel's ephemeral range, where an outgoing connection's
# local port could hold it (one did: "bind: Address already in use"): 6 job ids, 1 rank
# (the old derivation put each in that range with odds 0.68, all 6 out of it 0.1%).
# job_ports [RANGE]: the 6 ports, RANGE (ip_local_port_range) set in a network namespace
# of their own where given.
job_ports() {
    clean_env ${1:+unshare -n sh -c 'echo "$0" >/proc/sys/net/ipv4/ip_local_port_range &&
        { ip link set lo up 2>/dev/null; exec "$@"; }' "$1"} \
        sh -c 'for j in 1 2 3 4 5 6; do
            env SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_STEP_NUM_TASKS=1 SLURM_NNODES=1 \
                SLURM_JOB_ID=$((7000 + j * 37)) SLURM_STEP_ID=0 WEFT_DEBUG=INFO \
                timeout 20 "$0" -b 8 -e 8 -n 1 -w 0 2>&1 |
                sed -n "s/.*from Slurm, rendezvous 127\.0\.0\.1:\([0-9]*\).*/\1/p" | head -n 1
        done' "$PERF" | tr '\n' ' '
}
# in_range NAME LO HI PORTS: all 6 PORTS in [LO, HI)
in_range() {
    local out
    out=$(for q in $4; do [ "$q" -ge "$2" ] && [ "$q" -lt "$3" ] || echo "$q"; done)
    if [ "$(echo $4 | wc -w)" = 6 ] && [ -z "$out" ]; then
        ok "$1: job-id ports in [$2, $3):$(echo $4 | cut -d' ' -f1-4) ..."
    else
        bad "$1: job-id ports outside [$2, $3) or missing: '$4'"
    fi
}
read -r elo _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || elo=32768
if [ "$elo" -gt 21000 ]; then
    in_range "this host's ephemeral range" 20000 "$elo" "$(job_ports)"
else
    echo "ok - job-id ports: the ephemeral range starts at $elo here (the cases below check that)"
fi
# An ephemeral range that starts at 21000 or below (20000-59999 lay in it): the ports below
# it from 1024, or those above its end where there are more.
if unshare -n sh -c 'echo "10000 60999" >/proc/sys/net/ipv4/ip_local_port_range' 2>/dev/null; then
    in_range "ephemeral range 10000-60999" 1024 10000 "$(job_ports "10000 60999")"
    in_range "ephemeral range 1024-60999" 61000 65536 "$(job_ports "1024 60999")"
else
    echo "skip - job-id ports under a low ephemeral range: no network namespace of our own here"
fi

# The real torchrun (Debian's python3-torch) where it is installed: its agent's store
# already listens on MASTER_PORT (static rendezvous, TORCHELASTIC_USE_AGENT_STORE=True;
# weft listening there fails with "Address already in use"). --redirects 2 --tee 1:
# torch 1.13's defaults (0) break on Python 3.11 ("'NoneType' object has no attribute
# 'get'": its IntFlag lookup of 0 finds nothing), so rank 0's stdout is teed instead.
if /usr/bin/python3 -c "import torch.distributed.run" 2>/dev/null; then
    p=$(port)
    launched "torchrun --nproc_per_node=2 (its agent store on MASTER_PORT; weft on MASTER_PORT + 1)" \
        torchrun timeout 90 /usr/bin/python3 -m torch.distributed.run --nnodes=1 \
        --nproc_per_node=2 --master_port="$p" --redirects 2 --tee 1 --no_python \
        "$PERF" "${ARGS[@]}"
else
    echo "skip - torchrun (python3-torch) is not installed: the real torchrun is not tested"
fi

if command -v mpirun >/dev/null 2>&1; then
    launched "Open MPI mpirun -np 2 (OMPI_COMM_WORLD_*, port from the job id)" mpi \
        timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$PERF" "${ARGS[@]}"
else
    bad "Open MPI mpirun: not installed (make deps installs openmpi-bin)"
fi

# MPICH's hydra sets no job id (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS,
# PMI_FD only): on one host the ranks meet at a port from their hydra proxy, also when a
# shell stands between the proxy and the program.
if command -v mpirun.mpich >/dev/null 2>&1; then
    launched "MPICH mpirun -n 2 (PMI_*, no job id: port from hydra's proxy)" mpich \
        timeout 60 mpirun.mpich -n 2 "$PERF" "${ARGS[@]}"
    launched "MPICH mpirun -n 2 through a shell (the proxy is the grandparent)" mpich_sh \
        timeout 60 mpirun.mpich -n 2 sh -c '"$0" "$@"; exit $?' "$PERF" "${ARGS[@]}"
else
    bad "MPICH mpirun: not installed (make deps installs mpich)"
fi

# No launcher at all: a clear error, not a hang.
if clean_env timeout 20 "$PERF" "${ARGS[@]}" >"$OUT/none" 2>&1; then
    bad "no launcher environment: should fail" "$OUT/none"
elif grep -q "no launcher environment" "$OUT/none"; then
    ok "no launcher environment: clear error"
else
    bad "no launcher environment: message" "$OUT/none"
fi

# two_fail NAME GREP VARS_FOR_RANK_0 VARS_FOR_RANK_1: a 2-rank job that must fail on both
# ranks within WEFT_TIMEOUT=2 (not by `timeout`), in under 20 s, with GREP (an extended
# regex; empty: none) in rank 0's or rank 1's output.
two_fail() {
    local name=$1 want=$2 v0=$3 v1=$4 rc0 rc1 t0 t1
    t0=$(date +%s)
    clean_env WEFT_TIMEOUT=2 $v0 timeout 30 "$PERF" "${ARGS[@]}" >"$OUT/f0" 2>&1 &
    local p0=$!
    clean_env WEFT_TIMEOUT=2 $v1 timeout 30 "$PERF" "${ARGS[@]}" >"$OUT/f1" 2>&1 &
    local p1=$!
    wait $p0; rc0=$?
    wait $p1; rc1=$?
    t1=$(date +%s)
    cat "$OUT/f0" "$OUT/f1" >"$OUT/f"
    if [ $rc0 != 0 ] && [ $rc0 != 124 ] && [ $rc1 != 0 ] && [ $rc1 != 124 ] &&
        [ $((t1 - t0)) -lt 20 ] && { [ -z "$want" ] || grep -qiE "$want" "$OUT/f"; }; then
        ok "$name"
    else
        bad "$name (exit $rc0, $rc1 after $((t1 - t0))s)" "$OUT/f"
    fi
}

# A rank with the wrong secret is refused.
p=$(port)
two_fail "wrong WEFT_SECRET: refused, both ranks fail within the timeout" "auth" \
    "WEFT_SECRET=right WEFT_RANK=0 WEFT_WORLD_SIZE=2 WEFT_ADDR=127.0.0.1:$p" \
    "WEFT_SECRET=wrong WEFT_RANK=1 WEFT_WORLD_SIZE=2 WEFT_ADDR=127.0.0.1:$p"

# Ranks of two Slurm jobs that meet at one port (here forced by WEFT_ADDR) never make
# one job: rank 0 drops the other job's rank, and tells it so.
p=$(port)
two_fail "ranks of two Slurm jobs at one port: dropped as another job's (and told), both fail within the timeout" \
    "belongs to another job" \
    "SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=2 SLURM_JOB_ID=4111 SLURM_STEP_ID=0 WEFT_ADDR=127.0.0.1:$p" \
    "SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=2 SLURM_JOB_ID=4222 SLURM_STEP_ID=0 WEFT_ADDR=127.0.0.1:$p"

# A rank that thinks the job is bigger is dropped, and told why; nothing hangs.
p=$(port)
two_fail "ranks disagreeing on the job size: rank 1 told 'job has 2 ranks, started for 3', both fail within the timeout" \
    "its job has 2 ranks, this rank was started for 3" \
    "WEFT_RANK=0 WEFT_WORLD_SIZE=2 WEFT_ADDR=127.0.0.1:$p" \
    "WEFT_RANK=1 WEFT_WORLD_SIZE=3 WEFT_ADDR=127.0.0.1:$p"

# A rendezvous name that resolves only a second after the ranks start (a service name not
# in DNS yet, as rank 0's on Kubernetes): both ranks wait for it, saying so, and the job
# runs (they failed at once before 2026-11-27). The name comes from a hosts file of this
# test's own, bind-mounted over /etc/hosts in a mount namespace of its own.
if unshare -m true 2>/dev/null; then
    cp /etc/hosts "$OUT/hosts"
    p=$(port)
    ( sleep 1; echo "127.0.0.1 weft-late-rdv" >>"$OUT/hosts" ) &
    clean_env WEFT_TIMEOUT=20 timeout 60 unshare -m sh -c \
        'mount --bind "$0" /etc/hosts && exec "$@"' "$OUT/hosts" \
        env WEFT_ADDR="weft-late-rdv:$p" "$(dirname "$PERF")/weftrun" -n 2 \
        --addr "weft-late-rdv:$p" "$PERF" "${ARGS[@]}" >"$OUT/late" 2>&1
    rc=$?
    wait
    if [ $rc = 0 ] && grep -q "Avg bus bandwidth" "$OUT/late" &&
       grep -q "cannot resolve 'weft-late-rdv' yet" "$OUT/late"; then
        ok "a rendezvous name that resolves 1 s late: the ranks wait for it, and say so"
    else
        bad "a rendezvous name that resolves late (exit $rc)" "$OUT/late"
    fi
else
    echo "skip - a late-resolving rendezvous name: no mount namespace here"
fi

echo "test_launchers: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
