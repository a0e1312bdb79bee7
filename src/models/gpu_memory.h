// What the GPU forward of a model allocates besides weights, KV cache and DeltaNet state
// (the memory model): activations for one micro-batch, kernel scratch, the expert staging
// buffers of prefill streaming, and the pinned host buffers of the CPU hand-off. Plain C++: the
// planner uses it on machines without CUDA, and the backend (models/gpu) allocates exactly these
// sizes, checking that every kernel's own need fits (a failed check is a bug in this file).
//
// The scratch terms mirror the kernels' workspace layouts (quant/cuda/matmul.cu make_plan,
// ops/cuda/moe_batch.cu layout, ops/cuda/attention.cu make_plan) as upper bounds over every type.
#pragma once

#include "models/hparams.h"

#include <cstdint>

namespace mox::models {

// Floats after the logit rows (device and pinned host) that hold one row's arg max (cuda::argmax's
// 8-byte result), fetched with the logits.
inline constexpr int64_t kArgmaxSlotFloats = 2;

struct GpuBufferBytes {
    uint64_t activations = 0;  // fp32 rows of one micro-batch, token ids, logits
    uint64_t matmul_scratch = 0;  // the larger of the tensor-core matmul and batched-MoE workspaces
    uint64_t attention_scratch = 0;  // split-context partial results
    uint64_t staging = 0;      // two buffers of the largest streamed layer's expert stacks
    uint64_t expert_cache = 0;  // the expert cache's pool, slot tables and lookup (0: no cache)
    uint64_t pinned_host = 0;  // page-locked host memory: hand-off, logits, token/embedding staging

    uint64_t device_total() const {
        return activations + matmul_scratch + attention_scratch + staging + expert_cache;
    }
};

struct GpuBufferShape {
    int64_t n_ubatch = 512;
    int64_t n_ctx_max = 0;              // 0: the trained context
    bool any_host_experts = false;      // hand-off buffers exist
    bool token_embd_on_gpu = true;      // false: embeddings staged in pinned memory
    uint64_t largest_streamed_layer = 0;  // bytes of the three stacks (0: nothing streams)
    int64_t expert_cache_slots = 0;       // experts the expert cache's pool holds (0: no cache)
    uint64_t expert_cache_slot_bytes = 0;  // expert_slot_layout(...).bytes of the layers it serves
};

// Scratch of one tensor-core matmul of n tokens through an [n_in -> n_out] weight (any type).
uint64_t gpu_matmul_scratch(int64_t n_in, int64_t n_out, int64_t n_tokens);
// Scratch of the batched MoE of n tokens, k experts each.
uint64_t gpu_moe_scratch(int64_t n_expert, int64_t n_embd, int64_t n_ff, int64_t n_tokens, int64_t k);
// Scratch of the chunked delta rule over n tokens (cuda::delta_net_workspace_bytes).
uint64_t gpu_delta_net_scratch(int64_t n_v_heads, int64_t n_tokens);
// Split-context scratch of attention of up to max_n_q queries over up to max_keys keys
// (cuda::attention_workspace_bound).
uint64_t gpu_attention_scratch(int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t max_n_q,
                               int64_t max_keys);
// A staging buffer for one layer's expert stacks of these byte sizes (16 zero bytes after each,
// 256-aligned starts).
uint64_t gpu_staging_bytes(uint64_t gate, uint64_t up, uint64_t down);

// The expert cache's pool (models/gpu/gpu_expert_cache.h). A slot holds one expert of any layer the
// pool serves: gate | up | down, each part at a 256-aligned offset with 16 bytes a kernel may read
// past its end, sized for the largest slice of that part over those layers (a Q4_K_M file mixes
// Q4_K and Q6_K down stacks). The runtime and the planner both size the pool with these.
struct ExpertSlotLayout {
    uint64_t up_at = 0, down_at = 0, bytes = 0;
};
ExpertSlotLayout expert_slot_layout(uint64_t max_gate_bytes, uint64_t max_up_bytes, uint64_t max_down_bytes);
// The experts a pool of `pool_bytes` holds: whole slots, one of them the slot of zeros that takes
// the selections the pool does not hold (below 1: the pool is too small to hold any).
int64_t expert_cache_slots(uint64_t pool_bytes, uint64_t slot_bytes);
// The pool bytes that hold exactly `slots` experts (the inverse of expert_cache_slots).
uint64_t expert_cache_pool_bytes(int64_t slots, uint64_t slot_bytes);
// Device bytes of a cache of `slots` experts: the pool (slots and the zero slot) and the int32
// expert -> slot table of every trunk layer (GpuExpertCache::device_bytes).
uint64_t expert_cache_device_bytes(int64_t slots, uint64_t slot_bytes, int64_t n_layer, int64_t n_expert);

GpuBufferBytes gpu_buffer_bytes(const Hparams& hp, const GpuBufferShape& shape);

}  // namespace mox::models
