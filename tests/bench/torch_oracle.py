#!/usr/bin/env python3
"""torch_oracle.py - pp checked against an outside oracle: PyTorch.

pp's own oracle (ppvm --reference) runs pp's own kernels. This script builds
the same model again in PyTorch (autograd, torch.nn.functional, torch.optim),
starts it from pp's initial weights, trains it on the same microbatches, and
compares the per-step losses and the final weights with both

  * ppvm --reference (one process), and
  * a pipeline run under mpirun (default: schedules/1f1b.pp, S=4, 4 ranks),

once per optimizer (SGD and AdamW). `make oracle` runs it in the venv it
makes (build/oracle-venv); by hand, from the repository root, after `make`:

    build/oracle-venv/bin/python tests/bench/torch_oracle.py [--steps 10] [--model mlp]

What it does, per optimizer:
  1. bin/ppc SCHEDULE -D S=4 -D B=... --optimizer O -o TMP/plan-O; the model's
     sizes are read from the listing's header (TMP/plan-O/rank0.txt:
     "; model: ..." and "; blocks per stage: ..." / "; layers per stage: ...").
  2. bin/ppvm --reference PLAN --steps 0 --save TMP/init: pp's initial weights
     (vm/README.md, "Weight files"), which torch loads.
  3. bin/ppvm --reference and mpirun -np 4 bin/ppvm, --steps N, with
     --loss-digits 9 and --save.
  4. torch: each stage's parameters are one flat fp32 tensor in pp's layout
     (views for the matrices), so the final weights compare element by
     element. Per step: for each microbatch b, the summed cross-entropy
     times 1/(B*batch*predictions) (pp's loss scale) is back-propagated,
     gradients accumulate over the microbatches, then torch.optim.SGD or
     torch.optim.AdamW steps, over every parameter alike (pp decays every
     weight, biases and layer norms included: kernels/cpu_kernels.c,
     pp_adamw_step).
  5. Loss per step: |pp - torch| / |torch|. Weights: for each tensor of a
     stage (the embedding, each block's ln_g, W1, ..., the head),
     max|pp - torch| / max|torch| over the tensor; a stage's figure is its
     worst tensor's. Everything must be <= --tol (1e-4).

Prints a table and exits 1 when a figure exceeds the tolerance, 2 when a
command fails.
"""
import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none"]
SHARD_MAGIC, SHARD_HEADER = 20240520, 1024
MASK64 = (1 << 64) - 1


def run(cmd, **kw):
    """Runs cmd (a list); its output, or exit 2 with it when it fails."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, **kw)
    if r.returncode != 0:
        sys.stderr.write("torch_oracle: %s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout))
        sys.exit(2)
    return r.stdout


# ---- the plan's model -------------------------------------------------------

def read_model(plan_dir):
    """The model of a plan, from its listing's header (isa/disasm.c)."""
    text = open(os.path.join(plan_dir, "rank0.txt")).read()
    line = re.search(r"^; model: (\w+), (.*)$", text, re.M)
    m = {"kind": line.group(1)}
    for key, val in re.findall(r"(\w+) (\d+)", line.group(2)):
        m[key] = int(val)
    eps = re.search(r"norm_eps ([0-9.e+-]+)", line.group(2))
    if eps:  # llama: a decimal (the integer pattern above read its digits before the dot)
        m["norm_eps"] = float(eps.group(1))
    m["tie"] = ", tied" in line.group(2)
    m["optimizer"] = re.search(r"optimizer (\w+)", line.group(2)).group(1)
    m["precision"] = re.search(r"precision (\w+)", line.group(2)).group(1)
    if m["kind"] == "mlp":
        m["vocab"] = 256
    head = re.search(r"^; rank \d+ of \d+, S=(\d+) stages, B=(\d+) microbatches", text, re.M)
    m["S"], m["B"] = int(head.group(1)), int(head.group(2))
    runs = re.search(r"^; (?:blocks|layers) per stage:(.*)$", text, re.M).group(1)
    layers = [0] * m["S"]
    for a, b, n in re.findall(r"s(\d+)(?:-s(\d+))? (\d+)", runs):
        for s in range(int(a), int(b or a) + 1):
            layers[s] = int(n)
    m["layers"] = layers
    return m


def predictions(m):
    return 1 if m["kind"] == "mlp" else m["context"]


