/* test_vmbench.c - ppvm --no-compute, the interpreter's benchmark mode
 * (vm/vmbench.h, vm/README.md "Benchmark mode"): what it prints (step
 * lines without a loss, then a table of ns per instruction by opcode and
 * family; with no step, none), that its counters add up to the plans'
 * instructions, opcode by opcode, on one rank and under mpirun on 2 and 4 ranks (transfers,
 * weights, collectives, groups), and its error paths: the flags it does
 * not go with, PP_INJECT_NAN, and ranks started in different modes.
 *
 * The vmbench suite runs mpirun; it is not among make check's fast
 * suites. No timing is asserted: only that times are numbers >= 0. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../isa/ops.h"
#include "../../isa/plan.h"
#include "suites.h"
#include "testutil.h"

#define MPIRUN_CMD "mpirun --oversubscribe --allow-run-as-root --bind-to none"

/* Each opcode's count in the plans rank0.bin .. rank<np-1>.bin of dir/plan,
 * added into count[]; returns the instructions in all. */
static long plan_counts(const char *dir, int np, long *count)
{
    long total = 0;
    for (int r = 0; r < np; r++) {
        char path[1024], err[512];
        pp_plan p;
        snprintf(path, sizeof path, "%s/plan/rank%d.bin", dir, r);
        ck_assert_msg(pp_plan_read(path, &p, err, sizeof err) == PP_PLAN_OK, "%s: %s", path, err);
        for (uint32_t i = 0; i < p.ninstr; i++)
            count[p.code[i].op]++;
        total += p.ninstr;
        pp_plan_free(&p);
    }
    return total;
}

/* The table ppvm --no-compute printed: every row's per-step count must
 * equal the plans' (an opcode row that opcode's count, a family's "*" row
 * the sum of its opcodes, "all" every instruction), every opcode the plans
 * hold must have its row, and every time must be a number >= 0 with the
 * waiting part no more than the whole. `steps` counted steps expected. */
static void check_table(const char *out, const char *dir, int np, int steps)
{
    long want[PP_OP_COUNT] = {0}, seen[PP_OP_COUNT] = {0}, fam_sum[8] = {0};
    const char *fams[] = {"compute", "optimizer",  "transfer",
                          "weights", "collective", "bookkeeping"};
    long total = plan_counts(dir, np, want);
    char head[128];
    snprintf(head, sizeof head, "no-compute: %d rank%s, %d step%s counted", np, np == 1 ? "" : "s",
             steps, steps == 1 ? "" : "s");
    ck_assert_msg(strstr(out, head), "no '%s' in:\n%s", head, out);
    const char *t = strstr(out, "\nfamily ");
    ck_assert_msg(t, "no table header in:\n%s", out);
    int rows = 0, all_rows = 0;
    for (const char *line = strchr(t + 1, '\n') + 1; *line && strncmp(line, "plan:", 5);
         line = strchr(line, '\n') + 1) {
        char fam[32], op[32];
        long n;
        double ns, wait, slowest;
        ck_assert_msg(
            sscanf(line, "%31s %31s %ld %lf %lf %lf", fam, op, &n, &ns, &wait, &slowest) == 6,
            "a row that is not 'family opcode n ns wait "
            "slowest': %.80s",
            line);
        ck_assert_msg(ns >= 0 && wait >= 0 && wait <= ns + 0.05 && slowest >= 0,
                      "times out of range: %.80s", line);
        int f = -1;
        for (int k = 0; k < 6; k++)
            if (!strcmp(fam, fams[k]))
                f = k;
        if (!strcmp(fam, "all")) {
            ck_assert_msg(n == total, "all: %ld a step, but the plans hold %ld", n, total);
            all_rows++;
        } else if (!strcmp(op, "*")) {
            ck_assert_msg(f >= 0, "unknown family %s", fam);
            ck_assert_msg(n == fam_sum[f], "%s *: %ld a step, but its opcodes' rows add up to %ld",
                          fam, n, fam_sum[f]);
        } else {
            int code = -1;
            for (int o = 0; o < PP_OP_COUNT; o++)
                if (!strcmp(op, pp_op_name(o)))
                    code = o;
            ck_assert_msg(code >= 0 && f >= 0, "unknown row %s %s", fam, op);
            ck_assert_msg(n == want[code], "%s: %ld a step, but the plans hold %ld", op, n,
                          want[code]);
            seen[code] = 1;
            fam_sum[f] += n;
        }
        rows++;
    }
    ck_assert_int_eq(all_rows, 1);
    ck_assert_int_gt(rows, 2);
    for (int o = 0; o < PP_OP_COUNT; o++)
        ck_assert_msg(!want[o] || seen[o], "the plans hold %ld %s but the table has no row",
                      want[o], pp_op_name(o));
    char plan_line[128];
    snprintf(plan_line, sizeof plan_line, "plan: %ld instructions a step on all ranks", total);
    ck_assert_msg(strstr(out, plan_line), "no '%s' in:\n%s", plan_line, out);
}

