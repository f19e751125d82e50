/* test_standin.c - the `standin` suite: the host stand-ins (tests/standin)
 * are strict where the issue asks them to be. A stream reading what another
 * wrote without an event between them ends the process with a message; a
 * cuBLAS or cuBLASLt call with a bad leading dimension, shape or pointer is
 * refused; a buffer hazard inside an NCCL group gives wrong numbers under
 * the reversed member order (and right ones as posted). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "../../kernels/cuda_kernels.h"
#include "../unit/suites.h"
#include "../unit/testutil.h"

/* Runs fn in a child with stderr captured; returns its wait status and
 * the captured text in *err (caller frees). */
static int in_child(void (*fn)(void), char **err)
{
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn();
        fflush(NULL);
        _exit(0);
    }
    close(fd[1]);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while ((got = read(fd[0], buf + n, cap - n - 1)) > 0)
        n += (size_t)got;
    buf[n] = '\0';
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    *err = buf;
    return st;
}

/* Stream a writes x (a kernel), stream b adds x into y (a kernel) - with
 * or without an event between them. */
static int with_event;
static void two_streams(void)
{
    cudaStream_t a, b;
    cudaEvent_t ev;
    float *x, *y, *z;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    cudaMalloc((void **)&x, 1000 * sizeof(float));
    cudaMalloc((void **)&y, 1000 * sizeof(float));
    cudaMalloc((void **)&z, 1000 * sizeof(float));
    cudaMemsetAsync(y, 0, 1000 * sizeof(float), b);
    cudaMemsetAsync(x, 0, 1000 * sizeof(float), a);
    cudaMemsetAsync(z, 0, 1000 * sizeof(float), a);
    pp_cu_add(x, z, 1000, a); /* writes x on a */
    if (with_event) {
        cudaEventRecord(ev, a);
        cudaStreamWaitEvent(b, ev, 0);
    }
    pp_cu_add(y, x, 1000, b); /* reads x on b */
    cudaDeviceSynchronize();
    fprintf(stderr, "finished\n");
}

START_TEST(missing_event_is_reported)
{
    char *err;
    with_event = 1;
    int st = in_child(two_streams, &err);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(err, "finished"),
                  "with the event the program must run:\n%s", err);
    free(err);
    with_event = 0;
    st = in_child(two_streams, &err);
    ck_assert_msg(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "the hazard was not reported:\n%s",
                  err);
    ck_assert_msg(strstr(err, "stream-ordering hazard: add_kernel on stream 2 reads") &&
                      strstr(err, "on stream 1 (its operation") &&
                      strstr(err, "writes, and no event"),
                  "unexpected message:\n%s", err);
    ck_assert_ptr_null(strstr(err, "finished"));
    free(err);
}
END_TEST

/* A host read after a copy on a stream the host never waited for. */
static void unsynchronised_copy(void)
{
    cudaStream_t a;
    float *x, *host;
    cudaStreamCreate(&a);
    cudaMalloc((void **)&x, 64);
    cudaHostAlloc((void **)&host, 64, cudaHostAllocDefault);
    cudaMemsetAsync(x, 0, 64, a);
    cudaMemcpyAsync(host, x, 64, cudaMemcpyDeviceToHost, a);
    fprintf(stderr, "before the wait: %s\n", host[0] == 0.0f ? "zero" : "not yet");
    cudaStreamSynchronize(a);
    fprintf(stderr, "after the wait: %s\n", host[0] == 0.0f ? "zero" : "not yet");
}

START_TEST(execution_is_lazy)
{
    char *err;
    int st = in_child(unsynchronised_copy, &err);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", err);
    ck_assert_msg(strstr(err, "before the wait: not yet") && strstr(err, "after the wait: zero"),
                  "%s", err);
    free(err);
}
END_TEST

