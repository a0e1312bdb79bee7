// Hyper-parameters and tensor layout of a model, for every architecture of the registry (arch.h):
// one struct whose fields an architecture fills where it has the block (DeltaNet sizes stay 0 in a
// model without DeltaNet layers). Facts: shared/spec/qwen35moe.md §1-2, shared/spec/archs.md.
#pragma once

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "models/arch.h"
#include "quant/types.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mox::models {

struct Hparams {
    Arch arch = Arch::qwen35moe;
    int64_t n_layer = 40;          // block_count: trunk layers + MTP layers
    int64_t n_nextn = 0;           // nextn_predict_layers (MTP blocks at the end, skipped by the trunk)
    int64_t n_ctx_train = 262144;  // context_length
    int64_t n_embd = 2048;
    int64_t n_vocab = 248320;
    int64_t n_head = 16;  // full attention query heads
    int64_t n_head_kv = 2;
    int64_t head_dim_k = 256;  // attention.key_length
    int64_t head_dim_v = 256;  // attention.value_length
    int64_t n_rot = 64;        // rope.dimension_count (partial rotary)
    double rope_theta = 1e7;
    std::vector<int32_t> rope_sections{11, 11, 10, 0};
    double rms_eps = 1e-6;          // the norms' epsilon (LayerNorm's too where the recipe has it)
    int64_t n_ctx_orig = 0;         // rope.scaling.original_context_length (the recipe's rope_factors)
    double rope_attn_factor = 1.0;  // rope.scaling.attn_factor: cos and sin are scaled by it
    double router_jitter = 0.01;    // sparsemixer's relative margin (Phi-3.5-MoE's router_jitter_noise)
    int64_t n_expert = 256;
    int64_t n_expert_used = 8;
    int64_t n_ff_exp = 512;    // expert_feed_forward_length
    int64_t n_ff_shexp = 512;  // expert_shared_feed_forward_length
    int64_t n_ff = 0;          // feed_forward_length of a dense FFN (FfnKind::dense)
    int64_t ssm_conv_kernel = 4;
    int64_t ssm_inner = 4096;        // value width = n_v_heads * head_dim
    int64_t ssm_state = 128;         // head dim of k and v
    int64_t ssm_v_heads = 32;        // ssm.time_step_rank
    int64_t ssm_k_heads = 16;        // ssm.group_count
    int64_t full_attn_interval = 4;  // architectures with DeltaNet layers (ArchRecipe::has_deltanet)

    const ArchRecipe& recipe() const { return arch_info(arch).recipe; }
    const char* arch_name() const { return arch_info(arch).name; }
    int64_t n_trunk() const { return n_layer - n_nextn; }
    // With DeltaNet layers, layer i is Gated DeltaNet unless (i+1) is a multiple of the interval;
    // MTP blocks are attention.
    bool is_recurrent(int64_t layer) const {
        return recipe().has_deltanet && layer < n_trunk() && (layer + 1) % full_attn_interval != 0;
    }
    // Rows of attn_q: n_head heads of [query | gate] with the output gate, of query alone without.
    int64_t q_proj_rows() const { return (recipe().attention.output_gate ? 2 : 1) * n_head * head_dim_k; }
    bool has_moe() const { return recipe().ffn == FfnKind::moe; }
    bool has_shared_expert() const {
        return has_moe() && n_ff_shexp > 0 && recipe().moe.shared != SharedExpertKind::none;
    }
    // Width of the SwiGLU that runs for every token: the dense FFN's, else the shared expert's (0: none).
    int64_t n_ff_unrouted() const { return has_moe() ? (has_shared_expert() ? n_ff_shexp : 0) : n_ff; }
    // The FFN's experts as placement, the host hand-off and the speed model see them: the routed
    // experts, or a dense FFN as one expert that every token uses with weight 1 (so a dense layer's
    // FFN can stay in host memory and be computed by the CPU like a layer of routed experts).
    int64_t n_ffn_experts() const { return has_moe() ? n_expert : 1; }
    int64_t n_ffn_experts_used() const { return has_moe() ? n_expert_used : 1; }
    int64_t n_attention_layers() const;  // full-attention layers of the trunk
    int64_t n_recurrent_layers() const;
    int64_t conv_channels() const { return 2 * ssm_k_heads * ssm_state + ssm_inner; }

    // KV cache of one sequence per token of context: only full-attention layers cache K and V
    // (spec §5); MTP layers are not counted (not run).
    double kv_cache_bytes_per_token(quant::TypeId kv_type) const;
    // Fixed per-sequence state of the DeltaNet layers, fp32: the conv state (kernel-1 past inputs of
    // every conv channel) and one state x state matrix per value head.
    uint64_t recurrent_state_bytes() const;

    // Validates relations between the values (divisibility, ranges); throws mox::Error naming the key.
    void validate() const;
};

// Hyper-parameters of architecture `arch` before any value is read: Qwen3.6-35B-A3B's numbers, with
// the DeltaNet sizes zero (and every layer attention) where the recipe has no DeltaNet, and the
// expert sizes zero where its FFN is dense (Qwen3.6-27B's width instead).
Hparams hparams_for(Arch arch);

// Reads the architecture's keys (and the vocab size from tokenizer.ggml.tokens or token_embd) from a
// file; an architecture mox does not know is a mox::Error naming the ones it does.
Hparams read_hparams(const gguf::File& file);
// Writes general.architecture and every key the llama.cpp loader reads for that architecture.
void write_hparams(gguf::Writer& writer, const Hparams& hp);
// "qwen3moe.block_count": a key of hp's architecture.
std::string arch_key(const Hparams& hp, const char* suffix);

// One weight tensor of the architecture, as llama.cpp names and shapes it.
struct TensorSpec {
    std::string name;
    std::vector<int64_t> ne;  // ggml order
    int64_t layer = -1;       // -1 for global tensors
    bool is_2d_weight() const { return ne.size() >= 2; }
};

// Every tensor of the model in llama.cpp's file order (globals first, then layers ascending), from
// the recipe: each layer's norms, its mixer's tensors, the MoE's (and the shared expert's) or the
// dense FFN's.
std::vector<TensorSpec> model_tensors(const Hparams& hp);

}  // namespace mox::models
