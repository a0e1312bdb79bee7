#include "models/convert.h"

#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "gguf/writer.h"
#include "models/safetensors.h"
#include "models/synth_vocab.h"
#include "text/vocab_io.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

namespace mox::models {

using nlohmann::json;
using quant::TypeId;

// ---------------------------------------------------------------------------------------------
// config.json

namespace {

class ConfigReader {
  public:
    ConfigReader(const json& section, std::string where) : j_(section), where_(std::move(where)) {}

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
        const json& v = j_.at(key);
        if (!v.is_number()) fail("config.json: {}{} must be a number", where_, key);
        return v.get<double>();
    }
    std::string string_or(const char* key, std::string fallback) const {
        if (!has(key)) return fallback;
        const json& v = j_.at(key);
        if (!v.is_string()) fail("config.json: {}{} must be a string", where_, key);
        return v.get<std::string>();
    }
    bool bool_or(const char* key, bool fallback) const {
        if (!has(key)) return fallback;
        const json& v = j_.at(key);
        if (!v.is_boolean()) fail("config.json: {}{} must be true or false", where_, key);
        return v.get<bool>();
    }
    const json* object(const char* key) const {
        if (!has(key)) return nullptr;
        if (!j_.at(key).is_object()) fail("config.json: {}{} must be an object", where_, key);
        return &j_.at(key);
    }
    const json& raw(const char* key) const { return j_.at(key); }
    const std::string& where() const { return where_; }

  private:
    int64_t positive_int(const char* key) const {
        const json& v = j_.at(key);
        if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (int64_t{1} << 40))
            fail("config.json: {}{} must be a positive integer", where_, key);
        return v.get<int64_t>();
    }
    const json& j_;
    std::string where_;
};

}  // namespace

namespace {

HfTextConfig qwen35moe_from_hf_config(const json& config);
HfTextConfig qwen3moe_from_hf_config(const json& config);

}  // namespace

HfTextConfig hparams_from_hf_config(const json& config) {
    // nlohmann's typed accessors throw their own exceptions on a value of the wrong type.
    try {
        if (!config.is_object()) fail("config.json: top level must be an object");
        const std::string type = config.value("model_type", std::string());
        for (Arch a : {Arch::qwen35moe, Arch::qwen3moe}) {
            const ArchInfo& info = arch_info(a);
            if (std::find(info.hf_model_types.begin(), info.hf_model_types.end(), type) == info.hf_model_types.end())
                continue;
            return a == Arch::qwen3moe ? qwen3moe_from_hf_config(config) : qwen35moe_from_hf_config(config);
        }
        fail("config.json: model_type '{}' is not an architecture mox converts (qwen3_5_moe, qwen3_5_moe_text, "
             "qwen3_moe)",
             type);
    } catch (const json::exception& e) {
        fail("config.json: {}", e.what());
    }
}

