#!/usr/bin/env bash
# determ_bench.sh - what ppvm --deterministic costs (part of `make bench`):
# DDP, FSDP, LPP and 1F1B on 4 ranks (the demo's mlp model, S=4) under
# mpirun, and the whole model as one stage on one rank (GPipe S=1: a job's
# own extra work, without the other ranks sharing its cores), each trained STEPS steps (default 40) without and with
# --deterministic, ROUNDS times (default 5), the modes alternating. Per
# mode: the fastest step of all rounds and the fastest round's median step
# (steps after the first two; on a machine that other work shares, the
# fastest step is the one least disturbed, and "x" compares those), the
# largest per-rank memory ppvm allocated at start-up and, of it, the
# deterministic mode's per-microbatch gradients, and the largest
# |weight - reference| at the end against `ppvm --reference` run the same
# way (0 means bit-identical).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${STEPS:-40}
rounds=${ROUNDS:-5}
mpirun="mpirun --oversubscribe --allow-run-as-root --bind-to none"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
. "$root/tests/bench/blas_env.sh"
echo "ppvm --deterministic: the demo's mlp, $steps steps, best of $rounds"
printf '%-15s %-14s %9s %7s %11s %14s %14s %12s\n' schedule mode "min ms" "x" \
  "median ms" "bytes/rank" "of which det." "max|w-ref|"
# One run: its median and fastest step time (after the first two steps)
# into $ms and $mn, its largest memory line entry into $mem and
# deterministic note entry into $det.
run() {
  rm -rf "$out/w"
  # shellcheck disable=SC2086 # $1 is a list of flags
  $mpirun -np "$np" "$root/bin/ppvm" $1 "$out/plan" --steps "$steps" --save "$out/w" > "$out/run.txt"
  read -r ms mn < <(awk '/^step/ { for (i = 1; i <= NF; i++) if ($i == "time") print $(i + 1) }' \
         "$out/run.txt" | tail -n +3 | sort -g |
         awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)], a[1] }')
  mem=$(awk '/^memory allocated/ { for (i = 7; i <= NF; i++) if ($i + 0 > m) m = $i + 0 }
             END { print m }' "$out/run.txt")
  det=$(awk '/^deterministic:/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/ && $i + 0 > m) m = $i + 0 }
             END { print m + 0 }' "$out/run.txt")
}
# The largest |weight - reference| of the last run, the reference run with $1.
drift() {
  rm -rf "$out/ref"
  # shellcheck disable=SC2086
  "$root/bin/ppvm" --reference $1 "$out/plan" --steps "$steps" --save "$out/ref" --quiet
  "$root/bin/ppvm" --compare "$out/w" "$out/ref" --atol 0 --rtol 0 |
    awk '{ for (i = 1; i < NF; i++) if ($i == "|diff|") { d = $(i + 1) + 0; if (d > m) m = d } }
         END { printf "%.3g", m }' || true
}
for case in "ddp S=4 B=4|4|ddp.pp|-D S=4 -D B=4" "fsdp S=4 B=4|4|fsdp.pp|-D S=4 -D B=4" \
            "lpp S=4 B=8|4|lpp.pp|-D S=4 -D B=8 -D G=2 -D R=2" \
            "1f1b S=4 B=8|4|1f1b.pp|-D S=4 -D B=8" "1 rank S=1 B=8|1|gpipe.pp|-D S=1 -D B=8"; do
  IFS='|' read -r name np file defs <<< "$case"
  # shellcheck disable=SC2086 # defs is a list of flags
  "$root/bin/ppc" "$root/schedules/$file" $defs -o "$out/plan" -q --no-pictures
  # the two modes alternate, ROUNDS times; each keeps its fastest step and
  # median, those least disturbed by whatever else the machine runs
  best0=; best1=; min0=; min1=
  for round in $(seq "$rounds"); do
    run "--backend cpu"
    best0=$(awk -v a="$ms" -v b="${best0:-$ms}" 'BEGIN { print (a < b ? a : b) }')
    min0=$(awk -v a="$mn" -v b="${min0:-$mn}" 'BEGIN { print (a < b ? a : b) }')
    [ "$round" = 1 ] && { mem0=$mem; diff0=$(drift ""); }
    run "--deterministic"
    best1=$(awk -v a="$ms" -v b="${best1:-$ms}" 'BEGIN { print (a < b ? a : b) }')
    min1=$(awk -v a="$mn" -v b="${min1:-$mn}" 'BEGIN { print (a < b ? a : b) }')
    [ "$round" = 1 ] && { mem1=$mem; det1=$det; diff1=$(drift "--deterministic"); }
  done
  awk -v f="$name" -v a="$best0" -v b="$best1" -v x="$min0" -v y="$min1" -v m0="$mem0" \
      -v m1="$mem1" -v det="$det1" -v d0="$diff0" -v d1="$diff1" \
    'BEGIN { printf "%-15s %-14s %9.3f %7.2f %11.3f %14d %14d %12s\n", f, "default", x, 1, a, m0,
                    0, d0
             printf "%-15s %-14s %9.3f %7.2f %11.3f %14d %14d %12s\n", f, "deterministic", y,
                    y / x, b, m1, det, d1 }'
done
