#!/usr/bin/env bash
# test_shm_far.sh - WEFT_SHM_FAR: two ranks of one host agree at init on whether their
# cores share no cache, and the tuner moves all-reduce and reduce-scatter by single copy
# where they do not (comm/connect.c: connect_cores_far; comm/algo.h: algo_cma_far_min).
#
#   bash tests/test_shm_far.sh [build]
#
# Checked, 2 ranks on shm, each job under `timeout`:
#   - auto: both ranks log the same verdict, with the round trip rank 0 timed;
#   - the lower rank's setting wins: rank 0 WEFT_SHM_FAR=1 and rank 1 =0 both say far,
#     pick cma for all-reduce from 512K and reduce-scatter from 64K per rank (ring and
#     direct below), and every result is right; rank 0 =0, rank 1 =1: both near, ring;
#   - WEFT_CMA_MIN still rules where it is set;
#   - a rank whose init fails after connecting (a bad WEFT_BIND) does not leave the other
#     waiting in the probe: that one's init fails within 2 s naming it (test_fail
#     init_bind), whichever rank timed.
# The probe runs only where single-copy reads run at about a copy's speed (init measures
# that once per process; on this VM it reads 1.7-2.2x, and a busy moment can read over
# the 2.5x bar): a job whose ranks log "cores: not timed (... slow here)" is run again,
# up to 3 times; where the first job reads slow all 3 times, the test checks instead that
# WEFT_SHM_FAR=1 is ignored there (slow_host); a host with no single copy at all skips
# the test.
set -u
B=${1:-build}
W=$B/bin/weftrun
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-far.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

