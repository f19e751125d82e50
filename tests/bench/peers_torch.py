#!/usr/bin/env python3
"""peers_torch.py - the PyTorch side and the driver of peers_bench.py (read
that file's header: what is compared, how it is timed and checked). Needs
torch and numpy; peers_bench.py imports it only once they import."""
import ctypes
import ctypes.util
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.pipelining import PipelineStage  # noqa: E402
from torch.distributed.pipelining import schedules as PS  # noqa: E402

import torch_oracle as O  # noqa: E402

ROOT = O.ROOT
DATA = "/usr/share/common-licenses/GPL-3"
S_RANKS = 4
# The two models: the block that replaces the schedule's model block (batch
# filled in per case), the optimizer, B microbatches per step.
MODELS = {
    "mlp": ("model {\n    context = 8\n    embed = 16\n    ffn = 256\n    blocks = 1\n"
            "    batch = %d\n}\n", "sgd", 8),
    "gpt": ("model gpt {\n    vocab = 256\n    context = 16\n    embed = 64\n    heads = 4\n"
            "    ffn = 256\n    layers = s == 0 || s == S - 1 ? 1 : 2\n    batch = %d\n}\n",
            "adamw", 4),
}
SCHEDULES = (("gpipe", "ScheduleGPipe"), ("1f1b", "Schedule1F1B"))
LR = {"sgd": 0.3, "adamw": 4e-3}
WEIGHT_DECAY, ADAM_EPS = 0.01, 1e-5  # torch_oracle.py's (eps 1e-5: see tests/README.md)


def run(cmd):
    """Runs cmd (a list) from the repository root; its output, or exit 2."""
    try:
        r = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
                                               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    except OSError as e:
        sys.stderr.write("peers_bench: cannot run %s: %s (make all bin/model_bench first)\n"
                         % (cmd[0], e.strerror))
        sys.exit(2)
    if r.returncode != 0:
        sys.stderr.write("peers_bench: %s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout))
        sys.exit(2)
    return r.stdout


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


# ---- pp ------------------------------------------------------------------------

def schedule_with_model(name, block, path):
    """schedules/NAME.pp with its model block replaced by BLOCK, written to PATH."""
    text = open(os.path.join(ROOT, "schedules", name + ".pp")).read()
    text = re.sub(r"^model\b[^{]*\{.*?^\}\n", "", text, flags=re.M | re.S)
    with open(path, "w") as f:
        f.write(text + block)
    return path


def pp_flags(opt, seed):
    f = ["--seed", str(seed), "--data", DATA, "--lr", repr(LR[opt])]
    if opt == "adamw":
        f += ["--weight-decay", repr(WEIGHT_DECAY), "--adam-eps", repr(ADAM_EPS)]
    return f


def pp_times(out, prefix):
    """Step times in seconds from ppvm's per-step lines."""
    return [float(t) / 1e3 for t in
            re.findall(r"^%sstep\s+\d+/\d+\s+loss \S+\s+time\s+(\S+) ms" % prefix, out, re.M)]


# ---- PyTorch ---------------------------------------------------------------------

def stage_params(m, s, init_dir):
    """name -> a Parameter of its own, holding pp's initial value."""
    flat = torch.from_numpy(O.read_weights(init_dir, s))
    return {n: torch.nn.Parameter(v.clone()) for n, v in O.views(flat, O.layout(m, s)).items()}


def make_optim(params, opt):
    if opt == "sgd":
        return torch.optim.SGD(params, lr=LR[opt])
    return torch.optim.AdamW(params, lr=LR[opt], betas=(0.9, 0.999), eps=ADAM_EPS,
                             weight_decay=WEIGHT_DECAY)


def loss_scale(m):
    """pp_loss_scale, in float: 1 / (B * batch * predictions)."""
    return float(np.float32(1.0) / np.float32(m["B"] * m["batch"] * O.predictions(m)))


def torch_eager(m, init_dir, batches, opt):
    """The whole model in this process; per step, every microbatch's forward
    and backward (gradients accumulate), then the optimizer. Returns
    (step seconds, per-step losses)."""
    S, B = m["S"], m["B"]
    params = [stage_params(m, s, init_dir) for s in range(S)]
    optim = make_optim([p for d in params for p in d.values()], opt)
    scale, count = loss_scale(m), m["B"] * m["batch"] * O.predictions(m)
    times, losses = [], []
    for step in batches:
        t0 = time.perf_counter()
        total = 0.0
        for b in range(B):
            x = None
            for s in range(S):
                x = O.stage_forward(m, s, params[s], x, step[b])
            total += float(x.detach())
            (x * scale).backward()
        optim.step()
        optim.zero_grad()
        times.append(time.perf_counter() - t0)
        losses.append(total / count)
    return times, losses


class StageModule(torch.nn.Module):
    """Stage s of the model for PipelineStage: torch_oracle's stage forward,
    but the last stage returns its logits (the loss is the schedule's
    loss_fn, as PyTorch's pipelines compute it)."""

    def __init__(self, m, s, init_dir):
        super().__init__()
        self.m, self.s = m, s
        p = stage_params(m, s, init_dir)
        self.names = list(p)
        self.ps = torch.nn.ParameterList(p.values())

    def forward(self, x):
        m, s = self.m, self.s
        p = dict(zip(self.names, self.ps))
        # one stage more: stage_forward then stops after this stage's blocks
        inner = dict(m, S=m["S"] + 1)
        h = O.stage_forward(inner, s, p, None if s == 0 else x, x if s == 0 else None)
        if s < m["S"] - 1:
            return h
        if m["kind"] == "mlp":
            return F.linear(O.ln(h, p["lnf_g"], p["lnf_b"]), p["Wh"], p["bh"])
        return F.linear(O.ln(h, p["lnfw"], p["lnfb"]), p["wlm"])


class Loss:
    """The schedule's loss_fn: the summed cross-entropy times pp's loss scale
    (picklable for spawn). target: the microbatch's token rows."""

    def __init__(self, m):
        self.kind, self.context, self.scale = m["kind"], m["context"], loss_scale(m)

    def __call__(self, logits, tok):
        if self.kind == "mlp":
            loss = F.cross_entropy(logits, tok[:, self.context], reduction="sum")
        else:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tok[:, 1:].reshape(-1),
                                   reduction="sum")
        return loss * self.scale


