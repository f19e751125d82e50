/* kprof.h - optional per-kernel timers for the CPU kernels (bin/model_bench's
 * per-kernel table). Off unless pp_kprof_on is set, so the kernels pay one
 * load and a branch per call. Kernels nest (attention calls the GEMM): each
 * slot gets its self time, the time of the kernels it calls going to
 * theirs. GEMMs are also recorded per shape (M, N, K, transposes, leading
 * dimensions) with their FLOPs, so a caller can compare the rate a shape
 * achieves inside a step with SGEMM's alone at that shape. Single-threaded
 * (one rank per process), like the kernels. */
#ifndef PP_KPROF_H
#define PP_KPROF_H

enum {
    PP_K_GEMM,     /* pp_gemm / pp_gemm_ld */
    PP_K_GELU,     /* GELU forward, bias + GELU */
    PP_K_GELU_BWD, /* GELU backward */
    PP_K_LN,       /* layer norm forward */
    PP_K_LN_BWD,   /* layer norm backward */
    PP_K_XENT,     /* softmax cross-entropy, forward, backward, fused */
    PP_K_ATTN,     /* attention's own work (softmax, masks, D_i) beside its GEMMs */
    PP_K_BIAS,     /* bias add, bias gradient, residual + bias */
    PP_K_EMBED,    /* embeddings and their backward */
    PP_K_BF16,     /* fp32 <-> bf16 */
    PP_K_OPTIM,    /* SGD, AdamW */
    PP_K_COUNT
};

typedef struct {
    double sec; /* self time */
    long calls;
} pp_kprof_slot;

#define PP_KPROF_SHAPES 64
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, beta0; /* beta0: beta was 0 */
    long calls;
    double sec;
} pp_kprof_gemm;

extern int pp_kprof_on;
extern pp_kprof_slot pp_kprof[PP_K_COUNT];
extern pp_kprof_gemm pp_kprof_gemms[PP_KPROF_SHAPES];
extern int pp_kprof_ngemms;        /* shapes recorded */
extern double pp_kprof_gemm_other; /* seconds of shapes past the table */
extern const char *const pp_kprof_names[PP_K_COUNT];

void pp_kprof_reset(void);
double pp_kprof_begin(void);           /* returns the start time; opens a nesting level */
double pp_kprof_end(int k, double t0); /* closes it, charges k; returns the self time */
void pp_kprof_gemm_add(int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, int beta0,
                       double sec);

#define KPROF_BEGIN() double kprof_t0_ = pp_kprof_on ? pp_kprof_begin() : 0.0
#define KPROF_END(k)                                                                               \
    do {                                                                                           \
        if (pp_kprof_on)                                                                           \
            pp_kprof_end((k), kprof_t0_);                                                          \
    } while (0)

#endif
