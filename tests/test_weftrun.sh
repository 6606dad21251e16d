#!/usr/bin/env bash
# test_weftrun.sh - tests of the local launcher, weftrun.
#
#   bash tests/test_weftrun.sh [path/to/weftrun]     (default build/bin/weftrun)
#
# Prints "ok - NAME" or "FAIL - NAME: why" per case and one summary line
# "test_weftrun: N passed, N failed"; exits non-zero on any failure.
#
# Invariants: every weftrun run is bounded (under `timeout`, or watched by wait_bounded
# when it runs in the background), so the script cannot hang; processes that must not
# survive carry a unique marker (sleep 100.<digits>) that pgrep -f looks for; all files go
# to one temporary directory that is removed on exit.

# Rank commands are single-quoted on purpose: the ranks, not this script, expand $WEFT_*.
# shellcheck disable=SC2016

W=${1:-build/bin/weftrun}
if [ ! -x "$W" ]; then
    echo "test_weftrun: no executable weftrun at '$W'" >&2
    exit 1
fi
W=$(cd "$(dirname "$W")" && pwd)/$(basename "$W")

T=$(mktemp -d "${TMPDIR:-/tmp}/test_weftrun.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
PASS=0
FAIL=0
SEQ=0

ok()   { PASS=$((PASS + 1)); echo "ok - $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL - $1: $2"; }

# A fresh marker: a sleep length that no other process uses (fixed width, so no marker
# is a prefix of another).
marker() { SEQ=$((SEQ + 1)); printf '100.%d%03d\n' $$ "$SEQ"; }

now_ms() { date +%s%3N; }

# Succeeds when no process with marker $1 in its command line is left (allowing 2 s for
# group members that were signalled to finish dying).
no_survivors() {
    for _ in $(seq 20); do
        pgrep -f "sleep $1" >/dev/null || return 0
        sleep 0.1
    done
    # shellcheck disable=SC2046
    kill -9 $(pgrep -f "sleep $1") 2>/dev/null
    return 1
}

# Waits up to $2 seconds for background pid $1; sets RC (or kills it and sets RC=999).
wait_bounded() {
    local pid=$1 limit=$(($2 * 10))
    for _ in $(seq "$limit"); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid"
        wait "$pid" 2>/dev/null
        RC=999
        return
    fi
    wait "$pid"
    RC=$?
}

# Waits up to 10 s for files $T/$1.0 .. $T/$1.(n-1); returns non-zero if they never come.
wait_files() {
    local prefix=$1 n=$2 i
    for _ in $(seq 100); do
        for ((i = 0; i < n; i++)); do [ -e "$T/$prefix.$i" ] || break; done
        [ "$i" -eq "$n" ] && return 0
        sleep 0.1
    done
    return 1
}

# (a) every rank gets its own WEFT_RANK and the same size, secret and address
case_env() {
    local out rc
    out=$(timeout 20 "$W" -n 3 sh -c \
        'echo $WEFT_RANK $WEFT_WORLD_SIZE $WEFT_LOCAL_RANK $WEFT_LOCAL_SIZE $WEFT_SECRET $WEFT_ADDR' \
        2>"$T/a.err")
    rc=$?
    [ $rc -eq 0 ] || { fail "env" "exit $rc: $(cat "$T/a.err")"; return; }
    [ "$(echo "$out" | wc -l)" -eq 3 ] || { fail "env" "expected 3 lines, got: $out"; return; }
    [ "$(echo "$out" | awk '{print $1}' | sort | tr '\n' ' ')" = "0 1 2 " ] ||
        { fail "env" "ranks are not 0..2 once each: $out"; return; }
    echo "$out" | awk '$1 != $3 || $2 != 3 || $4 != 3 { exit 1 }' ||
        { fail "env" "bad size or local rank: $out"; return; }
    [ "$(echo "$out" | awk '{print $5, $6}' | sort -u | wc -l)" -eq 1 ] ||
        { fail "env" "ranks disagree on secret or addr: $out"; return; }
    echo "$out" | head -1 | grep -Eq ' [0-9a-f]{32} 127\.0\.0\.1:[0-9]+$' ||
        { fail "env" "bad secret or addr: $out"; return; }
    ok "env: rank, size, local rank, shared 32-hex secret, 127.0.0.1 addr"
}

# (a') the secret is fresh per job
case_fresh_secret() {
    local s1 s2
    s1=$(env -u WEFT_SECRET timeout 20 "$W" -n 1 sh -c 'echo $WEFT_SECRET')
    s2=$(env -u WEFT_SECRET timeout 20 "$W" -n 1 sh -c 'echo $WEFT_SECRET')
    if [ -n "$s1" ] && [ "$s1" != "$s2" ]; then ok "fresh secret per job"
    else fail "fresh secret per job" "got '$s1' and '$s2'"; fi
}

# (b) a failing rank stops the job with its status and leaves no rank behind
case_rank_fails() {
    local m t0 t1 rc
    m=$(marker)
    t0=$(now_ms)
    timeout 20 "$W" -n 3 sh -c "if [ \$WEFT_RANK = 1 ]; then sleep 0.3; exit 3; fi; sleep $m" \
        2>"$T/b.err"
    rc=$?
    t1=$(now_ms)
    if [ $rc -ne 3 ]; then fail "rank failure" "exit $rc, want 3: $(cat "$T/b.err")"
    elif [ $((t1 - t0)) -gt 10000 ]; then fail "rank failure" "took $((t1 - t0)) ms"
    elif ! grep -q 'rank 1 (pid [0-9]*) exited with status 3' "$T/b.err"; then
        fail "rank failure" "message: $(cat "$T/b.err")"
    elif ! grep -q 'job failed: stopped 2 other rank(s)' "$T/b.err"; then
        fail "rank failure" "summary: $(cat "$T/b.err")"
    elif ! no_survivors "$m"; then fail "rank failure" "'sleep $m' survived"
    else ok "rank failure: exit 3, rank 1 named, others stopped"; fi
}

# (b') a rank that ignores SIGTERM is killed after the grace period
case_escalation() {
    local m t0 t1 rc
    m=$(marker)
    t0=$(now_ms)
    timeout 20 "$W" -n 2 sh -c "if [ \$WEFT_RANK = 1 ]; then sleep 0.3; exit 5; fi
        trap '' TERM; sleep $m" 2>"$T/b2.err"
    rc=$?
    t1=$(now_ms)
    if [ $rc -ne 5 ]; then fail "sigkill escalation" "exit $rc, want 5: $(cat "$T/b2.err")"
    elif [ $((t1 - t0)) -lt 3000 ] || [ $((t1 - t0)) -gt 8000 ]; then
        fail "sigkill escalation" "took $((t1 - t0)) ms, want about 3 s"
    elif ! no_survivors "$m"; then fail "sigkill escalation" "'sleep $m' survived"
    else ok "sigkill escalation after 3 s grace"; fi
}

# (c) a rank killed by a signal: exit 128+9, the signal named
case_rank_killed() {
    local m rc
    m=$(marker)
    timeout 20 "$W" -n 2 sh -c "if [ \$WEFT_RANK = 0 ]; then kill -9 \$\$; fi; sleep $m" \
        2>"$T/c.err"
    rc=$?
    if [ $rc -ne 137 ]; then fail "rank killed" "exit $rc, want 137: $(cat "$T/c.err")"
    elif ! grep -q 'rank 0 (pid [0-9]*) killed by signal 9 (Killed)' "$T/c.err"; then
        fail "rank killed" "message: $(cat "$T/c.err")"
    elif ! no_survivors "$m"; then fail "rank killed" "'sleep $m' survived"
    else ok "rank killed by SIGKILL: exit 137, signal named"; fi
}

# (c2) weftrun itself killed with -9: its ranks (process groups of their own) go too
case_launcher_killed() {
    local m pid
    m=$(marker)
    "$W" -n 2 sleep "$m" 2>"$T/c2.err" &
    pid=$!
    for _ in $(seq 50); do
        [ "$(pgrep -c -f "sleep $m")" = 2 ] && break
        sleep 0.1
    done
    kill -9 "$pid"
    wait "$pid" 2>/dev/null
    if no_survivors "$m"; then ok "weftrun killed with -9: its ranks are gone within 2 s"
    else fail "weftrun killed" "'sleep $m' survived"; fi
}

# A process that still runs: /proc/PID exists and is not a zombie (one left for init to
# reap is gone as far as these tests care).
running() {
    local st
    st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "${st%% *}" != Z ]
}

