// The device side of the expert cache (models/gpu/gpu_expert_cache.h): which of a token's selected
// experts the pool holds. Plain C++; the kernel is ops/cuda/expert_cache.cu, linked only with
// -DMOX_CUDA=ON. All pointers are device memory.
#pragma once

#include "quant/cuda_stream.h"

#include <cstdint>

namespace mox::cuda {

// For i < k: e = ids[i], s = table[e] (the slot holding expert e of this layer, or -1).
//   resident: slot_ids[i] = s, slot_weights[i] = weights[i];
//   not:      slot_ids[i] = zero_slot (a slot of zeros: it adds exactly nothing), slot_weights[i] = 0.
// The GPU MoE decode launches then compute the resident experts from the pool with slot_ids, while the
// CPU computes the others.
void expert_cache_lookup(const int32_t* table, const int32_t* ids, const float* weights, int64_t k,
                         int32_t zero_slot, int32_t* slot_ids, float* slot_weights, StreamHandle stream);

}  // namespace mox::cuda
