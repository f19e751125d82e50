#!/usr/bin/env bash
# soak.sh - checkpoints under load (tests/README.md, "Benchmarks"): 8 ranks train
# 2,000 steps of an LPP with replicas (S=8, G=2 groups of R=4, AdamW, a tiny
# model so that it runs in minutes on 2 cores), checkpointing every 100.
# Run A is never interrupted. Run B has one rank killed with SIGKILL from
# outside twice, at different points (just after the checkpoint of step 700
# appears, and once the one of step 1500 does, on other ranks), and is
# resumed each time with --resume; its final weights must equal A's with
# atol 0. Prints the wall time of each run and, per rank of run A, the
# resident memory sampled early in the run and at its end, and the peak
# (VmHWM): the table shows whether memory grows over the run.
#
#   bash tests/bench/soak.sh [ROOT]       (make bench runs it)
#
# Exit status 0 when B's weights equal A's and every kill made mpirun fail.
set -u
ROOT=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
STEPS=${SOAK_STEPS:-2000}
EVERY=100
NP=8
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
# a tag in every rank's environment: the kills and the samples touch only
# this script's ranks, never another ppvm on the machine
export PP_SOAK_TAG="soak-$$"
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np $NP)
W=$(mktemp -d /tmp/pp-soak-XXXXXX)
trap 'rm -rf "$W"' EXIT

fail() { echo "soak: $*" >&2; exit 1; }

# The tiny model in lpp.pp's schedule.
sed '/^model {/,/^}/c\model {\n    context = 4\n    embed   = 4\n    ffn     = 16\n    blocks  = 1\n    batch   = 2\n}' \
    "$ROOT/schedules/lpp.pp" > "$W/lpp-tiny.pp"
"$ROOT/bin/ppc" "$W/lpp-tiny.pp" -D S=8 -D B=8 -D G=2 -D R=4 --optimizer adamw -o "$W/plan" -q ||
    fail "ppc failed"

