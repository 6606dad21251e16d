#!/usr/bin/env python3
"""train_ref.py - the PyTorch reference that weft-train is checked against.

GPT-2 exactly as llm.c lays it out (learned positions, pre-LayerNorm, causal attention with
scale 1/sqrt(head size), tanh-GELU MLP, LayerNorm eps 1e-5, biases everywhere, the head tied
to wte, the vocabulary padded from V to Vp rows of wte of which only the first V are ever
used), written from scratch in plain float32 PyTorch. The parameters are kept as llm.c's 16
tensors in llm.c's order, the per-layer ones stacked over L, so that a gradient is written
in the same flat layout as the checkpoint without any reshuffling.

  /usr/bin/python3 tests/train_ref.py --model m.bin --out s.bin -b 4 -t 32 --seed 7 --steps 10
  /usr/bin/python3 tests/train_ref.py --model m.bin --out s.bin -b 4 -t 32 --data text.txt
  /usr/bin/python3 tests/train_ref.py --init-model m.bin --layers 2 --dim 64 --heads 4 \\
      --ctx 64 --vocab 100 --seed 1          # a GPT-2-initialised llm.c checkpoint
  /usr/bin/python3 tests/train_ref.py --check-self   # the reference checked against itself

Input: an llm.c fp32 checkpoint (version 3): int32 header[256] = {20240326, 3, maxT, V, L,
NH, C, Vp, 0...}, then the parameters as float32 in the order of PARAMS below.

Output (--out): the state file that `test_train --ref` reads, little-endian, an extension
of llm.c's debug state (version 2):
  int32   header[256]     {20240327, 2, B, T, V, nsteps, 0...}
  int32   x[B*T], y[B*T]  the batch (inputs, targets)
  float32 logits[B*T*V]   first forward, the V real columns only
  float32 loss            mean cross-entropy over the B*T positions
  float32 grads[P]        d loss / d params in the checkpoint's flat layout (padded rows 0)
  float32 hyper[8]        lr, beta1, beta2, eps, weight_decay, grad_clip (0 = off), 0, 0
  float32 losses[nsteps]  from the checkpoint's weights and a fresh AdamW: step i is a
                          forward on the same batch (losses[i]), backward, clip, AdamW step

Optimizer conventions (the C side must use the same): torch.optim.AdamW, constant lr, two
groups: weight decay on the matrices wte, wpe, qkvw, attprojw, fcw, fcprojw (the tensors of
2+ dimensions in llm.c's train_gpt2.py), none on LayerNorm parameters or biases. Clipping by
torch.nn.utils.clip_grad_norm_ over all parameters: grads scaled by clip / (norm + 1e-6)
when that is below 1. AdamW decays before the update: p *= 1 - lr*wd, then
p -= lr * m_hat / (sqrt(v_hat) + eps).

The batch: --seed S draws x and y uniformly from [0, V) (torch.manual_seed(S), x first);
--data FILE takes x = tok[0 : B*T], y = tok[1 : B*T+1] from a byte text or an llm.c token
shard (int32 header[256] = {20240520, 1, ntok, ...} then uint16 tokens).

Runs on one thread (torch.set_num_threads(1), and OPENBLAS_NUM_THREADS=1 unless set) so the
numbers do not depend on the machine.
"""
import argparse
import math
import os
import sys

# Debian's torch does its matmuls in OpenBLAS (pthreads), which torch.set_num_threads does
# not reach: hold it to one thread too, before it loads, or the rounding (and so the
# reference's last bits) would depend on the machine's core count.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F

CKPT_MAGIC, CKPT_VERSION = 20240326, 3
STATE_MAGIC, STATE_VERSION = 20240327, 2
SHARD_MAGIC = 20240520
HEADER_INTS = 256
LN_EPS = 1e-5

# llm.c's parameter tensors in checkpoint order, with their shapes as functions of the sizes.
PARAMS = [
    ("wte", lambda c: (c.Vp, c.C)),
    ("wpe", lambda c: (c.maxT, c.C)),
    ("ln1w", lambda c: (c.L, c.C)),
    ("ln1b", lambda c: (c.L, c.C)),
    ("qkvw", lambda c: (c.L, 3 * c.C, c.C)),
    ("qkvb", lambda c: (c.L, 3 * c.C)),
    ("attprojw", lambda c: (c.L, c.C, c.C)),
    ("attprojb", lambda c: (c.L, c.C)),
    ("ln2w", lambda c: (c.L, c.C)),
    ("ln2b", lambda c: (c.L, c.C)),
    ("fcw", lambda c: (c.L, 4 * c.C, c.C)),
    ("fcb", lambda c: (c.L, 4 * c.C)),
    ("fcprojw", lambda c: (c.L, c.C, 4 * c.C)),
    ("fcprojb", lambda c: (c.L, c.C)),
    ("lnfw", lambda c: (c.C,)),
    ("lnfb", lambda c: (c.C,)),
]
PARAM_NAMES = [n for n, _ in PARAMS]
# Weight decay applies to these (llm.c train_gpt2.py: p.dim() >= 2 of the unstacked model).
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


