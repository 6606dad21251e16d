#!/usr/bin/env bash
# test_reg.sh - registered buffers (weft_mem_alloc): the single-copy path through mappings
# is taken where every rank's buffers are registered, and only there, and gives the same
# results as every other path.
#
#   bash tests/test_reg.sh [build]
#
# test_coll --reg checks every result bit for bit; the tuner's debug lines say which path
# each call took. WEFT_REG_MIN=1 and WEFT_DIRECT_MAX=0 send every size through the probe,
# so odd counts, empty blocks and in-place calls all cross it. Every job runs under timeout.
set -u
B=${1:-build}
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-reg.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
COLLS=allreduce,reduce_scatter,allgather,split,nonblocking

ok()  { PASS=$((PASS + 1)); echo "ok - $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; sed 's/^/   | /' "$2" | grep -v DEBUG | tail -n 15; }

# job NAME N REG [ENV...]: test_coll on N shm ranks with --reg REG; leaves the log in $OUT/NAME.
job() {
    local name=$1 n=$2 reg=$3
    shift 3
    env -u WEFT_TRANSPORT WEFT_DEBUG=DEBUG WEFT_DEBUG_SUBSYS=TUNE "$@" timeout -k 5 120 \
        "$B/bin/weftrun" -n "$n" "$B/tests/test_coll" --quick --colls "$COLLS" --reg "$reg" \
        >"$OUT/$name" 2>&1
}
count() { grep -c "$1" "$2"; }

# registered NAME N [ENV...]: every rank registered, every size through the probe; the
# registered path must be taken (at least 100 schedules) and every result exact.
registered() {
    local name=$1 n=$2
    shift 2
    if ! job "$name" "$n" all WEFT_REG_MIN=1 WEFT_DIRECT_MAX=0 "$@"; then
        bad "$name: test_coll failed" "$OUT/$name"
    elif [ "$(count 'algo cma (registered buffers)' "$OUT/$name")" -lt 100 ]; then
        bad "$name: the registered path was not taken" "$OUT/$name"
    else
        ok "$name: $(count 'algo cma (registered buffers)' "$OUT/$name") registered schedules, results exact"
    fi
}

for n in 2 3 4; do
    registered "registered-n$n" "$n"
done

# Rank 1 allocates with malloc: every call must notice in its probe and run the ring.
name=mixed-n2
if ! job "$name" 2 even WEFT_REG_MIN=1 WEFT_DIRECT_MAX=0; then
    bad "$name: test_coll failed" "$OUT/$name"
elif [ "$(count 'algo probe' "$OUT/$name")" -lt 100 ] ||
     [ "$(count 'algo cma (registered buffers)' "$OUT/$name")" -ne 0 ]; then
    bad "$name: expected probes and no registered path" "$OUT/$name"
else
    ok "$name: $(count 'algo probe' "$OUT/$name") probes, none took the registered path, results exact"
fi

# The same with 3 ranks (1 of 3 not registered), on the ring after each probe.
name=mixed-n3
if ! job "$name" 3 even WEFT_REG_MIN=1 WEFT_DIRECT_MAX=0; then
    bad "$name: test_coll failed" "$OUT/$name"
else
    ok "$name: results exact"
fi

# Ranks that differ about in place (test_coll's mixed in-place all-reduce, 6 MB and 10 MB
# with --reg): above WEFT_REG_MIN=4M all probe; a call with a rank in place goes through
# mappings only from twice that, so 6 MB runs the ring and 10 MB the registered path
# (WEFT_SHM_FAR=0: where the two cores share no cache 6 MB would go by single copy).
name=mixed-inplace
if ! job "$name" 2 all WEFT_REG_MIN=4M WEFT_SHM_FAR=0; then
    bad "$name: test_coll failed" "$OUT/$name"
elif ! grep -q 'count 1572864 int32: algo ring' "$OUT/$name" ||
     ! grep -q 'count 2621440 int32: algo cma (registered buffers)' "$OUT/$name"; then
    bad "$name: expected the ring at 6 MB and the registered path at 10 MB" "$OUT/$name"
else
    ok "$name: ring at 6 MB, registered at 10 MB, results exact"
fi

# Below WEFT_REG_MIN (default 64M per rank) nothing probes: small calls pay nothing.
name=default-threshold
if ! job "$name" 2 all; then
    bad "$name: test_coll failed" "$OUT/$name"
elif [ "$(count 'algo probe' "$OUT/$name")" -ne 0 ]; then
    bad "$name: calls under WEFT_REG_MIN probed" "$OUT/$name"
else
    ok "$name: no probe under WEFT_REG_MIN"
fi

# The same over UCX (when built in): its one-sided reads with packed rkeys instead of
# mappings; registered regions stay registered (ucx_rma.c), other memory per call.
if grep -q 'libucp\.so\.0' "$B/lib/libweft.so"; then
    for n in 2 3; do
        registered "registered-n$n-ucx" "$n" WEFT_TRANSPORT=ucx
    done
    name=mixed-n2-ucx
    if ! job "$name" 2 even WEFT_TRANSPORT=ucx WEFT_REG_MIN=1 WEFT_DIRECT_MAX=0; then
        bad "$name: test_coll failed" "$OUT/$name"
    elif [ "$(count 'algo cma (registered buffers)' "$OUT/$name")" -ne 0 ]; then
        bad "$name: expected no registered path" "$OUT/$name"
    else
        ok "$name: none took the registered path, results exact"
    fi
    name=cma-n2-ucx
    if ! job "$name" 2 even WEFT_TRANSPORT=ucx WEFT_ALGO=cma; then   # rank 0 registered, rank 1 not
        bad "$name: test_coll failed" "$OUT/$name"
    elif [ "$(count ': algo cma' "$OUT/$name")" -lt 100 ]; then
        bad "$name: WEFT_ALGO=cma did not run single copy over ucx" "$OUT/$name"
    else
        ok "$name: $(count ': algo cma' "$OUT/$name") single-copy schedules over ucx, results exact"
    fi
    # Unregistered buffers, the tuner's defaults: single copy from 256K per rank where
    # UCX reaches the peer over shared memory (UCX_TLS unset, or naming it as shm), never
    # where it emulates its reads over a network (UCX_TLS=tcp,self on this host:
    # tp_ep_t.rma_net), and no UCX warning for the shared-memory setting weft makes only
    # where UCX_TLS leaves shared memory (^ugni_smsg does: names are whole words).
    for tls in default shm,self tcp,self ^ugni_smsg; do
        name=default-n2-ucx-$tls
        t=()
        [ "$tls" != default ] && t=(UCX_TLS=$tls)
        env WEFT_TRANSPORT=ucx WEFT_DEBUG=DEBUG WEFT_DEBUG_SUBSYS=TUNE "${t[@]}" \
            timeout -k 5 120 "$B/bin/weftrun" -n 2 "$B/tests/test_coll" --quick \
            --colls allreduce,reduce_scatter,allgather --counts 1000,300000 >"$OUT/$name" 2>&1
        rc=$?
        cma=$(count ': algo cma' "$OUT/$name")
        if [ "$rc" -ne 0 ]; then
            bad "$name: test_coll failed" "$OUT/$name"
        elif [ "$tls" != tcp,self ] && [ "$cma" -lt 10 ]; then
            bad "$name: only $cma single-copy schedules over UCX's shared memory" "$OUT/$name"
        elif [ "$tls" = tcp,self ] && [ "$cma" -ne 0 ]; then
            bad "$name: $cma single-copy schedules over UCX's emulated reads" "$OUT/$name"
        elif grep -q 'invalid configuration' "$OUT/$name"; then
            bad "$name: UCX warned of weft's configuration" "$OUT/$name"
        else
            ok "$name: $cma single-copy schedules by default, results exact"
        fi
    done
fi

echo "test_reg: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
