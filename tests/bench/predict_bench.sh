#!/usr/bin/env bash
# predict_bench.sh - how well ppc predicts a step from measured costs (part
# of `make bench`). For each schedule: train it with ppvm --profile, compile
# it again with ppc --costs on what the run measured, and print the
# predicted step (the report's "step": the makespan, then gradient returns,
# all-reduces and optimizer steps) beside the median measured step time
# (steps after the first two). On an oversubscribed CPU (more ranks than
# cores) the measured steps also hold time the simulation does not model,
# such as ranks waiting for a core. BACKEND=cuda runs the same on GPUs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${STEPS:-12}
backend=${BACKEND:-cpu}
mpirun="mpirun --oversubscribe --allow-run-as-root --bind-to none"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OPENBLAS_NUM_THREADS=1
printf '%-24s %5s %12s %14s %14s %8s %8s\n' schedule ranks "makespan ms" "predicted ms" \
  "measured ms" ratio bubble
for case in "gpipe.pp|-D S=4 -D B=8" "1f1b.pp|-D S=4 -D B=8" "zb-h1.pp|-D S=4 -D B=8" \
            "fsdp.pp|-D S=4 -D B=4" "ddp.pp|-D S=4 -D B=4"; do
  IFS='|' read -r file defs <<< "$case"
  # shellcheck disable=SC2086 # defs is a list of flags
  "$root/bin/ppc" "$root/schedules/$file" $defs -o "$out/plan" -q --no-pictures
  np=$(ls "$out"/plan/rank*.bin | wc -l)
  $mpirun -np "$np" "$root/bin/ppvm" --backend "$backend" "$out/plan" --steps "$steps" \
    --profile "$out/costs.json" > "$out/run.txt"
  # shellcheck disable=SC2086
  "$root/bin/ppc" "$root/schedules/$file" $defs -o "$out/again" -q --no-pictures \
    --costs "$out/costs.json"
  predicted=$(sed -n 's/.*"step": \([0-9.e+-]*\).*/\1/p' "$out/again/report.json")
  makespan=$(sed -n 's/.*"makespan": \([0-9.e+-]*\).*/\1/p' "$out/again/report.json")
  bubble=$(sed -n 's/.*"bubble": \([0-9.e+-]*\).*/\1/p' "$out/again/report.json" | head -1)
  measured=$(awk '/^step/ { for (i = 1; i <= NF; i++) if ($i == "time") print $(i + 1) }' \
               "$out/run.txt" | tail -n +3 | sort -g |
             awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  awk -v n="${file%.pp} $defs" -v np="$np" -v p="$predicted" -v m="$measured" -v b="$bubble" \
    -v k="$makespan" 'BEGIN { printf "%-24s %5d %12.3f %14.3f %14.3f %8.2f %7.1f%%\n", n, np,
                              k * 1e3, p * 1e3, m, p * 1e3 / m, (b > 0 ? 100 * b : 0) }'
done
echo "(predicted: ppc's step with ppvm --profile's costs; measured: ppvm's median step;"
echo " backend $backend, $(nproc) cores, $steps steps)"
