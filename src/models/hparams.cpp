#include "models/hparams.h"

#include "core/error.h"

#include <fmt/format.h>

#include <cmath>

namespace mox::models {

std::string arch_key(const Hparams& hp, const char* suffix) {
    return fmt::format("{}.{}", hp.arch_name(), suffix);
}

int64_t Hparams::n_attention_layers() const {
    int64_t n = 0;
    for (int64_t i = 0; i < n_trunk(); ++i) n += !is_recurrent(i);
    return n;
}

int64_t Hparams::n_recurrent_layers() const {
    return n_trunk() - n_attention_layers();
}

double Hparams::kv_cache_bytes_per_token(quant::TypeId kv_type) const {
    const quant::TypeTraits& t = quant::traits(kv_type);
    const double elements = static_cast<double>(n_attention_layers() * n_head_kv * (head_dim_k + head_dim_v));
    return elements * static_cast<double>(t.block_bytes) / static_cast<double>(t.block_elems);
}

uint64_t Hparams::recurrent_state_bytes() const {
    const int64_t conv = (ssm_conv_kernel - 1) * conv_channels();
    const int64_t state = ssm_state * ssm_inner;
    return static_cast<uint64_t>(n_recurrent_layers() * (conv + state)) * sizeof(float);
}

void Hparams::validate() const {
    auto need = [this](bool ok, const char* what) {
        if (!ok) fail("{} hyper-parameters: {}", arch_name(), what);
    };
    need(n_layer > 0 && n_layer <= 4096, "block_count must be in 1..4096");
    need(n_nextn >= 0 && n_nextn < n_layer, "nextn_predict_layers must be below block_count");
    need(n_embd > 0 && n_vocab > 0, "embedding_length and vocabulary must be positive");
    need(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0,
         "head_count must be a multiple of head_count_kv");
    need(head_dim_k > 0 && head_dim_v > 0, "key_length/value_length must be positive");
    need(n_rot > 0 && n_rot <= head_dim_k && n_rot % 2 == 0,
         "rope.dimension_count must be even and <= key_length");
    if (has_moe()) {
        if (n_expert == 0) {
            std::string dense;
            for (const ArchInfo& a : all_archs())
                if (a.recipe.ffn == FfnKind::dense)
                    dense += fmt::format("{}{}", dense.empty() ? "" : ", ", a.name);
            fail(
                "{}: a dense model (no expert_count): mox runs {} with experts only "
                "(dense architectures: {})",
                arch_name(), arch_name(), dense);
        }
        need(n_expert > 0 && n_expert_used > 0 && n_expert_used <= n_expert,
             "expert_used_count must be in 1..expert_count");
        need(n_ff_exp > 0, "expert_feed_forward_length must be positive");
        need(n_ff_shexp >= 0, "expert_shared_feed_forward_length must be >= 0");
    } else {
        need(n_expert == 0, "expert_count must be absent or 0 (a dense architecture)");
        need(n_ff > 0, "feed_forward_length must be positive");
    }
    need(n_ctx_train > 0, "context_length must be positive");
    need(rope_attn_factor > 0 && std::isfinite(rope_attn_factor),
         "rope.scaling.attn_factor must be positive");
    if (recipe().attention.rope_factors)
        need(n_ctx_orig > 0,
             "rope.scaling.original_context_length must be positive (the rope factors need it)");
    if (has_moe() && recipe().moe.router == RouterKind::sparsemixer)
        need(n_expert_used == 2, "sparsemixer routing selects exactly 2 experts (expert_used_count)");
    if (!recipe().has_deltanet) return;
    need(full_attn_interval >= 1, "full_attention_interval must be >= 1");
    need(ssm_conv_kernel >= 1, "ssm.conv_kernel must be >= 1");
    need(ssm_k_heads > 0 && ssm_v_heads > 0 && ssm_v_heads % ssm_k_heads == 0,
         "ssm.time_step_rank (value heads) must be a multiple of ssm.group_count (key heads)");
    need(ssm_inner == ssm_v_heads * ssm_state, "ssm.inner_size must equal time_step_rank * state_size");
}

Hparams hparams_for(Arch arch) {
    Hparams hp;
    hp.arch = arch;
    if (!hp.recipe().has_deltanet) {
        hp.full_attn_interval = 1;
        hp.ssm_conv_kernel = hp.ssm_inner = hp.ssm_state = hp.ssm_v_heads = hp.ssm_k_heads = 0;
        hp.rope_sections.clear();
    }
    if (!hp.has_moe()) {
        hp.n_expert = hp.n_expert_used = hp.n_ff_exp = hp.n_ff_shexp = 0;
        hp.n_ff = 17408;
    }
    return hp;
}

Hparams read_hparams(const gguf::File& file) {
    const std::string name = file.get_string("general.architecture");
    const ArchInfo* info = find_arch(name);
    if (!info) fail("{}: architecture '{}' is not supported (mox runs {})", file.path(), name, known_archs());
    Hparams hp = hparams_for(info->arch);
    auto key = [&](const char* k) { return arch_key(hp, k); };
    auto u = [&](const char* k) { return static_cast<int64_t>(file.get_uint(key(k))); };
    auto u_or = [&](const char* k, int64_t d) { return static_cast<int64_t>(file.get_uint_or(key(k), d)); };
    hp.n_layer = u("block_count");
    hp.n_nextn = u_or("nextn_predict_layers", 0);
    hp.n_ctx_train = u("context_length");
    hp.n_embd = u("embedding_length");
    hp.n_head = u("attention.head_count");
    hp.n_head_kv = u_or("attention.head_count_kv", hp.n_head);
    hp.head_dim_k = u_or("attention.key_length", hp.n_embd / hp.n_head);
    hp.head_dim_v = u_or("attention.value_length", hp.head_dim_k);
    hp.n_rot = u_or("rope.dimension_count", hp.head_dim_k);
    hp.rope_theta = file.get_float_or(key("rope.freq_base"), 10000.0);
    hp.rms_eps = file.get_float(key("attention.layer_norm_rms_epsilon"));
    hp.n_expert = u_or("expert_count", 0);
    hp.n_expert_used = u_or("expert_used_count", 0);
    if (hp.has_moe()) {
        hp.n_ff_exp = u_or("expert_feed_forward_length", u_or("feed_forward_length", 0));
        hp.n_ff_shexp = u_or("expert_shared_feed_forward_length", 0);
    } else {
        hp.n_ff = u("feed_forward_length");
    }
    if (info->read_keys) info->read_keys(file, hp);
    // Vocabulary size: the embedding's row count is authoritative (files pad the token list).
    if (const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight"))
        hp.n_vocab = embd->ne[1];
    else if (const gguf::Value* tokens = file.find("tokenizer.ggml.tokens"); tokens && tokens->as_array())
        hp.n_vocab = static_cast<int64_t>(tokens->as_array()->items.size());
    hp.validate();
    return hp;
}

void write_hparams(gguf::Writer& w, const Hparams& hp) {
    using gguf::Value;
    auto u32 = [](int64_t v) { return Value::u32(static_cast<uint32_t>(v)); };
    auto key = [&](const char* k) { return arch_key(hp, k); };
    w.set("general.architecture", Value::string(hp.arch_name()));
    w.set(key("block_count"), u32(hp.n_layer));
    if (hp.n_nextn > 0) w.set(key("nextn_predict_layers"), u32(hp.n_nextn));
    w.set(key("context_length"), u32(hp.n_ctx_train));
    w.set(key("embedding_length"), u32(hp.n_embd));
    w.set(key("attention.head_count"), u32(hp.n_head));
    w.set(key("attention.head_count_kv"), u32(hp.n_head_kv));
    w.set(key("attention.key_length"), u32(hp.head_dim_k));
    w.set(key("attention.value_length"), u32(hp.head_dim_v));
    w.set(key("attention.layer_norm_rms_epsilon"), Value::f32(static_cast<float>(hp.rms_eps)));
    w.set(key("rope.freq_base"), Value::f32(static_cast<float>(hp.rope_theta)));
    w.set(key("rope.dimension_count"), u32(hp.n_rot));
    if (hp.has_moe()) {
        w.set(key("expert_count"), u32(hp.n_expert));
        w.set(key("expert_used_count"), u32(hp.n_expert_used));
        w.set(key("expert_feed_forward_length"), u32(hp.n_ff_exp));
    } else {
        w.set(key("feed_forward_length"), u32(hp.n_ff));
    }
    if (const auto write_keys = arch_info(hp.arch).write_keys) write_keys(w, hp);
}

std::vector<TensorSpec> model_tensors(const Hparams& hp) {
    const ArchRecipe& r = hp.recipe();
    std::vector<TensorSpec> t;
    const int64_t d = hp.n_embd;
    t.push_back({"token_embd.weight", {d, hp.n_vocab}, -1});
    const bool layer_norm = r.norm == NormKind::layer;
    t.push_back({"output_norm.weight", {d}, -1});
    if (layer_norm) t.push_back({"output_norm.bias", {d}, -1});
    t.push_back({"output.weight", {d, hp.n_vocab}, -1});
    if (r.output_bias) t.push_back({"output.bias", {hp.n_vocab}, -1});
    if (r.attention.rope_factors) {
        t.push_back({"rope_factors_long.weight", {hp.n_rot / 2}, -1});
        t.push_back({"rope_factors_short.weight", {hp.n_rot / 2}, -1});
    }
    for (int64_t i = 0; i < hp.n_layer; ++i) {
        auto add = [&](const std::string& name, std::vector<int64_t> ne) {
            t.push_back({fmt::format("blk.{}.{}", i, name), std::move(ne), i});
        };
        add("attn_norm.weight", {d});
        if (layer_norm) add("attn_norm.bias", {d});
        if (hp.is_recurrent(i)) {
            add("attn_qkv.weight", {d, hp.conv_channels()});
            add("attn_gate.weight", {d, hp.ssm_inner});
            add("ssm_beta.weight", {d, hp.ssm_v_heads});
            add("ssm_alpha.weight", {d, hp.ssm_v_heads});
            add("ssm_conv1d.weight", {hp.ssm_conv_kernel, hp.conv_channels()});
            add("ssm_dt.bias", {hp.ssm_v_heads});
            add("ssm_a", {hp.ssm_v_heads});
            add("ssm_norm.weight", {hp.ssm_state});
            add("ssm_out.weight", {hp.ssm_inner, d});
        } else {
            const bool b = r.attention.biases;
            add("attn_q.weight", {d, hp.q_proj_rows()});
            if (b) add("attn_q.bias", {hp.q_proj_rows()});
            add("attn_k.weight", {d, hp.n_head_kv * hp.head_dim_k});
            if (b) add("attn_k.bias", {hp.n_head_kv * hp.head_dim_k});
            add("attn_v.weight", {d, hp.n_head_kv * hp.head_dim_v});
            if (b) add("attn_v.bias", {hp.n_head_kv * hp.head_dim_v});
            if (r.attention.qk_norm) {
                add("attn_q_norm.weight", {hp.head_dim_k});
                add("attn_k_norm.weight", {hp.head_dim_k});
            }
            add("attn_output.weight", {hp.n_head * hp.head_dim_v, d});
            if (b) add("attn_output.bias", {d});
        }
        add(fmt::format("{}.weight", r.ffn_norm), {d});
        if (layer_norm) add(fmt::format("{}.bias", r.ffn_norm), {d});
        if (!hp.has_moe()) {
            add("ffn_gate.weight", {d, hp.n_ff});
            add("ffn_up.weight", {d, hp.n_ff});
            add("ffn_down.weight", {hp.n_ff, d});
        } else {
            add("ffn_gate_inp.weight", {d, hp.n_expert});
            add("ffn_gate_exps.weight", {d, hp.n_ff_exp, hp.n_expert});
            add("ffn_up_exps.weight", {d, hp.n_ff_exp, hp.n_expert});
            add("ffn_down_exps.weight", {hp.n_ff_exp, d, hp.n_expert});
        }
        if (hp.has_shared_expert()) {
            add("ffn_gate_inp_shexp.weight", {d});
            add("ffn_gate_shexp.weight", {d, hp.n_ff_shexp});
            add("ffn_up_shexp.weight", {d, hp.n_ff_shexp});
            add("ffn_down_shexp.weight", {hp.n_ff_shexp, d});
        }
        if (i >= hp.n_trunk()) {
            add("nextn.eh_proj.weight", {2 * d, d});
            add("nextn.enorm.weight", {d});
            add("nextn.hnorm.weight", {d});
            add("nextn.shared_head_norm.weight", {d});
        }
    }
    return t;
}

}  // namespace mox::models