def pipe_worker(rank, W, store, jobs, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=W)
    results = {}
    try:
        for key, job in jobs.items():
            m, s = job["m"], rank
            mod = StageModule(m, s, job["init"])
            stage = PipelineStage(mod, s, m["S"], torch.device("cpu"))
            sched = getattr(PS, job["cls"])(stage, n_microbatches=m["B"], loss_fn=Loss(m),
                                            scale_grads=False)
            optim = make_optim(list(mod.parameters()), job["opt"])
            first, last = s == 0, s == m["S"] - 1
            times, losses = [], []
            for step in job["batches"]:
                x = torch.cat(step)  # the schedule splits it into B microbatches again
                dist.barrier()
                t0 = time.perf_counter()
                mb_losses = [] if last else None
                sched.step(*((x,) if first else ()), target=x if last else None,
                           losses=mb_losses)
                optim.step()
                optim.zero_grad()
                dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)
                times.append(dt.item())
                if last:
                    losses.append(sum(float(v.detach()) for v in mb_losses))
            results[key] = {"times": times, "losses": losses}
    finally:
        torch.save(results, os.path.join(out, "rank%d.pt" % rank))
        dist.destroy_process_group()


def torch_pipelines(jobs):
    """Runs every job in one set of S_RANKS gloo processes; key -> (times, losses)."""
    with tempfile.TemporaryDirectory(prefix="pp-peers-gloo-") as tmp:
        store = os.path.join(tmp, "store")
        try:
            mp.spawn(pipe_worker, args=(S_RANKS, store, jobs, tmp), nprocs=S_RANKS, join=True)
        except Exception as e:  # a rank's exception, its traceback in the message
            sys.stderr.write("peers_bench: PyTorch's gloo pipelines failed: %s\n" % e)
            sys.exit(2)
        per_rank = [torch.load(os.path.join(tmp, "rank%d.pt" % r), weights_only=False)
                    for r in range(S_RANKS)]
    return {k: (per_rank[0][k]["times"], per_rank[-1][k]["losses"]) for k in jobs}


# ---- OpenBLAS at the model's shapes --------------------------------------------------

def weight_gemms(m):
    """(M, N, K, count) of each weight GEMM C[M][N] = X[M][K] W[N][K]^T of a
    forward over every stage (as bin/model_bench's weight_gemms)."""
    L = sum(m["layers"])
    if m["kind"] == "mlp":
        M, D, Fw = m["batch"], m["context"] * m["embed"], m["ffn"]
        return [(M, Fw, D, L), (M, D, Fw, L), (M, 256, D, 1)]
    M, C, Fw = m["batch"] * m["context"], m["embed"], m["ffn"]
    return [(M, 3 * C, C, L), (M, C, C, L), (M, Fw, C, L), (M, C, Fw, L), (M, m["vocab"], C, 1)]


