/* test_graph.c - the `standin_graph` suite (bin/check_pp-standin only): the
 * stand-ins' stream capture and graph replay (tests/standin/graph.cpp), and
 * what it shows of the cuda backend's model code. A GPT training step (one
 * stage holding the whole model: F, B, SGD with the compute copy; fp32 and
 * bf16; the fused attention) captured once and replayed on new tokens each
 * step gives the same losses and weights, bit for bit, as the same steps
 * launched call by call: the stage code makes no host synchronisation and
 * allocates nothing inside a step. Capture across two streams (an event
 * fork and join) replays in order; a host synchronisation inside a capture
 * fails and invalidates it, as CUDA's global capture mode does. Stand-ins,
 * not a GPU; ppvm's own replayed steps are the gpu_graph suite's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cuda_check.h"
#include "../../kernels/cuda_kernels.h"
#include "../../kernels/model.h"
#include "../../kernels/model_cuda.h"
#include "../unit/testutil.h"
#include <check.h>

static uint32_t layers1[] = {2};

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes ? bytes : 1));
    cudaCheck(cudaMemset(p, 0, bytes ? bytes : 1));
    return p;
}

/* Step t's tokens: batch rows of context + 1 below vocab. */
static void tokens_of(int32_t *tok, size_t n, int t, int vocab)
{
    uint32_t x = 1234567u + 7919u * (uint32_t)t;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        tok[i] = (int32_t)((x >> 8) % (uint32_t)vocab);
    }
}

enum { STEPS = 3 };

/* STEPS SGD steps of a one-stage GPT, launched (graph 0) or captured at the
 * first step and replayed (graph 1): the losses and the final weights. */