ok()  { PASS=$((PASS + 1)); echo "ok - $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && sed 's/^/   | /' "$2" | tail -n 12; }

# retry CMD...: runs CMD (which writes $OUT/$name) up to 3 times while its ranks say the
# probe did not run because single-copy reads measured slow this time
retry() {
    local i rc
    for i in 1 2 3; do
        "$@"
        rc=$?
        grep -q 'cores: not timed (single-copy reads slow here)' "$OUT/$name" || return $rc
        echo "# $name: single-copy reads measured slow at init (try $i): again"
    done
    return $rc
}

# job NAME FAR0 FAR1 TOOL [env...]: TOOL (all_reduce_perf, reduce_scatter_perf) on 2 shm
# ranks, rank 0 with WEFT_SHM_FAR=FAR0 and rank 1 with FAR1 ("" = unset); the tuner's
# choices logged; output in $OUT/NAME
job1() {
    local f0=$2 f1=$3 tool=$4; shift 4
    env -u WEFT_SHM_FAR -u WEFT_CMA_MIN -u WEFT_ALGO WEFT_TRANSPORT=shm WEFT_DEBUG=DEBUG \
        WEFT_DEBUG_SUBSYS=TUNE "$@" timeout 60 "$W" -n 2 sh -c \
        'f=$1; [ "$WEFT_RANK" = 1 ] && f=$2; [ -n "$f" ] && export WEFT_SHM_FAR=$f; shift 2; exec "$@"' \
        sh "$f0" "$f1" "$B/bin/$tool" -b 32K -e 1M -f 2 -n 2 -w 1 >"$OUT/$name" 2>&1
}
job() {
    local name=$1
    retry job1 "$@"
}

# verdict NAME: "cores: ..." when both ranks logged one such line, the same; else what
# they logged, marked
verdict() {
    local l0 l1
    l0=$(grep '\[0\] weft INFO cores:' "$OUT/$1" | sed 's/.*weft INFO //')
    l1=$(grep '\[1\] weft INFO cores:' "$OUT/$1" | sed 's/.*weft INFO //')
    if [ -n "$l0" ] && [ "$l0" = "$l1" ] && [ "$(printf '%s\n' "$l0" | wc -l)" = 1 ]; then
        printf '%s\n' "$l0"
    else
        printf 'DIFFER: rank 0 "%s", rank 1 "%s"\n' "$l0" "$l1"
    fi
}

# algo NAME COLL BYTES: the algorithm both ranks logged for COLL at BYTES per rank
# (uint8 counts: bytes); "mixed" when they differ
algo() {
    local name=$1 coll=$2 count=$3
    grep " $coll count $count float" "$OUT/$name" | sed 's/.*algo \([a-z]*\).*/\1/' | sort -u |
        awk 'BEGIN { n = 0 } { a = $0; n++ } END { print n == 1 ? a : n ? "mixed" : "none" }'
}

results_ok() {
    grep -q 'Out of bounds values : 0 OK' "$OUT/$1" &&
        ! awk '/^ +[0-9]+ +[0-9]+ +float/ && ($9 != 0 || $13 != 0) { bad = 1 } END { exit !bad }' "$OUT/$1"
}

# slow_host: on a host where single-copy reads run over 2.5x a copy's time at every try
# (an AMD EPYC VM here read 7.8-8.0x), WEFT_SHM_FAR is ignored by design: check that (both
# ranks say so, the ring stays, results are right) instead of the far choices, which
# cannot be reached here
slow_host() {
    local ratio a1 a0
    ratio=$(grep -o 'single-copy reads: [0-9.]*x' "$OUT/auto" | head -n 1)
    echo "# ${ratio#single-copy reads: } a copy's time for single-copy reads on every try: WEFT_SHM_FAR is ignored here; checking that instead of the far choices"
    # (a job that reads fast after all, the load having passed, must then go far)
    name=far11
    if job1 far11 1 1 all_reduce_perf && results_ok far11; then
        v=$(verdict far11)
        a1=$(algo far11 allreduce 131072)
        if [ "$v" = "cores: not timed (single-copy reads slow here), WEFT_SHM_FAR=1 ignored: all-reduce and reduce-scatter keep the ring" ] &&
            [ "$a1" = ring ]; then
            ok "slow single copy, both ranks WEFT_SHM_FAR=1: both say it is ignored; all-reduce 512K $a1"
        elif [[ $v == "cores: far (WEFT_SHM_FAR=1 on rank 0)"* ]] && [ "$a1" = cma ]; then
            ok "both ranks WEFT_SHM_FAR=1, single copy fast this time: far; all-reduce 512K $a1"
        else
            bad "slow single copy, WEFT_SHM_FAR=1: '$v', all-reduce 512K $a1 (want ignored and ring, or far and cma)" "$OUT/far11"
        fi
    else
        bad "slow single copy, WEFT_SHM_FAR=1: job failed or wrong results" "$OUT/far11"
    fi
    name=rsfar
    if job1 rsfar 1 1 reduce_scatter_perf && results_ok rsfar; then
        a1=$(algo rsfar reduce_scatter 16384)
        a0=$(algo rsfar reduce_scatter 131072)
        if grep -q 'cores: not timed (single-copy reads slow here)' "$OUT/rsfar"; then
            [ "$a1" != cma ] && [ "$a1" != none ] && [ "$a0" = ring ]
        else
            [ "$a1" = cma ]
        fi
        if [ $? = 0 ]; then
            ok "slow single copy, reduce-scatter with WEFT_SHM_FAR=1: 64K per rank $a1, 512K $a0"
        else
            bad "slow single copy, reduce-scatter: 64K per rank $a1, 512K $a0 (want no cma where slow, cma where not)" "$OUT/rsfar"
        fi
    else
        bad "slow single copy, reduce-scatter: job failed or wrong results" "$OUT/rsfar"
    fi
    echo "test_shm_far: $PASS passed, $FAIL failed (far choices skipped: single copy slow here)"
    [ "$FAIL" = 0 ]
    exit
}

# 1. auto: one verdict on both ranks, naming rank 0's measurement
if job auto "" "" all_reduce_perf; then
    v=$(verdict auto)
    if grep -q 'cores: not timed (single-copy reads not' "$OUT/auto"; then
        echo "# no single copy between two ranks here (or not by shm): nothing to test"
        echo "test_shm_far: 0 passed, 0 failed (skipped: $v)"
        exit 0
    fi
    grep -q 'cores: not timed (single-copy reads slow here)' "$OUT/auto" && slow_host
    # (or "not measured": rank 1 came over 2 s late, or the round trips took over 20 ms
    # on a busy host; still one verdict on both ranks)
    if [[ $v =~ ^cores:\ (far|near)\ \((a\ round\ trip\ of\ [0-9]+\ ns|WEFT_SHM_FAR=0\ or\ not\ measured)\ on\ rank\ 0\) ]]; then
        ok "auto: both ranks take rank 0's verdict: $v"
    else
        bad "auto: verdicts differ or none: $v" "$OUT/auto"
    fi
else
    bad "auto: job failed" "$OUT/auto"
fi

# 2. rank 0 far, rank 1 near: rank 0's word, cma from 512K (all-reduce; 256K ring)
if job far01 1 0 all_reduce_perf && results_ok far01; then
    v=$(verdict far01)
    a1=$(algo far01 allreduce 131072)     # 512K of float
    a0=$(algo far01 allreduce 65536)      # 256K
    if [[ $v == "cores: far (WEFT_SHM_FAR=1 on rank 0)"* ]] && [ "$a1" = cma ] && [ "$a0" = ring ]; then
        ok "rank 0 WEFT_SHM_FAR=1, rank 1 =0: both far; all-reduce 512K $a1, 256K $a0"
    else
        bad "rank 0 =1, rank 1 =0: '$v', all-reduce 512K $a1, 256K $a0" "$OUT/far01"
    fi
else
    bad "rank 0 =1, rank 1 =0: job failed or wrong results" "$OUT/far01"
fi

# 3. rank 0 near, rank 1 far: both near, the ring
if job far10 0 1 all_reduce_perf && results_ok far10; then
    v=$(verdict far10)
    a1=$(algo far10 allreduce 262144)
    if [[ $v == "cores: near (WEFT_SHM_FAR=0"* ]] && [ "$a1" = ring ]; then
        ok "rank 0 WEFT_SHM_FAR=0, rank 1 =1: both near; all-reduce 1M $a1"
    else
        bad "rank 0 =0, rank 1 =1: '$v', all-reduce 1M $a1" "$OUT/far10"
    fi
else
    bad "rank 0 =0, rank 1 =1: job failed or wrong results" "$OUT/far10"
fi

# 4. reduce-scatter far: cma from 64K per rank (128K in all), below it direct or ring
if job rsfar 1 1 reduce_scatter_perf && results_ok rsfar; then
    a1=$(algo rsfar reduce_scatter 16384)     # 64K per rank
    a0=$(algo rsfar reduce_scatter 8192)      # 32K per rank: direct
    if [ "$a1" = cma ] && [ "$a0" != cma ] && [ "$a0" != none ]; then
        ok "reduce-scatter far: 64K per rank $a1, 32K $a0"
    else
        bad "reduce-scatter far: 64K per rank $a1, 32K $a0" "$OUT/rsfar"
    fi
else
    bad "reduce-scatter far: job failed or wrong results" "$OUT/rsfar"
fi

# 5. WEFT_CMA_MIN set: it rules, far or not
if job cmamin 1 1 all_reduce_perf WEFT_CMA_MIN=1G && results_ok cmamin; then
    a1=$(algo cmamin allreduce 262144)
    if [ "$a1" = ring ]; then
        ok "far with WEFT_CMA_MIN=1G: all-reduce 1M $a1"
    else
        bad "far with WEFT_CMA_MIN=1G: all-reduce 1M $a1 (want ring)" "$OUT/cmamin"
    fi
else
    bad "WEFT_CMA_MIN=1G: job failed or wrong results" "$OUT/cmamin"
fi

# 6. a rank whose init fails after connecting: the other is not left in the probe
bind1() {
    env -u WEFT_SHM_FAR -u WEFT_BIND WEFT_TRANSPORT=shm WEFT_TIMEOUT=20 WEFT_DEBUG=INFO \
        WEFT_DEBUG_SUBSYS=TUNE timeout 60 "$W" -n 2 "$B/tests/test_fail" init_bind "$1" \
        >"$OUT/$name" 2>&1
}
for v in 0 1; do
    name=bind$v
    if retry bind1 "$v" && [ "$(grep -c '^ok' "$OUT/bind$v")" = 2 ]; then
        ok "rank $v's init fails after connecting: the other's fails within 2 s"
    else
        bad "rank $v's init fails after connecting" "$OUT/bind$v"
    fi
done

echo "test_shm_far: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
