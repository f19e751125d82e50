/* test_cli.c - the cli suite: bad input on every command line and in every
 * input file of ppc and ppvm, table-driven.
 *
 * Each row is one shell command, run in a fixture directory (fixture()
 * below: a compiled plan, saved weights, a FIFO, an empty file, an empty
 * directory, weight files truncated, padded and of the wrong stage, costs
 * files at the extremes, a schedule nested too deeply), with $PPC, $PPVM,
 * $MPIRUN and $AS_OTHER (run as another user: root reads any file, so an
 * unreadable file is tested as user 65534) set, and what it must do: its
 * exit status and a line of its output. Every command has a time bound
 * (CLI_SECONDS; MPIRUN_SECONDS for a row that runs $MPIRUN): a FIFO that blocked a reader, or any
 * other hang, fails the row instead of hanging the suite. A bad command line
 * (status 2) must say what is wrong in one line, plus at most the one-line
 * "see ppc --help" hint: never the usage text.
 *
 * Adding a case is one line: a row of `rows` (any command), or of
 * `num_flags` (a numeric flag: each gets the rows of gen_num_rows). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "testutil.h"

/* Seconds a command may take: they all fail at once, before any work
 * (an mpirun, which starts ranks first, MPIRUN_SECONDS). */
#define CLI_SECONDS 30
#define MPIRUN_SECONDS 120

typedef struct {
    const char *cmd;  /* run in the fixture directory */
    int status;       /* expected exit status */
    const char *says; /* expected in its output */
} cli_row;

/* ---- ppc ------------------------------------------------------------------ */
#define PPC "$PPC gpipe.pp -o out -q"

