/* tensor_gemm.c - the row-parallel GEMM the gpt and llama layers share
 * (tensor_gemm.h). */
#include "tensor_gemm.h"

#include <string.h>

#include "tensor_shard.h"

void pp_row_parallel(const pp_stage_gemms *g, int BT, int C, int K, const float *in, const float *w,
                     const float *x, float *out)
{
    size_t xn = (size_t)BT * C;
    if (pp_tensor_hook_active()) { /* the partial sum, summed, then the residual */
        pp_gemm_aw(g, 0, 1, BT, C, K, in, w, 0.0f, out);
        pp_tensor_allreduce(out, xn);
        for (size_t i = 0; i < xn; i++)
            out[i] += x[i];
    } else { /* the reference's arithmetic: the GEMM accumulates onto x */
        memcpy(out, x, xn * sizeof *out);
        pp_gemm_aw(g, 0, 1, BT, C, K, in, w, 1.0f, out);
    }
}
