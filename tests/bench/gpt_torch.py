#!/usr/bin/env python3
"""gpt_torch.py - the PyTorch side of make gpu-bench-gpt: a nanoGPT-style GPT-2
(nn.Linear, nn.LayerNorm, F.scaled_dot_product_attention with is_causal,
GELU tanh, pre-LN blocks, an untied bias-free head as pp's) trained from
pp's initial weights on pp's microbatches, with bf16 autocast over fp32
master weights and fused AdamW, eager or under torch.compile.

  * weights: DIR/stage0.w of `ppvm --steps 0 --save DIR` on a one-stage plan
    (vm/README.md, "Weight files"; the layout is isa/gpt_layout.h's, in the
    order of kernels/README.md's table), copied into the modules;
  * data: the llm.c shard ppvm reads, microbatch b of step t chosen as
    vm/data.c chooses it (splitmix64 of seed, t, b; tests/bench/torch_oracle.py
    has the same), all made before the timed steps;
  * the step: per microbatch the summed cross-entropy times 1/(B batch T)
    (pp's loss scale) back-propagated, then one AdamW step over every
    parameter alike (pp decays every weight, biases and layer norms too).

Prints one JSON object: per-step losses and times, peak memory
(torch.cuda.max_memory_allocated), the device and the versions. Runs on the
CPU too (--device cpu, fp32 or bf16 autocast) at a small size, to check it
without a GPU.
"""
import argparse
import json
import os
import struct
import sys
import time
import zlib
from array import array

import torch
import torch.nn as nn
import torch.nn.functional as F

SHARD_MAGIC, SHARD_HEADER = 20240520, 1024
MASK64 = (1 << 64) - 1


class Block(nn.Module):
    def __init__(self, C, NH, Fw):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, Fw)
        self.mlp_proj = nn.Linear(Fw, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, C, NH, Fw, L):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, NH, Fw) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.lm_head = nn.Linear(C, V, bias=False)  # untied, as pp's wlm

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1),
                               reduction="sum")

    def pp_order(self):
        """The parameters in pp's stage layout order (isa/gpt_layout.h)."""
        t = [self.wte.weight, self.wpe.weight]
        for b in self.h:
            t += [b.ln_1.weight, b.ln_1.bias, b.c_attn.weight, b.c_attn.bias, b.c_proj.weight,
                  b.c_proj.bias, b.ln_2.weight, b.ln_2.bias, b.c_fc.weight, b.c_fc.bias,
                  b.mlp_proj.weight, b.mlp_proj.bias]
        return t + [self.ln_f.weight, self.ln_f.bias, self.lm_head.weight]


def read_weights(path):
    """vm/weights.c's version 2 file: its fp32 values, the checksum checked."""
    raw = open(path, "rb").read()
    magic, version, _plan, _stage, _step, count, elem = struct.unpack_from("<4sIQIIQI", raw)
    if magic != b"PPWT" or version != 2 or elem != 4 or len(raw) != 36 + 4 * count + 4:
        sys.exit("gpt_torch.py: %s is not a version 2 fp32 weight file" % path)
    (crc,) = struct.unpack_from("<I", raw, 36 + 4 * count)
    if crc != zlib.crc32(raw[:36 + 4 * count]):
        sys.exit("gpt_torch.py: %s: bad checksum" % path)
    return torch.frombuffer(bytearray(raw[36:36 + 4 * count]), dtype=torch.float32)


def load_tokens(path):
    raw = open(path, "rb").read()
    magic, version, count = struct.unpack_from("<3i", raw)
    if magic != SHARD_MAGIC or version != 1 or len(raw) != SHARD_HEADER + 2 * count:
        sys.exit("gpt_torch.py: %s is not an llm.c token shard" % path)
    tok = array("H")
    tok.frombytes(raw[SHARD_HEADER:])
    if sys.byteorder != "little":
        tok.byteswap()
    return tok


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def microbatch(tok, T, batch, seed, step, b):
    """pp_data_microbatch (vm/data.c): row i starts at splitmix64(h ^ i) % (len - T)."""
    windows = len(tok) - T
    h = splitmix64(splitmix64(splitmix64(seed) ^ step) ^ b)
    rows = [tok[p:p + T + 1] for p in (splitmix64(h ^ i) % windows for i in range(batch))]
    return torch.tensor([list(r) for r in rows], dtype=torch.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", required=True, help="DIR of ppvm --steps 0 --save DIR (S=1)")
    ap.add_argument("--data", required=True)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--embed", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=3072)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--B", type=int, default=8, help="microbatches per step")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--adam-beta2", type=float, default=0.95)
    ap.add_argument("--adam-eps", type=float, default=1e-8)
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    model = GPT(a.vocab, a.context, a.embed, a.heads, a.ffn, a.layers)
    flat, off = read_weights(os.path.join(a.weights, "stage0.w")), 0
    with torch.no_grad():
        for p in model.pp_order():
            n = p.numel()
            p.copy_(flat[off:off + n].view_as(p))
            off += n
    if off != flat.numel():
        sys.exit("gpt_torch.py: the weight file has %d values, the model %d" % (flat.numel(), off))
    model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, a.adam_beta2),
                            eps=a.adam_eps, weight_decay=a.weight_decay,
                            fused=dev.type == "cuda")
    fwd = torch.compile(model) if a.compile else model

    tok = load_tokens(a.data)
    data = [[microbatch(tok, a.context, a.batch, a.seed, t, b).to(dev) for b in range(a.B)]
            for t in range(a.steps)]
    count = a.B * a.batch * a.context
    scale = 1.0 / count
    amp = a.precision == "bf16"
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    losses, times = [], []
    for t in range(a.steps):
        sync()
        t0 = time.perf_counter()
        total = torch.zeros((), device=dev)
        for b in range(a.B):
            x = data[t][b]
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
                loss = fwd(x[:, :-1], x[:, 1:])
            (loss * scale).backward()
            total += loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(total) / count)  # waits for the step
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({
        "losses": losses, "step_ms": times,
        "peak_bytes": torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__, "compile": a.compile, "precision": a.precision,
        "tokens_per_step": count}))


if __name__ == "__main__":
    main()
