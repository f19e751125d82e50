#!/usr/bin/env bash
# ckpt_corrupt.sh - the checkpoint-corruption campaign (issue 25): a run of
# 2 ranks checkpoints every step (GPipe, S=2, B=2, 4 steps, all kept); then,
# TRIES times per kind, a copy of its checkpoints is spoilt one way and
# --resume finishes the 4 steps. A try is good when the resumed run exits 0
# with the uninterrupted run's weights, bit for bit (an older checkpoint was
# used, the spoilt one named), and bad otherwise (a crash, a hang past the
# limit, other weights, a spoilt checkpoint resumed from). Outside make
# test; a few minutes on 2 cores.
#
#   bash tests/bench/ckpt_corrupt.sh [ROOT]     (CAMPAIGN_TRIES=3 per kind)
#
# Prints tried / good / bad per kind; exit status 0 when nothing is bad.
set -u
ROOT=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
TRIES=${CAMPAIGN_TRIES:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
MPIRUN=(timeout 120 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2)
W=$(mktemp -d /tmp/pp-corrupt-XXXXXX)
trap 'rm -rf "$W"' EXIT
PPVM="$ROOT/bin/ppvm"

"$ROOT/bin/ppc" "$ROOT/schedules/gpipe.pp" -D S=2 -D B=2 -o "$W/plan" -q || exit 1
"${MPIRUN[@]}" "$PPVM" --backend cpu "$W/plan" --steps 4 --checkpoint-dir "$W/ck" \
    --checkpoint-every 1 --checkpoint-keep 4 --save "$W/full" --quiet > "$W/base.log" 2>&1 ||
    { cat "$W/base.log"; exit 1; }

# A random byte offset in file $1.
offset() { echo $(( RANDOM * 32768 + RANDOM )) | awk -v n="$(stat -c %s "$1")" '{ print $1 % n }'; }

# Spoils checkpoint directory $1 (a copy) one way ($2); says what in $W/what.
spoil() {
    local ck=$1 kind=$2 step=$(( RANDOM % 3 + 2 )) s=$(( RANDOM % 2 ))
    local sub; sub=$(printf '%s/step-%06d' "$ck" "$step")
    local f="$sub/stage$s.w"
    case $kind in
    flip)      printf '\x5a' | dd of="$f" bs=1 seek="$(offset "$f")" conv=notrunc status=none ;;
    truncate)  truncate -s "$(offset "$f")" "$f" ;;
    pad)       printf 'xx' >> "$f" ;;
    delete)    rm -f "$f" ;;
    swap)      cp "$(printf '%s/step-%06d' "$ck" $(( step - 1 )))/stage$s.w" "$f" ;;
    dir)       rm -f "$f"; mkdir "$f" ;;
    fifo)      rm -f "$f"; mkfifo "$f" ;;
    no-manifest)   rm -f "$sub/manifest" ;;
    cut-manifest)  head -n -2 "$sub/manifest" > "$W/m" && cp "$W/m" "$sub/manifest" ;;
    edit-manifest) sed -i 's/^\(file stage0.w [0-9]*\) [0-9a-f]*/\1 deadbeef/' "$sub/manifest" ;;
    fifo-manifest) rm -f "$sub/manifest"; mkfifo "$sub/manifest" ;;
    dir-manifest)  rm -f "$sub/manifest"; mkdir "$sub/manifest" ;;
    empty-manifest) : > "$sub/manifest" ;;
    esac
    echo "$kind at step $step (stage $s)" > "$W/what"
}

KINDS=(flip truncate pad delete swap dir fifo no-manifest cut-manifest edit-manifest
       fifo-manifest dir-manifest empty-manifest)
declare -A tried good bad
total_bad=0
for kind in "${KINDS[@]}"; do
    tried[$kind]=0 good[$kind]=0 bad[$kind]=0
    for _ in $(seq "$TRIES"); do
        rm -rf "$W/try" && mkdir "$W/try" && cp -r "$W/ck" "$W/try/ck"
        spoil "$W/try/ck" "$kind"
        tried[$kind]=$(( tried[$kind] + 1 ))
        "${MPIRUN[@]}" "$PPVM" --backend cpu "$W/plan" --steps 4 --resume "$W/try/ck" \
            --save "$W/try/res" --quiet > "$W/try/log" 2>&1
        rc=$?
        if [ $rc -eq 0 ] && grep -q "resuming from" "$W/try/log" &&
           "$PPVM" --compare "$W/try/res" "$W/full" --atol 0 --rtol 0 > "$W/try/cmp" 2>&1; then
            good[$kind]=$(( good[$kind] + 1 ))
        else
            bad[$kind]=$(( bad[$kind] + 1 ))
            total_bad=$(( total_bad + 1 ))
            echo "BAD: $(cat "$W/what"): exit $rc"; tail -5 "$W/try/log"; cat "$W/try/cmp" 2>/dev/null
        fi
    done
done
printf '%-16s %6s %6s %6s\n' kind tried good bad
for kind in "${KINDS[@]}"; do
    printf '%-16s %6d %6d %6d\n' "$kind" "${tried[$kind]}" "${good[$kind]}" "${bad[$kind]}"
done
[ $total_bad -eq 0 ]
