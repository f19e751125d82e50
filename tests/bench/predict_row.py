#!/usr/bin/env python3
"""predict_row.py - one row of tests/bench/predict_bench.sh: ppc's prediction
beside what ppvm --profile measured, for one schedule.

    predict_row.py NAME COSTS_JSON PLAN_DIR REPORT_JSON RUN_TXT SKIP OWN_REPORT [CORES_REPORT]

NAME: the row's label; COSTS_JSON: ppvm --profile's file (its "measured"
record: vm/profile.h); PLAN_DIR: the plan ppc compiled with --costs (its
rank<r>.txt listings say which OptimizerSteps each rank runs); REPORT_JSON:
that compile's report; RUN_TXT: ppvm's output (one "step N/M ... time T ms"
line per step); SKIP: the first steps left out of the median (warm-up);
OWN_REPORT: the report of a compile with RUN_TXT's own profile that
ordered the plan as it ran, or "-" where there is none.

Columns (times in ms):
  makespan, predicted   the report's makespan and step (the makespan, then
                        gradient returns, all-reduces and optimizer steps)
  measured              the median of ppvm's step times after SKIP steps
  ratio                 predicted / measured
  fastest, ratio        the fastest of those steps, and predicted / fastest:
                        other processes only ever add to a step, so on a
                        loaded machine this is the nearer to a quiet one's
  bubble                the report's bubble: 1 - busy / (ranks x makespan)
  idle pred, idle meas  the ranks' idle share of the step, on one basis for
                        both: 1 - (jobs + optimizer steps) / (ranks x step);
                        predicted from the report's busy and the costs' O of
                        each rank's OptimizerSteps, measured by ppvm --profile
  busy ratio            predicted / measured time in jobs and optimizer steps
                        over all ranks: below 1 the job costs (medians) miss
                        compute time; near 1 any gap in the step is waiting
  own                   OWN_REPORT's step / measured: the step predicted from
                        the measured run's own costs (the same as ratio where
                        the plan ppc first ordered is the one predicted), so
                        the machine's speed from run to run is out of it;
                        "-" where those costs order the plan otherwise
With CORES_REPORT (the 4-rank table), two more columns: that compile's
step (the job costs of a run with ranks <= cores, plus "cores": the
machine's cores) and its ratio to the measured step.
Only the standard library: make bench must not need more than python3."""
import glob
import json
import os
import re
import sys


def median(v):
    v = sorted(v)
    n = len(v)
    if n == 0:
        return float("nan")
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def main():
    name, costs_path, plan, report_path, run_path, skip, own_path = sys.argv[1:8]
    cores_step = own_step = None
    if len(sys.argv) > 8:
        with open(sys.argv[8]) as f:
            cores_step = json.load(f)["step"]
    if own_path != "-":
        with open(own_path) as f:
            own_step = json.load(f)["step"]
    with open(costs_path) as f:
        costs = json.load(f)
    with open(report_path) as f:
        report = json.load(f)
    with open(run_path) as f:
        steps = [float(m.group(1)) for m in re.finditer(r"^step .* time +([0-9.]+) ms", f.read(), re.M)]
    measured = median(steps[int(skip):])
    fastest = min(steps[int(skip):])
    ranks = report["W"]
    opt = costs.get("O", [0.0])
    busy_pred = list(report["busy"])
    for path in glob.glob(os.path.join(plan, "rank*.txt")):
        r = int(re.search(r"rank(\d+)\.txt$", path).group(1))
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) > 2 and fields[1] == "OptimizerStep":
                    s = int(fields[2])
                    busy_pred[r] += opt[s] if len(opt) > 1 else opt[0]
    step_pred = report["step"]
    m = costs.get("measured", {})
    idle_pred = 1 - sum(busy_pred) / (ranks * step_pred) if step_pred > 0 else 0
    idle_meas = m.get("bubble", float("nan"))
    busy_meas = sum(m.get("busy", [])) or float("nan")
    line = "%-34s %5d %9.3f %9.3f %9.3f %6.2f %9.3f %6.2f %6.1f%% %6.1f%% %6.1f%% %6.2f" % (
        name, ranks, report["makespan"] * 1e3, step_pred * 1e3, measured,
        step_pred * 1e3 / measured, fastest, step_pred * 1e3 / fastest,
        # + 0.0: a share that rounds to nothing prints 0.0%, not -0.0%
        100 * report["bubble"] + 0.0, max(100 * idle_pred, 0.0) + 0.0, 100 * idle_meas + 0.0,
        sum(busy_pred) / busy_meas)
    line += " %6s" % ("%.2f" % (own_step * 1e3 / measured) if own_step is not None else "-")
    if cores_step is not None:
        line += " %9.3f %6.2f" % (cores_step * 1e3, cores_step * 1e3 / measured)
    print(line)


if __name__ == "__main__":
    main()
