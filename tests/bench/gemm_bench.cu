/* gemm_bench.cu - cuBLAS's GEMM rate at the demo model's GEMM shapes: the
 * ceiling tests/bench/gpu_bench.sh compares ppvm --backend cuda against.
 * For one training step of the model (every block's forward h = x W1^T,
 * y = a W2^T, and backward da, dW2, dx, dW1, the head's three) it times each
 * shape, row-major with the transposes the model uses, and prints one line
 * per shape and the rate over the whole step: the step's GEMM FLOPs over the
 * time those GEMMs take at cuBLAS's speed. In the precision ppvm runs:
 * fp32 (SGEMM, no TF32) or bf16 (GemmEx, bf16 operands, fp32 output and
 * compute, as model_cuda.cu calls it).
 *
 *   gemm_bench D F batch blocks microbatches [fp32|bf16] */
#include <cublas_v2.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../kernels/cuda_check.h"

void (*pp_cuda_fatal_hook)(void) = NULL;
void pp_cuda_fatal(void) { exit(1); } /* cuda_check.h: this tool has no hook to run */

typedef struct {
    const char *what;
    int ta, tb, M, N, K, count; /* row-major C[M][N] = op(A) op(B), count per step */
} shape;

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. A and B
 * are floats, or bf16 when bf16 is set; C is fp32 either way. */
static void gemm(cublasHandle_t h, int bf16, int ta, int tb, int M, int N, int K, const void *A,
                 const void *B, float *C)
{
    const float one = 1.0f, zero = 0.0f;
    int lda = ta ? M : K, ldb = tb ? K : N;
    cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (bf16)
        cublasCheck(cublasGemmEx(h, opb, opa, N, M, K, &one, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF,
                                 lda, &zero, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    else
        cublasCheck(cublasSgemm(h, opb, opa, N, M, K, &one, (const float *)B, ldb, (const float *)A,
                                lda, &zero, C, N));
}

int main(int argc, char **argv)
{
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: gemm_bench D F batch blocks microbatches [fp32|bf16]\n");
        return 2;
    }
    int bf16 = argc == 7 && !strcmp(argv[6], "bf16");
    if (argc == 7 && !bf16 && strcmp(argv[6], "fp32")) {
        fprintf(stderr, "gemm_bench: precision '%s': expected fp32 or bf16\n", argv[6]);
        return 2;
    }
    int D = atoi(argv[1]), F = atoi(argv[2]), Bt = atoi(argv[3]), nb = atoi(argv[4]),
        mb = atoi(argv[5]), V = 256;
    if (D <= 0 || F <= 0 || Bt <= 0 || nb <= 0 || mb <= 0) {
        fprintf(stderr, "gemm_bench: every argument must be a positive integer\n");
        return 2;
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("skipped: no GPU\n");
        return 0;
    }
    const shape shapes[] = {
        {"F  h = x W1^T", 0, 1, Bt, F, D, nb * mb}, {"F  y = a W2^T", 0, 1, Bt, D, F, nb * mb},
        {"B  da = dy W2", 0, 0, Bt, F, D, nb * mb}, {"B  dW2 = dy^T a", 1, 0, D, F, Bt, nb * mb},
        {"B  dx = dh W1", 0, 0, Bt, D, F, nb * mb}, {"B  dW1 = dh^T x", 1, 0, F, D, Bt, nb * mb},
        {"F  logits = x Wh^T", 0, 1, Bt, V, D, mb}, {"B  dx = dl Wh", 0, 0, Bt, D, V, mb},
        {"B  dWh = dl^T x", 1, 0, V, D, Bt, mb},
    };
    size_t big = (size_t)(F > D ? F : D) * (size_t)(F > D ? F : D);
    size_t most = big > (size_t)Bt * F ? big : (size_t)Bt * F;
    float *A, *B, *C;
    cudaCheck(cudaMalloc(&A, most * sizeof(float)));
    cudaCheck(cudaMalloc(&B, most * sizeof(float)));
    cudaCheck(cudaMalloc(&C, most * sizeof(float)));
    cudaCheck(cudaMemset(A, 0, most * sizeof(float)));
    cudaCheck(cudaMemset(B, 0, most * sizeof(float)));
    cublasHandle_t h;
    cublasCheck(cublasCreate(&h));
    cublasCheck(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0));
    cudaCheck(cudaEventCreate(&t1));
    double step_flops = 0, step_time = 0;
    printf("%-20s %6s %6s %6s %6s %10s\n", "gemm", "M", "N", "K", "count", "TFLOP/s");
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const shape *s = &shapes[i];
        for (int r = 0; r < 3; r++) /* warm up */
            gemm(h, bf16, s->ta, s->tb, s->M, s->N, s->K, A, B, C);
        int reps = 20;
        cudaCheck(cudaEventRecord(t0, 0));
        for (int r = 0; r < reps; r++)
            gemm(h, bf16, s->ta, s->tb, s->M, s->N, s->K, A, B, C);
        cudaCheck(cudaEventRecord(t1, 0));
        cudaCheck(cudaEventSynchronize(t1));
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, t0, t1));
        double sec = ms / 1e3 / reps, flops = 2.0 * s->M * s->N * s->K;
        printf("%-20s %6d %6d %6d %6d %10.2f\n", s->what, s->M, s->N, s->K, s->count,
               flops / sec / 1e12);
        step_flops += flops * s->count;
        step_time += sec * s->count;
    }
    printf("step (%s): %.3f TFLOP in GEMMs, %.2f ms at cuBLAS's rate: %.2f TFLOP/s\n",
           bf16 ? "bf16" : "fp32", step_flops / 1e12, step_time * 1e3,
           step_flops / step_time / 1e12);
    cublasCheck(cublasDestroy(h));
    cudaCheck(cudaFree(A));
    cudaCheck(cudaFree(B));
    cudaCheck(cudaFree(C));
    return 0;
}