# Waits up to $1 seconds for every pid after $2 (the marker) to stop running; any still
# running then is killed by its pid, if its command line still has the marker (not a
# recycled pid), and it fails.
gone_within() {
    local limit=$(($1 * 10)) m=$2 p left
    shift 2
    for _ in $(seq "$limit"); do
        left=""
        for p in "$@"; do running "$p" && left="$left $p"; done
        [ -z "$left" ] && return 0
        sleep 0.1
    done
    for p in $left; do
        tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$m" && kill -9 "$p" 2>/dev/null
    done
    SURVIVORS=$left
    return 1
}

# Starts "$@" (a weftrun command line) in the background with 2 ranks of
# sh -c 'sleep $m; true' (the sleep a child of the rank, as under a wrapper script) and
# waits until both sleeps run; sets LPID (weftrun), SLEEPS and KIDS (weftrun's children:
# the ranks and anything else it forked). Returns non-zero if the sleeps never start.
start_wrapped() {
    local m=$1
    shift
    "$@" -n 2 sh -c "$RANK_PROG; sleep $m; true" 2>"$T/c3.err" &
    LPID=$!
    SLEEPS=""
    for _ in $(seq 50); do
        SLEEPS=$(pgrep -f "^sleep $m\$" | tr '\n' ' ')
        [ "$(echo "$SLEEPS" | wc -w)" = 2 ] && break
        sleep 0.1
    done
    KIDS=$(pgrep -P "$LPID" | tr '\n' ' ')
    [ "$(echo "$SLEEPS" | wc -w)" = 2 ]
}

