# sim_lib.sh - what bench/sim_calibrate.sh and bench/sim_check.sh share (sourced, not run):
# running a weft perf tool on N ranks of this machine's shared memory, or on two network
# namespace "hosts" (bench/netns.sh: weftA and weftB over one veth pair, each with its own
# hostname so weft sees two hosts), and reading a time out of its table.
#
# Every rank runs under timeout (SIM_RANK_TIMEOUT, default 300 s). Namespaces this file
# brings up are taken down again by sim_cleanup (the callers trap it on EXIT); ones that
# were there before are left as they were.

B=${BUILD:-build}
SIM_RANK_TIMEOUT=${SIM_RANK_TIMEOUT:-300}
SIM_TMP=$(mktemp -d "${TMPDIR:-/tmp}/weft_sim.XXXXXX")
SIM_NS_MADE=

sim_die() { echo "$(basename "$0"): $*" >&2; exit 2; }

sim_cleanup() {
    [ -n "$SIM_NS_MADE" ] && sh bench/netns.sh down >/dev/null 2>&1
    rm -rf "$SIM_TMP"
}

sim_need() {
    local f
    for f in "$@"; do [ -x "$B/$f" ] || sim_die "$B/$f is missing (make all)"; done
}

# sim_shm N TOOL ARGS...: the tool on N ranks on shared memory; rank 0's table on stdout.
sim_shm() {
    local n=$1
    shift
    timeout -k 5 "$SIM_RANK_TIMEOUT" env -u WEFT_TRANSPORT "$B/bin/weftrun" -n "$n" "$B/bin/$@"
}

# sim_net PER TOOL ARGS...: the tool on 2 namespace hosts x PER ranks (rank r on host
# r / PER); rank 0's table on stdout, the others' output in $SIM_TMP. The ranks do not
# spin (WEFT_SPIN=0 unless set): the two "hosts" share this machine's cores, and weft's
# automatic setting weighs only one host's ranks against them, so with 2 ranks per host
# on 2 cores every rank would spin and each wait for the next time slice (an 8-byte
# all-reduce on 2 x 2: about 1.3 ms spinning, 28 us not).
sim_net() {
    local per=$1 n=$(($1 * 2)) r ns addr=10.77.0.1 port=$((20000 + RANDOM % 20000)) rc=0
    shift
    [ "$(id -u)" = 0 ] || sim_die "namespace hosts need root"
    if ! ip netns list 2>/dev/null | grep -qw weftA; then
        sh bench/netns.sh up >/dev/null || sim_die "bench/netns.sh up failed"
        SIM_NS_MADE=1
    fi
    local secret
    secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    local pids=()
    for ((r = 0; r < n; r++)); do
        ns=weftA
        [ $r -ge "$per" ] && ns=weftB
        env -u WEFT_TRANSPORT WEFT_RANK=$r WEFT_WORLD_SIZE=$n WEFT_LOCAL_RANK=$((r % per)) \
            WEFT_LOCAL_SIZE=$per WEFT_ADDR=$addr:$port WEFT_SECRET=$secret \
            WEFT_SPIN=${WEFT_SPIN:-0} \
            timeout -k 5 "$SIM_RANK_TIMEOUT" ip netns exec "$ns" unshare --uts \
            sh -c 'hostname "$0" && exec "$@"' "$ns" "$B/bin/$@" \
            > "$SIM_TMP/net.$r" 2>&1 < /dev/null &
        pids+=($!)
    done
    for r in "${!pids[@]}"; do wait "${pids[$r]}" || rc=$?; done
    if [ $rc != 0 ]; then
        echo "$(basename "$0"): a rank failed (status $rc):" >&2
        tail -n 5 "$SIM_TMP"/net.* >&2
        return $rc
    fi
    cat "$SIM_TMP/net.0"
}

# sim_time SIZE < table: the out-of-place time (us) of the row of SIZE bytes.
sim_time() {
    awk -v s="$1" '$1 == s && $1 ~ /^[0-9]+$/ { print $6; exit }'
}

# sim_rows < table: "size time" for every out-of-place row.
sim_rows() {
    awk '$1 ~ /^[0-9]+$/ && $6 != "N/A" { print $1, $6 }'
}

# sim_median R TABLES CMD...: runs CMD (a perf tool; its table on stdout) R times, one
# after the other, appending each table to the file TABLES, and prints "size time" for
# every out-of-place row: the median of the R times. Launches of weft differ (issue 20:
# some run large sizes several times slower), so one launch is not a measurement.
sim_median() {
    local r=$1 tables=$2 i
    shift 2
    : >"$tables"
    for ((i = 0; i < r; i++)); do
        "$@" >>"$tables" || return 1
    done
    local size
    for size in $(sim_rows <"$tables" | awk '{ print $1 }' | sort -n -u); do
        echo "$size $(sim_rows <"$tables" | awk -v s="$size" '$1 == s { print $2 }' | sim_med)"
    done
}

# sim_med < numbers, one per line: their median (the mean of the middle two for an even
# count); nothing for none.
sim_med() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# sim_pair SIZE < "size time" lines: the time of SIZE.
sim_pair() {
    awk -v s="$1" '$1 == s { print $2; exit }'
}
