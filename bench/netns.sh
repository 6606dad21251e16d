#!/bin/sh
# bench/netns.sh - two "hosts" on one machine for TCP benchmarks: network namespaces
# weftA and weftB joined by a veth pair.
#
#   bench/netns.sh up [--mtu N]   create (or repair) the pair; idempotent; needs root
#   bench/netns.sh down           remove both namespaces (and so the veth); idempotent
#   bench/netns.sh status         addresses, MTU and byte counters of both ends
#   bench/netns.sh rsh HOST CMD   an rsh/ssh stand-in for mpirun's and hydra's launchers:
#                                 runs CMD (joined like ssh joins it, through sh -c) in
#                                 the namespace that owns HOST (10.77.0.1/weftA or
#                                 10.77.0.2/weftB); leading -options are ignored
#
# Layout: in each namespace the veth end is named weft0 (the same name on both sides, so
# one interface name works for every rank: btl_tcp_if_include, hydra's -iface,
# WEFT_SOCKET_IFNAME), weftA's has 10.77.0.1/24 and weftB's 10.77.0.2/24, and lo is up.
# Nothing else is in the namespaces: no route to the root namespace or the outside, so
# any traffic between a process in weftA and one in weftB crosses the veth.
# The MTU is the veth default (1500) unless --mtu says otherwise.
set -eu

NS_A=weftA
NS_B=weftB
ADDR_A=10.77.0.1
ADDR_B=10.77.0.2
PREFIX=24
IF=weft0

die() { echo "netns.sh: $*" >&2; exit 1; }

need_root() {
    [ "$(id -u)" = 0 ] || die "$1 needs root (network namespaces); run as root"
    command -v ip >/dev/null 2>&1 || die "no 'ip' command; install iproute2 (make deps)"
}

ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }

# Processes still inside the namespaces are a benchmark's leftovers (a killed mpirun's
# daemons): they are stopped first, else the namespaces would outlive `ip netns del`.
down() {
    for ns in "$NS_B" "$NS_A"; do
        ns_exists "$ns" || continue
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        if [ -n "$pids" ]; then
            kill $pids 2>/dev/null || true
            sleep 1
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
        fi
        ip netns del "$ns"
    done
}

up() {
    mtu=
    while [ $# -gt 0 ]; do
        case "$1" in
        --mtu) [ $# -ge 2 ] || die "--mtu needs a value"; mtu=$2; shift 2 ;;
        --mtu=*) mtu=${1#--mtu=}; shift ;;
        *) die "up: unknown argument '$1'" ;;
        esac
    done
    case "$mtu" in
    '') ;;
    *[!0-9]*) die "--mtu '$mtu' is not a number" ;;
    esac
    # a half-made setup is worse than none: undo it when a step fails
    trap 'echo "netns.sh: up failed; removing the namespaces" >&2; down' EXIT
    for ns in "$NS_A" "$NS_B"; do
        ns_exists "$ns" || ip netns add "$ns"
    done
    # both ends or neither: a veth end dies with its peer
    if ! ip -n "$NS_A" link show "$IF" >/dev/null 2>&1 ||
       ! ip -n "$NS_B" link show "$IF" >/dev/null 2>&1; then
        ip -n "$NS_A" link del "$IF" 2>/dev/null || true
        ip -n "$NS_B" link del "$IF" 2>/dev/null || true
        ip link add "$IF" netns "$NS_A" type veth peer name "$IF" netns "$NS_B"
    fi
    for side in A B; do
        if [ $side = A ]; then ns=$NS_A addr=$ADDR_A; else ns=$NS_B addr=$ADDR_B; fi
        ip -n "$ns" link set lo up
        ip -n "$ns" addr replace "$addr/$PREFIX" dev "$IF"
        ip -n "$ns" link set "$IF" mtu "${mtu:-1500}" up
    done
    # the link is usable once both ends report carrier (state UP)
    i=0
    until ip -n "$NS_A" -o link show "$IF" | grep -q 'state UP' &&
          ip -n "$NS_B" -o link show "$IF" | grep -q 'state UP'; do
        i=$((i + 1))
        [ $i -lt 50 ] || die "up: the veth between $NS_A and $NS_B does not come up"
        sleep 0.1
    done
    trap - EXIT
}

status() {
    for ns in "$NS_A" "$NS_B"; do
        if ns_exists "$ns"; then
            echo "== $ns"
            ip -n "$ns" -br addr show
            ip -n "$ns" -s link show "$IF"
        else
            echo "== $ns: absent"
        fi
    done
}

rsh() {
    while [ $# -gt 0 ]; do
        case "$1" in
        -[lpoi]) shift 2 ;;     # ssh options with a value
        -*) shift ;;
        *) break ;;
        esac
    done
    [ $# -ge 2 ] || die "rsh: usage: netns.sh rsh HOST COMMAND..."
    host=$1
    shift
    case "$host" in
    "$ADDR_A" | "$NS_A") ns=$NS_A ;;
    "$ADDR_B" | "$NS_B") ns=$NS_B ;;
    *) die "rsh: unknown host '$host' (expected $ADDR_A or $ADDR_B)" ;;
    esac
    exec ip netns exec "$ns" sh -c "$*"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
up) need_root up; up "$@" ;;
down) need_root down; down ;;
status) need_root status; status ;;
rsh) rsh "$@" ;;
*) sed -n '2,12s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
