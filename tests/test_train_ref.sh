#!/usr/bin/env bash
# test_train_ref.sh - weft-train against PyTorch, end to end.
#
#   bash tests/test_train_ref.sh [build]      (build dir, default build; run from anywhere)
#
# weft-train writes a freshly initialised checkpoint (--steps 0 --save-model);
# tests/train_ref.py (PyTorch, /usr/bin/python3) runs the same model on a batch and writes a
# state file (logits, loss, every gradient, a 10-step AdamW loss trajectory); and
# `test_train --ref STATE MODEL` recomputes all of it in C and fails on any mismatch.
# Cases: V=100 (padded to Vp, so the padded rows are exercised) on a random batch; V=256 on
# a batch taken from a byte text; and weft-train's own training loop on that batch, its
# printed step losses against the reference trajectory. Then the check is shown to fail:
# one gradient (by 1% of the largest) or one trajectory loss corrupted in a copy of the
# state file, and a state that belongs to another model, must each make test_train --ref
# exit non-zero; and the reference must pass its own check (--check-self: gradcheck, an
# independent forward, AdamW by hand) and refuse a truncated checkpoint.
#
# Prints "ok - NAME" or "FAIL - NAME: why" per case, then
# "test_train_ref.sh: N passed, M failed"; exits non-zero on any failure. Exits 0 with
# "skipped: python3-torch missing" only when /usr/bin/python3 cannot import torch.
#
# Invariants: every command runs under `timeout`; all files live in one temporary directory
# removed on exit; the threads are held to one (the answers must not depend on them).

set -u
cd "$(dirname "$0")/.." || exit 2
B=${1:-build}
PY=${TRAIN_REF_PYTHON:-/usr/bin/python3}   # override only to test the skip path
REF=tests/train_ref.py
TRAIN=$B/bin/weft-train
CHECK=$B/tests/test_train
TO=${TRAIN_REF_TIMEOUT:-300}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

if ! timeout 60 "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "test_train_ref.sh: skipped: python3-torch missing ($PY cannot import torch; make deps)"
    exit 0
fi

D=$(mktemp -d "${TMPDIR:-/tmp}/test_train_ref.XXXXXX") || exit 1
trap 'rm -rf "$D"' EXIT
PASS=0
FAIL=0

ok()   { PASS=$((PASS + 1)); echo "ok - $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL - $1: $2"; }

# step NAME LOG CMD...: runs CMD bounded, output to LOG; on failure reports the tail.
step() {
    local name=$1 log=$2 rc
    shift 2
    timeout -k 5 "$TO" "$@" >"$log" 2>&1 </dev/null
    rc=$?
    if [ "$rc" = 0 ]; then
        return 0
    fi
    [ "$rc" = 124 ] && rc="timed out after ${TO}s"
    fail "$name" "'$*' -> $rc"
    tail -n 30 "$log" | sed 's/^/    | /'
    return 1
}

# expect_fail NAME LOG CMD...: CMD must exit non-zero (and not by timeout or a signal).
expect_fail() {
    local name=$1 log=$2 rc
    shift 2
    timeout -k 5 "$TO" "$@" >"$log" 2>&1 </dev/null
    rc=$?
    if [ "$rc" = 0 ]; then
        fail "$name" "'$*' passed, it must fail"
        tail -n 20 "$log" | sed 's/^/    | /'
    elif [ "$rc" -ge 124 ]; then
        fail "$name" "'$*' -> $rc (timeout or signal, not a clean failure)"
        tail -n 20 "$log" | sed 's/^/    | /'
    else
        ok "$name (exit $rc: $(grep -v '^\s*$' "$log" | tail -n 1 | cut -c1-100))"
    fi
}

# corrupt STATE OUT WHAT: a copy of STATE with one value changed; WHAT is grad or traj.
corrupt() {
    timeout 60 "$PY" - "$@" <<'EOF'
import os, sys
import numpy as np
src, dst, what = sys.argv[1:4]
buf = bytearray(open(src, "rb").read())
hdr = np.frombuffer(bytes(buf[:1024]), dtype="<i4")
B, T, V, nsteps = (int(v) for v in hdr[2:6])
g0 = 1024 + 8 * B * T + 4 * B * T * V + 4                 # first gradient
nparams = (len(buf) - g0 - 32 - 4 * nsteps) // 4
if what == "grad":
    g = np.frombuffer(bytes(buf[g0:g0 + 4 * nparams]), dtype="<f4")
    i = nparams // 2                                       # inside some layer's tensor
    off, new = g0 + 4 * i, g[i] + 0.01 * np.abs(g).max()  # 1% of the largest gradient
    print(f"grads[{i}] of {nparams}: {g[i]:.6g} -> {new:.6g}")
else:
    off = len(buf) - 4                                     # the last trajectory loss
    old = np.frombuffer(bytes(buf[off:off + 4]), dtype="<f4")[0]
    new = old + 0.01
    print(f"losses[{nsteps - 1}]: {old:.6f} -> {new:.6f}")
buf[off:off + 4] = np.float32(new).tobytes()
open(dst, "wb").write(buf)
EOF
}

# 0. The reference checks itself.
if step "train_ref --check-self" "$D/self.log" "$PY" "$REF" --check-self; then
    ok "train_ref --check-self ($(tail -n 1 "$D/self.log"))"
fi

missing=""
[ -x "$TRAIN" ] || missing="$missing $TRAIN"
[ -x "$CHECK" ] || missing="$missing $CHECK"
if [ -n "$missing" ]; then
    fail "weft-train against PyTorch" "missing:$missing (make $TRAIN $CHECK)"
    echo "test_train_ref.sh: $PASS passed, $FAIL failed"
    exit 1
