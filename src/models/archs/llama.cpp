// Mixtral (llama.cpp `llama` with experts; shared/spec/archs.md §4: Mixtral-8x7B, 8x22B): every
// layer attention without q/k norms, NORM (adjacent-pair) rotary over the whole head on q/k rows the
// converter permuted, 8 experts top-2 softmax-renormalised sized by feed_forward_length, no shared
// expert; plain HF norms. A `llama` file without experts (dense Llama) is refused when it loads.
#include "gguf/writer.h"
#include "models/archs/archs.h"
#include "models/hf_config.h"

namespace mox::models {

namespace {

// llama.cpp's llama loader sizes the experts with feed_forward_length (read_hparams falls back to
// it when there is no expert_feed_forward_length) and requires it.
void write_keys(gguf::Writer& w, const Hparams& hp) {
    w.set(arch_key(hp, "feed_forward_length"), gguf::Value::u32(static_cast<uint32_t>(hp.n_ff_exp)));
    w.set(arch_key(hp, "vocab_size"), gguf::Value::u32(static_cast<uint32_t>(hp.n_vocab)));
}

}  // namespace

using nlohmann::json;

// The HF config (archs.md §4.1): `mixtral`.
HfTextConfig mixtral_from_hf_config(const json& config) {
    const HfConfig c(config, "");
    HfTextConfig out;
    out.hparams = hparams_for(Arch::llama);
    Hparams& hp = out.hparams;
    read_hf_trunk(c, hp, 1e-5);
    read_hf_block_sparse_moe(c, hp);
    const HfRope rope = read_hf_rope(c, "", 1.0);
    hp.rope_theta = rope.theta;
    hp.n_rot = static_cast<int64_t>(static_cast<double>(hp.head_dim_k) * rope.partial);
    out.tie_word_embeddings = c.bool_or("tie_word_embeddings", false);
    hp.validate();
    return out;
}

namespace archs {

ArchInfo llama() {
    return {
        .arch = Arch::llama,
        .name = "llama",
        .recipe = {.attention = {.qk_norm = false, .output_gate = false, .rope = RopeKind::norm},
                   .moe = {.router = RouterKind::softmax_topk,
                           .renormalize = true,
                           .shared = SharedExpertKind::none},
                   .ffn_norm = "ffn_norm",
                   .has_deltanet = false,
                   .hf_norm_plus_one = false},
        .read_keys = nullptr,
        .write_keys = write_keys,
        .hf_model_types = {"mixtral"},
        .from_hf_config = mixtral_from_hf_config,
    };
}

}  // namespace archs
}  // namespace mox::models