def sgemm_rate(m):
    """GFLOP/s of one-thread cblas_sgemm over the model's weight GEMMs, forward
    and both backward products, weighted by their FLOPs."""
    name = ctypes.util.find_library("openblas") or "libopenblas.so.0"
    lib = ctypes.CDLL(name)
    if hasattr(lib, "openblas_set_num_threads"):
        lib.openblas_set_num_threads(1)
    f, i, p = ctypes.c_float, ctypes.c_int, ctypes.c_void_p
    lib.cblas_sgemm.argtypes = [i, i, i, i, i, i, f, p, i, p, i, f, p, i]
    ROW, NO, TR = 101, 111, 112
    flops = secs = 0.0
    for M, N, K, count in weight_gemms(m):
        X = np.random.rand(M, K).astype(np.float32)
        Wt = np.random.rand(N, K).astype(np.float32)
        dY = np.random.rand(M, N).astype(np.float32)
        Y = np.empty((M, N), np.float32)
        dX = np.empty((M, K), np.float32)
        dW = np.empty((N, K), np.float32)
        ptr = lambda a: a.ctypes.data_as(p)  # noqa: E731
        calls = [  # C = X W^T; dX = dY W; dW = dY^T X
            lambda: lib.cblas_sgemm(ROW, NO, TR, M, N, K, 1.0, ptr(X), K, ptr(Wt), K, 0.0, ptr(Y), N),
            lambda: lib.cblas_sgemm(ROW, NO, NO, M, K, N, 1.0, ptr(dY), N, ptr(Wt), K, 0.0, ptr(dX), K),
            lambda: lib.cblas_sgemm(ROW, TR, NO, N, K, M, 1.0, ptr(dY), N, ptr(X), K, 0.0, ptr(dW), K),
        ]
        for call in calls:
            call()  # warm
            reps, dt = 1, 0.0
            while True:
                t0 = time.perf_counter()
                for _ in range(reps):
                    call()
                dt = time.perf_counter() - t0
                if dt > 0.05:
                    break
                reps *= 2
            flops += 2.0 * M * N * K * count
            secs += dt / reps * count
    return flops / secs / 1e9


# ---- one case: a model at one batch ---------------------------------------------------

def prepare(kind, batch, tmp, args):
    """Compiles the case's plans, makes pp's initial weights and PyTorch's
    microbatches; returns the case."""
    block, opt, B = MODELS[kind]
    d = os.path.join(tmp, "%s-b%d" % (kind, batch))
    os.makedirs(d)
    case = {"kind": kind, "batch": batch, "opt": opt, "plans": {}, "dir": d}
    for name, _ in SCHEDULES:
        src = schedule_with_model(name, block % batch, os.path.join(d, name + ".pp"))
        plan = os.path.join(d, "plan-" + name)
        run(["bin/ppc", src, "-D", "S=%d" % S_RANKS, "-D", "B=%d" % B, "--optimizer", opt,
             "-o", plan, "-q", "--no-pictures"])
        case["plans"][name] = plan
    m = O.read_model(case["plans"]["gpipe"])
    case["m"] = m
    # pp_stage_flops of one microbatch over every stage, times B per step
    case["flops"] = float(run(["bin/model_bench", "--flops", os.path.join(d, "gpipe.pp")])) * B
    case["init"] = os.path.join(d, "init")
    run(["bin/ppvm", "--reference", case["plans"]["gpipe"], "--steps", "0", "--save", case["init"]]
        + pp_flags(opt, args.seed))
    steps = args.warmup + args.timed[batch]
    case["steps"] = steps
    tok = O.load_tokens(DATA, m)
    case["batches"] = [[O.microbatch(tok, m, args.seed, t, b) for b in range(m["B"])]
                       for t in range(steps)]
    return case


def run_pp(case, args):
    """pp's three runs of the case, each appended to case["pp"][row] as
    (step seconds, per-step losses)."""
    flags = pp_flags(case["opt"], args.seed) + ["--steps", str(case["steps"]), "--loss-digits", "9"]
    out = run(["bin/ppvm", "--reference", case["plans"]["gpipe"]] + flags)
    case["pp"]["reference"].append((pp_times(out, "reference "), O.losses_of(out, "reference ")))
    for name, _ in SCHEDULES:
        out = run(O.MPIRUN + ["-np", str(S_RANKS), "bin/ppvm", "--backend", "cpu",
                              case["plans"][name]] + flags)
        case["pp"][name].append((pp_times(out, ""), O.losses_of(out, "")))


def best(runs, warmup):
    """Of the rounds' runs of one row: the median step time of the fastest."""
    return min(median(times[warmup:]) for times, _ in runs)