namespace {

// The RoPE section of a config: transformers 5 keeps it in rope_parameters, older configs in
// rope_scaling or at the top level. Only unscaled RoPE converts.
struct HfRope {
    double theta = 10000.0;
    double partial = 1.0;
};
HfRope read_hf_rope(const ConfigReader& c, const std::string& where, double default_partial) {
    const json* rope = c.object("rope_parameters");
    if (!rope) rope = c.object("rope_scaling");
    const json empty = json::object();
    const ConfigReader r(
        rope ? *rope : empty,
        rope ? where + (c.has("rope_parameters") ? "rope_parameters." : "rope_scaling.") : where);
    const std::string rope_type = r.string_or("rope_type", r.string_or("type", "default"));
    if (rope_type != "default" && rope_type != "mrope")
        fail("config.json: rope_type '{}' is not supported (only unscaled RoPE converts)", rope_type);
    HfRope out;
    out.theta = r.has("rope_theta") ? r.float_or("rope_theta", 0) : c.float_or("rope_theta", 10000.0);
    out.partial = r.has("partial_rotary_factor") ? r.float_or("partial_rotary_factor", 0)
                                                 : c.float_or("partial_rotary_factor", default_partial);
    if (!(out.partial > 0 && out.partial <= 1))
        fail("config.json: partial_rotary_factor {} must be in (0, 1]", out.partial);
    return out;
}

// Qwen3-MoE (archs.md §2.1): every layer attention + MoE, no shared expert.
HfTextConfig qwen3moe_from_hf_config(const json& config) {
    const ConfigReader c(config, "");
    HfTextConfig out;
    Hparams& hp = out.hparams;
    hp.arch = Arch::qwen3moe;
    hp.n_embd = c.need_int("hidden_size");
    hp.n_layer = c.need_int("num_hidden_layers");
    hp.n_nextn = 0;
    hp.n_vocab = c.need_int("vocab_size");
    hp.n_head = c.need_int("num_attention_heads");
    hp.n_head_kv = c.int_or("num_key_value_heads", hp.n_head);
    hp.head_dim_k = hp.head_dim_v = c.int_or("head_dim", hp.n_embd / hp.n_head);
    hp.n_ctx_train = c.int_or("max_position_embeddings", 32768);
    hp.rms_eps = c.float_or("rms_norm_eps", 1e-6);
    // transformers names the count num_experts in the config class, num_local_experts in some dumps.
    hp.n_expert = c.has("num_experts") ? c.need_int("num_experts") : c.need_int("num_local_experts");
    hp.n_expert_used = c.need_int("num_experts_per_tok");
    hp.n_ff_exp = c.need_int("moe_intermediate_size");
    hp.n_ff_shexp = 0;
    hp.full_attn_interval = 1;
    hp.ssm_conv_kernel = hp.ssm_inner = hp.ssm_state = hp.ssm_v_heads = hp.ssm_k_heads = 0;
    hp.rope_sections.clear();
    if (c.bool_or("attention_bias", false)) fail("config.json: attention_bias=true is not supported");
    if (const std::string act = c.string_or("hidden_act", "silu"); act != "silu")
        fail("config.json: hidden_act '{}' is not supported (expected silu)", act);
    // llama.cpp's qwen3moe always renormalises the top-k weights, as the released checkpoints do.
    if (!c.bool_or("norm_topk_prob", false))
        fail("config.json: norm_topk_prob=false is not what llama.cpp's qwen3moe computes (it renormalises)");
    if (c.has("mlp_only_layers") && !(c.raw("mlp_only_layers").is_array() && c.raw("mlp_only_layers").empty()))
        fail("config.json: mlp_only_layers (dense layers among the MoE ones) is not supported");
    if (c.int_or("decoder_sparse_step", 1) != 1) fail("config.json: decoder_sparse_step != 1 is not supported");
    if (c.bool_or("use_sliding_window", false)) fail("config.json: use_sliding_window=true is not supported");
    const HfRope rope = read_hf_rope(c, "", 1.0);
    hp.rope_theta = rope.theta;
    hp.n_rot = static_cast<int64_t>(static_cast<double>(hp.head_dim_k) * rope.partial);
    out.tie_word_embeddings = c.bool_or("tie_word_embeddings", false);
    hp.validate();
    return out;
}

HfTextConfig qwen35moe_from_hf_config(const json& config) {
    if (!config.is_object()) fail("config.json: top level must be an object");
    const std::string top_type = config.value("model_type", std::string());
    const json* text = &config;
    std::string where;
    if (config.contains("text_config")) {
        if (!config.at("text_config").is_object()) fail("config.json: text_config must be an object");
        text = &config.at("text_config");
        where = "text_config.";
        const std::string tt = text->value("model_type", std::string("qwen3_5_moe_text"));
        if (top_type != "qwen3_5_moe" || tt != "qwen3_5_moe_text")
            fail(
                "config.json: model_type '{}' / text_config.model_type '{}' is not Qwen3.5/3.6-MoE "
                "(expected qwen3_5_moe / qwen3_5_moe_text)",
                top_type, tt);
    } else if (top_type != "qwen3_5_moe_text" && top_type != "qwen3_5_moe") {
        fail("config.json: model_type '{}' is not Qwen3.5/3.6-MoE (expected qwen3_5_moe or qwen3_5_moe_text)",
             top_type);
    }
    const ConfigReader c(*text, where);

    HfTextConfig out;
    Hparams& hp = out.hparams;
    hp.n_embd = c.need_int("hidden_size");
    hp.n_layer = c.need_int("num_hidden_layers");
    hp.n_nextn = 0;  // the MTP block (mtp.*) is not converted
    hp.n_vocab = c.need_int("vocab_size");
    hp.n_head = c.need_int("num_attention_heads");
    hp.n_head_kv = c.int_or("num_key_value_heads", hp.n_head);
    hp.head_dim_k = hp.head_dim_v = c.int_or("head_dim", hp.n_embd / hp.n_head);
    hp.n_ctx_train = c.int_or("max_position_embeddings", 32768);
    hp.rms_eps = c.float_or("rms_norm_eps", 1e-6);
    hp.n_expert = c.need_int("num_experts");
    hp.n_expert_used = c.need_int("num_experts_per_tok");
    hp.n_ff_exp = c.need_int("moe_intermediate_size");
    hp.n_ff_shexp =
        c.has("shared_expert_intermediate_size") ? c.need_int("shared_expert_intermediate_size") : 0;
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
        fail("config.json: {}attn_output_gate=false is not Qwen3.5-MoE (its attention is always gated)",
             where);
    if (const std::string act = c.string_or("hidden_act", "silu"); act != "silu")
        fail("config.json: {}hidden_act '{}' is not supported (expected silu)", where, act);

    const HfRope rope_values = read_hf_rope(c, where, 0.25);
    hp.rope_theta = rope_values.theta;
    hp.n_rot = static_cast<int64_t>(static_cast<double>(hp.head_dim_k) * rope_values.partial);
    hp.rope_sections = {11, 11, 10, 0};
    const json* rope = c.object("rope_parameters");
    if (!rope) rope = c.object("rope_scaling");
    const json empty = json::object();
    const ConfigReader r(rope ? *rope : empty, where);
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
                    "qwen35moe GGUF files can express (layer {} differs)",
                    hp.full_attn_interval, i);
    } else {
        hp.full_attn_interval = c.int_or("full_attention_interval", 4);
    }

    out.tie_word_embeddings = ConfigReader(config, "").bool_or("tie_word_embeddings", false) ||
                              c.bool_or("tie_word_embeddings", false);
    hp.validate();
    return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Tensor plans: where each output row comes from

