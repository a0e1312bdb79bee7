// Qwen3-MoE (llama.cpp `qwen3moe`; shared/spec/archs.md §2: Qwen3-30B-A3B, Qwen3-235B-A22B): every
// layer full attention with q/k norms and NEOX rotary over the whole head, 128 experts top-8
// softmax-renormalised, no shared expert; plain HF norms.
#include "models/archs/archs.h"
#include "models/hf_config.h"

namespace mox::models {

using nlohmann::json;

// The HF config (archs.md §2.1): every layer attention + MoE, no shared expert.
HfTextConfig qwen3moe_from_hf_config(const json& config) {
    const HfConfig c(config, "");
    HfTextConfig out;
    out.hparams = hparams_for(Arch::qwen3moe);
    Hparams& hp = out.hparams;
    read_hf_trunk(c, hp, 1e-6);
    hp.n_nextn = 0;
    // transformers names the count num_experts in the config class, num_local_experts in some dumps.
    hp.n_expert = c.has("num_experts") ? c.need_int("num_experts") : c.need_int("num_local_experts");
    hp.n_expert_used = c.need_int("num_experts_per_tok");
    hp.n_ff_exp = c.need_int("moe_intermediate_size");
    hp.n_ff_shexp = 0;
    if (c.bool_or("attention_bias", false)) fail("config.json: attention_bias=true is not supported");
    if (const std::string act = c.string_or("hidden_act", "silu"); act != "silu")
        fail("config.json: hidden_act '{}' is not supported (expected silu)", act);
    // llama.cpp's qwen3moe always renormalises the top-k weights, as the released checkpoints do.
    if (!c.bool_or("norm_topk_prob", false))
        fail("config.json: norm_topk_prob=false is not what llama.cpp's qwen3moe computes (it renormalises)");
    if (c.has("mlp_only_layers") &&
        !(c.raw("mlp_only_layers").is_array() && c.raw("mlp_only_layers").empty()))
        fail("config.json: mlp_only_layers (dense layers among the MoE ones) is not supported");
    if (c.int_or("decoder_sparse_step", 1) != 1)
        fail("config.json: decoder_sparse_step != 1 is not supported");
    if (c.bool_or("use_sliding_window", false)) fail("config.json: use_sliding_window=true is not supported");
    const HfRope rope = read_hf_rope(c, "", 1.0);
    hp.rope_theta = rope.theta;
    hp.n_rot = static_cast<int64_t>(static_cast<double>(hp.head_dim_k) * rope.partial);
    out.tie_word_embeddings = c.bool_or("tie_word_embeddings", false);
    hp.validate();
    return out;
}

namespace archs {

ArchInfo qwen3moe() {
    return {
        .arch = Arch::qwen3moe,
        .name = "qwen3moe",
        .recipe = {.attention = {.qk_norm = true, .output_gate = false, .rope = RopeKind::neox},
                   .moe = {.router = RouterKind::softmax_topk,
                           .renormalize = true,
                           .shared = SharedExpertKind::none},
                   .ffn_norm = "ffn_norm",
                   .has_deltanet = false,
                   .hf_norm_plus_one = false},
        .read_keys = nullptr,  // the shared keys are all it has
        .write_keys = nullptr,
        .hf_model_types = {"qwen3_moe"},
        .from_hf_config = qwen3moe_from_hf_config,
    };
}

}  // namespace archs
}  // namespace mox::models
