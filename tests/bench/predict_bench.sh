#!/usr/bin/env bash
# predict_bench.sh - how well ppc predicts a step from measured costs (part
# of `make bench`). For each schedule: train it with ppvm --profile, compile
# it again with ppc --costs on what the run measured (and where that orders
# the plan otherwise, train that plan too: it is the one predicted), and
# print the predicted step (the report's "step": the makespan, then gradient returns,
# all-reduces and optimizer steps) beside the median measured step time
# (steps after the first SKIP), with the predicted and measured idle share
# of the step (tests/bench/predict_row.py says what each column is).
#
# Tables: every library schedule on 2 ranks (ranks <= cores on the 2-core
# development machine; target 0.9-1.1); the same 4-rank cases as before
# (ranks > cores there: the profile's "cores" and "wake" model them, a
# 2-rank donor's costs with "cores" do not); step time against B and W. The load average is printed
# before and after each table: the measured steps include whatever else
# the machine runs, so figures taken under load are not the model's error.
# STEPS (default 16) steps per run; SKIP (default 3) left out of the
# median; BACKEND=cuda runs the same on GPUs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${STEPS:-16}
skip=${SKIP:-3}
backend=${BACKEND:-cpu}
mpirun="mpirun --oversubscribe --allow-run-as-root --bind-to none"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
. "$root/tests/bench/blas_env.sh"

load() { echo "(load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores, OpenBLAS core ${OPENBLAS_CORETYPE:-auto})"; }

header() {
  echo
  echo "$1"
  load
  printf '%-34s %5s %9s %9s %9s %6s %9s %6s %7s %7s %7s %6s %6s %9s %6s\n' schedule ranks makespan \
    predicted measured ratio fastest ratio bubble "idle p" "idle m" busy own "${2:-}" "${3:-}"
}

# row FILE DEFS [DONOR]: one schedule, compiled, run, profiled and compiled
# again; with DONOR (a costs file measured on ranks <= cores), compiled a
# third time with the donor's costs and "cores": the machine's cores
row() {
  local file=$1 defs=$2 donor=${3:-} np extra=()
  # shellcheck disable=SC2086 # defs is a list of flags
  "$root/bin/ppc" "$root/schedules/$file" $defs -o "$out/plan" -q --no-pictures
  np=$(ls "$out"/plan/rank*.bin | wc -l)
  $mpirun -np "$np" "$root/bin/ppvm" --backend "$backend" "$out/plan" --steps "$steps" \
    --profile "$out/costs.json" > "$out/run.txt" < /dev/null
  rm -rf "$out/again"
  # shellcheck disable=SC2086
  "$root/bin/ppc" "$root/schedules/$file" $defs -o "$out/again" -q --no-pictures \
    --costs "$out/costs.json"
  # the measured costs may order the plan otherwise (a greedy order, a
  # gradient return's place): the prediction is that plan's, so time it
  # (its own --profile's "measured" record for the idle and busy columns)
  # "own": the step predicted from the timed run's own profile, where that
  # prediction is of the plan that ran (the run's kernel speed, which moves
  # from run to run on a shared machine, out of the comparison)
  local costs=$out/costs.json own=$out/again/report.json
  if [ "$(head -1 "$out/plan/rank0.txt")" != "$(head -1 "$out/again/rank0.txt")" ]; then
    $mpirun -np "$np" "$root/bin/ppvm" --backend "$backend" "$out/again" --steps "$steps" \
      --profile "$out/again.json" > "$out/run.txt" < /dev/null
    costs=$out/again.json
    rm -rf "$out/own"
    # shellcheck disable=SC2086
    "$root/bin/ppc" "$root/schedules/$file" $defs -o "$out/own" -q --no-pictures \
      --costs "$out/again.json"
    own=$out/own/report.json
    if [ "$(head -1 "$out/own/rank0.txt")" != "$(head -1 "$out/again/rank0.txt")" ]; then
      own=- # its own costs order the plan otherwise again: no such prediction
    fi
  fi
  if [ -n "$donor" ]; then
    python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c.pop("measured", None); c["cores"] = int(sys.argv[2])
json.dump(c, open(sys.argv[3], "w"))' "$donor" "$(nproc)" "$out/cores.json"
    rm -rf "$out/cores"
    # shellcheck disable=SC2086
    "$root/bin/ppc" "$root/schedules/$file" $defs -o "$out/cores" -q --no-pictures \
      --costs "$out/cores.json"
    extra=("$out/cores/report.json")
  fi
  python3 "$root/tests/bench/predict_row.py" "${file%.pp} $defs" "$costs" \
    "$out/again" "$out/again/report.json" "$out/run.txt" "$skip" "$own" "${extra[@]}"
  rm -rf "$out/plan"
}

