/* gpt_cuda.cu - GPT-2's pipeline stages on a GPU (see model_cuda.h;
 * model_cuda.cu dispatches here for PP_MODEL_GPT). Not written yet. */
#include <stdio.h>

#include "cuda_stage.h"

extern "C" {
#include "model.h"
}

static void gpt_unwritten(void)
{
    fprintf(stderr, "ppvm: the gpt model has no CUDA implementation yet\n");
    pp_cuda_fatal();
}

static void gpt_forward(pp_cuda_model *, const pp_model *, int, int, const void *, const void *,
                        const int32_t *, void *, void *, float *, float)
{
    gpt_unwritten();
}
static void gpt_backward(pp_cuda_model *, const pp_model *, int, int, const void *, float *,
                         const void *, void *, const float *, float *)
{
    gpt_unwritten();
}
static void gpt_backward_input(pp_cuda_model *, const pp_model *, int, int, const void *,
                               void *, void *, const float *, float *)
{
    gpt_unwritten();
}
static void gpt_backward_weight(pp_cuda_model *, const pp_model *, int, int, float *,
                                const void *, void *)
{
    gpt_unwritten();
}

extern const pp_cuda_model_impl pp_cuda_model_gpt = {gpt_forward, gpt_backward,
                                                     gpt_backward_input, gpt_backward_weight};
