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
# on 2 ranks (weftrun) every --shard strategy on the device gives the CPU's figures and
# model, and a sharded device checkpoint resumes on the device and on 1 CPU rank. The
# kernels themselves are not checked here (test_train_gpu on a GPU); on a GPU machine,
# TRAIN_BIN=build/bin/weft-train TOL=1e-3 MTOL=1e-3 [NR=4] runs the same checks for real.
# Skipped (exit 0, saying so) where the build has no CUDA. Ends "N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 2
B=${1:-${BUILD:-build}}
# On a GPU machine the same comparisons run the real thing: TRAIN_BIN=build/bin/weft-train
# (cuBLAS against OpenBLAS: TOL=1e-3 MTOL=1e-3), NR ranks on the one GPU (default 2).
TOL=${TOL:-1e-4}     # step figures, relative
MTOL=${MTOL:-1e-5}   # saved models, of the largest parameter
NR=${NR:-2}
if [ -z "${TRAIN_BIN:-}" ]; then
    # libweft's own CUDA dispatch stays off: the emulation stands in for the runtime
    export WEFT_CUDA=0
fi
E=${TRAIN_BIN:-$B/tests/probe_train_emu}
if [ ! -x "$E" ]; then
    echo "test_train_gpu_emu.sh: $E not built (a build without CUDA): skipped"
    echo "test_train_gpu_emu.sh: 0 passed, 0 failed"
    exit 0
