/* gemm_lt.cu - fused-epilogue GEMMs on cuBLASLt (see gemm_lt.h).
 *
 * The row-major trick of cuda_stage.h's gemm(): a row-major [R][S] matrix
 * read column-major is its transpose, so we ask for D^T = op(B)^T op(A)^T,
 * an N x M column-major product with ld N. cuBLASLt's first operand is our
 * B (stored N x K with ld N when !tb, K x N with ld K and transposed when
 * tb), its second our A (K x M with ld K when !ta, M x K with ld M and
 * transposed when ta). cuBLASLt's bias runs along the rows of its D, which
 * are N: our columns, the feature dimension, as pp_bias_add's. The aux
 * matrix has D's shape, N x M with ld N.
 *
 * Types: A and B fp32 or bf16; C, D, aux, bias, alpha, beta fp32;
 * CUBLAS_COMPUTE_32F (plain fp32 accumulation, never TF32). cuBLASLt wants
 * the bias in D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, cublasLt.h),
 * so a bf16 bias is the caller's to keep unfused. */
#include "gemm_lt.h"

#include <cublasLt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"

/* One problem as the heuristic sees it: everything that may change its
 * answer, pointer alignments included (cuBLASLt assumes 256-byte aligned
 * operands unless told otherwise, and reads the bias and aux pointers'
 * alignment from the descriptor). */
typedef struct {
    int kind, ta, tb, M, N, K, bf16, has_c;
    int align[6]; /* bytes, up to 256: A, B, C, D, bias, aux */
} lt_key;

typedef struct {
    lt_key key;
    int ok; /* 0: no algorithm, the caller's unfused path */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc, ld; /* cuBLASLt's A (our B), B (our A), C, D */
    cublasLtMatmulAlgo_t algo;
} lt_plan;

enum { LT_CACHE = 64 }; /* problems per context; beyond, unfused (a stage has ~8) */

struct pp_lt {
    cublasLtHandle_t h;
    void *ws;
    lt_plan plan[LT_CACHE];
    int nplan;
};

static int lt_fail(pp_lt *lt, char *err, size_t errlen, const char *what, const char *why)
{
    if (err && errlen)
        snprintf(err, errlen, "%s failed: %s", what, why);
    if (lt) {
        if (lt->h)
            (void)cublasLtDestroy(lt->h); /* best effort: already failing */
        if (lt->ws)
            (void)cudaFree(lt->ws);
        free(lt);
    }
    return -1;
}

int pp_lt_create(pp_lt **out, char *err, size_t errlen)
{
    *out = NULL;
    pp_lt *lt = (pp_lt *)calloc(1, sizeof *lt);
    if (!lt)
        return lt_fail(NULL, err, errlen, "malloc", "out of memory");
    cublasStatus_t bs = cublasLtCreate(&lt->h);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        lt->h = NULL;
        return lt_fail(lt, err, errlen, "cublasLtCreate", cublasGetStatusString(bs));
    }
    cudaError_t ce = cudaMalloc(&lt->ws, PP_LT_WORKSPACE_BYTES);
    if (ce != cudaSuccess) {
        lt->ws = NULL;
        return lt_fail(lt, err, errlen, "cudaMalloc (cuBLASLt workspace)", cudaGetErrorString(ce));
    }
    *out = lt;
    return 0;
}

static void plan_free(lt_plan *p)
{
    /* Destroying descriptors never fails on valid ones; best effort. */
    if (p->op)
        (void)cublasLtMatmulDescDestroy(p->op);
    if (p->la)
        (void)cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        (void)cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc)
        (void)cublasLtMatrixLayoutDestroy(p->lc);
    if (p->ld)
        (void)cublasLtMatrixLayoutDestroy(p->ld);
    memset(p, 0, sizeof *p);
}

/* The caller has synchronised the stream (model_cuda's cublasDestroy
 * synchronises the device first), so the workspace is idle. */
