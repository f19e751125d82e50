/* test_pictures.c - the pictures suite: when ppc draws timeline.svg and
 * trace.json (compiler/README.md, "Pictures").
 *
 * Without --pictures or --no-pictures they are drawn up to 100000 jobs
 * and skipped above (a million-job schedule's are hundreds of MB, issue
 * 18); a skipped picture of an earlier compile into the same directory is
 * removed, as it would not match the new report; --pictures draws them at
 * any size; the two flags together, or --pictures with --search, are
 * usage errors. And the rank files, written by several threads: one that
 * cannot be written fails the compile with no rank file left. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "suites.h"
#include "testutil.h"

#define PPC PP_ROOT "/bin/ppc " PP_ROOT "/schedules/1f1b.pp"

static int exists(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/plan/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* 1F1B at S=2 and B microbatches into dir/plan with extra flags; returns
 * ppc's output. */
static char *compile_b(const char *dir, int B, const char *flags)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, PPC " -D S=2 -D B=%d -o %s/plan %s", B, dir, flags);
    return run_expect(cmd, 0);
}

/* 100000 jobs (S=2, B=25000) are drawn; 100004 (B=25001) are not, the
 * summary says why, and the pictures of the compile before are gone. */
START_TEST(pictures_skipped_above_the_limit_by_default)
{
    char *dir = temp_dir();
    char *out = compile_b(dir, 25000, "");
    ck_assert_msg(strstr(out, "report.json, timeline.svg, trace.json, rank0..1"), "%s", out);
    ck_assert(exists(dir, "timeline.svg") && exists(dir, "trace.json"));
    free(out);
    out = compile_b(dir, 25001, "");
    ck_assert_msg(strstr(out, "wrote ") &&
                      strstr(out, "/report.txt, report.json, rank0..1.{bin,txt}"),
                  "%s", out);
    ck_assert_msg(strstr(out, "  no timeline.svg or trace.json: 100004 jobs, more than 100000 "
                              "(--pictures draws them)\n"),
                  "%s", out);
    ck_assert(!exists(dir, "timeline.svg") && !exists(dir, "trace.json"));
    ck_assert(exists(dir, "report.json") && exists(dir, "rank1.txt"));
    free(out);
    remove_dir(dir);
}
END_TEST

START_TEST(pictures_flag_draws_any_size)
{
    char *dir = temp_dir();
    free(compile_b(dir, 25001, "--pictures -q"));
    ck_assert(exists(dir, "timeline.svg") && exists(dir, "trace.json"));
    /* --no-pictures removes them too: they were of the compile before */
    char *out = compile_b(dir, 4, "--no-pictures");
    ck_assert(!exists(dir, "timeline.svg") && !exists(dir, "trace.json"));
    ck_assert_msg(!strstr(out, "no timeline.svg"), "%s", out); /* asked for: no note */
    free(out);
    remove_dir(dir);
}
END_TEST

START_TEST(pictures_flags_usage_errors)
{
    char *out = run_expect(PPC " -o /nonexistent/x --pictures --no-pictures", 2);
    ck_assert_msg(strstr(out, "ppc: --pictures and --no-pictures contradict each other; give "
                              "one\n"),
                  "%s", out);
    free(out);
    out = run_expect(PP_ROOT "/bin/ppc --no-pictures --pictures -o /nonexistent/x", 2);
    ck_assert_msg(strstr(out, "contradict each other"), "%s", out);
    free(out);
    out = run_expect(PP_ROOT "/bin/ppc --search -D W=4 -D B=8 --pictures", 2);
    ck_assert_msg(strstr(out, "ppc: --search prints a table and writes no report or plan; "
                              "expected no --pictures\n"),
                  "%s", out);
    free(out);
}
END_TEST

/* The rank files are written by several threads: when one cannot be
 * written (the temporary file rank2.bin is written through is a directory
 * here, and rank2.bin of the earlier compile is gone), ppc names it, exits
 * 3, and leaves no rank file of this compile or the one before, whichever
 * thread wrote them (the earlier compile's rank2.txt to rank7 were left
 * behind before issue 18: the clean-up stopped at the missing rank2.bin). */
START_TEST(rank_file_failure_leaves_none)
{
    char *dir = temp_dir(), cmd[2048];
    snprintf(cmd, sizeof cmd,
             PP_ROOT "/bin/ppc " PP_ROOT "/schedules/1f1b.pp -D S=8 -D B=16 "
                     "-o %s/plan -q",
             dir);
    free(run_expect(cmd, 0));
    ck_assert(exists(dir, "rank7.bin") && exists(dir, "rank2.txt"));
    snprintf(cmd, sizeof cmd, "rm %s/plan/rank2.bin && mkdir %s/plan/rank2.bin.tmp", dir, dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd,
             PP_ROOT "/bin/ppc " PP_ROOT "/schedules/1f1b.pp -D S=8 -D B=16 "
                     "-o %s/plan -q",
             dir);
    char *out = run_expect(cmd, 3);
    ck_assert_msg(strstr(out, "/plan/rank2.bin.tmp: cannot create: Is a directory\n"), "%s", out);
    free(out);
    char name[32];
    for (int r = 0; r < 8; r++) {
        snprintf(name, sizeof name, "rank%d.bin", r);
        ck_assert_msg(!exists(dir, name), "%s is left", name);
        snprintf(name, sizeof name, "rank%d.txt", r);
        ck_assert_msg(!exists(dir, name), "%s is left", name);
    }
    ck_assert(exists(dir, "report.json")); /* the report stands, as after any late failure */
    remove_dir(dir);
}
END_TEST

Suite *pictures_suite(void)
{
    Suite *s = suite_create("pictures");
    TCase *tc = tcase_create("pictures");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, pictures_skipped_above_the_limit_by_default);
    tcase_add_test(tc, pictures_flag_draws_any_size);
    tcase_add_test(tc, pictures_flags_usage_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("rank_files");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, rank_file_failure_leaves_none);
    suite_add_tcase(s, tc);
    return s;
}