fi
PASS=0
FAIL=0
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-gpuemu.XXXXXX")
# The text the runs train on: a fixed file (a copy of README.md from 2026-11-27). The
# device and CPU runs sum in different orders, and their gap depends on the data: the
# suite trained on README.md itself until then, and an edit of it moved the gap of the
# 2-rank runs from under the bar to 1.24e-5 of 1e-5.
TEXT=tests/data/train_text.txt
trap 'rm -rf "$OUT"' EXIT
ok()  { PASS=$((PASS + 1)); echo "ok - $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && tail -n 10 "$2" | sed 's/^/   | /'; }
tr() { timeout -k 5 60 "$E" --data "$TEXT" --layers 2 --dim 32 --heads 4 --ctx 32 -b 4 \
           -t 32 --lr 1e-3 --wd 0.1 --seed 5 "$@"; }

# the JSON lines of two runs agree on every number within TOL relative
same_json() {
    python3 - "$1" "$2" "$TOL" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
keys = ("loss", "grad_norm", "val_loss")
if len(a) != len(b) or not a:
    sys.exit("%d vs %d lines" % (len(a), len(b)))
for x, y in zip(a, b):
    for k in keys:
        if (k in x) != (k in y) or (k in x and abs(x[k] - y[k]) > tol * abs(y[k])):
            sys.exit("step %s %s: %s vs %s" % (x.get("step"), k, x.get(k), y.get(k)))
PY
}
# two llm.c checkpoints hold the same parameters within MTOL of the largest
same_model() {
    python3 - "$1" "$2" "$MTOL" <<'PY'
import struct, sys
def floats(p):
    d = open(p, "rb").read()
    return struct.unpack("<%df" % ((len(d) - 1024) // 4), d[1024:])
a, b = floats(sys.argv[1]), floats(sys.argv[2])
m = max(abs(x) for x in b)
e = max(abs(x - y) for x, y in zip(a, b))
if len(a) != len(b) or e > float(sys.argv[3]) * m:
    sys.exit("models differ: %d vs %d floats, max diff %g of %g" % (len(a), len(b), e, m))
PY
}

common=(--steps 6 --val-every 3 --val-batches 2)
if tr "${common[@]}" --device cpu --json "$OUT/cpu.json" --save-model "$OUT/cpu.bin" \
        >"$OUT/cpu.log" 2>&1 &&
   tr "${common[@]}" --device cuda --json "$OUT/gpu.json" --save-model "$OUT/gpu.bin" \
        --sample 8 >"$OUT/gpu.log" 2>&1; then
    want="device cuda (host emulation"
    [ -n "${TRAIN_BIN:-}" ] && want="device cuda ("
    grep -qF "$want" "$OUT/gpu.log" && ok "the header names the device" ||
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

# Sharded on the device, 2 ranks (weftrun): every --shard strategy gives the losses, norms,
# val losses and saved model of the same strategy on the CPU (which test_shard.py holds to
# 1 rank's); shard/'s state is in ("device") memory behind the device table, its
# collectives weft_cuda.h's calls (here weft.h's, between the two processes)
W=$B/bin/weftrun
trn() { timeout -k 5 60 "$W" -n "$NR" "$E" --data "$TEXT" --layers 2 --dim 32 --heads 4 \
            --ctx 32 -b 4 -t 32 --lr 1e-3 --wd 0.1 --seed 5 "$@"; }
for v in "none" "zero1" "grad_op" "full" "hybrid --shard-group 1" \
         "full --param-dtype bf16 --reduce-dtype bf16" "zero1 --accum 2"; do
    t=$(echo "$v" | sed 's/[^a-z0-9]/_/g')
    # bf16 gathers: a gathered weight that lands on the other side of a bf16 rounding
    # boundary (the emulated cuBLAS and the CPU's matmul sum in different orders) moves
    # the model by ~3e-5 of its largest value over 6 steps, depending on the data (the
    # runs trained on README.md: an edit of it took the gap from under 1e-5 to 3.1e-5,
    # the same in every run); 1e-4 there
    # On a GPU with more than 2 ranks, bf16 reductions round differently on the two devices:
    # the CPU's ring rounds each partial sum to bf16 (N-1 times), the GPU's kernel sums all
    # N inputs in fp32 and rounds once. A gradient whose sum is within that rounding of zero
    # then gets the other sign, and AdamW's first step moves its weight by lr the other way:
    # 2 lr apart. Measured on an H200 (4 ranks): 1.98e-3 at lr 1e-3; on the CPU alone, 4
    # ranks with --reduce-dtype bf16 against fp32 differ by the same 1.99e-3. There 2.5 lr.
    mtol=$MTOL
    case "$v" in *bf16*) mtol=$(python3 -c "print(max($MTOL, 1e-4))") ;; esac
    case "$v" in *"--reduce-dtype bf16"*)
        [ -n "${TRAIN_BIN:-}" ] && [ "$NR" -gt 2 ] && mtol=$(python3 -c "print(max($mtol, 2.5e-3))") ;;
    esac
    # shellcheck disable=SC2086
    if trn "${common[@]}" --shard $v --device cuda --json "$OUT/sg.$t.json" \
            --save-model "$OUT/sg.$t.bin" >"$OUT/sg.$t.log" 2>&1 &&
       trn "${common[@]}" --shard $v --device cpu --json "$OUT/sc.$t.json" \
            --save-model "$OUT/sc.$t.bin" >"$OUT/sc.$t.log" 2>&1; then
        if same_json "$OUT/sg.$t.json" "$OUT/sc.$t.json" >"$OUT/sj.$t.log" 2>&1 &&
           MTOL=$mtol same_model "$OUT/sg.$t.bin" "$OUT/sc.$t.bin" >>"$OUT/sj.$t.log" 2>&1 &&
           grep -q "comm exposed" "$OUT/sg.$t.log"; then
            ok "$NR ranks, --shard $v on the device: the CPU's figures and model"
        else
            bad "--shard $v on the device" "$OUT/sj.$t.log"
        fi
    else
        bad "--shard $v runs" "$OUT/sg.$t.log"
    fi
done
# a sharded device checkpoint: resumed on the device = the straight run, and it loads on
# the CPU (1 rank) too, as any weft-train checkpoint does
if trn --steps 3 --device cuda --shard full --ckpt-dir "$OUT/sck" --ckpt-every 3 \
        >"$OUT/sr1.log" 2>&1 &&
   trn --steps 6 --device cuda --shard full --ckpt-dir "$OUT/sck" --resume \
        --save-model "$OUT/sres.bin" >"$OUT/sr2.log" 2>&1 && grep -q "resumed from" "$OUT/sr2.log" &&
   trn --steps 6 --device cuda --shard full --save-model "$OUT/sstr.bin" >"$OUT/sr3.log" 2>&1
then
    same_model "$OUT/sres.bin" "$OUT/sstr.bin" >"$OUT/sr.log" 2>&1 &&
        ok "sharded on the device: resumed = the straight run" || bad "sharded resume" "$OUT/sr.log"
    tr --batch $((4 * NR)) --steps 6 --device cpu --ckpt-dir "$OUT/sck" --resume \
        --save-model "$OUT/sres1.bin" >"$OUT/sr4.log" 2>&1 &&
        same_model "$OUT/sres1.bin" "$OUT/sstr.bin" >"$OUT/sr5.log" 2>&1 &&
        ok "the sharded device checkpoint resumes on 1 CPU rank (-b $((4 * NR))) to the same model" ||
        bad "device checkpoint on the CPU" "$OUT/sr5.log"
else
    bad "sharded checkpoint and resume" "$OUT/sr2.log"
fi
# a collective that fails after its call returned (the stream queue's: emulated by
# WEFT_EMU_QUEUE_FAIL, tests/emu_cudart.c) in the last stream call of step 1: the run
# fails saying so and saves no checkpoint of that step (the update, or the state beside
# a failed gather, is not saved). Here only: a real GPU has no such injection.
if [ -z "${TRAIN_BIN:-}" ]; then
    for v in none full; do
        n=$(WEFT_EMU_STREAM_TRACE=1 trn --steps 1 --device cuda --shard $v 2>&1 |
            grep -c "^emu: stream call")
        k=$((n / NR))
        WEFT_EMU_QUEUE_FAIL=$k trn --steps 2 --device cuda --shard $v --ckpt-dir "$OUT/qf.$v" \
            --ckpt-every 1 >"$OUT/qf.$v.log" 2>&1
        rc=$?
        if [ "$k" -gt 0 ] && [ "$rc" != 0 ] && grep -q "failed after it returned" "$OUT/qf.$v.log" &&
           [ ! -e "$OUT/qf.$v/step-00000001" ]; then
            ok "--shard $v: stream call $k (the last of step 1) fails late: the run stops, no checkpoint of step 1"
        else
            bad "--shard $v: a late failure in call $k (exit $rc; checkpoints: $(ls "$OUT/qf.$v" 2>/dev/null | tr '\n' ' '))" "$OUT/qf.$v.log"
        fi
    done
fi
echo "test_train_gpu_emu.sh: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