def rel(a, b):
    if len(a) != len(b) or not a:
        return float("inf")
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def report(cases, args):
    """The table; returns whether every loss matched."""
    ok = True
    print("%-4s %5s  %-36s %10s %9s %8s  %11s %9s %8s  %8s  %9s" % (
        "", "batch", "pp vs PyTorch", "pp smp/s", "pp ms", "GFLOP/s", "torch smp/s", "torch ms",
        "GFLOP/s", "pp/torch", "loss rel"))
    ratios, worst_loss = [], []
    for c in cases:
        m = c["m"]
        samples = m["B"] * m["batch"]
        rows = [("ppvm --reference / eager", "reference", "eager")] + [
            ("%s 4 ranks / gloo %s" % (n, cls), n, n) for n, cls in SCHEDULES]
        for label, ppk, tk in rows:
            # PyTorch's losses against pp's, every round: eager against the
            # reference, a pipeline against pp's run of the same schedule
            r = max(rel(tl, pl) for _, tl in c["torch"][tk] for _, pl in c["pp"][ppk])
            worst_loss.append(r)
            good = r <= args.tol
            ok &= good
            pms, tms = best(c["pp"][ppk], args.warmup), best(c["torch"][tk], args.warmup)
            ratio = tms / pms
            ratios.append((c["kind"], c["batch"], ppk, ratio))
            print("%-4s %5d  %-36s %10.0f %9.2f %8.2f  %11.0f %9.2f %8.2f  %7.2fx  %9.1e%s" % (
                c["kind"], m["batch"], label, samples / pms, pms * 1e3, c["flops"] / pms / 1e9,
                samples / tms, tms * 1e3, c["flops"] / tms / 1e9, ratio, r,
                "" if good else "  EXCEEDS %g" % args.tol))
        cores = min(os.cpu_count() or 1, S_RANKS)
        print("%-4s %5d  %-36s %.2f GFLOP/s one thread (OpenBLAS cblas_sgemm at the model's weight "
              "GEMMs, F and B); x %d cores %.1f" % (c["kind"], m["batch"], "SGEMM at these shapes",
                                                    c["sgemm"], cores, c["sgemm"] * cores))
    print()
    for c in cases:
        m = c["m"]
        desc = ", ".join("%s %d" % (k, m[k]) for k in ("vocab", "context", "embed", "heads", "ffn")
                         if k in m)
        print("%s batch %d: %s, layers per stage %s, S=%d B=%d, %s, %d steps (median of the last "
              "%d%s), %.3g GFLOP per step" % (
                  c["kind"], c["batch"], desc, m["layers"], m["S"], m["B"], c["opt"], c["steps"],
                  c["steps"] - args.warmup,
                  "; the fastest of %d rounds" % args.rounds if args.rounds > 1 else "",
                  c["flops"] / 1e9))
    worst = min(r[3] for r in ratios)
    below = ["%s b%d %s %.2fx" % r for r in ratios if r[3] < 1]
    print("pp / PyTorch samples/s: lowest %.2fx (target >= 1 everywhere)%s" % (
        worst, "; below: " + ", ".join(below) if below else ": met"))
    print("losses: PyTorch vs pp, max relative difference over every step of every row %.1e "
          "(tolerance %g): %s" % (max(worst_loss), args.tol, "ok" if ok else "EXCEEDED"))
    return ok


def main(args):
    """Runs the benchmark as args (peers_bench.py's) say; the exit status."""
    kinds, batches = args.models.split(","), [int(b) for b in args.batches.split(",")]
    torch.set_num_threads(1)
    t_start, load0 = time.perf_counter(), os.getloadavg()[0]
    print("pp vs PyTorch %s on the CPU, one thread per process (%d cores here); samples/s from "
          "the median step after %d warm-up steps" % (torch.__version__, os.cpu_count(),
                                                      args.warmup))
    with tempfile.TemporaryDirectory(prefix="pp-peers-") as tmp:
        cases = [prepare(k, b, tmp, args) for k in kinds for b in batches]
        rows = ["reference"] + [n for n, _ in SCHEDULES]
        for c in cases:
            c["pp"] = {k: [] for k in rows}
            c["torch"] = {k: [] for k in ["eager"] + rows[1:]}
            c["sgemm"] = 0.0
        # Each round runs everything once, pp and PyTorch in turn, so that
        # load coming and going on a shared machine has a chance to miss
        # each side; the table takes each row's fastest round.
        for _ in range(args.rounds):
            for c in cases:
                c["sgemm"] = max(c["sgemm"], sgemm_rate(c["m"]))  # the fastest round's too
                run_pp(c, args)
                c["torch"]["eager"].append(torch_eager(c["m"], c["init"], c["batches"], c["opt"]))
            jobs = {}
            for i, c in enumerate(cases):
                for name, cls in SCHEDULES:
                    jobs["%d-%s" % (i, name)] = {"m": c["m"], "init": c["init"], "cls": cls,
                                                 "opt": c["opt"], "batches": c["batches"]}
            done = torch_pipelines(jobs)
            for i, c in enumerate(cases):
                for name, _ in SCHEDULES:
                    c["torch"][name].append(done["%d-%s" % (i, name)])
    ok = report(cases, args)
    print("(the whole benchmark took %.0f s; load average %.1f at the start, %.1f at the end)" % (
        time.perf_counter() - t_start, load0, os.getloadavg()[0]))
    return 0 if ok else 1
