// Qwen3.5/3.6-MoE (llama.cpp `qwen35moe`; shared/spec/qwen35moe.md): three Gated DeltaNet layers to
// one gated full-attention layer, q/k norms, partial NEOX rotary (IMROPE, equal to NEOX on text),
// 256 experts top-8 softmax-renormalised plus a sigmoid-gated shared expert; zero-centred HF norms.
// The family's keys and HF config reader are shared with the dense Qwen3.5/3.6 (qwen35.cpp).
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "models/archs/archs.h"
#include "models/archs/qwen35_family.h"
#include "models/hf_config.h"
#include "models/hparams.h"

#include <algorithm>

namespace mox::models {
namespace archs {

void read_qwen35_keys(const gguf::File& file, Hparams& hp) {
    auto key = [&](const char* k) { return arch_key(hp, k); };
    auto u = [&](const char* k) { return static_cast<int64_t>(file.get_uint(key(k))); };
    hp.ssm_conv_kernel = u("ssm.conv_kernel");
    hp.ssm_inner = u("ssm.inner_size");
    hp.ssm_state = u("ssm.state_size");
    hp.ssm_v_heads = u("ssm.time_step_rank");
    hp.ssm_k_heads = u("ssm.group_count");
    hp.full_attn_interval = static_cast<int64_t>(file.get_uint_or(key("full_attention_interval"), 4));
    if (const gguf::Value* sections = file.find(key("rope.dimension_sections"))) {
        hp.rope_sections.clear();
        if (const gguf::Array* a = sections->as_array())
            for (const gguf::Value& v : a->items)
                hp.rope_sections.push_back(static_cast<int32_t>(v.as_int().value_or(0)));
    }
}

void write_qwen35_keys(gguf::Writer& w, const Hparams& hp) {
    using gguf::Value;
    auto u32 = [](int64_t v) { return Value::u32(static_cast<uint32_t>(v)); };
    auto key = [&](const char* k) { return arch_key(hp, k); };
    w.set(key("rope.dimension_sections"), Value::i32_array(hp.rope_sections));
    if (hp.has_moe()) w.set(key("expert_shared_feed_forward_length"), u32(hp.n_ff_shexp));
    w.set(key("ssm.conv_kernel"), u32(hp.ssm_conv_kernel));
    w.set(key("ssm.inner_size"), u32(hp.ssm_inner));
    w.set(key("ssm.state_size"), u32(hp.ssm_state));
    w.set(key("ssm.time_step_rank"), u32(hp.ssm_v_heads));
    w.set(key("ssm.group_count"), u32(hp.ssm_k_heads));
    w.set(key("full_attention_interval"), u32(hp.full_attn_interval));
}

using nlohmann::json;

// The HF config: the nested text_config of a multimodal checkpoint (model_type qwen3_5_moe or
// qwen3_5) or a flat text one (qwen3_5_moe_text, qwen3_5_text).
HfTextConfig qwen35_family_from_hf_config(const json& config, Arch arch) {
    const bool moe = arch == Arch::qwen35moe;
    const std::string family = moe ? "qwen3_5_moe" : "qwen3_5";
    const std::string text_type = family + "_text";
    const char* what = moe ? "Qwen3.5/3.6-MoE" : "a dense Qwen3.5/3.6";
    if (!config.is_object()) fail("config.json: top level must be an object");
    const std::string top_type = config.value("model_type", std::string());
    const json* text = &config;
    std::string where;
    if (config.contains("text_config")) {
        if (!config.at("text_config").is_object()) fail("config.json: text_config must be an object");
        text = &config.at("text_config");
        where = "text_config.";
        const std::string tt = text->value("model_type", text_type);
        if (top_type != family || tt != text_type)
            fail("config.json: model_type '{}' / text_config.model_type '{}' is not {} (expected {} / {})",
                 top_type, tt, what, family, text_type);
    } else if (top_type != text_type && top_type != family) {
        fail("config.json: model_type '{}' is not {} (expected {} or {})", top_type, what, family, text_type);
    }
    const HfConfig c(*text, where);

    HfTextConfig out;
    out.hparams = hparams_for(arch);
    Hparams& hp = out.hparams;
    read_hf_trunk(c, hp, 1e-6);
    hp.n_nextn = 0;  // the MTP block (mtp.*) is not converted
    if (moe) {
        hp.n_expert = c.need_int("num_experts");
        hp.n_expert_used = c.need_int("num_experts_per_tok");
        hp.n_ff_exp = c.need_int("moe_intermediate_size");
        hp.n_ff_shexp =
            c.has("shared_expert_intermediate_size") ? c.need_int("shared_expert_intermediate_size") : 0;
    } else {
        if (c.has("num_experts"))
            fail("config.json: {}num_experts is set: a Qwen3.5-MoE config, not {}", where, what);
        hp.n_ff = c.need_int("intermediate_size");
    }
    hp.ssm_conv_kernel = c.need_int("linear_conv_kernel_dim");
    hp.ssm_k_heads = c.need_int("linear_num_key_heads");
    hp.ssm_v_heads = c.need_int("linear_num_value_heads");
    const int64_t k_dim = c.need_int("linear_key_head_dim");
    const int64_t v_dim = c.need_int("linear_value_head_dim");
    // GGUF has one ssm.state_size for both; llama.cpp's qwen35moe assumes they agree.
    if (k_dim != v_dim)
        fail("config.json: linear_key_head_dim {} != linear_value_head_dim {} (not representable in GGUF)",
             k_dim, v_dim);
    hp.ssm_state = k_dim;
    hp.ssm_inner = hp.ssm_v_heads * v_dim;

    if (c.bool_or("attention_bias", false))
        fail("config.json: {}attention_bias=true is not supported", where);
    if (!c.bool_or("attn_output_gate", true))
        fail("config.json: {}attn_output_gate=false is not {} (its attention is always gated)", where, what);
    if (const std::string act = c.string_or("hidden_act", "silu"); act != "silu")
        fail("config.json: {}hidden_act '{}' is not supported (expected silu)", where, act);

    const HfRope rope_values = read_hf_rope(c, where, 0.25);
    hp.rope_theta = rope_values.theta;
    hp.n_rot = static_cast<int64_t>(static_cast<double>(hp.head_dim_k) * rope_values.partial);
    hp.rope_sections = {11, 11, 10, 0};
    const json* rope = c.object("rope_parameters");
    if (!rope) rope = c.object("rope_scaling");
    const json empty = json::object();
    const HfConfig r(rope ? *rope : empty, where);
    const json* sections = r.has("mrope_section")   ? &r.raw("mrope_section")
                           : c.has("mrope_section") ? &c.raw("mrope_section")
                                                    : nullptr;
    if (sections) {
        if (!sections->is_array() || sections->size() > 4)
            fail("config.json: mrope_section must be a list of <= 4 integers");
        hp.rope_sections.assign(4, 0);
        for (size_t i = 0; i < sections->size(); ++i) {
            const json& v = (*sections)[i];
            if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1 << 20)
                fail("config.json: mrope_section entries must be non-negative integers");
            hp.rope_sections[i] = static_cast<int32_t>(v.get<int64_t>());
        }
    }

