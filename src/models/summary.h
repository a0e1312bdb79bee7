// What a model file costs: parameters, bytes, bytes read per generated token, KV-cache and
// recurrent-state bytes, and the decode roofline. `mox inspect` prints it; the planner will use it.
#pragma once

#include "gguf/reader.h"
#include "quant/types.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mox::models {

enum class TensorClass {
    embedding,       // token_embd
    attention,       // full-attention projections and their q/k norms
    deltanet,        // Gated DeltaNet projections, conv, decay/beta, gated norm
    router,          // ffn_gate_inp (expert router)
    shared_expert,   // ffn_*_shexp and its sigmoid gate
    routed_experts,  // ffn_{gate,up,down}_exps (3-D stacks)
    dense_ffn,       // ffn_{gate,up,down} of dense layers
    norms,           // attn_norm, post_attention_norm, output_norm
    output,          // lm head
    mtp,             // nextn (multi-token-prediction) block tensors; not run by the trunk
    other,
};
inline constexpr int kTensorClassCount = 11;

const char* tensor_class_name(TensorClass c);
TensorClass classify_tensor(const std::string& name, int64_t mtp_first_layer);

struct ClassStats {
    int64_t n_tensors = 0;
    double params = 0;
    uint64_t bytes = 0;
    double active_params = 0;  // per generated token
    double bytes_per_token = 0;
    std::map<std::string, int64_t> types;  // type name -> tensor count
};

struct KvCacheCost {
    std::string type;       // "f16", "q8_0", "q4_0"
    double bytes_per_token;  // all attention layers, K and V, one sequence
};

struct ModelSummary {
    std::string path;
    std::string architecture;
    std::string name;
    uint64_t file_bytes = 0;
    std::vector<std::pair<std::string, std::string>> hparams;  // display name -> value, in order
    std::vector<ClassStats> classes;                            // indexed by TensorClass
    double total_params = 0;      // trunk (excludes MTP)
    double mtp_params = 0;
    double active_params = 0;     // per generated token
    double bytes_per_token = 0;   // weight bytes read per generated token at batch 1
    int64_t n_ctx_train = 0;
    std::vector<KvCacheCost> kv;  // per token of context
    uint64_t recurrent_state_bytes = 0;  // per sequence, fixed
    std::vector<std::string> notes;      // what the summary could not account for

    // Tokens/s upper bound at batch 1 if every weight byte per token is read once at `bandwidth` B/s.
    double roofline_tokens_per_s(double bandwidth) const { return bandwidth / bytes_per_token; }
};

// Summarises any GGUF. Architecture-specific parts (active experts, KV cache, recurrent state)
// are filled for known architectures (qwen35moe; generic MoE keys otherwise) and noted if unknown.
ModelSummary summarize(const gguf::File& file);

}  // namespace mox::models