header "every library schedule on 2 ranks (times in ms)"
while IFS='|' read -r file defs; do
  row "$file" "$defs"
done <<'CASES'
1f1b.pp|-D S=2 -D B=8
1f1b-gpt.pp|-D S=2 -D B=4
1f1b-greedy.pp|-D S=2 -D B=8
1f1b-limit.pp|-D S=2 -D B=8
1f1b-overlap.pp|-D S=2 -D B=8
breadth-first.pp|-D W=2 -D S=4 -D B=8
ddp.pp|-D S=2 -D B=2
depth-first.pp|-D W=2 -D S=4 -D B=8
dualpipev.pp|-D W=2 -D B=8
fsdp.pp|-D S=2 -D B=2
fslpp.pp|-D S=2 -D B=8 -D G=1 -D R=2
gpipe.pp|-D S=2 -D B=8
interleaved-1f1b.pp|-D W=2 -D B=8
interleaved-zb.pp|-D W=2 -D B=8
looped-bfs.pp|-D W=2 -D B=8
lpp.pp|-D S=2 -D B=8 -D G=1 -D R=2
pp-dp.pp|-D S=1 -D D=2 -D B=8
pp-fsdp.pp|-D P=1 -D D=2 -D B=4
v-overlap.pp|-D W=2 -D B=8
zb-h1.pp|-D S=2 -D B=8
zb-h2.pp|-D S=2 -D B=8
zb-v.pp|-D W=2 -D B=8
CASES
load

# donor FILE DEFS NAME: the costs of a run on 2 ranks, kept as $out/NAME.json
donor() {
  # shellcheck disable=SC2086
  "$root/bin/ppc" "$root/schedules/$1" $2 -o "$out/plan" -q --no-pictures
  $mpirun -np 2 "$root/bin/ppvm" --backend "$backend" "$out/plan" --steps "$steps" --quiet \
    --profile "$out/$3.json" < /dev/null
  rm -rf "$out/plan"
}

# The same S = 4 stages (every schedule here trains the same model, a block
# per stage) measured on 2 ranks, where each rank has a core: the donors of
# the "cores" columns. interleaved-zb splits its backwards, as zb-h1 does.
donor breadth-first.pp "-D W=2 -D S=4 -D B=8" split0
donor interleaved-zb.pp "-D W=2 -D B=8" split1
donor ddp.pp "-D S=4 -D B=2" ddp
header "4 ranks (more ranks than cores on a 2-core machine); cores: the 2-rank costs with \"cores\": $(nproc)" \
  cores ratio
for case in "gpipe.pp|-D S=4 -D B=8|split0" "1f1b.pp|-D S=4 -D B=8|split0" \
            "zb-h1.pp|-D S=4 -D B=8|split1" "fsdp.pp|-D S=4 -D B=4|ddp" "ddp.pp|-D S=4 -D B=4|ddp"; do
  IFS='|' read -r file defs d <<< "$case"
  row "$file" "$defs" "$out/$d.json"
done
load

header "step time against B (1f1b, 2 ranks)"
for b in 2 4 8 16 32; do row 1f1b.pp "-D S=2 -D B=$b"; done
load

header "step time against W (gpipe, S = W stages, B = 8)"
for w in 1 2 4; do row gpipe.pp "-D S=$w -D B=8"; done
load
echo "(predicted: ppc's step with ppvm --profile's costs; measured: ppvm's median step after"
echo " the first $skip; backend $backend, $steps steps; columns: tests/bench/predict_row.py)"
