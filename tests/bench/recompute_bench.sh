#!/usr/bin/env bash
# recompute_bench.sh - memory as a schedule decision (issue 26; part of
# `make bench`): a GPT on 4 CPU ranks whose plain 1F1B plan is over a
# memory cap. Side by side:
#   plain      1F1B without the cap (the reference point: fastest, largest)
#   full       1F1B recomputing every stage (Megatron's full recompute,
#              `--recompute 1`), under the cap
#   search     the fastest candidate `ppc --search` finds under the cap, over
#              a library of GPT versions of the pipeline files (1F1B,
#              1F1B with per-stage and bubble-placed recompute, 1F1B with
#              per-stage offload, GPipe), each with the search's recompute
#              and offload variants
#   offload    that search's offload choice under the cap (a row of
#              1f1b-offload.pp or an --offload variant): the best-ranked
#              on the front, else the fastest
# Each is compiled with the costs ppvm --profile measured on the plain run,
# "host_bandwidth" among them (a memory copy's bytes per second at a
# stash's size: the cpu backend's offload is one). Each is trained STEPS steps and printed with its predicted
# step (the report's "step", in ms), the median measured step after SKIP
# steps, their ratio, the device peak (the largest plan memory over ranks:
# what ppvm allocates, exact) and the host bytes (the largest host pool
# over ranks: what ppvm allocates for offloaded stashes, exact; checked
# against ppvm's host line).
# CAP (bytes) defaults to 92% of plain 1F1B's peak. STEPS (default 8),
# SKIP (2), B (microbatches, 8), BATCH (the model's batch, 16).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${STEPS:-8}
skip=${SKIP:-2}
mbs=${B:-8}
batch=${BATCH:-16}
mpirun="mpirun -np 4 --oversubscribe --allow-run-as-root --bind-to none"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
. "$root/tests/bench/blas_env.sh"
ppc="$root/bin/ppc"

model="model gpt {
    vocab   = 256
    context = 64
    embed   = 64
    heads   = 4
    ffn     = 256
    layers  = 2
    batch   = $batch
}
optimizer adamw"

# gpt FILE: schedules/FILE with its model block replaced by the GPT above
mkdir -p "$out/lib"
gpt() {
  python3 - "$root/schedules/$1" "$model" > "$out/lib/$1" <<'EOF'
import re, sys
src = open(sys.argv[1]).read()
src = re.sub(r"^model\b[^{]*\{.*?^\}\n?", "", src, flags=re.S | re.M)
src = re.sub(r"^optimizer .*\n", "", src, flags=re.M)
print(src.rstrip() + "\n\n" + sys.argv[2])
EOF
}
for f in 1f1b.pp 1f1b-recompute.pp 1f1b-bubble-recompute.pp 1f1b-offload.pp gpipe.pp 1f1b-greedy.pp; do
  gpt "$f"
done

# peak JSON [KEY]: the largest mem_bytes (or KEY) of a report
peak() { python3 -c 'import json,sys; print(max(json.load(open(sys.argv[1]))[sys.argv[2]]))' "$1" "${2:-mem_bytes}"; }
# median RUN_TXT: ppvm's median step time after SKIP steps, in ms
median() {
  python3 - "$1" "$skip" <<'EOF'
import re, statistics, sys
t = [float(m) for m in re.findall(r"^step .* time +([0-9.]+) ms", open(sys.argv[1]).read(), re.M)]
print("%.2f" % statistics.median(t[int(sys.argv[2]):]))
EOF
}

echo "recompute bench: GPT (context 64, embed 64, 2 layers a stage, batch $batch) on 4 ranks, B=$mbs, $steps steps"
echo "(load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores)"

# plain 1F1B, profiled: the costs every prediction below uses
"$ppc" "$out/lib/1f1b.pp" -D B="$mbs" -o "$out/plain0" -q --no-pictures
$mpirun "$root/bin/ppvm" "$out/plain0" --steps "$steps" --profile "$out/costs.json" \
  > "$out/plain0.txt" < /dev/null
# ppvm --profile measured "host_bandwidth" too (the cpu backend's Offload
# and Reload are memory copies: a stash-sized one, as the plain plan has no
# offload)
python3 - "$out/costs.json" <<'EOF'
import json, os, sys
costs = json.load(open(sys.argv[1]))
if not costs.get("host_bandwidth", 0) > 0:
    sys.exit("ppvm --profile wrote no positive \"host_bandwidth\"")
# 4 ranks on fewer cores: say how many there are ("cores", compiler/README.md,
# "Costs"), so the simulator shares them as the run did; without it every
# prediction here assumes a core per rank
if os.cpu_count() < 4 and "cores" not in costs:
    costs["cores"] = os.cpu_count()
    json.dump(costs, open(sys.argv[1], "w"))
