/* suites.h - every Check suite of the unit test binary. */
#ifndef PP_SUITES_H
#define PP_SUITES_H

#include <check.h>

Suite *plan_suite(void);
Suite *kernels_suite(void);
Suite *cuda_kernels_suite(void);
Suite *model_suite(void);
Suite *gpt_suite(void);
Suite *llama_suite(void);
Suite *llama_e2e_suite(void);
Suite *auto_layers_suite(void);
Suite *data_suite(void);
Suite *model_cuda_suite(void);
Suite *frontend_suite(void);
Suite *eval_suite(void);
Suite *sim_suite(void);
Suite *commcheck_suite(void);
Suite *bufcheck_suite(void);
Suite *costs_suite(void);
Suite *cores_suite(void);
Suite *report_suite(void);
Suite *compile_suite(void);
Suite *timeline_suite(void);
Suite *golden_suite(void);
Suite *e2e_suite(void);
Suite *ckpt_suite(void);
Suite *determ_suite(void);
Suite *gpu_e2e_suite(void);
Suite *gpu_graph_suite(void);
Suite *harness_suite(void);
Suite *robust_suite(void);
Suite *verify_suite(void);
Suite *verify_e2e_suite(void);
Suite *cli_suite(void);
Suite *lang_suite(void);
Suite *lang_e2e_suite(void);
Suite *torch_csv_suite(void);
Suite *overlap_suite(void);
Suite *overlap_e2e_suite(void);
Suite *search_suite(void);
Suite *search_e2e_suite(void);
Suite *orders_suite(void);
Suite *vmbench_suite(void);
Suite *numfmt_suite(void);
Suite *pictures_suite(void);
Suite *scale_suite(void);
Suite *peers_bench_suite(void);
/* issue 26: recompute */
Suite *recompute_suite(void);
Suite *recompute_e2e_suite(void);
Suite *tensor_suite(void);
Suite *tensor_e2e_suite(void);
Suite *attention_ref_suite(void);
Suite *attention_fused_suite(void);
Suite *offload_e2e_suite(void); /* issue 26: offload trained */
Suite *offload_suite(void); /* issue 26: offload */

/* A suite whose TCases check_pp may run at the same time, each in a worker
 * of its own: each TCase's name and the most processes (MPI ranks) it runs
 * at once. Ends with {NULL, 0}. */
typedef struct {
    const char *tcase;
    int procs;
} pp_tcase_info;

/* A suite of such TCases, one test each (the mpirun suites): TESTS(X)
 * lists X(test, procs). PP_JOB_SUITE(e2e, E2E_TESTS) defines e2e_tcases
 * and e2e_suite(), each TCase limited to 600 s (each mpirun in it is
 * limited to MPIRUN_TIMEOUT, scaled, and retried at most once: a test's
 * own limit is above the sum of its runs). */
void pp_add_job_tcase(Suite *s, const char *name, const TTest *test);
#define PP_JOB_TCASE_INFO(test, procs) {#test, procs},
#define PP_JOB_TCASE_ADD(test, procs) pp_add_job_tcase(s, #test, test);
#define PP_JOB_SUITE(name, TESTS)                                                                  \
    const pp_tcase_info name##_tcases[] = {TESTS(PP_JOB_TCASE_INFO){NULL, 0}};                     \
    Suite *name##_suite(void)                                                                      \
    {                                                                                              \
        Suite *s = suite_create(#name);                                                            \
        TESTS(PP_JOB_TCASE_ADD)                                                                    \
        return s;                                                                                  \
    }

extern const pp_tcase_info e2e_tcases[];
extern const pp_tcase_info recompute_e2e_tcases[]; /* issue 26 */
extern const pp_tcase_info llama_e2e_tcases[];
extern const pp_tcase_info offload_e2e_tcases[];   /* issue 26 */
extern const pp_tcase_info ckpt_tcases[];
extern const pp_tcase_info robust_tcases[];
extern const pp_tcase_info determ_tcases[];
extern const pp_tcase_info cli_tcases[];
extern const pp_tcase_info search_e2e_tcases[];
extern const pp_tcase_info lang_e2e_tcases[];
extern const pp_tcase_info vmbench_tcases[];
extern const pp_tcase_info tensor_e2e_tcases[];

#endif
