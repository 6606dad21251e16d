#!/usr/bin/env bash
# test_weft_topo.sh - the weft-topo CLI: what --ranks N [--hosts H] prints for the test
# topologies, and its refusals.
#
#   bash tests/test_weft_topo.sh [build]       (from the repository root)
#
# The decisions themselves are test_topo's; this checks that the CLI shows them (each
# rank's cores, GPU, NIC with its distance class, HCA and interface, the ring order, the
# double binary tree's links),
# reads WEFT_IB_HCA / WEFT_SOCKET_IFNAME, and exits 1 on a bad topology or filter and 2 on
# bad arguments, with a message. Runs in well under a second; every call under `timeout`.
set -u
B=${1:-build}
T="$B/bin/weft-topo"
D=tests/data/topologies
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-topo-cli.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

ok()  { PASS=$((PASS + 1)); echo "ok - $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && sed 's/^/   | /' "$2" | tail -n 12; }

# wt NAME [env...] -- args: stdout in $OUT/NAME, stderr in $OUT/NAME.err, returns the status
wt() {
    local name=$1; shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env -u WEFT_IB_HCA -u WEFT_SOCKET_IFNAME -u WEFT_TOPO_FILE -u CUDA_VISIBLE_DEVICES \
        "${envs[@]}" WEFT_DEBUG=NONE \
        timeout 30 "$T" "$@" >"$OUT/$name" 2>"$OUT/$name.err"
}
has() { grep -qF -- "$2" "$OUT/$1"; }

# the X9DRG-HF without its CUDA device: four GPUs, indexed in bus order (gpu_variants.py)
if wt two -- --xml "$D/2socket-4gpu-1ib-nocuda.xml" --ranks 4 --hosts 2 &&
   has two "rank 2: numa 1 cores 10-12 (cpus 10-12,26-28) gpu gpu2 (0000:84:00.0) nic mlx5_0 (0000:04:00.0, pcie-switch)" &&
   has two "rank 0: numa 0 cores 0-7 (cpus 0-7,16-23) gpu gpu0 (0000:03:00.0) nic mlx5_0 (0000:04:00.0, far)" &&
   has two "rank 1: ib mlx5_0:1 (host-bridge, 1 of 1)" &&
   has two "socket (tcp, one for every rank): the interface that routes to the rendezvous" &&
   has two "  0-3 | 4-7 | (back to the first)" &&
   has two "  tree 0, top 0: 0:4 2:1,3 4:2,6 6:5,7" &&
   has two "  tree 1, top 7: 1:2,0 3:5,1 5:6,4 7:3"; then
    ok "2socket (no CUDA device), 4 ranks x 2 hosts: cores, gpu, nic and class, devices, ring, trees"
else
    bad "2socket --ranks 4 --hosts 2" "$OUT/two"
fi

if wt filt WEFT_IB_HCA=mlx5_0:2 WEFT_SOCKET_IFNAME=^ib -- --xml "$D/2socket-4gpu-1ib-nocuda.xml" --ranks 2 &&
   has filt "rank 0: ib mlx5_0:2 (far, 1 of 1)" &&
   has filt "rank 1: ib mlx5_0:2 (host-bridge, 1 of 1)" &&
   has filt "socket (tcp, one for every rank): the interface that routes to the rendezvous if WEFT_SOCKET_IFNAME allows it"; then
    ok "WEFT_IB_HCA=mlx5_0:2 and WEFT_SOCKET_IFNAME=^ib are applied"
else
    bad "filters" "$OUT/filt"
fi
# tcp's interface is WEFT_SOCKET_IFNAME's first entry that names one, for every rank (as
# comm/sock.c picks it; before 2026-11-27 weft-topo showed a per-rank nearest choice that
# the transport never made)
if wt sock WEFT_SOCKET_IFNAME=eth1,ib0 -- --xml "$D/2socket-4gpu-1ib.xml" --ranks 4 &&
   has sock "socket (tcp, one for every rank): eth1 (WEFT_SOCKET_IFNAME's first match)" &&
   ! grep -q "socket ib0" "$OUT/sock"; then
    ok "WEFT_SOCKET_IFNAME=eth1,ib0: eth1 for every rank"
else
    bad "WEFT_SOCKET_IFNAME=eth1,ib0" "$OUT/sock"
fi

if wt numa -- --topo "$D/4numa-pci.xml" --ranks 8 &&
   has numa "rank 5: ib none" &&
   has numa "rank 3: numa 1 cores 36-47"; then
    ok "4numa (--topo), 8 ranks: two per node, the node's two ports shared out"
else
    bad "4numa --ranks 8" "$OUT/numa"
fi

if wt dgx -- --xml "$D/nvidia-dgx2.xml" --ranks 16 &&
   has dgx "rank 9: numa 1 cores 2 (cpus 24) shared gpu nvml9 (0000:b9:00.0) nic none"; then
    ok "dgx2, 16 ranks: gpu i, cores of its node, shared"
else
    bad "dgx2 --ranks 16" "$OUT/dgx"
fi
# CUDA_VISIBLE_DEVICES narrows the GPUs as CUDA does: local rank i on the i-th it shows
if wt vis CUDA_VISIBLE_DEVICES=12,13,14,15 -- --xml "$D/nvidia-dgx2-8ib.xml" --ranks 2 &&
   has vis "(CUDA_VISIBLE_DEVICES=12,13,14,15: local rank i uses gpu [12,13,14,15][i mod 4])" &&
   has vis "rank 1: numa 1 cores 3 (cpus 25) gpu nvml13 (0000:e2:00.0) nic mlx5_6 (0000:e1:00.0, pcie-switch)" &&
   has vis "rank 1: ib mlx5_6:1 (pcie-switch, 1 of 1)"; then
    ok "CUDA_VISIBLE_DEVICES=12,13,14,15: gpus 12 and 13, their node's cores and HCA"
else
    bad "CUDA_VISIBLE_DEVICES=12,13,14,15 --ranks 2" "$OUT/vis"
fi

# GPUs as CUDA numbers them: the X9DRG-HF's export has one CUDA device (cuda0, 84:00.0,
# node 1) beside two M2075s CUDA does not report and an AMD card; every local rank has
# cuda0 (before, "local rank i uses gpu i mod 4": rank 0 the M2075 at 03:00.0 on node 0)
if wt cuda -- --xml "$D/2socket-4gpu-1ib.xml" --ranks 4 &&
   has cuda "gpus: 1 (CUDA ordinals: cudaN is gpu N)" &&
   has cuda "  gpu 0  cuda0        0000:84:00.0 numa 1  Tesla K40m" &&
   has cuda "other gpus, without a CUDA device (no rank uses them): 3" &&
   has cuda "placement of 4 local ranks (local rank i uses gpu i mod 1):" &&
   has cuda "rank 0: numa 1 cores 8-9 (cpus 8-9,24-25) gpu cuda0 (0000:84:00.0)" &&
   has cuda "rank 3: numa 1 cores 14-15 (cpus 14-15,30-31) gpu cuda0 (0000:84:00.0)"; then
    ok "2socket: the one CUDA device for every rank, the other GPUs listed apart"
else
    bad "2socket: CUDA ordinals" "$OUT/cuda"
fi
# a job on GPUs 8-11 of a DGX-2 under a device cgroup (Slurm's ConstrainDevices): only
# those carry CUDA/NVML devices, and CUDA_VISIBLE_DEVICES=0,1,2,3 counts among them
# (before, among all 16: rank 0 on GPU 0, node 0, outside the job)
if wt job CUDA_VISIBLE_DEVICES=0,1,2,3 -- --xml "$D/nvidia-dgx2-8ib-job8-11.xml" --ranks 4 &&
   has job "rank 0: numa 1 cores 2 (cpus 24) shared gpu cuda0 (0000:b7:00.0) nic mlx5_4 (0000:b8:00.0, pcie-switch)" &&
   has job "rank 3: numa 1 cores 3 (cpus 25) shared gpu cuda3 (0000:be:00.0) nic mlx5_5 (0000:bd:00.0, pcie-switch)"; then
    ok "dgx2 job of GPUs 8-11, CUDA_VISIBLE_DEVICES=0,1,2,3: the job's GPUs on node 1"
else
    bad "dgx2 job of GPUs 8-11" "$OUT/job"
fi
# a cached export of this machine (HWLOC_XMLFILE with HWLOC_THISSYSTEM=1): its CUDA
# devices are the file's, listed without CUDA_VISIBLE_DEVICES, so weft applies it (before
# 2026-11-28 it took them for CUDA's in this process: "applied by CUDA", every GPU)
if wt cached CUDA_VISIBLE_DEVICES=2,3 HWLOC_THISSYSTEM=1 \
       HWLOC_XMLFILE="$D/nvidia-dgx2-8ib-job8-11.xml" -- --ranks 2 &&
   has cached "local rank i uses gpu [2,3][i mod 2]" &&
   has cached "rank 0: numa 1 cores 2 (cpus 24) gpu cuda2"; then
    ok "a cached export of this machine: CUDA_VISIBLE_DEVICES applied to its CUDA devices"
else
    bad "a cached export of this machine (HWLOC_THISSYSTEM=1)" "$OUT/cached"
fi
# the same with NVML's devices only (hwloc without its CUDA backend)
/usr/bin/python3 - "$D/nvidia-dgx2-8ib-job8-11.xml" "$OUT/nvml.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
tree = ET.parse(sys.argv[1])
for o in tree.getroot().iter("object"):
    for k in [k for k in o if k.get("subtype") == "CUDA"]:
        o.remove(k)
tree.write(sys.argv[2], xml_declaration=True, encoding="UTF-8")
EOF
if wt nvml CUDA_VISIBLE_DEVICES=1,0 -- --xml "$OUT/nvml.xml" --ranks 2 &&
   has nvml "gpus: 4 (NVML indices)" &&
   has nvml "rank 0: numa 1 cores 2 (cpus 24) gpu nvml1 (0000:b9:00.0)" &&
   has nvml "rank 1: numa 1 cores 3 (cpus 25) gpu nvml0 (0000:b7:00.0)"; then
    ok "dgx2 job, NVML devices only, CUDA_VISIBLE_DEVICES=1,0: nvml1, nvml0"
else
    bad "dgx2 job, NVML only" "$OUT/nvml"
fi

# tcp's interface on this machine: the one init picks (sock_local_addr, over every
# interface, not only the PCI NICs hwloc lists); before, "init would fail" for lo, bonds
# and VLANs, which init uses. (These load this machine's topology with its PCI devices:
# hwloc's pci plugin leaves libpciaccess's state allocated, and is unloaded before
# LeakSanitizer looks, so no suppression can name it: leak checks off for these two.)
LIVE_ASAN="ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
if ip -4 -o addr show lo 2>/dev/null | grep -q 127.0.0.1; then
    if wt lo "$LIVE_ASAN" WEFT_SOCKET_IFNAME=lo -- --ranks 1 &&
       has lo "socket (tcp, one for every rank): lo (127.0.0.1, WEFT_SOCKET_IFNAME's first match)" &&
       ! has lo "init would fail"; then
        ok "WEFT_SOCKET_IFNAME=lo on this machine: lo, as init picks it"
    else
        bad "WEFT_SOCKET_IFNAME=lo on this machine" "$OUT/lo"
    fi
else
    echo "skip - WEFT_SOCKET_IFNAME=lo: no lo with 127.0.0.1 here (or no ip command)"
fi
if wt noif "$LIVE_ASAN" WEFT_SOCKET_IFNAME==weftnosuch0 -- --ranks 1 &&
   has noif "socket (tcp, one for every rank): none: no IPv4 interface matches WEFT_SOCKET_IFNAME='=weftnosuch0'" &&
   has noif "(init would fail)"; then
    ok "WEFT_SOCKET_IFNAME naming no interface here: init would fail, and what there is"
else
    bad "WEFT_SOCKET_IFNAME==weftnosuch0 on this machine" "$OUT/noif"
fi
# another machine's export lists its PCI NICs only: a bond there cannot be judged
if wt bond WEFT_SOCKET_IFNAME=bond0 -- --xml "$D/2socket-4gpu-1ib.xml" --ranks 1 &&
   has bond "none of the topology's interfaces matches WEFT_SOCKET_IFNAME; an hwloc export lists PCI network devices only" &&
   ! has bond "init would fail"; then
    ok "WEFT_SOCKET_IFNAME=bond0 on an export: cannot be judged, not 'init would fail'"
else
    bad "WEFT_SOCKET_IFNAME=bond0 on an export" "$OUT/bond"
fi

# refusals: status and message
refuse() {
    local want_rc=$1 msg=$2; shift 2
    wt bad "$@"
    local rc=$?
    if [ "$rc" = "$want_rc" ] && grep -qF -- "$msg" "$OUT/bad.err"; then
        ok "refused ($rc): $msg"
    else
        bad "want status $want_rc and '$msg', got $rc" "$OUT/bad.err"
    fi
}
refuse 1 "leaves no device to use (this host has: mlx5_0)" WEFT_IB_HCA=^mlx5 -- \
    --xml "$D/2socket-4gpu-1ib.xml" --ranks 2
refuse 1 "WEFT_IB_HCA='mlx5_0,:1' is not valid: an entry without a device name" WEFT_IB_HCA=mlx5_0,:1 -- \
    --xml "$D/2socket-4gpu-1ib.xml" --ranks 2
refuse 1 "cannot read topology file" -- --xml "$D/none.xml" --ranks 2
refuse 2 "--hosts needs --ranks" -- --hosts 2
refuse 2 "--hosts wants a number from 1 to 4096, not '0'" -- --ranks 2 --hosts 0
refuse 2 "more than 4096 ranks" -- --ranks 4096 --hosts 2

# hwloc's own HWLOC_XMLFILE: named as the source (before 2026-11-27 "this machine (xml)")
if wt envxml "HWLOC_XMLFILE=$PWD/$D/4numa-pci.xml" -- --ranks 2 &&
   has envxml "topology: HWLOC_XMLFILE=$PWD/$D/4numa-pci.xml (xml)"; then
    ok "HWLOC_XMLFILE: named as the topology's source"
else
    bad "HWLOC_XMLFILE: topology line" "$OUT/envxml"
fi

# a host without GPUs: no "gpu i mod 0"
if wt nogpu -- --xml "$D/4numa-pci.xml" --ranks 2 &&
   has nogpu "placement of 2 local ranks (no GPU on this host):"; then
    ok "no GPU: the placement heading says so"
else
    bad "no GPU: placement heading" "$OUT/nogpu"
fi

# a cpuset that leaves the GPUs of node 1 no cores (as under a container's --cpuset-cpus):
# the 4 ranks' core blocks must not overlap unless marked shared (rank 0 took all of node
# 0 and ranks 1-3 parts of it before)
if lstopo-no-graphics --input "$D/2socket-4gpu-1ib.xml" --restrict 0x00ff00ff -f \
       "$OUT/node0.xml" 2>/dev/null && wt node0 -- --xml "$OUT/node0.xml" --ranks 4; then
    overlap=$(awk '/^  rank [0-9]+: numa/ && !/ shared / {
        for (i = 1; i <= NF; i++) if ($i == "cores") c = $(i + 1)
        n = split(c, part, ","); for (k = 1; k <= n; k++) {
            lo = part[k]; hi = part[k]; if (index(lo, "-")) { split(lo, r, "-"); lo = r[1]; hi = r[2] }
            for (x = lo; x <= hi; x++) if (seen[x]++) print x } }' "$OUT/node0")
    if [ -z "$overlap" ]; then
        ok "cpus of node 0 only, GPUs on both nodes: 4 disjoint core blocks"
    else
        bad "node 0 only: cores $(echo $overlap | tr '\n' ' ')in two ranks' blocks" "$OUT/node0"
    fi
else
    echo "skip - node 0 only: lstopo cannot restrict the test topology here"
fi

# devices whose locality the kernel does not know (numa_node -1: hwloc hangs their host
# bridges off the whole machine, as in many VMs): numa -1, not node 0, and the ranks
# placed in NUMA-wide blocks (ranks 0-3 all took node 0 before)
/usr/bin/python3 - "$D/2socket-4gpu-1ib-nocuda.xml" "$OUT/nolocal.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
tree = ET.parse(sys.argv[1])
machine = tree.getroot().find("object")
for pkg in list(machine):
    for hb in [c for c in pkg if c.get("type") == "Bridge"]:
        pkg.remove(hb)
        machine.append(hb)
tree.write(sys.argv[2], xml_declaration=True, encoding="UTF-8")
EOF
if wt nolocal -- --xml "$OUT/nolocal.xml" --ranks 4 &&
   has nolocal "gpu 1  gpu1         0000:83:00.0 numa -1" &&
   has nolocal "rank 2: numa 1 cores 8-11" && has nolocal "rank 3: numa 1 cores 12-15"; then
    ok "devices of unknown locality: numa -1, ranks on NUMA-wide blocks"
else
    bad "devices of unknown locality" "$OUT/nolocal"
fi

echo "test_weft_topo: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