static const cli_row ppc_rows[] = {
    /* the command line */
    {"$PPC", 2, "ppc: no schedule file given"},
    {"$PPC gpipe.pp", 2, "ppc: no output directory (-o DIR)"},
    {"$PPC '' -o out", 2, "ppc: expected a schedule file, found an empty string"},
    {"$PPC gpipe.pp gpipe.pp -o out", 2,
     "ppc: more than one schedule file ('gpipe.pp' and 'gpipe.pp')"},
    {PPC " --bogus", 2, "ppc: unknown option '--bogus'"},
    {PPC " --prefech 2", 2, "ppc: unknown option '--prefech'; did you mean '--prefetch'?"},
    {"$PPC --version", 0, "ppc (pp) "},
    {"printf 'parm S = 4\\n' > k.pp && $PPC k.pp -o out", 1,
     "k.pp:1:1: error: syntax error, unexpected name 'parm' (did you mean 'param'?)"},
    {"printf 'param S = 2\\nweight(s,b,d) = s\\n' > k.pp && $PPC k.pp -o out", 1,
     "k.pp:2:1: error: syntax error, unexpected name 'weight' (did you mean 'weights'?)"},
    {"printf 'param S = 2\nrecomput when s == 0\n' > k.pp && $PPC k.pp -o out", 1,
     "k.pp:2:1: error: syntax error, unexpected name 'recomput' (did you mean 'recompute'?)"},
    /* --mem-limit with a unit: 1024-based KiB/MiB/GiB, 1000-based KB/MB/GB */
    {PPC " --mem-limit 1MiB", 1, "over --mem-limit 1048576:"},
    {PPC " --mem-limit 1.5KB", 1, "over --mem-limit 1500:"},
    {PPC " --mem-limit '2 GiB' && echo fits", 0, "fits"},
    {PPC " --mem-limit 1.5B", 2, "ppc: --mem-limit expects a number of bytes"},
    {PPC " --mem-limit 1XB", 2, "ppc: --mem-limit expects a number of bytes"},
    {"$PPC gpipe.pp -o", 2, "ppc: -o needs an argument"},
    {"$PPC gpipe.pp -o ''", 2, "ppc: -o: expected a directory, found an empty string"},
    {PPC " -o other", 2, "ppc: -o given twice ('out' and 'other'); give it once"},
    {PPC " -D", 2, "ppc: -D needs an argument"},
    {PPC " -D S", 2, "ppc: -D S: expected NAME=VALUE, e.g. -D S=8"},
    {PPC " -D =4", 2, "ppc: -D =4: expected NAME=VALUE, e.g. -D S=8"},
    {PPC " -D S=", 2, "ppc: -D S=: the value '' is not an integer"},
    {PPC " -D S=x", 2,
     "ppc: -D S=x: the value 'x' is not an integer (expected NAME=INTEGER, e.g. -D S=8)"},
    {PPC " -DS=4.5", 2, "ppc: -D S=4.5: the value '4.5' is not an integer"},
    {PPC " -D S=nan", 2, "ppc: -D S=nan: the value 'nan' is not an integer"},
    {PPC " -D S=99999999999999999999", 2, "the value '99999999999999999999' is not an integer"},
    {PPC " -D S=4 -D S=5", 2, "ppc: -D S=5: S is already given (-D S=4); give each name once"},
    {PPC " -DS=4 -D S=4", 2, "ppc: -D S=4: S is already given (-D S=4); give each name once"},
    {PPC " -D S=0", 1, "S = 0 is out of range"},
    {PPC " -D Q=1", 1, "-D Q=1: the schedule has no param 'Q'"},
    {PPC " --costs", 2, "ppc: --costs needs an argument"},
    {PPC " --costs ''", 2, "ppc: --costs: expected a file, found an empty string"},
    {PPC " --costs a.json --costs b.json", 2, "ppc: --costs given twice ('a.json' and 'b.json')"},
    {PPC " --optimizer", 2, "ppc: --optimizer needs an argument"},
    {PPC " --optimizer sgdx", 2, "ppc: --optimizer sgdx: expected sgd or adamw"},
    {PPC " --optimizer ''", 2, "ppc: --optimizer : expected sgd or adamw"},
    {PPC " --optimizer sgd --optimizer adamw", 2, "ppc: --optimizer given twice; give it once"},
    {PPC " --precision fp16", 2, "ppc: --precision fp16: expected fp32 or bf16"},
    {PPC " --precision bf16 --precision bf16", 2, "ppc: --precision given twice; give it once"},
    {PPC " --library lib", 2, "ppc: --library is only for --table"},
    {"$PPC --table --library ''", 2, "ppc: --library: expected a directory, found an empty string"},
    {"$PPC --table gpipe.pp", 2,
     "ppc: --table takes only -D S/B/G/R and --library, not a schedule file"},
    {"$PPC --table -o out", 2, "ppc: --table takes only -D S/B/G/R and --library, not -o"},
    {"$PPC --table -D X=1", 2, "ppc --table: -D X: expected one of S, B, G, R"},
    {"$PPC --table -D S=0", 2, "ppc --table: -D S=0: expected 1 to 4096"},
    {"$PPC --table -D S=5000", 2, "ppc --table: -D S=5000: expected 1 to 4096"},
    /* input files */
    {"$PPC missing.pp -o out", 3, "error: cannot read 'missing.pp': No such file or directory"},
    {"$PPC fifo -o out", 3,
     "error: cannot read 'fifo': it is a FIFO (named pipe), not a schedule file"},
    {"$PPC emptydir -o out", 3,
     "error: cannot read 'emptydir': it is a directory, not a schedule file"},
    {"$PPC empty -o out", 1, "empty: error: the schedule has no 'compute(s,b,d) = ...'"},
    {"$PPC deep.pp -o out", 1,
     "deep.pp:4:10006: error: nested too deeply: the parser holds at most 10000 pending symbols"},
    {PPC " --costs missing.json", 3,
     "error: --costs: missing.json: cannot open: No such file or directory"},
    {PPC " --costs fifo", 3,
     "error: --costs: fifo: cannot read: it is a FIFO (named pipe), not a costs file"},
    {PPC " --costs emptydir", 3,
     "error: --costs: emptydir: cannot read: it is a directory, not a costs file"},
    /* extreme costs: refused with the range, never an internal error (exit 5) */
    {PPC " --costs F1e15.json", 1,
     "span too wide a range for the simulator's clock: jobs, transfers and optimizer steps add up "
     "to 3.2e+16, 3.2e+16 times the cheapest job's 1; expected at most 1e+12 times"},
    {PPC " --costs latency1e20.json", 1, "add up to 4.8e+21, 4.8e+21 times the cheapest job's 1"},
    {PPC " --costs bandwidth1e-300.json", 1, "span too wide a range for the simulator's clock"},
    {PPC " --costs F1e308.json", 1,
     "the costs (--costs F1e308.json) add up to more than a double holds (1.79769e+308)"},
    {PPC " --costs Fdenormal.json", 1,
     "more than 1.8e+308 times the cheapest job's 4.94066e-324; expected at most 1e+12 times"},
    {PPC " --costs F0.json", 3, "F0.json:1:7: expected a positive cost for \"F\", found 0"},
    /* ... and extremes within the range compile, with finite figures */
    {"$PPC gpipe.pp -o out --costs all1e300.json && grep -m1 makespan out/report.txt", 0, "e+301"},
    {"$PPC gpipe.pp -o out --costs bandwidth1e308.json", 0, "makespan 22, bubble 27.3%"},
    {"$PPC gpipe.pp -o out --costs all1e-300.json", 0, "makespan 2.8e-299"},
};

