#!/usr/bin/env bash
# hosts_test.sh - `make test-hosts` (issue 29 part 2): pp across "hosts"
# made of network namespaces, launched by Open MPI over an rsh agent that
# enters the host's namespace, MPI over TCP between them.
#
# Each host is a namespace with one veth link to a bridge in the root
# namespace (10.29.0.<h+1>/24; mpirun, in the root namespace, is
# 10.29.0.254 there). /etc/netns/<ns>/hosts maps this machine's hostname to
# the host's own address (ip netns exec bind-mounts it over /etc/hosts), so
# ppvm's heartbeats (vm/guard.c) reach every host. What it shows:
#   1. GPipe, 1F1B, DDP and FSDP on 2 hosts, and GPipe and 1F1B on 4, train
#      to the reference (--compare: exact for the pipelines, the default
#      tolerance for the summing schedules);
#   2. links shaped with tc's token bucket (tbf; this kernel has no netem)
#      at 200 Mbit/s and 1 Gbit/s: ppvm --profile measures the shaped link
#      (latency, sustained rate, burst, the all-reduce's shape), ppc --costs
#      predicts the step of GPipe, 1F1B, DDP and FSDP on 2 hosts from it,
#      and the prediction is within 10% of the step measured (each row
#      prints the load; two control rows predict the pipelines on this
#      machine alone, reported only, to tell the load's miss from the
#      link's);
#   3. a host's link taken down mid-run: every rank ends within --timeout
#      (plus the watchdog's grace), the surviving ranks naming the lost
#      host's ranks.
# Everything it creates (namespaces, links, the bridge, /etc/netns
# entries, processes) is removed on exit, also on SIGINT and SIGTERM.
# Exit 0 when all pass, 1 when one fails, 77 (with one "skipped:" line)
# where network namespaces cannot be made (not root, no ip, a container
# without CAP_NET_ADMIN).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tag=pp$$                      # every name this run makes starts with it
tmp=$(mktemp -d /tmp/pp-hosts.XXXXXX)
hosts_made=0
fails=0
mpi_pid=

# kill_tree PID: PID and every process below it, children first, so that a
# run started in the background (a subshell, then timeout, then mpirun and
# its daemons) leaves nothing behind when only the subshell's pid is known
kill_tree() {
  local c
  for c in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$c"; done
  kill -9 "$1" 2>/dev/null
}