# (c3) weftrun killed with -9 while each rank's real work is its child (a wrapper script's
# program): the grandchildren go too, not only the ranks, and nothing weftrun forked stays
# behind. (c3') the same with a program that ignores SIGTERM, weftrun in a process group
# of its own killed as a group (kill -9 %job, timeout -k): SIGKILL after the grace period.
case_launcher_killed_tree() {
    local m
    m=$(marker)
    RANK_PROG=true
    # shellcheck disable=SC2086
    if ! start_wrapped "$m" "$W"; then
        kill -9 "$LPID" $SLEEPS 2>/dev/null; wait "$LPID" 2>/dev/null
        fail "weftrun killed, wrapped program" "the ranks' sleeps did not start"; return
    fi
    kill -9 "$LPID"
    wait "$LPID" 2>/dev/null
    # shellcheck disable=SC2086
    if ! gone_within 5 "$m" $SLEEPS $KIDS; then
        fail "weftrun killed, wrapped program" "still running 5 s after kill -9:$SURVIVORS (sleeps: $SLEEPS; weftrun's children: $KIDS)"
        return
    fi
    if ! grep -q "weftrun: guardian: weftrun (pid $LPID) ended with 2 rank(s) not reaped" "$T/c3.err"; then
        fail "weftrun killed, wrapped program" "no word from the guardian: $(cat "$T/c3.err")"
        return
    fi
    ok "weftrun killed with -9: the ranks' children are gone too, and all weftrun forked"
}