/* ---- ppvm ----------------------------------------------------------------- */
#define REF "$PPVM --reference plan --steps 1 --quiet"

static const cli_row ppvm_rows[] = {
    /* the command line */
    {"$PPVM", 2, "ppvm: expected one plan (a directory or a rank file)"},
    {"$PPVM plan plan", 2, "ppvm: expected one plan (a directory or a rank file)"},
    {"$PPVM a b c d", 2, "ppvm: unexpected argument 'd'"},
    {"$PPVM --compare w", 2, "ppvm: expected two weight directories after --compare"},
    {REF " --bogus", 2, "ppvm: unknown option '--bogus'"},
    {REF " --step 3", 2, "ppvm: unknown option '--step'; did you mean '--steps'?"},
    {"$PPVM --version", 0, "ppvm (pp) "},
    {REF " --data", 2, "ppvm: --data needs a value"},
    {REF " --data ''", 2, "ppvm: --data: expected a file, found an empty string"},
    {REF " --data a --data b", 2, "ppvm: --data given twice ('a' and 'b'); give it once"},
    {REF " --save ''", 2, "ppvm: --save: expected a directory, found an empty string"},
    {"$PPVM plan --profile ''", 2, "ppvm: --profile: expected a file, found an empty string"},
    {REF " --profile p.json", 2,
     "ppvm: --profile times the ranks of a plan's run; it does not go with --reference"},
    {REF " --backend gpu", 2, "ppvm: --backend gpu: expected cuda or cpu"},
    {REF " --backend ''", 2, "ppvm: --backend : expected cuda or cpu"},
    {REF " --backend cpu --backend cuda", 2, "ppvm: --backend given twice ('cpu' and 'cuda')"},
    {REF " --transport tcp", 2, "ppvm: --transport tcp: expected nccl or mpi"},
    {REF " --backend cpu --transport nccl", 2, "the cpu backend has only the mpi transport"},
    {REF " --epilogues maybe", 2, "ppvm: --epilogues maybe: expected on or off"},
    {REF " --graph maybe", 2, "ppvm: --graph maybe: expected auto, on or off"},
    {REF " --graph on --graph off", 2, "ppvm: --graph given twice ('on' and 'off'); give it once"},
    {"$PPVM plan --checkpoint-dir ''", 2,
     "ppvm: --checkpoint-dir: expected a directory, found an empty string"},
    {"$PPVM plan --resume ''", 2, "ppvm: --resume: expected a directory, found an empty string"},
    {"$PPVM plan --resume a --resume b", 2,
     "ppvm: --resume given twice ('a' and 'b'); give it once"},
    {"$PPVM plan --checkpoint-dir ck", 2, "ppvm: --checkpoint-dir needs --checkpoint-every N"},
    {"$PPVM plan --checkpoint-every 5", 2, "ppvm: --checkpoint-every needs --checkpoint-dir DIR"},
    {"$PPVM plan --reshard", 2, "ppvm: --reshard needs --resume DIR"},
    {REF " --resume ck", 2,
     "ppvm: checkpoints and --resume are for a plan's run under mpirun; they do not go with "
     "--reference"},
    {"$PPVM --compare w w --deterministic", 2,
     "ppvm: --deterministic changes how a run sums its gradients; it does not go with --compare"},
    {"$PPVM plan --deterministic --transport nccl", 2,
     "ppvm: --deterministic moves its per-microbatch gradients with MPI; it takes --transport mpi, "
     "not nccl"},
    {"$PPVM plan --grace 1 --grace 2", 2, "ppvm: --grace given twice ('1' and '2'); give it once"},
    /* the plan */
    {"$PPVM --reference missing --steps 1", 1,
     "ppvm: missing: cannot open: No such file or directory; no such plan directory: ppc "
     "SCHEDULE.pp -o missing compiles one there"},
    {"$PPVM --reference gpipe.pp --steps 1", 1,
     "bad magic: expected \"PPLN\", found 23 20 67 70 (not a pp plan file); 'gpipe.pp' looks "
     "like a schedule: compile it first (ppc gpipe.pp -o out/plan), then run the plan "
     "(bin/pprun out/plan)"},
    {"$PPVM --reference fifo --steps 1", 1,
     "ppvm: fifo: is a FIFO (named pipe), not a plan file (expected a rank<r>.bin that ppc wrote)"},
    {"$PPVM --reference empty --steps 1", 1,
     "ppvm: empty: the file is empty (expected a plan that ppc wrote)"},
    {"$PPVM --reference emptydir --steps 1", 1,
     "ppvm: emptydir: the directory holds no rank0.bin (expected a directory that ppc -o wrote"},
    {"$PPVM --reference short --steps 1", 1, "ppvm: short: bad magic: expected \"PPLN\""},
    {"$MPIRUN -np 2 $PPVM emptydir --steps 1", 1, "emptydir: the directory holds no rank1.bin"},
    /* the data */
    {REF " --data missing", 1, "ppvm: cannot open data file 'missing': No such file or directory"},
    {REF " --data fifo", 1,
     "ppvm: data file 'fifo' is a FIFO (named pipe) (expected a regular file"},
    {REF " --data emptydir", 1,
     "ppvm: data file 'emptydir' is a directory (expected a regular file"},
    {REF " --data empty", 1,
     "ppvm: data file 'empty' is empty (expected raw bytes or an llm.c token shard)"},
    {REF " --data short", 1,
     "ppvm: data file 'short' has 3 bytes; the model's context of 8 needs at least 9"},
    /* as user 65534, ppvm copied into the fixture: the checkout's own path
     * need not be open to that user (CI's is not) */
    {"$AS_OTHER ./ppvm-copy --reference plan --steps 1 --quiet --data unreadable", 1,
     "ppvm: cannot open data file 'unreadable': Permission denied"},
    /* --compare */
    {"$PPVM --compare missing w", 1,
     "ppvm: --compare: cannot use 'missing': No such file or directory (expected a directory that "
     "--save wrote)"},
    {"$PPVM --compare w empty", 1, "ppvm: --compare: 'empty' is a regular file, not a directory"},
    {"$PPVM --compare w fifo", 1,
     "ppvm: --compare: 'fifo' is a FIFO (named pipe), not a directory"},
    {"$PPVM --compare emptydir w", 1, "ppvm: --compare: 'emptydir' holds no stage0.w"},
    {"$PPVM --compare w w_one", 1, "ppvm: w holds 2 stage files but w_one holds 1"},
    {"$PPVM --compare w w_trunc", 1,
     "ppvm: 'w_trunc/stage0.w' is truncated: its header says 70272 elements (281128 bytes with "
     "header and crc) but it has 100 bytes"},
    {"$PPVM --compare w w_pad", 1,
     "ppvm: 'w_pad/stage0.w' is padded: its header says 70272 elements (281128 bytes with header "
     "and crc) but it has 281129 bytes"},
    {"$PPVM --compare w w_stage", 1,
     "ppvm: 'w_stage/stage0.w' holds stage 1 in 4-byte elements; expected stage 0 in fp32"},
    {"$PPVM --compare w w_fifo", 1,
     "ppvm: 'w_fifo/stage0.w' is a FIFO (named pipe), not a weights file"},
    {"$PPVM --compare w w_tiny", 1,
     "ppvm: 'w_tiny/stage0.w' is not a PPWT file (bad magic, or shorter than its header)"},
    {"$PPVM --compare w w", 0, "stage 1: 99456 weights, max |diff| 0 (within tolerance)"},
};

