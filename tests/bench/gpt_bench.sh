#!/usr/bin/env bash
# gpt_bench.sh - make gpu-bench-gpt: GPT-2 124M (tests/bench/gpt2_124m.pp:
# 12 layers, width 768, 12 heads, context 1024, vocabulary 50304) in bf16
# with AdamW, trained by ppvm --backend cuda on one rank and as 1F1B on 2 and
# 4 ranks sharing the GPU over the mpi transport, and in the same run by a
# nanoGPT-style PyTorch model (tests/bench/gpt_torch.py), eager and under
# torch.compile, from pp's initial weights on the same microbatches of the
# same token stream (tests/bench/gpt_data.py makes it: the GPU machine has no
# network). Writes to OUTDIR (default build/gpu-bench-gpt): gpt_bench.md (the
# table: tokens/s, step time, MFU against the card's dense bf16 peak, peak
# GPU memory, the first steps' losses against pp's one-rank run), losses.csv,
# and every run's log. The table's "CUDA graph" column is each ppvm run's
# --graph choice (ppvm's "graph:" line): the one-rank run replays its steps
# as CUDA graphs; the mpi transport's runs replay it piecewise, between transfers.
# Without a GPU it says "skipped: no GPU" and exits 0.
#
# Environment: STEPS (20), B (microbatches per step, 8; batch 8 each), RANKS
# ("1 2 4"), TORCH_PYTHON (python3), TORCH_RUNS ("eager compile"),
# RUN_TIMEOUT (seconds per run, 240; twice that for torch.compile), LOSS_RTOL (2e-2: bf16 with activations
# rounded in other places), PEAK_TFLOPS (for a card not known below),
# SCHEDULE (another GPT schedule with S and B parameters, e.g. a small model
# to try the script) and PPVM (bin/ppvm; bin/ppvm-standin with
# PP_STANDIN_GPUS=4 runs it on the host stand-ins: a check of the script,
# not a GPU figure).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build/gpu-bench-gpt}
sched=${SCHEDULE:-$root/tests/bench/gpt2_124m.pp} ppvm=${PPVM:-$root/bin/ppvm}
steps=${STEPS:-20} B=${B:-8} ranks=${RANKS:-"1 2 4"} py=${TORCH_PYTHON:-python3}
torch_runs=${TORCH_RUNS:-"eager compile"} tmo=${RUN_TIMEOUT:-240}
train=(--steps "$steps" --lr 6e-4 --weight-decay 0.1 --adam-beta2 0.95 --seed 1)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$root/tests/bench/blas_env.sh"

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: no GPU"
  exit 0
fi
mkdir -p "$out" || exit 2
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
# dense bf16 peaks (NVIDIA's data sheets, without sparsity)
case "$gpu" in
  *H100*PCIe*) peak=756 ;;
  *H100* | *H200* | *GH200*) peak=989 ;;
  *A100*) peak=312 ;;
  *) peak=${PEAK_TFLOPS:-0} ;;
esac
echo "gpu-bench-gpt: $gpu, dense bf16 peak ${peak} TFLOP/s, $steps steps, B=$B, output in $out"

# The GPU's memory in use (MiB), sampled every 100 ms while a run lasts.
mem_now() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -n 1; }
poll_start() {
  base=$(mem_now)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$1.mem" &
  poll=$!
}
poll_stop() {
  kill "$poll" 2>/dev/null
  wait "$poll" 2>/dev/null
  sort -n "$out/$1.mem" | tail -n 1 | awk -v b="$base" '{ print $1 - b }' > "$out/$1.peak_mib"
}
# run NAME CMD...: its output in NAME.log, its exit status in NAME.rc
run() {
  local name=$1
  shift
  poll_start "$name"
  timeout "$tmo" "$@" > "$out/$name.log" 2>&1
  echo $? > "$out/$name.rc"
  poll_stop "$name"
  echo "  $name: exit $(cat "$out/$name.rc"), $(cat "$out/$name.peak_mib") MiB"
}

for S in $ranks; do
  "$root/bin/ppc" "$sched" -D "S=$S" -D "B=$B" -o "$out/plan-s$S" -q \
    --no-pictures || exit 2
done
"$root/bin/ppc" "$sched" -D S=1 -D "B=$B" -o "$out/plan-init" -q \
  --no-pictures || exit 2
# the model's sizes, for PyTorch, from the one-rank plan's listing
hdr=$(sed -n 's/^; model: gpt, //p' "$out/plan-init/rank0.txt")
size() { echo "$hdr" | sed -n "s/.*\b$1 \([0-9]*\).*/\1/p"; }
layers=$(sed -n 's/^; layers per stage: s0 \([0-9]*\)$/\1/p' "$out/plan-init/rank0.txt")
dims=(--vocab "$(size vocab)" --context "$(size context)" --embed "$(size embed)"
  --heads "$(size heads)" --ffn "$(size ffn)" --layers "$layers" --batch "$(size batch)")
# GPT-2's 50257 tokens (the vocabulary's padding is never a token)
V=$(size vocab)
python3 "$root/tests/bench/gpt_data.py" "$out/tokens.bin" --tokens 4194304 \
  --vocab $((V < 50257 ? V : 50257)) || exit 2
rm -rf "$out/init"
"$ppvm" --backend cuda "$out/plan-init" --steps 0 --save "$out/init" \
  --data "$out/tokens.bin" > "$out/init.log" 2>&1 || { cat "$out/init.log"; exit 2; }

for S in $ranks; do
  if [ "$S" = 1 ]; then
    run "pp-s1" "$ppvm" --backend cuda "$out/plan-s1" "${train[@]}" \
      --data "$out/tokens.bin" --loss-digits 6
  else
    run "pp-s$S" mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$S" \
      "$ppvm" --backend cuda --transport mpi "$out/plan-s$S" "${train[@]}" \
      --data "$out/tokens.bin" --loss-digits 6
  fi
done
for mode in $torch_runs; do
  flag=
  [ "$mode" = compile ] && flag=--compile
  # torch.compile compiles in its first step: twice the time limit
  tmo=${RUN_TIMEOUT:-240}
  [ "$mode" = compile ] && tmo=$((2 * tmo))
  run "torch-$mode" "$py" "$root/tests/bench/gpt_torch.py" --weights "$out/init" \
    --data "$out/tokens.bin" --B "$B" --steps "$steps" "${dims[@]}" $flag
done

python3 "$root/tests/bench/gpt_table.py" "$out" --gpu "$gpu" --peak "$peak" --B "$B" \
  --ranks "$ranks" --torch-runs "$torch_runs" --loss-rtol "${LOSS_RTOL:-2e-2}"
