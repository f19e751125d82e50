#!/usr/bin/env python3
"""gpt_table.py - the table of make gpu-bench-gpt (tests/bench/gpt_bench.sh)
from the runs' files in OUTDIR: pp-sS.log (ppvm's step lines), torch-MODE.log
(gpt_torch.py's JSON), NAME.rc and NAME.peak_mib. Writes OUTDIR/gpt_bench.md
and OUTDIR/losses.csv and prints the table.

Figures: step time is the median after two warm-up steps (torch.compile
compiles in its first); tokens/s = B x batch x context / step time; MFU =
the model's FLOPs per step / step time / the card's dense bf16 peak, the
FLOPs counted as pp counts them (kernels/README.md, "FLOPs": the weight
GEMMs, attention's q k^T and P v over the full T x T, the head; a backward
twice its forward); peak memory is the GPU's memory in use during the run
above what was in use before it (nvidia-smi, every 100 ms: CUDA contexts
included, every rank's together), and for PyTorch also its allocator's
peak. Losses: each run's per-step loss against pp's one-rank run, the worst
|a - b| / b over the steps, within --loss-rtol or not (PyTorch starts from
that run's weights; the multi-rank plans from their own, pp's stage-wise
initialisation). Pure Python (no
numpy), so it runs wherever the script does.
"""
import argparse
import csv
import json
import os
import re
import statistics


def model_of(out):
    text = open(os.path.join(out, "plan-init", "rank0.txt")).read()
    line = re.search(r"^; model: gpt, (.*)$", text, re.M).group(1)
    m = {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", line)}
    m["layers"] = int(re.search(r"^; layers per stage: s0 (\d+)$", text, re.M).group(1))
    return m


def step_flops(m, B):
    """pp_stage_flops over every stage, times 3 (forward + backward), per step."""
    bt, T, C, Fw, V = m["batch"] * m["context"], m["context"], m["embed"], m["ffn"], m["vocab"]
    fwd = m["layers"] * (2 * bt * (3 * C * C + C * C + 2 * C * Fw) + 2 * 2 * m["batch"] * T * T * C)
    fwd += 2 * bt * C * V
    return 3 * B * fwd


def read_run(out, name):
    rc = int(open(os.path.join(out, name + ".rc")).read().strip() or 1)
    mib = open(os.path.join(out, name + ".peak_mib")).read().strip()
    log = open(os.path.join(out, name + ".log")).read()
    r = {"name": name, "rc": rc, "peak_mib": float(mib) if mib else None, "losses": [],
         "ms": [], "alloc": None, "note": "", "graph": "-"}
    if name.startswith("pp-"):
        for loss, ms in re.findall(r"^step\s+\d+/\d+\s+loss (\S+)\s+time\s+(\S+) ms", log, re.M):
            r["losses"].append(float(loss))
            r["ms"].append(float(ms))
        note = [ln for ln in log.splitlines() if "attention" in ln]
        r["note"] = "; ".join(note[:2])
        # ppvm's "graph: on, ..." (whole steps, or piecewise: N graphs between
        # the mpi transfers) or "graph: off, launching ... (why)" (vm/README.md)
        g = re.search(r"^graph: (on|off)[^(\n]*(?:\((.*)\))?$", log, re.M)
        pw = re.search(r"^graph: on, piecewise: .* as (\d+) CUDA graph", log, re.M)
        if pw:
            r["graph"] = "on (piecewise, %s graphs)" % pw.group(1)
        elif g:
            r["graph"] = g.group(1) + (" (%s)" % g.group(2).split(":")[0] if g.group(2) else "")
    else:
        js = [ln for ln in log.splitlines() if ln.startswith("{")]
        if js:
            j = json.loads(js[-1])
            r["losses"], r["ms"], r["alloc"] = j["losses"], j["step_ms"], j["peak_bytes"]
            r["note"] = "PyTorch %s" % j["torch"]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--gpu", default="?")
    ap.add_argument("--peak", type=float, default=0.0, help="dense bf16 TFLOP/s (0: unknown)")
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--ranks", default="1 2 4")
    ap.add_argument("--torch-runs", default="eager compile")
    ap.add_argument("--loss-rtol", type=float, default=2e-2)
    a = ap.parse_args()
    m = model_of(a.out)
    flops = step_flops(m, a.B)
    tokens = a.B * m["batch"] * m["context"]
    names = ["pp-s%s" % s for s in a.ranks.split()] + ["torch-%s" % t for t in a.torch_runs.split()]
    runs = [read_run(a.out, n) for n in names if os.path.exists(os.path.join(a.out, n + ".rc"))]
    ref = next((r for r in runs if r["name"] == "pp-s1" and r["losses"]), None)
    label = {"pp-s1": "ppvm, 1 rank", "pp-s2": "ppvm 1F1B, 2 ranks (mpi)",
             "pp-s4": "ppvm 1F1B, 4 ranks (mpi)", "torch-eager": "PyTorch eager",
             "torch-compile": "PyTorch torch.compile"}
    head = ("GPT (%d layers, width %d, %d heads, context %d, vocabulary %d), bf16, AdamW; "
            % (m["layers"], m["embed"], m["heads"], m["context"], m["vocab"]))
    head += ("%s; dense bf16 peak %s TFLOP/s; %d tokens a step (B=%d x batch %d x context %d); "
             "%.2f TFLOP a step (pp's count)"
             % (a.gpu, ("%g" % a.peak) if a.peak else "unknown", tokens, a.B, m["batch"],
                m["context"], flops / 1e12))
    lines = [head, "",
             "| run | exit | CUDA graph | tokens/s | step ms | MFU | peak GPU MiB "
             "| worst loss diff vs ppvm 1 rank |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        ms = statistics.median(r["ms"][2:]) if len(r["ms"]) > 2 else None
        tps = "%.0f" % (tokens / (ms / 1e3)) if ms else "-"
        mfu = "%.1f%%" % (100 * flops / (ms / 1e3) / (a.peak * 1e12)) if ms and a.peak else "-"
        mem = "%.0f" % r["peak_mib"] if r["peak_mib"] is not None else "-"
        if r["alloc"]:
            mem += " (allocator %.0f)" % (r["alloc"] / 2 ** 20)
        diff = "-"
        if ref and r is not ref and r["losses"]:
            n = min(len(ref["losses"]), len(r["losses"]))
            worst = max(abs(x - y) / abs(y) for x, y in zip(r["losses"][:n], ref["losses"][:n]))
            diff = "%.2e over %d steps (%s %g)" % (worst, n, "within" if worst <= a.loss_rtol
                                                  else "OVER", a.loss_rtol)
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s |" % (
            label.get(r["name"], r["name"]), r["rc"], r["graph"], tps, "%.1f" % ms if ms else "-", mfu, mem,
            diff))
    notes = sorted(set(r["note"] for r in runs if r["note"]))
    notes.append("PyTorch starts from ppvm's one-rank initial weights; the 2- and 4-rank "
                 "plans start from their own (pp initialises each stage from (seed, stage)), so "
                 "their loss column is a loose bound, not a match")
    lines += [""] + ["- " + n for n in notes]
    text = "\n".join(lines) + "\n"
    open(os.path.join(a.out, "gpt_bench.md"), "w").write(text)
    with open(os.path.join(a.out, "losses.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step"] + [r["name"] for r in runs])
        for i in range(max((len(r["losses"]) for r in runs), default=0)):
            w.writerow([i + 1] + [r["losses"][i] if i < len(r["losses"]) else "" for r in runs])
    print(text, end="")


if __name__ == "__main__":
    main()
