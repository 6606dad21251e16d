#!/usr/bin/env bash
# test_shm_full.sh - a /dev/shm too small for the shm rings (a container's default is
# 64 MB; each rank takes WEFT_BUFFSIZE for every other rank of its host): init fails on
# every rank with an error that says so, instead of a SIGBUS at the first store into a
# page the tmpfs cannot give (before 2026-11-27: a rank killed by SIGBUS in init).
#
#   bash tests/test_shm_full.sh [build]
#
# Runs in a mount namespace of its own (unshare -m) with a 6 MB tmpfs on /dev/shm (needs
# root: else skipped, saying so):
#   - 2 ranks at WEFT_BUFFSIZE=4M (8 MB of rings): init fails on both within 10 s, no
#     rank dies of a signal, and one names /dev/shm and WEFT_BUFFSIZE;
#   - the same at WEFT_BUFFSIZE=1M: the all-reduce runs;
#   - WEFT_BUFFSIZE unset, 4 ranks in 16 MB (12 rings of 4M would take 48 MB): the rings
#     shrink to fit half of it (680K), host rank 0 says so once, all-reduce and all-to-all
#     (every pair's ring) run and check their results (before 2026-11-28: init failed, as
#     8 ranks in a container's default 64 MB did); test_coll's splits there (a parity
#     split sets up two groups at once: each fitting half of what was free overfilled
#     it, so a split's rings are no larger than its parent's); 2 ranks in 64 MB keep 4M,
#     no word;
#   - 4M again with madvise(MADV_POPULATE_WRITE) refused as a kernel before 5.14 refuses
#     it (EINVAL; an LD_PRELOAD shim built here), where the rings' pages were touched
#     one by one: init fails the same way, no SIGBUS (before 2026-11-28: rank killed by
#     signal 7);
#   - 4 ranks, rank 0's rings refused (MADV_POPULATE_WRITE ENOMEM in rank 0 only: a
#     memory cgroup at its limit), launched by hand so that nobody stops the others:
#     rank 0 fails saying so, ranks 1-3 with PEER_LOST naming rank 0 (before 2026-11-28
#     each rank that found a failed rank's segment gone told the job it had failed
#     itself, "system error: cannot open rank 3's segment");
#   - rings sized from the host's budget are taken at their first frame (lazy): a ring
#     all-reduce of 5 ranks takes each rank's rings with its two neighbours only (the INFO
#     line at destroy), probe_lazy's crossed sends and small sends to a rank elsewhere
#     complete, and a ring refused then (rank 0's MADV_POPULATE_WRITE over a page, ENOMEM)
#     fails rank 0's call saying so and the others' naming rank 0; two splits made
#     before any frame (probe_lazy dups) leave their parent's promised rings out of the
#     free space, so all-to-alls on all three fit a 16 MB /dev/shm;
#   - 8 ranks, each on a "host" of its own (WEFT_HOSTID), with a 128K tmpfs: no rank has
#     a local peer, so none takes ring pages, and the all-reduce runs over tcp (before
#     2026-11-28 each took a control page per rank of the job: 36K each, init failed).
set -u
B=${1:-build}
W=$B/bin/weftrun
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-shmfull.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