# ---- parameter layouts (one flat array per stage) ----------------------------

def mlp_layout(m, s):
    """isa/mlp_layout.h, param_layout_of: [(name, shape)] in order."""
    S, C, E, Fw, V = m["S"], m["context"], m["embed"], m["ffn"], 256
    D = C * E
    t = []
    if s == 0:
        t.append(("E", (V, E)))
    for k in range(m["layers"][s]):
        t += [("b%d.ln_g" % k, (D,)), ("b%d.ln_b" % k, (D,)), ("b%d.W1" % k, (Fw, D)),
              ("b%d.b1" % k, (Fw,)), ("b%d.W2" % k, (D, Fw)), ("b%d.b2" % k, (D,))]
    if s == S - 1:
        t += [("lnf_g", (D,)), ("lnf_b", (D,)), ("Wh", (V, D)), ("bh", (V,))]
    return t


def gpt_layout(m, s):
    """isa/gpt_layout.h, gpt_param_layout_of (kernels/README.md, "The GPT model")."""
    S, V, T, C, Fw = m["S"], m["vocab"], m["context"], m["embed"], m["ffn"]
    t = []
    if s == 0:
        t += [("wte", (V, C)), ("wpe", (T, C))]
    for k in range(m["layers"][s]):
        t += [("l%d.%s" % (k, n), shape) for n, shape in (
            ("ln1w", (C,)), ("ln1b", (C,)), ("qkvw", (3 * C, C)), ("qkvb", (3 * C,)),
            ("attprojw", (C, C)), ("attprojb", (C,)), ("ln2w", (C,)), ("ln2b", (C,)),
            ("fcw", (Fw, C)), ("fcb", (Fw,)), ("fcprojw", (C, Fw)), ("fcprojb", (C,)))]
    if s == S - 1:
        t += [("lnfw", (C,)), ("lnfb", (C,)), ("wlm", (V, C))]
    return t


def llama_layout(m, s):
    """isa/llama_layout.h, llama_param_layout_of (kernels/README.md, "The Llama model")."""
    S, V, C, Fw, NH, KV = m["S"], m["vocab"], m["embed"], m["ffn"], m["heads"], m["kv_heads"]
    Q = C + 2 * KV * (C // NH)
    t = []
    if s == 0:
        t.append(("wte", (V, C)))
    for k in range(m["layers"][s]):
        t += [("l%d.%s" % (k, n), shape) for n, shape in (
            ("n1w", (C,)), ("wqkv", (Q, C)), ("wo", (C, C)), ("n2w", (C,)), ("wgu", (2 * Fw, C)),
            ("wd", (C, Fw)))]
    if s == S - 1:
        t += [("nfw", (C,)), ("wlm", (V, C))]
    return t


def layout(m, s):
    return {"mlp": mlp_layout, "gpt": gpt_layout, "llama": llama_layout}[m["kind"]](m, s)


def views(flat, lay):
    """name -> a view of the flat stage tensor."""
    out, off = {}, 0
    for name, shape in lay:
        n = int(np.prod(shape))
        out[name] = flat[off:off + n].view(*shape)
        off += n
    assert off == flat.numel(), (off, flat.numel())
    return out


# ---- the forward -------------------------------------------------------------

def ln(x, g, b):
    return F.layer_norm(x, (x.shape[-1],), g, b, eps=1e-5)


def mlp_stage(m, s, p, x, tok):
    """kernels/mlp.c: F of stage s. x: the previous stage's output (s > 0);
    returns the next stage's input, or on the last stage the summed loss."""
    B, C = m["batch"], m["context"]
    if s == 0:
        x = p["E"][tok[:, :C]].reshape(B, -1)  # each byte's embedding, concatenated
    for k in range(m["layers"][s]):
        u = ln(x, p["b%d.ln_g" % k], p["b%d.ln_b" % k])
        a = F.gelu(F.linear(u, p["b%d.W1" % k], p["b%d.b1" % k]), approximate="tanh")
        x = x + F.linear(a, p["b%d.W2" % k], p["b%d.b2" % k])
    if s < m["S"] - 1:
        return x
    logits = F.linear(ln(x, p["lnf_g"], p["lnf_b"]), p["Wh"], p["bh"])
    return F.cross_entropy(logits, tok[:, C], reduction="sum")


def gpt_stage(m, s, p, x, tok):
    """kernels/gpt.c (GPT-2 as llm.c writes it): F of stage s on x [B][T][C];
    the last stage returns the loss summed over every position."""
    B, T, C, NH = m["batch"], m["context"], m["embed"], m["heads"]
    hs = C // NH
    if s == 0:
        x = p["wte"][tok[:, :T]] + p["wpe"]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for k in range(m["layers"][s]):
        w = lambda n: p["l%d.%s" % (k, n)]
        qkv = F.linear(ln(x, w("ln1w"), w("ln1b")), w("qkvw"), w("qkvb"))
        q, kk, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = (q @ kk.transpose(-2, -1)) * (1.0 / hs ** 0.5)
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, w("attprojw"), w("attprojb"))
        a = F.gelu(F.linear(ln(x, w("ln2w"), w("ln2b")), w("fcw"), w("fcb")), approximate="tanh")
        x = x + F.linear(a, w("fcprojw"), w("fcprojb"))
    if s < m["S"] - 1:
        return x
    logits = F.linear(ln(x, p["lnfw"], p["lnfb"]), p["wlm"])  # no bias, untied
    return F.cross_entropy(logits.reshape(B * T, -1), tok[:, 1:].reshape(-1), reduction="sum")


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, cos, sin):
    """Rotate-half rotary embeddings on x [B][H][T][hs] (the Llama of Hugging Face)."""
    h = x.shape[-1] // 2
    rot = torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return x * cos + rot * sin


