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

# sim_host_cpus H: the cpus namespace host H (0 or 1) runs on, comma-separated for
# taskset: the first half of the cpus this shell may use for host 0, the second half for
# host 1 (both get the one cpu where there is one). Real hosts do not share cores, and
# sim_check.sh's model gives each namespace host half of them; SIM_NET_PIN=0: every cpu
# for both (the kernel places the ranks).
sim_host_cpus() {
    local list c a b cpus=() half
    list=$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status)
    for c in ${list//,/ }; do
        a=${c%-*} b=${c#*-}
        while [ "$a" -le "$b" ]; do cpus+=("$a"); a=$((a + 1)); done
    done
    half=$((${#cpus[@]} / 2))
    if [ "${SIM_NET_PIN:-1}" = 0 ] || [ "$half" -lt 1 ]; then
        c="${cpus[*]}"
        echo "${c// /,}"
        return
    fi
    c="${cpus[*]:$(($1 * half)):$half}"
    echo "${c// /,}"
}

# sim_net PER TOOL ARGS...: the tool on 2 namespace hosts x PER ranks (rank r on host
# r / PER), each host's ranks on its own half of the cpus (sim_host_cpus, WEFT_BIND=none
# unless set); rank 0's table on stdout, the others' output in $SIM_TMP. The ranks do
# not spin (WEFT_SPIN=0 unless set): weft's automatic setting weighs a host's ranks
# against all of this machine's cores, not the half its host runs on, so with 2 ranks per
# host on 2 cores every rank would spin and each wait for the next time slice (an 8-byte
# all-reduce on 2 x 2, unpinned: about 1.3 ms spinning, 28 us not).
sim_net() {
    local per=$1 n=$(($1 * 2)) r ns cpus addr=10.77.0.1 port=$((20000 + RANDOM % 20000)) rc=0
    local cpus_a cpus_b
    cpus_a=$(sim_host_cpus 0)
    cpus_b=$(sim_host_cpus 1)
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
        ns=weftA cpus=$cpus_a
        [ $r -ge "$per" ] && ns=weftB cpus=$cpus_b
        env -u WEFT_TRANSPORT WEFT_RANK=$r WEFT_WORLD_SIZE=$n WEFT_LOCAL_RANK=$((r % per)) \
            WEFT_LOCAL_SIZE=$per WEFT_ADDR=$addr:$port WEFT_SECRET=$secret \
            WEFT_SPIN=${WEFT_SPIN:-0} WEFT_BIND=${WEFT_BIND:-none} \
            timeout -k 5 "$SIM_RANK_TIMEOUT" taskset -c "$cpus" ip netns exec "$ns" unshare --uts \
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

# The placement of the moment. Where two cores share no last-level cache (two sockets,
# two CCDs, or, on a VM, vCPUs the host has put there for a while), a cache line takes
# several times as long between them, and weft's shm ring, which passes every byte from
# one rank's cache to the other's, runs 3-6x slower (docs/PERF.md, "Launch-to-launch slow
# mode"). sim_median therefore brackets each launch with core_rtt and repeats a launch
# when either reading is far above the lowest seen (SIM_RTT_SLACK x it, + 20 ns), at most
# SIM_FAR_TRIES times in all per launch; SIM_RTT=0 turns this off. The counts are in
# SIM_FAR_REPEATED (launches repeated) and SIM_FAR_KEPT (kept although far: the tries ran
# out), the lowest reading in SIM_RTT_LOW (ns), for the callers to print.
SIM_RTT=${SIM_RTT:-1}
SIM_RTT_SLACK=${SIM_RTT_SLACK:-1.5}
SIM_FAR_TRIES=${SIM_FAR_TRIES:-10}
SIM_RTT_LOW=
SIM_RTT_LAST=
SIM_FAR_REPEATED=0
SIM_FAR_KEPT=0

# sim_near: 0 when a core_rtt reading now is near the lowest seen (the first call takes 5
# readings 0.2 s apart to find it), 1 when not, 0 as well when it cannot be measured.
sim_near() {
    [ "$SIM_RTT" = 1 ] && [ -x "$B/bin/core_rtt" ] || return 0
    local i t n=1
    SIM_RTT_LAST=
    [ -z "$SIM_RTT_LOW" ] && n=5
    for ((i = 0; i < n; i++)); do
        [ $i -gt 0 ] && sleep 0.2
        t=$("$B/bin/core_rtt" -q -r 3 -n 5000 2>/dev/null) || return 0
        if [ -z "$SIM_RTT_LOW" ] || [ "$t" -lt "$SIM_RTT_LOW" ]; then SIM_RTT_LOW=$t; fi
    done
    SIM_RTT_LAST=$t
    awk -v t="$t" -v low="$SIM_RTT_LOW" -v k="$SIM_RTT_SLACK" 'BEGIN { exit !(t <= low * k + 20) }'
}

# sim_far_note: one line on what the placement checks did (for the callers' outputs).
sim_far_note() {
    if [ "$SIM_RTT" != 1 ] || [ ! -x "$B/bin/core_rtt" ] || [ -z "$SIM_RTT_LOW" ]; then
        echo "placement not checked (SIM_RTT=0 or no $B/bin/core_rtt)"
    else
        echo "cores' round trip at its lowest $SIM_RTT_LOW ns; launches repeated for a far" \
             "placement: $SIM_FAR_REPEATED; kept far (tries ran out): $SIM_FAR_KEPT"
    fi
}

# sim_median R TABLES CMD...: runs CMD (a perf tool; its table on stdout) R times, one
# after the other, appending each table to the file TABLES, and prints "size time" for
# every out-of-place row: the median of the R times. Launches of weft differ (issue 20:
# some run large sizes several times slower), so one launch is not a measurement; a
# launch that ran while the cores were far apart is repeated (sim_near above).
sim_median() {
    local r=$1 tables=$2 i try
    shift 2
    : >"$tables"
    for ((i = 0; i < r; i++)); do
        for ((try = 1; ; try++)); do
            local near=1 rtt0 t0=$SECONDS what=
            sim_near || near=
            rtt0=${SIM_RTT_LAST:--}
            "$@" >"$SIM_TMP/launch" || return 1
            sim_near || near=
            if [ -z "$near" ]; then
                what="; far: repeated"
                if [ "$try" -ge "$SIM_FAR_TRIES" ]; then what="; far: kept (tries ran out)"; fi
            fi
            # progress on stderr, so that a long run shows where its time goes
            echo "$(basename "$0"): $1 ${2:-} ${3:-}, launch $((i + 1)) of $r, try $try:" \
                 "$((SECONDS - t0)) s; cores' round trip before/after $rtt0/${SIM_RTT_LAST:--} ns" \
                 "(lowest ${SIM_RTT_LOW:--})$what" >&2
            if [ -n "$near" ]; then break; fi
            if [ "$try" -ge "$SIM_FAR_TRIES" ]; then
                SIM_FAR_KEPT=$((SIM_FAR_KEPT + 1))
                break
            fi
            SIM_FAR_REPEATED=$((SIM_FAR_REPEATED + 1))
        done
        cat "$SIM_TMP/launch" >>"$tables"
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
