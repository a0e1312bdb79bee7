#include "ops/cuda_expert_cache.h"

#include "core/error.h"
#include "quant/cuda/check.cuh"

namespace mox::cuda {

namespace {

__global__ void lookup_kernel(const int32_t* __restrict__ table, const int32_t* __restrict__ ids,
                              const float* __restrict__ weights, int k, int32_t zero_slot,
                              int32_t* __restrict__ slot_ids, float* __restrict__ slot_weights) {
    const int i = threadIdx.x;
    if (i >= k) return;
    const int32_t s = table[ids[i]];
    slot_ids[i] = s >= 0 ? s : zero_slot;
    slot_weights[i] = s >= 0 ? weights[i] : 0.0f;
}

}  // namespace

void expert_cache_lookup(const int32_t* table, const int32_t* ids, const float* weights, int64_t k,
                         int32_t zero_slot, int32_t* slot_ids, float* slot_weights, StreamHandle stream) {
    MOX_CHECK(k >= 1 && k <= 1024 && zero_slot >= 0, "expert cache lookup: k {}, zero slot {}", k, zero_slot);
    lookup_kernel<<<1, static_cast<unsigned>((k + 31) / 32 * 32), 0, stream>>>(
        table, ids, weights, static_cast<int>(k), zero_slot, slot_ids, slot_weights);
    MOX_CUDA_CHECK_LAUNCH("expert_cache_lookup");
}

}  // namespace mox::cuda
