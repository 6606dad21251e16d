#!/usr/bin/env bash
# test_train_gpu_emu.sh - weft-train --device cuda end to end over the host emulation of
# the CUDA runtime (probe_train_emu: weft-train linked with tests/emu_cuda_host.c), against
# --device cpu.
#
#   bash tests/test_train_gpu_emu.sh [BUILD]
#
# Checks train.c's device path where no GPU is: the same 6 steps on both devices give the
# same losses, grad norms and val losses (1e-4 relative) and the same saved model; a run
# resumed on the device from a step-3 checkpoint saves the same model as the straight run
# (parameters and AdamW moments make the round trip); --sample runs after device training;
# several ranks are refused. The kernels themselves are not checked here (test_train_gpu
# on a GPU). Skipped (exit 0, saying so) where the build has no CUDA. Ends "N passed, N
# failed".
set -u
cd "$(dirname "$0")/.." || exit 2
B=${1:-${BUILD:-build}}
# libweft's own CUDA dispatch stays off: the emulation stands in for the runtime (Makefile)
export WEFT_CUDA=0
E=$B/tests/probe_train_emu
if [ ! -x "$E" ]; then
    echo "test_train_gpu_emu.sh: $E not built (a build without CUDA): skipped"
    echo "test_train_gpu_emu.sh: 0 passed, 0 failed"
    exit 0
fi
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-gpuemu.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
ok()  { PASS=$((PASS + 1)); echo "ok - $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && tail -n 10 "$2" | sed 's/^/   | /'; }
tr() { timeout -k 5 60 "$E" --data README.md --layers 2 --dim 32 --heads 4 --ctx 32 -b 4 \
           -t 32 --lr 1e-3 --wd 0.1 --seed 5 "$@"; }

# the JSON lines of two runs agree on every number within 1e-4 relative
same_json() {
    python3 - "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
keys = ("loss", "grad_norm", "val_loss")
if len(a) != len(b) or not a:
    sys.exit("%d vs %d lines" % (len(a), len(b)))
for x, y in zip(a, b):
    for k in keys:
        if (k in x) != (k in y) or (k in x and abs(x[k] - y[k]) > 1e-4 * abs(y[k])):
            sys.exit("step %s %s: %s vs %s" % (x.get("step"), k, x.get(k), y.get(k)))
PY
}
# two llm.c checkpoints hold the same parameters within 1e-5 of the largest
same_model() {
    python3 - "$1" "$2" <<'PY'
import struct, sys
def floats(p):
    d = open(p, "rb").read()
    return struct.unpack("<%df" % ((len(d) - 1024) // 4), d[1024:])
a, b = floats(sys.argv[1]), floats(sys.argv[2])
m = max(abs(x) for x in b)
e = max(abs(x - y) for x, y in zip(a, b))
if len(a) != len(b) or e > 1e-5 * m:
    sys.exit("models differ: %d vs %d floats, max diff %g of %g" % (len(a), len(b), e, m))
PY
}

common=(--steps 6 --val-every 3 --val-batches 2)
if tr "${common[@]}" --device cpu --json "$OUT/cpu.json" --save-model "$OUT/cpu.bin" \
        >"$OUT/cpu.log" 2>&1 &&
   tr "${common[@]}" --device cuda --json "$OUT/gpu.json" --save-model "$OUT/gpu.bin" \
        --sample 8 >"$OUT/gpu.log" 2>&1; then
    grep -q "device cuda (host emulation" "$OUT/gpu.log" && ok "the header names the device" ||
        bad "device line" "$OUT/gpu.log"
    same_json "$OUT/gpu.json" "$OUT/cpu.json" >"$OUT/j.log" 2>&1 &&
        ok "6 steps: losses, norms, val losses as on the CPU" || bad "step figures" "$OUT/j.log"
    same_model "$OUT/gpu.bin" "$OUT/cpu.bin" >"$OUT/m.log" 2>&1 &&
        ok "the saved model is the CPU's" || bad "saved model" "$OUT/m.log"
    grep -q "^sample" "$OUT/gpu.log" && ok "sample after device training" ||
        bad "sample" "$OUT/gpu.log"
else
    bad "the two runs" "$OUT/gpu.log"
fi

# 3 steps with a checkpoint, then resumed to 6 on the device: the straight run's model
if tr --steps 3 --device cuda --ckpt-dir "$OUT/ck" --ckpt-every 3 >"$OUT/r1.log" 2>&1 &&
   tr --steps 6 --device cuda --ckpt-dir "$OUT/ck" --resume --save-model "$OUT/res.bin" \
        >"$OUT/r2.log" 2>&1 && grep -q "resumed from" "$OUT/r2.log"; then
    tr --steps 6 --device cuda --save-model "$OUT/str.bin" >"$OUT/r3.log" 2>&1
    same_model "$OUT/res.bin" "$OUT/str.bin" >"$OUT/r.log" 2>&1 &&
        ok "resumed on the device = the straight run (parameters and moments)" ||
        bad "resume" "$OUT/r.log"
else
    bad "checkpoint and resume" "$OUT/r2.log"
fi

WEFT_WORLD_SIZE=2 WEFT_RANK=0 tr --steps 1 --device cuda >"$OUT/n.log" 2>&1
[ $? = 1 ] && grep -q "runs one rank" "$OUT/n.log" && ok "several ranks refused" ||
    bad "several ranks" "$OUT/n.log"
echo "test_train_gpu_emu.sh: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
