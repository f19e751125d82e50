/* check_standin.c - the stand-in test binary (bin/check_pp-standin): the
 * GPU suites run against the host stand-ins of CUDA, cuBLAS(Lt) and NCCL,
 * plus the `standin` suite showing that the stand-ins' strictness works.
 * A pass here tests the cuda backend's logic, not a GPU (tests/README.md). */
#include <stdlib.h>

#include "../unit/suites.h"

Suite *standin_suite(void);
Suite *standin_graph_suite(void);

int main(void)
{
    SRunner *sr = srunner_create(standin_suite());
    srunner_add_suite(sr, cuda_kernels_suite());
    srunner_add_suite(sr, model_cuda_suite());
    srunner_add_suite(sr, gpu_e2e_suite());
    srunner_add_suite(sr, gpu_graph_suite());
    srunner_add_suite(sr, attention_fused_suite());
    srunner_add_suite(sr, standin_graph_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