case_launcher_group_killed() {
    local m t0 t1
    m=$(marker)
    RANK_PROG="trap '' TERM"
    # shellcheck disable=SC2086
    if ! start_wrapped "$m" setsid "$W"; then
        kill -9 "$LPID" $SLEEPS 2>/dev/null; wait "$LPID" 2>/dev/null
        fail "weftrun's group killed, TERM ignored" "the ranks' sleeps did not start"; return
    fi
    if [ "$(ps -o pgid= -p "$LPID" | tr -d ' ')" != "$LPID" ]; then
        # shellcheck disable=SC2086
        kill -9 "$LPID" $SLEEPS 2>/dev/null; wait "$LPID" 2>/dev/null
        echo "skip - weftrun's group killed: setsid did not make weftrun a group leader"
        return
    fi
    t0=$(now_ms)
    kill -9 -- "-$LPID"
    wait "$LPID" 2>/dev/null
    # shellcheck disable=SC2086
    if ! gone_within 8 "$m" $SLEEPS $KIDS; then
        fail "weftrun's group killed, TERM ignored" "still running 8 s after kill -9:$SURVIVORS (sleeps: $SLEEPS; weftrun's children: $KIDS)"
        return
    fi
    t1=$(now_ms)
    if ! grep -q "weftrun: guardian: 2 rank process group(s) still running after SIGTERM; sent SIGKILL" "$T/c3.err"; then
        fail "weftrun's group killed, TERM ignored" "no word of the SIGKILL: $(cat "$T/c3.err")"
        return
    fi
    ok "weftrun's process group killed with -9, ranks ignoring SIGTERM: gone after $((t1 - t0)) ms (SIGKILL after the grace period)"
}

# (c4) a job that ends by itself leaves nothing weftrun forked running
case_nothing_lingers() {
    local pid kids left="" p
    "$W" -n 2 sh -c 'sleep 1' &
    pid=$!
    sleep 0.5
    kids=$(pgrep -P "$pid" | tr '\n' ' ')
    wait_bounded "$pid" 20
    for p in $kids; do running "$p" && left="$left $p"; done
    if [ "$RC" -ne 0 ]; then fail "nothing lingers" "exit $RC"
    elif [ -n "$left" ]; then
        fail "nothing lingers" "still running after weftrun exited:$left ($(ps -o pid=,args= -p "${left# }" | head -3))"
        # shellcheck disable=SC2086
        kill $left 2>/dev/null
    else ok "a finished job leaves none of weftrun's children running ($kids)"; fi
}

# (d0) --tag-output into a pipe nobody reads: --timeout still stops the job (the relay
# waits for room in the event loop, not in a blocked write), and weftrun says how much
# output it could not write
case_tag_stalled() {
    local m rc t0 t1 holder
    m=$(marker)
    mkfifo "$T/stall" || { fail "tag output, stalled reader" "mkfifo"; return; }
    sleep "$m" <"$T/stall" &   # holds the read end, never reads
    holder=$!
    t0=$(now_ms)
    timeout 30 "$W" --tag-output --timeout 1 -n 2 yes >"$T/stall" 2>"$T/stall.err"
    rc=$?
    t1=$(now_ms)
    kill "$holder" 2>/dev/null
    wait "$holder" 2>/dev/null
    if [ $rc -ne 124 ] || [ $((t1 - t0)) -gt 10000 ]; then
        fail "tag output, stalled reader" "exit $rc after $((t1 - t0)) ms (want 124 within 10 s): $(cat "$T/stall.err")"
        return
    elif ! grep -q 'bytes of the ranks. stdout were not written' "$T/stall.err"; then
        fail "tag output, stalled reader" "no word of the unwritten output: $(cat "$T/stall.err")"
        return
    fi
    # the ranks done, their output still queued for the unread pipe: SIGTERM ends weftrun
    local pid
    sleep "$m" <"$T/stall" &
    holder=$!
    "$W" --tag-output -n 2 sh -c 'yes | head -c 1000000' >"$T/stall" 2>"$T/stall2.err" &
    pid=$!
    sleep 0.5
    t0=$(now_ms)
    kill -TERM "$pid"
    wait_bounded "$pid" 10
    t1=$(now_ms)
    kill "$holder" 2>/dev/null
    wait "$holder" 2>/dev/null
    if [ "$RC" = 999 ] || [ $((t1 - t0)) -gt 6000 ]; then
        fail "tag output, stalled reader" "after the ranks ended, SIGTERM: exit $RC after $((t1 - t0)) ms (want within 6 s)"
    else ok "tag output into an unread pipe: --timeout 1 stops the job in about 3 s, and SIGTERM once the ranks are done; the unwritten output said"; fi
}

# (d) --tag-output: "[R] " on each line, on the stream it was written to
case_tag_output() {
    local rc want_out want_err
    timeout 20 "$W" -n 2 --tag-output sh -c \
        'echo out$WEFT_RANK; echo err$WEFT_RANK >&2; printf tail$WEFT_RANK' \
        >"$T/d.out" 2>"$T/d.err"
    rc=$?
    want_out=$(printf '[0] out0\n[0] tail0\n[1] out1\n[1] tail1')
    want_err=$(printf '[0] err0\n[1] err1')
    if [ $rc -ne 0 ]; then fail "tag output" "exit $rc"
    elif [ "$(sort "$T/d.out")" != "$want_out" ]; then
        fail "tag output" "stdout: $(cat "$T/d.out")"
    elif [ "$(sort "$T/d.err")" != "$want_err" ]; then
        fail "tag output" "stderr: $(cat "$T/d.err")"
    else ok "tag output: prefixes, streams kept apart, partial last line flushed"; fi
}

# (d') --tag-output never splits or mixes lines, even long ones written concurrently
case_tag_interleave() {
    local rc bad
    timeout 30 "$W" -n 3 --tag-output awk 'BEGIN {
            r = ENVIRON["WEFT_RANK"]; s = sprintf("%5000s", ""); gsub(/ /, "x", s)
            for (i = 0; i < 300; i++) print "r" r, i, s }' >"$T/d2.out" 2>&1
    rc=$?
    bad=$(awk '{ if (!match($0, /^\[[0-9]\] r[0-9] [0-9]+ x+$/) || substr($1, 2, 1) != substr($2, 2, 1) ||
                    length($4) != 5000) n++ } END { print n + 0 }' "$T/d2.out")
    if [ $rc -ne 0 ]; then fail "tag output, no interleaving" "exit $rc"
    elif [ "$(wc -l <"$T/d2.out")" -ne 900 ]; then
        fail "tag output, no interleaving" "$(wc -l <"$T/d2.out") lines, want 900"
    elif [ "$bad" -ne 0 ]; then fail "tag output, no interleaving" "$bad mixed lines"
    else ok "tag output: 900 long concurrent lines intact"; fi
}

