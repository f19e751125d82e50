/* test_lang_e2e.c - mixed backward (`split backward when`) end to end under
 * mpirun: a ZB-H1 order whose even microbatches' backwards are split (B
 * and W, BackwardInput/BackwardWeight) and odd ones are not (Backward),
 * so every stage holds both kinds of stash, trains 3 steps on 4 ranks
 * (cpu backend) to the weights of `ppvm --reference`: within the e2e
 * suite's tolerance as it runs (a full backward adds its microbatch's
 * weight gradient before an earlier microbatch's W does, so the sum's
 * order differs), and bit for bit under --deterministic, which fixes that
 * order. The mlp and the small GPT (tests/unit/testutil.c), whose split
 * kernels differ; FSDP's placement (fetched weights, gradients returned to
 * the owners) with half its backwards split; and what ppvm --profile writes
 * for such a plan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "testutil.h"

#define MIXED_ZB                                                                                   \
    "param S = 4\nparam B = 8\nparam W = S\n"                                                      \
    "require W == S\n"                                                                             \
    "split backward when b % 2 == 0\n"                                                             \
    "let k = min(S - 1 - s, B)\n"                                                                  \
    "compute(s,b,d) = s\nweights(s,b,d) = s\n"                                                     \
    "priority(s,b,d) = d == F ? 3 * (b - k) : d == B ? 3 * b + 1 : 3 * (b + s) + 2\n"              \
    "order strict\n"

#define MLP "model { context = 8  embed = 16  ffn = 256  blocks = 1  batch = 16 }\n"

/* Writes src to a fresh directory's t.pp, compiles it with defs into
 * <dir>/plan, trains 3 steps on np ranks with `flags` and the reference
 * with the same flags, and compares with `tolerance`; rank 1's listing must
 * hold every kind of backward and, unless NULL, `also`. */
static void mixed_plan_trains_like_reference(const char *src, const char *model, const char *defs,
                                             const char *flags, const char *tolerance,
                                             const char *also)
{
    char *dir = temp_dir(), path[1024], cmd[4096], *out, *why;
    snprintf(path, sizeof path, "%s/t.pp", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s%s", src, model);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s %s -o %s/plan -q", PP_ROOT, path, defs, dir);
    free(run_expect(cmd, 0));
    /* the plans hold both kinds of backward */
    snprintf(cmd, sizeof cmd, "cat %s/plan/rank1.txt", dir);
    out = run_expect(cmd, 0);
    ck_assert_msg(strstr(out, " Backward ") && strstr(out, " BackwardInput ") &&
                      strstr(out, " BackwardWeight ") && (!also || strstr(out, also)),
                  "rank 1's plan lacks a kind of backward or '%s':\n%s", also ? also : "", out);
    free(out);
    snprintf(cmd, sizeof cmd, "--backend cpu %s %s/plan --steps 3 --save %s/w --quiet", flags, dir,
             dir);
    if (mpi_run(4, cmd, &out, &why))
        ck_abort_msg("mixed %s %s: training under mpirun failed: %s", defs, flags, why);
    free(out);
    proc_result r;
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --reference %s %s/plan --steps 3 --save %s/ref --quiet",
             PP_ROOT, flags, dir, dir);
    if (run_proc(cmd, CMD_TIMEOUT, &r))
        ck_abort_msg("mixed: the reference run failed: %s\n  it %s", cmd, proc_story(&r, 20));
    proc_free(&r);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/w %s/ref %s", PP_ROOT, dir, dir, tolerance);
    run_proc(cmd, CMD_TIMEOUT, &r);
    ck_assert_msg(
        r.status == 0 && strstr(r.out, "within tolerance") && !strstr(r.out, " beyond atol "),
        "mixed %s %s: weights differ from the reference (%s):\n%s", defs, flags, cmd, r.out);
    proc_free(&r);
    remove_dir(dir);
}

static void mixed_trains_like_reference(const char *src, const char *model, const char *defs,
                                        const char *flags, const char *tolerance)
{
    mixed_plan_trains_like_reference(src, model, defs, flags, tolerance, NULL);
}

START_TEST(mixed_backward_trains_like_reference)
{
    mixed_trains_like_reference(MIXED_ZB, MLP, "", "", "");
    mixed_trains_like_reference(MIXED_ZB, MLP, "", "--deterministic", "--atol 0 --rtol 0");
}
END_TEST