ok()  { PASS=$((PASS + 1)); echo "ok - $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && sed 's/^/   | /' "$2" | tail -n 12; }

if ! unshare -m sh -c 'mount -t tmpfs -o size=1M tmpfs /dev/shm' 2>/dev/null; then
    echo "skip - cannot mount a tmpfs on /dev/shm in a mount namespace (needs root)"
    echo "test_shm_full.sh: 0 passed, 0 failed"
    exit 0
fi

# job BUFFSIZE [PRELOAD]: 2 shm ranks in a namespace whose /dev/shm holds 6 MB
job() {
    env WEFT_TRANSPORT=shm WEFT_BUFFSIZE="$1" WEFT_TIMEOUT=10 ${2:+LD_PRELOAD=$2} timeout 60 \
        unshare -m sh -c 'mount -t tmpfs -o size=6M tmpfs /dev/shm && exec "$@"' sh \
        "$W" -n 2 "$B/bin/all_reduce_perf" -b 1M -e 1M -n 5 -w 1
}

# full NAME [PRELOAD]: the 4M job must fail at init, saying so, no rank killed
full() {
    local t0 rc dt
    t0=$(date +%s)
    job 4M "${2:-}" >"$OUT/full" 2>&1
    rc=$?
    dt=$(( $(date +%s) - t0 ))
    if [ $rc != 0 ] && [ $rc != 124 ] && [ $dt -lt 10 ] && grep -q 'no room in /dev/shm' "$OUT/full" &&
       grep -q 'lower WEFT_BUFFSIZE' "$OUT/full" && ! grep -qi 'signal\|bus error\|SIGBUS' "$OUT/full"; then
        ok "$1: init fails in ${dt}s saying so, no rank killed by a signal"
    else
        bad "$1: exit $rc after ${dt}s" "$OUT/full"
    fi
}

full "rings larger than /dev/shm"
job 1M >"$OUT/fits" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q '^ *1048576 ' "$OUT/fits"; then
    ok "WEFT_BUFFSIZE=1M in the same /dev/shm: the all-reduce runs"
else
    bad "WEFT_BUFFSIZE=1M in the same /dev/shm: exit $rc" "$OUT/fits"
fi
# fitjob SIZE N PERF ARGS...: N shm ranks, WEFT_BUFFSIZE unset, in a SIZE /dev/shm
fitjob() {
    local size=$1 n=$2
    shift 2
    env -u WEFT_BUFFSIZE WEFT_TRANSPORT=shm WEFT_TIMEOUT=10 timeout 90 \
        unshare -m sh -c 'mount -t tmpfs -o size='"$size"' tmpfs /dev/shm && exec "$@"' sh \
        "$W" -n "$n" "$@"
}
fitjob 16M 4 "$B/bin/all_reduce_perf" -b 1M -e 1M -n 2 -w 1 >"$OUT/fit" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "^ *1048576 " "$OUT/fit" &&
   [ "$(grep -c ' WARN shm: /dev/shm is small for the 4 ranks of this host: rings of 680K' "$OUT/fit")" = 1 ] &&
   ! grep -q 'WARN' <(grep -v 'is small for the' "$OUT/fit"); then
    ok "WEFT_BUFFSIZE unset, 4 ranks in a 16 MB /dev/shm: rings of 680K, said once, the all-reduce runs"
else
    bad "WEFT_BUFFSIZE unset, 4 ranks in a 16 MB /dev/shm: exit $rc" "$OUT/fit"
fi
fitjob 16M 4 "$B/bin/alltoall_perf" -b 1M -e 1M -n 2 -w 1 >"$OUT/fit2" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "^ *1048576 " "$OUT/fit2"; then
    ok "the same, all-to-all (every pair's ring): runs"
else
    bad "the same, all-to-all: exit $rc" "$OUT/fit2"
fi
# (the parity split's groups of 2 would fit 1.7M rings each in what is left: at INFO
# they say so unless their rings stay at the parent's 680K)
WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=SHM fitjob 16M 4 "$B/tests/test_coll" --quick --colls split \
    >"$OUT/fit4" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q 'test_coll: [0-9]* passed, 0 failed' "$OUT/fit4" &&
   [ "$(grep -c ' WARN ' "$OUT/fit4")" = 1 ] &&
   ! grep -q 'is small for the 2 ranks of this host' "$OUT/fit4"; then
    ok "the same, splits (two groups set up at once): their rings no larger than the parent's, no other warning"
else
    bad "the same, splits: exit $rc" "$OUT/fit4"
fi
fitjob 64M 2 "$B/bin/all_reduce_perf" -b 4M -e 4M -n 3 -w 1 >"$OUT/fit3" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q '^ *4194304 ' "$OUT/fit3" && ! grep -q 'WARN' "$OUT/fit3"; then
    ok "WEFT_BUFFSIZE unset, 2 ranks in 64 MB: rings of 4M, nothing said"
else
    bad "WEFT_BUFFSIZE unset, 2 ranks in 64 MB: exit $rc" "$OUT/fit3"
fi
# a kernel before 5.14: MADV_POPULATE_WRITE unknown (EINVAL), every other advice real
cat >"$OUT/madv.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
int madvise(void *a, size_t n, int advice)
{
    int (*real)(void *, size_t, int) = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "madvise");
    if (advice == 23) {             /* MADV_POPULATE_WRITE */
        errno = EINVAL;
        return -1;
    }
    return real(a, n, advice);
}
EOF
if ${CC:-cc} -shared -fPIC -o "$OUT/madv.so" "$OUT/madv.c" -ldl 2>"$OUT/cc.log"; then
    full "rings larger than /dev/shm, MADV_POPULATE_WRITE refused (kernel < 5.14)" "$OUT/madv.so"
