#!/usr/bin/env bash
# compile_scale.sh - the whole `ppc` (simulation, lowering, both checkers,
# plans and listings written) on schedules of about a million jobs, one
# shape of each kind: wide B (few stages, many microbatches), deep S (many
# stages, each its own worker: W = S), wide W (many replicas), plus the
# shapes that were quadratic before issue 18 (GPipe B = 65,536; 100,000
# lets; S = W = 4,096). Part of `make bench` (`make bench-compile` alone).
# Prints wall seconds and peak memory (the child's max RSS, from GNU time
# where it is installed) for each, and its ratio to the 2 s target.
# LIMIT=seconds bounds each compile (default 120); CASES=regex picks rows.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ppc="$root/bin/ppc"
limit=${LIMIT:-120}
pick=${CASES:-.}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
gnutime=$(command -v /usr/bin/time || true)

# 100,000 lets, each of s: the checker looks every name up
lets="$out/lets.pp"
{
  printf 'param S = 4\nparam B = 8\nparam W = S\n'
  for ((i = 0; i < 100000; i++)); do printf 'let x%d = s + %d\n' "$i" "$i"; done
  printf 'compute(s,b,d) = (x99999 - 99999) %% W\npriority(s,b,d) = d * B + b\n'
} > "$lets"

printf '%-22s %-22s %9s %7s %9s %9s %8s\n' schedule params jobs W "ppc s" "peak MiB" "vs 2 s"
while IFS='|' read -r shape file defs; do
  [[ -z "$shape" || ! "$shape $file $defs" =~ $pick ]] && continue
  src="$root/schedules/$file"
  [[ "$file" == lets.pp ]] && src="$lets"
  rm -rf "$out/plan"
  start=$(date +%s.%N)
  rc=0
  # shellcheck disable=SC2086 # defs is a list of flags
  if [[ -n "$gnutime" ]]; then
    timeout "$limit" "$gnutime" -f '%M' -o "$out/rss" "$ppc" "$src" $defs -o "$out/plan" -q \
      --no-pictures > "$out/log" 2>&1 || rc=$?
  else
    timeout "$limit" "$ppc" "$src" $defs -o "$out/plan" -q --no-pictures > "$out/log" 2>&1 || rc=$?
  fi
  end=$(date +%s.%N)
  secs=$(echo "$end - $start" | bc -l)
  # jobs: F and B of every (s, b), plus the split backwards' W
  jobs=$(grep -m1 '"split_backwards"' "$out/plan/report.json" 2>/dev/null |
    sed -E 's/.*"S": ([0-9]+), "B": ([0-9]+),.*"split_backwards": ([0-9]+).*/2 * \1 * \2 + \3/' |
    bc 2>/dev/null || echo -)
  workers=$(ls "$out"/plan/rank*.bin 2>/dev/null | wc -l)
  mib=-
  [[ -n "$gnutime" && -s "$out/rss" ]] && mib=$(( $(tail -1 "$out/rss") / 1024 ))
  if [[ $rc -ne 0 ]]; then
    what="exit $rc"
    [[ $rc -eq 124 ]] && what="over ${limit} s"
    printf '%-22s %-22s %9s %7s %9s %9s %8s  (%s: %s)\n' "$file" "${defs//-D /}" "$jobs" \
      "$workers" "$(printf %.2f "$secs")" "$mib" - "$shape" "$what"
    continue
  fi
  printf '%-22s %-22s %9s %7s %9.2f %9s %7.2fx  (%s)\n' "$file" "${defs//-D /}" "$jobs" \
    "$workers" "$secs" "$mib" "$(echo "2 / $secs" | bc -l)" "$shape"
done <<'CASES'
wide B|gpipe.pp|-D S=4 -D B=131072
wide B|1f1b.pp|-D S=8 -D B=65536
was quadratic|gpipe.pp|-D S=4 -D B=65536
1F1B|1f1b.pp|-D S=64 -D B=8192
1F1B|gpipe.pp|-D S=64 -D B=8192
split backward|zb-h1.pp|-D S=32 -D B=10923
split backward|zb-v.pp|-D W=32 -D B=5461
split backward|dualpipev.pp|-D W=32 -D B=8192
interleaved|interleaved-1f1b.pp|-D W=16 -D V=4 -D B=8192
interleaved|interleaved-zb.pp|-D W=16 -D V=4 -D B=5456
looped|lpp.pp|-D S=64 -D B=8192 -D G=8 -D R=8
looped|fslpp.pp|-D S=64 -D B=8192 -D G=8 -D R=8
deep S|1f1b.pp|-D S=1024 -D B=512
deep S|1f1b.pp|-D S=4096 -D B=128
deep S, W = S|1f1b.pp|-D S=16384 -D B=32
wide W|ddp.pp|-D S=128 -D B=4096
wide W|fsdp.pp|-D S=128 -D B=4096
wide W|pp-dp.pp|-D S=8 -D D=512 -D B=65536
many lets|lets.pp|
CASES
