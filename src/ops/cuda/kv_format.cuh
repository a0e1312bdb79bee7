// KV cache element formats on the GPU, shared by the attention kernels (which store and read every
// format) and the q/k preparation (which stores k and v straight into elementwise caches at decode).
// Only .cu files include this header.
#pragma once

#include "core/error.h"
#include "quant/types.h"

#include <cuda_fp16.h>

#include <cstdint>

namespace mox::cuda {

enum KvFmt : int { kFmtF32 = 0, kFmtF16 = 1, kFmtBf16 = 2, kFmtQ8_0 = 3, kFmtQ4_0 = 4 };

inline int kv_fmt(quant::TypeId t) {
    switch (t) {
        case quant::TypeId::f32:
            return kFmtF32;
        case quant::TypeId::f16:
            return kFmtF16;
        case quant::TypeId::bf16:
            return kFmtBf16;
        case quant::TypeId::q8_0:
            return kFmtQ8_0;
        case quant::TypeId::q4_0:
            return kFmtQ4_0;
        default:
            fail("CUDA attention: KV cache type {} is not supported", quant::traits(t).name);
    }
}

__device__ __forceinline__ uint32_t f16_bits(float x) {
    return __half_as_ushort(__float2half_rn(x));  // round to nearest even, as core/fp16.h
}

// core/fp16.h fp32_to_bf16: round to nearest even on the raw bits, NaN kept quiet.
__device__ __forceinline__ uint32_t bf16_bits(float x) {
    const uint32_t bits = __float_as_uint(x);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return ((bits >> 16) | 0x40u) & 0xFFFFu;
    return ((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16) & 0xFFFFu;
}

// Element i of a row of an elementwise cache (f32, f16, bf16): the CPU's kv_store conversions.
__device__ __forceinline__ void store_elementwise(int fmt, uint8_t* row, int64_t i, float x) {
    if (fmt == kFmtF32) reinterpret_cast<float*>(row)[i] = x;
    else reinterpret_cast<uint16_t*>(row)[i] = static_cast<uint16_t>(fmt == kFmtF16 ? f16_bits(x) : bf16_bits(x));
}

}  // namespace mox::cuda