# (e) SIGTERM to weftrun stops the ranks; weftrun exits non-zero
case_sigterm() {
    local m pid
    m=$(marker)
    rm -f "$T"/e.*
    "$W" -n 2 sh -c "touch $T/e.\$WEFT_RANK; sleep $m" 2>"$T/e.err" &
    pid=$!
    if ! wait_files e 2; then
        kill -9 "$pid"; fail "sigterm" "ranks did not start"; return
    fi
    kill -TERM "$pid"
    wait_bounded "$pid" 10
    if [ $RC -eq 0 ] || [ $RC -eq 999 ]; then fail "sigterm" "exit $RC: $(cat "$T/e.err")"
    elif ! no_survivors "$m"; then fail "sigterm" "'sleep $m' survived"
    else ok "sigterm: ranks stopped, exit $RC"; fi
}

# (f) SIGUSR1 reaches every rank and the job goes on to exit 0
case_sigusr1() {
    local pid
    rm -f "$T"/f.* "$T"/fr.*
    "$W" -n 2 sh -c "trap 'touch $T/f.\$WEFT_RANK' USR1; touch $T/fr.\$WEFT_RANK
        i=0; while [ \$i -lt 100 ]; do
            [ -e $T/f.\$WEFT_RANK ] && exit 0; sleep 0.1; i=\$((i + 1)); done; exit 1" \
        2>"$T/f.err" &
    pid=$!
    if ! wait_files fr 2; then
        kill -9 "$pid"; fail "sigusr1" "ranks did not start"; return
    fi
    kill -USR1 "$pid"
    wait_bounded "$pid" 15
    if [ $RC -ne 0 ]; then fail "sigusr1" "exit $RC: $(cat "$T/f.err")"
    elif ! wait_files f 2; then fail "sigusr1" "not every rank saw SIGUSR1"
    else ok "sigusr1 forwarded, job exits 0"; fi
}

