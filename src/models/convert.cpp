#include "models/convert.h"

#include "models/hf_config.h"

#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "gguf/writer.h"
#include "models/convert_vocab.h"
#include "models/safetensors.h"
#include "models/synth_vocab.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

namespace mox::models {

using nlohmann::json;
using quant::TypeId;

// ---------------------------------------------------------------------------------------------
// config.json: the registry row whose hf_model_types holds its model_type reads it

HfTextConfig hparams_from_hf_config(const json& config) {
    // nlohmann's typed accessors throw their own exceptions on a value of the wrong type.
    try {
        if (!config.is_object()) fail("config.json: top level must be an object");
        const std::string type = config.value("model_type", std::string());
        std::string known;
        for (const ArchInfo& a : all_archs()) {
            for (const std::string& t : a.hf_model_types) {
                if (t == type && a.from_hf_config) return a.from_hf_config(config);
                known += fmt::format("{}{}", known.empty() ? "" : ", ", t);
            }
        }
        fail("config.json: model_type '{}' is not an architecture mox converts ({})", type, known);
    } catch (const json::exception& e) {
        fail("config.json: {}", e.what());
    }
}

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
    std::vector<float> values;  // a tensor config.json holds (no sources): its values, one row
};

class Planner {
public:
    Planner(const SafetensorsCheckpoint& ck, const HfTextConfig& cfg, std::string prefix)
        : ck_(ck), cfg_(cfg), hp_(cfg.hparams), prefix_(std::move(prefix)) {}

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
        } else if (n == "output_norm.bias") {
            p = simple(spec, source(prefix_ + "norm.bias", {d}));
        } else if (n == "output.weight") {
            p = simple(spec, source("lm_head.weight", {hp_.n_vocab, d}));
        } else if (n == "output.bias") {
            p = simple(spec, source("lm_head.bias", {hp_.n_vocab}));
        } else if (n == "rope_factors_short.weight" || n == "rope_factors_long.weight") {
            p.spec = spec;
            p.values = n == "rope_factors_short.weight" ? cfg_.rope_factors_short : cfg_.rope_factors_long;
            MOX_CHECK(static_cast<int64_t>(p.values.size()) == spec.ne[0], "{}: {} factors for {} pairs", n,
                      p.values.size(), spec.ne[0]);
        } else {
            p = plan_layer(spec);
        }
        p.ne0 = spec.ne[0];
        p.n_rows = 1;
        for (size_t i = 1; i < spec.ne.size(); ++i) p.n_rows *= spec.ne[i];
        if (!p.row) p.row = [](int64_t r) { return RowRef{0, r}; };
        // Every output element has a source element (a fused gate_up source holds twice as many;
        // st_read_f32 checks each row's range).
        auto src_elements = static_cast<int64_t>(p.values.size());
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
        // Mixtral checkpoints name the MoE block block_sparse_moe and its experts' matrices w1/w3/w2.
        const bool mixtral_names = ck_.find(base + "block_sparse_moe.gate.weight") != nullptr;
        const std::string mlp = base + (mixtral_names ? "block_sparse_moe." : "mlp.");

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
        if (kind == "attn_norm.bias") return simple(spec, source(base + "input_layernorm.bias", {d}));
        if (kind == fmt::format("{}.bias", hp_.recipe().ffn_norm))
            return simple(spec, source(base + "post_attention_layernorm.bias", {d}));
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
        if (kind == "attn_q.weight" || kind == "attn_k.weight") {
            const bool q = kind == "attn_q.weight";
            p = simple(spec, source(sa + (q ? "q_proj.weight" : "k_proj.weight"),
                                    {q ? hp_.q_proj_rows() : hp_.n_head_kv * hp_.head_dim_k, d}));
            // NORM rotary pairs adjacent rows: within each head, GGUF row 2i + s is HF row
            // s * hd/2 + i (HF rotates halves; archs.md §4.2).
            if (hp_.recipe().attention.rope == RopeKind::norm) {
                const int64_t hd = hp_.head_dim_k;
                p.row = [hd](int64_t r) {
                    const int64_t j = r % hd;
                    return RowRef{0, r - j + (j % 2) * (hd / 2) + j / 2};
                };
            }
            return p;
        }
        if (kind == "attn_q.bias" || kind == "attn_k.bias") {
            const bool q = kind == "attn_q.bias";
            p = simple(spec, source(sa + (q ? "q_proj.bias" : "k_proj.bias"),
                                    {q ? hp_.q_proj_rows() : hp_.n_head_kv * hp_.head_dim_k}));
            // The weight's row permutation (NORM rotary) applies to the bias's elements.
            if (hp_.recipe().attention.rope == RopeKind::norm) {
                const int64_t hd = hp_.head_dim_k;
                for (int64_t r = 0; r < spec.ne[0]; ++r) {
                    const int64_t j = r % hd;
                    p.col_perm.push_back(r - j + (j % 2) * (hd / 2) + j / 2);
                }
            }
            return p;
        }
        if (kind == "attn_v.bias")
            return simple(spec, source(sa + "v_proj.bias", {hp_.n_head_kv * hp_.head_dim_v}));
        if (kind == "attn_output.bias") return simple(spec, source(sa + "o_proj.bias", {d}));
        if (kind == "attn_v.weight")
            return simple(spec, source(sa + "v_proj.weight", {hp_.n_head_kv * hp_.head_dim_v, d}));
        if (kind == "attn_q_norm.weight")
            return simple(spec, source(sa + "q_norm.weight", {hp_.head_dim_k}), norm_op());
        if (kind == "attn_k_norm.weight")
            return simple(spec, source(sa + "k_norm.weight", {hp_.head_dim_k}), norm_op());
        if (kind == "attn_output.weight")
            return simple(spec, source(sa + "o_proj.weight", {d, hp_.n_head * hp_.head_dim_v}));
        // Dense FFN
        if (kind == "ffn_gate.weight" || kind == "ffn_up.weight")
            return simple(spec,
                          source(mlp + (kind == "ffn_gate.weight" ? "gate_proj.weight" : "up_proj.weight"),
                                 {hp_.n_ff, d}));
        if (kind == "ffn_down.weight") return simple(spec, source(mlp + "down_proj.weight", {d, hp_.n_ff}));
        // MoE
        if (kind == "ffn_gate_inp.weight") {
            // transformers 5 names Phi-3.5-MoE's router mlp.router (its checkpoints: block_sparse_moe.gate).
            const std::string router = ck_.find(mlp + "router.weight") ? "router.weight" : "gate.weight";
            return simple(spec, source(mlp + router, {hp_.n_expert, d}));
        }
        if (kind == "ffn_gate_inp_shexp.weight")
            return simple(spec, source_any(mlp + "shared_expert_gate.weight", {{1, d}, {d}}));
        if (kind == "ffn_gate_shexp.weight")
            return simple(spec, source(mlp + "shared_expert.gate_proj.weight", {hp_.n_ff_shexp, d}));
        if (kind == "ffn_up_shexp.weight")
            return simple(spec, source(mlp + "shared_expert.up_proj.weight", {hp_.n_ff_shexp, d}));
        if (kind == "ffn_down_shexp.weight")
            return simple(spec, source(mlp + "shared_expert.down_proj.weight", {d, hp_.n_ff_shexp}));
        if (kind == "ffn_gate_exps.weight" || kind == "ffn_up_exps.weight" || kind == "ffn_down_exps.weight")
            return plan_experts(spec, mlp + "experts.", kind, mixtral_names);
        fail("internal: no HF source known for {}", spec.name);
    }

    // Routed experts: either fused 3-D parameters (transformers 5: gate_up_proj [E, 2F, D] with gate
    // rows first, down_proj [E, D, F]) or one 2-D weight per expert (experts.E.gate_proj.weight ...).
    Plan plan_experts(const TensorSpec& spec, const std::string& ex, const std::string& kind,
                      bool mixtral_names) {
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
        if (mixtral_names) which = down ? "w2" : kind == "ffn_gate_exps.weight" ? "w1" : "w3";
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
    const HfTextConfig& cfg_;
    const Hparams& hp_;
    std::string prefix_;
    std::set<std::string> used_;
};