/* ---- pprun (vm/pprun.c) -----------------------------------------------------
 * Its command line, bad plans, and the mpirun line it prints (--dry-run):
 * the rank count from the plan, root, oversubscription when the ranks
 * outnumber the cores (taskset: one core), hosts, the forwarded
 * environment, quoting; and its exit status, mpirun's (a stand-in). */
#define PPRUN_DRY "$PPRUN plan --dry-run"

static const cli_row pprun_rows[] = {
    {"$PPRUN", 2, "pprun: no plan given (pprun PLAN_DIR [ppvm options]; ppc SCHEDULE.pp -o"},
    {"$PPRUN missing", 2,
     "pprun: 'missing': No such file or directory: no such plan directory; compile one with ppc "
     "SCHEDULE.pp -o missing"},
    {"$PPRUN gpipe.pp", 2,
     "pprun: 'gpipe.pp' is a schedule, not a plan: compile it first (ppc gpipe.pp -o out/plan), "
     "then pprun out/plan"},
    {"$PPRUN nothere.pp", 2, "pprun takes a plan that ppc compiled (ppc SCHEDULE.pp -o DIR"},
    {"$PPRUN emptydir", 2,
     "pprun: 'emptydir' holds no rank0.bin: not a plan directory (ppc SCHEDULE.pp -o emptydir "
     "writes one)"},
    {"$PPRUN short", 2, "pprun: short: bad magic"},
    {"$PPRUN plan/rank1.bin", 2, "pprun: 'plan/rank1.bin' is one rank's file of a 2-rank plan"},
    {"$PPRUN --steps 3 plan", 2, "pprun: '--steps' before the plan: give the plan directory first"},
    {"$PPRUN plan --hosts", 2, "pprun: --hosts needs a value (HOST:RANKS,..."},
    {"$PPRUN plan --hosts a:1", 2,
     "pprun: --hosts a:1 gives 1 rank; the plan has 2 (one rank per plan file)"},
    {"$PPRUN plan --hosts a:x,b:1", 2,
     "pprun: --hosts a:x,b:1: 'a:x': expected HOST:RANKS with RANKS a positive integer"},
    {"$PPRUN plan --hosts a:1,", 2, "pprun: --hosts a:1,: a trailing comma"},
    {"$PPRUN plan --hosts a:2 --hosts b:2", 2, "pprun: --hosts given twice; give it once"},
    {"$PPRUN plan --hosts a:2 --hostfile hf", 2,
     "pprun: --hosts and --hostfile both given; give one"},
    /* the line */
    {"env -i PATH=\"$PATH\" $PPRUN plan --dry-run --steps 3 'a b' \"it's\"", 0,
     " --bind-to none -x OPENBLAS_NUM_THREADS=1 "},
    {"env -i PATH=\"$PATH\" $PPRUN plan --dry-run --steps 3 'a b' \"it's\" | sed \"s#$R#R#\"", 0,
     "R/bin/ppvm plan --steps 3 'a b' 'it'\\''s'"},
    {"$PPRUN plan --dry-run", 0, "mpirun -np 2 "},
    {"$PPC gpipe.pp -D S=4 -o four -q && $PPRUN four --dry-run", 0, "mpirun -np 4 "},
    {"echo \"[$(taskset -c 0 $PPRUN plan --dry-run | grep -o ' --oversubscribe --bind-to none "
     "')]\"",
     0, "[ --oversubscribe --bind-to none ]"},
    {"$PPC gpipe.pp -D S=1 -o one -q && echo \"[$(taskset -c 0 $PPRUN one --dry-run | "
     "grep -c oversubscribe)]\"",
     0, "[0]"},
    {"echo \"[$(taskset -c 0 $PPRUN plan --dry-run --hosts a:1,b:1 | grep -c oversubscribe)]\"", 0,
     "[0]"},
    {PPRUN_DRY " --hosts a:1,b:1", 0, " --bind-to none --host a:1,b:1 -x OPENBLAS_NUM_THREADS"},
    {PPRUN_DRY " --hostfile hf", 0, " --bind-to none --hostfile hf -x OPENBLAS_NUM_THREADS"},
    {"OPENBLAS_NUM_THREADS=2 " PPRUN_DRY, 0, " -x OPENBLAS_NUM_THREADS -x"},
    /* OpenBLAS's kernels (vm/blas_core.h): the user's forwarded; where
     * OpenBLAS runs kernels older than the CPU's (forced here to SSE3's),
     * the better ones named; never chosen for other hosts */
    {"OPENBLAS_CORETYPE=Haswell " PPRUN_DRY, 0, " -x OPENBLAS_CORETYPE "},
    {"echo \"[$(OPENBLAS_CORETYPE=Prescott $PPRUN --blas-coretype)]\" | grep -cxE "
     "'\\[(SkylakeX|Haswell)\\]'",
     0, "1"},
    {"echo \"[$(env -u OPENBLAS_CORETYPE " PPRUN_DRY " --hosts a:1,b:1 | grep -c "
     "OPENBLAS_CORETYPE)]\"",
     0, "[0]"},
    /* ppvm started without pprun says so where pprun would have chosen */
    {"w=$(env -u OPENBLAS_CORETYPE $PPRUN --blas-coretype | grep -c .); n=$(env -u "
     "OPENBLAS_CORETYPE $MPIRUN -np 2 $PPVM plan --steps 1 | grep -c '^note: OpenBLAS runs its "
     ".* OPENBLAS_CORETYPE='); echo \"note $n, pprun $w\"; [ \"$n\" = \"$w\" ] && echo agree",
     0, "agree"},
    {"NCCL_DEBUG=INFO " PPRUN_DRY, 0, " -x NCCL_DEBUG "},
    {"PPVM_TEST_KILL=1:1:step " PPRUN_DRY, 0, " -x PPVM_TEST_KILL "},
    /* --allow-run-as-root exactly when root */
    {"a=$(" PPRUN_DRY " | grep -c -- '-np 2 --allow-run-as-root '); "
     "[ $a = $([ $(id -u) = 0 ] && echo 1 || echo 0) ] && echo as-root-iff-root",
     0, "as-root-iff-root"},
    /* the status: mpirun's */
    {"PPRUN_MPIRUN=false $PPRUN plan", 1, "pprun: mpirun exited with status 1"},
    {"PPRUN_MPIRUN=./no-such-mpirun $PPRUN plan", 127, "pprun: cannot run ./no-such-mpirun"},
};

