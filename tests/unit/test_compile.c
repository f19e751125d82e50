/* test_compile.c - the compile driver (compiler/compile.h): it stops at the
 * stage asked for, says why it stopped with the right status, and ppc turns
 * each status into the exit code its README documents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "testutil.h"

static const char *const SRC = "param S = 4\nparam B = 4\nparam W = S\ncompute(s,b,d) = s\n";

/* Each stage fills what it says and nothing after it; the whole compile
 * ends with verified plans and the plan memory in the report. */
START_TEST(stops_where_asked)
{
    pp_compiled c;
    ck_assert_int_eq(compile_text_to(&c, SRC, PP_STAGE_CHECK), PP_COMPILE_OK);
    ck_assert_int_eq(c.reached, PP_STAGE_CHECK);
    ck_assert_int_eq(c.sch.W, 4);
    ck_assert_ptr_null(c.t.worker);
    pp_compiled_free(&c);

    ck_assert_int_eq(compile_text_to(&c, SRC, PP_STAGE_SIMULATE), PP_COMPILE_OK);
    ck_assert_int_eq(c.reached, PP_STAGE_SIMULATE);
    ck_assert_double_eq(c.sim.makespan, 2 * (4 + 4 - 1));
    ck_assert_ptr_null(c.rep.w);
    ck_assert_ptr_null(c.plans);
    pp_compiled_free(&c);

    ck_assert_int_eq(compile_text_to(&c, SRC, PP_STAGE_PLANS), PP_COMPILE_OK);
    ck_assert_int_eq(c.reached, PP_STAGE_PLANS);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_ptr_nonnull(c.plans);
    for (int w = 0; w < 4; w++) {
        ck_assert_int_eq(c.plans[w].rank, w);
        ck_assert_uint_eq(c.rep.w[w].mem_bytes, pp_plan_memory(&c.plans[w]));
        ck_assert_uint_gt(c.rep.w[w].mem_bytes, 0);
    }
    pp_compiled_free(&c);
}
END_TEST

/* Why a compile stopped: the schedule's errors (syntax, deadlock, a memory
 * limit, a bound), a file that cannot be read, each with its message. */
START_TEST(statuses)
{
    pp_compiled c;
    ck_assert_int_eq(compile_text_to(&c, "param S = \n", 0), PP_COMPILE_ERRORS);
    ck_assert_int_ge(c.errors, 1);
    ck_assert_msg(strstr(c.msgs, "t.pp:1:11: error: syntax error"), "%s", c.msgs);
    pp_compiled_free(&c);

    ck_assert_int_eq(compile_text_to(&c,
                                     "param S = 2\nparam B = 2\nparam W = 2\ncompute(s,b,d) = s\n"
                                     "priority(s,b,d) = d == B ? b : 10 + b\norder strict\n",
                                     0),
                     PP_COMPILE_ERRORS);
    ck_assert_int_eq(c.deadlock, 1);
    ck_assert_int_eq(c.reached, PP_STAGE_JOBS);
    ck_assert_msg(strstr(c.msgs, "the strict order deadlocks") &&
                      strstr(c.msgs, "worker 1 waits at B(1,0)"),
                  "%s", c.msgs);
    pp_compiled_free(&c);

    /* the report survives a lowering that fails */
    pp_compile_opts o = pp_compile_defaults();
    o.path = "t.pp";
    o.text = SRC;
    o.len = strlen(SRC);
    o.capture = 1;
    o.mem_limit = 1000;
    ck_assert_int_eq(pp_compile(&o, &c), PP_COMPILE_ERRORS);
    ck_assert_int_eq(c.reached, PP_STAGE_REPORT);
    ck_assert_ptr_nonnull(c.rep.w);
    ck_assert_ptr_null(c.plans);
    ck_assert_msg(strstr(c.msgs, "over --mem-limit 1000"), "%s", c.msgs);
    pp_compiled_free(&c);

    o.mem_limit = 0;
    o.max_jobs = 31;
    ck_assert_int_eq(pp_compile(&o, &c), PP_COMPILE_ERRORS);
    ck_assert_msg(strstr(c.msgs, "the schedule has 32 jobs, more than this compile allows (31)"),
                  "%s", c.msgs);
    pp_compiled_free(&c);

    o.max_jobs = 0;
    o.costs = "/nonexistent/costs.json";
    ck_assert_int_eq(pp_compile(&o, &c), PP_COMPILE_IO);
    ck_assert_msg(strstr(c.msgs, "--costs: /nonexistent/costs.json"), "%s", c.msgs);
    pp_compiled_free(&c);

    o = pp_compile_defaults();
    o.path = "/nonexistent/x.pp";
    o.capture = 1;
    ck_assert_int_eq(pp_compile(&o, &c), PP_COMPILE_IO);
    ck_assert_int_eq(c.reached, PP_STAGE_NONE);
    ck_assert_msg(strstr(c.msgs, "cannot read '/nonexistent/x.pp': No such file or directory"),
                  "%s", c.msgs);
    pp_compiled_free(&c);
}
END_TEST

