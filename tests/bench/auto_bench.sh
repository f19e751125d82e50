#!/usr/bin/env bash
# auto_bench.sh - `layers = auto(L)` against hand splits (part of `make
# bench`): a GPT-2-shaped model (vocabulary 50257, width 768, 12 heads, ffn
# 3072, L = 12 layers) on 4 stages of 1F1B over 4 CPU ranks, split three
# ways: evenly (3,3,3,3), by Megatron's rule (one layer fewer on the first
# and last stage: 2,4,4,2) and as ppc chooses (auto(12), from FLOPs). For
# each: the split, ppc's FLOPs prediction of the step (in units of the mean
# forward), the median measured step (steps after the first SKIP), and the
# step ppc predicts from that run's own --profile (ppc --costs), so the
# prediction is checked against the measurement split by split.
# STEPS (default 6), SKIP (2), B (8), CONTEXT (32) change the run; the load
# average is printed: 4 ranks share this machine's cores, and whatever else
# runs is in the measurement.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${STEPS:-6}
skip=${SKIP:-2}
B=${B:-8}
context=${CONTEXT:-32}
mpirun="mpirun --oversubscribe --allow-run-as-root --bind-to none"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$root/tests/bench/blas_env.sh"

# schedule FILE LAYERS: 1f1b.pp with the model block replaced
schedule() {
  python3 - "$root/schedules/1f1b.pp" "$2" "$context" > "$1" <<'EOF'
import re, sys
src = open(sys.argv[1]).read()
src = re.sub(r"^model\b[^{]*\{.*?^\}\n", "", src, flags=re.M | re.S)
print(src + "model gpt { vocab = 50257; context = %s; embed = 768; heads = 12; ffn = 3072\n"
      "            batch = 1; layers = %s }" % (sys.argv[3], sys.argv[2]))
EOF
}

json() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }

echo "auto_bench: GPT-2-shaped (V 50257, C 768, 12 heads, F 3072, context $context, batch 1)," \
  "12 layers, 1F1B S=4 B=$B on 4 CPU ranks, $steps steps (median of those after $skip)"
echo "(load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores)"
printf '%-10s %-10s %12s %12s %12s %8s\n' split layers "FLOPs step" "measured s" "predicted s" ratio
declare -A measured
for name in even megatron auto; do
  case $name in
  even) layers=3 ;;
  megatron) layers="s == 0 || s == S - 1 ? 2 : 4" ;;
  auto) layers="auto(12)" ;;
  esac
  schedule "$out/$name.pp" "$layers"
  "$root/bin/ppc" "$out/$name.pp" -D S=4 -D B="$B" -o "$out/$name" -q --no-pictures
  split=$(sed -n 's/^; layers per stage: //p' "$out/$name/rank0.txt")
  flops_step=$(json "$out/$name/report.json" step)
  $mpirun -np 4 "$root/bin/ppvm" --backend cpu "$out/$name" --steps "$steps" \
    --profile "$out/$name.costs.json" > "$out/$name.run.txt" < /dev/null
  med=$(python3 - "$out/$name.run.txt" "$skip" <<'EOF'
import re, statistics, sys
t = [float(x) for x in re.findall(r"time\s+([0-9.]+) ms", open(sys.argv[1]).read())]
print("%.3f" % (statistics.median(t[int(sys.argv[2]):]) / 1e3))
EOF
)
  # the split written out, priced with this run's own measured costs
  counts=$(python3 - "$out/$name/rank0.txt" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
runs = re.search(r"^; layers per stage:(.*)$", text, re.M).group(1)
n = [0] * 4
for a, b, k in re.findall(r"s(\d+)(?:-s(\d+))? (\d+)", runs):
    for s in range(int(a), int(b or a) + 1):
        n[s] = int(k)
print("s == 0 ? %d : s == 1 ? %d : s == 2 ? %d : %d" % tuple(n))
EOF
)
  schedule "$out/$name.fixed.pp" "$counts"
  "$root/bin/ppc" "$out/$name.fixed.pp" -D S=4 -D B="$B" -o "$out/$name.pred" -q \
    --no-pictures --costs "$out/$name.costs.json"
  pred=$(json "$out/$name.pred/report.json" step)
  measured[$name]=$med
  printf '%-10s %-10s %12.4g %12s %12.4g %8.3f\n' "$name" "$split" "$flops_step" "$med" "$pred" \
    "$(python3 -c "print($pred / $med)")"
done
python3 - "${measured[even]}" "${measured[megatron]}" "${measured[auto]}" <<'EOF'
import sys
even, meg, auto = (float(x) for x in sys.argv[1:])
print("auto vs even: %.1f%% faster; auto vs Megatron's rule: %.1f%% faster" % (
    100 * (even - auto) / even, 100 * (meg - auto) / meg))
EOF
echo "(load average after: $(cut -d' ' -f1-3 /proc/loadavg))"
