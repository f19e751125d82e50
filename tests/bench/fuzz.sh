#!/usr/bin/env bash
# fuzz.sh - fuzz the whole schedule compiler (ppc's front end and back end)
# with libFuzzer, to show it never crashes, hangs, leaks or hits undefined
# behaviour on any input.
#
#   tests/bench/fuzz.sh [SECONDS]      (default 60)
#   FUZZ_TARGET=fuzz_plan tests/bench/fuzz.sh [SECONDS]
#                                      the plan loader and ppvm's one-rank
#                                      verifier instead (tests/bench/fuzz_plan.c:
#                                      plan bytes, CRC fixed; seeds: compiled
#                                      plans; corpus build/fuzz/corpus-plan)
#   make fuzz FUZZ_SECONDS=N           both, N seconds each
#
# What it does:
#   1. installs clang and libclang-rt-14-dev (the libFuzzer runtime) with
#      apt-get if they are missing, and runs `make all` so build/gen holds the
#      flex/bison front end;
#   2. builds tests/bench/fuzz_frontend.c with the compiler sources under
#      -fsanitize=fuzzer,address,undefined into build/fuzz/fuzz_frontend
#      (make build/fuzz/fuzz_frontend: the Makefile's source lists);
#   3. seeds build/fuzz/seeds from schedules/*.pp plus hand-written edge cases
#      (empty file, unterminated model block, huge numbers, deep nesting...)
#      and writes a dictionary of the language's words and operators to
#      build/fuzz/pp.dict;
#   4. fuzzes for SECONDS with -max_len=4096 -timeout=5. New inputs are kept
#      in build/fuzz/corpus, so later runs continue where this one stopped.
#
# Exit status: 0 when libFuzzer found nothing; non-zero when it found a crash,
# a sanitizer report, a leak, a timeout (hang) or an out-of-memory, in which
# case the reproducer's path is printed (build/fuzz/artifacts/crash-<sha1>,
# leak-..., timeout-..., oom-...). The full log is build/fuzz/fuzz.log.
#
# Reproduce a crash (prints the sanitizer report and the stack):
#   build/fuzz/fuzz_frontend build/fuzz/artifacts/crash-<sha1>
# Minimise it:
#   build/fuzz/fuzz_frontend -minimize_crash=1 -runs=10000 build/fuzz/artifacts/crash-<sha1>
set -euo pipefail

cd "$(dirname "$0")/../.."
DURATION=${1:-60}
case $DURATION in
'' | *[!0-9]*)
    echo "usage: $0 [SECONDS]" >&2
    exit 2
    ;;
esac

OUT=build/fuzz
CC_FUZZ=${CC_FUZZ:-clang}

# ---- tools ------------------------------------------------------------------
missing=""
for p in clang libclang-rt-14-dev flex bison libopenblas-dev; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "fuzz.sh: installing$missing"
    # shellcheck disable=SC2086 # one word per package
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

# ---- generated parser and lexer ---------------------------------------------
if ! make -s all; then
    echo "fuzz.sh: 'make all' failed; generating only the front end" >&2
    make -s build/gen/parser.c build/gen/lexer.c
fi

# ---- build ------------------------------------------------------------------
# The Makefile builds both targets from its own source lists (so a new
# source file cannot leave this script behind, as pp_group_transfers once did).
TARGET=${FUZZ_TARGET:-fuzz_frontend}
case $TARGET in fuzz_frontend | fuzz_plan) ;; *) echo "fuzz.sh: FUZZ_TARGET=$TARGET: expected fuzz_frontend or fuzz_plan" >&2; exit 2 ;; esac
mkdir -p "$OUT/artifacts" "$OUT/corpus"
echo "fuzz.sh: building $OUT/$TARGET"
make -s CC_FUZZ="$CC_FUZZ" "$OUT/$TARGET"

