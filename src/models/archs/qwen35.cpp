// Dense Qwen3.5/3.6 (llama.cpp `qwen35`; shared/spec/archs.md §3: Qwen3.6-27B): qwen35moe's trunk
// (three Gated DeltaNet layers to one gated full-attention layer, zero-centred HF norms) with one
// SwiGLU MLP in every layer in place of the experts.
#include "models/archs/archs.h"
#include "models/archs/qwen35_family.h"

namespace mox::models {

HfTextConfig qwen35_from_hf_config(const nlohmann::json& config) {
    return archs::qwen35_family_from_hf_config(config, Arch::qwen35);
}

namespace archs {

ArchInfo qwen35() {
    return {
        .arch = Arch::qwen35,
        .name = "qwen35",
        .recipe = {.attention = {.qk_norm = true, .output_gate = true, .rope = RopeKind::neox},
                   .ffn = FfnKind::dense,
                   .moe = {},
                   .ffn_norm = "post_attention_norm",
                   .has_deltanet = true,
                   .hf_norm_plus_one = true},
        .read_keys = read_qwen35_keys,
        .write_keys = write_qwen35_keys,
        .hf_model_types = {"qwen3_5", "qwen3_5_text"},
        .from_hf_config = qwen35_from_hf_config,
    };
}

}  // namespace archs
}  // namespace mox::models