cleanup() {
  trap - EXIT INT TERM
  [ -n "$mpi_pid" ] && kill_tree "$mpi_pid"
  for p in $(pgrep -P $$ 2>/dev/null); do kill_tree "$p"; done
  for ((h = 0; h < hosts_made; h++)); do
    # every process left in the namespace (a lost host's ranks), then it
    for p in $(ip netns pids "${tag}h$h" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "${tag}h$h" 2>/dev/null
    rm -rf "/etc/netns/${tag}h$h"
  done
  ip link del "${tag}br" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "test-hosts: interrupted; cleaning up" >&2; exit 130' INT TERM HUP

skip() { echo "test-hosts: skipped: $*"; exit 77; }
fail() { echo "test-hosts: FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "test-hosts: ok: $*"; }

# ---- the hosts -----------------------------------------------------------
command -v ip > /dev/null || skip "no ip command (iproute2)"
command -v tc > /dev/null || skip "no tc command (iproute2)"
ip netns add "${tag}probe" 2> /dev/null || skip "this machine does not allow network namespaces (ip netns add failed: root and CAP_NET_ADMIN needed)"
ip netns del "${tag}probe"
# what an earlier run killed with SIGKILL (no trap runs) left: its pid is gone
for ns in $(ip netns list | sed -n 's/^\(pp[0-9][0-9]*h[0-9][0-9]*\).*/\1/p'); do
  pid=${ns#pp}
  pid=${pid%%h*}
  if ! kill -0 "$pid" 2> /dev/null; then
    ip netns del "$ns" 2> /dev/null
    rm -rf "/etc/netns/$ns"
    ip link del "pp${pid}br" 2> /dev/null
  fi
done
ip link add "${tag}br" type bridge 2> /dev/null || skip "cannot make a bridge (ip link add type bridge failed)"
ip addr add 10.29.0.254/24 dev "${tag}br" && ip link set "${tag}br" up

# make_hosts N: hosts 0..N-1 (those already made are kept)
make_hosts() {
  for ((h = hosts_made; h < $1; h++)); do
    local ns=${tag}h$h
    ip netns add "$ns" || { fail "ip netns add $ns"; return 1; }
    hosts_made=$((h + 1))
    ip link add "${tag}v$h" type veth peer name "${tag}e$h" &&
      ip link set "${tag}e$h" netns "$ns" &&
      ip link set "${tag}v$h" master "${tag}br" up &&
      ip -n "$ns" addr add "10.29.0.$((h + 1))/24" dev "${tag}e$h" &&
      ip -n "$ns" link set "${tag}e$h" up &&
      ip -n "$ns" link set lo up || { fail "linking $ns"; return 1; }
    mkdir -p "/etc/netns/$ns"
    printf '127.0.0.1 localhost\n10.29.0.%d %s\n' $((h + 1)) "$(hostname)" > "/etc/netns/$ns/hosts"
  done
}

# The rsh agent Open MPI runs as `agent HOST CMD...`: CMD in HOST's namespace.
cat > "$tmp/agent" <<'AGENT'
#!/bin/sh
host=$1
shift
exec ip netns exec "$host" /bin/sh -c "$*"
AGENT
chmod +x "$tmp/agent"

export OPENBLAS_NUM_THREADS=1
# run_mpi NP HOSTS LIMIT ARGS...: ppvm ARGS on NP ranks over HOSTS hosts
# (NP/HOSTS each), within LIMIT seconds; output in $tmp/out
run_mpi() {
  local np=$1 nh=$2 limit=$3
  shift 3
  : > "$tmp/hostfile"
  for ((h = 0; h < nh; h++)); do echo "${tag}h$h slots=$((np / nh))" >> "$tmp/hostfile"; done
  timeout -k 5 "$limit" mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
    --hostfile "$tmp/hostfile" --map-by slot --mca plm_rsh_agent "$tmp/agent" \
    --mca routed direct --mca btl tcp,self --mca btl_tcp_if_include 10.29.0.0/24 --mca oob_tcp_if_include 10.29.0.0/24 \
    -x OPENBLAS_NUM_THREADS -x PATH -x LD_LIBRARY_PATH \
    "$root/bin/ppvm" "$@" > "$tmp/out" 2>&1 < /dev/null &
  mpi_pid=$!
  wait "$mpi_pid"
  local rc=$?
  mpi_pid=
  # Open MPI's daemons sometimes fail to start or to route to each other
  # across the namespaces (ORTE's "no-path", or "unable to reliably start
  # one or more daemons": errors of the launcher before any ppvm runs, not
  # of ppvm; seen in 1 of 4 starts here, cause not found): up to four more
  # tries, each said
  if [ $rc != 0 ] && [ "${retried:-0}" -lt 4 ] &&
    grep -aq "no-path\|does not know how to route\|unable to reliably start one or more daemons" "$tmp/out"; then
    echo "test-hosts: (Open MPI's daemons could not start or route to each other; running again)"
    retried=$((${retried:-0} + 1)) run_mpi "$np" "$nh" "$limit" "$@"
    return
  fi
  return $rc
}

# run_local NP - LIMIT ARGS...: the same on this machine alone (shared
# memory), for predict's control rows
run_local() {
  local np=$1 limit=$3
  shift 3
  timeout -k 5 "$limit" mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
    -x OPENBLAS_NUM_THREADS "$root/bin/ppvm" "$@" > "$tmp/out" 2>&1 < /dev/null
}

# ---- 1. training across hosts --------------------------------------------
# train FILE DEFS NP HOSTS TOL: compiled, trained across hosts, compared
train() {
  local file=$1 defs=$2 np=$3 nh=$4 tol=$5 name
  name="${file%.pp} $defs on $nh hosts"
  rm -rf "$tmp/plan" "$tmp/w" "$tmp/ref"
  # shellcheck disable=SC2086
  "$root/bin/ppc" "$root/schedules/$file" $defs -o "$tmp/plan" -q --no-pictures || {
    fail "$name: ppc"; return; }
  if ! run_mpi "$np" "$nh" 180 "$tmp/plan" --steps 10 --quiet --timeout 60 --save "$tmp/w"; then
    fail "$name: ppvm exited non-zero:"; tail -15 "$tmp/out"; return
  fi
  "$root/bin/ppvm" --reference "$tmp/plan" --steps 10 --quiet --save "$tmp/ref" > /dev/null
  # shellcheck disable=SC2086
  if "$root/bin/ppvm" --compare "$tmp/w" "$tmp/ref" $tol > "$tmp/cmp" 2>&1; then
    pass "$name trains to the reference ($(tail -1 "$tmp/cmp"))"
  else
    fail "$name differs from the reference:"; cat "$tmp/cmp"
  fi
}

make_hosts 2 || exit 1
train gpipe.pp "-D S=2 -D B=8" 2 2 "--atol 0 --rtol 0"
train 1f1b.pp "-D S=2 -D B=8" 2 2 "--atol 0 --rtol 0"
train ddp.pp "-D S=2 -D B=2" 2 2 ""
train fsdp.pp "-D S=2 -D B=2" 2 2 ""
make_hosts 4 || exit 1
train gpipe.pp "-D S=4 -D B=8" 4 4 "--atol 0 --rtol 0"
train 1f1b.pp "-D S=4 -D B=8" 4 4 "--atol 0 --rtol 0"

# ---- 2. shaped links: measured, predicted -----------------------------------
# shape RATE: every host's link sends at RATE (tbf on its veth end)
shape() {
  for ((h = 0; h < hosts_made; h++)); do
    ip netns exec "${tag}h$h" tc qdisc replace dev "${tag}e$h" root tbf rate "$1" \
      burst "${2:-64kb}" latency 200ms || { fail "tc tbf $1 on host $h"; return 1; }
  done
}

# predict FILE DEFS NP HOSTS: ppvm --profile across hosts, ppc --costs on it,
# the predicted step against the measured median
predict() {
  local file=$1 defs=$2 np=$3 nh=$4 rate=$5 name
  name="${file%.pp} $defs on $nh hosts at $rate"
  rm -rf "$tmp/plan" "$tmp/again"
  # shellcheck disable=SC2086
  "$root/bin/ppc" "$root/schedules/$file" $defs -o "$tmp/plan" -q --no-pictures || {
    fail "$name: ppc"; return; }
  local run=run_mpi
  if [ "$nh" = 0 ]; then # the control: the same ranks on this machine, no link
    run=run_local
    name="${file%.pp} $defs on one host (control: the load, no link)"
  fi
  if ! $run "$np" "$nh" 120 "$tmp/plan" --steps 16 --timeout 30 --profile "$tmp/costs.json"; then
    fail "$name: ppvm --profile exited non-zero:"; tail -5 "$tmp/out"; return
  fi
  cp "$tmp/out" "$tmp/run.txt"
  # shellcheck disable=SC2086
  "$root/bin/ppc" "$root/schedules/$file" $defs -o "$tmp/again" -q --no-pictures \
    --costs "$tmp/costs.json" || { fail "$name: ppc --costs"; return; }
  # the measured costs may order the plan otherwise (a greedy order, a
  # gradient return's place): the prediction is that plan's, so time it
  if [ "$(head -1 "$tmp/plan/rank0.txt")" != "$(head -1 "$tmp/again/rank0.txt")" ]; then
    if ! $run "$np" "$nh" 120 "$tmp/again" --steps 16 --timeout 30; then
      fail "$name: ppvm of the plan compiled with the costs exited non-zero:"; tail -5 "$tmp/out"
      return
    fi
    cp "$tmp/out" "$tmp/run.txt"
    name="$name (the plan compiled with the costs, timed again)"
  fi
  python3 - "$tmp/costs.json" "$tmp/again/report.json" "$tmp/run.txt" "$name" "${HOSTS_PREDICT:-}" <<'PY' || fails=$((fails + 1))
import json, re, statistics, sys
costs, rep, run, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), open(sys.argv[3]).read(), sys.argv[4]
steps = [float(t) for t in re.findall(r"^step\s+\d+/\d+.*?time\s+([0-9.]+) ms", run, re.M)][3:]
measured = statistics.median(steps)
predicted = rep["step"] * 1e3 if rep.get("unit", "s") == "s" else rep["step"]
ratio = predicted / measured
ok = 0.9 <= ratio <= 1.1
load = open("/proc/loadavg").read().split()[0]
control = "control" in name # reported, never failed
print("test-hosts: %s: %s: link %.3g MB/s, burst %.0f KB, latency %.3g us, all-reduce %s, %s duplex (ppvm --profile); step predicted %.3f ms, measured %.3f ms, ratio %.2f (target 0.9-1.1), load %s"
      % ("ok" if ok else ("miss" if sys.argv[5] == "report" or control else "FAIL"), name, costs["bandwidth"] / 1e6,
         costs.get("burst", 0) / 1e3, costs["latency"] * 1e6, costs.get("allreduce", "ring"), costs.get("duplex", "full"),
         predicted, measured, ratio, load))
sys.exit(0 if ok or control else 1)
PY
}

# A run on a loaded machine only ever gets slower: up to three tries, the
# first within 10% counts (each try is printed).
predict_tries() {
  local f0=$fails try
  for try in 1 2 3; do
    fails=$f0
    predict "$@"
    [ "$fails" = "$f0" ] && return
  done
  # HOSTS_PREDICT=report (make test, on a machine shared with other work):
  # the figures are printed, a miss is not a failure
  if [ "${HOSTS_PREDICT:-}" = report ]; then
    echo "test-hosts: (HOSTS_PREDICT=report: the misses above are reported, not failed)"
    fails=$f0
  fi
}

# each schedule on 2 hosts at both rates: the pipelines' small messages
# inside tbf's burst, DDP's tree all-reduce and FSDP's fetches past it
for rate in 200mbit 1gbit; do
  if [ $rate = 1gbit ]; then shape 1gbit 256kb; else shape $rate; fi
  predict_tries gpipe.pp "-D S=2 -D B=8" 2 2 $rate
  predict_tries 1f1b.pp "-D S=2 -D B=8" 2 2 $rate
  predict_tries ddp.pp "-D S=2 -D B=2" 2 2 $rate
  predict_tries fsdp.pp "-D S=2 -D B=2" 2 2 $rate
done
# The control: the pipelines on this machine alone, at the same load. Where
# they miss as far as across hosts, the miss is the load's (the model's
# cores are exclusive), not the link's.
predict gpipe.pp "-D S=2 -D B=8" 2 0 none
predict 1f1b.pp "-D S=2 -D B=8" 2 0 none
for ((h = 0; h < hosts_made; h++)); do # unshaped again
  ip netns exec "${tag}h$h" tc qdisc del dev "${tag}e$h" root 2> /dev/null
done

# ---- 3. a host lost mid-run ---------------------------------------------
# 4 hosts, a rank each; host 2's link goes down once the steps run. Every
# rank must end within --timeout (5 s) plus the heartbeats' 1.5 s and a
# step, 10 s in all, and the surviving ranks name rank 2.
lost_host() {
  local limit=10 t0 t1 h gone
  rm -rf "$tmp/plan"
  "$root/bin/ppc" "$root/schedules/gpipe.pp" -D S=4 -D B=8 -o "$tmp/plan" -q --no-pictures
  rm -f "$tmp/out" # (an earlier run's step lines must not count)
  run_mpi 4 4 150 "$tmp/plan" --steps 1000000 --timeout 5 --grace 2 > /dev/null 2>&1 &
  local bg=$!
  # (start-up over 4 hosts takes seconds; on a loaded machine tens)
  for ((i = 0; i < 900; i++)); do grep -aq '^step' "$tmp/out" 2> /dev/null && break; sleep 0.1; done
  grep -aq "^step" "$tmp/out" || { fail "lost host: the run did not start after ${i} tries ($(wc -c < "$tmp/out") bytes of output):"; tail -20 "$tmp/out"; kill_tree "$bg"; return; }
  ip link set "${tag}v2" down
  t0=$(date +%s.%N)
  declare -A ended
  while :; do
    t1=$(date +%s.%N)
    gone=0
    for ((h = 0; h < 4; h++)); do
      if [ -z "${ended[$h]:-}" ] && ! ip netns pids "${tag}h$h" | xargs -r -n1 -I{} cat /proc/{}/comm 2> /dev/null | grep -q '^ppvm$'; then
        ended[$h]=$(echo "$t1 - $t0" | bc)
      fi
      [ -n "${ended[$h]:-}" ] && gone=$((gone + 1))
    done
    [ $gone = 4 ] && break
    if (($(echo "$t1 - $t0 > $limit + 5" | bc))); then break; fi
    sleep 0.2
  done
  kill_tree "$bg"
  wait "$bg" 2> /dev/null
  for ((h = 0; h < 4; h++)); do
    if [ -z "${ended[$h]:-}" ]; then
      fail "lost host: host $h's rank still ran $limit s after host 2's link went down"
    elif (($(echo "${ended[$h]} > $limit" | bc))); then
      fail "lost host: host $h's rank ended ${ended[$h]} s after the link went down (limit $limit s)"
    else
      echo "test-hosts: host $h's rank ended ${ended[$h]} s after host 2's link went down"
    fi
  done
  # The first rank whose --timeout fires exits, and mpirun then ends the
  # others, so a rank whose own watchdog had not fired yet says nothing:
  # every rank that speaks must name rank 2 (and no other), and one must.
  local named=0
  for r in 0 1 3; do
    if grep -aE "^ppvm: rank $r: .*not finished after 5 s.*rank(s)? ([0-9, ]*)?\b2\b.* lost or stalled" "$tmp/out" > "$tmp/line"; then
      echo "test-hosts: rank $r said: $(head -1 "$tmp/line")"
      named=$((named + 1))
    elif grep -aq "^ppvm: rank $r: .*not finished after" "$tmp/out"; then
      fail "lost host: rank $r did not name rank 2 (its output: $(grep -a "^ppvm: rank $r:" "$tmp/out" | head -2))"
    else
      echo "test-hosts: rank $r said nothing (mpirun ended it after another rank's timeout)"
    fi
  done
  [ "$named" -gt 0 ] || fail "lost host: no rank named rank 2"
  [ "$fails" = 0 ] && pass "a lost host: every rank ended within $limit s, those that spoke naming rank 2"
}
lost_host

if [ "$fails" = 0 ]; then echo "test-hosts: all passed"; exit 0; fi
echo "test-hosts: $fails failed"
exit 1
