// Phi-3.5-MoE (llama.cpp `phimoe`; shared/spec/archs.md §5): every layer attention with q/k/v/o
// biases and NEOX rotary over the whole head with Phi-3's long/short frequency factors, LayerNorm
// (weight and bias) before each block and the head, 16 experts top-2 chosen by sparsemixer (not
// renormalised), no shared expert, an lm head with a bias. mox follows transformers where llama.cpp
// departs from it (llama.cpp: RMSNorm, softmax top-2 renormalised; docs/models.md).
#include "gguf/writer.h"
#include "models/archs/archs.h"
#include "models/hf_config.h"

#include <cmath>

namespace mox::models {

namespace {

void read_keys(const gguf::File& file, Hparams& hp) {
    hp.n_ctx_orig = static_cast<int64_t>(file.get_uint_or(
        arch_key(hp, "rope.scaling.original_context_length"), static_cast<uint64_t>(hp.n_ctx_train)));
    hp.rope_attn_factor = file.get_float_or(arch_key(hp, "rope.scaling.attn_factor"), 1.0);
}

// llama.cpp's loader sizes the experts with feed_forward_length and reads the rope scaling keys.
void write_keys(gguf::Writer& w, const Hparams& hp) {
    w.set(arch_key(hp, "feed_forward_length"), gguf::Value::u32(static_cast<uint32_t>(hp.n_ff_exp)));
    w.set(arch_key(hp, "rope.scaling.original_context_length"),
          gguf::Value::u32(static_cast<uint32_t>(hp.n_ctx_orig)));
    w.set(arch_key(hp, "rope.scaling.attn_factor"),
          gguf::Value::f32(static_cast<float>(hp.rope_attn_factor)));
}

// One factor list of the rope section: n_rot / 2 positive numbers.
std::vector<float> read_factors(const HfConfig& r, const char* key, int64_t n) {
    if (!r.has(key)) fail("config.json: {}{} is missing", r.where(), key);
    const nlohmann::json& v = r.raw(key);
    if (!v.is_array() || static_cast<int64_t>(v.size()) != n)
        fail("config.json: {}{} must list {} numbers (rotary dims / 2)", r.where(), key, n);
    std::vector<float> out;
    for (const nlohmann::json& x : v) {
        if (!x.is_number() || !(x.get<double>() > 0))
            fail("config.json: {}{} holds a non-positive value", r.where(), key);
        out.push_back(x.get<float>());
    }
    return out;
}

}  // namespace

using nlohmann::json;

// The HF config (archs.md §5.1): `phimoe`. Its rope section (rope_parameters in transformers 5,
// rope_scaling before) is `longrope` with short/long factors and mscales; transformers scales cos and
// sin by short_mscale up to original_max_position_embeddings and by long_mscale beyond, mox by one
// attn_factor, so the two must agree.
HfTextConfig phimoe_from_hf_config(const json& config) {
    const HfConfig c(config, "");
    HfTextConfig out;
    out.hparams = hparams_for(Arch::phimoe);
    Hparams& hp = out.hparams;
    read_hf_trunk(c, hp, 1e-5);
    read_hf_block_sparse_moe(c, hp);
    if (!c.bool_or("attention_bias", true))
        fail("config.json: attention_bias=false is not supported for phimoe");
    if (!c.bool_or("lm_head_bias", true)) fail("config.json: lm_head_bias=false is not supported for phimoe");
    hp.router_jitter = c.float_or("router_jitter_noise", 0.01);
    if (std::abs(hp.router_jitter - 0.01) > 1e-9)
        fail(
            "config.json: router_jitter_noise {} is not supported (GGUF files carry no such key; "
            "Phi-3.5-MoE's is 0.01)",
            hp.router_jitter);

    const json* section = c.object("rope_parameters");
    const char* section_name = "rope_parameters.";
    if (!section) section = c.object("rope_scaling"), section_name = "rope_scaling.";
    const json empty = json::object();
    const HfConfig r(section ? *section : empty, section_name);
    hp.rope_theta = r.has("rope_theta") ? r.float_or("rope_theta", 0) : c.float_or("rope_theta", 10000.0);
    const double partial = r.has("partial_rotary_factor") ? r.float_or("partial_rotary_factor", 0)
                                                          : c.float_or("partial_rotary_factor", 1.0);
    if (!(partial > 0 && partial <= 1))
        fail("config.json: partial_rotary_factor {} must be in (0, 1]", partial);
    hp.n_rot = static_cast<int64_t>(static_cast<double>(hp.head_dim_k) * partial);
    const std::string rope_type = r.string_or("rope_type", r.string_or("type", "default"));
    if (rope_type == "default") {
        // Unscaled: factors of one, the whole trained context is "short".
        hp.n_ctx_orig = hp.n_ctx_train;
        out.rope_factors_short.assign(static_cast<size_t>(hp.n_rot / 2), 1.0f);
        out.rope_factors_long = out.rope_factors_short;
    } else if (rope_type == "longrope" || rope_type == "su") {
        hp.n_ctx_orig = r.has("original_max_position_embeddings")
                            ? r.need_int("original_max_position_embeddings")
                            : c.need_int("original_max_position_embeddings");
        out.rope_factors_short = read_factors(r, "short_factor", hp.n_rot / 2);
        out.rope_factors_long = read_factors(r, "long_factor", hp.n_rot / 2);
        if (r.has("short_mscale") || r.has("long_mscale")) {
            const double s = r.float_or("short_mscale", 1.0), l = r.float_or("long_mscale", 1.0);
            if (std::abs(s - l) > 1e-9 * std::abs(s))
                fail("config.json: short_mscale {} != long_mscale {}: mox keeps one attention factor", s, l);
            hp.rope_attn_factor = s;
        } else if (r.has("attention_factor")) {
            hp.rope_attn_factor = r.float_or("attention_factor", 1.0);
        } else {
            // transformers' longrope default: sqrt(1 + ln(s) / ln(original)), s = trained / original.
            const double s = static_cast<double>(hp.n_ctx_train) / static_cast<double>(hp.n_ctx_orig);
            hp.rope_attn_factor =
                s <= 1 ? 1.0 : std::sqrt(1.0 + std::log(s) / std::log(static_cast<double>(hp.n_ctx_orig)));
        }
    } else {
        fail("config.json: rope_type '{}' is not supported for phimoe (longrope or none)", rope_type);
    }
    out.tie_word_embeddings = c.bool_or("tie_word_embeddings", false);
    hp.validate();
    return out;
}

namespace archs {

ArchInfo phimoe() {
    return {
        .arch = Arch::phimoe,
        .name = "phimoe",
        .recipe = {.attention = {.qk_norm = false,
                                 .output_gate = false,
                                 .rope = RopeKind::neox,
                                 .biases = true,
                                 .rope_factors = true},
                   .moe = {.router = RouterKind::sparsemixer,
                           .renormalize = false,
                           .shared = SharedExpertKind::none},
                   .ffn_norm = "ffn_norm",
                   .has_deltanet = false,
                   .hf_norm_plus_one = false,
                   .norm = NormKind::layer,
                   .output_bias = true},
        .read_keys = read_keys,
        .write_keys = write_keys,
        .hf_model_types = {"phimoe"},
        .from_hf_config = phimoe_from_hf_config,
    };
}

}  // namespace archs
}  // namespace mox::models
