/* test_auto_layers.c - `layers = auto(L)` (compiler/auto_layers.c): on a
 * GPT whose 50257-token head outweighs its layers, the split chosen
 * predicts a shorter step than the even split and than Megatron's rule (one
 * layer fewer on the first and last stage), each compiled on its own as
 * `layers = f(s)` to check the prediction is the compile's; the split sums
 * to L; --mem-limit steers it to a split that fits (or says none does);
 * auto's errors. And tie = 1's lowering error when the tied stages' owners
 * cannot be paired. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../compiler/compile.h"
#include "../../compiler/jobs.h"
#include "suites.h"

/* 1F1B on S = 4 stages, GPT-2 small's shape (its head costs about 5.4
 * layers) with a short context. */
static const char *const HEAD = "param S = 4\nparam B = 8\nparam W = S\n"
                                "compute(s,b,d) = s\nweights(s,b,d) = s\n"
                                "priority(s,b,d) = d == F ? 2 * b + 2 * s : 2 * b + 2 * S - 1\n"
                                "order strict\n"
                                "model gpt { vocab = 50257; context = 32; embed = 768; heads = 12\n"
                                "            ffn = 3072; batch = 2; layers = ";

static int compile_with(const char *layers, uint64_t mem_limit, pp_compiled *c)
{
    char src[2048];
    snprintf(src, sizeof src, "%s%s }\n", HEAD, layers);
    pp_compile_opts o = pp_compile_defaults();
    o.path = "t.pp";
    o.text = src;
    o.len = strlen(src);
    o.capture = 1;
    o.mem_limit = mem_limit;
    return pp_compile(&o, c);
}

static double makespan_of(const char *layers)
{
    pp_compiled c;
    int st = compile_with(layers, 0, &c);
    ck_assert_msg(st == PP_COMPILE_OK, "layers = %s: %s", layers, c.msgs ? c.msgs : "");
    double m = c.sim.makespan;
    pp_compiled_free(&c);
    return m;
}

START_TEST(test_auto_beats_even_split)
{
    pp_compiled c;
    ck_assert_int_eq(compile_with("auto(12)", 0, &c), PP_COMPILE_OK);
    const uint32_t *n = c.sch.model.layers;
    ck_assert_uint_eq(n[0] + n[1] + n[2] + n[3], 12);
    ck_assert_uint_eq(c.autoc.even[0], 3);
    ck_assert_uint_eq(c.autoc.even[3], 3);
    ck_assert_msg(n[3] < n[1], "the head's stage holds %u layers, stage 1 %u", n[3], n[1]);
    double chosen = c.sim.makespan;
    ck_assert_msg(chosen == c.autoc.step, "compiled step %g, auto's %g", chosen, c.autoc.step);
    char fs[128];
    snprintf(fs, sizeof fs, "s == 0 ? %u : s == 1 ? %u : s == 2 ? %u : %u", n[0], n[1], n[2], n[3]);
    double again = makespan_of(fs), even = makespan_of("3");
    double megatron = makespan_of("s == 0 || s == S - 1 ? 2 : 4");
    ck_assert_msg(again == chosen, "the chosen split written out predicts %g, auto said %g", again,
                  chosen);
    ck_assert_msg(even == c.autoc.even_step, "even %g, auto's even %g", even, c.autoc.even_step);
    ck_assert_msg(chosen < 0.9 * even, "auto %u,%u,%u,%u predicts %g, the even split %g", n[0],
                  n[1], n[2], n[3], chosen, even);
    ck_assert_msg(chosen < megatron, "auto predicts %g, Megatron's rule %g", chosen, megatron);
    char *said = pp_auto_describe(&c.sch, &c.autoc);
    ck_assert_msg(said && strstr(said, "auto(12): ") && strstr(said, "the even split 3,3,3,3: "),
                  "%s", said ? said : "(null)");
    free(said);
    pp_compiled_free(&c);
}
END_TEST

/* A limit between the unconstrained choice's memory and the least found
 * gives a split that fits it; below the least, a clear error. */
START_TEST(test_auto_under_mem_limit)
{
    pp_compiled c;
    ck_assert_int_eq(compile_with("auto(12)", 1ull << 40, &c), PP_COMPILE_OK);
    uint64_t free_mem = c.autoc.mem;
    double free_step = c.autoc.step;
    pp_compiled_free(&c);
    ck_assert_int_eq(compile_with("auto(12)", 1000, &c), PP_COMPILE_ERRORS);
    ck_assert_msg(strstr(c.msgs, "layers = auto(12): no split of the 4 stages found under "
                                 "--mem-limit 1000"),
                  "%s", c.msgs);
    uint64_t least = c.autoc.mem;
    pp_compiled_free(&c);
    ck_assert_msg(least < free_mem, "least %llu, unconstrained %llu", (unsigned long long)least,
                  (unsigned long long)free_mem);
    uint64_t limit = least + (free_mem - least) / 2;
    ck_assert_int_eq(compile_with("auto(12)", limit, &c), PP_COMPILE_OK);
    ck_assert_msg(c.autoc.mem <= limit && c.autoc.step >= free_step, "mem %llu (limit %llu)",
                  (unsigned long long)c.autoc.mem, (unsigned long long)limit);
    for (int w = 0; w < c.t.W; w++)
        ck_assert_uint_le(pp_plan_memory(&c.plans[w]), limit);
    pp_compiled_free(&c);
}
END_TEST