/* FSDP's placement, half its backwards split: full backwards fetch the
 * weights and return weight gradients to the owners from the Backward,
 * split ones from the BackwardWeight; with --keep-weights. */
START_TEST(mixed_backward_fsdp)
{
    mixed_trains_like_reference("param S = 4\nparam B = S\nparam W = B\ncompute(s,b,d) = b\n"
                                "weights(s,b,d) = s % W\nsplit backward when (s + b) % 2 == 0\n",
                                MLP, "--keep-weights", "--deterministic", "--atol 0 --rtol 0");
}
END_TEST

START_TEST(mixed_backward_gpt)
{
    char model[512];
    snprintf(model, sizeof model, "%s\n", test_gpt_model);
    mixed_trains_like_reference(MIXED_ZB, model, "-D B=4", "--deterministic", "--atol 0 --rtol 0");
}
END_TEST

/* ppvm --profile on a plan that splits the backwards of stages 0 and 1
 * only: B and W of those stages are their split jobs' medians; stages 2
 * and 3 have only full backwards, so each gets half of it as B and as W
 * (B + W is what ppc charges them); and ppc takes the file as --costs. */
START_TEST(mixed_backward_profile)
{
    char *dir = temp_dir(), path[1024], cmd[4096], *out, *why;
    snprintf(path, sizeof path, "%s/t.pp", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "param S = 4\nparam B = 4\nparam W = S\ncompute(s,b,d) = s\n"
            "split backward when s < 2\npriority(s,b,d) = d == F ? b : B + b\n%s",
            MLP);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s -o %s/plan -q", PP_ROOT, path, dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof cmd, "--backend cpu %s/plan --steps 3 --quiet --profile %s/costs.json",
             dir, dir);
    if (mpi_run(4, cmd, &out, &why))
        ck_abort_msg("mixed --profile: training under mpirun failed: %s", why);
    free(out);
    snprintf(cmd, sizeof cmd, "cat %s/costs.json", dir);
    char *json = run_expect(cmd, 0);
    double b[8], w[8], fw[8];
    ck_assert_int_eq(profile_values(json, "F", fw, 8), 4);
    ck_assert_int_eq(profile_values(json, "B", b, 8), 4);
    ck_assert_int_eq(profile_values(json, "W", w, 8), 4);
    for (int s = 2; s < 4; s++) /* the halves of one median: equal bits */
        ck_assert_msg(b[s] == w[s], "stage %d: B %g and W %g of a full backward differ", s, b[s],
                      w[s]);
    free(json);
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s -o %s/measured --costs %s/costs.json", PP_ROOT, path,
             dir, dir);
    free(run_expect(cmd, 0));
    remove_dir(dir);
}
END_TEST

/* Mixed backward with overlapped pairs (test_lang.c's MIXED_OVERLAP):
 * each paired forward runs beside a full backward or a split one's B, on
 * the cpu backend one after the other; bit for bit like the reference
 * under --deterministic. Then with each stage's weights on the next
 * worker: fetched weights, and a full backward in a pair clearing the
 * accumulator it returns to the owner (ZeroGrads before the Overlap). */
START_TEST(mixed_backward_overlap)
{
    mixed_plan_trains_like_reference(MIXED_ZB "overlap F with B when s < S - 1\n", MLP, "",
                                     "--deterministic", "--atol 0 --rtol 0", " Overlap ");
    mixed_plan_trains_like_reference(
        "param S = 4\nparam B = 8\nparam W = S\nsplit backward when b % 2 == 0\n"
        "let k = min(S - 1 - s, B)\ncompute(s,b,d) = s\nweights(s,b,d) = (s + 1) % W\n"
        "priority(s,b,d) = d == F ? 3 * (b - k) : d == B ? 3 * b + 1 : 3 * (b + s) + 2\n"
        "order strict\noverlap F with B when s < S - 1\n",
        MLP, "", "--deterministic", "--atol 0 --rtol 0", " ZeroGrads ");
}
END_TEST

#define LANG_E2E_TESTS(X)                                                                          \
    X(mixed_backward_trains_like_reference, 4)                                                     \
    X(mixed_backward_overlap, 4)                                                                   \
    X(mixed_backward_gpt, 4)                                                                       \
    X(mixed_backward_fsdp, 4)                                                                      \
    X(mixed_backward_profile, 4)

PP_JOB_SUITE(lang_e2e, LANG_E2E_TESTS)
