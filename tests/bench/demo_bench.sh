#!/usr/bin/env bash
# demo_bench.sh - the two demos as trained by `make demo` (part of `make
# bench`): the mlp model on schedules/gpipe.pp and the GPT on
# schedules/1f1b-gpt.pp, each under mpirun with one rank per stage on this
# machine's cores. Prints the loss at the last step, the median samples/s
# and step time (steps after the first two), and the GFLOP/s that step time
# achieves (F + B FLOPs of every stage, pp_stage_flops, times B microbatches,
# over all ranks together). STEPS (default 60) sets the run's length.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${STEPS:-60}
mpirun="mpirun --oversubscribe --allow-run-as-root --bind-to none"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
. "$root/tests/bench/blas_env.sh"
printf '%-16s %5s %6s %10s %12s %12s %10s\n' schedule ranks steps "last loss" samples/s \
  "step ms" GFLOP/s
# Each demo with the flags make demo gives it (the Makefile's DEMO_FLAGS).
for case in "gpipe.pp|" "1f1b-gpt.pp|--lr 6e-3 --adam-beta2 0.95 --warmup 20"; do
  IFS='|' read -r file flags <<< "$case"
  "$root/bin/ppc" "$root/schedules/$file" -o "$out/plan" -q --no-pictures
  np=$(ls "$out"/plan/rank*.bin | wc -l)
  B=$(sed -n 's/^; rank 0 of [0-9]*, S=[0-9]* stages, B=\([0-9]*\) microbatches/\1/p' \
        "$out/plan/rank0.txt")
  flops=$("$root/bin/model_bench" --flops "$root/schedules/$file")
  # shellcheck disable=SC2086 # flags is a list of flags
  $mpirun -np "$np" "$root/bin/ppvm" --backend cpu "$out/plan" --steps "$steps" $flags \
    > "$out/run.txt"
  loss=$(awk '/^step/ { l = $4 } END { print l }' "$out/run.txt")
  read -r ms sps < <(awk '/^step/ { for (i = 1; i <= NF; i++) { if ($i == "time") t = $(i + 1);
                                      if ($i == "samples/s") s = $(i + 1) } print t, s }' \
                       "$out/run.txt" | tail -n +3 | sort -g |
                     awk '{ a[NR] = $1; b[NR] = $2 } END { m = int((NR + 1) / 2); print a[m], b[m] }')
  awk -v f="$file" -v np="$np" -v st="$steps" -v l="$loss" -v ms="$ms" -v sps="$sps" \
      -v fl="$flops" -v B="$B" \
    'BEGIN { printf "%-16s %5d %6d %10s %12.0f %12.3f %10.2f\n", f, np, st, l, sps, ms,
             fl * B / (ms / 1e3) / 1e9 }'
done
