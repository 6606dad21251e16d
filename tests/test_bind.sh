#!/usr/bin/env bash
# test_bind.sh - WEFT_BIND: where weft_comm_init leaves each rank.
#
#   bash tests/test_bind.sh [build]
#
# build/tests/probe_bind prints the cpus a rank may use after init. Checked: by default
# (auto) 2 ranks on a host with 2 or more cores end on disjoint cpu sets; WEFT_BIND=none
# and weftrun --bind-to none leave every cpu; WEFT_BIND=cores:LIST puts local rank i on
# LIST's i-th item; a rank the launcher already bound (taskset) keeps its cpus; ranks that
# are threads of one process leave it unbound; more
# local ranks than cores stay unbound; WEFT_HOSTID decides which ranks share a host (and
# so the blocks); a list with too few items, cpus this process may not use, or a
# malformed value (WEFT_BIND, WEFT_HOSTID) fail init with a message saying which. This
# machine has no GPU: the GPU-aware blocks are checked on XML topologies by test_topo.
# Every job runs under `timeout`.
set -u
B=${1:-build}
W=$B/bin/weftrun
P=$B/tests/probe_bind
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-bind.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

ok()  { PASS=$((PASS + 1)); echo "ok - $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && sed 's/^/   | /' "$2" | tail -n 12; }

ALL=$(grep Cpus_allowed_list /proc/self/status | awk '{print $2}')
NCPU=$(nproc)

# job NAME N [env...] -- [weftrun options]: runs the probe on N ranks; the sorted
# "rank cpus" lines in $OUT/NAME, stderr in $OUT/NAME.err; returns the job's status
job() {
    local name=$1 n=$2; shift 2
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    [ "${1:-}" = "--" ] && shift
    env -u WEFT_BIND -u WEFT_HOSTID "${envs[@]}" timeout 60 "$W" -n "$n" "$@" "$P" 2>"$OUT/$name.err" |
        awk '{print $2, $6}' | sort -n >"$OUT/$name"
    return "${PIPESTATUS[0]}"
}
cpus_of() { awk -v r="$2" '$1 == r {print $2}' "$OUT/$1"; }

if [ "$NCPU" -ge 2 ]; then
    # 1. auto: disjoint sets, neither the whole machine
    if job auto 2 -- && [ "$(wc -l <"$OUT/auto")" = 2 ]; then
        c0=$(cpus_of auto 0); c1=$(cpus_of auto 1)
        inter=$(comm -12 <(echo "$c0" | tr ',' '\n' | sort) <(echo "$c1" | tr ',' '\n' | sort))
        if [ -n "$c0" ] && [ -n "$c1" ] && [ "$c0" != "$ALL" ] && [ "$c1" != "$ALL" ] &&
           [ -z "$inter" ] && [ "$c0" != "$c1" ]; then
            ok "auto: 2 ranks on their own cpus ($c0 and $c1 of $ALL)"
        else
            bad "auto: ranks on '$c0' and '$c1' (machine $ALL)" "$OUT/auto.err"
        fi
    else
        bad "auto: the job failed" "$OUT/auto.err"
    fi
    # 2. cores:LIST, in reverse order
    if job list 2 WEFT_BIND=cores:1,0 -- && [ "$(cpus_of list 0)" = 1 ] && [ "$(cpus_of list 1)" = 0 ]; then
        ok "WEFT_BIND=cores:1,0 puts rank 0 on cpu 1 and rank 1 on cpu 0"
    else
        bad "WEFT_BIND=cores:1,0: $(tr '\n' ' ' <"$OUT/list")" "$OUT/list.err"
    fi
    # 3. a launcher's binding is kept
    if command -v taskset >/dev/null; then
        if env -u WEFT_BIND taskset -c 1 timeout 60 "$W" -n 2 "$P" \
                2>"$OUT/ts.err" | awk '{print $2, $6}' | sort -n >"$OUT/ts" &&
           [ "$(cpus_of ts 0)" = 1 ] && [ "$(cpus_of ts 1)" = 1 ]; then
            ok "a rank bound by its launcher (taskset -c 1) keeps that binding"
        else
            bad "taskset -c 1: $(tr '\n' ' ' <"$OUT/ts")" "$OUT/ts.err"
        fi
    fi
    # 3a. weftrun --bind-to core places its ranks within its own binding (before
    # 2026-11-27 it planned over the whole machine: taskset -c 1 gave rank 0 cpu 0)
    if command -v taskset >/dev/null; then
        if env -u WEFT_BIND taskset -c 1 timeout 60 "$W" -n 1 --bind-to core "$P" \
                2>"$OUT/wb.err" | awk '{print $2, $6}' >"$OUT/wb" && [ "$(cpus_of wb 0)" = 1 ]; then
            ok "weftrun --bind-to core under taskset -c 1 keeps rank 0 on cpu 1"
        else
            bad "weftrun --bind-to core under taskset -c 1: $(tr '\n' ' ' <"$OUT/wb")" "$OUT/wb.err"
        fi
    fi
    # 3b. two ranks as threads of one process (ncclCommInitAll's way): a binding holds the
    # whole process, so auto leaves it on every cpu (before 2026-11-27 one rank's block
    # held both)
    # a port the kernel finds free now (a fixed range could collide with another job)
    p=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    if env -u WEFT_BIND -u WEFT_RANK -u WEFT_WORLD_SIZE timeout 60 "$P" threads "127.0.0.1:$p" \
            >"$OUT/thr" 2>"$OUT/thr.err" && [ "$(awk '{print $3}' "$OUT/thr")" = "$ALL" ]; then
        ok "two ranks as threads of one process: left on every cpu ($ALL)"
    else
        bad "two ranks as threads: $(cat "$OUT/thr")" "$OUT/thr.err"
    fi
else
    echo "skip - auto, cores:LIST and launcher binding: fewer than 2 cpus"
fi

# 4. none, by the knob and by weftrun
for how in "WEFT_BIND=none --" "-- --bind-to none"; do
    # shellcheck disable=SC2086  # the words on purpose
    if job none 2 $how && [ "$(cpus_of none 0)" = "$ALL" ] && [ "$(cpus_of none 1)" = "$ALL" ]; then
        ok "$(echo ${how/--/}): every rank keeps every cpu ($ALL)"
    else
        bad "$(echo ${how/--/}): $(tr '\n' ' ' <"$OUT/none")" "$OUT/none.err"
    fi
done

# 5. more local ranks than cores: left unbound
over=$((NCPU + 1))
if job over "$over" -- && [ "$(awk '{print $2}' "$OUT/over" | sort -u)" = "$ALL" ] &&
   [ "$(wc -l <"$OUT/over")" = "$over" ]; then
    ok "$over ranks on $NCPU cpus: none bound"
else
    bad "$over ranks on $NCPU cpus: $(tr '\n' ' ' <"$OUT/over")" "$OUT/over.err"
fi

# 6. the host map comes from topo_host_id: ranks given different WEFT_HOSTIDs are each
#    alone on their "host" (local rank 0 of 1: every cpu), the same one puts them together
if [ "$NCPU" -ge 2 ]; then
    if env -u WEFT_BIND timeout 60 "$W" -n 2 sh -c 'WEFT_HOSTID=h$WEFT_RANK exec "$0"' "$P" \
            2>"$OUT/hid.err" | awk '{print $2, $6}' | sort -n >"$OUT/hid" &&
       [ "$(cpus_of hid 0)" = "$ALL" ] && [ "$(cpus_of hid 1)" = "$ALL" ]; then
        ok "WEFT_HOSTID=h0/h1: two hosts of one rank each, both on every cpu"
    else
        bad "WEFT_HOSTID=h0/h1: $(tr '\n' ' ' <"$OUT/hid")" "$OUT/hid.err"
    fi
    if job hid1 2 WEFT_HOSTID=box-1 -- && [ "$(cpus_of hid1 0)" != "$ALL" ] &&
       [ -n "$(cpus_of hid1 1)" ] && [ "$(cpus_of hid1 0)" != "$(cpus_of hid1 1)" ]; then
        ok "WEFT_HOSTID=box-1 on both: one host, ranks on their own cpus"
    else
        bad "WEFT_HOSTID=box-1: $(tr '\n' ' ' <"$OUT/hid1")" "$OUT/hid1.err"
    fi
fi

# 7. refusals: init fails on every rank, naming the problem
refuse() {
    local what=$1 want=$2
    if job bad 2 "WEFT_BIND=$what" --; then
        bad "WEFT_BIND=$what was accepted"
    elif grep -q "$want" "$OUT/bad.err"; then
        ok "WEFT_BIND=$what refused: $(grep -m1 -o "$want.*" "$OUT/bad.err" | cut -c1-80)"
    else
        bad "WEFT_BIND=$what: no '$want' in the error" "$OUT/bad.err"
    fi
}
refuse "cores:0" "no item for local rank 1"
refuse "cores:4096,4097" "not all available here"
refuse "cores:0,,1" "WEFT_BIND='cores:0,,1' is not valid"
# items that are not a cpu or a range N-M with N <= M: refused by every rank's config
# (before 2026-11-27 by one rank's binding after connecting, or as cpus "-1")
for what in "cores:1-0,0" "cores:-1,0" "cores:0-,1" "cores:-,0"; do
    refuse "$what" "WEFT_BIND='$what' is not valid"
done
refuse "socket" "WEFT_BIND='socket' is not valid"
if job badhid 2 "WEFT_HOSTID=a b" --; then
    bad "WEFT_HOSTID='a b' was accepted"
elif grep -q "WEFT_HOSTID='a b' is not valid" "$OUT/badhid.err"; then
    ok "WEFT_HOSTID='a b' refused"
else
    bad "WEFT_HOSTID='a b': no message" "$OUT/badhid.err"
fi

echo "test_bind: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