void pp_lt_destroy(pp_lt *lt)
{
    if (!lt)
        return;
    for (int i = 0; i < lt->nplan; i++)
        plan_free(&lt->plan[i]);
    cublasCheck(cublasLtDestroy(lt->h));
    cudaCheck(cudaFree(lt->ws));
    free(lt);
}

static int align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && a % (uintptr_t)al)
        al /= 2;
    return al;
}

static cublasLtEpilogue_t epilogue_of(int kind)
{
    switch (kind) {
    case PP_LT_BIAS:
        return CUBLASLT_EPILOGUE_BIAS;
    case PP_LT_GELU_AUX_BIAS:
        return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    default:
        return CUBLASLT_EPILOGUE_DGELU;
    }
}

/* Sets a descriptor attribute; 0 or -1 (the problem is then unfused). */
#define SET_OP(p, attr, val)                                                                       \
    (cublasLtMatmulDescSetAttribute((p)->op, attr, &(val), sizeof(val)) == CUBLAS_STATUS_SUCCESS)

/* Builds p's descriptors for its key and asks the heuristic (with the
 * call's bias and aux pointers set, as their alignment counts). 1 when an
 * algorithm came back. */
static int plan_make(pp_lt *lt, lt_plan *p, const pp_lt_epilogue *e)
{
    const lt_key *k = &p->key;
    cudaDataType_t ab = k->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) {
        p->op = NULL;
        return 0;
    }
    cublasOperation_t opa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A is our B */
    cublasOperation_t opb = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = epilogue_of(k->kind);
    int ok = SET_OP(p, CUBLASLT_MATMUL_DESC_TRANSA, opa) &&
             SET_OP(p, CUBLASLT_MATMUL_DESC_TRANSB, opb) &&
             SET_OP(p, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
    /* The bias and aux types are left at their default, D's type (fp32):
     * cublasLt.h warns that setting them for a combination that does not
     * take them makes cublasLtMatmul fail, after the heuristic. */
    if (ok && e->bias)
        ok = SET_OP(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, e->bias);
    if (ok && e->aux) {
        int64_t ld = k->N;
        ok = SET_OP(p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, e->aux) &&
             SET_OP(p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld);
    }
    if (!ok)
        return 0;
    /* Stored shapes, column-major (file header). */
    uint64_t arows = k->tb ? k->K : k->N, acols = k->tb ? k->N : k->K;
    uint64_t brows = k->ta ? k->M : k->K, bcols = k->ta ? k->K : k->M;
    if (cublasLtMatrixLayoutCreate(&p->la, ab, arows, acols, (int64_t)arows) ||
        cublasLtMatrixLayoutCreate(&p->lb, ab, brows, bcols, (int64_t)brows) ||
        cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, k->N, k->M, k->N) ||
        cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_32F, k->N, k->M, k->N))
        return 0;

    cublasLtMatmulPreference_t pref;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
        return 0;
    uint64_t ws = PP_LT_WORKSPACE_BYTES;
    uint32_t al[4] = {(uint32_t)k->align[1], (uint32_t)k->align[0], (uint32_t)k->align[2],
                      (uint32_t)k->align[3]}; /* cuBLASLt's A, B, C, D */
    ok = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                              sizeof ws) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                              &al[0], sizeof al[0]) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                              &al[1], sizeof al[1]) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                              &al[2], sizeof al[2]) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                              &al[3], sizeof al[3]) == CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulHeuristicResult_t res;
    int n = 0;
    memset(&res, 0, sizeof res);
    if (ok && cublasLtMatmulAlgoGetHeuristic(lt->h, p->op, p->la, p->lb, p->lc, p->ld, pref, 1,
                                             &res, &n) != CUBLAS_STATUS_SUCCESS)
        n = 0;
    (void)cublasLtMatmulPreferenceDestroy(pref);
    if (!ok || n < 1 || res.state != CUBLAS_STATUS_SUCCESS)
        return 0;
    p->algo = res.algo;
    return 1;
}