namespace {

enum class ValueOp { none, add_one, neg_exp };

struct RowRef {
    size_t src = 0;   // index into Plan::sources
    int64_t row = 0;  // row of ne0 contiguous elements in that source
};

struct Plan {
    TensorSpec spec;
    std::vector<const StTensor*> sources;
    int64_t ne0 = 0;
    int64_t n_rows = 0;
    std::function<RowRef(int64_t)> row;  // output row -> source row
    std::vector<int64_t> col_perm;       // empty: identity; else out[c] = in[col_perm[c]]
    ValueOp op = ValueOp::none;
};

class Planner {
  public:
    Planner(const SafetensorsCheckpoint& ck, const Hparams& hp, std::string prefix)
        : ck_(ck), hp_(hp), prefix_(std::move(prefix)) {}

    std::vector<Plan> plan_all(bool tied) {
        std::vector<Plan> plans;
        for (const TensorSpec& spec : model_tensors(hp_)) {
            if (spec.name == "output.weight" && !ck_.find("lm_head.weight") && tied)
                continue;  // tied embeddings: llama.cpp's loader falls back to token_embd
            plans.push_back(plan(spec));
        }
        return plans;
    }

    const std::set<std::string>& used() const { return used_; }

  private:
    // The source tensor `name`, which must have exactly `shape`.
    const StTensor* source(const std::string& name, std::vector<int64_t> shape) {
        const StTensor* t = ck_.find(name);
        if (!t) fail("checkpoint has no tensor '{}'", name);
        if (t->shape != shape)
            fail("tensor '{}' has shape {}, expected [{}]", name, t->shape_text(), fmt::join(shape, ", "));
        used_.insert(name);
        return t;
    }
    // As source(), accepting any of several equivalent shapes (e.g. with or without a unit axis).
    const StTensor* source_any(const std::string& name, std::initializer_list<std::vector<int64_t>> shapes) {
        const StTensor* t = ck_.find(name);
        if (!t) fail("checkpoint has no tensor '{}'", name);
        for (const auto& s : shapes)
            if (t->shape == s) return source(name, s);
        fail("tensor '{}' has shape {}, expected [{}]", name, t->shape_text(),
             fmt::join(*shapes.begin(), ", "));
    }