else
    bad "cannot build the madvise shim" "$OUT/cc.log"
fi
# rank0_job TAG COND: 4 shm ranks launched by hand (nobody stops the others when one
# fails), all_reduce_perf of 1M, under a madvise shim that refuses MADV_POPULATE_WRITE
# with ENOMEM in rank 0 where COND (C, over n: the bytes advised) holds; the output of
# rank r in $OUT/TAG$r. Fails where the shim does not build.
rank0_job() {
    local tag=$1 cond=$2 r port
    sed -e 's/if (advice == 23) {/const char *r = getenv("WEFT_RANK");\n    if (advice == 23 \&\& '"$cond"' \&\& r \&\& r[0] == 0x30 \&\& !r[1]) {/' \
        -e 's/errno = EINVAL;/errno = ENOMEM;/' -e 's/#include <stddef.h>/#include <stddef.h>\n#include <stdlib.h>/' \
        "$OUT/madv.c" >"$OUT/madv$tag.c"
    ${CC:-cc} -shared -fPIC -o "$OUT/madv$tag.so" "$OUT/madv$tag.c" -ldl 2>"$OUT/cc$tag.log" ||
        return 1
    port=$(/usr/bin/python3 "$(dirname "$0")/weftlib.py")
    for r in 0 1 2 3; do
        env -u WEFT_BUFFSIZE WEFT_TRANSPORT=shm WEFT_TIMEOUT=10 WEFT_RANK=$r WEFT_WORLD_SIZE=4 \
            WEFT_ADDR=127.0.0.1:$port WEFT_SECRET=shm-full-test-$tag-$port \
            LD_PRELOAD="$OUT/madv$tag.so" \
            timeout 30 "$B/bin/all_reduce_perf" -b 1M -e 1M -n 2 -w 1 >"$OUT/$tag$r" 2>&1 &
    done
    wait
}
# judge_ranks TAG P0 PN WHAT: rank0_job's ranks said what they should: rank 0 matches P0,
# ranks 1-3 PN (extended regexps) and none ran the all-reduce; no rank died of a signal
judge_ranks() {
    local tag=$1 p0=$2 pn=$3 what=$4 good=1 r
    grep -Eq "$p0" "$OUT/${tag}0" || good=0
    for r in 1 2 3; do
        grep -Eq "$pn" "$OUT/$tag$r" && ! grep -q '^ *1048576 ' "$OUT/$tag$r" || good=0
    done
    grep -qi 'signal\|bus error' "$OUT/$tag"[0-3] && good=0
    if [ $good = 1 ]; then
        ok "$what"
    else
        for r in 0 1 2 3; do echo "rank $r:"; cat "$OUT/$tag$r"; done >"$OUT/$tag"
        bad "$what: not every rank said what it should" "$OUT/$tag"
    fi
}
# rank 0's rings refused: the others blame rank 0
if rank0_job r 1; then
    judge_ranks r 'init failed: system error: shm: no memory for the rings' \
        'init failed: peer lost: .*rank 0' \
        "rank 0's rings refused: it says why, ranks 1-3 fail naming rank 0"
else
    bad "cannot build the rank-0 madvise shim" "$OUT/ccr.log"