START_TEST(cublas_checks_arguments)
{
    cublasHandle_t h;
    float *a, *b, *c, one = 1.0f, zero = 0.0f;
    ck_assert_int_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    cudaMalloc((void **)&a, 6 * 4 * sizeof(float));
    cudaMalloc((void **)&b, 4 * 5 * sizeof(float));
    cudaMalloc((void **)&c, 64 * sizeof(float));
    /* C (6x5) = A (6x4) B (4x5), column-major */
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 6, 5, 4, &one, a, 6, b, 4, &zero, c, 6),
        CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 6, 5, 4, &one, a, 5, b, 4, &zero, c, 6),
        CUBLAS_STATUS_INVALID_VALUE); /* lda < m */
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 6, 5, 4, &one, a, 3, b, 4, &zero, c, 6),
        CUBLAS_STATUS_INVALID_VALUE); /* lda < k with A transposed */
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 6, 5, 4, &one, a, 6, b, 4, &zero, c, 5),
        CUBLAS_STATUS_INVALID_VALUE); /* ldc < m */
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 6, 5, 4, &one, a, 7, b, 4, &zero, c, 6),
        CUBLAS_STATUS_INVALID_VALUE); /* A's extent past its allocation */
    float host[30];
    ck_assert_int_eq(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 6, 5, 4, &one, a, 6, b, 4, &zero, host, 6),
        CUBLAS_STATUS_INVALID_VALUE); /* C in host memory */
    ck_assert_int_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 6, 5, 4, &one, a, CUDA_R_16BF, 6, b,
                                  CUDA_R_32F, 4, &zero, c, CUDA_R_32F, 6, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_NOT_SUPPORTED); /* mixed operand types */
    ck_assert_int_eq(cublasSscal(h, 65, &one, c, 1), CUBLAS_STATUS_INVALID_VALUE);

    /* cuBLASLt: a layout whose ld is below its rows; GELU's aux ld not a
     * multiple of 8 gets no algorithm */
    cublasLtHandle_t lt;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulDesc_t op;
    cublasLtMatmulPreference_t pref;
    ck_assert_int_eq(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 6, 4, 5),
                     CUBLAS_STATUS_INVALID_VALUE);
    ck_assert_int_eq(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 6, 4, 6), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 4, 5, 4), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 6, 5, 6), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t res;
    int n = 0;
    ck_assert_int_eq(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &n),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(n, 1);
    /* shapes that disagree (B as 5x4) */
    cublasLtMatrixLayout_t bad;
    ck_assert_int_eq(cublasLtMatrixLayoutCreate(&bad, CUDA_R_32F, 5, 4, 5), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulAlgoGetHeuristic(lt, op, la, bad, lc, lc, pref, 1, &res, &n),
                     CUBLAS_STATUS_INVALID_VALUE);
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DGELU;
    float *aux;
    cudaMalloc((void **)&aux, 16 * 5 * sizeof(float));
    int64_t ld = 12;
    ck_assert_int_eq(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
        CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &aux, sizeof aux),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld),
        CUBLAS_STATUS_SUCCESS);
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &n);
    ck_assert_msg(s != CUBLAS_STATUS_SUCCESS || n == 0, "aux ld 12 offered an algorithm");
    ld = 8;
    ck_assert_int_eq(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld),
        CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &n),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(n, 1);
    float one_ = 1.0f, zero_ = 0.0f;
    ck_assert_int_eq(
        cublasLtMatmul(lt, op, &one_, a, la, b, lb, &zero_, c, lc, c, lc, &res.algo, NULL, 0, NULL),
        CUBLAS_STATUS_SUCCESS);
    /* the algorithm assumed 256-byte alignment; D one float in is not */
    ck_assert_int_eq(cublasLtMatmul(lt, op, &one_, a, la, b, lb, &zero_, c, lc, c + 1, lc,
                                    &res.algo, NULL, 0, NULL),
                     CUBLAS_STATUS_INVALID_VALUE);
    cudaDeviceSynchronize();
    /* everything created is destroyed (make test SANITIZE=1 checks for leaks) */
    cublasLtMatrixLayoutDestroy(bad);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
    cublasDestroy(h);
    cudaFree(aux);
    cudaFree(c);
    cudaFree(b);
    cudaFree(a);
}
END_TEST

/* The end of a GEMM case: its work done, its buffers and handle freed. */
static void gemm_case_done(cublasHandle_t h, void *a, void *b, void *c)
{
    cudaDeviceSynchronize();
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cublasDestroy(h);
}

/* The strided-batched GEMMs: two products interleaved as row slices of one
 * column-major C (stride 2 rows, ldc 4: disjoint elements) are taken and
 * computed; a stride that makes the products write the same element, a
 * negative stride, a batch running past its allocation and an ld below the
 * rows are refused; bf16 operands with fp32 C are taken, mixed types are
 * not. */
