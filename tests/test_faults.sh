#!/usr/bin/env bash
# test_faults.sh - fault injection: kill a rank at a random point, many times over.
#
#   bash tests/test_faults.sh BUILD_DIR TRANSPORT [TRIALS]     (TRIALS default 20)
#
# Each trial is one job of 2-4 ranks (weftrun, WEFT_TIMEOUT=2) running test_fail in one of
# three modes: `kill` (a rank SIGKILLs itself at a random moment of a loop of collectives
# of random sizes), `init_kill` (0-60 ms into weft_comm_init) and, on tcp, `connect_kill`
# (once the victim holds its first data connection); on tcp one more trial, `split_kill`
# (3 ranks: rank 0 dies as it opens its second connection of a weft_comm_split, leaving
# rank 2 waiting to accept it). A trial passes when every survivor
# printed an ok line (PEER_LOST naming the victim within 2 s; for init_kill a PEER_LOST or
# TIMEOUT within WEFT_TIMEOUT + 1 s, since the victim may die before it joined the
# rendezvous, where nothing can tell it from a late starter; in the init modes a rank
# that weftrun stopped before its main() began to ignore SIGTERM ran no weft code and
# is not counted), none printed FAIL, weftrun
# exited with 128+9 and named the rank killed by signal 9, and the job ended within 20 s.
# Then the stale-segment check below. Prints one line per trial and
# `test_faults.sh: N passed, M failed`.
set -u
B=${1:?usage: test_faults.sh BUILD_DIR TRANSPORT [TRIALS]}
T=${2:?transport}
TRIALS=${3:-20}
D=$(mktemp -d "${TMPDIR:-/tmp}/weft-faults.XXXXXX")
trap 'rm -rf "$D"' EXIT
pass=0 fail=0
last=$TRIALS
[ "$T" = tcp ] && last=$((TRIALS + 1))
for ((i = 1; i <= last; i++)); do
    n=$((2 + i % 3))
    mode=kill
    [ $((i % 4)) = 0 ] && mode=init_kill
    [ $((i % 4)) = 2 ] && [ "$T" = tcp ] && mode=connect_kill
    seed=$((i * 37 + ${#T}))
    [ "$mode" = connect_kill ] && seed=$((i / 4))   # victims 0, 1, 2, 3, 0 (n 4, 2, 3, 4, 2)
    args=("$seed" "$D/t.$i")
    # WEFT_TIMEOUT=5 there: a survivor left to its timeout would report too late
    to=2
    [ "$i" -gt "$TRIALS" ] && mode=split_kill n=3 seed=0 args=("$D/t.$i") to=5
    victim=$((seed % n))
    out=$D/out.$i
    WEFT_TRANSPORT=$T WEFT_TIMEOUT=$to timeout -k 5 20 "$B/bin/weftrun" -n "$n" \
        "$B/tests/test_fail" "$mode" "${args[@]}" >"$out" 2>&1
    rc=$?
    oks=$(grep -c '^ok' "$out")
    # init_kill, connect_kill: a rank still starting up (before main() ignored SIGTERM)
    # when the victim died is stopped by weftrun having run no weft code; only the
    # survivors that got that far (t.I.armed.RANK) must report
    want=$((n - 1)) late=""
    if [ "$mode" = init_kill ] || [ "$mode" = connect_kill ]; then
        want=0
        for ((r = 0; r < n; r++)); do
            [ "$r" = "$victim" ] && continue
            if [ -e "$D/t.$i.armed.$r" ]; then want=$((want + 1)); else late="$late $r"; fi
        done
    fi
    why=""
    if [ "$rc" = 124 ] || [ "$rc" = 137 -a ! -s "$out" ]; then
        why="job hung (timeout)"
    elif [ "$rc" != 137 ]; then
        why="weftrun exit status $rc, want 137 (rank $victim killed)"
    elif ! grep -q "rank $victim (pid [0-9]*) killed by signal 9" "$out"; then
        why="weftrun did not name rank $victim as killed by signal 9"
    elif grep -q '^FAIL' "$out" || [ "$oks" != "$want" ]; then
        why="$oks of $want survivors reported correctly"
    fi
    if [ -z "$why" ]; then
        pass=$((pass + 1))
        printf 'ok   trial %2d: %-9s n=%d victim %d: %s\n' "$i" "$mode" "$n" "$victim" \
            "$(grep '^ok' "$out" | sed -E 's/.*: (peer lost|timeout) after ([0-9.]+ s).*/\1 \2/' |
               tr '\n' ' ')${late:+(stopped before it started: rank$late)}"
    else
        fail=$((fail + 1))
        printf 'FAIL trial %2d: %-9s n=%d victim %d: %s\n' "$i" "$mode" "$n" "$victim" "$why"
        # every rank's verdict and weftrun's lines first (the flight-recorder dumps that
        # follow a failure can push them out of the tail), then the tail
        grep -E '^(ok|FAIL)|weftrun' "$out" | sed 's/^/     | /'
        sed 's/^/     | /' "$out" | tail -n 20
    fi
done
# Stale segments: the trials' victims may have died holding a named segment, and a fake
# one of a dead process and one of a live process are added; the next job must remove
# the dead ones (any weft-*-p<pid> whose pid is gone) and keep the live one.
(exit 0) & dead=$!
wait "$dead"
# (names of both forms: /weft-ID-RANK-RANDOM-pPID, and before 2026-11-27 /weft-ID-RANK-pPID)
touch "/dev/shm/weft-00000000feedf00d-1-p$dead" "/dev/shm/weft-00000000feedf00d-1-p$$" \
    "/dev/shm/weft-00000000feedf00d-2-00000000c0ffee00-p$dead"
WEFT_TRANSPORT=$T timeout -k 5 20 "$B/bin/weftrun" -n 2 "$B/tests/test_fail" dump >/dev/null 2>&1
left=""
for f in /dev/shm/weft-*-p*; do
    [ -e "$f" ] || continue
    kill -0 "${f##*-p}" 2>/dev/null || left="$left $f"
done
if [ -n "$left" ] || [ ! -e "/dev/shm/weft-00000000feedf00d-1-p$$" ]; then
    fail=$((fail + 1))
    echo "FAIL stale segments: left behind:${left:- none}; live one kept: $([ -e "/dev/shm/weft-00000000feedf00d-1-p$$" ] && echo yes || echo no)"
else
    pass=$((pass + 1))
    echo "ok   stale segments of dead jobs removed by the next job, a live one kept"
fi
rm -f "/dev/shm/weft-00000000feedf00d-1-p$$"
echo "test_faults.sh: $pass passed, $fail failed"
[ "$fail" = 0 ]
