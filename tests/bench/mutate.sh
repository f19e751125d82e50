#!/usr/bin/env bash
# mutate.sh - the CRC-fixed mutation campaign (issue 16): edit one byte of
# one rank's plan, recompute the CRC (bin/plan_mutate), run 4 ranks under a
# timeout, and classify what ppvm did:
#   refused  exit 1 with a "ppvm:" message
#   crashed  a signal, a sanitizer report, or another exit status
#   hung     still running at the timeout
#   benign   exit 0 and the saved weights equal the unmutated run's
#   WRONG    exit 0 with other weights: a silent wrong run
# Two modes per schedule: "crc" (the edit and a fixed CRC: the issue's
# campaign) and "forge" (also the plan id recomputed over all ranks, so the
# content hash cannot be what refuses it and the meaning checks must).
#
#   tests/bench/mutate.sh [N]    N mutations per schedule and mode (default 40)
#   MUTATE_ONLY="gpipe.pp -D S=2" MUTATE_SEED=7 tests/bench/mutate.sh 10
#                                one schedule (ppc arguments), another seed
#
# Positions: half among the header and table bytes (before the instruction
# table), half among the instruction bytes, seeded so a run is repeatable;
# values: the byte's bits flipped by one of 0x01, 0x02, 0x80, 0xff, or 0.
# Every run is logged, with ppvm's first message, in build/mutate/runs.log.
# Exit status: 0 when no run crashed, hung or went silently wrong.
set -uo pipefail
cd "$(dirname "$0")/../.."
N=${1:-40}
case $N in '' | *[!0-9]*) echo "usage: $0 [N]" >&2; exit 2 ;; esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
MPIRUN="mpirun --oversubscribe --allow-run-as-root --bind-to none"
PPVM="bin/ppvm --backend cpu --steps 2 --quiet"
OUT=build/mutate
make -s all bin/plan_mutate >/dev/null || exit 1
rm -rf "$OUT" && mkdir -p "$OUT"
SCHEDULES=("1f1b.pp -D S=4 -D B=4"
           "zb-h1.pp -D S=4 -D B=4"
           "fsdp.pp -D S=4 -D B=2"
           "ddp.pp -D S=4 -D B=2 --optimizer adamw --precision bf16"
           "lpp.pp")
[ -n "${MUTATE_ONLY:-}" ] && SCHEDULES=("$MUTATE_ONLY") # one schedule, e.g. "gpipe.pp -D S=2"
RANDOM=${MUTATE_SEED:-16}
bad=0
printf '%-48s %-5s %5s %8s %8s %5s %7s %6s\n' schedule mode runs refused crashed hung benign WRONG
for sched in "${SCHEDULES[@]}"; do
    name=$(echo "$sched" | tr ' =' '__')
    base=$OUT/$name
    # shellcheck disable=SC2086
    bin/ppc schedules/$sched -o "$base/plan" -q || { echo "mutate.sh: cannot compile $sched"; exit 1; }
    W=$(ls "$base"/plan/rank*.bin | wc -l)
    timeout 120 $MPIRUN -np "$W" $PPVM "$base/plan" --save "$base/w0" >"$base/base.log" 2>&1 ||
        { echo "mutate.sh: the unmutated $sched does not run"; exit 1; }
    for mode in crc forge; do
        declare -A n=([refused]=0 [crashed]=0 [hung]=0 [benign]=0 [WRONG]=0)
        for ((k = 0; k < N; k++)); do
            r=$((RANDOM % W))
            read -r _ bytes _ code_at < <(bin/plan_mutate layout "$base/plan/rank$r.bin")
            if ((k % 2 == 0)); then at=$((RANDOM % code_at))
            else at=$((code_at + (RANDOM * 32768 + RANDOM) % (bytes - 4 - code_at))); fi
            m=$OUT/m && rm -rf "$m" && cp -r "$base/plan" "$m"
            old=$(bin/plan_mutate set "$m/rank$r.bin" "$at" 0 | head -1)
            flips=(1 2 128 255 0)
            f=${flips[$((RANDOM % 5))]}
            v=$(( f == 0 ? (old == 0 ? 1 : 0) : (old ^ f) ))
            bin/plan_mutate set "$m/rank$r.bin" "$at" "$v" >/dev/null
            if [ "$mode" = forge ]; then bin/plan_mutate forge "$m" "$W" >/dev/null 2>&1; fi
            rm -rf "$OUT/w"
            timeout 60 $MPIRUN -np "$W" $PPVM "$m" --save "$OUT/w" >"$OUT/run.log" 2>&1
            rc=$?
            what=crashed
            if [ $rc = 124 ]; then what=hung
            elif grep -q "Sanitizer\|Segmentation\|signal" "$OUT/run.log"; then what=crashed
            elif [ $rc = 1 ] && grep -q "^ppvm:" "$OUT/run.log"; then what=refused
            elif [ $rc = 0 ]; then
                if bin/ppvm --compare "$base/w0" "$OUT/w" --atol 0 --rtol 0 >/dev/null 2>&1; then what=benign; else what=WRONG; fi
            fi
            n[$what]=$((n[$what] + 1))
            echo "$sched | $mode | rank $r byte $at: $old -> $v | $what | $(grep -m1 '^ppvm' "$OUT/run.log")" >>"$OUT/runs.log"
            if [ "$what" != refused ] && [ "$what" != benign ]; then
                bad=1
                keep=$OUT/found-$name-$mode-$k && cp -r "$m" "$keep" && cp "$OUT/run.log" "$keep/"
                echo "  $what: $sched, $mode, rank $r byte $at: $old -> $v (kept in $keep)"
            fi
        done
        printf '%-48s %-5s %5d %8d %8d %5d %7d %6d\n' "$sched" "$mode" "$N" "${n[refused]}" \
            "${n[crashed]}" "${n[hung]}" "${n[benign]}" "${n[WRONG]}"
        unset n
    done
done
exit $bad
