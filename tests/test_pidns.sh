#!/usr/bin/env bash
# test_pidns.sh - ranks of one host in different pid namespaces, sharing /dev/shm (one
# container per rank with docker --ipc=host, as NVIDIA advises for NCCL): a peer's pid
# means nothing there, so weft must not take it for dead, nor for this process.
#
#   bash tests/test_pidns.sh [build]
#
# Each rank that should be in a namespace of its own starts under
# `unshare --pid --fork --mount-proc` (needs root: else skipped, saying so). Checked,
# with 2 ranks over shm (and, first, without namespaces: the stale-segment sweep keeps a
# dead pid's segment whose lock a live process holds, and removes unlocked ones):
#   - rank 0 in a pid namespace of its own: init and a 8 B-1 MB all-reduce sweep pass,
#     no segment is removed as "left by a job that died" (before 2026-11-28 rank 0 took
#     rank 1's pid for a dead one and removed its live segment: init failed "it is not
#     there"), and rank 0 says rank 1 is in another pid namespace;
#   - both ranks in namespaces of their own, both pid 1: they are not taken for threads
#     of one process (which left them unbound);
#   - test_fail busy, rank 0 in its own namespace: rank 1 busy 6 s outside weft while
#     rank 0 waits in a 64 MB all-reduce: both complete (rank 0 asked about rank 1's pid
#     and reported it lost);
#   - test_fail peer_exit, rank 0 in its own namespace: rank 1 leaves; rank 0's next call
#     fails with PEER_LOST naming it within 2 s, seen through the lock rank 1's segment
#     held while it lived.
set -u
B=${1:-build}
W=$B/bin/weftrun
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-pidns.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

ok()  { PASS=$((PASS + 1)); echo "ok - $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && sed 's/^/   | /' "$2" | tail -n 12; }

# The stale-segment sweep every init makes (no namespace needed): a segment whose pid is
# gone here is removed unless a process holds its lock (its creator, a live rank in
# another pid namespace, whose pid means nothing here: before 2026-11-28 such a live
# segment was removed, and that rank's peers failed "it is not there"); one not whole
# yet (0 bytes: a creator killed during init) is removed too, its lock free 100 ms on.
dead=$((4194304 + RANDOM))          # above pid_max's default: no such process
while kill -0 $dead 2>/dev/null; do dead=$((dead + 1)); done
made=/dev/shm/weft-00000000000000a1-0-00000000000000b1-p$dead
whole=/dev/shm/weft-00000000000000a2-0-00000000000000b2-p$dead
held=/dev/shm/weft-00000000000000a3-0-00000000000000b3-p$dead
: >"$made"
for f in "$whole" "$held"; do
    /usr/bin/python3 -c 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack("<Q",0x4d485354464557)+bytes(4088))' "$f"
done
# a process of "another namespace" holding $held's lock (F_OFD_SETLK, as its creator
# does) until the job is over
/usr/bin/python3 -c '
import fcntl, os, struct, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.fcntl(fd, 37, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 1, 0))   # F_OFD_SETLK
open(sys.argv[2], "w").close()
time.sleep(30)' "$held" "$OUT/locked" &
holder=$!
for _ in $(seq 100); do [ -e "$OUT/locked" ] && break; sleep 0.05; done
env WEFT_TRANSPORT=shm timeout 30 "$W" -n 1 "$B/bin/all_reduce_perf" -b 8 -e 8 >"$OUT/sweep" 2>&1
kill $holder 2>/dev/null
wait $holder 2>/dev/null
if [ -e "$OUT/locked" ] && [ -e "$held" ] && ! [ -e "$whole" ] && ! [ -e "$made" ]; then
    ok "the init's sweep: a dead pid's segment whose lock is held kept, unlocked ones removed"
else
    bad "the init's sweep: held kept $([ -e "$held" ] && echo yes || echo no), whole removed $([ -e "$whole" ] && echo no || echo yes), half-made removed $([ -e "$made" ] && echo no || echo yes) (lock taken: $([ -e "$OUT/locked" ] && echo yes || echo no))" "$OUT/sweep"
fi
rm -f "$made" "$whole" "$held"

if ! unshare --pid --fork --mount-proc true 2>/dev/null; then
    echo "skip - cannot make a pid namespace (unshare --pid needs root)"
    echo "test_pidns.sh: 0 passed, 0 failed"
    exit 0
fi

# job WHO ARGS...: weftrun -n 2 over shm; ranks named in WHO ("0", "0 1") each start in
# a pid namespace of their own
job() {
    local who=$1
    shift
    WHO="$who" WEFT_TRANSPORT=shm WEFT_TIMEOUT=20 timeout -k 5 60 "$W" -n 2 sh -c \
        'for r in $WHO; do [ "$r" = "$WEFT_RANK" ] &&
             exec unshare --pid --fork --kill-child --mount-proc "$0" "$@"; done
         exec "$0" "$@"' "$@"
}

WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=SHM,TOPO job "0" "$B/bin/all_reduce_perf" -b 8 -e 1M -f 2 \
    >"$OUT/a" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q '^ *1048576 ' "$OUT/a" && ! grep -q 'left by a job that died' "$OUT/a" &&
   grep -q 'rank 1 is in another pid namespace' "$OUT/a"; then
    ok "rank 0 in a pid namespace of its own: init and the all-reduces pass, no live segment removed"
else
    bad "rank 0 in a pid namespace of its own: exit $rc" "$OUT/a"
fi

WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=SHM,TOPO job "0 1" "$B/bin/all_reduce_perf" -b 8 -e 64K -f 2 \
    >"$OUT/b" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q '^ *65536 ' "$OUT/b" && ! grep -q 'run in this process (threads)' "$OUT/b"; then
    ok "both ranks pid 1 of namespaces of their own: two processes, not threads of one"
else
    bad "both ranks pid 1 of namespaces of their own: exit $rc" "$OUT/b"
fi

WEFT_TCP_DEAD=2 job "0" "$B/tests/test_fail" busy >"$OUT/c" 2>&1
rc=$?
if [ $rc = 0 ] && [ "$(grep -c '^ok' "$OUT/c")" -ge 2 ]; then
    ok "test_fail busy, rank 0 in its own namespace: a peer busy outside weft is not lost"
else
    bad "test_fail busy, rank 0 in its own namespace: exit $rc" "$OUT/c"
fi

job "0" "$B/tests/test_fail" peer_exit >"$OUT/d" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q '^ok rank 0 after peer exit' "$OUT/d" &&
   grep -q 'rank 1 (in another pid namespace) has left' "$OUT/d"; then
    ok "test_fail peer_exit, rank 0 in its own namespace: the departed peer is lost within 2 s"
else
    bad "test_fail peer_exit, rank 0 in its own namespace: exit $rc" "$OUT/d"
fi

echo "test_pidns.sh: $PASS passed, $FAIL failed"
[ $FAIL = 0 ]
