#include "place/memory.h"

#include "core/error.h"

#include <algorithm>

namespace mox::place {

void validate_cache_options(const models::Hparams& hp, const CacheOptions& o) {
    if (o.n_ctx < 1) fail("-c {}: the context must be at least 1 token", o.n_ctx);
    if (o.n_ctx > hp.n_ctx_train)
        fail("-c {}: exceeds the model's trained context {}", o.n_ctx, hp.n_ctx_train);
    if (o.n_seq < 1) fail("{} sequences: at least 1", o.n_seq);
    struct Kind {
        const char* flag;
        quant::TypeId type;
        int64_t head_dim;
    };
    for (const auto& [flag, type, head_dim] :
         {Kind{"-ctk", o.k_type, hp.head_dim_k}, Kind{"-ctv", o.v_type, hp.head_dim_v}}) {
        const quant::TypeTraits& t = quant::traits(type);
        // The types the forward stores the cache in (models/qwen35moe.cpp: new_state).
        if (type != quant::TypeId::f32 && (!t.quantize || !t.dequantize))
            fail("{} {}: not a KV cache type mox supports (f32, f16, bf16, q8_0, q4_0)", flag, t.name);
        // Each head's slice of a row must be whole blocks (the forward reads one head at a time).
        if (head_dim % t.block_elems != 0)
            fail("{} {}: the head dim {} is not a whole number of {}-element blocks", flag, t.name, head_dim,
                 t.block_elems);
    }
}

bool mixer_on_gpu(const Placement& p, int64_t layer) {
    bool any = false;
    for (const TensorEntry& e : p.tensors()) {
        if (e.layer != layer) continue;
        if (e.cls != models::TensorClass::attention && e.cls != models::TensorClass::deltanet) continue;
        if (e.tier != Tier::gpu) return false;
        any = true;
    }
    return any;
}

MemoryPrediction predict_memory(const Placement& p, const models::Hparams& hp,
                                const CacheOptions& cache, const Allowance& allowance, const RunShape& run) {
    validate_cache_options(hp, cache);
    if (p.n_layer() != hp.n_layer)
        fail("placement has {} layers but the hyper-parameters {}", p.n_layer(), hp.n_layer);
    MemoryPrediction m;
    m.weights = p.bytes_per_tier();
    m.allowance = allowance;
    // [n_ctx, n_head_kv * head_dim] per layer for K and for V, in the cache's block type.
    m.k_row_bytes = quant::row_bytes(cache.k_type, hp.n_head_kv * hp.head_dim_k);
    m.v_row_bytes = quant::row_bytes(cache.v_type, hp.n_head_kv * hp.head_dim_v);
    const auto seqs = static_cast<uint64_t>(cache.n_seq);
    const uint64_t kv_layer = (m.k_row_bytes + m.v_row_bytes) * static_cast<uint64_t>(cache.n_ctx) * seqs;
    // fp32 conv state [kernel - 1, conv_channels] + recurrent state [v_heads, state, state].
    const uint64_t state_layer = static_cast<uint64_t>((hp.ssm_conv_kernel - 1) * hp.conv_channels() +
                                                       hp.ssm_v_heads * hp.ssm_state * hp.ssm_state) *
                                 sizeof(float) * seqs;
    for (int64_t l = 0; l < hp.n_trunk(); ++l) {
        const bool gpu = mixer_on_gpu(p, l);
        if (hp.is_recurrent(l)) {
            (gpu ? m.state_gpu : m.state_host) += state_layer;
            (gpu ? m.recurrent_layers_gpu : m.recurrent_layers_host)++;
        } else {
            (gpu ? m.kv_gpu : m.kv_host) += kv_layer;
            (gpu ? m.attention_layers_gpu : m.attention_layers_host)++;
        }
    }
    m.gpu_used = m.weights[Tier::gpu] > 0 || m.kv_gpu > 0 || m.state_gpu > 0;
    if (!m.gpu_used) return m;
    // The GPU forward's own buffers, shaped by where the experts and token_embd live.
    models::GpuBufferShape shape{.n_ubatch = run.n_ubatch, .n_ctx_max = cache.n_ctx};
    for (const TensorEntry& t : p.tensors())
        if (t.cls == models::TensorClass::embedding) shape.token_embd_on_gpu = t.tier == Tier::gpu;
    const bool can_stream = run.stream_experts && run.n_ubatch >= run.stream_min_tokens;
    for (int64_t l = 0; l < hp.n_trunk(); ++l) {
        if (!p.has_experts(l) || p.expert_counts(l)[static_cast<size_t>(Tier::gpu)] == p.n_expert()) continue;
        shape.any_host_experts = true;
        if (!can_stream) continue;
        const uint64_t n = static_cast<uint64_t>(p.n_expert());
        shape.largest_streamed_layer = std::max(
            shape.largest_streamed_layer,
            models::gpu_staging_bytes(p.expert_slice_bytes(l, ExpertPart::gate) * n,
                                      p.expert_slice_bytes(l, ExpertPart::up) * n,
                                      p.expert_slice_bytes(l, ExpertPart::down) * n));
    }
    if (run.expert_cache_slots > 0 && shape.any_host_experts) {
        shape.expert_cache_slots = run.expert_cache_slots;
        shape.expert_cache_slot_bytes = expert_slot_layout(p, hp).bytes;
    }
    m.buffers = models::gpu_buffer_bytes(hp, shape);
    return m;
}

models::ExpertSlotLayout expert_slot_layout(const Placement& p, const models::Hparams& hp) {
    uint64_t gate = 0, up = 0, down = 0;
    bool any = false;
    for (int64_t l = 0; l < hp.n_trunk(); ++l) {
        if (!p.has_experts(l) || p.expert_counts(l)[static_cast<size_t>(Tier::gpu)] == p.n_expert()) continue;
        any = true;
        gate = std::max(gate, p.expert_slice_bytes(l, ExpertPart::gate));
        up = std::max(up, p.expert_slice_bytes(l, ExpertPart::up));
        down = std::max(down, p.expert_slice_bytes(l, ExpertPart::down));
    }
    return any ? models::expert_slot_layout(gate, up, down) : models::ExpertSlotLayout{};
}

}  // namespace mox::place