    // HF value head of GGUF value head h: HF groups the value heads of one key head together
    // (g*R + r), llama.cpp tiles them (r*Hk + g); spec §2.6 item 5.
    int64_t hf_head(int64_t h) const {
        const int64_t r = h / hp_.ssm_k_heads, g = h % hp_.ssm_k_heads;
        return g * (hp_.ssm_v_heads / hp_.ssm_k_heads) + r;
    }
    // Row/column index within a [..., Hv*dv] value block.
    int64_t hf_value_index(int64_t j) const {
        return hf_head(j / hp_.ssm_state) * hp_.ssm_state + j % hp_.ssm_state;
    }

    // The transform of an HF RMSNorm weight: +1 where HF stores it zero-centred (Qwen3.5).
    ValueOp norm_op() const { return hp_.recipe().hf_norm_plus_one ? ValueOp::add_one : ValueOp::none; }

    static Plan simple(const TensorSpec& spec, const StTensor* src, ValueOp op = ValueOp::none) {
        Plan p;
        p.spec = spec;
        p.sources = {src};
        p.op = op;
        return p;
    }

    Plan plan(const TensorSpec& spec) {
        const int64_t d = hp_.n_embd;
        const std::string& n = spec.name;
        Plan p;
        if (n == "token_embd.weight") {
            p = simple(spec, source(prefix_ + "embed_tokens.weight", {hp_.n_vocab, d}));
        } else if (n == "output_norm.weight") {
            p = simple(spec, source(prefix_ + "norm.weight", {d}), norm_op());
        } else if (n == "output.weight") {
            p = simple(spec, source("lm_head.weight", {hp_.n_vocab, d}));
        } else {
            p = plan_layer(spec);
        }
        p.ne0 = spec.ne[0];
        p.n_rows = 1;
        for (size_t i = 1; i < spec.ne.size(); ++i) p.n_rows *= spec.ne[i];
        if (!p.row) p.row = [](int64_t r) { return RowRef{0, r}; };
        // Every output element has a source element (a fused gate_up source holds twice as many;
        // st_read_f32 checks each row's range).
        int64_t src_elements = 0;
        for (const StTensor* s : p.sources) src_elements += s->n_elements();
        MOX_CHECK(src_elements >= p.ne0 * p.n_rows, "{}: source elements {} < {}", n, src_elements,
                  p.ne0 * p.n_rows);
        return p;
    }