fi
# lazy rings (their sizes from the host's budget): a ring all-reduce takes the rings of
# its two neighbours only, the INFO line at destroy says so on every rank; a send to a
# peer blocked in its own send, and small sends to a rank elsewhere, complete (probe_lazy,
# as for ib's lazy rings)
env -u WEFT_BUFFSIZE -u WEFT_CHUNK WEFT_TRANSPORT=shm WEFT_ALGO=ring WEFT_TIMEOUT=20 \
    WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=SHM timeout 60 "$W" -n 5 "$B/tests/probe_lazy" ring \
    >"$OUT/lazy" 2>&1
rc=$?
n=$(grep -c 'of the rings with its 4 local peers, 1 to and 1 from them carried frames' "$OUT/lazy")
if [ $rc = 0 ] && [ "$n" = 5 ]; then
    ok "lazy rings: a ring all-reduce of 5 ranks takes each rank's rings to and from its neighbours only"
else
    bad "lazy rings: exit $rc, $n of 5 ranks said 1 to and 1 from" "$OUT/lazy"
fi
for m in crossed elsewhere; do
    env -u WEFT_BUFFSIZE WEFT_TRANSPORT=shm WEFT_ALGO=ring WEFT_TIMEOUT=10 timeout 60 \
        "$W" -n 4 "$B/tests/probe_lazy" $m >"$OUT/$m" 2>&1
    rc=$?
    if [ $rc = 0 ] && [ "$(grep -c "probe_lazy $m rank .: passed" "$OUT/$m")" = 4 ]; then
        ok "lazy rings: probe_lazy $m"
    else
        bad "lazy rings: probe_lazy $m: exit $rc" "$OUT/$m"
    fi
done
# splits made before any frame see the free space their parent's untaken rings are
# promised (shm_promised), and shrink: three communicators' all-to-alls in 16 MB fit
# (before, each saw all 16 MB free and the later first frames found no room)
fitjob 16M 4 "$B/tests/probe_lazy" dups >"$OUT/dups" 2>&1
rc=$?
if [ $rc = 0 ] && [ "$(grep -c 'probe_lazy dups rank .: passed' "$OUT/dups")" = 4 ]; then
    ok "lazy rings: two splits made before any frame, then all-to-alls on all three, in 16 MB"
else
    bad "lazy rings: splits before any frame in 16 MB: exit $rc" "$OUT/dups"
fi
# a lazy ring that cannot be taken at its first frame (rank 0's MADV_POPULATE_WRITE of
# more than a page refused, ENOMEM: /dev/shm or the memory filled up after init): rank 0's
# call fails saying so, the others' calls fail naming rank 0, nobody dies of a signal
if rank0_job l 'n > 4096'; then
    judge_ranks l 'shm: no memory for the ring .* rank [1-3] \(.*taken at its first frame\)' \
        'rank 0 failed \(system error\)|rank 0 \(pid [0-9]+\) has exited' \
        "a lazy ring refused at its first frame: rank 0 says why, ranks 1-3 fail naming rank 0"
else
    bad "cannot build the first-frame madvise shim" "$OUT/ccl.log"
fi
# 8 ranks, a host each: no local peer, no ring pages; tcp between them
env WEFT_TIMEOUT=20 timeout 90 unshare -m sh -c \
    'mount -t tmpfs -o size=128k tmpfs /dev/shm && exec "$@"' sh \
    "$W" -n 8 sh -c 'WEFT_HOSTID=h$WEFT_RANK exec "$0" "$@"' \
    "$B/bin/all_reduce_perf" -b 64K -e 64K -n 2 -w 1 >"$OUT/hosts" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q '^ *65536 ' "$OUT/hosts"; then
    ok "8 ranks on 8 hosts with a 128K /dev/shm: init takes no ring pages, the all-reduce runs"
else
    bad "8 ranks on 8 hosts with a 128K /dev/shm: exit $rc" "$OUT/hosts"
fi
echo "test_shm_full.sh: $PASS passed, $FAIL failed"
[ $FAIL = 0 ]
