/* test_peers_bench.c - what of tests/bench/peers_bench.py (make bench-peers,
 * pp beside PyTorch) can be tested without PyTorch: its skip where torch does
 * not import (one line, exit 0), its argument errors (exit 2 and the line
 * saying what was expected, before it looks for torch), and that both its
 * files parse. The benchmark itself needs torch and is not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "testutil.h"

#define SCRIPT PP_ROOT "/tests/bench/peers_bench.py"

/* A directory holding a torch package whose import fails, so the skip is
 * taken whatever python3 has installed. */
static char *no_torch_dir(void)
{
    char *dir = temp_dir(), path[1024];
    snprintf(path, sizeof path,
             "mkdir -p %s/torch %s/numpy && touch %s/numpy/__init__.py && "
             "echo 'raise ImportError(\"no torch in this test\")' > "
             "%s/torch/__init__.py",
             dir, dir, dir, dir);
    free(run_expect(path, 0));
    return dir;
}

START_TEST(skips_without_torch)
{
    char *dir = no_torch_dir(), cmd[2048];
    snprintf(cmd, sizeof cmd, "PYTHONPATH=%s python3 " SCRIPT " --quick", dir);
    char *out = run_expect(cmd, 0);
    ck_assert_msg(!strncmp(out, "peers_bench: skipped: no PyTorch in ", 36), "%s", out);
    ck_assert_msg(strstr(out, "(no torch in this test); run `make oracle` once or set "
                              "TORCH_PYTHON\n") != NULL,
                  "%s", out);
    /* one line, nothing else */
    ck_assert_ptr_eq(strchr(out, '\n'), out + strlen(out) - 1);
    free(out);
    /* the defaults too (no flags) */
    snprintf(cmd, sizeof cmd, "PYTHONPATH=%s python3 " SCRIPT, dir);
    out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "peers_bench: skipped: no PyTorch") != NULL, "%s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* Each bad argument: exit 2 and its message, even where torch is missing
 * (arguments are checked first). */
START_TEST(bad_arguments)
{
    static const struct {
        const char *args, *message;
    } cases[] = {
        {"--models foo", "peers_bench.py: error: --models: 'foo' is not a model; expected mlp, "
                         "gpt or mlp,gpt\n"},
        {"--models mlp,", "peers_bench.py: error: --models: '' is not a model; expected mlp, "
                          "gpt or mlp,gpt\n"},
        {"--batches x", "peers_bench.py: error: --batches: 'x' is not a list of numbers; "
                        "expected e.g. 16,256\n"},
        {"--batches 16,0", "peers_bench.py: error: --batches: every batch must be at least 1\n"},
        {"--batches 32", "peers_bench.py: error: --batches: batch 32 has no default step count; "
                         "give --steps N\n"},
        {"--warmup -1", "peers_bench.py: error: --warmup and --steps must not be negative, "
                        "--steps16 and --steps256 at least 1\n"},
        {"--steps256 0", "peers_bench.py: error: --warmup and --steps must not be negative, "
                         "--steps16 and --steps256 at least 1\n"},
        {"--rounds 0", "peers_bench.py: error: --rounds: 0; expected at least 1\n"},
        {"--steps x", "peers_bench.py: error: argument --steps: invalid int value: 'x'\n"},
        {"--frobnicate", "peers_bench.py: error: unrecognized arguments: --frobnicate\n"},
    };
    char *dir = no_torch_dir();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "PYTHONPATH=%s python3 " SCRIPT " %s 2>&1 >/dev/null", dir,
                 cases[i].args);
        char *out = run_expect(cmd, 2);
        ck_assert_msg(strstr(out, "usage: peers_bench.py") == out, "%s: %s", cases[i].args, out);
        const char *last = last_lines(out, 1);
        ck_assert_msg(!strcmp(last, cases[i].message), "%s: got %s, expected %s", cases[i].args,
                      last, cases[i].message);
        free(out);
    }
    /* with --steps N a batch without a default is accepted (then skipped here) */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "PYTHONPATH=%s python3 " SCRIPT " --batches 32 --steps 3", dir);
    char *out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, "peers_bench: skipped: no PyTorch") != NULL, "%s", out);
    free(out);
    remove_dir(dir);
}
END_TEST

/* Both files parse (the torch half is never imported by the tests above). */
START_TEST(scripts_parse)
{
    free(run_expect("python3 -c 'import ast, sys\n"
                    "for f in sys.argv[1:]: ast.parse(open(f).read(), f)' " SCRIPT " " PP_ROOT
                    "/tests/bench/peers_torch.py",
                    0));
}
END_TEST

Suite *peers_bench_suite(void)
{
    Suite *s = suite_create("peers_bench");
    TCase *tc = tcase_create("without_torch");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, skips_without_torch);
    tcase_add_test(tc, bad_arguments);
    tcase_add_test(tc, scripts_parse);
    suite_add_tcase(s, tc);
    return s;
}