class RefError(Exception):
    """A bad input (file, option): the CLI prints it and exits 1."""


class Config:
    """The model's sizes, as in the checkpoint header."""

    def __init__(self, maxT, V, L, NH, C, Vp):
        self.maxT, self.V, self.L, self.NH, self.C, self.Vp = maxT, V, L, NH, C, Vp

    def shapes(self):
        return [(n, f(self)) for n, f in PARAMS]

    def num_params(self):
        return sum(math.prod(s) for _, s in self.shapes())

    def validate(self):
        for k in ("maxT", "V", "L", "NH", "C", "Vp"):
            if getattr(self, k) <= 0:
                raise RefError(f"{k} = {getattr(self, k)} must be positive")
        if self.C % self.NH:
            raise RefError(f"channels C = {self.C} are not a multiple of heads NH = {self.NH}")
        if self.Vp < self.V:
            raise RefError(f"padded vocab Vp = {self.Vp} is smaller than V = {self.V}")

    def __str__(self):
        return (f"L={self.L} C={self.C} NH={self.NH} maxT={self.maxT} V={self.V} "
                f"Vp={self.Vp} params={self.num_params()}")


# ----------------------------------------------------------------------------------------
# The model: a pure function of a dict of the 16 tensors, so gradcheck can drive it too.

def gpt2_forward(p, cfg, idx, targets=None):
    """idx, targets (B, T) int64 -> logits (B, T, V), loss (scalar, or None)."""
    B, T = idx.shape
    C, NH = cfg.C, cfg.NH
    hs = C // NH
    x = p["wte"][idx] + p["wpe"][:T]                                    # (B, T, C)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(cfg.L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], LN_EPS)
        qkv = h @ p["qkvw"][l].t() + p["qkvb"][l]                       # (B, T, 3C)
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)                        # (B, NH, T, hs)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(hs))           # (B, NH, T, T)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)                  # (B, T, C)
        x = x + y @ p["attprojw"][l].t() + p["attprojb"][l]
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], LN_EPS)
        h = F.gelu(h @ p["fcw"][l].t() + p["fcb"][l], approximate="tanh")  # (B, T, 4C)
        x = x + h @ p["fcprojw"][l].t() + p["fcprojb"][l]
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], LN_EPS)
    logits = x @ p["wte"][: cfg.V].t()                                  # (B, T, V)
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.reshape(B * T, cfg.V), targets.reshape(B * T))
    return logits, loss