    Plan plan_layer(const TensorSpec& spec) {
        const int64_t d = hp_.n_embd, L = spec.layer;
        const std::string base = fmt::format("{}layers.{}.", prefix_, L);
        const std::string kind = spec.name.substr(spec.name.find('.', 4) + 1);  // after "blk.N."
        const int64_t key_dim = hp_.ssm_k_heads * hp_.ssm_state;
        const int64_t value_dim = hp_.ssm_inner;
        const int64_t conv = hp_.conv_channels();
        const std::string la = base + "linear_attn.";
        const std::string sa = base + "self_attn.";
        const std::string mlp = base + "mlp.";

        // [q | k | v] channel rows with only the v rows re-ordered.
        auto qkv_rows = [this, key_dim](int64_t r) {
            return RowRef{0, r < 2 * key_dim ? r : 2 * key_dim + hf_value_index(r - 2 * key_dim)};
        };
        // Column permutations: one entry per value head, or per value channel.
        auto head_perm = [this] {
            std::vector<int64_t> perm(static_cast<size_t>(hp_.ssm_v_heads));
            for (int64_t h = 0; h < hp_.ssm_v_heads; ++h) perm[static_cast<size_t>(h)] = hf_head(h);
            return perm;
        };
        auto channel_perm = [this, value_dim] {
            std::vector<int64_t> perm(static_cast<size_t>(value_dim));
            for (int64_t j = 0; j < value_dim; ++j) perm[static_cast<size_t>(j)] = hf_value_index(j);
            return perm;
        };

        Plan p;
        if (kind == "attn_norm.weight")
            return simple(spec, source(base + "input_layernorm.weight", {d}), norm_op());
        if (kind == fmt::format("{}.weight", hp_.recipe().ffn_norm))
            return simple(spec, source(base + "post_attention_layernorm.weight", {d}), norm_op());
        // Gated DeltaNet
        if (kind == "attn_qkv.weight") {
            p = simple(spec, source(la + "in_proj_qkv.weight", {conv, d}));
            p.row = qkv_rows;
            return p;
        }
        if (kind == "attn_gate.weight") {
            p = simple(spec, source(la + "in_proj_z.weight", {value_dim, d}));
            p.row = [this](int64_t r) { return RowRef{0, hf_value_index(r)}; };
            return p;
        }
        if (kind == "ssm_beta.weight" || kind == "ssm_alpha.weight") {
            p = simple(spec,
                       source(la + (kind == "ssm_beta.weight" ? "in_proj_b.weight" : "in_proj_a.weight"),
                              {hp_.ssm_v_heads, d}));
            p.row = [this](int64_t r) { return RowRef{0, hf_head(r)}; };
            return p;
        }
        if (kind == "ssm_conv1d.weight") {
            // HF Conv1d weight [channels, 1, kernel]; GGUF {kernel, channels}: one row per channel.
            p = simple(spec, source_any(la + "conv1d.weight",
                                        {{conv, 1, hp_.ssm_conv_kernel}, {conv, hp_.ssm_conv_kernel}}));
            p.row = qkv_rows;
            return p;
        }
        if (kind == "ssm_dt.bias") {
            p = simple(spec, source(la + "dt_bias", {hp_.ssm_v_heads}));
            p.col_perm = head_perm();
            return p;
        }
        if (kind == "ssm_a") {
            p = simple(spec, source(la + "A_log", {hp_.ssm_v_heads}), ValueOp::neg_exp);
            p.col_perm = head_perm();
            return p;
        }
        if (kind == "ssm_norm.weight")
            return simple(spec, source(la + "norm.weight", {hp_.ssm_state}));  // no +1
        if (kind == "ssm_out.weight") {
            p = simple(spec, source(la + "out_proj.weight", {d, value_dim}));
            p.col_perm = channel_perm();
            return p;
        }
        // Gated full attention
        if (kind == "attn_q.weight")
            return simple(spec, source(sa + "q_proj.weight", {hp_.q_proj_rows(), d}));
        if (kind == "attn_k.weight")
            return simple(spec, source(sa + "k_proj.weight", {hp_.n_head_kv * hp_.head_dim_k, d}));
        if (kind == "attn_v.weight")
            return simple(spec, source(sa + "v_proj.weight", {hp_.n_head_kv * hp_.head_dim_v, d}));
        if (kind == "attn_q_norm.weight")
            return simple(spec, source(sa + "q_norm.weight", {hp_.head_dim_k}), norm_op());
        if (kind == "attn_k_norm.weight")
            return simple(spec, source(sa + "k_norm.weight", {hp_.head_dim_k}), norm_op());
        if (kind == "attn_output.weight")
            return simple(spec, source(sa + "o_proj.weight", {d, hp_.n_head * hp_.head_dim_v}));
        // MoE
        if (kind == "ffn_gate_inp.weight")
            return simple(spec, source(mlp + "gate.weight", {hp_.n_expert, d}));
        if (kind == "ffn_gate_inp_shexp.weight")
            return simple(spec, source_any(mlp + "shared_expert_gate.weight", {{1, d}, {d}}));
        if (kind == "ffn_gate_shexp.weight")
            return simple(spec, source(mlp + "shared_expert.gate_proj.weight", {hp_.n_ff_shexp, d}));
        if (kind == "ffn_up_shexp.weight")
            return simple(spec, source(mlp + "shared_expert.up_proj.weight", {hp_.n_ff_shexp, d}));
        if (kind == "ffn_down_shexp.weight")
            return simple(spec, source(mlp + "shared_expert.down_proj.weight", {d, hp_.n_ff_shexp}));
        if (kind == "ffn_gate_exps.weight" || kind == "ffn_up_exps.weight" || kind == "ffn_down_exps.weight")
            return plan_experts(spec, mlp + "experts.", kind);
        fail("internal: no HF source known for {}", spec.name);
    }

