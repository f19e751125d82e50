/* cuda_bf16.h - HOST STAND-IN (tests/standin): the bf16 intrinsics the
 * kernels use, with CUDA's rounding (round to nearest even; NaN to the
 * canonical 0x7fff). Not CUDA. */
#ifndef PP_STANDIN_CUDA_BF16_H
#define PP_STANDIN_CUDA_BF16_H
#include <stdint.h>
#include <string.h>
struct __nv_bfloat16 {
    unsigned short x;
};
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    __nv_bfloat16 r;
    if ((b & 0x7fffffffu) > 0x7f800000u)
        r.x = 0x7fff;
    else
        r.x = (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    return r;
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
static inline float __bfloat162float(__nv_bfloat16 h)
{
    uint32_t b = (uint32_t)h.x << 16;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
#endif