/* ---- numeric flags ---------------------------------------------------------
 * Each gets rows for: a non-number, a value out of range, nan, inf, the
 * empty string, no value, and the flag given twice. */
typedef struct {
    int ppc; /* 1: a ppc flag (after PPC), 0: ppvm's (after --reference plan) */
    const char *flag;
    const char *expects; /* what the message says is expected */
    const char *good, *out_of_range;
} num_flag;

static const num_flag num_flags[] = {
    {1, "--prefetch", "a number of jobs from 0 to 1000000", "2", "1000001"},
    {1, "--mem-limit",
     "a number of bytes (a non-negative integer, or with KiB, MiB, GiB (1024-based) or KB, MB, GB "
     "(1000-based))",
     "100000000", "-1"},
    {1, "--top", "a number of rows from 1 to 1000000", "2", "0"},
    {1, "--layers",
     "the model's blocks (layers) in total, from 1 to 1073741824, or auto(L) for the compiler to "
     "split them",
     "8", "0"},
    {0, "--steps", "an integer in [0, 1e+09]", "1", "1000000001"},
    {0, "--seed", "an integer in [0, 9e+15]", "2", "-1"},
    {0, "--lr", "a number in [1e-12, 1000]", "0.1", "0"},
    {0, "--weight-decay", "a number in [0, 1000]", "0.1", "-0.5"},
    {0, "--adam-eps", "a number in [1e-30, 1]", "1e-8", "2"},
    {0, "--adam-beta2", "a number in [0, 0.999999]", "0.95", "1"},
    {0, "--warmup", "an integer in [0, 1e+09]", "2", "-1"},
    {0, "--atol", "a number in [0, 1]", "1e-5", "1.5"},
    {0, "--rtol", "a number in [0, 1]", "1e-4", "-1"},
    {0, "--timeout", "a number in [0.001, 1e+09]", "60", "0"},
    {0, "--loss-digits", "an integer in [0, 12]", "4", "13"},
    {0, "--grace", "a number in [0.001, 1e+09]", "30", "0"},
    {0, "--checkpoint-every", "an integer in [1, 1e+09]", "10", "0"},
    {0, "--checkpoint-keep", "an integer in [1, 1e+09]", "2", "0"},
};