    // Routed experts: either fused 3-D parameters (transformers 5: gate_up_proj [E, 2F, D] with gate
    // rows first, down_proj [E, D, F]) or one 2-D weight per expert (experts.E.gate_proj.weight ...).
    Plan plan_experts(const TensorSpec& spec, const std::string& ex, const std::string& kind) {
        const int64_t d = hp_.n_embd, F = hp_.n_ff_exp, E = hp_.n_expert;
        Plan p;
        p.spec = spec;
        const bool down = kind == "ffn_down_exps.weight";
        if (ck_.find(ex + (down ? "down_proj" : "gate_up_proj"))) {
            if (down) {
                p.sources = {source(ex + "down_proj", {E, d, F})};
            } else {
                p.sources = {source(ex + "gate_up_proj", {E, 2 * F, d})};
                const int64_t half = kind == "ffn_up_exps.weight" ? F : 0;
                p.row = [F, half](int64_t r) { return RowRef{0, (r / F) * 2 * F + half + r % F}; };
            }
            return p;
        }
        const char* which = down ? "down_proj" : kind == "ffn_gate_exps.weight" ? "gate_proj" : "up_proj";
        for (int64_t e = 0; e < E; ++e) {
            const std::string name = fmt::format("{}{}.{}.weight", ex, e, which);
            if (e == 0 && !ck_.find(name))
                fail("checkpoint has neither '{}' nor per-expert '{}'",
                     ex + (down ? "down_proj" : "gate_up_proj"), name);
            p.sources.push_back(down ? source(name, {d, F}) : source(name, {F, d}));
        }
        const int64_t rows_per_expert = down ? d : F;
        p.row = [rows_per_expert](int64_t r) {
            return RowRef{static_cast<size_t>(r / rows_per_expert), r % rows_per_expert};
        };
        return p;
    }

    const SafetensorsCheckpoint& ck_;
    const Hparams& hp_;
    std::string prefix_;
    std::set<std::string> used_;
};

// Fills rows [row0, row0 + rows) of the output tensor as fp32. [rows, ne0]
void fill_rows(const Plan& p, int64_t row0, int64_t rows, float* out) {
    std::vector<float> scratch(p.col_perm.empty() ? 0 : static_cast<size_t>(p.ne0));
    for (int64_t r = 0; r < rows; ++r) {
        const RowRef ref = p.row(row0 + r);
        float* dst = out + r * p.ne0;
        const StTensor& src = *p.sources[ref.src];
        if (p.col_perm.empty()) {
            st_read_f32(src, ref.row * p.ne0, p.ne0, dst);
        } else {
            st_read_f32(src, ref.row * p.ne0, p.ne0, scratch.data());
            for (int64_t c = 0; c < p.ne0; ++c)
                dst[c] = scratch[static_cast<size_t>(p.col_perm[static_cast<size_t>(c)])];
        }
        switch (p.op) {
            case ValueOp::none:
                break;
            // HF applies (1 + w) in fp32; stored that way, the engine multiplies by the weight directly.
            case ValueOp::add_one:
                for (int64_t c = 0; c < p.ne0; ++c) dst[c] = 1.0f + dst[c];
                break;
            case ValueOp::neg_exp:
                for (int64_t c = 0; c < p.ne0; ++c) dst[c] = -std::exp(dst[c]);
                break;
        }
    }
}

void encode(TypeId type, const float* src, uint8_t* dst, int64_t n) {
    if (type == TypeId::f32) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    const quant::TypeTraits& t = quant::traits(type);
    if (!t.quantize) fail("no reference quantizer for type {} in this build", t.name);
    t.quantize(src, dst, n);
}

bool has_tokenizer_files(const std::filesystem::path& dir) {
    for (const char* f : {"tokenizer.json", "tokenizer.model", "vocab.json"})
        if (std::filesystem::exists(dir / f)) return true;
    return false;
}

json read_json_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open", path.string());
    const json j = json::parse(in, nullptr, false);
    if (j.is_discarded()) fail("{}: not valid JSON", path.string());
    return j;
}