fi

# case NAME SEED VOCAB REF-ARGS...: init with weft-train, reference, compare in C.
# Leaves $D/NAME.bin (model) and $D/NAME.state on success.
case_ref() {
    local name=$1 seed=$2 vocab=$3
    shift 3
    local m=$D/$name.bin s=$D/$name.state
    step "$name: weft-train init" "$D/$name.init.log" "$TRAIN" --layers 2 --dim 64 \
        --heads 4 --ctx 64 --vocab "$vocab" --seed "$seed" --steps 0 --threads 1 \
        --save-model "$m" || return 1
    step "$name: train_ref.py" "$D/$name.ref.log" "$PY" "$REF" --model "$m" --out "$s" \
        -b 4 -t 32 --steps 10 "$@" || return 1
    sed 's/^/    /' "$D/$name.ref.log"
    step "$name: test_train --ref" "$D/$name.check.log" "$CHECK" --ref "$s" "$m" || return 1
    ok "$name: weft matches PyTorch ($(grep -E 'passed|failed' "$D/$name.check.log" \
        | tail -n 1 | cut -c1-100))"
}

# 1. V=100 (Vp > V), a random batch.
case_ref v100 1 100 --seed 7
# 2. V=256, a batch from a byte text (the batch holds bytes 0, 255 and UTF-8 ones).
{
    printf 'Bytes above 127 are tokens too: caf\xc3\xa9, na\xc3\xafve, \xff\x00\x01.\n'
    echo "In the beginning God created the heaven and the earth."
    echo "And the earth was without form, and void; and darkness was upon the face of the deep."
    echo "And the Spirit of God moved upon the face of the waters. And God said, Let there be"
    echo "light: and there was light."
} >"$D/text.txt"
case_ref v256 2 256 --data "$D/text.txt"

# 2b. weft-train's own loop (CLI, loader, optimizer flags) on that batch: a text of exactly
# B*T+1 bytes is one batch in order, so every step sees it again, as train_ref's trajectory.
# The bar, 1e-5 relative, is ~100x the rounding seen (1.3e-7); a wrong decay group (decay
# on every tensor) moved step 10 by 2.7e-4 in the V=100 case.
if [ -f "$D/v256.state" ]; then
    head -c $((4 * 32 + 1)) "$D/text.txt" >"$D/batch.txt"
    if step "v256: weft-train --data, 10 steps" "$D/cli.log" "$TRAIN" --model "$D/v256.bin" \
        --data "$D/batch.txt" --val "$D/batch.txt" -b 4 -t 32 --steps 10 --lr 1e-3 \
        --schedule constant --warmup 0 --beta1 0.9 --beta2 0.95 --wd 0.1 --clip 1.0 \
        --no-shuffle --threads 1; then
        if timeout 60 "$PY" - "$D/v256.state" "$D/cli.log" >"$D/cmp.log" 2>&1 <<'EOF'
import re, sys
import numpy as np
state, log = sys.argv[1:3]
buf = open(state, "rb").read()
n = int(np.frombuffer(buf[:1024], dtype="<i4")[5])
ref = np.frombuffer(buf[len(buf) - 4 * n:], dtype="<f4").astype(np.float64)
got = [float(m.group(1)) for m in
       re.finditer(r"^step +\d+ +\| +loss +([-0-9.eE+naif]+) +\|", open(log).read(), re.M)]
if len(got) != n:
    sys.exit(f"weft-train printed {len(got)} step lines, the reference has {n} steps")
rel = np.abs(np.array(got) - ref) / np.abs(ref)
print(f"{n} steps, max rel diff {rel.max():.2e} (bar 1e-5), last loss {got[-1]:.6f} "
      f"ref {ref[-1]:.6f}")
sys.exit(0 if rel.max() <= 1e-5 else 1)
EOF
        then
            ok "v256: weft-train's step losses match the reference trajectory ($(cat "$D/cmp.log"))"
        else
            fail "v256: weft-train's step losses vs the reference" "$(tail -n 3 "$D/cmp.log")"
            grep -E '^step ' "$D/cli.log" | sed 's/^/    | /'
        fi
    fi
fi

# 3. The comparison can fail.
if [ -f "$D/v100.state" ]; then
    if corrupt "$D/v100.state" "$D/grad.state" grad >"$D/corrupt.log" 2>&1; then
        expect_fail "corrupted gradient is caught [$(cat "$D/corrupt.log")]" \
            "$D/neg1.log" "$CHECK" --ref "$D/grad.state" "$D/v100.bin"
    else
        fail "corrupt a gradient" "$(tail -n 3 "$D/corrupt.log")"
    fi
    if corrupt "$D/v100.state" "$D/traj.state" traj >"$D/corrupt.log" 2>&1; then
        expect_fail "corrupted trajectory loss is caught [$(cat "$D/corrupt.log")]" \
            "$D/neg2.log" "$CHECK" --ref "$D/traj.state" "$D/v100.bin"
    else
        fail "corrupt a trajectory loss" "$(tail -n 3 "$D/corrupt.log")"
    fi
    if [ -f "$D/v256.bin" ]; then
        expect_fail "state of another model is refused" "$D/neg3.log" \
            "$CHECK" --ref "$D/v100.state" "$D/v256.bin"
    fi
    head -c 5000 "$D/v100.bin" >"$D/short.bin"
    expect_fail "train_ref refuses a truncated checkpoint" "$D/neg4.log" \
        "$PY" "$REF" --model "$D/short.bin" --out "$D/never.state"
    [ -e "$D/never.state" ] && fail "train_ref output on error" "wrote $D/never.state"
fi

echo "test_train_ref.sh: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
