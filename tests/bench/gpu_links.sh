#!/usr/bin/env bash
# gpu_links.sh OUTDIR - what `ppvm --profile` measures of the links on this
# GPU, for a GPU window (gpu_check.sh runs it; binaries built beforehand):
# 4 ranks sharing the GPU over --transport mpi run a 1f1b-offload plan with
# tensor = 2, so one profile holds the tensor group's all-reduce
# ("tensor_latency", "tensor_bandwidth"; issue 27), offload's pinned
# device<->host copies ("host_bandwidth"; issue 26) and the link between
# stages ("latency", "bandwidth"). Writes OUTDIR/links.json, links.txt (the
# run) and links.md (the figures); exit 0 when the run and every figure are
# there. PPVM names another ppvm (bin/ppvm-standin checks the script on the
# host stand-ins, which are not a GPU: their figures are the host's).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: tests/bench/gpu_links.sh OUTDIR}
mkdir -p "$out" || exit 2
ppvm=${PPVM:-$root/bin/ppvm}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
"$root/bin/ppc" "$root/schedules/1f1b-offload.pp" -D S=2 -D B=4 -D K=2 --tensor 2 \
  -o "$out/links_plan" -q --no-pictures || exit 1
timeout -k 5 "${LINKS_TIMEOUT:-120}" mpirun -np 4 --oversubscribe --allow-run-as-root --bind-to none \
  -x OPENBLAS_NUM_THREADS -x LD_LIBRARY_PATH $(env | sed -n 's/^\(PP_STANDIN_[A-Z_]*\)=.*/-x \1/p') \
  "$ppvm" "$out/links_plan" --backend cuda --transport mpi --steps 6 --quiet \
  --profile "$out/links.json" > "$out/links.txt" 2>&1 < /dev/null
s=$?
if [ $s -ne 0 ]; then
  echo "gpu_links.sh: ppvm --profile exited $s (the run: $out/links.txt)"
  tail -n 5 "$out/links.txt"
  exit 1
fi
python3 - "$out/links.json" "$out/links.md" <<'PY'
import json, sys
costs = json.load(open(sys.argv[1]))
keys = ["latency", "bandwidth", "tensor_latency", "tensor_bandwidth", "host_bandwidth"]
missing = [k for k in keys if not costs.get(k, 0) > 0]
rows = ["| figure | value |", "|---|---|"]
for k in keys:
    v = costs.get(k)
    unit = "s" if k.endswith("latency") else "bytes/s"
    rows.append("| %s | %s |" % (k, "%.3g %s" % (v, unit) if v else "missing"))
open(sys.argv[2], "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
if missing:
    sys.exit("gpu_links.sh: the profile has no positive " + ", ".join(missing))
PY
