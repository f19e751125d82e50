#!/usr/bin/env bash
# mpmd_mismatch.sh - the MPMD-mismatch campaign (issue 25): mpirun's MPMD
# form starts rank 0 with one command line and rank 1 with another, TRIES
# times per kind. A kind that must be refused (a training flag or the data
# differs) is good when every rank exits non-zero within the limit, rank 0
# naming the flag ("the ranks were started with different FLAG"), and bad
# when the run trains (exit 0: wrong weights) or hangs; a kind that may
# differ (--quiet, --timeout, --loss-digits, the same data under another
# path) is good when the run exits 0. Outside make test; a few minutes on
# 2 cores.
#
#   bash tests/bench/mpmd_mismatch.sh [ROOT]     (CAMPAIGN_TRIES=2 per kind)
#
# Prints tried / good / bad per kind; exit status 0 when nothing is bad.
set -u
ROOT=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
TRIES=${CAMPAIGN_TRIES:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
MPIRUN=(timeout 60 mpirun --oversubscribe --allow-run-as-root --bind-to none)
W=$(mktemp -d /tmp/pp-mpmd-XXXXXX)
trap 'rm -rf "$W"' EXIT
PPVM="$ROOT/bin/ppvm"

"$ROOT/bin/ppc" "$ROOT/schedules/gpipe.pp" -D S=2 -D B=2 --optimizer adamw -o "$W/plan" -q || exit 1
head -c 20000 /usr/share/common-licenses/GPL-3 > "$W/data.txt"
cp "$W/data.txt" "$W/copy.txt"                  # the same data under another path
head -c 19999 "$W/data.txt" > "$W/short.txt"     # a copy cut short by a byte
sed 's/the/tHe/' "$W/data.txt" > "$W/edited.txt" # the same size, one word changed

# kind|rank 1's extra flags|the flag named, or "ok" where the run must succeed
CASES=(
    "lr|--lr 0.002|--lr" "seed|--seed 2|--seed" "warmup|--warmup 3|--warmup"
    "adam-eps|--adam-eps 1e-6|--adam-eps" "weight-decay|--weight-decay 0|--weight-decay"
    "adam-beta2|--adam-beta2 0.9|--adam-beta2" "steps|--steps 3|--steps"
    "data-other|--data $W/short.txt|--data" "data-edited|--data $W/edited.txt|--data"
    "save|--save $W/w1|--save" "deterministic|--deterministic|--deterministic"
    "checkpoint-dir|--checkpoint-dir $W/ck1 --checkpoint-every 1|--checkpoint-dir"
    "skip-nonfinite|--skip-nonfinite|--skip-nonfinite" "no-compute|--no-compute|no-compute"
    "profile|--profile $W/p1.json|--profile"
    "quiet|--quiet|ok" "timeout|--timeout 200|ok" "loss-digits|--loss-digits 6|ok"
    "data-copy|--data $W/copy.txt|ok"
)
declare -A tried good bad
order=()
total_bad=0
for c in "${CASES[@]}"; do
    IFS='|' read -r kind extra want <<< "$c"
    order+=("$kind")
    tried[$kind]=0 good[$kind]=0 bad[$kind]=0
    for _ in $(seq "$TRIES"); do
        rm -rf "$W/w1" "$W/ck1" "$W/p1.json"
        base=(--backend cpu "$W/plan")
        one=()  # rank 1's: the defaults that its extra flags do not replace
        for d in "--steps 2" "--data $W/data.txt" "--timeout 20"; do
            [[ " $extra " == *" ${d%% *} "* ]] || one+=($d)
        done
        # shellcheck disable=SC2086
        "${MPIRUN[@]}" -np 1 "$PPVM" "${base[@]}" --steps 2 --data "$W/data.txt" --timeout 20 \
            : -np 1 "$PPVM" "${base[@]}" "${one[@]}" $extra > "$W/log" 2>&1
        rc=$?
        tried[$kind]=$(( tried[$kind] + 1 ))
        if [ "$want" = ok ]; then
            [ $rc -eq 0 ] && ok=1 || ok=0
        else
            ok=0
            # (--no-compute has its own message: driver.c's same_mode)
            said="ppvm: the ranks were started with different $want:"
            [ "$want" = no-compute ] && said="ppvm: rank 0: --no-compute was given to some ranks and not to others"
            [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "$said" "$W/log" &&
                ! grep -q "^step " "$W/log" && ok=1
        fi
        if [ $ok = 1 ]; then
            good[$kind]=$(( good[$kind] + 1 ))
        else
            bad[$kind]=$(( bad[$kind] + 1 )); total_bad=$(( total_bad + 1 ))
            echo "BAD: $kind (rank 1 with $extra): exit $rc"; grep "ppvm" "$W/log" | head -3
        fi
    done
done
printf '%-16s %6s %6s %6s\n' kind tried good bad
for kind in "${order[@]}"; do
    printf '%-16s %6d %6d %6d\n' "$kind" "${tried[$kind]}" "${good[$kind]}" "${bad[$kind]}"
done
[ $total_bad -eq 0 ]