# (g) bad usage: exit 2 with a message
case_bad_args() {
    local args rc err failed=""
    while IFS= read -r args; do
        # shellcheck disable=SC2086
        timeout 10 "$W" $args >/dev/null 2>"$T/g.err"
        rc=$?
        err=$(cat "$T/g.err")
        if [ $rc -ne 2 ] || ! echo "$err" | grep -q '^weftrun: '; then
            failed="$failed ['$args' -> $rc: $err]"
        fi
    done <<'EOF'

true
-n 0 true
-n abc true
-n 3x true
-n 5000 true
-n -1 true
-n 2
-n
-n 2 --bogus true
--timeout 0 -n 2 true
--timeout abc -n 2 true
--addr nohost -n 2 true
--addr 127.0.0.1:99999 -n 2 true
-x =v -n 2 true
EOF
    if [ -n "$failed" ]; then fail "bad arguments" "$failed"
    else ok "bad arguments exit 2 with a message"; fi
}

# (g') --help and --version succeed and print something
case_help() {
    if timeout 10 "$W" --help | grep -q '^usage: weftrun' &&
       timeout 10 "$W" -h | grep -q -- '--tag-output' &&
       timeout 10 "$W" --version | grep -q '^weftrun'; then ok "help and version"
    else fail "help and version" "missing output or non-zero exit"; fi
}

# (h) --timeout: exit 124 within a few seconds, ranks stopped
case_timeout() {
    local m t0 t1 rc
    m=$(marker)
    t0=$(now_ms)
    timeout 20 "$W" -n 2 --timeout 1 sleep "$m" 2>"$T/h.err"
    rc=$?
    t1=$(now_ms)
    if [ $rc -ne 124 ]; then fail "timeout" "exit $rc, want 124: $(cat "$T/h.err")"
    elif [ $((t1 - t0)) -gt 5000 ]; then fail "timeout" "took $((t1 - t0)) ms"
    elif ! grep -q 'exceeded --timeout of 1 s' "$T/h.err"; then
        fail "timeout" "message: $(cat "$T/h.err")"
    elif ! no_survivors "$m"; then fail "timeout" "'sleep $m' survived"
    else ok "timeout: exit 124 after about 1 s"; fi
}

# (i) a WEFT_SECRET already set is passed through
case_secret_passthrough() {
    local out
    out=$(WEFT_SECRET=0123456789abcdef0123456789abcdef timeout 20 "$W" -n 2 \
        sh -c 'echo $WEFT_SECRET' | sort -u)
    if [ "$out" = 0123456789abcdef0123456789abcdef ]; then ok "preset WEFT_SECRET passed through"
    else fail "preset WEFT_SECRET passed through" "got '$out'"; fi
}

# (j) a program that cannot be executed fails the job with "cannot execute"
case_noexec() {
    local rc
    timeout 20 "$W" -n 2 ./no-such-program-$$ 2>"$T/j.err"
    rc=$?
    if [ $rc -eq 0 ]; then fail "cannot execute" "exit 0"
    elif ! grep -q "cannot execute './no-such-program-$$': No such file or directory" \
            "$T/j.err"; then
        fail "cannot execute" "message: $(cat "$T/j.err")"
    else ok "cannot execute: exit $rc with a message"; fi
}