class GPT2(torch.nn.Module):
    """The 16 llm.c tensors as parameters, registered (and so iterated) in checkpoint order."""

    def __init__(self, cfg, dtype=torch.float32):
        super().__init__()
        self.cfg = cfg
        for name, shape in cfg.shapes():
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(shape, dtype=dtype)))

    def params(self):
        return {n: getattr(self, n) for n in PARAM_NAMES}

    def forward(self, idx, targets=None):
        return gpt2_forward(self.params(), self.cfg, idx, targets)

    def load_flat(self, flat):
        """Copies a flat array in checkpoint layout into the parameters."""
        flat = torch.as_tensor(np.asarray(flat))
        off = 0
        with torch.no_grad():
            for prm in self.parameters():
                n = prm.numel()
                prm.copy_(flat[off:off + n].view(prm.shape))
                off += n
        assert off == flat.numel()

    def flat(self, grads=False):
        """The parameters (or their gradients, 0 where None) as one flat float32 array."""
        out = []
        for prm in self.parameters():
            t = prm.grad if grads else prm
            out.append(np.zeros(prm.numel(), np.float32) if t is None
                       else t.detach().reshape(-1).numpy().astype(np.float32))
        return np.concatenate(out)

    def optimizer(self, lr, beta1, beta2, eps, wd):
        """AdamW with decay on the matrices only (see the file's comment)."""
        decay = [getattr(self, n) for n in PARAM_NAMES if n in DECAY]
        rest = [getattr(self, n) for n in PARAM_NAMES if n not in DECAY]
        groups = [{"params": decay, "weight_decay": wd},
                  {"params": rest, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps)


def init_gpt2(model, seed):
    """GPT-2 initialisation as llm.c's train_gpt2.py: N(0, 0.02) for the embeddings and the
    linear weights, 0.02/sqrt(2L) for the two residual projections, zero biases, LayerNorm
    (1, 0); the padded rows of wte are zero (as llm.c writes them)."""
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    std_proj = 0.02 / math.sqrt(2 * cfg.L)
    with torch.no_grad():
        for name, prm in model.params().items():
            if name in ("attprojw", "fcprojw"):
                prm.normal_(0.0, std_proj, generator=g)
            elif name in DECAY:
                prm.normal_(0.0, 0.02, generator=g)
            elif name in ("ln1w", "ln2w", "lnfw"):
                prm.fill_(1.0)
            else:
                prm.zero_()
        model.wte[cfg.V:].zero_()


# ----------------------------------------------------------------------------------------
# Files.

def read_checkpoint(path):
    """-> (Config, flat float32 array). Raises RefError on anything inconsistent."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(HEADER_INTS * 4)
            if len(raw) < HEADER_INTS * 4:
                raise RefError(f"{path}: {size} bytes, shorter than the 1024-byte header")
            hdr = np.frombuffer(raw, dtype="<i4")
            if hdr[0] != CKPT_MAGIC:
                raise RefError(f"{path}: bad magic {hdr[0]} (an llm.c checkpoint has "
                               f"{CKPT_MAGIC})")
            if hdr[1] != CKPT_VERSION:
                raise RefError(f"{path}: version {hdr[1]}, only fp32 version {CKPT_VERSION} "
                               f"is supported (version 5 is llm.c's bf16)")
            cfg = Config(maxT=int(hdr[2]), V=int(hdr[3]), L=int(hdr[4]), NH=int(hdr[5]),
                         C=int(hdr[6]), Vp=int(hdr[7]))
            try:
                cfg.validate()
            except RefError as e:
                raise RefError(f"{path}: bad header: {e}") from None
            want = HEADER_INTS * 4 + 4 * cfg.num_params()
            if size != want:
                raise RefError(f"{path}: {size} bytes, but the header ({cfg}) needs {want}")
            flat = np.frombuffer(f.read(), dtype="<f4").astype(np.float32)
    except OSError as e:
        raise RefError(f"{path}: {e.strerror}") from None
    if not np.all(np.isfinite(flat)):
        raise RefError(f"{path}: parameters contain NaN or Inf")
    return cfg, flat


def write_checkpoint(path, model):
    cfg = model.cfg
    hdr = np.zeros(HEADER_INTS, dtype="<i4")
    hdr[:8] = [CKPT_MAGIC, CKPT_VERSION, cfg.maxT, cfg.V, cfg.L, cfg.NH, cfg.C, cfg.Vp]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(model.flat().astype("<f4").tobytes())


def read_tokens(path, n):
    """The first n tokens of an llm.c shard (by its magic) or else of a byte text."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise RefError(f"{path}: {e.strerror}") from None
    hdr = np.frombuffer(data[:HEADER_INTS * 4], dtype="<i4") if len(data) >= 1024 else None
    if hdr is not None and hdr[0] == SHARD_MAGIC:
        ntok = int(hdr[2])
        if len(data) != HEADER_INTS * 4 + 2 * ntok:
            raise RefError(f"{path}: shard header says {ntok} tokens, file has "
                           f"{len(data)} bytes")
        tok = np.frombuffer(data[HEADER_INTS * 4:], dtype="<u2")
        kind = "llm.c shard"
    else:
        tok = np.frombuffer(data, dtype=np.uint8)
        kind = "byte text"
    if len(tok) < n:
        raise RefError(f"{path}: {kind} of {len(tok)} tokens, the batch needs {n}")
    return tok[:n].astype(np.int64), kind


def write_state(path, B, T, V, x, y, logits, loss, grads, hyper, losses):
    hdr = np.zeros(HEADER_INTS, dtype="<i4")
    hdr[:6] = [STATE_MAGIC, STATE_VERSION, B, T, V, len(losses)]
    hyp = np.zeros(8, dtype="<f4")
    hyp[:len(hyper)] = hyper
    parts = [hdr, np.asarray(x, "<i4").reshape(-1), np.asarray(y, "<i4").reshape(-1),
             np.asarray(logits, "<f4").reshape(-1), np.asarray([loss], "<f4"),
             np.asarray(grads, "<f4"), hyp, np.asarray(losses, "<f4")]
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for a in parts:
            f.write(a.tobytes())
    os.replace(tmp, path)          # the output exists only when complete


# ----------------------------------------------------------------------------------------
# The reference run.

def make_batch(args, cfg):
    B, T = args.b, args.t
    if args.data:
        tok, kind = read_tokens(args.data, B * T + 1)
        if tok.max() >= cfg.V:
            raise RefError(f"{args.data}: token {tok.max()} is outside the model's vocab "
                           f"V = {cfg.V}")
        x = torch.from_numpy(tok[:-1].copy()).view(B, T)
        y = torch.from_numpy(tok[1:].copy()).view(B, T)
        return x, y, f"first {B * T + 1} tokens of {args.data} ({kind})"
    V = args.vocab if args.vocab else cfg.V
    if V > cfg.V:
        raise RefError(f"--vocab {V} is larger than the model's V = {cfg.V}")
    torch.manual_seed(args.seed)
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))
    return x, y, f"uniform in [0, {V}), seed {args.seed}"