std::optional<int32_t> token_id_from_config(const json& j, const char* key) {
    if (!j.contains(key)) return std::nullopt;
    const json& v = j[key];
    if (v.is_number_integer()) return v.get<int32_t>();
    if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int32_t>();
    return std::nullopt;
}

// The checkpoint's own tokenizer: tokenizer.json (byte-level BPE), the chat template from
// tokenizer_config.json or chat_template.jinja, eos from config/generation_config when the tokenizer
// itself does not name one, and unused padding rows up to the embedding's row count (as real Qwen
// files carry 248320 rows for 248077 tokens).
text::Vocab read_hf_vocab(const std::filesystem::path& dir, int64_t n_vocab) {
    if (!std::filesystem::exists(dir / "tokenizer.json"))
        fail("{}: only tokenizer.json tokenizers are supported (pass --placeholder-vocab to ignore the tokenizer)",
             dir.string());
    text::Vocab v = text::vocab_from_hf_json_file((dir / "tokenizer.json").string());
    if (std::filesystem::exists(dir / "chat_template.jinja")) {
        std::ifstream in(dir / "chat_template.jinja", std::ios::binary);
        v.chat_template.assign(std::istreambuf_iterator<char>(in), {});
    } else if (std::filesystem::exists(dir / "tokenizer_config.json")) {
        const json tc = read_json_file(dir / "tokenizer_config.json");
        if (tc.contains("chat_template") && tc["chat_template"].is_string()) v.chat_template = tc["chat_template"];
    }
    for (const char* cfg : {"generation_config.json", "config.json"}) {
        if (v.eos || !std::filesystem::exists(dir / cfg)) continue;
        if (auto id = token_id_from_config(read_json_file(dir / cfg), "eos_token_id")) v.eos = *id;
    }
    if (v.size() > n_vocab)
        fail("{}: tokenizer has {} tokens but the model's vocabulary has {} rows", dir.string(), v.size(), n_vocab);
    text::pad_vocab(v, static_cast<int32_t>(n_vocab));
    v.validate();
    return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

ConvertSummary convert_hf(const ConvertOptions& o,
                                 const std::function<void(const ConvertProgress&)>& on_progress) {
    namespace fs = std::filesystem;
    const fs::path dir(o.hf_dir);
    if (!fs::is_directory(dir)) fail("{}: not a directory", o.hf_dir);
    if (!fs::exists(dir / "config.json")) fail("{}: no config.json", o.hf_dir);
    const HfTextConfig cfg = hparams_from_hf_config(read_json_file(dir / "config.json"));
    const Hparams& hp = cfg.hparams;
    const SafetensorsCheckpoint ck = SafetensorsCheckpoint::open_dir(o.hf_dir);

    // Multimodal checkpoints nest the language model one level deeper than text-only ones.
    std::string prefix;
    if (ck.find("model.language_model.embed_tokens.weight"))
        prefix = "model.language_model.";
    else if (ck.find("model.embed_tokens.weight"))
        prefix = "model.";
    else
        fail("{}: no model.language_model.embed_tokens.weight or model.embed_tokens.weight", o.hf_dir);

    Planner planner(ck, hp, prefix);
    const std::vector<Plan> plans = planner.plan_all(cfg.tie_word_embeddings);
    for (const std::string& name : ck.names()) {
        const bool skipped = name.starts_with("model.visual.") || name.starts_with("visual.") ||
                             name.starts_with("mtp.") || name.starts_with("model.mtp.");
        if (!skipped && !planner.used().count(name))
            fail("{}: tensor '{}' is not part of a {} text model", o.hf_dir, name, hp.arch_name());
    }

    const bool ships_tokenizer = has_tokenizer_files(dir);
    const bool real_vocab = ships_tokenizer && !o.placeholder_vocab;
    text::Vocab vocab;
    if (real_vocab) vocab = read_hf_vocab(dir, hp.n_vocab);

    QuantMix mix = QuantMix::f32;
    if (o.mix) {
        mix = *o.mix;
    } else {
        const StDtype dt = plans.front().sources.front()->dtype;  // token_embd
        mix = dt == StDtype::bf16 ? QuantMix::bf16 : dt == StDtype::f16 ? QuantMix::f16 : QuantMix::f32;
    }

    gguf::Writer w(o.output);
    std::string name = dir.filename().string();
    if (name.empty()) name = dir.parent_path().filename().string();
    w.set("general.name", gguf::Value::string(name));
    w.set("general.type", gguf::Value::string("model"));
    write_hparams(w, hp);
    w.set("general.file_type", gguf::Value::u32(llama_ftype_of(mix)));
    w.set("general.quantization_version", gguf::Value::u32(2));
    if (real_vocab) text::vocab_to_gguf(vocab, w);
    else write_synth_vocab(w, hp.n_vocab);

    std::vector<TypeId> types;
    ConvertProgress progress;
    progress.tensors_total = plans.size();
    for (size_t i = 0; i < plans.size(); ++i) {
        types.push_back(choose_tensor_type(plans[i].spec, mix, hp));
        w.add_tensor(plans[i].spec.name, plans[i].spec.ne, types.back());
        progress.bytes_total += w.tensor_bytes(i);
    }
    w.write_header();

    const int threads = o.threads > 0 ? o.threads : hardware_threads();
    constexpr int64_t kChunkElements = int64_t{1} << 20;
    for (size_t ti = 0; ti < plans.size(); ++ti) {
        const Plan& p = plans[ti];
        const TypeId type = types[ti];
        const size_t row_bytes = quant::row_bytes(type, p.ne0);
        const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElements / p.ne0);
        const int64_t n_chunks = (p.n_rows + rows_per_chunk - 1) / rows_per_chunk;
        // Waves of chunks are converted in parallel and written in order: memory stays a few chunks.
        const int64_t wave = std::max(2 * threads, 1);
        std::vector<std::vector<uint8_t>> out(static_cast<size_t>(std::min(wave, n_chunks)));
        for (int64_t c0 = 0; c0 < n_chunks; c0 += wave) {
            const int64_t in_wave = std::min(wave, n_chunks - c0);
            parallel_for(in_wave, threads, [&](int64_t k) {
                const int64_t row0 = (c0 + k) * rows_per_chunk;
                const int64_t rows = std::min(rows_per_chunk, p.n_rows - row0);
                std::vector<float> values(static_cast<size_t>(rows * p.ne0));
                fill_rows(p, row0, rows, values.data());
                std::vector<uint8_t>& buf = out[static_cast<size_t>(k)];
                buf.resize(static_cast<size_t>(rows) * row_bytes);
                encode(type, values.data(), buf.data(), rows * p.ne0);
            });
            for (int64_t k = 0; k < in_wave; ++k) {
                w.write_data(out[static_cast<size_t>(k)]);
                progress.bytes_done += out[static_cast<size_t>(k)].size();
            }
        }
        progress.tensors_done = ti + 1;
        if (on_progress) on_progress(progress);
    }
    w.finish();

    ConvertSummary s;
    s.hparams = hp;
    s.mix = mix;
    s.n_tensors = plans.size();
    s.data_bytes = progress.bytes_total;
    s.placeholder_vocab = !real_vocab;
    if (ships_tokenizer && !real_vocab) log::warn("{}: tokenizer files ignored; wrote a placeholder vocabulary", o.hf_dir);
    return s;
}

}  // namespace mox::models