EOF
echo "host bandwidth (ppvm --profile, a stash-sized memory copy): $(python3 -c 'import json,sys; print("%.3g" % json.load(open(sys.argv[1]))["host_bandwidth"])' "$out/costs.json") bytes/s"
"$ppc" "$out/lib/1f1b.pp" -D B="$mbs" -o "$out/plain" -q --no-pictures --costs "$out/costs.json"
plain_peak=$(peak "$out/plain/report.json")
cap=${CAP:-$((plain_peak * 92 / 100))}
echo "memory cap: $cap bytes (plain 1F1B's peak: $plain_peak)"
if "$ppc" "$out/lib/1f1b.pp" -D B="$mbs" -o "$out/over" -q --no-pictures --costs "$out/costs.json" \
  --mem-limit "$cap" 2> "$out/over.txt"; then
  echo "plain 1F1B fits under the cap: choose a smaller CAP" >&2
  exit 1
fi

# the search's best under the cap
"$ppc" --search -D W=4 -D B="$mbs" --library "$out/lib" --costs "$out/costs.json" \
  --mem-limit "$cap" --top 5 > "$out/search.txt"
# "ppc FILE FLAGS" of row 1 (ppc prints itself as run: $root/bin/ppc)
best=$(grep -m1 -E '^ +1 ' "$out/search.txt" | sed -E 's|.*bin/(ppc .*) -o .*|\1|')
echo "search's best under the cap: $best"
# the search's offload choice under the cap (--json --all: every candidate
# with its front rank and its command as ppc prints it)
"$ppc" --search -D W=4 -D B="$mbs" --library "$out/lib" --costs "$out/costs.json" \
  --mem-limit "$cap" --json --all > "$out/search.json"
off=$(python3 - "$out/search.json" <<'EOF'
import json, sys
c = [k for k in json.load(open(sys.argv[1]))["candidates"] if k["state"] == "compiled"
     and ("--offload" in k["args"] or k["file"].endswith("1f1b-offload.pp"))]
# the best-ranked on the front (the search's best when that offloads), else
# the fastest
k = min(c, key=lambda k: (k["front"] <= 0, k["front"], k["time"])) if c else None
cmd = k["command"].rsplit(" -o ", 1)[0] if k else ""
print(cmd[cmd.index("bin/ppc ") + 4:] if cmd else "")  # "ppc FILE FLAGS", as $best
EOF
)
echo "search's offload choice under the cap: ${off:-none}"

printf '%-8s %12s %12s %7s %14s %11s  %s\n' run predicted measured ratio "device peak" "host bytes" command
row() { # NAME PLAN_DIR COMMAND
  $mpirun "$root/bin/ppvm" "$2" --steps "$steps" > "$2.txt" < /dev/null
  local pred meas
  pred=$(python3 -c 'import json,sys; print("%.2f" % (1000 * json.load(open(sys.argv[1]))["step"]))' "$2/report.json")
  meas=$(median "$2.txt")
  # the host bytes: the report's, which ppvm's host line must repeat (rank
  # 0 prints every rank's; no line without offload)
  local host vmhost
  host=$(peak "$2/report.json" host_bytes)
  vmhost=$(python3 - "$2.txt" <<'EOF'
import re, sys
m = re.search(r"host memory \(offloaded stashes\) allocated at start-up, bytes per rank:([ 0-9]+)",
              open(sys.argv[1]).read())
print(max(int(x) for x in m.group(1).split()) if m else 0)
EOF
)
  if [ "$vmhost" != "$host" ]; then
    echo "$1: ppvm allocated $vmhost host bytes, the report says $host" >&2
    exit 1
  fi
  printf '%-8s %9s ms %9s ms %7.3f %14s %11s  %s\n' "$1" "$pred" "$meas" \
    "$(python3 -c "print($pred / $meas)")" "$(peak "$2/report.json")" "$host" "$3"
}
row plain "$out/plain" "ppc 1f1b.pp (no cap)"
"$ppc" "$out/lib/1f1b.pp" -D B="$mbs" -o "$out/full" -q --no-pictures --costs "$out/costs.json" \
  --mem-limit "$cap" --recompute 1
row full "$out/full" "ppc 1f1b.pp --recompute 1 --mem-limit $cap"
# shellcheck disable=SC2086 # the search's flags, as it printed them
eval "$root/bin/$best" -o "$out/best" -q --no-pictures
row search "$out/best" "$best"
if [ -n "$off" ]; then
  # shellcheck disable=SC2086 # as above
  eval "$root/bin/$off" -o "$out/off" -q --no-pictures
  row offload "$out/off" "$off"
else
  echo "offload  (no offload candidate fits under the cap)"
fi
echo "(load average at the end: $(cut -d' ' -f1-3 /proc/loadavg))"