def train_step(model, opt, x, y, clip):
    """One step: forward, backward, clip, AdamW. -> (loss, grad norm before clipping)."""
    opt.zero_grad(set_to_none=True)
    _, loss = model(x, y)
    loss.backward()
    if clip > 0:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    else:
        norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()]))
    opt.step()
    return loss.item(), norm.item()


def reference(args):
    cfg, flat = read_checkpoint(args.model)
    B, T = args.b, args.t
    if B <= 0 or T <= 0:
        raise RefError(f"-b {B} -t {T}: both must be positive")
    if T > cfg.maxT:
        raise RefError(f"-t {T} is longer than the model's context maxT = {cfg.maxT}")
    x, y, how = make_batch(args, cfg)

    model = GPT2(cfg)
    model.load_flat(flat)
    logits, loss = model(x, y)
    loss.backward()
    grads = model.flat(grads=True)
    gnorm = float(np.linalg.norm(grads.astype(np.float64)))
    pad = grads[cfg.V * cfg.C: cfg.Vp * cfg.C]
    assert not pad.any(), "padded wte rows got a gradient"

    model.load_flat(flat)          # again from the checkpoint, with a fresh optimizer
    model.zero_grad(set_to_none=True)
    opt = model.optimizer(args.lr, args.beta1, args.beta2, args.eps, args.wd)
    losses = [train_step(model, opt, x, y, args.clip)[0] for _ in range(args.steps)]
    if losses and losses[0] != loss.item():
        raise RefError(f"internal: trajectory step 0 loss {losses[0]} != {loss.item()}")

    hyper = [args.lr, args.beta1, args.beta2, args.eps, args.wd, args.clip]
    write_state(args.out, B, T, cfg.V, x, y, logits.detach().numpy(), loss.item(), grads,
                hyper, losses)
    print(f"train_ref: model {args.model}: {cfg}")
    print(f"train_ref: batch B={B} T={T}: {how}")
    print(f"train_ref: loss {loss.item():.6f} (ln V = {math.log(cfg.V):.6f}), "
          f"grad norm {gnorm:.6f}, |logits| max {logits.abs().max().item():.4f}")
    print(f"train_ref: AdamW lr {args.lr} betas ({args.beta1}, {args.beta2}) eps {args.eps} "
          f"wd {args.wd} clip {args.clip}, {args.steps} steps on this batch:")
    for i, l in enumerate(losses):
        print(f"  step {i} | loss {l:.6f}")
    print(f"train_ref: wrote {args.out} ({os.path.getsize(args.out)} bytes)")


def init_model(args):
    Vp = args.vocab_padded or (args.vocab + 127) // 128 * 128
    cfg = Config(maxT=args.ctx, V=args.vocab, L=args.layers, NH=args.heads, C=args.dim, Vp=Vp)
    cfg.validate()
    model = GPT2(cfg)
    init_gpt2(model, args.seed)
    write_checkpoint(args.init_model, model)
    print(f"train_ref: wrote {args.init_model}: {cfg}, GPT-2 init seed {args.seed}")


# ----------------------------------------------------------------------------------------
# --check-self: the reference against torch autograd, an independent forward, and AdamW.