# The ppvm ranks of mpirun $1 (children carrying this script's tag): "pid rank" lines.
ranks_of() {
    local pid
    for pid in $(pgrep -P "$1" 2>/dev/null); do
        local env
        env=$( { tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null) || continue
        grep -qx "PP_SOAK_TAG=$PP_SOAK_TAG" <<< "$env" || continue
        echo "$pid $(sed -n 's/^OMPI_COMM_WORLD_RANK=//p' <<< "$env")"
    done
}

# The newest step checkpointed in $1 (0 before the first).
newest() {
    local d
    d=$(ls "$1" 2>/dev/null | sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' | sort -n | tail -1)
    echo "${d:-0}"
}

# Samples VmRSS and VmHWM (KiB) of mpirun $1's ranks every 0.2 s into
# $2/first.<rank> (the first sample once checkpoint $4 of $3 exists:
# start-up done, training under way), $2/mid.<rank> (once checkpoint
# $STEPS/2 does) and $2/last.<rank> (the latest), until mpirun ends.
sample() {
    local mp=$1 out=$2 ck=$3 from=$4
    mkdir -p "$out"
    while kill -0 "$mp" 2>/dev/null; do
        local at
        at=$(newest "$ck")
        while read -r pid rank; do
            [ -n "$rank" ] || continue
            local rss hwm
            rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
            hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
            [ -n "$rss" ] || continue
            if [ ! -e "$out/first.$rank" ] && [ "$at" -ge "$from" ]; then
                echo "$rss $hwm" > "$out/first.$rank"
            fi
            if [ ! -e "$out/mid.$rank" ] && [ "$at" -ge $((STEPS / 2)) ]; then
                echo "$rss $hwm" > "$out/mid.$rank"
            fi
            echo "$rss $hwm" > "$out/last.$rank"
        done < <(ranks_of "$mp")
        sleep 0.2
    done
}

# Waits for checkpoint $2 (a manifest) in $1 while mpirun $3 runs, then
# kills rank $4 with SIGKILL.
kill_after() {
    local dir=$1 step=$2 mp=$3 victim=$4 m
    m=$(printf '%s/step-%06d/manifest' "$dir" "$step")
    while [ ! -e "$m" ]; do
        kill -0 "$mp" 2>/dev/null || return 1
        sleep 0.05
    done
    local pid
    pid=$(ranks_of "$mp" | awk -v r="$victim" '$2 == r {print $1}')
    [ -n "$pid" ] || return 1
    kill -9 "$pid"
    echo "soak: killed rank $victim (pid $pid) after checkpoint $step appeared"
}

now() { date +%s.%N; }

echo "soak: $NP ranks, $STEPS steps of lpp.pp (S=8 B=8 G=2 R=4, AdamW, tiny model), checkpoint every $EVERY"

# Run A: uninterrupted.
t0=$(now)
"${MPIRUN[@]}" "$ROOT/bin/ppvm" --backend cpu "$W/plan" --steps "$STEPS" --quiet \
    --checkpoint-dir "$W/a-ck" --checkpoint-every $EVERY --save "$W/a" > "$W/a.log" 2>&1 &
mp=$!
sample "$mp" "$W/mem" "$W/a-ck" 200 &
sampler=$!
wait "$mp" || { cat "$W/a.log"; fail "run A failed"; }
wait "$sampler"
ta=$(echo "$(now) - $t0" | bc)

# Run B: killed twice, resumed twice.
t0=$(now)
args=(--backend cpu "$W/plan" --steps "$STEPS" --quiet --checkpoint-dir "$W/b-ck" --checkpoint-every $EVERY)
kills=0
for victim_step in "3 700" "6 1500" ""; do
    resume=()
    [ -d "$W/b-ck" ] && resume=(--resume "$W/b-ck")
    save=()
    [ -z "$victim_step" ] && save=(--save "$W/b")
    "${MPIRUN[@]}" "$ROOT/bin/ppvm" "${args[@]}" "${resume[@]}" "${save[@]}" >> "$W/b.log" 2>&1 &
    mp=$!
    if [ -n "$victim_step" ]; then
        set -- $victim_step
        kill_after "$W/b-ck" "$2" "$mp" "$1" || { cat "$W/b.log"; fail "could not kill rank $1"; }
        if wait "$mp"; then
            fail "mpirun exited 0 although rank $1 was killed"
        fi
        kills=$((kills + 1))
    else
        wait "$mp" || { tail -20 "$W/b.log"; fail "the last resumed run failed"; }
    fi
done
tb=$(echo "$(now) - $t0" | bc)
grep "resuming from" "$W/b.log" | sed 's/^/soak: /'

"$ROOT/bin/ppvm" --compare "$W/a" "$W/b" --atol 0 --rtol 0 > "$W/cmp.log" 2>&1
cmp=$?

printf '\nsoak: wall time: run A (uninterrupted) %.1f s; run B (%d kills, %d resumes) %.1f s\n' "$ta" "$kills" "$kills" "$tb"
echo "soak: run A's memory per rank (KiB): resident at step 200, at step $((STEPS / 2)) and at the end; peak (VmHWM)"
printf '%6s %12s %12s %12s %12s %8s\n' rank rss_200 rss_mid rss_end peak growth
for r in $(seq 0 $((NP - 1))); do
    read -r s0 _ < "$W/mem/first.$r" 2>/dev/null || s0=0
    read -r sm _ < "$W/mem/mid.$r" 2>/dev/null || sm=0
    read -r s1 h1 < "$W/mem/last.$r" 2>/dev/null || { s1=0; h1=0; }
    printf '%6d %12d %12d %12d %12d %8d\n' "$r" "$s0" "$sm" "$s1" "$h1" $((s1 - s0))
done
if [ $cmp -ne 0 ]; then
    cat "$W/cmp.log"
    fail "run B's final weights differ from run A's"
fi
echo "soak: run B's final weights equal run A's (atol 0, rtol 0) on all 8 stages"
