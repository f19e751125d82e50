#!/usr/bin/env bash
# gpu_bench.sh - the GPU benchmark (make gpu-bench): trains the demo model at
# a width that fills a GPU (tests/bench/gpu_wide.pp: hidden 4096, inner
# 16384, 4 blocks, 4 x 256 samples per step) with ppvm --backend cuda, and in
# the same run PyTorch eager training the same model on the same GPU
# (torch_bench.py) and cuBLAS's SGEMM rate at the model's shapes
# (gemm_bench). Prints one table: samples/s, TFLOP/s, and ppvm's ratios to
# both. Targets: at least PyTorch's throughput, at least 70% of the GEMM rate.
# Without a GPU it says "skipped: no GPU" and exits 0.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${STEPS:-20}
if ! "$root/bin/gemm_bench" 1 1 1 1 1 >/dev/null 2>&1 || "$root/bin/gemm_bench" 1 1 1 1 1 | grep -q skipped; then
  echo "skipped: no GPU"
  exit 0
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The model's shape, read from the schedule so the three runs agree.
field() { sed -n "s/^ *$1 *= *\([0-9]*\).*/\1/p" "$root/tests/bench/gpu_wide.pp"; }
context=$(field context); embed=$(field embed); ffn=$(field ffn); blocks=$(field blocks)
batch=$(field batch); S=$(sed -n 's/^param S = //p' "$root/tests/bench/gpu_wide.pp")
B=$(sed -n 's/^param B = //p' "$root/tests/bench/gpu_wide.pp")
D=$((context * embed)); total_blocks=$((S * blocks))

"$root/bin/ppc" "$root/tests/bench/gpu_wide.pp" -o "$out/plan" -q --no-pictures
"$root/bin/ppvm" --backend cuda "$out/plan" --steps "$steps" --lr 0.01 > "$out/ppvm.txt"
# the median step time after two warm-up steps
pp_ms=$(awk '/^step/ { for (i = 1; i <= NF; i++) if ($i == "time") print $(i + 1) }' "$out/ppvm.txt" |
        tail -n +3 | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
flops=$(awk -v b="$batch" -v D="$D" -v F="$ffn" -v n="$total_blocks" -v m="$B" \
        'BEGIN { printf "%.0f", m * 3 * (n * 4.0 * b * D * F + 2.0 * b * 256 * D) }')
torch_json=$(python3 "$root/tests/bench/torch_bench.py" --context "$context" --embed "$embed" \
             --ffn "$ffn" --blocks "$total_blocks" --batch "$batch" --microbatches "$B" --steps "$steps")
"$root/bin/gemm_bench" "$D" "$ffn" "$batch" "$total_blocks" "$B" > "$out/gemm.txt"
gemm_tflops=$(sed -n 's/.*: \([0-9.]*\) TFLOP\/s$/\1/p' "$out/gemm.txt")
python3 - "$pp_ms" "$flops" "$B" "$batch" "$gemm_tflops" "$torch_json" <<'PY'
import json, sys
pp_ms, flops, B, batch, gemm = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
t = json.loads(sys.argv[6])
pp_sps, pp_tf = B * batch / (pp_ms / 1e3), flops / (pp_ms / 1e3) / 1e12
print(f"GPU: {t['gpu']}   PyTorch {t['torch']}   model: tests/bench/gpu_wide.pp")
print(f"{'':28s} {'samples/s':>10s} {'step ms':>9s} {'TFLOP/s':>8s}")
print(f"{'ppvm --backend cuda':28s} {pp_sps:10.0f} {pp_ms:9.2f} {pp_tf:8.2f}")
print(f"{'PyTorch eager':28s} {t['samples_per_s']:10.0f} {t['step_ms']:9.2f} {t['tflops']:8.2f}")
print(f"{'cuBLAS SGEMM at these shapes':28s} {'':>10s} {'':>9s} {gemm:8.2f}")
print(f"ppvm / PyTorch: {pp_sps / t['samples_per_s']:.2f}x (target >= 1)   "
      f"ppvm / cuBLAS GEMM rate: {100 * pp_tf / gemm:.0f}% (target >= 70%)")
PY
echo "(gemm shapes:)"; cat "$out/gemm.txt"
