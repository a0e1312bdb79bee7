#include "models/hf_config.h"

namespace mox::models {

using nlohmann::json;

void read_hf_trunk(const HfConfig& c, Hparams& hp, double default_rms_eps) {
    hp.n_embd = c.need_int("hidden_size");
    hp.n_layer = c.need_int("num_hidden_layers");
    hp.n_vocab = c.need_int("vocab_size");
    hp.n_head = c.need_int("num_attention_heads");
    hp.n_head_kv = c.int_or("num_key_value_heads", hp.n_head);
    hp.head_dim_k = hp.head_dim_v = c.int_or("head_dim", hp.n_embd / hp.n_head);
    hp.n_ctx_train = c.int_or("max_position_embeddings", 32768);
    hp.rms_eps = c.float_or("rms_norm_eps", default_rms_eps);
}

void read_hf_block_sparse_moe(const HfConfig& c, Hparams& hp) {
    hp.n_expert = c.need_int("num_local_experts");
    hp.n_expert_used = c.need_int("num_experts_per_tok");
    hp.n_ff_exp = c.need_int("intermediate_size");
    hp.n_ff_shexp = 0;
    if (const std::string act = c.string_or("hidden_act", "silu"); act != "silu")
        fail("config.json: hidden_act '{}' is not supported (expected silu)", act);
    if (c.has("sliding_window") && c.int_or("sliding_window", 0) < hp.n_ctx_train)
        fail("config.json: sliding_window {} below max_position_embeddings is not supported",
             c.int_or("sliding_window", 0));
}

HfRope read_hf_rope(const HfConfig& c, const std::string& where, double default_partial) {
    const json* rope = c.object("rope_parameters");
    if (!rope) rope = c.object("rope_scaling");
    const json empty = json::object();
    const HfConfig r(
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

}  // namespace mox::models