/* What every step line says: no loss, no samples/s (nothing was trained). */
static void check_step_lines(const char *out, int steps)
{
    int n = 0;
    for (const char *l = out; (l = strstr(l, "\nstep ")); l++) {
        const char *end = strchr(l + 1, '\n');
        ck_assert_msg(strstr(l, "no compute") && strstr(l, "no compute") < end,
                      "a step line without 'no compute': %.80s", l + 1);
        n++;
    }
    ck_assert_int_eq(n, steps);
    ck_assert_msg(!strstr(out, "loss") && !strstr(out, "samples/s"),
                  "--no-compute claims a loss or a rate:\n%s", out);
    ck_assert_msg(strstr(out, "no compute (benchmark mode: no kernel runs, every message is 4 "
                              "bytes)"),
                  "the start-up line does not say the mode:\n%s", out);
}

/* One rank, no mpirun: gpipe S=1 (F, B, LoadMicroBatch, OptimizerStep) and
 * depth-first with 4 stages on one rank; nothing waits on one rank. */
START_TEST(one_rank)
{
    const char *cases[][2] = {{"gpipe.pp", "-D S=1 -D B=8"},
                              {"depth-first.pp", "-D W=1 -D S=4 -D B=4"}};
    for (int c = 0; c < 2; c++) {
        char *dir = compile_plan(cases[c][0], cases[c][1]), cmd[1024];
        snprintf(cmd, sizeof cmd, "%s/bin/%s --no-compute --steps 3 %s/plan/rank0.bin", PP_ROOT,
                 PPVM, dir);
        char *out = run_expect(cmd, 0);
        check_step_lines(out, 3);
        check_table(out, dir, 1, 2);
        ck_assert_msg(strstr(out, "(the first step warms up and is not)"), "%s", out);
        ck_assert_msg(!strstr(out, "transfer ") && !strstr(out, "collective "),
                      "a rank of its own moved data:\n%s", out);
        free(out);
        /* one step: it is counted (there is no other) */
        snprintf(cmd, sizeof cmd, "%s/bin/%s --no-compute --steps 1 --quiet %s/plan/rank0.bin",
                 PP_ROOT, PPVM, dir);
        out = run_expect(cmd, 0);
        check_table(out, dir, 1, 1);
        ck_assert_msg(!strstr(out, "\nstep "), "--quiet printed step lines:\n%s", out);
        free(out);
        /* no step: nothing counted, no table */
        snprintf(cmd, sizeof cmd, "%s/bin/%s --no-compute --steps 0 %s/plan/rank0.bin", PP_ROOT,
                 PPVM, dir);
        out = run_expect(cmd, 0);
        ck_assert_msg(strstr(out, "no-compute: 1 rank, 0 steps counted;") &&
                          strstr(out, "\nno step ran: nothing was counted\n") &&
                          !strstr(out, "\nfamily "),
                      "%s", out);
        free(out);
        remove_dir(dir);
    }
}
END_TEST

/* Under mpirun: transfers (1f1b, zb-h1's split backward), a collective
 * (pp-dp's ReduceGrads) on 2 ranks; weights fetched and returned in
 * transfer groups (pp-fsdp) on 4. Each rank's counters reach rank 0's
 * table, opcode by opcode. */
