// Qwen3-MoE (llama.cpp `qwen3moe`; shared/spec/archs.md §2: Qwen3-30B-A3B, Qwen3-235B-A22B): every
// layer full attention with q/k norms and NEOX rotary over the whole head, 128 experts top-8
// softmax-renormalised, no shared expert; plain HF norms.
#include "models/archs/archs.h"

namespace mox::models::archs {

ArchInfo qwen3moe() {
    return {
        .arch = Arch::qwen3moe,
        .name = "qwen3moe",
        .recipe = {.attention = {.qk_norm = true, .output_gate = false, .rope = RopeKind::neox},
                   .moe = {.router = RouterKind::softmax_topk, .renormalize = true, .shared = SharedExpertKind::none},
                   .ffn_norm = "ffn_norm",
                   .has_deltanet = false,
                   .hf_norm_plus_one = false},
        .read_keys = nullptr,  // the shared keys are all it has
        .write_keys = nullptr,
        .hf_model_types = {"qwen3_moe"},
    };
}

}  // namespace mox::models::archs
