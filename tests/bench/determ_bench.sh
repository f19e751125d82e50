#!/usr/bin/env bash
# determ_bench.sh - what ppvm --deterministic costs (part of `make bench`):
# DDP, FSDP, LPP and 1F1B on 4 ranks (the demo's mlp model, S=4) under
# mpirun, each trained STEPS steps (default 40) without and with
# --deterministic. Per run: the median step time (steps after the first
# two), the largest per-rank memory ppvm allocated at start-up and, of it,
# the deterministic mode's per-microbatch gradients, and the largest
# |weight - reference| at the end against `ppvm --reference` run the same
# way (0 means bit-identical).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${STEPS:-40}
mpirun="mpirun --oversubscribe --allow-run-as-root --bind-to none"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OPENBLAS_NUM_THREADS=1
echo "ppvm --deterministic: 4 ranks, the demo's mlp, S=4, $steps steps"
printf '%-14s %-14s %10s %9s %14s %14s %12s\n' schedule mode "step ms" "x time" \
  "bytes/rank" "of which det." "max|w-ref|"
for case in "ddp B=4|ddp.pp|-D S=4 -D B=4" "fsdp B=4|fsdp.pp|-D S=4 -D B=4" \
            "lpp B=8|lpp.pp|-D S=4 -D B=8 -D G=2 -D R=2" "1f1b B=8|1f1b.pp|-D S=4 -D B=8"; do
  IFS='|' read -r name file defs <<< "$case"
  # shellcheck disable=SC2086 # defs is a list of flags
  "$root/bin/ppc" "$root/schedules/$file" $defs -o "$out/plan" -q --no-pictures
  base=
  for mode in default deterministic; do
    flags=--backend\ cpu
    [ "$mode" = deterministic ] && flags=--deterministic
    rm -rf "$out/w" "$out/ref"
    # shellcheck disable=SC2086 # flags is a list of flags
    $mpirun -np 4 "$root/bin/ppvm" $flags "$out/plan" --steps "$steps" --save "$out/w" \
      > "$out/run.txt"
    # shellcheck disable=SC2086
    "$root/bin/ppvm" --reference ${flags#--backend cpu} "$out/plan" --steps "$steps" \
      --save "$out/ref" --quiet
    diff=$("$root/bin/ppvm" --compare "$out/w" "$out/ref" --atol 0 --rtol 0 |
           awk '{ for (i = 1; i < NF; i++) if ($i == "|diff|") { d = $(i + 1) + 0; if (d > m) m = d } }
                END { printf "%.3g", m }' || true)
    ms=$(awk '/^step/ { for (i = 1; i <= NF; i++) if ($i == "time") print $(i + 1) }' \
           "$out/run.txt" | tail -n +3 | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
    mem=$(awk '/^memory allocated/ { for (i = 7; i <= NF; i++) if ($i + 0 > m) m = $i + 0 }
               END { print m }' "$out/run.txt")
    det=$(awk '/^deterministic:/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/ && $i + 0 > m) m = $i + 0 }
               END { print m + 0 }' "$out/run.txt")
    [ -z "$base" ] && base=$ms
    awk -v f="$name" -v mode="$mode" -v ms="$ms" -v base="$base" -v mem="$mem" -v det="$det" \
        -v d="$diff" 'BEGIN { printf "%-14s %-14s %10.3f %9.2f %14d %14d %12s\n", f, mode, ms,
                              ms / base, mem, det, d }'
  done
done
