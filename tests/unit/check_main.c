/* check_main.c - the one test binary: every suite in one runner, so `make
 * test` ends with one Check summary line. Suites fork per test (CK_FORK), so
 * a crash fails its test and not the run. */
#include <stdlib.h>

#include "suites.h"

int main(void)
{
    SRunner *sr = srunner_create(plan_suite());
    srunner_add_suite(sr, kernels_suite());
    srunner_add_suite(sr, cuda_kernels_suite());
    srunner_add_suite(sr, model_suite());
    srunner_add_suite(sr, model_cuda_suite());
    srunner_add_suite(sr, frontend_suite());
    srunner_add_suite(sr, eval_suite());
    srunner_add_suite(sr, sim_suite());
    srunner_add_suite(sr, commcheck_suite());
    srunner_add_suite(sr, bufcheck_suite());
    srunner_add_suite(sr, costs_suite());
    srunner_add_suite(sr, report_suite());
    srunner_add_suite(sr, compile_suite());
    srunner_add_suite(sr, timeline_suite());
    srunner_add_suite(sr, golden_suite());
    srunner_add_suite(sr, e2e_suite());
    srunner_add_suite(sr, gpu_e2e_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