def numpy_forward(p, cfg, idx, targets):
    """llm.c's forward pass again, in float64 numpy loops, written from the formulas (not from
    gpt2_forward) so that a wrong convention in either shows up as a difference."""
    p = {k: v.detach().numpy().astype(np.float64) for k, v in p.items()}
    B, T = idx.shape
    C, NH, V = cfg.C, cfg.NH, cfg.V
    hs = C // NH

    def layernorm(a, w, b):
        mean = a.mean(axis=-1, keepdims=True)
        var = ((a - mean) ** 2).mean(axis=-1, keepdims=True)     # biased, as llm.c
        return (a - mean) / np.sqrt(var + LN_EPS) * w + b

    def gelu(a):
        return 0.5 * a * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a ** 3)))

    logits = np.zeros((B, T, V))
    for b in range(B):
        x = np.stack([p["wte"][idx[b, t]] + p["wpe"][t] for t in range(T)])     # (T, C)
        for l in range(cfg.L):
            h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
            qkv = np.einsum("oc,tc->to", p["qkvw"][l], h) + p["qkvb"][l]     # (T, 3C)
            y = np.zeros((T, C))
            for hd in range(NH):
                q = qkv[:, hd * hs:(hd + 1) * hs]
                k = qkv[:, C + hd * hs:C + (hd + 1) * hs]
                v = qkv[:, 2 * C + hd * hs:2 * C + (hd + 1) * hs]
                for t in range(T):                      # query t sees keys 0..t
                    s = np.array([q[t] @ k[u] for u in range(t + 1)]) / math.sqrt(hs)
                    w = np.exp(s - s.max())
                    w /= w.sum()
                    y[t, hd * hs:(hd + 1) * hs] = w @ v[:t + 1]
            x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
            h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
            h = gelu(h @ p["fcw"][l].T + p["fcb"][l])
            x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
        x = layernorm(x, p["lnfw"], p["lnfb"])
        logits[b] = x @ p["wte"][:V].T
    m = logits.max(axis=-1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))
    loss = -np.mean([logp[b, t, targets[b, t]] for b in range(B) for t in range(T)])
    return logits, loss


def adamw_by_hand(params, grads, state, step, lr, b1, b2, eps, wd, clip):
    """llm.c's AdamW update (decay on DECAY only) after torch's clipping rule, float64."""
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    scale = min(1.0, clip / (norm + 1e-6)) if clip > 0 else 1.0
    out = {}
    for n, prm in params.items():
        g = grads[n] * scale
        m, v = state.setdefault(n, (np.zeros_like(prm), np.zeros_like(prm)))
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        state[n] = (m, v)
        m_hat = m / (1 - b1 ** step)
        v_hat = v / (1 - b2 ** step)
        decay = wd if n in DECAY else 0.0
        out[n] = prm * (1 - lr * decay) - lr * m_hat / (np.sqrt(v_hat) + eps)
    return out


