#!/usr/bin/env bash
# interp_bench.sh - the interpreter's own cost per instruction (issue 18
# part 3; `make bench-interp`, part of `make bench`): library schedules with
# many microbatches (B, default 256) run under `ppvm --no-compute` (no
# kernel body, every message 4 bytes, each instruction timed: vm/README.md,
# "Benchmark mode"), on one rank and under mpirun on 2 and 4 ranks, STEPS
# steps each (default 100; the first is a warm-up and not counted).
#
# Per run it prints, from ppvm's table, ns per instruction (the mean over
# every instruction of every rank): all of it, the part spent blocked in
# calls that wait for a peer or the GPU (a receive waiting for its send, a
# collective for its slowest member, a send's slot for its earlier send;
# on ranks that outnumber cores, time slices given to other ranks too),
# and the rest, the interpreter's own cost ("own"), overall and per opcode
# family; and the step's time over the busiest rank's instructions. Then
# it says whether every run's own cost is under TARGET_NS (1000). On one
# rank nothing waits: own is all.
#
#   BACKEND=cpu|cuda  the backend (cpu); cuda prints the cuda backend's
#                     host-side cost, on a GPU or on the stand-ins
#   TRANSPORT=nccl|mpi  with BACKEND=cuda (ppvm's default when unset)
#   PPVM=path         the ppvm to run (bin/ppvm; bin/ppvm-standin with
#                     PP_STANDIN_GPUS=4 runs the cuda backend without a GPU)
#   RANKS="2 4"       the mpirun sizes; B, STEPS, TARGET_NS as above
#   VERBOSE=1         print every run's whole table too
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
backend=${BACKEND:-cpu}
ppvm=${PPVM:-$root/bin/ppvm}
B=${B:-256}
steps=${STEPS:-100}
target=${TARGET_NS:-1000}
ranks=${RANKS:-2 4}
mpirun="mpirun --oversubscribe --allow-run-as-root --bind-to none"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$root/tests/bench/blas_env.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
flags="--no-compute --quiet --steps $steps --backend $backend"
[ -n "${TRANSPORT:-}" ] && flags="$flags --transport $TRANSPORT"

echo "interpreter overhead: ppvm --no-compute, backend $backend${TRANSPORT:+ ($TRANSPORT)}," \
     "B=$B, $steps steps (the first not counted), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ns per instruction, the mean over all ranks' instructions: all, of it waiting for a peer" \
     "or the GPU, the rest (own) overall and per family; step/instr: a step's time over the" \
     "busiest rank's instructions"
families="compute optimizer transfer weights collective bookkeeping"
printf '%-24s %5s %10s %8s %8s %8s' schedule ranks instr/step all waiting own
for f in $families; do printf ' %11s' "$f"; done
printf ' %10s\n' step/instr

worst=0
worst_name=
fails=0
# One case: name, ranks, library file, -D flags.
bench() {
  local name=$1 np=$2 file=$3 defs=$4
  rm -rf "$out/plan"
  # shellcheck disable=SC2086 # defs is a list of flags
  if ! "$root/bin/ppc" "$root/schedules/$file" $defs -o "$out/plan" -q --no-pictures \
       > "$out/ppc.txt" 2>&1; then
    echo "$name: ppc failed:"; cat "$out/ppc.txt"; fails=$((fails + 1)); return
  fi
  local run
  if [ "$np" = 1 ]; then
    run="$ppvm $flags $out/plan/rank0.bin"
  else
    run="$mpirun -np $np $ppvm $flags $out/plan"
  fi
  # shellcheck disable=SC2086 # run is a command line
  if ! $run > "$out/run.txt" 2>&1; then
    echo "$name on $np ranks: ppvm failed:"; tail -5 "$out/run.txt"; fails=$((fails + 1)); return
  fi
  [ -n "${VERBOSE:-}" ] && cat "$out/run.txt"
  # the family rows ("FAMILY * per-step ns waiting slowest"), the "all" row,
  # the plan line
  awk -v name="$name" -v np="$np" -v fams="$families" -v own_file="$out/all.txt" '
    $2 == "*" { n[$1] = $3; ns[$1] = $4; w[$1] = $5 }
    /^plan:/ { for (i = 1; i <= NF; i++) if ($i == "per" && $(i + 1) == "instruction") step = $(i - 2) }
    END {
      printf "%-24s %5d %10d %8.1f %8.1f %8.1f", name, np, n["all"], ns["all"], w["all"],
             ns["all"] - w["all"]
      k = split(fams, f, " ")
      for (i = 1; i <= k; i++)
        if (f[i] in ns) printf " %11.1f", ns[f[i]] - w[f[i]]; else printf " %11s", "-"
      printf " %10.1f\n", step
      print ns["all"] - w["all"] > own_file
    }' "$out/run.txt"
  local all
  all=$(cat "$out/all.txt")
  if awk -v a="$all" -v w="$worst" 'BEGIN { exit !(a > w) }'; then
    worst=$all
    worst_name="$name on $np rank(s)"
  fi
}

half() { echo $(( $1 / 2 > 0 ? $1 / 2 : 1 )); }
bench "gpipe S=1" 1 gpipe.pp "-D S=1 -D B=$B"
bench "depth-first W=1 S=4" 1 depth-first.pp "-D W=1 -D S=4 -D B=$B"
for np in $ranks; do
  bench "1f1b S=$np" "$np" 1f1b.pp "-D S=$np -D B=$B"
  bench "zb-h1 S=$np" "$np" zb-h1.pp "-D S=$np -D B=$B"
  bench "interleaved-1f1b V=2" "$np" interleaved-1f1b.pp "-D W=$np -D V=2 -D B=$B"
  bench "pp-dp S=$(half "$np") D=2" "$np" pp-dp.pp "-D S=$(half "$np") -D D=2 -D B=$B"
  bench "pp-fsdp P=$(half "$np") D=2" "$np" pp-fsdp.pp "-D P=$(half "$np") -D D=2 -D B=$B"
done
if [ "$fails" -gt 0 ]; then
  echo "interp_bench: $fails run(s) failed"
  exit 1
fi
verdict=$(awk -v w="$worst" -v t="$target" 'BEGIN { print (w < t ? "met" : "NOT met") }')
echo "target: the interpreter's own cost < $target ns per instruction (the mean over all" \
     "ranks' instructions, waits excluded): $verdict; the highest was $worst ns ($worst_name)"