START_TEST(ranks_add_up)
{
    const struct {
        const char *file, *defs;
        int np;
        const char *family; /* a family the run must show */
    } cases[] = {{"1f1b.pp", "-D S=2 -D B=4", 2, "transfer"},
                 {"zb-h1.pp", "-D S=2 -D B=4", 2, "transfer"},
                 {"pp-dp.pp", "-D S=1 -D D=2 -D B=4", 2, "collective"},
                 {"pp-fsdp.pp", "-D P=2 -D D=2 -D B=4", 4, "weights"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *dir = compile_plan(cases[c].file, cases[c].defs), args[1024];
        snprintf(args, sizeof args, "%s/plan --no-compute --steps 3", dir);
        char *out = mpi_ok(cases[c].np, args);
        check_step_lines(out, 3);
        check_table(out, dir, cases[c].np, 2);
        char row[64];
        snprintf(row, sizeof row, "\n%-12s *", cases[c].family);
        ck_assert_msg(strstr(out, row), "%s %s: no %s row:\n%s", cases[c].file, cases[c].defs,
                      cases[c].family, out);
        free(out);
        remove_dir(dir);
    }
}
END_TEST

/* Flags that need training, a loss or measured costs: exit 2 and one line
 * naming the flag, before anything runs. */
START_TEST(flag_errors)
{
    static const char *const bad[][2] = {
        {"--save /tmp/x", "--save"},
        {"--profile /tmp/x.json", "--profile"},
        {"--checkpoint-every 1 --checkpoint-dir /tmp/x", "--checkpoint-every"},
        {"--resume /tmp/x", "--resume"},
        {"--deterministic", "--deterministic"},
        {"--skip-nonfinite", "--skip-nonfinite"},
        {"--reference", "--reference"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[1024], want[256];
        snprintf(cmd, sizeof cmd, "%s/bin/%s --no-compute %s plan", PP_ROOT, PPVM, bad[i][0]);
        char *out = run_expect(cmd, 2);
        snprintf(want, sizeof want,
                 "ppvm: --no-compute runs no kernel and trains nothing (a "
                 "benchmark of the interpreter); it does not go with %s\n",
                 bad[i][1]);
        ck_assert_msg(strstr(out, want), "%s: expected '%s' in:\n%s", cmd, want, out);
        free(out);
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/bin/%s --no-compute --compare a b", PP_ROOT, PPVM);
    char *out = run_expect(cmd, 2);
    ck_assert_msg(strstr(out, "it does not go with --compare\n"), "%s", out);
    free(out);
    /* the test hook has nothing to put a NaN into: every rank exits 1 */
    char *dir = compile_plan("gpipe.pp", "-D S=1 -D B=2");
    snprintf(cmd, sizeof cmd,
             "PP_INJECT_NAN=1:0:0 %s/bin/%s --no-compute --steps 1 "
             "%s/plan/rank0.bin",
             PP_ROOT, PPVM, dir);
    out = run_expect(cmd, 1);
    ck_assert_msg(strstr(out, "ppvm: rank 0: PP_INJECT_NAN: --no-compute computes nothing to put "
                              "a NaN into (unset it, or drop --no-compute)"),
                  "%s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* One rank with --no-compute and one without (mpirun's two app contexts):
 * their messages would not fit each other's; every rank exits 1, rank 0
 * saying why, before any step. */
START_TEST(mixed_modes_refused)
{
    char *dir = compile_plan("1f1b.pp", "-D S=2 -D B=2"), cmd[2048];
    snprintf(cmd, sizeof cmd,
             MPIRUN_CMD " -np 1 %s/bin/%s --no-compute --steps 1 %s/plan : "
                        "-np 1 %s/bin/%s --steps 1 %s/plan",
             PP_ROOT, PPVM, dir, PP_ROOT, PPVM, dir);
    proc_result r;
    run_proc(cmd, MPIRUN_TIMEOUT, &r);
    ck_assert_msg(!r.timed_out && r.status != 0, "%s: expected a failure, got:\n%s", cmd, r.out);
    ck_assert_msg(strstr(r.out, "ppvm: rank 0: --no-compute was given to some ranks and not to "
                                "others (expected one command line for every rank)"),
                  "%s", r.out);
    ck_assert_msg(!strstr(r.out, "\nstep "), "a step ran:\n%s", r.out);
    proc_free(&r);
    remove_dir(dir);
}
END_TEST

#define VMBENCH_TESTS(X)                                                                           \
    X(one_rank, 1)                                                                                 \
    X(ranks_add_up, 4)                                                                             \
    X(flag_errors, 1)                                                                              \
    X(mixed_modes_refused, 2)

PP_JOB_SUITE(vmbench, VMBENCH_TESTS)
