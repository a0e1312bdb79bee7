// Predicted memory per device for a Placement (the memory model): exact bytes for what the
// file and the cache shapes define, plus a stated allowance for what only a measurement can know.
//
//  GPU  = weights on the GPU
//       + KV cache of the full-attention layers whose attention runs on the GPU
//         (n_ctx rows of K and of V per layer and sequence, a row = n_head_kv * head_dim elements
//          in the cache type: quant::row_bytes)
//       + DeltaNet state of the recurrent layers whose DeltaNet runs on the GPU (fp32: conv state
//         (kernel - 1) * conv_channels, recurrent state v_heads * state * state, per sequence)
//       + the GPU forward's buffers for the run shape (activations for n_ubatch tokens, kernel
//         scratch, two staging buffers for streamed experts, the expert cache's pool of
//         RunShape::expert_cache_slots slots and its tables: models/gpu_memory.h, exact)
//       + the CUDA context (measured by `mox calibrate`), counted once anything is on the GPU.
//  host = weights in mmap_host (page cache: evictable, shared with the file) and in pinned_host
//         (locked RAM) plus the pinned hand-off buffers, reported apart; plus KV/state of the
//         layers that run on the CPU (plain RAM).
//
// A layer's cache lives where its mixer runs: on the GPU when every attention (or DeltaNet) weight
// of the layer is on the GPU, in host RAM otherwise (as llama.cpp keeps a layer's KV with the
// layer). MTP blocks are not run by the trunk and get no cache.
#pragma once

#include "models/gpu_memory.h"
#include "models/hparams.h"
#include "place/placement.h"
#include "quant/types.h"

#include <cstdint>
#include <string>

namespace mox::place {

// What only a measurement can give: the device memory the CUDA context takes (driver, runtime,
// kernel images) before mox allocates anything. `mox calibrate` measures it per machine (the
// planner passes the measured value); the default is a placeholder and every report says so.
struct Allowance {
    uint64_t cuda_context_bytes = 512ull << 20;
    bool measured = false;
    std::string source = "unmeasured placeholder (run `mox calibrate` to measure the CUDA context)";
};

struct CacheOptions {
    int64_t n_ctx = 4096;  // tokens of context per sequence
    quant::TypeId k_type = quant::TypeId::f16;
    quant::TypeId v_type = quant::TypeId::f16;
    int64_t n_seq = 1;  // sequences held at once
};

// Checks what mox's forward can hold (the types it quantizes to, whole blocks per row, the trained
// context); throws mox::Error naming the flag.
void validate_cache_options(const models::Hparams& hp, const CacheOptions& o);

// How the GPU forward runs, as far as its buffers depend on it (models/gpu/gpu_forward.cpp):
// activations are sized for n_ubatch tokens; a prefill that streams the experts of CPU-resident
// layers to the GPU double-buffers them in two staging areas the size of the largest such layer.
struct RunShape {
    int64_t n_ubatch = 512;
    int64_t stream_min_tokens = 32;  // micro-batches of this many tokens stream host experts
    bool stream_experts = true;      // staging buffers exist when some layer's experts live on the host
    // Experts the expert cache's pool holds (GpuOptions::expert_cache_bytes made whole slots), shared
    // by every layer whose experts live on the host; 0: no cache.
    int64_t expert_cache_slots = 0;
};

struct MemoryPrediction {
    TierBytes weights;         // exact, from the file
    uint64_t k_row_bytes = 0;  // one token of one layer's K
    uint64_t v_row_bytes = 0;
    uint64_t kv_gpu = 0, kv_host = 0;  // all sequences
    uint64_t state_gpu = 0, state_host = 0;
    int64_t attention_layers_gpu = 0, attention_layers_host = 0;
    int64_t recurrent_layers_gpu = 0, recurrent_layers_host = 0;
    bool gpu_used = false;  // anything at all on the GPU (else no CUDA context)
    models::GpuBufferBytes buffers;  // activations, scratch, staging (exact: models/gpu_memory.h)
    Allowance allowance;

    uint64_t kv_total() const { return kv_gpu + kv_host; }
    uint64_t state_total() const { return state_gpu + state_host; }
    uint64_t gpu_context() const { return gpu_used ? allowance.cuda_context_bytes : 0; }
    uint64_t gpu_total() const {
        return weights[Tier::gpu] + kv_gpu + state_gpu + buffers.device_total() + gpu_context();
    }
    uint64_t host_page_cache() const { return weights[Tier::mmap_host]; }
    uint64_t host_locked() const { return weights[Tier::pinned_host] + buffers.pinned_host; }
    uint64_t host_ram() const { return kv_host + state_host; }  // anonymous memory of the process
    uint64_t host_total() const { return host_page_cache() + host_locked() + host_ram(); }
};

MemoryPrediction predict_memory(const Placement& p, const models::Hparams& hp,
                                const CacheOptions& cache, const Allowance& allowance = {},
                                const RunShape& run = {});

// The expert cache's slot for the layers whose routed experts this placement keeps on the host
// (their largest gate, up and down slices); all zero when every expert is on the GPU.
models::ExpertSlotLayout expert_slot_layout(const Placement& p, const models::Hparams& hp);

// Whether layer `layer`'s attention / DeltaNet runs on the GPU (the rule above).
bool mixer_on_gpu(const Placement& p, int64_t layer);

}  // namespace mox::place