# extras: -np, -x, --addr
case_options() {
    local out
    out=$(timeout 20 "$W" -np 2 -x FOO=bar -x BAZ=a=b --addr 127.0.0.1:4321 \
        sh -c 'echo $FOO $BAZ $WEFT_ADDR' | sort -u)
    if [ "$out" = "bar a=b 127.0.0.1:4321" ]; then ok "-np, -x and --addr"
    else fail "-np, -x and --addr" "got '$out'"; fi
    # -x VAR alone passes on this shell's value, as mpirun -x (it unset VAR before)
    out=$(FOO=here timeout 20 "$W" -n 2 -x FOO sh -c 'echo ${FOO-unset}' | sort -u)
    if [ "$out" = "here" ]; then ok "-x VAR alone passes its value on"
    else fail "-x VAR alone" "the ranks saw '$out'"; fi
    # -x WEFT_SECRET=value works, and says the secret is on the command line (ps)
    out=$(timeout 20 "$W" -n 2 -x WEFT_SECRET=0123456789abcdef0123 sh -c 'echo $WEFT_SECRET' \
        2>"$T/sx.err" | sort -u)
    if [ "$out" = "0123456789abcdef0123" ] && grep -q "every user of this host can read" "$T/sx.err"
    then ok "-x WEFT_SECRET=value: passed on, with a warning"
    else fail "-x WEFT_SECRET=value" "ranks saw '$out'; stderr: $(cat "$T/sx.err")"; fi
    # --report-bindings without --bind-to core says the rank was left unbound, and by whom
    timeout 20 "$W" -n 2 --report-bindings true 2>"$T/rb.err"
    if [ "$(grep -c 'not bound by weftrun (weft.s init places it' "$T/rb.err")" = 2 ]; then
        ok "--report-bindings without --bind-to core: a line per rank"
    else fail "--report-bindings without --bind-to core" "stderr: $(cat "$T/rb.err")"; fi
}

case_env
case_fresh_secret
case_rank_fails
case_escalation
case_rank_killed
case_launcher_killed
case_launcher_killed_tree
case_launcher_group_killed
case_nothing_lingers
case_tag_stalled
case_tag_output
case_tag_interleave
case_sigterm
case_sigusr1
case_bad_args
case_help
case_timeout
case_secret_passthrough
case_noexec
case_options

# --bind-to core: each of 2 ranks on its own core (Open MPI's default for 2 ranks);
# without it the kernel's whole set; a wrong value is a usage error
case_bind() {
    local out all cores
    all=$(grep Cpus_allowed_list /proc/self/status | awk '{print $2}')
    out=$(timeout 30 "$W" -n 2 --bind-to core --report-bindings sh -c \
        'echo "$WEFT_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)"' 2>"$T/bind.err")
    cores=$(echo "$out" | awk '{print $2}' | sort -u | wc -l)
    if [ "$(nproc)" -lt 2 ]; then
        echo "skip - bind: fewer than 2 cores"
    elif [ "$cores" = 2 ] && ! echo "$out" | awk '{print $2}' | grep -q '[-,]' &&
         [ "$(grep -c 'weftrun: rank' "$T/bind.err")" = 2 ]; then
        ok "--bind-to core puts 2 ranks on one core each ($(echo "$out" | tr '\n' ' '))"
    else
        fail "--bind-to core" "ranks on: $(echo "$out" | tr '\n' ' ')"
    fi
    out=$(timeout 30 "$W" -n 2 sh -c 'grep Cpus_allowed_list /proc/self/status | cut -f2' | sort -u)
    if [ "$out" = "$all" ]; then
        ok "without --bind-to the ranks keep every cpu ($all)"
    else
        fail "no binding by default" "ranks on $out, this shell on $all"
    fi
    # more ranks than cores: bound, sharing, and weftrun says so (Open MPI refuses it)
    local ncores n
    ncores=$(timeout 30 "$(dirname "$W")/weft-topo" 2>/dev/null | sed -n 's/.* cores \([0-9]*\), pus.*/\1/p')
    n=$(( ${ncores:-0} + 1 ))
    if [ -z "$ncores" ] || [ "$n" -gt 64 ]; then
        echo "skip - --bind-to core oversubscribed: cores unknown or too many ($ncores)"
    elif timeout 30 "$W" -n "$n" --bind-to core true 2>"$T/over.err" &&
         grep -q "weftrun: --bind-to core: $n ranks on $ncores cores: .* share a core" "$T/over.err"; then
        ok "--bind-to core with $n ranks on $ncores cores: runs, and says they share"
    else
        fail "--bind-to core oversubscribed" "stderr: $(cat "$T/over.err")"
    fi
    timeout 30 "$W" -n 2 --bind-to socket true >/dev/null 2>&1
    local rc=$?
    if [ "$rc" = 2 ]; then ok "--bind-to socket is a usage error (exit 2)"
    else fail "--bind-to socket" "exit $rc"; fi
}
case_bind

echo "test_weftrun: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
