/* test_harness.c - the tests' own machinery (testutil.c): a subprocess's
 * failure is told as what it was (exit status, signal, timeout, last
 * lines), nothing outlives its limit or its command, and what each mpirun
 * rank reported is read back. The mpirun side (a launcher failing after
 * every rank succeeded is run again once) is in the e2e suite. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "suites.h"
#include "testutil.h"

START_TEST(exit_status_told)
{
    proc_result r;
    ck_assert_int_eq(run_proc("echo one; echo two; exit 3", 10, &r), 3);
    ck_assert_int_eq(r.signal, 0);
    ck_assert_int_eq(r.timed_out, 0);
    char *s = proc_story(&r, 20);
    ck_assert_str_eq(s, "exited with status 3; its output:\none\ntwo\n");
    free(s);
    s = proc_story(&r, 1);
    ck_assert_str_eq(s, "exited with status 3; the last lines of its output:\ntwo\n");
    free(s);
    proc_free(&r);
    ck_assert_int_eq(run_proc("exit 0", 10, &r), 0);
    s = proc_story(&r, 5);
    ck_assert_str_eq(s, "exited with status 0, printing nothing");
    free(s);
    proc_free(&r);
}
END_TEST

START_TEST(signal_told)
{
    proc_result r;
    ck_assert_int_eq(run_proc("echo before; kill -SEGV $$", 10, &r), 128 + SIGSEGV);
    ck_assert_int_eq(r.signal, SIGSEGV);
    char *s = proc_story(&r, 5);
    ck_assert_msg(strstr(s, "was killed by signal 11 (Segmentation fault)") && strstr(s, "before"),
                  "%s", s);
    free(s);
    proc_free(&r);
    /* run_cmd's callers print its output: the output says so too */
    char *out;
    ck_assert_int_eq(run_cmd("echo before; kill -SEGV $$", &out), 128 + SIGSEGV);
    ck_assert_str_eq(out, "before\n[was killed by signal 11 (Segmentation fault)]\n");
    free(out);
}
END_TEST

/* A command past its limit is killed, with everything it started, and
 * says so; the limit is scaled by CK_TIMEOUT_MULTIPLIER. */
START_TEST(timeout_kills_and_tells)
{
    proc_result r;
    ck_assert_int_eq(run_proc("echo started; sleep 60 & sleep 60; echo never", 1, &r), 124);
    ck_assert_int_eq(r.timed_out, 1);
    ck_assert_msg(r.seconds < r.timeout + 8, "took %.1f s to kill", r.seconds);
    char *s = proc_story(&r, 5), want[128];
    snprintf(want, sizeof want, "did not finish within %d s and was killed; its output:\nstarted\n",
             r.timeout);
    ck_assert_str_eq(s, want);
    free(s);
    proc_free(&r);
    char *out;
    ck_assert_int_eq(run_cmd("true", &out), 0);
    ck_assert_str_eq(out, "");
    free(out);
}
END_TEST

/* A process that leaves the command's process group (as MPI ranks may)
 * and outlives the command is killed when the command ends. */
START_TEST(nothing_outlives_its_command)
{
    proc_result r;
    ck_assert_int_eq(run_proc("setsid sleep 300 >/dev/null 2>&1 & echo $!", 10, &r), 0);
    pid_t pid = (pid_t)atol(r.out);
    ck_assert_int_gt(pid, 0);
    proc_free(&r);
    int gone = 0;
    for (int i = 0; i < 500 && !gone; i++) { /* 5 s: a loaded machine reaps slowly */
        char path[64], state = 0;
        snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
        FILE *f = fopen(path, "r");
        gone = !f || (fscanf(f, "%*d %*s %c", &state) == 1 && state == 'Z');
        if (f)
            fclose(f);
        if (!gone)
            usleep(10000);
    }
    ck_assert_msg(gone, "process %ld outlived its command", (long)pid);
}
END_TEST

START_TEST(last_lines_of_text)
{
    ck_assert_str_eq(last_lines("a\nb\nc\n", 2), "b\nc\n");
    ck_assert_str_eq(last_lines("a\nb\nc", 2), "b\nc");
    ck_assert_str_eq(last_lines("a\nb\nc\n", 5), "a\nb\nc\n");
    ck_assert_str_eq(last_lines("", 3), "");
}
END_TEST

START_TEST(rank_markers_read)
{
    int st[4];
    rank_statuses("x\npp-test: rank 2 exited 1\nloss 3pp-test: rank 0 exited 0\n"
                  "pp-test: rank 3 exited 139\npp-test: rank 9 exited 0\n",
                  4, st);
    ck_assert_int_eq(st[0], 0);
    ck_assert_int_eq(st[1], -1);
    ck_assert_int_eq(st[2], 1);
    ck_assert_int_eq(st[3], 139);
}
END_TEST

/* bin/model_bench (make bench's CPU-kernel tables) refuses a bad --batch
 * or an unknown flag with exit status 2 and says what it expected, before
 * it times anything. */
START_TEST(model_bench_bad_flags)
{
    const struct {
        const char *args, *says;
    } cases[] = {
        {"--batch 0",
         "model_bench: --batch '0': expected up to 8 numbers 1..65536 separated by commas"},
        {"--batch 16,x", "model_bench: --batch '16,x': expected up to 8 numbers 1..65536"},
        {"--batch 65537", "model_bench: --batch '65537': expected"},
        {"--batch ''", "model_bench: --batch '': expected"},
        {"--batch 16,", "model_bench: --batch '16,': expected"},
        {"--batch 1,2,3,4,5,6,7,8,9", "model_bench: --batch '1,2,3,4,5,6,7,8,9': expected up to 8"},
        {"--bogus", "usage: model_bench [ROOT] [--batch N[,N...]]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "%s/bin/model_bench %s %s", PP_ROOT, PP_ROOT, cases[i].args);
        proc_result r;
        ck_assert_msg(run_proc(cmd, 10, &r) == 2, "%s: status %d:\n%s", cases[i].args, r.status,
                      r.out);
        ck_assert_msg(strstr(r.out, cases[i].says) != NULL, "%s: said:\n%s", cases[i].args, r.out);
        proc_free(&r);
    }
}
END_TEST

Suite *harness_suite(void)
{
    Suite *s = suite_create("harness");
    TCase *tc = tcase_create("subprocesses");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, exit_status_told);
    tcase_add_test(tc, signal_told);
    tcase_add_test(tc, timeout_kills_and_tells);
    tcase_add_test(tc, nothing_outlives_its_command);
    tcase_add_test(tc, last_lines_of_text);
    tcase_add_test(tc, rank_markers_read);
    tcase_add_test(tc, model_bench_bad_flags);
    suite_add_tcase(s, tc);
    return s;
}