if [ "$TARGET" = fuzz_plan ]; then
    # seeds: the plans of a few small compiles; no dictionary
    CORPUS=$OUT/corpus-plan
    SEEDS=$OUT/seeds-plan
    rm -rf "$SEEDS" && mkdir -p "$SEEDS" "$CORPUS" "$OUT/artifacts-plan"
    for s in "gpipe.pp -D S=2 -D B=2" "zb-h1.pp -D S=2 -D B=2" "fsdp.pp -D S=2 -D B=2" \
             "ddp.pp -D S=2 -D B=2 --optimizer adamw --precision bf16" "gpipe.pp -D S=1 -D B=2" \
             "1f1b-gpt.pp -D S=2 -D B=2"; do
        d=$OUT/plan-seed && rm -rf "$d"
        # shellcheck disable=SC2086 # one word per argument
        bin/ppc schedules/$s -o "$d" -q
        for f in "$d"/rank*.bin; do cp "$f" "$SEEDS/$(echo "$s" | tr ' =' '__')-$(basename "$f")"; done
    done
    LOG=$OUT/fuzz-plan.log
    echo "fuzz.sh: fuzzing $TARGET for ${DURATION}s (log: $LOG)"
    before=$(ls "$OUT/artifacts-plan")
    set +e
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
        "$OUT/fuzz_plan" "$CORPUS" "$SEEDS" -max_len=65536 -timeout=5 -max_total_time="$DURATION" \
        -artifact_prefix="$OUT/artifacts-plan/" -print_final_stats=1 >"$LOG" 2>&1
    rc=$?
    set -e
    grep -E '^#[0-9]+[[:space:]]+[A-Z]+[[:space:]]+cov:' "$LOG" | tail -1 || true
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$LOG" || true
    new=$(comm -13 <(echo "$before" | sort) <(ls "$OUT/artifacts-plan" | sort))
    if [ "$rc" -ne 0 ] || [ -n "$new" ]; then
        echo "fuzz.sh: libFuzzer stopped with status $rc; the end of $LOG:" >&2
        grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$LOG" | head -20 >&2 || true
        for f in $new; do echo "fuzz.sh: reproducer: $OUT/artifacts-plan/$f (run $OUT/fuzz_plan on it)" >&2; done
        exit $((rc ? rc : 1))
    fi
    echo "fuzz.sh: no crash, hang, leak or UB in ${DURATION}s"
    exit 0
fi