/* The rows of one numeric flag into out[] (7 of them; strings in buf). */
static int gen_num_rows(const num_flag *f, cli_row *out, char (*buf)[2][256])
{
    static const char *bad[] = {"x", NULL, "nan", "inf", "''"};
    const char *base = f->ppc ? PPC : "$PPVM --reference plan --quiet",
               *tool = f->ppc ? "ppc" : "ppvm";
    int n = 0;
    for (int k = 0; k < 5; k++, n++) {
        const char *v = bad[k] ? bad[k] : f->out_of_range;
        const char *shown = strcmp(v, "''") ? v : "";
        snprintf(buf[n][0], 256, "%s %s %s", base, f->flag, v);
        if (f->ppc)
            snprintf(buf[n][1], 256, "ppc: %s expects %s, found '%s'", f->flag, f->expects, shown);
        else
            snprintf(buf[n][1], 256, "ppvm: %s %s: expected %s", f->flag, shown, f->expects);
    }
    snprintf(buf[n][0], 256, "%s %s", base, f->flag); /* no value */
    if (f->ppc)
        snprintf(buf[n][1], 256, "ppc: %s expects %s, found nothing", f->flag, f->expects);
    else
        snprintf(buf[n][1], 256, "ppvm: %s needs a value", f->flag);
    n++;
    snprintf(buf[n][0], 256, "%s %s %s %s %s", base, f->flag, f->good, f->flag, f->good);
    snprintf(buf[n][1], 256, "%s: %s given twice", tool, f->flag);
    n++;
    for (int k = 0; k < n; k++)
        out[k] = (cli_row){buf[k][0], 2, buf[k][1]};
    return n;
}