def llama_stage(m, s, p, x, tok):
    """kernels/llama.c, written with PyTorch's own operators: RMSNorm, rotary
    embeddings, grouped-query attention (k and v repeated with
    repeat_interleave), SwiGLU, no biases."""
    B, T, C, NH, KV = m["batch"], m["context"], m["embed"], m["heads"], m["kv_heads"]
    hs, eps = C // NH, m["norm_eps"]
    Kd = KV * hs
    dt = x.dtype if x is not None else p["wte"].dtype
    if s == 0:
        x = p["wte"][tok[:, :T]]
    inv = torch.tensor([m["rope_theta"] ** (-2.0 * i / hs) for i in range(hs // 2)],
                       dtype=torch.float64)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat((ang.cos(), ang.cos()), dim=-1).to(dt)
    sin = torch.cat((ang.sin(), ang.sin()), dim=-1).to(dt)
    for k in range(m["layers"][s]):
        w = lambda n: p["l%d.%s" % (k, n)]
        q, kk, v = F.linear(rms(x, w("n1w"), eps), w("wqkv")).split([C, Kd, Kd], dim=2)
        q = rope(q.view(B, T, NH, hs).transpose(1, 2), cos, sin)
        kk = rope(kk.view(B, T, KV, hs).transpose(1, 2), cos, sin)
        v = v.view(B, T, KV, hs).transpose(1, 2)
        kk = kk.repeat_interleave(NH // KV, dim=1)
        v = v.repeat_interleave(NH // KV, dim=1)
        y = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        x = x + F.linear(y.transpose(1, 2).reshape(B, T, C), w("wo"))
        g, u = F.linear(rms(x, w("n2w"), eps), w("wgu")).split(m["ffn"], dim=2)
        x = x + F.linear(F.silu(g) * u, w("wd"))
    if s < m["S"] - 1:
        return x
    logits = F.linear(rms(x, p["nfw"], eps), p["wlm"])
    return F.cross_entropy(logits.reshape(B * T, -1), tok[:, 1:].reshape(-1), reduction="sum")


def stage_forward(m, s, p, x, tok):
    return {"mlp": mlp_stage, "gpt": gpt_stage, "llama": llama_stage}[m["kind"]](m, s, p, x, tok)


# ---- data: vm/data.c again ---------------------------------------------------

def load_tokens(path, m):
    raw = open(path, "rb").read()
    if len(raw) >= 4 and struct.unpack_from("<i", raw)[0] == SHARD_MAGIC:
        _, version, count = struct.unpack_from("<3i", raw)
        assert version == 1 and len(raw) == SHARD_HEADER + 2 * count, path
        tok = np.frombuffer(raw, dtype="<u2", offset=SHARD_HEADER, count=count)
    else:
        tok = np.frombuffer(raw, dtype=np.uint8)
    tok = tok.astype(np.int64)
    assert len(tok) > m["context"] and tok.max() < m["vocab"], path
    return tok


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def microbatch(tok, m, seed, step, b):
    """pp_data_microbatch: row i starts at splitmix64(h ^ i) % (len - context)."""
    windows = len(tok) - m["context"]
    h = splitmix64(splitmix64(splitmix64(seed) ^ step) ^ b)
    rows = [tok[pos:pos + m["context"] + 1]
            for pos in (splitmix64(h ^ i) % windows for i in range(m["batch"]))]
    return torch.from_numpy(np.stack(rows))


# ---- weight files (vm/weights.c) ------------------------------------------------

def read_weights(d, s):
    path = os.path.join(d, "stage%d.w" % s)
    raw = open(path, "rb").read()
    # version 2: magic, version, plan id, stage, step, count, element bytes (vm/weights.h)
    magic, version, _plan, stage, _step, count, elem = struct.unpack_from("<4sIQIIQI", raw)
    assert magic == b"PPWT" and version == 2 and stage == s and elem == 4, path
    head = 36
    assert len(raw) == head + 4 * count + 4, path
    (crc,) = struct.unpack_from("<I", raw, head + 4 * count)
    assert crc == zlib.crc32(raw[:head + 4 * count]), path + ": bad checksum"
    return np.frombuffer(raw, dtype="<f4", offset=head, count=count).copy()


# ---- training in torch ----------------------------------------------------------

def train_torch(m, init_dir, tok, args, opt, dt):
    S, B = m["S"], m["B"]
    flat = [torch.nn.Parameter(torch.from_numpy(read_weights(init_dir, s)).to(dt))
            for s in range(S)]
    lays = [layout(m, s) for s in range(S)]
    for s in range(S):
        views(flat[s].data, lays[s])  # checks the layout's size against pp's
    if opt == "sgd":
        optim = torch.optim.SGD(flat, lr=args.lr_sgd)
    else:
        optim = torch.optim.AdamW(flat, lr=args.lr_adamw, betas=(0.9, 0.999), eps=args.adam_eps,
                                  weight_decay=args.weight_decay)
    count = B * m["batch"] * predictions(m)
    scale = np.float32(1.0) / np.float32(count)  # pp_loss_scale, in float
    losses = []
    for t in range(args.steps):
        total = 0.0
        for b in range(B):
            tk = microbatch(tok, m, args.seed, t, b)
            x = None
            for s in range(S):
                x = stage_forward(m, s, views(flat[s], lays[s]), x, tk)
            total += float(x.detach())
            (x * float(scale)).backward()
        if m["tie"]:  # one tensor: both copies step on the summed gradient, as pp's plans do
            V, C = m["vocab"], m["embed"]
            g0, g1 = flat[0].grad[:V * C], flat[S - 1].grad[flat[S - 1].numel() - V * C:]
            both = g0 + g1
            g0.copy_(both)
            g1.copy_(both)
        optim.step()
        optim.zero_grad(set_to_none=False)
        losses.append(total / count)
    return [f.detach().numpy() for f in flat], losses


# ---- comparing ----------------------------------------------------------------------

def losses_of(out, prefix):
    return [float(v) for v in re.findall(r"^%sstep\s+\d+/\d+\s+loss (\S+)" % prefix, out, re.M)]


def rel_loss(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def rel_weights(pp, ref, lay):
    """Per tensor max|pp - ref| / max|ref|; returns (worst figure, its tensor name)."""
    worst, name, off = 0.0, "", 0
    for n, shape in lay:
        k = int(np.prod(shape))
        a, b = pp[off:off + k].astype(np.float64), ref[off:off + k].astype(np.float64)
        off += k
        denom = np.abs(b).max()
        r = np.abs(a - b).max() / denom if denom > 0 else np.abs(a - b).max()
        if r >= worst:
            worst, name = r, n
    return worst, name


def check(args, opt, tmp, schedule, data):
    plan = os.path.join(tmp, "plan-%s-%s" % (os.path.basename(schedule)[:-3], opt))
    run(["bin/ppc", schedule, "-D", "S=%d" % args.S, "-D", "B=%d" % args.B,
         "--optimizer", opt, "-o", plan, "-q"])
    m = read_model(plan)
    if m["precision"] != "fp32":
        raise SystemExit("torch_oracle: the plan is %s; the oracle compares fp32" % m["precision"])
    flags = ["--seed", str(args.seed), "--data", data]
    if opt == "sgd":
        flags += ["--lr", repr(args.lr_sgd)]
    else:
        flags += ["--lr", repr(args.lr_adamw), "--weight-decay", repr(args.weight_decay),
                  "--adam-eps", repr(args.adam_eps)]
    init, refw, mpiw = (plan + "-" + n for n in ("init", "ref", "mpi"))
    run(["bin/ppvm", "--reference", plan, "--steps", "0", "--save", init] + flags)
    steps = ["--steps", str(args.steps), "--loss-digits", "9"]
    ref_out = run(["bin/ppvm", "--reference", plan, "--save", refw] + steps + flags)
    mpi_out = run(MPIRUN + ["-np", str(args.S), "bin/ppvm", "--backend", "cpu", plan,
                            "--save", mpiw] + steps + flags)
    tok = load_tokens(data, m)
    torch_w, torch_l = train_torch(m, init, tok, args, opt, torch.float32)
    # not checked: how far fp32 arithmetic itself is from exact, torch in fp32 against fp64
    exact_w, _ = train_torch(m, init, tok, args, opt, torch.float64)
    ref_l, mpi_l = losses_of(ref_out, "reference "), losses_of(mpi_out, "")
    assert len(ref_l) == len(mpi_l) == args.steps, (ref_out, mpi_out)

    sched = os.path.basename(args.schedule)
    where = "data %s%s" % (os.path.basename(data), " (llm.c shard)" if data.endswith(".bin") else "")
    desc = ", ".join("%s %d" % (k, m[k]) for k in ("vocab", "context", "embed", "heads",
                                                   "kv_heads", "ffn", "batch") if k in m)
    desc += ", tied" if m["tie"] else ""
    hp = ("lr %g" % args.lr_sgd if opt == "sgd" else "lr %g, weight decay %g, betas 0.9 0.999, "
          "eps %g" % (args.lr_adamw, args.weight_decay, args.adam_eps))
    print("\n== %s model (%s, layers per stage %s), %s, %s; %s S=%d B=%d on %d ranks; %s, "
          "seed %d, %d steps" % (m["kind"], desc, m["layers"], opt, hp, sched, m["S"], m["B"],
                                 args.S, where, args.seed, args.steps))
    print("%5s  %14s  %14s  %14s  %10s  %10s" % ("step", "loss torch", "loss reference",
                                                 "loss " + sched[:-3], "rel ref", "rel " + sched[:-3]))
    for t in range(args.steps):
        print("%5d  %14.9f  %14.9f  %14.9f  %10.2e  %10.2e" % (
            t + 1, torch_l[t], ref_l[t], mpi_l[t], abs(ref_l[t] - torch_l[t]) / abs(torch_l[t]),
            abs(mpi_l[t] - torch_l[t]) / abs(torch_l[t])))
    figures = [rel_loss(ref_l, torch_l), rel_loss(mpi_l, torch_l)]
    print("final weights, max|pp - torch| / max|torch| per tensor, the stage's worst tensor:")
    print("%5s  %8s  %-25s  %-25s  %-25s" % ("stage", "weights", "reference vs torch",
                                          sched[:-3] + " vs torch", "(torch vs torch fp64)"))
    noise = 0.0  # torch in fp32 against fp64: how far fp32 rounding alone carries a weight
    for s in range(m["S"]):
        lay = layout(m, s)
        r = rel_weights(read_weights(refw, s), torch_w[s], lay)
        p = rel_weights(read_weights(mpiw, s), torch_w[s], lay)
        x = rel_weights(torch_w[s], exact_w[s], lay)
        figures += [r[0], p[0]]
        noise = max(noise, x[0])
        print("%5d  %8d  %8.2e %-16s  %8.2e %-16s  %8.2e %-16s" % (
            s, torch_w[s].size, r[0], "(" + r[1] + ")", p[0], "(" + p[1] + ")", x[0],
            "(" + x[1] + ")"))
    same = max(float(np.abs(read_weights(refw, s) - read_weights(mpiw, s)).max())
               for s in range(m["S"]))
    print("reference vs %s: max |difference| of any weight %.3g" % (sched[:-3], same))
    # The weights' tolerance: --tol, or, where fp32 rounding alone (torch fp32
    # against fp64) moves a weight further, that distance: pp may differ from
    # torch as much as torch differs from exact arithmetic, no more.
    wtol = max(args.tol, noise)
    ok = max(figures[:2]) <= args.tol and max(figures[2:]) <= wtol
    print("%s: worst relative difference %.2e (losses %.2e, weights %.2e; tolerance %g%s): %s" % (
        opt, max(figures), max(figures[:2]), max(figures[2:]), args.tol,
        ", weights %.2e: torch fp32 vs fp64" % wtol if wtol > args.tol else "",
        "ok" if ok else "EXCEEDED"))
    return ok


def gpt_schedule(args, tmp, kind="gpt"):
    """args.schedule with its model block replaced by `model gpt { --gpt }`
    (or `model llama { --llama }`)."""
    text = re.sub(r"^model\b[^{]*\{.*?^\}\n", "", open(os.path.join(ROOT, args.schedule)).read(),
                  flags=re.M | re.S)
    sizes = dict(kv.split("=") for kv in getattr(args, kind).split(","))
    text += "model %s {\n%s}\n" % (kind.split("_")[0],
                                    "".join("    %s = %s\n" % kv for kv in sizes.items()))
    path = os.path.join(tmp, kind + "-" + os.path.basename(args.schedule))
    open(path, "w").write(text)
    return path, int(sizes["vocab"])


def make_shard(args, tmp, vocab):
    """An llm.c shard of the text with a vocabulary of 512: token i is byte i,
    plus 256 when byte i-1 is odd (tokens above 255, from real text)."""
    b = np.frombuffer(open(args.data, "rb").read(), dtype=np.uint8).astype(np.uint16)
    tok = b.copy()
    if vocab >= 512:
        tok[1:] += 256 * (b[:-1] % 2)
    head = np.zeros(256, dtype="<i4")
    head[:3] = (SHARD_MAGIC, 1, len(tok))
    path = os.path.join(tmp, "tokens.bin")
    with open(path, "wb") as f:
        f.write(head.tobytes() + tok.astype("<u2").tobytes())
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schedule", default="schedules/1f1b.pp")
    ap.add_argument("--S", type=int, default=4, help="stages = ranks of the mpirun (4)")
    ap.add_argument("--B", type=int, default=8, help="microbatches per step (8)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--optimizers", default="sgd,adamw")
    ap.add_argument("--models", default="mlp,gpt,gpt-tied,llama",
                    help="mlp: the schedule's own model block; gpt (llama): that block replaced "
                    "by model gpt { --gpt } (model llama { --llama }), trained on an llm.c shard "
                    "made from --data; gpt-tied: the gpt with tie = 1 (mlp,gpt,gpt-tied,llama)")
    ap.add_argument("--gpt", default="vocab=512,context=16,embed=32,heads=4,ffn=128,layers=2,batch=4",
                    help="the gpt model's sizes (layers per stage)")
    ap.add_argument("--llama", default="vocab=512,context=16,embed=32,heads=4,kv_heads=2,ffn=64,"
                    "layers=2,batch=4,rope_theta=10000,norm_eps=1e-5",
                    help="the llama model's sizes (layers per stage)")
    ap.add_argument("--lr-sgd", type=float, default=0.3)
    ap.add_argument("--lr-adamw", type=float, default=4e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--adam-eps", type=float, default=1e-5,
                    help="AdamW's eps (1e-5; see tests/README.md for 1e-8)")
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    torch.manual_seed(0)
    ok = True
    with tempfile.TemporaryDirectory(prefix="pp-oracle-") as tmp:
        for model in args.models.split(","):
            schedule, data = args.schedule, args.data
            if model == "gpt-tied":
                args.gpt_tied = args.gpt + ",tie=1"
                schedule, vocab = gpt_schedule(args, tmp, "gpt_tied")
                data = make_shard(args, tmp, vocab)
            elif model in ("gpt", "llama"):
                schedule, vocab = gpt_schedule(args, tmp, model)
                data = make_shard(args, tmp, vocab)
            for opt in args.optimizers.split(","):
                ok &= check(args, opt, tmp, schedule, data)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
