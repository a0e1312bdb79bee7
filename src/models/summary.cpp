#include "models/summary.h"

#include "core/error.h"
#include "models/hparams.h"

#include <cctype>

#include <fmt/format.h>

namespace mox::models {

namespace {

bool contains(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
}

// Layer number of "blk.N.*", or -1.
int64_t layer_of(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    int64_t n = 0;
    size_t i = 4;
    if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])))
        n = n * 10 + (name[i++] - '0');
    return n;
}

}  // namespace

const char* tensor_class_name(TensorClass c) {
    switch (c) {
        case TensorClass::embedding:
            return "embedding";
        case TensorClass::attention:
            return "attention";
        case TensorClass::deltanet:
            return "deltanet";
        case TensorClass::router:
            return "router";
        case TensorClass::shared_expert:
            return "shared_expert";
        case TensorClass::routed_experts:
            return "routed_experts";
        case TensorClass::dense_ffn:
            return "dense_ffn";
        case TensorClass::norms:
            return "norms";
        case TensorClass::output:
            return "output";
        case TensorClass::mtp:
            return "mtp";
        case TensorClass::other:
            return "other";
    }
    return "?";
}

TensorClass classify_tensor(const std::string& name, int64_t mtp_first_layer) {
    const int64_t layer = layer_of(name);
    if (layer >= 0 && mtp_first_layer >= 0 && layer >= mtp_first_layer) return TensorClass::mtp;
    if (name == "token_embd.weight") return TensorClass::embedding;
    if (name == "output.weight" || name == "output.bias") return TensorClass::output;
    if (contains(name, "_exps")) return TensorClass::routed_experts;
    if (contains(name, "_shexp")) return TensorClass::shared_expert;
    if (contains(name, "ffn_gate_inp")) return TensorClass::router;
    if (contains(name, "attn_q_norm") || contains(name, "attn_k_norm")) return TensorClass::attention;
    if (contains(name, "ssm_")) return TensorClass::deltanet;  // incl. ssm_norm, the gated norm
    if (contains(name, "norm")) return TensorClass::norms;
    // In qwen35moe, attn_qkv and attn_gate belong to the DeltaNet layers (spec §2.5 name clash).
    if (contains(name, "attn_qkv") || contains(name, "attn_gate")) return TensorClass::deltanet;
    if (contains(name, "attn_")) return TensorClass::attention;
    if (contains(name, "ffn_")) return TensorClass::dense_ffn;
    return TensorClass::other;
}

ModelSummary summarize(const gguf::File& file) {
    ModelSummary s;
    s.path = file.path();
    s.architecture = file.get_string_or("general.architecture", "unknown");
    s.name = file.get_string_or("general.name", "");
    s.file_bytes = file.total_file_bytes();
    s.classes.resize(kTensorClassCount);

    const std::string arch = s.architecture;
    auto arch_uint = [&](const char* k, uint64_t d) { return file.get_uint_or(arch + "." + k, d); };
    const int64_t n_layer = static_cast<int64_t>(arch_uint("block_count", 0));
    const int64_t n_nextn = static_cast<int64_t>(arch_uint("nextn_predict_layers", 0));
    const int64_t mtp_first = n_nextn > 0 ? n_layer - n_nextn : -1;
    const double n_expert = static_cast<double>(arch_uint("expert_count", 0));
    const double n_expert_used = static_cast<double>(arch_uint("expert_used_count", 0));
    const double expert_fraction = n_expert > 0 ? n_expert_used / n_expert : 1.0;

    for (const gguf::TensorInfo& t : file.tensors()) {
        const TensorClass c = classify_tensor(t.name, mtp_first);
        ClassStats& cs = s.classes[static_cast<int>(c)];
        const double params = static_cast<double>(t.n_elements());
        cs.n_tensors++;
        cs.params += params;
        cs.bytes += t.n_bytes;
        cs.types[std::string(quant::type_name(t.type))]++;
        double fraction;  // of the tensor read per generated token
        switch (c) {
            case TensorClass::embedding:
                fraction = 1.0 / static_cast<double>(t.ne[1]);
                break;  // one row
            case TensorClass::routed_experts:
                fraction = expert_fraction;
                break;
            case TensorClass::mtp:
                fraction = 0;
                break;
            default:
                fraction = 1.0;
        }
        cs.active_params += params * fraction;
        cs.bytes_per_token += static_cast<double>(t.n_bytes) * fraction;
    }
    for (int c = 0; c < kTensorClassCount; ++c) {
        const ClassStats& cs = s.classes[c];
        if (static_cast<TensorClass>(c) == TensorClass::mtp) {
            s.mtp_params += cs.params;
            continue;
        }
        s.total_params += cs.params;
        s.active_params += cs.active_params;
        s.bytes_per_token += cs.bytes_per_token;
    }
    if (n_expert == 0 && s.classes[static_cast<int>(TensorClass::routed_experts)].n_tensors > 0)
        s.notes.push_back("expert_count missing: routed experts counted as fully active");

    if (find_arch(arch)) {
        const Hparams hp = read_hparams(file);
        s.n_ctx_train = hp.n_ctx_train;
        auto add = [&](const char* k, auto v) { s.hparams.emplace_back(k, fmt::format("{}", v)); };
        add("layers (trunk)", hp.n_trunk());
        add("MTP layers", hp.n_nextn);
        add("full-attention layers", hp.n_attention_layers());
        if (hp.recipe().has_deltanet) add("DeltaNet layers", hp.n_recurrent_layers());
        add("embedding", hp.n_embd);
        add("vocabulary", hp.n_vocab);
        add("attention heads q/kv", fmt::format("{}/{}", hp.n_head, hp.n_head_kv));
        add("head dim k/v", fmt::format("{}/{}", hp.head_dim_k, hp.head_dim_v));
        add("rope dims / theta", fmt::format("{} / {:g}", hp.n_rot, hp.rope_theta));
        if (hp.has_moe()) {
            add("experts used/total", fmt::format("{}/{}", hp.n_expert_used, hp.n_expert));
            add("expert FFN / shared FFN", fmt::format("{}/{}", hp.n_ff_exp, hp.n_ff_shexp));
        } else {
            add("dense FFN", hp.n_ff);
        }
        if (hp.recipe().has_deltanet) {
            add("DeltaNet heads k/v x dim",
                fmt::format("{}/{} x {}", hp.ssm_k_heads, hp.ssm_v_heads, hp.ssm_state));
            add("conv kernel", hp.ssm_conv_kernel);
        }
        add("context (trained)", hp.n_ctx_train);
        add("rms eps", fmt::format("{:g}", hp.rms_eps));
        for (auto [name, type] :
             {std::pair{"f16", quant::TypeId::f16}, std::pair{"q8_0", quant::TypeId::q8_0},
              std::pair{"q4_0", quant::TypeId::q4_0}})
            s.kv.push_back({name, hp.kv_cache_bytes_per_token(type)});
        s.recurrent_state_bytes = hp.recurrent_state_bytes();
    } else {
        s.n_ctx_train = static_cast<int64_t>(arch_uint("context_length", 0));
        s.notes.push_back(
            fmt::format("architecture '{}' is not modelled: KV-cache and state bytes not computed", arch));
    }
    return s;
}

}  // namespace mox::models