START_TEST(cublas_batched_checks_arguments)
{
    cublasHandle_t h;
    float *a, *b, *c, one = 1.0f, zero = 0.0f;
    ck_assert_int_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    cudaMalloc((void **)&a, 4 * 3 * sizeof(float));     /* 4x3, ld 4: A_i = rows 2i, 2i+1 */
    cudaMalloc((void **)&b, 2 * 3 * 2 * sizeof(float)); /* two 3x2, ld 3, stride 6 */
    cudaMalloc((void **)&c, 4 * 2 * sizeof(float));     /* 4x2, ld 4: C_i = rows 2i, 2i+1 */
    float ha[12], hb[12], hc[8], want[8];
    for (int i = 0; i < 12; i++) {
        ha[i] = (float)(i + 1);
        hb[i] = (float)(i % 5) - 2.0f;
    }
    for (int bi = 0; bi < 2; bi++)
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < 2; j++) {
                float acc = 0.0f;
                for (int l = 0; l < 3; l++)
                    acc += ha[2 * bi + r + 4 * l] * hb[6 * bi + l + 3 * j];
                want[2 * bi + r + 4 * j] = acc;
            }
    cudaMemcpy(a, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice);
    ck_assert_int_eq(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a, 4, 2,
                                               b, 3, 6, &zero, c, 4, 2, 2),
                     CUBLAS_STATUS_SUCCESS);
    cudaMemcpy(hc, c, sizeof hc, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 8; i++)
        ck_assert_float_eq(hc[i], want[i]);
    ck_assert_int_eq(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a, 4, 1,
                                               b, 3, 6, &zero, c, 4, 1, 2),
                     CUBLAS_STATUS_INVALID_VALUE); /* C_0 and C_1 share row 1 */
    ck_assert_int_eq(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a, 4, -2,
                                               b, 3, 6, &zero, c, 4, 2, 2),
                     CUBLAS_STATUS_INVALID_VALUE); /* a negative stride */
    ck_assert_int_eq(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a, 4, 2,
                                               b, 3, 7, &zero, c, 4, 2, 2),
                     CUBLAS_STATUS_INVALID_VALUE); /* B_1 past b's allocation */
    ck_assert_int_eq(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a, 4, 2,
                                               b, 2, 6, &zero, c, 4, 2, 2),
                     CUBLAS_STATUS_INVALID_VALUE); /* ldb 2 < k = 3 */
    ck_assert_int_eq(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a,
                                                CUDA_R_16BF, 4, 2, b, CUDA_R_32F, 3, 6, &zero, c,
                                                CUDA_R_32F, 4, 2, 2, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_NOT_SUPPORTED); /* mixed operand types */
    ck_assert_int_eq(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a,
                                                CUDA_R_16BF, 4, 2, b, CUDA_R_16BF, 3, 6, &zero, c,
                                                CUDA_R_32F, 4, 2, 2, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    gemm_case_done(h, a, b, c);
}
END_TEST

/* A bf16 C (bf16 A and B, fp32 compute): each result is the fp32 sum
 * rounded once to nearest even, beta read from C's bf16; an fp32 A and B
 * with a bf16 C is refused, as cuBLAS refuses it. Sums 1 + 2^-8 (a tie:
 * down to 1, even) and 1 + 2^-7 + 2^-8 (a tie: up to 1 + 2^-6), then the
 * batched form with beta 1 adding A's row 0 (1, 2^-8) summed to C's 1 (2 +
 * 2^-8: down to 2). */
START_TEST(cublas_bf16_output_rounds_once)
{
    cublasHandle_t h;
    uint16_t *a, *b, *c;
    float one = 1.0f, zero = 0.0f;
    ck_assert_int_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    cudaMalloc((void **)&a, 4 * 2);
    cudaMalloc((void **)&b, 4 * 2);
    cudaMalloc((void **)&c, 2 * 2);
    /* column-major A 2x2 (ld 2): rows (1, 2^-8), (1 + 2^-7, 2^-8); B 2x1 = (1, 1), twice */
    uint16_t ha[4] = {0x3f80, 0x3f81, 0x3b80, 0x3b80}, hb[4] = {0x3f80, 0x3f80, 0x3f80, 0x3f80};
    uint16_t hc[2];
    cudaMemcpy(a, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice);
    ck_assert_int_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 1, 2, &one, a, CUDA_R_16BF, 2, b,
                                  CUDA_R_16BF, 2, &zero, c, CUDA_R_16BF, 2, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    cudaMemcpy(hc, c, sizeof hc, cudaMemcpyDeviceToHost);
    ck_assert_msg(hc[0] == 0x3f80 && hc[1] == 0x3f82,
                  "bf16 C: got 0x%04x 0x%04x, want 0x3f80 (1) and 0x3f82 (1 + 2^-6)", hc[0], hc[1]);
    /* batched: two 1x1 products (A's row 0, lda 2, stride 0; B's halves), beta 1 on C = 1 */
    uint16_t ones[2] = {0x3f80, 0x3f80};
    cudaMemcpy(c, ones, sizeof ones, cudaMemcpyHostToDevice);
    ck_assert_int_eq(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &one, a,
                                                CUDA_R_16BF, 2, 0, b, CUDA_R_16BF, 2, 2, &one, c,
                                                CUDA_R_16BF, 1, 1, 2, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    cudaMemcpy(hc, c, sizeof hc, cudaMemcpyDeviceToHost);
    ck_assert_msg(hc[0] == 0x4000 && hc[1] == 0x4000,
                  "bf16 C, beta 1: got 0x%04x 0x%04x, want 0x4000 (2) twice", hc[0], hc[1]);
    ck_assert_int_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a, CUDA_R_32F, 1, b,
                                  CUDA_R_32F, 1, &zero, c, CUDA_R_16BF, 1, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_NOT_SUPPORTED); /* fp32 operands, bf16 C */
    gemm_case_done(h, a, b, c);
}
END_TEST