    // Layer pattern: GGUF stores only full_attention_interval, so layer_types must follow it.
    if (c.has("layer_types")) {
        const json& lt = c.raw("layer_types");
        if (!lt.is_array() || static_cast<int64_t>(lt.size()) != hp.n_layer)
            fail("config.json: layer_types must list {} layer types", hp.n_layer);
        std::vector<bool> full;
        for (const json& v : lt) {
            const std::string s = v.is_string() ? v.get<std::string>() : std::string();
            if (s == "full_attention" || s == "attention")
                full.push_back(true);
            else if (s == "linear_attention")
                full.push_back(false);
            else
                fail("config.json: unknown layer type '{}' in layer_types", v.dump());
        }
        const auto first = std::find(full.begin(), full.end(), true);
        hp.full_attn_interval = first == full.end() ? hp.n_layer + 1 : (first - full.begin()) + 1;
        for (int64_t i = 0; i < hp.n_layer; ++i)
            if (full[static_cast<size_t>(i)] != ((i + 1) % hp.full_attn_interval == 0))
                fail(
                    "config.json: layer_types is not 'full attention every {}th layer', which is all that "
                    "{} GGUF files can express (layer {} differs)",
                    hp.full_attn_interval, hp.arch_name(), i);
    } else {
        hp.full_attn_interval = c.int_or("full_attention_interval", 4);
    }

    out.tie_word_embeddings =
        HfConfig(config, "").bool_or("tie_word_embeddings", false) || c.bool_or("tie_word_embeddings", false);
    hp.validate();
    return out;
}

}  // namespace archs

HfTextConfig qwen35moe_from_hf_config(const nlohmann::json& config) {
    return archs::qwen35_family_from_hf_config(config, Arch::qwen35moe);
}

namespace archs {

ArchInfo qwen35moe() {
    return {
        .arch = Arch::qwen35moe,
        .name = "qwen35moe",
        .recipe = {.attention = {.qk_norm = true, .output_gate = true, .rope = RopeKind::neox},
                   .moe = {.router = RouterKind::softmax_topk,
                           .renormalize = true,
                           .shared = SharedExpertKind::sigmoid_gated},
                   .ffn_norm = "post_attention_norm",
                   .has_deltanet = true,
                   .hf_norm_plus_one = true},
        .read_keys = read_qwen35_keys,
        .write_keys = write_qwen35_keys,
        .hf_model_types = {"qwen3_5_moe", "qwen3_5_moe_text"},
        .from_hf_config = qwen35moe_from_hf_config,
    };
}

}  // namespace archs
}  // namespace mox::models
