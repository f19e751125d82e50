#!/usr/bin/env bash
# gpu_bench.sh - the GPU benchmark (make gpu-bench): trains the demo model at
# a width that fills a GPU (tests/bench/gpu_wide.pp: hidden 4096, inner
# 16384, 4 blocks, 4 x 256 samples per step) with ppvm --backend cuda, and in
# the same run PyTorch eager training the same model on the same GPU
# (torch_bench.py) and cuBLAS's GEMM rate at the model's shapes
# (gemm_bench), each in fp32 and in bf16 (ppc --precision bf16; PyTorch
# autocast; bf16 GemmEx). Prints one table: samples/s, TFLOP/s, and ppvm's
# ratios to both, per precision; ppvm runs twice, with the fused cuBLASLt
# epilogues (the default) and with --epilogues off, so the table says
# whether the fusions pay. Targets: at least PyTorch's throughput, at least 70% of the GEMM rate.
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

flops=$(awk -v b="$batch" -v D="$D" -v F="$ffn" -v n="$total_blocks" -v m="$B" \
        'BEGIN { printf "%.0f", m * 3 * (n * 4.0 * b * D * F + 2.0 * b * 256 * D) }')
# One row per precision for each of the three runs, in one table.
for prec in fp32 bf16; do
  "$root/bin/ppc" "$root/tests/bench/gpu_wide.pp" -o "$out/plan-$prec" -q --no-pictures \
    --precision "$prec"
  # with the fused cuBLASLt epilogues (the default) and without, to see whether they pay
  for epi in on off; do
    "$root/bin/ppvm" --backend cuda "$out/plan-$prec" --steps "$steps" --lr 0.01 \
      --epilogues "$epi" > "$out/ppvm-$prec-$epi.txt"
    # the median step time after two warm-up steps
    awk '/^step/ { for (i = 1; i <= NF; i++) if ($i == "time") print $(i + 1) }' \
      "$out/ppvm-$prec-$epi.txt" | tail -n +3 | sort -g |
      awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }' > "$out/pp-$prec-$epi.ms"
  done
  python3 "$root/tests/bench/torch_bench.py" --context "$context" --embed "$embed" \
    --ffn "$ffn" --blocks "$total_blocks" --batch "$batch" --microbatches "$B" --steps "$steps" \
    --precision "$prec" > "$out/torch-$prec.json"
  "$root/bin/gemm_bench" "$D" "$ffn" "$batch" "$total_blocks" "$B" "$prec" > "$out/gemm-$prec.txt"
done
python3 - "$out" "$flops" "$B" "$batch" <<'PY'
import json, re, sys
out, flops, B, batch = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = []
for prec in ("fp32", "bf16"):
    pp_ms = float(open(f"{out}/pp-{prec}-on.ms").read())
    off_ms = float(open(f"{out}/pp-{prec}-off.ms").read())
    t = json.load(open(f"{out}/torch-{prec}.json"))
    gemm = float(re.search(r": ([0-9.]+) TFLOP/s$", open(f"{out}/gemm-{prec}.txt").read(), re.M)[1])
    rows.append((prec, B * batch / (pp_ms / 1e3), pp_ms, flops / (pp_ms / 1e3) / 1e12, t, gemm,
                 off_ms))
print(f"GPU: {rows[0][4]['gpu']}   PyTorch {rows[0][4]['torch']}   model: tests/bench/gpu_wide.pp")
print(f"{'':34s} {'samples/s':>10s} {'step ms':>9s} {'TFLOP/s':>8s}")
for prec, sps, ms, tf, t, gemm, off_ms in rows:
    print(f"{'ppvm --backend cuda, ' + prec:34s} {sps:10.0f} {ms:9.2f} {tf:8.2f}")
    print(f"{'ppvm --epilogues off, ' + prec:34s} {B * batch / (off_ms / 1e3):10.0f} "
          f"{off_ms:9.2f} {flops / (off_ms / 1e3) / 1e12:8.2f}")
    print(f"{'PyTorch eager, ' + prec:34s} {t['samples_per_s']:10.0f} {t['step_ms']:9.2f} {t['tflops']:8.2f}")
    print(f"{'cuBLAS GEMMs at these shapes, ' + prec:34s} {'':>10s} {'':>9s} {gemm:8.2f}")
for prec, sps, ms, tf, t, gemm, off_ms in rows:
    print(f"{prec}: ppvm / PyTorch {sps / t['samples_per_s']:.2f}x (target >= 1)   "
          f"ppvm / cuBLAS GEMM rate {100 * tf / gemm:.0f}% (target >= 70%)   "
          f"epilogues on / off {off_ms / ms:.2f}x")
PY
for prec in fp32 bf16; do echo "(gemm shapes, $prec:)"; cat "$out/gemm-$prec.txt"; done