/* ---- the fixture and the runner ------------------------------------------- */

/* A directory holding every input the rows use; the caller removes it. */
static char *fixture(void)
{
    char *dir = temp_dir(), cmd[4096];
    snprintf(cmd, sizeof cmd,
             "set -e; cd %s; chmod 755 .; R=%s; export OPENBLAS_NUM_THREADS=1\n"
             "cp $R/schedules/gpipe.pp .\n"
             "$R/bin/ppc gpipe.pp -D S=2 -D B=2 -o plan -q\n"
             "$R/bin/" PPVM " --reference plan --steps 0 --save w --quiet\n"
             "mkfifo fifo; : > empty; mkdir emptydir; printf abc > short\n"
             "printf 'bytes enough for a window of context' > unreadable; chmod 000 unreadable\n"
             "cp $R/bin/" PPVM " ppvm-copy; chmod 755 ppvm-copy\n"
             "cp -r w w_trunc; head -c 100 w/stage0.w > w_trunc/stage0.w\n"
             "cp -r w w_pad; printf x >> w_pad/stage0.w\n"
             "cp -r w w_stage; cp w/stage1.w w_stage/stage0.w\n"
             "cp -r w w_one; rm w_one/stage1.w\n"
             "cp -r w w_tiny; printf PPW > w_tiny/stage0.w\n"
             "mkdir w_fifo; mkfifo w_fifo/stage0.w; cp w/stage1.w w_fifo/\n"
             "echo '{\"F\": 1e15}' > F1e15.json; echo '{\"latency\": 1e20}' > latency1e20.json\n"
             "echo '{\"bandwidth\": 1e-300}' > bandwidth1e-300.json\n"
             "echo '{\"F\": 1e308}' > F1e308.json; echo '{\"F\": 5e-324}' > Fdenormal.json\n"
             "echo '{\"F\": 0}' > F0.json; echo '{\"bandwidth\": 1e308}' > bandwidth1e308.json\n"
             "echo '{\"F\": 1e300, \"B\": 1e300}' > all1e300.json\n"
             "echo '{\"F\": 1e-300, \"B\": 1e-300, \"latency\": 1e-300}' > all1e-300.json\n"
             "{ printf 'param S = 2\\nparam B = 2\\nparam W = S\\ncompute(s,b,d) = '\n"
             "  head -c 12000 /dev/zero | tr '\\0' '-'\n"
             "  printf 's\\nweights(s,b,d) = s\\npriority(s,b,d) = b\\n'; } > deep.pp\n",
             dir, PP_ROOT);
    free(run_expect(cmd, 0));
    return dir;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Runs every row in dir; each failure is collected, then all are reported. */
static void run_rows(const char *dir, const cli_row *rows, int n)
{
    size_t cap = 1 << 16, len = 0;
    char *fails = calloc(cap, 1);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        const cli_row *r = &rows[i];
        char cmd[4096];
        snprintf(cmd, sizeof cmd,
                 "cd %s && export R=%s PPC=%s/bin/ppc PPVM=%s/bin/" PPVM " PPRUN=%s/bin/pprun "
                 "OPENBLAS_NUM_THREADS=1 "
                 "MPIRUN='mpirun --oversubscribe --allow-run-as-root --bind-to none' "
                 "AS_OTHER=$([ $(id -u) = 0 ] && echo 'setpriv --reuid=65534 --regid=65534 "
                 "--clear-groups'); %s",
                 dir, PP_ROOT, PP_ROOT, PP_ROOT, PP_ROOT, r->cmd);
        proc_result p;
        run_proc(cmd, strstr(r->cmd, "$MPIRUN") ? MPIRUN_SECONDS : CLI_SECONDS, &p);
        const char *why = NULL;
        if (p.timed_out)
            why = "did not finish in time (a hang)";
        else if (p.status != r->status)
            why = "exited with the wrong status";
        else if (!strstr(p.out, r->says))
            why = "did not say what was expected";
        else if (r->status == 2 && (strstr(p.out, "usage:") || count_lines(p.out) > 2))
            why = "printed more than the one-line error and hint";
        if (why && len + 4096 < cap) {
            char *story = proc_story(&p, 4);
            len += (size_t)snprintf(fails + len, cap - len,
                                    "\n%s\n  %s: expected status %d saying \"%s\"; it %s", r->cmd,
                                    why, r->status, r->says, story);
            free(story);
            failed++;
        }
        proc_free(&p);
    }
    ck_assert_msg(!failed, "%d of %d rows failed:%s", failed, n, fails);
    free(fails);
}

