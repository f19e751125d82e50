/* test_golden.c - golden plan listings: ppc's rank<r>.txt for a schedule is
 * compared byte for byte with the listing checked in under tests/golden/.
 * A change to lowering shows up here as a diff a reviewer reads; after an
 * intended change, `make golden` rewrites the expected files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "testutil.h"

/* Must match the GOLDEN list in the Makefile. */
static const struct {
    const char *name, *schedule, *defs;
    int W;
} goldens[] = {
    {"gpipe-S4-B4", "gpipe.pp", "-D S=4 -D B=4", 4},
    {"ddp-S4-B4", "ddp.pp", "-D S=4 -D B=4", 4},
    {"1f1b-S4-B8", "1f1b.pp", "-D S=4 -D B=8", 4},
    {"zb-h1-S4-B8", "zb-h1.pp", "-D S=4 -D B=8", 4},
    {"fsdp-S4-B4", "fsdp.pp", "-D S=4 -D B=4", 4}, /* weight fetches, grouped sends */
    /* bf16: fetched weights half the size, weight gradients still fp32 */
    {"fsdp-bf16-S4-B4", "fsdp.pp", "-D S=4 -D B=4 --precision bf16", 4},
    /* overlapped pairs: Overlap markers, two workspaces */
    {"1f1b-overlap-S4-B4", "1f1b-overlap.pp", "-D S=4 -D B=4", 4},
};

START_TEST(listing_matches)
{
    char *dir = temp_dir(), cmd[2048], *out;
    snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/%s %s -o %s -q", PP_ROOT, PP_ROOT,
             goldens[_i].schedule, goldens[_i].defs, dir);
    out = run_expect(cmd, 0);
    free(out);
    for (int r = 0; r < goldens[_i].W; r++) {
        snprintf(cmd, sizeof cmd, "diff -u %s/tests/golden/%s/rank%d.txt %s/rank%d.txt", PP_ROOT,
                 goldens[_i].name, r, dir, r);
        int rc = run_cmd(cmd, &out);
        ck_assert_msg(rc != 1, "%s rank %d differs from its golden listing:\n%s", goldens[_i].name,
                      r, out);
        ck_assert_msg(rc == 0,
                      "%s rank %d: could not compare with its golden listing (exit %d): %s\n%s",
                      goldens[_i].name, r, rc, cmd, out);
        free(out);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    run_cmd(cmd, NULL);
    free(dir);
}
END_TEST

Suite *golden_suite(void)
{
    Suite *s = suite_create("golden");
    TCase *tc = tcase_create("listings");
    tcase_add_loop_test(tc, listing_matches, 0, (int)(sizeof goldens / sizeof goldens[0]));
    suite_add_tcase(s, tc);
    return s;
}
