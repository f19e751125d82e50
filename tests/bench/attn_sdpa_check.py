#!/usr/bin/env python3
"""attn_sdpa_check.py DIR - the fused attention's GPU results (bin/attn_bench
--dump DIR: fp32 qkv, dout and the fused kernels' out, lse, dqkv, shapes in
DIR/meta.txt) against PyTorch's F.scaled_dot_product_attention (is_causal)
and its autograd backward, computed in float64 on the CPU; the log-sum-exp
against torch.logsumexp of the masked scaled scores. Prints max |diff| /
max |torch| per tensor; exit 1 when one is over --tol (1e-4), 2 on bad
input."""
import argparse
import os
import sys

import torch
import torch.nn.functional as F


def load(d, name, n):
    raw = open(os.path.join(d, name), "rb").read()
    if len(raw) != 4 * n:
        sys.exit("attn_sdpa_check.py: %s has %d bytes, expected %d" % (name, len(raw), 4 * n))
    return torch.frombuffer(bytearray(raw), dtype=torch.float32).double()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    B, T, C, NH = (int(x) for x in open(os.path.join(a.dir, "meta.txt")).read().split())
    hs = C // NH
    qkv = load(a.dir, "qkv.f32", B * T * 3 * C).view(B, T, 3 * C)
    dout = load(a.dir, "dout.f32", B * T * C).view(B, T, C)
    got = {"out": load(a.dir, "out.f32", B * T * C).view(B, T, C),
           "lse": load(a.dir, "lse.f32", B * NH * T).view(B, NH, T),
           "dqkv": load(a.dir, "dqkv.f32", B * T * 3 * C).view(B, T, 3 * C)}
    x = qkv.clone().requires_grad_(True)
    q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in x.split(C, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = y.transpose(1, 2).reshape(B, T, C)
    out.backward(dout)
    s = (q @ k.transpose(-2, -1)) / hs ** 0.5
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    want = {"out": out.detach(), "lse": torch.logsumexp(s, dim=-1).detach(), "dqkv": x.grad}
    bad = 0
    for name in ("out", "lse", "dqkv"):
        r = ((got[name] - want[name]).abs().max() / want[name].abs().max()).item()
        ok = r <= a.tol
        bad += not ok
        print("fused %-4s vs torch SDPA (float64): max |diff| / max |torch| %.2e (%s %g)"
              % (name, r, "within" if ok else "OVER", a.tol))
    print("PyTorch %s, B %d T %d C %d heads %d" % (torch.__version__, B, T, C, NH))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