def check_self():
    torch.set_default_dtype(torch.float64)
    fails = 0

    def report(name, ok, detail):
        nonlocal fails
        fails += 0 if ok else 1
        print(f"{'ok  ' if ok else 'FAIL'} - {name}: {detail}")

    # A tiny model with T < maxT (unused positions) and V < Vp (padded rows), with weights
    # large enough that every nonlinearity is off its linear regime.
    cfg = Config(maxT=8, V=11, L=2, NH=2, C=8, Vp=16)
    model = GPT2(cfg, dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n, prm in model.params().items():
            prm.copy_(torch.randn(prm.shape, generator=g, dtype=torch.float64) * 0.4
                      + (1.0 if n in ("ln1w", "ln2w", "lnfw") else 0.0))
    x = torch.randint(0, cfg.V, (2, 5), generator=g)
    y = torch.randint(0, cfg.V, (2, 5), generator=g)

    # 1. The forward against the independent numpy loops.
    logits, loss = model(x, y)
    nl, nloss = numpy_forward(model.params(), cfg, x.numpy(), y.numpy())
    d = max(np.abs(logits.detach().numpy() - nl).max(), abs(loss.item() - nloss))
    report("forward vs numpy loops", d < 1e-10, f"max |diff| {d:.2e} (loss {nloss:.6f})")

    # 2. Every gradient against finite differences (torch.autograd.gradcheck, float64).
    tensors = [prm.detach().clone().requires_grad_(True) for prm in model.parameters()]
    ok = torch.autograd.gradcheck(
        lambda *ts: gpt2_forward(dict(zip(PARAM_NAMES, ts)), cfg, x, y)[1], tensors,
        eps=1e-6, atol=1e-6, rtol=1e-4, raise_exception=False)
    report("gradcheck of all 16 tensors", ok, f"{cfg.num_params()} parameters")

    # 3. The flat layout: grads in checkpoint order, padded wte rows exactly 0.
    loss.backward()
    flat = model.flat(grads=True)
    ok = (len(flat) == cfg.num_params() and not flat[cfg.V * cfg.C:cfg.Vp * cfg.C].any()
          and np.abs(flat[:cfg.V * cfg.C]).max() > 0
          and np.allclose(flat[-cfg.C:], model.lnfb.grad.numpy()))
    report("flat gradient layout", ok, f"{len(flat)} values, padded rows zero")

    # 4. Three AdamW steps with clipping against llm.c's update written by hand.
    model.zero_grad(set_to_none=True)
    hp = dict(lr=1e-2, b1=0.9, b2=0.95, eps=1e-8, wd=0.1, clip=0.5)
    opt = model.optimizer(hp["lr"], hp["b1"], hp["b2"], hp["eps"], hp["wd"])
    hand = {n: t.detach().numpy().copy() for n, t in model.params().items()}
    state, worst, clipped = {}, 0.0, 0
    for step in range(1, 4):
        hm = GPT2(cfg, dtype=torch.float64)
        hm.load_flat(np.concatenate([hand[n].reshape(-1) for n in PARAM_NAMES]))
        hm(x, y)[1].backward()
        grads = {n: t.grad.numpy() for n, t in hm.params().items()}
        clipped += math.sqrt(sum(float((gr * gr).sum()) for gr in grads.values())) > hp["clip"]
        hand = adamw_by_hand(hand, grads, state, step, **hp)
        train_step(model, opt, x, y, hp["clip"])
        worst = max(worst, max(np.abs(model.params()[n].detach().numpy() - hand[n]).max()
                               for n in PARAM_NAMES))
    report("AdamW + clip vs llm.c's update", worst < 1e-10 and clipped == 3,
           f"max |diff| {worst:.2e} after 3 steps, clipping active in {clipped} of 3")

    # 5. The checkpoint round trip and its header checks.
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.bin")
        m32 = GPT2(cfg)
        init_gpt2(m32, 5)
        write_checkpoint(path, m32)
        c2, f2 = read_checkpoint(path)
        ok = vars(c2) == vars(cfg) and np.array_equal(f2, m32.flat())
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 4)
        try:
            read_checkpoint(path)
            ok = False
        except RefError:
            pass
        report("checkpoint round trip, truncated file refused", ok, path)

    torch.set_default_dtype(torch.float32)
    print(f"train_ref --check-self: {5 - fails} passed, {fails} failed")
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="llm.c fp32 checkpoint to start from")
    ap.add_argument("--out", help="state file to write")
    ap.add_argument("-b", type=int, default=4, help="batch size B (default 4)")
    ap.add_argument("-t", type=int, default=32, help="sequence length T (default 32)")
    ap.add_argument("--vocab", type=int, default=0,
                    help="random tokens from [0, V) (default: the model's V); with "
                         "--init-model, the model's V")
    ap.add_argument("--seed", type=int, default=7, help="batch seed (or init seed)")
    ap.add_argument("--data", help="take the batch from this byte text or llm.c shard")
    ap.add_argument("--steps", type=int, default=10, help="trajectory length (default 10)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0, help="grad-norm clip, 0 = off")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--check-self", action="store_true",
                    help="check the reference itself (gradcheck, numpy forward, AdamW)")
    ap.add_argument("--init-model", metavar="FILE",
                    help="write a GPT-2-initialised llm.c checkpoint and exit")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--vocab-padded", type=int, default=0,
                    help="Vp for --init-model (default: V rounded up to 128)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    try:
        if args.check_self:
            return check_self()
        if args.init_model:
            if not args.vocab:
                raise RefError("--init-model needs --vocab V")
            return init_model(args) or 0
        if not args.model or not args.out:
            raise RefError("--model FILE and --out FILE are required "
                           "(or --init-model FILE, or --check-self)")
        if args.steps < 0 or args.lr < 0 or args.clip < 0 or args.wd < 0:
            raise RefError("--steps, --lr, --clip and --wd must not be negative")
        reference(args)
        return 0
    except RefError as e:
        print(f"train_ref: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