# ---- seeds ------------------------------------------------------------------
SEEDS=$OUT/seeds
rm -rf "$SEEDS"
mkdir -p "$SEEDS"
cp schedules/*.pp "$SEEDS/"
seed() { printf '%s' "$2" >"$SEEDS/$1"; }
HEAD=$'param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\n'
seed empty.pp ''
seed newline.pp $'\n'
seed unterminated-model.pp "$HEAD"$'model {\n    context = 8\n    embed = '
seed unterminated-model2.pp "$HEAD"$'model {'
seed unterminated-paren.pp "$HEAD"$'priority(s,b,d) = (b + (s'
seed huge-literal.pp $'param S = 99999999999999999999999999\nparam B = 1000000000000\nparam W = 1\ncompute(s,b,d) = 0\n'
seed huge-overflow.pp "$HEAD"$'let big = 1000000000000 * 1000000000000 * 1000000000000\npriority(s,b,d) = big - -big\n'
seed huge-counts.pp $'param S = 1048576\nparam B = 1048576\nparam W = 65536\ncompute(s,b,d) = s % W\n'
seed limits.pp $'param S = 1048576\nparam B = 47\nparam W = 65536\ncompute(s,b,d) = s % W\n'
seed div-zero.pp "$HEAD"$'priority(s,b,d) = b / (s - s) + b % 0\n'
seed llong-min.pp "$HEAD"$'let m = -9223372 * 1000000000000 - 36854775807 - 1\npriority(s,b,d) = d == F ? (b == 0 ? -m : abs(m)) : (b == 0 ? m / -1 : m % -1 + m - 1)\n'
deep() { local n=$1 open=$2 close=$3 s=""; for ((i = 0; i < n; i++)); do s+=$open; done; s+=1;
         for ((i = 0; i < n; i++)); do s+=$close; done; printf '%s' "$s"; }
seed deep-parens.pp "$HEAD""priority(s,b,d) = $(deep 1900 '(' ')')"$'\n'
seed deep-unary.pp "$HEAD""priority(s,b,d) = $(deep 3800 '-' '')"$'\n'
seed deep-not.pp "$HEAD""priority(s,b,d) = $(deep 3800 '!' '')"$'\n'
seed deep-cond.pp "$HEAD""priority(s,b,d) = $(deep 950 'b?' ':0')"$'\n'
seed deep-calls.pp "$HEAD""priority(s,b,d) = $(deep 800 'abs(' ')')"$'\n'
seed deep-parens-unclosed.pp "$HEAD""priority(s,b,d) = $(deep 3900 '(' '')"
# lets that use the previous let twice: 2^60 evaluations without eval.c's memo
chain() { local s="let a0 = $1"$'\n'; for ((i = 1; i <= 60; i++)); do
          s+="let a$i = min(a$((i - 1)), a$((i - 1)))"$'\n'; done; printf '%s' "$s"; }
seed let-chain.pp $'param S = 2\nparam B = 2\nparam W = 2\n'"$(chain s)"$'\ncompute(s,b,d) = a60\npriority(s,b,d) = a60 / (a60 - s)\n'
seed let-chain-inflight.pp $'param S = 2\nparam B = 2\nparam W = 2\n'"$(chain 1)"$'\ncompute(s,b,d) = s\nlimit inflight = a60\n'
seed bad-calls.pp $'param S = min(1)\nparam B = foo(2)\nparam W = abs(1, 2)\nlet x = max(s)\ncompute(s,b,d) = min(x)\nmodel { batch = min(3) }\n'
seed split-greedy.pp $'param S = 3\nparam B = 4\nparam W = 3\nsplit backward\norder greedy\ncompute(s,b,d) = s\nweights(s,b,d) = s\nlimit inflight = W - w\ncost F = 1\ncost B = 2\ncost W = s + 1\n'
seed inflight-deadlock.pp $'param S = 2\nparam B = 4\nparam W = 2\ncompute(s,b,d) = b % W\nlimit inflight = 1\n'
seed strict-deadlock.pp $'param S = 2\nparam B = 2\nparam W = 1\ncompute(s,b,d) = 0\npriority(s,b,d) = d == F ? -b : b\norder strict\n'
seed ddp-groups.pp $'param S = 2\nparam B = 4\nparam W = 4\ncompute(s,b,d) = b\nweights(s,b,d) = b\nmodel { context = 1; embed = 1; ffn = 1; blocks = 0; batch = 1 }\n'
seed errors.pp $'param S = T\nparam S = 1\nlet s = 2\ncompute(x,y,z) = q + w\norder sideways\nsplit forward\nlimit outflight = 1\ncost X = 0\nmodel { colour = 3; context = 0; context = 5000 }\n@ \x01 \xff\n'
seed directions.pp $'param S = 2\nparam B = 2\nparam W = 3\nlet F = 1\ncompute(s,b,d) = d == W ? 2 : d != B ? F : 0\n'
seed later.pp $'let a = b2\nparam S = 1\nparam B = 1\nparam W = 1\nlet b2 = 1\ncompute(s,b,d) = a\n'

# ---- dictionary ---------------------------------------------------------------
DICT=$OUT/pp.dict
{
    for w in param let compute weights priority order split limit cost model \
        greedy strict backward inflight context embed ffn blocks batch min max abs \
        S B W F s b d w; do
        echo "\"$w\""
    done
    for op in '==' '!=' '<=' '>=' '&&' '||' '<' '>' '+' '-' '*' '/' '%' '!' '?' ':' \
        '=' '(' ')' ',' ';' '{' '}' '#' '//' '(s,b,d)' '1000000000000' '0' '-1'; do
        printf '"%s"\n' "$op"
    done
    printf '"\\x0a"\n'
} >"$DICT"

# ---- fuzz ---------------------------------------------------------------------
LOG=$OUT/fuzz.log
echo "fuzz.sh: fuzzing for ${DURATION}s (log: $LOG)"
before=$(ls "$OUT/artifacts")
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
OPENBLAS_NUM_THREADS=1 \
    "$OUT/fuzz_frontend" "$OUT/corpus" "$SEEDS" -dict="$DICT" \
    -max_len=4096 -timeout=5 -max_total_time="$DURATION" \
    -artifact_prefix="$OUT/artifacts/" -print_final_stats=1 >"$LOG" 2>&1
rc=$?
set -e

grep -E '^#[0-9]+[[:space:]]+INITED' "$LOG" | head -1 || true
grep -E '^#[0-9]+[[:space:]]+[A-Z]+[[:space:]]+cov:' "$LOG" | tail -1 || true
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$LOG" || true
# shellcheck disable=SC2012 # libFuzzer's artifact names are [a-z0-9-]
new=$(comm -13 <(echo "$before" | sort) <(ls "$OUT/artifacts" | sort))
if [ "$rc" -ne 0 ] || [ -n "$new" ]; then
    echo "fuzz.sh: libFuzzer stopped with status $rc; the end of $LOG:" >&2
    grep -E 'ERROR|SUMMARY|runtime error|internal error|Test unit written' "$LOG" | head -20 >&2 || true
    for f in $new; do
        echo "fuzz.sh: reproducer: $OUT/artifacts/$f" >&2
        echo "         run it with: $OUT/fuzz_frontend $OUT/artifacts/$f" >&2
    done
    exit $((rc ? rc : 1))
fi
echo "fuzz.sh: no crash, hang, leak or UB in ${DURATION}s"