static void train(const pp_model *m, int graph, double *loss, float *params)
{
    const int S = 1, s = 0, bf16 = m->precision == PP_PREC_BF16;
    size_t np = pp_stage_param_count(m, S, s), ntok = pp_tokens_bytes(m) / sizeof(int32_t);
    cudaStream_t st;
    cudaCheck(cudaStreamCreate(&st));
    pp_cuda_model *cm;
    char err[256];
    ck_assert_msg(pp_cuda_model_create(&cm, st, err, sizeof err) == 0, "create: %s", err);
    float *p = dalloc(np * 4), *g = dalloc(np * 4);
    void *w = bf16 ? dalloc(pp_stage_compute_bytes(m, S, s)) : p;
    void *stash = dalloc(pp_stage_stash_bytes(m, S, s));
    void *work = dalloc(pp_stage_workspace_bytes(m, S, s));
    int32_t *d_tok = dalloc(ntok * 4), *tok = malloc(ntok * 4);
    pp_cuda_stage_init(cm, m, S, s, 5, p);
    if (bf16)
        pp_cuda_stage_compute_copy(cm, m, S, s, p, w);
    cudaGraph_t gr = NULL;
    cudaGraphExec_t ex = NULL;
    for (int t = 0; t < STEPS; t++) {
        tokens_of(tok, ntok, t, (int)m->vocab);
        cudaCheck(cudaStreamSynchronize(st));
        cudaCheck(cudaMemcpy(d_tok, tok, ntok * 4, cudaMemcpyHostToDevice));
        if (!graph || t == 0) {
            if (graph)
                cudaCheck(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            pp_cuda_stage_forward(cm, m, S, s, w, d_tok, d_tok, stash, work, NULL, 0.125f);
            pp_cuda_stage_backward(cm, m, S, s, w, g, stash, work, NULL, NULL);
            cudaCheck(pp_cu_sgd_step(p, g, np, 0.05f, bf16 ? (uint16_t *)w : NULL, st));
            if (graph) {
                cudaCheck(cudaStreamEndCapture(st, &gr));
                cudaCheck(cudaGraphInstantiate(&ex, gr, 0));
            }
        }
        if (graph)
            cudaCheck(cudaGraphLaunch(ex, st));
        loss[t] = pp_cuda_loss_take(cm);
    }
    cudaCheck(cudaStreamSynchronize(st));
    cudaCheck(cudaMemcpy(params, p, np * 4, cudaMemcpyDeviceToHost));
    if (graph) {
        cudaCheck(cudaGraphExecDestroy(ex));
        cudaCheck(cudaGraphDestroy(gr));
    }
    pp_cuda_model_destroy(cm);
    void *dev[] = {p, g, stash, work, d_tok};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaCheck(cudaFree(dev[i]));
    if (bf16)
        cudaCheck(cudaFree(w));
    cudaCheck(cudaStreamDestroy(st));
    free(tok);
}

static void replay_matches(int prec)
{
    const pp_model m = {.kind = PP_MODEL_GPT,
                        .vocab = 37,
                        .context = 7,
                        .embed = 12,
                        .heads = 3,
                        .ffn = 20,
                        .blocks = 2,
                        .batch = 2,
                        .precision = prec,
                        .layers = layers1};
    size_t np = pp_stage_param_count(&m, 1, 0);
    double l0[STEPS], l1[STEPS];
    float *p0 = malloc(np * 4), *p1 = malloc(np * 4);
    train(&m, 0, l0, p0);
    train(&m, 1, l1, p1);
    for (int t = 0; t < STEPS; t++)
        ck_assert_msg(memcmp(&l0[t], &l1[t], sizeof l0[t]) == 0,
                      "step %d: loss launched %.17g, replayed %.17g", t + 1, l0[t], l1[t]);
    ck_assert_msg(l0[0] != l0[1] && l0[1] != l0[2], "the steps' losses did not change (%g %g %g)",
                  l0[0], l0[1], l0[2]);
    for (size_t i = 0; i < np; i++)
        ck_assert_msg(memcmp(&p0[i], &p1[i], 4) == 0, "weight %zu: launched %.9g, replayed %.9g", i,
                      (double)p0[i], (double)p1[i]);
    free(p0), free(p1);
}

START_TEST(test_gpt_step_replay_fp32) { replay_matches(PP_PREC_FP32); }
END_TEST

START_TEST(test_gpt_step_replay_bf16) { replay_matches(PP_PREC_BF16); }
END_TEST

/* Two streams: a fork (event recorded in the capture, waited by b) and a
 * join; the replay runs a's memset, b's copy of it, a's copy back. */
START_TEST(test_fork_join)
{
    cudaStream_t a, b;
    cudaEvent_t fork, join;
    cudaCheck(cudaStreamCreate(&a));
    cudaCheck(cudaStreamCreate(&b));
    cudaCheck(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    unsigned char *x = dalloc(64), *y = dalloc(64), h[64];
    cudaGraph_t gr;
    cudaGraphExec_t ex;
    cudaCheck(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal));
    cudaCheck(cudaMemsetAsync(x, 7, 64, a));
    cudaCheck(cudaEventRecord(fork, a));
    cudaCheck(cudaStreamWaitEvent(b, fork, 0));
    cudaCheck(cudaMemcpyAsync(y, x, 64, cudaMemcpyDeviceToDevice, b));
    cudaCheck(cudaEventRecord(join, b));
    cudaCheck(cudaStreamWaitEvent(a, join, 0));
    cudaCheck(cudaMemsetAsync(x, 1, 32, a));
    cudaCheck(cudaStreamEndCapture(a, &gr));
    cudaCheck(cudaMemcpy(h, y, 64, cudaMemcpyDeviceToHost));
    ck_assert_msg(h[0] == 0, "a captured copy ran before the replay");
    cudaCheck(cudaGraphInstantiate(&ex, gr, 0));
    cudaCheck(cudaGraphLaunch(ex, a));
    cudaCheck(cudaStreamSynchronize(a));
    cudaCheck(cudaMemcpy(h, y, 64, cudaMemcpyDeviceToHost));
    ck_assert_msg(h[0] == 7 && h[63] == 7, "y: %d %d, want 7 7", h[0], h[63]);
    cudaCheck(cudaMemcpy(h, x, 64, cudaMemcpyDeviceToHost));
    ck_assert_msg(h[0] == 1 && h[63] == 7, "x: %d %d, want 1 7", h[0], h[63]);
    cudaCheck(cudaGraphExecDestroy(ex));
    cudaCheck(cudaGraphDestroy(gr));
    cudaCheck(cudaFree(x));
    cudaCheck(cudaFree(y));
    cudaCheck(cudaEventDestroy(fork));
    cudaCheck(cudaEventDestroy(join));
    cudaCheck(cudaStreamDestroy(a));
    cudaCheck(cudaStreamDestroy(b));
}
END_TEST

/* A host wait inside a capture fails and the capture ends invalidated. */
START_TEST(test_sync_invalidates)
{
    cudaStream_t a;
    cudaCheck(cudaStreamCreate(&a));
    unsigned char *x = dalloc(16);
    cudaGraph_t gr = (cudaGraph_t)1;
    enum cudaStreamCaptureStatus cs;
    cudaCheck(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal));
    cudaCheck(cudaMemsetAsync(x, 3, 16, a));
    ck_assert_int_eq(cudaStreamSynchronize(a), cudaErrorStreamCaptureUnsupported);
    cudaGetLastError();
    cudaCheck(cudaStreamIsCapturing(a, &cs));
    ck_assert_int_eq(cs, cudaStreamCaptureStatusInvalidated);
    ck_assert_int_eq(cudaStreamEndCapture(a, &gr), cudaErrorStreamCaptureInvalidated);
    ck_assert_msg(gr == NULL, "an invalidated capture returned a graph");
    ck_assert_int_eq(cudaStreamEndCapture(a, &gr), cudaErrorIllegalState); /* not capturing */
    cudaCheck(cudaStreamIsCapturing(a, &cs));
    ck_assert_int_eq(cs, cudaStreamCaptureStatusNone);
    cudaCheck(cudaFree(x));
    cudaCheck(cudaStreamDestroy(a));
}
END_TEST

Suite *standin_graph_suite(void)
{
    Suite *s = suite_create("standin_graph");
    TCase *tc = tcase_create("standin_graph");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_gpt_step_replay_fp32);
    tcase_add_test(tc, test_gpt_step_replay_bf16);
    tcase_add_test(tc, test_fork_join);
    tcase_add_test(tc, test_sync_invalidates);
    suite_add_tcase(s, tc);
    return s;
}