// Fills rows [row0, row0 + rows) of the output tensor as fp32. [rows, ne0]
void fill_rows(const Plan& p, int64_t row0, int64_t rows, float* out) {
    std::vector<float> scratch(p.col_perm.empty() ? 0 : static_cast<size_t>(p.ne0));
    for (int64_t r = 0; r < rows; ++r) {
        float* dst = out + r * p.ne0;
        if (!p.values.empty()) {
            std::copy(p.values.begin(), p.values.end(), dst);
            continue;
        }
        const RowRef ref = p.row(row0 + r);
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

    Planner planner(ck, cfg, prefix);
    const std::vector<Plan> plans = planner.plan_all(cfg.tie_word_embeddings);
    for (const std::string& name : ck.names()) {
        const bool skipped = name.starts_with("model.visual.") || name.starts_with("visual.") ||
                             name.starts_with("mtp.") || name.starts_with("model.mtp.");
        if (!skipped && !planner.used().count(name))
            fail("{}: tensor '{}' is not part of a {} text model", o.hf_dir, name, hp.arch_name());
    }

    const bool ships_tokenizer = has_tokenizer_files(dir);
    const bool real_vocab = ships_tokenizer && !o.placeholder_vocab;
    ConvertedVocab vocab;
    if (real_vocab) vocab = read_checkpoint_vocab(dir, hp);

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
    if (real_vocab)
        write_converted_vocab(vocab, w);
    else
        write_synth_vocab(w, hp.n_vocab);

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
    if (ships_tokenizer && !real_vocab)
        log::warn("{}: tokenizer files ignored; wrote a placeholder vocabulary", o.hf_dir);
    return s;
}

}  // namespace mox::models
