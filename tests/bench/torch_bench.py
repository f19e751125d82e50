"""torch_bench.py - PyTorch eager training the demo model (kernels/model.h) at
the benchmark's size on one GPU: the baseline tests/bench/gpu_bench.sh sets
beside ppvm --backend cuda. Same shapes, same arithmetic (fp32, no TF32,
tanh GELU, pre-LN residual MLP blocks and a final layer norm before the
head, summed loss scaled to the mean over the step, plain SGD), B
microbatches accumulated per step. Prints one JSON line. TFLOP/s counts the
GEMMs only, as pp_stage_flops does.

--precision bf16 is PyTorch's standard mixed precision, to set beside
ppvm's `precision bf16`: fp32 parameters and gradients, the forward and
backward under torch.autocast(bfloat16), so the matmuls run on bf16
operands with fp32 accumulation and the layer norms and the loss in fp32.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("context", 16), ("embed", 256), ("ffn", 16384), ("blocks", 4),
                          ("batch", 256), ("microbatches", 4), ("steps", 20), ("warmup", 3)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    D, Fi, V = a.context * a.embed, a.ffn, 256
    g = torch.Generator(device="cpu").manual_seed(1)

    def param(*shape, scale):
        return (torch.rand(*shape, generator=g) * 2 - 1).mul_(scale).to(dev).requires_grad_()

    def ln_params():  # gamma 1, beta 0, as pp_stage_init
        return (torch.ones(D, device=dev, requires_grad=True),
                torch.zeros(D, device=dev, requires_grad=True))

    E = param(V, a.embed, scale=1.0)
    blocks = [ln_params() + (param(Fi, D, scale=D ** -0.5), param(Fi, scale=0.0),
                             param(D, Fi, scale=0.5 * Fi ** -0.5), param(D, scale=0.0))
              for _ in range(a.blocks)]
    gf, betaf = ln_params()
    Wh, bh = param(V, D, scale=D ** -0.5), param(V, scale=0.0)
    params = [E, gf, betaf, Wh, bh] + [p for blk in blocks for p in blk]
    tokens = torch.randint(0, V, (a.microbatches, a.batch, a.context + 1), generator=g).to(dev)
    scale = 1.0 / (a.microbatches * a.batch)

    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16")

    def step():
        for b in range(a.microbatches):
            t = tokens[b]
            with autocast:
                x = E[t[:, :a.context]].reshape(a.batch, D)
                for g1, beta, W1, b1, W2, b2 in blocks:
                    u = F.layer_norm(x, (D,), g1, beta, eps=1e-5)
                    x = x + F.linear(F.gelu(F.linear(u, W1, b1), approximate="tanh"), W2, b2)
                z = F.layer_norm(x, (D,), gf, betaf, eps=1e-5)
                logits = F.linear(z, Wh, bh)
            loss = F.cross_entropy(logits.float(), t[:, a.context], reduction="sum")
            (loss * scale).backward()
        with torch.no_grad():
            for p in params:
                p.sub_(p.grad, alpha=a.lr)
                p.grad = None

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    dt = times[len(times) // 2]
    samples = a.microbatches * a.batch
    fwd = a.blocks * 4.0 * a.batch * D * Fi + 2.0 * a.batch * V * D  # per microbatch
    flops = a.microbatches * 3 * fwd
    print(json.dumps({"samples_per_s": samples / dt, "tflops": flops / dt / 1e12,
                      "step_ms": dt * 1e3, "torch": torch.__version__, "precision": a.precision,
                      "gpu": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
