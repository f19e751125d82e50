/* test_offload_e2e.c - offload trained for real (issue 26): library
 * schedules with `offload when ...` appended train under mpirun on the cpu
 * backend to exactly the weights they train without it (--atol 0
 * --rtol 0): an Offload and a Reload copy a stash and change no arithmetic.
 * ppvm allocates the report's device figure (mem_bytes) and, on a line of
 * its own, the report's host figure (host_bytes, the plan's host pool);
 * some rank's device memory drops. */
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "testutil.h"

/* The first `n` numbers after `key` in text. */
static void numbers_after(const char *text, const char *key, unsigned long long *v, int n)
{
    const char *p = strstr(text, key);
    ck_assert_msg(p != NULL, "no '%s' in:\n%s", key, text);
    p += strlen(key);
    for (int i = 0; i < n; i++) {
        char *e;
        v[i] = strtoull(p, &e, 10);
        ck_assert_msg(e != p, "'%s': fewer than %d numbers in:\n%s", key, n, text);
        p = e + 1;
    }
}

/* Library schedule `name` with `stmt` appended, and as it is, both with
 * `args` (the second also with `plain`), each trained 3 steps on 4 cpu
 * ranks: the same weights bit for bit; the offloaded plans hold Offload and
 * Reload; ppvm's memory line is the report's mem_bytes, its host line the
 * report's host_bytes, and some rank's device memory is less than without
 * offload. */
static void same_weights_as(const char *name, const char *stmt, const char *args, const char *plain)
{
    enum { NP = 4 };
    char *dir = temp_dir(), cmd[8192], *out[2], *json, *lst;
    snprintf(cmd, sizeof cmd, "{ cat %s/schedules/%s; printf '\\n%%s\\n' '%s'; } > %s/off.pp",
             PP_ROOT, name, stmt, dir);
    free(run_expect(cmd, 0));
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s/bin/ppc %s%s%s %s %s -o %s/p%d -q", PP_ROOT,
                 k ? PP_ROOT : dir, k ? "/schedules/" : "/", k ? name : "off.pp", args,
                 k ? plain : "", dir, k);
        free(run_expect(cmd, 0));
        snprintf(cmd, sizeof cmd, "--backend cpu %s/p%d --steps 3 --save %s/w%d", dir, k, dir, k);
        out[k] = mpi_ok(NP, cmd);
    }
    snprintf(cmd, sizeof cmd, "cat %s/p0/rank*.txt", dir);
    lst = run_expect(cmd, 0);
    ck_assert_msg(strstr(lst, " Offload ") && strstr(lst, " Reload "),
                  "%s '%s': no Offload/Reload in the listings", name, stmt);
    free(lst);
    snprintf(cmd, sizeof cmd, "%s/bin/ppvm --compare %s/w0 %s/w1 --atol 0 --rtol 0", PP_ROOT, dir,
             dir);
    char *cmp = run_expect(cmd, 0);
    ck_assert_msg(strstr(cmp, "max |diff| 0 (within tolerance)") && !strstr(cmp, "beyond"),
                  "%s %s: weights differ with '%s':\n%s", name, args, stmt, cmp);
    free(cmp);
    unsigned long long vm[2][NP], rep[NP], host[NP], rhost[NP];
    snprintf(cmd, sizeof cmd, "cat %s/p0/report.json", dir);
    json = run_expect(cmd, 0);
    numbers_after(json, "\"mem_bytes\": [", rep, NP);
    numbers_after(json, "\"host_bytes\": [", rhost, NP);
    numbers_after(out[0], "memory allocated at start-up, bytes per rank:", vm[0], NP);
    numbers_after(out[1], "memory allocated at start-up, bytes per rank:", vm[1], NP);
    numbers_after(out[0], "(offloaded stashes) allocated at start-up, bytes per rank:", host, NP);
    ck_assert_msg(!strstr(out[1], "offloaded stashes"), "%s: a host line without offload:\n%s",
                  name, out[1]);
    int less = 0, some = 0;
    for (int r = 0; r < NP; r++) {
        ck_assert_msg(vm[0][r] == rep[r], "%s rank %d: ppvm allocates %llu, the report says %llu",
                      name, r, vm[0][r], rep[r]);
        ck_assert_msg(host[r] == rhost[r],
                      "%s '%s' rank %d: ppvm allocates %llu host bytes, the report says %llu", name,
                      stmt, r, host[r], rhost[r]);
        less |= vm[0][r] < vm[1][r];
        some |= host[r] > 0;
    }
    ck_assert_msg(less, "%s '%s': offload saved no device memory on any rank", name, stmt);
    ck_assert_msg(some, "%s '%s': no rank allocated a host pool", name, stmt);
    free(json);
    free(out[0]);
    free(out[1]);
    remove_dir(dir);
}

static void same_weights(const char *name, const char *stmt, const char *args)
{
    same_weights_as(name, stmt, args, "");
}

START_TEST(onef1b_mlp) { same_weights("1f1b.pp", "offload when 1", ""); }
END_TEST
START_TEST(onef1b_gpt_bf16)
{
    same_weights("1f1b-gpt.pp", "offload when 1", "--precision bf16 -D B=6");
}
END_TEST
START_TEST(gpipe) { same_weights("gpipe.pp", "offload when 1", "-D S=4 -D B=8"); }
END_TEST
/* split backward: Reload before BackwardInput, W reads the reloaded stash */
START_TEST(zb_h1) { same_weights("zb-h1.pp", "offload when 1", "-D S=4 -D B=8"); }
END_TEST
START_TEST(interleaved) { same_weights("interleaved-1f1b.pp", "offload when 1", "-D W=4 -D B=8"); }
END_TEST
START_TEST(zb_v_bf16)
{
    same_weights("zb-v.pp", "offload when 1", "-D W=4 -D B=8 --precision bf16");
}
END_TEST
/* recompute on stage 0, offload on the others, in one plan */
START_TEST(mixed_recompute)
{
    same_weights("1f1b-gpt.pp", "recompute when s == 0\noffload when s > 0", "-D B=6");
}
END_TEST

/* The library's offload file (stages s < K offload, priced copies)
 * against itself at K = 0, the same 1F1B without offload, in fp32 and
 * bf16 */
START_TEST(library_file)
{
    same_weights_as("1f1b-offload.pp", "", "", "-D K=0");
    same_weights_as("1f1b-offload.pp", "", "--precision bf16 -D B=6", "-D K=0");
}
END_TEST

#define OFFLOAD_E2E_TESTS(X)                                                                       \
    X(onef1b_mlp, 4)                                                                               \
    X(onef1b_gpt_bf16, 4)                                                                          \
    X(gpipe, 4)                                                                                    \
    X(zb_h1, 4) X(interleaved, 4) X(zb_v_bf16, 4) X(mixed_recompute, 4) X(library_file, 4)
PP_JOB_SUITE(offload_e2e, OFFLOAD_E2E_TESTS)
