// Qwen3.5/3.6-MoE (llama.cpp `qwen35moe`; shared/spec/qwen35moe.md): three Gated DeltaNet layers to
// one gated full-attention layer, q/k norms, partial NEOX rotary (IMROPE, equal to NEOX on text),
// 256 experts top-8 softmax-renormalised plus a sigmoid-gated shared expert; zero-centred HF norms.
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "models/archs/archs.h"
#include "models/hparams.h"

namespace mox::models::archs {

namespace {

void read_keys(const gguf::File& file, Hparams& hp) {
    auto key = [&](const char* k) { return arch_key(hp, k); };
    auto u = [&](const char* k) { return static_cast<int64_t>(file.get_uint(key(k))); };
    hp.ssm_conv_kernel = u("ssm.conv_kernel");
    hp.ssm_inner = u("ssm.inner_size");
    hp.ssm_state = u("ssm.state_size");
    hp.ssm_v_heads = u("ssm.time_step_rank");
    hp.ssm_k_heads = u("ssm.group_count");
    hp.full_attn_interval = static_cast<int64_t>(file.get_uint_or(key("full_attention_interval"), 4));
    if (const gguf::Value* sections = file.find(key("rope.dimension_sections"))) {
        hp.rope_sections.clear();
        if (const gguf::Array* a = sections->as_array())
            for (const gguf::Value& v : a->items) hp.rope_sections.push_back(static_cast<int32_t>(v.as_int().value_or(0)));
    }
}

void write_keys(gguf::Writer& w, const Hparams& hp) {
    using gguf::Value;
    auto u32 = [](int64_t v) { return Value::u32(static_cast<uint32_t>(v)); };
    auto key = [&](const char* k) { return arch_key(hp, k); };
    w.set(key("rope.dimension_sections"), Value::i32_array(hp.rope_sections));
    w.set(key("expert_shared_feed_forward_length"), u32(hp.n_ff_shexp));
    w.set(key("ssm.conv_kernel"), u32(hp.ssm_conv_kernel));
    w.set(key("ssm.inner_size"), u32(hp.ssm_inner));
    w.set(key("ssm.state_size"), u32(hp.ssm_state));
    w.set(key("ssm.time_step_rank"), u32(hp.ssm_v_heads));
    w.set(key("ssm.group_count"), u32(hp.ssm_k_heads));
    w.set(key("full_attention_interval"), u32(hp.full_attn_interval));
}

}  // namespace

ArchInfo qwen35moe() {
    return {
        .arch = Arch::qwen35moe,
        .name = "qwen35moe",
        .recipe = {.attention = {.qk_norm = true, .output_gate = true, .rope = RopeKind::neox},
                   .moe = {.router = RouterKind::softmax_topk,
                           .renormalize = true,
                           .shared = SharedExpertKind::sigmoid_gated},
                   .ffn_norm = "post_attention_norm",
                   .has_deltanet = true,
                   .hf_norm_plus_one = true},
        .read_keys = read_keys,
        .write_keys = write_keys,
        .hf_model_types = {"qwen3_5_moe", "qwen3_5_moe_text"},
    };
}

}  // namespace mox::models::archs
