// Reading a Hugging Face config.json for `mox convert`: typed accessors that name the offending key
// in their errors, and the parts several architectures share (RoPE). Each architecture's file in
// models/archs/ turns its config into Hparams with these.
#pragma once

#include "core/error.h"
#include "models/hparams.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mox::models {

// The text model's hyper-parameters of an HF config.
struct HfTextConfig {
    Hparams hparams;
    bool tie_word_embeddings = false;
    // The recipe's rope_factors, from the config's rope section (rope_factors_short/long tensors).
    std::vector<float> rope_factors_short, rope_factors_long;
};

// One object of config.json (the top level or a nested text_config); `where` prefixes key names in
// errors ("text_config.").
class HfConfig {
public:
    HfConfig(const nlohmann::json& section, std::string where) : j_(section), where_(std::move(where)) {}

    bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

    int64_t need_int(const char* key) const {
        if (!has(key)) fail("config.json: missing {}{}", where_, key);
        return positive_int(key);
    }
    int64_t int_or(const char* key, int64_t fallback) const {
        return has(key) ? positive_int(key) : fallback;
    }
    double float_or(const char* key, double fallback) const {
        if (!has(key)) return fallback;
        const nlohmann::json& v = j_.at(key);
        if (!v.is_number()) fail("config.json: {}{} must be a number", where_, key);
        return v.get<double>();
    }
    std::string string_or(const char* key, std::string fallback) const {
        if (!has(key)) return fallback;
        const nlohmann::json& v = j_.at(key);
        if (!v.is_string()) fail("config.json: {}{} must be a string", where_, key);
        return v.get<std::string>();
    }
    bool bool_or(const char* key, bool fallback) const {
        if (!has(key)) return fallback;
        const nlohmann::json& v = j_.at(key);
        if (!v.is_boolean()) fail("config.json: {}{} must be true or false", where_, key);
        return v.get<bool>();
    }
    const nlohmann::json* object(const char* key) const {
        if (!has(key)) return nullptr;
        if (!j_.at(key).is_object()) fail("config.json: {}{} must be an object", where_, key);
        return &j_.at(key);
    }
    const nlohmann::json& raw(const char* key) const { return j_.at(key); }
    const std::string& where() const { return where_; }

private:
    int64_t positive_int(const char* key) const {
        const nlohmann::json& v = j_.at(key);
        if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (int64_t{1} << 40))
            fail("config.json: {}{} must be a positive integer", where_, key);
        return v.get<int64_t>();
    }
    const nlohmann::json& j_;
    std::string where_;
};

// The RoPE section: transformers 5 keeps it in rope_parameters, older configs in rope_scaling or at
// the top level. Only unscaled RoPE converts (anything else is an error naming the rope_type).
struct HfRope {
    double theta = 10000.0;
    double partial = 1.0;  // partial_rotary_factor
};
HfRope read_hf_rope(const HfConfig& c, const std::string& where, double default_partial);

// The sizes every decoder config names alike: hidden_size, num_hidden_layers, vocab_size, the
// attention heads and head_dim (default hidden / heads), max_position_embeddings, rms_norm_eps.
void read_hf_trunk(const HfConfig& c, Hparams& hp, double default_rms_eps);
// The MoE of Mixtral-style configs (Mixtral, Phi-3.5-MoE): num_local_experts, num_experts_per_tok,
// intermediate_size as the experts' width, no shared expert, SiLU, no sliding window below the
// trained context (llama.cpp's converters write none and its loaders use none).
void read_hf_block_sparse_moe(const HfConfig& c, Hparams& hp);

// The HF config of a registry row (ArchInfo::hf_model_types says which model_type it reads).
HfTextConfig qwen35moe_from_hf_config(const nlohmann::json& config);
HfTextConfig qwen35_from_hf_config(const nlohmann::json& config);
HfTextConfig qwen3moe_from_hf_config(const nlohmann::json& config);
HfTextConfig mixtral_from_hf_config(const nlohmann::json& config);
HfTextConfig phimoe_from_hf_config(const nlohmann::json& config);

}  // namespace mox::models