/* Two ranks swap a buffer in place inside one NCCL group (send x, receive
 * into x: a hazard), and, apart, into a second buffer (no hazard); `mode`
 * "recv-first" posts each group's receive first; allow: let the hazard
 * through (PP_STANDIN_NCCL_HAZARD=allow) to see the numbers it gives. */
static int group_run(const char *order, const char *mode, int allow, char **out)
{
    char cmd[2048];
    snprintf(
        cmd, sizeof cmd,
        "PP_STANDIN_NCCL_ORDER=%s PP_STANDIN_NCCL_HAZARD=%s timeout 120 mpirun --oversubscribe "
        "--allow-run-as-root --bind-to none -np 2 -x PP_STANDIN_GPUS=2 -x PP_STANDIN_NCCL_ORDER "
        "-x PP_STANDIN_NCCL_HAZARD %s/bin/standin-group-hazard %s",
        order, allow ? "allow" : "refuse", PP_ROOT, mode);
    return run_cmd(cmd, out);
}

START_TEST(group_hazard_gives_wrong_numbers)
{
    char *out;
    ck_assert_msg(group_run("posted", "send-first", 1, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "rank 0: in place right, apart right") &&
                      strstr(out, "rank 1: in place right, apart right"),
                  "posted:\n%s", out);
    free(out);
    ck_assert_msg(group_run("reversed", "send-first", 1, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "rank 0: in place WRONG, apart right") &&
                      strstr(out, "rank 1: in place WRONG, apart right"),
                  "reversed:\n%s", out);
    free(out);
    ck_assert_msg(group_run("interleaved", "send-first", 1, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "apart right") && !strstr(out, "apart WRONG"), "interleaved:\n%s",
                  out);
    free(out);
    /* a receive posted first: `reversed` (make test's order) shows nothing */
    ck_assert_msg(group_run("reversed", "recv-first", 1, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "rank 0: in place right, apart right") &&
                      strstr(out, "rank 1: in place right, apart right"),
                  "recv-first:\n%s", out);
    free(out);
}
END_TEST

/* So the stand-in refuses such a group outright, under every member order
 * and either order of posting, naming it. */
START_TEST(group_hazard_refused_in_every_order)
{
    const char *orders[] = {"posted", "reversed", "interleaved"};
    const char *modes[] = {"send-first", "recv-first"};
    for (int o = 0; o < 3; o++)
        for (int m = 0; m < 2; m++) {
            char *out;
            int rc = group_run(orders[o], modes[m], 0, &out);
            ck_assert_msg(rc != 0 && strstr(out, "NCCL group hazard: member ") &&
                              strstr(out, "undefined in NCCL, whatever order the members run in") &&
                              !strstr(out, "in place right"),
                          "%s, %s: expected the group refused:\n%s", orders[o], modes[m], out);
            free(out);
        }
}
END_TEST

Suite *standin_suite(void)
{
    Suite *s = suite_create("standin");
    TCase *tc = tcase_create("strict");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, missing_event_is_reported);
    tcase_add_test(tc, execution_is_lazy);
    tcase_add_test(tc, cublas_checks_arguments);
    tcase_add_test(tc, cublas_batched_checks_arguments);
    tcase_add_test(tc, cublas_bf16_output_rounds_once);
    tcase_add_test(tc, group_hazard_gives_wrong_numbers);
    tcase_add_test(tc, group_hazard_refused_in_every_order);
    suite_add_tcase(s, tc);
    return s;
}
