// The architecture registry: one row per llama.cpp `general.architecture` mox runs. A row holds the
// architecture's *recipe* (which blocks a layer is built from and their options) and the few
// functions that differ between architectures (its GGUF keys, its HF config and tensor names).
// Everything else (the trunk, the state layout, the memory and speed models, the CPU and CUDA
// forwards) is generic and reads the recipe. An architecture is one file in models/archs/.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mox::gguf {
class File;
class Writer;
}  // namespace mox::gguf

namespace mox::models {

struct Hparams;
struct HfTextConfig;
struct TensorSpec;

enum class Arch : uint8_t { qwen35moe, qwen35, qwen3moe, llama, phimoe };

enum class RopeKind : uint8_t {
    neox,  // pairs (i, i + n_rot/2) of the first n_rot dims of a head (IMROPE on text equals this)
    norm,  // adjacent pairs (2i, 2i + 1): Llama-family files, whose q/k rows the converter permuted
};

enum class RouterKind : uint8_t {
    softmax_topk,  // softmax over every expert's logit, then the top-k of the probabilities
    // Phi-3.5-MoE's sparsemixer at inference (top-2): expert 1 = arg max; its weight = softmax over
    // the logits within a relative margin of the max; expert 2 and its weight the same over the
    // logits without expert 1. The weights are not renormalised.
    sparsemixer,
};

// The normalisation before each block and before the head.
enum class NormKind : uint8_t {
    rms,    // x / sqrt(mean(x^2) + eps) * w
    layer,  // (x - mean) / sqrt(var + eps) * w + b: LayerNorm with a bias tensor beside each weight
};

enum class SharedExpertKind : uint8_t {
    none,
    sigmoid_gated,  // one SwiGLU expert for every token, scaled by sigmoid(gate_inp . u)
};

// The feed-forward block after each mixer.
enum class FfnKind : uint8_t {
    moe,    // routed experts (MoeRecipe) and, where the model has one, a shared expert
    dense,  // one SwiGLU MLP: ffn_gate, ffn_up {n_embd, n_ff}, ffn_down {n_ff, n_embd}
};

struct AttentionRecipe {
    bool qk_norm = true;      // per-head RMSNorm of q and k (attn_q_norm, attn_k_norm) before RoPE
    bool output_gate = true;  // attn_q rows hold [query | gate] per head; the output is * sigmoid(gate)
    RopeKind rope = RopeKind::neox;
    bool biases = false;  // attn_q/k/v/output carry .bias tensors (added after the projection)
    // Per-pair frequency divisors rope_factors_short / rope_factors_long (Phi-3 "longrope"): the
    // long set when the sequence's context exceeds rope.scaling.original_context_length; cos and sin
    // are scaled by rope.scaling.attn_factor.
    bool rope_factors = false;
};

struct MoeRecipe {
    RouterKind router = RouterKind::softmax_topk;
    bool renormalize = true;  // the top-k weights divided by their sum
    SharedExpertKind shared = SharedExpertKind::none;
};

struct ArchRecipe {
    AttentionRecipe attention;
    FfnKind ffn = FfnKind::moe;
    MoeRecipe moe;  // FfnKind::moe only
    // The FFN input norm's tensor name inside blk.N (llama.cpp names it per architecture).
    const char* ffn_norm = "ffn_norm";
    // Every layer whose (index + 1) is not a multiple of Hparams::full_attn_interval is DeltaNet;
    // false: every layer is attention.
    bool has_deltanet = false;
    // The HF RMSNorm weights are zero-centred (the converter adds 1), as in Qwen3.5.
    bool hf_norm_plus_one = false;
    NormKind norm = NormKind::rms;
    bool output_bias = false;  // the lm head adds output.bias
};

// One architecture. The functions read or write what only this architecture has; the keys every
// architecture shares (block_count, embedding_length, the attention and expert counts) are read
// by read_hparams before `read_keys` runs.
struct ArchInfo {
    Arch arch;
    const char* name;  // general.architecture
    ArchRecipe recipe;
    void (*read_keys)(const gguf::File& file, Hparams& hp);
    void (*write_keys)(gguf::Writer& writer, const Hparams& hp);
    // HF config.json `model_type`s this architecture converts from (mox convert), and the reader of
    // such a config (models/hf_config.h).
    std::vector<std::string> hf_model_types;
    HfTextConfig (*from_hf_config)(const nlohmann::json& config);
};

const ArchInfo& arch_info(Arch arch);
std::span<const ArchInfo> all_archs();
// The row of `general.architecture`, or nullptr when mox does not know it.
const ArchInfo* find_arch(std::string_view name);
// "qwen35moe, qwen3moe": for error messages.
std::string known_archs();

}  // namespace mox::models