/* --keep-weights through the driver chooses what ppc reports (the same
 * case as ppc_mem_limit in test_report.c). */
START_TEST(keep_weights)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules/fsdp.pp", PP_ROOT);
    pp_define defs[] = {{"S", 8}, {"B", 4}};
    pp_compile_opts o = pp_compile_defaults();
    o.path = path;
    o.defs = defs;
    o.ndefs = 2;
    o.keep_weights = 1;
    o.mem_limit = 3400000;
    o.capture = 1;
    pp_compiled c;
    ck_assert_msg(pp_compile(&o, &c) == PP_COMPILE_OK, "%s", c.msgs);
    ck_assert_int_eq(c.keep.window, 10);
    ck_assert_int_eq(c.keep.widest, 15);
    ck_assert_str_eq(c.keep_note, "window 10 of 15 jobs, the largest under --mem-limit");
    for (int w = 0; w < c.t.W; w++)
        ck_assert_uint_le(pp_plan_memory(&c.plans[w]), 3400000);
    pp_compiled_free(&c);
}
END_TEST

/* ppc's exit codes: 0 help (and --opcodes), 1 schedule errors, 2 command line, 3 a file
 * that cannot be read, 4 out of memory (a job table too large for the
 * address space ulimit allows). */
START_TEST(ppc_exit_codes)
{
    static const struct {
        const char *args;
        int rc;
        const char *says;
    } cases[] = {
        {"--help", 0, "usage: ppc"},
        {"--opcodes", 0, "| 9 | FetchWeights | receive | SendWeights |"},
        {"schedules/gpipe.pp -o %s -D S=0", 1, "S = 0 is out of range"},
        {"schedules/gpipe.pp -o %s --prefetch", 2,
         "ppc: --prefetch expects a number of jobs from 0 to 1000000, found nothing\n"
         "ppc: see ppc --help"},
        {"/nonexistent/x.pp -o %s", 3, "cannot read '/nonexistent/x.pp'"},
        {"schedules/gpipe.pp -o %s -D S=1000 -D B=20000", 4,
         "error: out of memory for 40000000 jobs"},
    };
    char *dir = temp_dir();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[512], cmd[2048], *out;
        snprintf(args, sizeof args, cases[i].args, dir);
        char lim[128];
        snprintf(cmd, sizeof cmd, "cd %s && %s OPENBLAS_NUM_THREADS=1 ./bin/ppc %s", PP_ROOT,
                 mem_limit(400000, lim, sizeof lim), args);
        int rc = run_cmd(cmd, &out);
        ck_assert_msg(rc == cases[i].rc && strstr(out, cases[i].says),
                      "ppc %s: exit %d, expected %d saying '%s':\n%s", args, rc, cases[i].rc,
                      cases[i].says, out);
        free(out);
    }
    remove_dir(dir);
}
END_TEST

Suite *compile_suite(void)
{
    Suite *s = suite_create("compile");
    TCase *tc = tcase_create("driver");
    tcase_add_test(tc, stops_where_asked);
    tcase_add_test(tc, statuses);
    tcase_add_test(tc, keep_weights);
    tcase_add_test(tc, ppc_exit_codes);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}
