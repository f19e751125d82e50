#!/usr/bin/env python3
"""peers_bench.py - pp beside PyTorch on the CPU: same model, same data, same weights.

Issue 18 part 1's yardstick: `make bench-peers` (part of `make bench`); by
hand from the repository root after `make all bin/model_bench`:

    PYTHON tests/bench/peers_bench.py [--quick] [--models mlp,gpt] [--batches 16,256]

where PYTHON has torch and numpy (make oracle's build/oracle-venv/bin/python,
or any other). Without them it prints one line, "peers_bench: skipped: no
PyTorch ...", and exits 0.

For the mlp demo model (schedules/gpipe.pp's model block) and a GPT
(kernels/gpt.c; schedules/1f1b-gpt.pp's model with context 16, so that batch
256 fits the time budget), each at batch 16 and at batch 256 (16x the work
per microbatch), it trains the same model from the same initial weights on
the same microbatches in:

  pp:       ppvm --reference (one process), and GPipe and 1F1B on 4 ranks
            under mpirun (schedules/gpipe.pp and schedules/1f1b.pp with the
            model block replaced, S = 4);
  PyTorch:  eager in one process (the stages one after another, autograd,
            torch.optim), and torch.distributed.pipelining's ScheduleGPipe
            and Schedule1F1B on 4 gloo processes, one stage each.

One thread per process on both sides (OPENBLAS_NUM_THREADS=1,
OMP_NUM_THREADS=1, torch.set_num_threads(1)). PyTorch starts from pp's own
initial weights (ppvm --reference --steps 0 --save) and draws pp's
microbatches (vm/data.c's windows), through torch_oracle.py's read_weights,
layout, microbatch and stage_forward. Each PyTorch run's per-step losses
must equal pp's within --tol (1e-4, relative) at every step of the run
(eager against ppvm --reference, a pipeline against pp's run of the same
schedule): printed per row, and a mismatch exits 1.

Timing: the median step time over the steps after --warmup (with
--rounds N, everything runs N times, pp and PyTorch in turn, and each row
takes its fastest round). pp's is the
`time` ppvm prints per step (the slowest rank's, from a common start);
PyTorch's is measured the same way (a barrier, then the schedule's step
and the optimizer; the slowest rank's time by an all-reduce). PyTorch's
microbatches are made before its clock starts. Per row: samples/s of both,
pp / PyTorch (target >= 1), and the GFLOP/s each achieves (pp_stage_flops
of every stage, as bin/model_bench --flops counts them, times B per step,
all ranks together); under each case, OpenBLAS's one-thread cblas_sgemm
rate at the model's weight-GEMM shapes (forward Y = X W^T, backward
dX = dY W and dW = dY^T X; the libopenblas ppvm links, through ctypes).

Exits 0 when every loss matched (whatever the speeds: a benchmark, not a
test), 1 when one did not, 2 on bad arguments or when a command fails.
"""
import argparse
import os
import sys

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"  # one thread per process, set before numpy and torch load a BLAS

MODEL_NAMES = ("mlp", "gpt")
DEFAULT_STEPS = {16: "steps16", 256: "steps256"}


def parse(argv):
    ap = argparse.ArgumentParser(prog="peers_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,gpt", help="mlp, gpt or both (default mlp,gpt)")
    ap.add_argument("--batches", default="16,256",
                    help="samples per microbatch, one case each (default 16,256)")
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median (2)")
    ap.add_argument("--steps16", type=int, default=20, help="timed steps at batch 16 (20)")
    ap.add_argument("--steps256", type=int, default=6, help="timed steps at batch 256 (6)")
    ap.add_argument("--steps", type=int, default=0,
                    help="timed steps of every case (overrides --steps16 and --steps256)")
    ap.add_argument("--quick", action="store_true",
                    help="2 timed steps per case: everything runs and is checked, the "
                         "timings mean little")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run everything this many times, pp and PyTorch in turn, and take "
                         "each row's fastest round (1; more on a loaded machine)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="largest relative loss difference allowed (1e-4)")
    args = ap.parse_args(argv)
    for k in args.models.split(","):
        if k not in MODEL_NAMES:
            ap.error("--models: '%s' is not a model; expected mlp, gpt or mlp,gpt" % k)
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        ap.error("--batches: '%s' is not a list of numbers; expected e.g. 16,256" % args.batches)
    if any(b < 1 for b in batches):
        ap.error("--batches: every batch must be at least 1")
    if args.warmup < 0 or args.steps < 0 or args.steps16 < 1 or args.steps256 < 1:
        ap.error("--warmup and --steps must not be negative, --steps16 and --steps256 at least 1")
    if args.rounds < 1:
        ap.error("--rounds: %d; expected at least 1" % args.rounds)
    if args.quick:
        args.steps = 2
    for b in batches:
        if b not in DEFAULT_STEPS and not args.steps:
            ap.error("--batches: batch %d has no default step count; give --steps N" % b)
    args.timed = {b: args.steps or getattr(args, DEFAULT_STEPS[b]) for b in batches}
    return args


def main(argv):
    args = parse(argv)
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        from torch.distributed import pipelining  # noqa: F401
        del numpy, torch, pipelining  # imported only to know they import
    except ImportError as e:
        print("peers_bench: skipped: no PyTorch in %s (%s); run `make oracle` once or set "
              "TORCH_PYTHON" % (sys.executable, e))
        return 0
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import peers_torch
    return peers_torch.main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
