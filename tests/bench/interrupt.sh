#!/usr/bin/env bash
# interrupt.sh - the interruption campaign (issue 25): a run of 2 ranks
# (1F1B, S=2, B=2, 2000 steps, a checkpoint every 250, --save over an
# earlier save of 2 steps) is interrupted TRIES times per kind, at a random moment:
# kill-9 (one rank, SIGKILL from outside), sigterm (both ranks), stall
# (one rank SIGSTOPped, --timeout 3), kill-in-checkpoint and kill-in-save
# (PPVM_TEST_KILL, a rank killed with its files half written). A try is
# good when nothing is lost: the --save directory holds the earlier save or
# the new one, each whole (never a mix), and --resume from the checkpoints
# finishes the 12 steps with the uninterrupted run's weights, bit for bit;
# bad otherwise. Outside make test; a few minutes on 2 cores.
#
#   bash tests/bench/interrupt.sh [ROOT]     (CAMPAIGN_TRIES=3 per kind)
#
# Prints tried / good / bad per kind; exit status 0 when nothing is bad.
set -u
ROOT=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
TRIES=${CAMPAIGN_TRIES:-3}
STEPS=${CAMPAIGN_STEPS:-2000}
EVERY=$(( STEPS / 8 ))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
# a tag in every rank's environment: the signals touch only this script's ranks
export PP_CAMPAIGN_TAG="interrupt-$$"
MPIRUN=(timeout 120 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2)
W=$(mktemp -d /tmp/pp-interrupt-XXXXXX)
trap 'rm -rf "$W"' EXIT
PPVM="$ROOT/bin/ppvm"

"$ROOT/bin/ppc" "$ROOT/schedules/1f1b.pp" -D S=2 -D B=2 -o "$W/plan" -q || exit 1
for n in 2 $STEPS; do
    "${MPIRUN[@]}" "$PPVM" --backend cpu "$W/plan" --steps $n --save "$W/ref$n" --quiet \
        > "$W/ref.log" 2>&1 || { cat "$W/ref.log"; exit 1; }
done

# The ppvm ranks of this campaign: "pid rank" lines.
ranks() {
    local pid
    for pid in $(pgrep -x ppvm 2>/dev/null); do
        local env
        env=$( { tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null) || continue
        grep -qx "PP_CAMPAIGN_TAG=$PP_CAMPAIGN_TAG" <<< "$env" || continue
        echo "$pid $(sed -n 's/^OMPI_COMM_WORLD_RANK=//p' <<< "$env")"
    done
}

same() { "$PPVM" --compare "$1" "$2" --atol 0 --rtol 0 > /dev/null 2>&1; }

# One try of kind $1 in a fresh $W/try; 0 when nothing was lost.
try() {
    local kind=$1 T=$W/try
    rm -rf "$T" && mkdir "$T" && cp -r "$W/ref2" "$T/w"
    local args=(--backend cpu "$W/plan" --steps $STEPS --checkpoint-dir "$T/ck"
                --checkpoint-every $EVERY --save "$T/w" --timeout 3 --quiet)
    local victim=$(( RANDOM % 2 )) at=$(( RANDOM % 5 + 1 ))
    case $kind in
    kill-in-checkpoint) PPVM_TEST_KILL="$victim:$(( at * EVERY )):checkpoint" "${MPIRUN[@]}" "$PPVM" "${args[@]}" > "$T/log" 2>&1 ;;
    kill-in-save)       PPVM_TEST_KILL="0:$STEPS:save" "${MPIRUN[@]}" "$PPVM" "${args[@]}" > "$T/log" 2>&1 ;;
    *)
        "${MPIRUN[@]}" "$PPVM" "${args[@]}" > "$T/log" 2>&1 &
        local m=$! pids=""
        sleep "0.$(( RANDOM % 10 ))"
        for _ in $(seq 100); do pids=$(ranks); [ "$(wc -l <<< "$pids")" -ge 2 ] && break; sleep 0.1; done
        sleep "$(( RANDOM % 3 )).$(( RANDOM % 10 ))"
        local pid; pid=$(awk -v r=$victim '$2 == r { print $1 }' <<< "$pids")
        case $kind in
        kill-9)  kill -KILL $pid 2>/dev/null ;;
        sigterm) kill -TERM $(awk '{ print $1 }' <<< "$pids") 2>/dev/null ;;
        stall)   kill -STOP $pid 2>/dev/null ;;
        esac
        wait $m
        kill -KILL $pid 2>/dev/null
        ;;
    esac
    echo "$kind (rank $victim, at $at)" > "$W/what"
    # the save: the earlier one or the new one, whole (a run stopped by
    # SIGTERM after step N saves those N steps: the same as N steps run)
    local n; n=$(sed -n 's/^ppvm: stopped by SIGTERM after step \([0-9]*\) .*/\1/p' "$T/log")
    if [ -n "$n" ] && [ ! -d "$W/ref$n" ]; then
        "${MPIRUN[@]}" "$PPVM" --backend cpu "$W/plan" --steps $n --save "$W/ref$n" --quiet \
            > "$T/refn.log" 2>&1
    fi
    if ! same "$T/w" "$W/ref2" && ! same "$T/w" "$W/ref$STEPS" &&
       ! { [ -n "$n" ] && same "$T/w" "$W/ref$n"; }; then
        echo "the --save directory is neither save, whole" > "$W/why"; return 1
    fi
    # what is left is resumed to the end (or, with no checkpoint, trained again)
    local from=(--checkpoint-dir "$T/ck2" --checkpoint-every $EVERY)
    ls "$T"/ck/step-*/manifest > /dev/null 2>&1 && from=(--resume "$T/ck")
    "${MPIRUN[@]}" "$PPVM" --backend cpu "$W/plan" --steps $STEPS "${from[@]}" --save "$T/res" \
        --quiet > "$T/res.log" 2>&1 || { echo "the resume failed: $(tail -3 "$T/res.log")" > "$W/why"; return 1; }
    same "$T/res" "$W/ref$STEPS" || { echo "resumed to other weights" > "$W/why"; return 1; }
}

KINDS=(${CAMPAIGN_KINDS:-kill-9 sigterm stall kill-in-checkpoint kill-in-save})
declare -A tried good bad
total_bad=0
for kind in "${KINDS[@]}"; do
    tried[$kind]=0 good[$kind]=0 bad[$kind]=0
    for _ in $(seq "$TRIES"); do
        tried[$kind]=$(( tried[$kind] + 1 ))
        if try "$kind"; then
            good[$kind]=$(( good[$kind] + 1 ))
        else
            bad[$kind]=$(( bad[$kind] + 1 )); total_bad=$(( total_bad + 1 ))
            echo "BAD: $(cat "$W/what"): $(cat "$W/why")"; tail -4 "$W/try/log"
        fi
    done
done
printf '%-20s %6s %6s %6s\n' kind tried good bad
for kind in "${KINDS[@]}"; do
    printf '%-20s %6d %6d %6d\n' "$kind" "${tried[$kind]}" "${good[$kind]}" "${bad[$kind]}"
done
[ $total_bad -eq 0 ]
