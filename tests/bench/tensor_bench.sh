#!/usr/bin/env bash
# tensor_bench.sh - one model on 4 ranks three ways (issue 27): pipeline
# only (1F1B, 4 stages), pipeline x tensor (1F1B, 2 stages, tensor = 2) and
# tensor x data (2 replicas, one stage, tensor = 2). Per case: the step ppc
# predicts from what a profiled run measured (ppc --costs), the median
# measured step (after SKIP steps), the memory ppvm allocates per rank (the
# report's, which ppvm's memory line equals), and the traffic of a step
# per rank: activations and gradients received, weights fetched, and
# tensor all-reduces. Two models, a table each: the mlp (width 16 x 64 =
# 1024, ffn 4096, 4 blocks in all, batch 32) and a GPT (context 64, embed
# 128, 4 heads, ffn 512, 4 layers in all, batch 8, AdamW), B = 8.
# MODELS (default "mlp gpt"), STEPS (default 12), SKIP (default 3). Not a
# test: prints a table.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${STEPS:-12}
skip=${SKIP:-3}
mpirun="mpirun --oversubscribe --allow-run-as-root --bind-to none"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
. "$root/tests/bench/blas_env.sh"

model() {
  if [ "$kind" = gpt ]; then
    printf 'optimizer adamw\nmodel gpt { context = 64 embed = 128 heads = 4 ffn = 512 layers = %s batch = 8 }\n' "$1"
  else
    echo "model { context = 16 embed = 64 ffn = 4096 blocks = $1 batch = 32 }"
  fi
}

echo "(load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores)"
for kind in ${MODELS:-mlp gpt}; do

cat > "$out/pp.pp" <<PP
param S = 4
param B = 8
param W = S
let warm = S - 1 - s
compute(s,b,d) = s
priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b
order strict
$(model 1)
PP
cat > "$out/pptp.pp" <<PP
param S = 2
param B = 8
param W = S
tensor = 2
let warm = S - 1 - s
compute(s,b,d) = s
priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b
order strict
$(model 2)
PP
cat > "$out/tpdp.pp" <<PP
param S = 1
param B = 8
param W = 2
tensor = 2
compute(s,b,d) = b % W
weights(s,b,d) = b % W
$(model 4)
PP

echo "model $kind"
printf '%-10s %5s %10s %10s %6s %12s %12s %12s %14s\n' case ranks predicted measured ratio \
  "mem/rank" "act+grad in" "weights in" "tensor a-r"
for c in pp pptp tpdp; do
  "$root/bin/ppc" "$out/$c.pp" -o "$out/$c" -q --no-pictures
  np=$(ls "$out/$c"/rank*.bin | wc -l)
  $mpirun -np "$np" "$root/bin/ppvm" --backend cpu "$out/$c" --steps "$steps" \
    --profile "$out/$c.json" > "$out/$c.txt" < /dev/null
  "$root/bin/ppc" "$out/$c.pp" -o "$out/$c-m" -q --no-pictures --costs "$out/$c.json"
  python3 - "$out/$c-m/report.json" "$out/$c.txt" "$skip" "$c" "$np" <<'PY'
import json, re, statistics, sys
rep = json.load(open(sys.argv[1]))
times = [float(m.group(1)) / 1e3 for m in re.finditer(r"time\s+([\d.]+) ms", open(sys.argv[2]).read())]
measured = statistics.median(times[int(sys.argv[3]):])
def mib(b): return "%.2f MiB" % (b / 2**20)
mem = max(rep["mem_bytes"])          # per worker: each of its ranks (shards alike)
act = max(rep["act_recv_bytes"])
wts = max(rep["weight_recv_bytes"])
t = rep.get("tensor")
tr = "%d, %s" % (max(t["allreduces"]), mib(max(t["bytes"]))) if t else "-"
print("%-10s %5s %9.2fms %9.2fms %6.2f %12s %12s %12s %14s" % (sys.argv[4], sys.argv[5],
      rep["step"] * 1e3, measured * 1e3, rep["step"] / measured, mib(mem), mib(act), mib(wts), tr))
PY
done
done