/* Under --costs a time is one layer's: the head (about 5.4 layers of
 * GPT-2's FLOPs) counts on the last stage as the FLOPs costs count it
 * (compiler/end_costs.c), so uniform measured costs still give the head's
 * stage fewer layers and a shorter step than the even split; stage 1 costs
 * its layers alone. */
START_TEST(test_auto_measured_counts_the_ends)
{
    char dir[] = "/tmp/pp-auto-costs-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/costs.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"F\": 1, \"B\": 2}\n", f);
    fclose(f);
    pp_compiled c;
    char src[2048];
    snprintf(src, sizeof src, "%sauto(12) }\n", HEAD);
    pp_compile_opts o = pp_compile_defaults();
    o.path = "t.pp";
    o.text = src;
    o.len = strlen(src);
    o.capture = 1;
    o.costs = path;
    ck_assert_msg(pp_compile(&o, &c) == PP_COMPILE_OK, "%s", c.msgs ? c.msgs : "");
    const uint32_t *n = c.sch.model.layers;
    const pp_jobspace *js = &c.t.js;
    double f1 = c.t.cost[job_id(js, 1, 0, DIR_F)], f3 = c.t.cost[job_id(js, 3, 0, DIR_F)];
    double b3 = c.t.cost[job_id(js, 3, 0, DIR_B)];
    ck_assert_msg(f1 == n[1], "F(1,0) costs %g for %u layers (expected one per layer)", f1, n[1]);
    ck_assert_msg(f3 > n[3] + 4 && f3 < n[3] + 7 && b3 > 2 * (n[3] + 4),
                  "F(3,0) costs %g and B(3,0) %g for %u layers and the head (expected about "
                  "5.4 layers more, twice that for B)",
                  f3, b3, n[3]);
    ck_assert_msg(n[3] < n[1], "the head's stage holds %u layers, stage 1 %u", n[3], n[1]);
    ck_assert_msg(c.autoc.step < 0.9 * c.autoc.even_step, "auto predicts %g, the even split %g",
                  c.autoc.step, c.autoc.even_step);
    pp_compiled_free(&c);
    remove(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_auto_errors)
{
    static const struct {
        const char *layers, *says;
    } bad[] = {
        {"auto(0)", "t.pp:9:50: error: auto(0): the layers in all are out of range"},
        {"auto(1, 2)", "error: auto takes one argument, the layers in all: auto(L)"},
        {"auto(s)", "error:"},
        {"auto(5000)", "auto(5000): more layers than 4 stages of at most 1024 can hold"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pp_compiled c;
        ck_assert_int_ne(compile_with(bad[i].layers, 0, &c), PP_COMPILE_OK);
        ck_assert_msg(strstr(c.msgs, bad[i].says), "layers = %s: expected '%s' in\n%s",
                      bad[i].layers, bad[i].says, c.msgs);
        pp_compiled_free(&c);
    }
}
END_TEST

/* Stage 0 replicated on workers 0 and 1, stage 1 on worker 2 alone: the
 * tied copies have no pairing; the compile says so and fails. */
START_TEST(test_tie_unpaired_owners)
{
    static const char *src =
        "param S = 2\nparam B = 4\nparam W = 3\n"
        "compute(s,b,d) = s == 0 ? b % 2 : 2\n"
        "weights(s,b,d) = s == 0 ? b % 2 : 2\n"
        "model gpt { vocab = 64; context = 8; embed = 16; heads = 2; ffn = 32\n"
        "            batch = 2; layers = 1; tie = 1 }\n";
    pp_compile_opts o = pp_compile_defaults();
    o.path = "t.pp";
    o.text = src;
    o.len = strlen(src);
    o.capture = 1;
    pp_compiled c;
    ck_assert_int_ne(pp_compile(&o, &c), PP_COMPILE_OK);
    ck_assert_msg(strstr(c.msgs, "tie = 1: 2 rank(s) own only stage 0 and 1 only stage 1, so the "
                                 "tied embedding's copies cannot be paired"),
                  "%s", c.msgs);
    pp_compiled_free(&c);
}
END_TEST

Suite *auto_layers_suite(void)
{
    Suite *s = suite_create("auto_layers");
    TCase *tc = tcase_create("auto_layers");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_auto_beats_even_split);
    tcase_add_test(tc, test_auto_under_mem_limit);
    tcase_add_test(tc, test_auto_errors);
    tcase_add_test(tc, test_auto_measured_counts_the_ends);
    tcase_add_test(tc, test_tie_unpaired_owners);
    suite_add_tcase(s, tc);
    return s;
}