#define NROWS(a) ((int)(sizeof(a) / sizeof(a)[0]))

START_TEST(ppc_bad_input)
{
    char *dir = fixture();
    run_rows(dir, ppc_rows, NROWS(ppc_rows));
    remove_dir(dir);
}
END_TEST

START_TEST(ppvm_bad_input)
{
    char *dir = fixture();
    run_rows(dir, ppvm_rows, NROWS(ppvm_rows));
    remove_dir(dir);
}
END_TEST

START_TEST(pprun_command_line)
{
    char *dir = fixture();
    run_rows(dir, pprun_rows, NROWS(pprun_rows));
    remove_dir(dir);
}
END_TEST

START_TEST(numeric_flags)
{
    char *dir = fixture();
    cli_row rows[NROWS(num_flags) * 7];
    static char buf[NROWS(num_flags) * 7][2][256];
    int n = 0;
    for (int i = 0; i < NROWS(num_flags); i++)
        n += gen_num_rows(&num_flags[i], rows + n, buf + n);
    run_rows(dir, rows, n);
    remove_dir(dir);
}
END_TEST

/* Each TCase runs as a job of its own (check_main.c), so the three run at
 * once: most of their time is starting ppvm (about 0.15 s, its CUDA and
 * MPI libraries), one command after another. ppvm's runs one mpirun of 2
 * ranks. */
const pp_tcase_info cli_tcases[] = {
    {"ppc", 1}, {"ppvm", 2}, {"numeric", 1}, {"pprun", 1}, {NULL, 0}};

Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    const TTest *const tests[] = {ppc_bad_input, ppvm_bad_input, numeric_flags, pprun_command_line};
    for (int i = 0; cli_tcases[i].tcase; i++) {
        TCase *tc = tcase_create(cli_tcases[i].tcase);
        tcase_add_test(tc, tests[i]);
        tcase_set_timeout(tc, 300);
        suite_add_tcase(s, tc);
    }
    return s;
}
