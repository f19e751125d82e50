#!/usr/bin/env bash
# gpu_check.sh OUTDIR - the one script for a short GPU window (issue 30):
# with the binaries built beforehand (make all bin/check_pp bin/attn_bench),
# it records the card, runs the GPU suites (cuda_kernels, attention_fused,
# model_cuda, gpu_e2e, gpu_graph: check_pp's GPU suites, as make test runs them on a
# GPU), the fused attention's timing against the blocked path and its
# results against PyTorch's SDPA (bin/attn_bench, attn_sdpa_check.py),
# make gpu-bench-gpt's script (tests/bench/gpt_bench.sh), then the links
# ppvm --profile measures (gpu_links.sh: tensor all-reduce over mpi, pinned
# host copies; LINKS_TIMEOUT 60 s) into OUTDIR. Every
# part has a time limit so the whole stays under 8 minutes (SUITES_TIMEOUT
# 230 s: gpu_e2e took 133 s on an H100, gpu_graph is new; then the benchmark's five runs
# RUN_TIMEOUT each, 50 s by default here, torch.compile's twice that);
# a part that fails or times out is said in OUTDIR/summary.txt and the next
# part still runs. Exit 0 when every part passed, 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: tests/bench/gpu_check.sh OUTDIR}
mkdir -p "$out" || exit 2
cd "$root" || exit 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
for b in bin/ppc bin/ppvm bin/check_pp bin/attn_bench; do
  [ -x "$b" ] || { echo "gpu_check.sh: $b is missing: run make all bin/check_pp bin/attn_bench first" >&2; exit 2; }
done
t0=$(date +%s)
rc=0
summary() { echo "$*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"
summary "gpu_check.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || summary "nvidia-smi failed: no GPU?"
summary "card: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"

# 1. the GPU suites (the multi-GPU NCCL cases skip on one GPU)
timeout "${SUITES_TIMEOUT:-230}" ./bin/check_pp cuda_kernels attention_fused model_cuda gpu_e2e gpu_graph \
  > "$out/suites.txt" 2>&1
s=$?
[ $s -eq 0 ] || rc=1
summary "GPU suites: exit $s ($(grep -E '^(100|[0-9]+)%: Checks' "$out/suites.txt" | tail -n 1)), $(( $(date +%s) - t0 )) s"
tail -n 5 "$out/suites.txt"

# 2. the fused attention: speed against the blocked path, results against SDPA
mkdir -p "$out/attn"
timeout 60 ./bin/attn_bench --dump "$out/attn" > "$out/attention.txt" 2>&1
s=$?
[ $s -eq 0 ] || rc=1
timeout 60 "${TORCH_PYTHON:-python3}" tests/bench/attn_sdpa_check.py "$out/attn" \
  >> "$out/attention.txt" 2>&1
s2=$?
[ $s2 -eq 0 ] || rc=1
summary "attention: attn_bench exit $s, SDPA check exit $s2"
cat "$out/attention.txt"

# 3. the GPT benchmark
t1=$(date +%s)
RUN_TIMEOUT=${RUN_TIMEOUT:-50} bash tests/bench/gpt_bench.sh "$out" > "$out/gpt_bench.txt" 2>&1
s=$?
[ $s -eq 0 ] || rc=1
grep -q ' | [1-9][0-9]* | ' "$out/gpt_bench.md" 2>/dev/null && rc=1 # a run's exit status
summary "gpu-bench-gpt: exit $s, $(( $(date +%s) - t1 )) s"
cat "$out/gpt_bench.txt"
# whether each ppvm run replayed its steps as CUDA graphs (ppvm --graph auto), and if not why
for log in "$out"/pp-s*.log; do
  [ -f "$log" ] && summary "$(basename "$log" .log): $(grep -m1 '^graph: ' "$log" || echo 'graph: (no line)')"
done
# 4. the links as ppvm --profile measures them here (gpu_links.sh: the tensor
# group's all-reduce over mpi between ranks sharing the GPU, offload's pinned
# copies, the stage link)
t2=$(date +%s)
LINKS_TIMEOUT=${LINKS_TIMEOUT:-60} bash tests/bench/gpu_links.sh "$out" > "$out/links_summary.txt" 2>&1
s=$?
[ $s -eq 0 ] || rc=1
summary "links (ppvm --profile, 4 ranks over mpi, tensor = 2, offload): exit $s, $(( $(date +%s) - t2 )) s"
cat "$out/links_summary.txt"
summary "total $(( $(date +%s) - t0 )) s; exit $rc"
exit $rc