/* The cached plan of this problem (made on first sight), or NULL when the
 * cache is full. */
static lt_plan *plan_of(pp_lt *lt, const lt_key *k, const pp_lt_epilogue *e)
{
    for (int i = 0; i < lt->nplan; i++)
        if (!memcmp(&lt->plan[i].key, k, sizeof *k))
            return &lt->plan[i];
    if (lt->nplan == LT_CACHE)
        return NULL;
    lt_plan *p = &lt->plan[lt->nplan++];
    memset(p, 0, sizeof *p);
    p->key = *k;
    p->ok = plan_make(lt, p, e);
    /* PP_LT_VERBOSE=1 says, once per problem, whether cuBLASLt offered an
     * algorithm: the way to see on a real GPU that the fusions happen. */
    if (getenv("PP_LT_VERBOSE"))
        fprintf(stderr, "ppvm: cuBLASLt %s epilogue %s, %s, %dx%dx%d%s\n",
                p->ok ? "fuses" : "offers no algorithm for",
                k->kind == PP_LT_BIAS            ? "bias"
                : k->kind == PP_LT_GELU_AUX_BIAS ? "gelu_aux_bias"
                                                 : "dgelu",
                k->bf16 ? "bf16" : "fp32", k->M, k->N, k->K, k->has_c ? ", + c" : "");
    if (!p->ok) { /* keep the answer, not the descriptors */
        plan_free(p);
        p->key = *k;
    }
    return p;
}

int pp_lt_gemm(pp_lt *lt, cudaStream_t st, int ta, int tb, int M, int N, int K, const void *A,
               const void *B, int bf16, const pp_lt_epilogue *e, float *D)
{
    if (!lt || e->kind == PP_LT_NONE || M <= 0 || N <= 0 || K <= 0)
        return 0;
    if ((e->kind == PP_LT_GELU_AUX_BIAS || e->kind == PP_LT_DGELU) && (!e->aux || N % 8))
        return 0; /* EPILOGUE_AUX_LD: a multiple of 8 (cublasLt.h) */
    if (e->kind != PP_LT_DGELU && !e->bias)
        return 0;
    lt_key k;
    memset(&k, 0, sizeof k); /* memcmp'd: no stray padding */
    k.kind = e->kind;
    k.ta = ta;
    k.tb = tb;
    k.M = M;
    k.N = N;
    k.K = K;
    k.bf16 = bf16;
    k.has_c = e->c != NULL;
    const void *ptr[6] = {A, B, e->c ? e->c : D, D, e->bias, e->aux};
    for (int i = 0; i < 6; i++)
        k.align[i] = ptr[i] ? align_of(ptr[i]) : 0;
    lt_plan *p = plan_of(lt, &k, e);
    if (!p || !p->ok)
        return 0;
    /* This call's pointers (their alignment is the key's, so the algorithm
     * holds); the descriptor is host state, read when the call is made. */
    if (e->bias)
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &e->bias, sizeof e->bias));
    if (e->aux)
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                   &e->aux, sizeof e->aux));
    float alpha = 1.0f, beta = e->c ? 1.0f : 0.0f;
    cublasStatus_t s = cublasLtMatmul(lt->h, p->op, &alpha, B, p->la, A, p->lb, &beta,
                                      e->c ? (const void *)e->c : (const void *)D, p->lc, D, p->ld,
                                      &p->algo, lt->ws, PP_LT_WORKSPACE_BYTES, st);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE) {
        /* The heuristic offered an algorithm the call then refused: nothing
         * was enqueued, so this problem falls back for good, said once. */
        fprintf(stderr,
                "ppvm: cuBLASLt refused a fused GEMM it had offered (%s; epilogue %d, %dx%dx%d): "
                "using the unfused path for it\n",
                cublasGetStatusString(s), (int)e->kind, M, N, K);
        plan_free(p);
        p->key = k;
        p->ok = 0;
        return 0;
    }
    cublasCheck(s);
    return 1;
}
