#include "models/model.h"

#include "core/error.h"
#include "core/topology.h"
#include "ops/attention.h"
#include "ops/basic.h"
#include "ops/delta_net.h"
#include "ops/linear.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mox::models {

namespace {

std::string shape_text(const int64_t* ne, size_t n) {
    std::string s = "{";
    for (size_t i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
    return s + "}";
}

const gguf::TensorInfo& find_checked(const gguf::File& file, const std::string& name,
                                     const std::vector<int64_t>& ne) {
    const gguf::TensorInfo* t = file.find_tensor(name);
    if (!t) fail("{}: missing tensor '{}'", file.path(), name);
    bool ok = true;
    for (size_t d = 0; d < 4; ++d) {
        const int64_t want = d < ne.size() ? ne[d] : 1;
        ok &= t->ne[d] == want;
    }
    if (!ok)
        fail("{}: tensor '{}' has shape {}, expected {}", file.path(), name,
             shape_text(t->ne.data(), static_cast<size_t>(t->n_dims)), shape_text(ne.data(), ne.size()));
    const quant::TypeTraits& tr = quant::traits(t->type);
    if (!tr.dequantize)
        fail("{}: tensor '{}' has type {}, which mox cannot compute with", file.path(), name, tr.name);
    return *t;
}

ops::Weight bind(const gguf::File& file, const std::string& name, const std::vector<int64_t>& ne) {
    const gguf::TensorInfo& t = find_checked(file, name, ne);
    ops::Weight w;
    w.data = t.data;
    w.type = t.type;
    w.n_in = t.ne[0];
    w.n_out = t.ne[1];
    w.n_expert = t.ne[2];
    w.row_bytes = quant::row_bytes(t.type, t.ne[0]);
    return w;
}

// Small tensors (norms, gates, conv) are kept as fp32 copies whatever their stored type.
std::vector<float> load_vector(const gguf::File& file, const std::string& name,
                               const std::vector<int64_t>& ne) {
    const gguf::TensorInfo& t = find_checked(file, name, ne);
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    quant::traits(t.type).dequantize(t.data, v.data(), t.n_elements());
    return v;
}

// y[t, :] += bias for n rows of bias.size() values; nothing when the bias is empty (no such tensor).
void add_bias(const std::vector<float>& bias, int64_t n, float* y) {
    const auto w = static_cast<int64_t>(bias.size());
    for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < w; ++i) y[t * w + i] += bias[static_cast<size_t>(i)];
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// State

uint64_t SequenceState::bytes() const {
    uint64_t n = device_ ? device_->bytes() : 0;
    for (const auto& b : k_) n += b.size();
    for (const auto& b : v_) n += b.size();
    for (const auto& b : conv_) n += b.size() * sizeof(float);
    for (const auto& b : ssm_) n += b.size() * sizeof(float);
    return n;
}

void SequenceState::clear() {
    n_past_ = 0;
    if (device_) device_->clear();
    for (auto& b : conv_) std::fill(b.begin(), b.end(), 0.0f);
    for (auto& b : ssm_) std::fill(b.begin(), b.end(), 0.0f);
}

std::unique_ptr<SequenceState> Model::new_state(const StateOptions& o) const {
    if (o.n_ctx < 1) fail("context size must be at least 1, got {}", o.n_ctx);
    if (o.n_ctx > hp_.n_ctx_train)
        fail("context size {} exceeds the model's trained context {}", o.n_ctx, hp_.n_ctx_train);
    const int64_t row = hp_.n_head_kv * hp_.head_dim_k;
    for (quant::TypeId t : {o.k_type, o.v_type}) {
        const quant::TypeTraits& tr = quant::traits(t);
        if (t != quant::TypeId::f32 && (!tr.quantize || !tr.dequantize))
            fail("KV cache type {} is not supported (use f32, f16, bf16, q8_0 or q4_0)", tr.name);
        if (hp_.head_dim_k % tr.block_elems != 0)
            fail("KV cache type {} needs head dim divisible by {}, model has {}", tr.name, tr.block_elems,
                 hp_.head_dim_k);
    }
    if (hp_.head_dim_k != hp_.head_dim_v)
        fail(
            "{}: K head dim {} != V head dim {}: attention with different K and V widths is not supported "
            "yet",
            hp_.arch_name(), hp_.head_dim_k, hp_.head_dim_v);
    auto s = std::make_unique<SequenceState>();
    s->options_ = o;
    if (gpu_) {
        s->device_ = gpu_->new_state(o);
        return s;
    }
    const int64_t n_attn = hp_.n_attention_layers(), n_rec = hp_.n_recurrent_layers();
    for (int64_t i = 0; i < n_attn; ++i) {
        s->k_.emplace_back(quant::row_bytes(o.k_type, row) * static_cast<size_t>(o.n_ctx));
        s->v_.emplace_back(quant::row_bytes(o.v_type, row) * static_cast<size_t>(o.n_ctx));
    }
    for (int64_t i = 0; i < n_rec; ++i) {
        s->conv_.emplace_back(static_cast<size_t>((hp_.ssm_conv_kernel - 1) * hp_.conv_channels()), 0.0f);
        s->ssm_.emplace_back(static_cast<size_t>(hp_.ssm_v_heads * hp_.ssm_state * hp_.ssm_state), 0.0f);
    }
    return s;
}

// ---------------------------------------------------------------------------------------------
// Weights

#ifndef MOX_HAVE_CUDA
std::unique_ptr<ForwardBackend> make_gpu_forward(const Model&, const GpuOptions&) {
    fail("this mox was built without CUDA: rebuild with -DMOX_CUDA=ON to run on the GPU");
}
#endif

Model::~Model() = default;

namespace {
bool any_host_experts(const GpuOptions& o) {
    return std::any_of(o.experts.begin(), o.experts.end(), [](ExpertHome h) { return h != ExpertHome::gpu; });
}
}  // namespace

Model::Model(const gguf::File& file, int n_threads, quant::Isa isa, bool pin_threads, Device device,
             const GpuOptions& gpu_options)
    // On the GPU the pool computes only host-resident experts: one thread unless some stay there.
    : hp_(read_hparams(file)),
      pool_(device == Device::cpu || any_host_experts(gpu_options) ? n_threads : 1, pin_threads),
      ctx_{&pool_, isa},
      device_(device),
      gpu_options_(gpu_options) {
    if (device_ == Device::cpu && (any_host_experts(gpu_options) || !gpu_options.token_embd_on_gpu))
        fail("expert placement needs the model on the GPU (--device cuda)");
    if (!gpu_options.experts.empty() && static_cast<int64_t>(gpu_options.experts.size()) != hp_.n_trunk())
        fail("expert placement lists {} layers, the model has {}", gpu_options.experts.size(), hp_.n_trunk());
    // Several NUMA nodes: spread the expert weights over all of them (each token's experts are read by
    // threads on every node). One node: nothing to do.
    for (const gguf::TensorInfo& t : file.tensors())
        if (t.name.find("_exps.") != std::string::npos)
            interleave_memory(const_cast<uint8_t*>(t.data), t.n_bytes);
    const int64_t d = hp_.n_embd;
    token_embd_ = bind(file, "token_embd.weight", {d, hp_.n_vocab});
    output_norm_ = load_vector(file, "output_norm.weight", {d});
    // Files without a separate lm head tie it to the embedding (llama.cpp's fallback).
    output_ = file.find_tensor("output.weight") ? bind(file, "output.weight", {d, hp_.n_vocab}) : token_embd_;
    const ArchRecipe& recipe = hp_.recipe();
    const bool layer_norm = recipe.norm == NormKind::layer;
    if (layer_norm) output_norm_b_ = load_vector(file, "output_norm.bias", {d});
    if (recipe.output_bias) output_b_ = load_vector(file, "output.bias", {hp_.n_vocab});
    if (recipe.attention.rope_factors) {
        rope_factors_short_ = load_vector(file, "rope_factors_short.weight", {hp_.n_rot / 2});
        rope_factors_long_ = load_vector(file, "rope_factors_long.weight", {hp_.n_rot / 2});
        for (const std::vector<float>* f : {&rope_factors_short_, &rope_factors_long_})
            for (float v : *f)
                if (!(v > 0) || !std::isfinite(v))
                    fail("{}: rope factors must be positive, found {}", file.path(), v);
    }

    const int64_t n_trunk = hp_.n_trunk();
    layers_.resize(static_cast<size_t>(n_trunk));
    attn_index_.assign(static_cast<size_t>(n_trunk), -1);
    rec_index_.assign(static_cast<size_t>(n_trunk), -1);
    int64_t n_attn = 0, n_rec = 0;
    for (int64_t i = 0; i < n_trunk; ++i) {
        LayerWeights& L = layers_[static_cast<size_t>(i)];
        auto name = [&](const char* n) { return fmt::format("blk.{}.{}", i, n); };
        L.recurrent = hp_.is_recurrent(i);
        L.attn_norm = load_vector(file, name("attn_norm.weight"), {d});
        L.ffn_norm = load_vector(file, name(fmt::format("{}.weight", recipe.ffn_norm).c_str()), {d});
        if (layer_norm) {
            L.attn_norm_b = load_vector(file, name("attn_norm.bias"), {d});
            L.ffn_norm_b = load_vector(file, name(fmt::format("{}.bias", recipe.ffn_norm).c_str()), {d});
        }
        if (L.recurrent) {
            rec_index_[static_cast<size_t>(i)] = n_rec++;
            const int64_t C = hp_.conv_channels(), Hv = hp_.ssm_v_heads;
            L.attn_qkv = bind(file, name("attn_qkv.weight"), {d, C});
            L.attn_gate = bind(file, name("attn_gate.weight"), {d, hp_.ssm_inner});
            L.ssm_beta = bind(file, name("ssm_beta.weight"), {d, Hv});
            L.ssm_alpha = bind(file, name("ssm_alpha.weight"), {d, Hv});
            L.ssm_conv1d = load_vector(file, name("ssm_conv1d.weight"), {hp_.ssm_conv_kernel, C});
            L.ssm_dt_bias = load_vector(file, name("ssm_dt.bias"), {Hv});
            L.ssm_a = load_vector(file, name("ssm_a"), {Hv});
            L.ssm_norm = load_vector(file, name("ssm_norm.weight"), {hp_.ssm_state});
            L.ssm_out = bind(file, name("ssm_out.weight"), {hp_.ssm_inner, d});
        } else {
            attn_index_[static_cast<size_t>(i)] = n_attn++;
            L.attn_q = bind(file, name("attn_q.weight"), {d, hp_.q_proj_rows()});
            L.attn_k = bind(file, name("attn_k.weight"), {d, hp_.n_head_kv * hp_.head_dim_k});
            L.attn_v = bind(file, name("attn_v.weight"), {d, hp_.n_head_kv * hp_.head_dim_v});
            if (recipe.attention.qk_norm) {
                L.attn_q_norm = load_vector(file, name("attn_q_norm.weight"), {hp_.head_dim_k});
                L.attn_k_norm = load_vector(file, name("attn_k_norm.weight"), {hp_.head_dim_k});
            }
            L.attn_output = bind(file, name("attn_output.weight"), {hp_.n_head * hp_.head_dim_v, d});
            if (recipe.attention.biases) {
                L.attn_q_b = load_vector(file, name("attn_q.bias"), {hp_.q_proj_rows()});
                L.attn_k_b = load_vector(file, name("attn_k.bias"), {hp_.n_head_kv * hp_.head_dim_k});
                L.attn_v_b = load_vector(file, name("attn_v.bias"), {hp_.n_head_kv * hp_.head_dim_v});
                L.attn_output_b = load_vector(file, name("attn_output.bias"), {d});
            }
        }
        if (!hp_.has_moe()) {
            L.ffn_gate = bind(file, name("ffn_gate.weight"), {d, hp_.n_ff});
            L.ffn_up = bind(file, name("ffn_up.weight"), {d, hp_.n_ff});
            L.ffn_down = bind(file, name("ffn_down.weight"), {hp_.n_ff, d});
            L.experts = {L.ffn_gate, L.ffn_up, L.ffn_down};  // one expert (Hparams::n_ffn_experts)
            continue;
        }
        L.router = bind(file, name("ffn_gate_inp.weight"), {d, hp_.n_expert});
        L.experts.gate = bind(file, name("ffn_gate_exps.weight"), {d, hp_.n_ff_exp, hp_.n_expert});
        L.experts.up = bind(file, name("ffn_up_exps.weight"), {d, hp_.n_ff_exp, hp_.n_expert});
        L.experts.down = bind(file, name("ffn_down_exps.weight"), {hp_.n_ff_exp, d, hp_.n_expert});
        if (hp_.has_shared_expert()) {
            // The converter may store the shared-expert gate as {n_embd} or {n_embd, 1}.
            L.shexp_gate_inp = load_vector(file, name("ffn_gate_inp_shexp.weight"), {d});
            L.shexp_gate = bind(file, name("ffn_gate_shexp.weight"), {d, hp_.n_ff_shexp});
            L.shexp_up = bind(file, name("ffn_up_shexp.weight"), {d, hp_.n_ff_shexp});
            L.shexp_down = bind(file, name("ffn_down_shexp.weight"), {hp_.n_ff_shexp, d});
        }
    }
    expert_usage_.assign(static_cast<size_t>(n_trunk),
                         std::vector<int64_t>(static_cast<size_t>(hp_.n_expert), 0));
    if (device_ == Device::cuda) gpu_ = make_gpu_forward(*this, gpu_options_);
}

// ---------------------------------------------------------------------------------------------
// Forward

void Model::check_batch(std::span<const SequenceBatch> batch) const {
    for (const SequenceBatch& b : batch) {
        MOX_CHECK(b.state != nullptr);
        if (b.tokens.empty()) fail("empty sequence in batch");
        if ((b.state->device_ != nullptr) != (gpu_ != nullptr))
            fail("this sequence's state was made by a model on another device");
        if (b.state->n_past_ + static_cast<int64_t>(b.tokens.size()) > b.state->n_ctx())
            fail("sequence of {} tokens after {} already in context exceeds the context size {}",
                 b.tokens.size(), b.state->n_past_, b.state->n_ctx());
        for (int32_t tok : b.tokens)
            if (tok < 0 || tok >= hp_.n_vocab)
                fail("token id {} outside the vocabulary (0..{})", tok, hp_.n_vocab - 1);
    }
}

std::optional<int32_t> Model::forward_argmax(std::span<const SequenceBatch> batch, int64_t n_candidates,
                                             std::vector<float>& logits) {
    if (!gpu_) {
        forward(batch, false, logits);
        return std::nullopt;
    }
    check_batch(batch);
    if (trace_routing_) fail("routing statistics are collected on the CPU path only (drop --device cuda)");
    const std::optional<int32_t> a = gpu_->forward_argmax(batch, n_candidates, logits);
    for (const SequenceBatch& b : batch) b.state->n_past_ += static_cast<int64_t>(b.tokens.size());
    return a;
}

void Model::forward(std::span<const SequenceBatch> batch, bool all_logits, std::vector<float>& logits) {
    check_batch(batch);
    int64_t n_tokens = 0;
    for (const SequenceBatch& b : batch) n_tokens += static_cast<int64_t>(b.tokens.size());
    if (gpu_) {
        if (trace_routing_)
            fail("routing statistics are collected on the CPU path only (drop --device cuda)");
        if (dump_activations_) fail("activations are dumped on the CPU path only (drop --device cuda)");
        gpu_->forward(batch, all_logits, logits);
        for (const SequenceBatch& b : batch) b.state->n_past_ += static_cast<int64_t>(b.tokens.size());
        return;
    }
    const int64_t d = hp_.n_embd;
    const ops::Context& ctx = ctx_;
    if (replay_) {
        replay_rows_.clear();
        for (const SequenceBatch& b : batch)
            for (size_t i = 0; i < b.tokens.size(); ++i)
                replay_rows_.push_back((b.state->n_past_ + static_cast<int64_t>(i)) % replay_->n_tokens);
    }

    // x: the residual stream [n_tokens, n_embd]; tokens of the batch's sequences back to back.
    std::vector<float> x(static_cast<size_t>(n_tokens * d)), u(x.size()), mixed(x.size());
    {
        int64_t t = 0;
        for (const SequenceBatch& b : batch)
            for (int32_t tok : b.tokens) ops::dequantize_rows(token_embd_, tok, 1, x.data() + (t++) * d);
    }

    auto dump = [&](int64_t il, const char* what, const std::vector<float>& a) {
        if (!dump_activations_) return;
        std::vector<float>& to = activations_[fmt::format("l{}_{}", il, what)];
        to.insert(to.end(), a.begin(), a.end());
    };
    for (int64_t il = 0; il < hp_.n_trunk(); ++il) {
        const LayerWeights& L = layers_[static_cast<size_t>(il)];
        norm(x.data(), L.attn_norm, L.attn_norm_b, n_tokens, u.data());
        if (L.recurrent)
            deltanet(L, il, batch, u.data(), mixed.data());
        else
            attention(L, il, batch, u.data(), mixed.data());
        dump(il, "mixer_in", u);
        dump(il, "mixer_out", mixed);
        for (size_t i = 0; i < x.size(); ++i) x[i] += mixed[i];

        norm(x.data(), L.ffn_norm, L.ffn_norm_b, n_tokens, u.data());
        ffn(L, il, u.data(), n_tokens, mixed.data());
        dump(il, hp_.has_moe() ? "moe_in" : "ffn_in", u);
        dump(il, hp_.has_moe() ? "moe_out" : "ffn_out", mixed);
        for (size_t i = 0; i < x.size(); ++i) x[i] += mixed[i];
    }
    for (const SequenceBatch& b : batch) b.state->n_past_ += static_cast<int64_t>(b.tokens.size());

    // Final norm and lm head on the rows that need logits.
    std::vector<int64_t> rows;
    {
        int64_t t = 0;
        for (const SequenceBatch& b : batch) {
            const int64_t n = static_cast<int64_t>(b.tokens.size());
            if (all_logits)
                for (int64_t i = 0; i < n; ++i) rows.push_back(t + i);
            else
                rows.push_back(t + n - 1);
            t += n;
        }
    }
    std::vector<float> h(rows.size() * static_cast<size_t>(d));
    for (size_t r = 0; r < rows.size(); ++r)
        norm(&x[static_cast<size_t>(rows[r] * d)], output_norm_, output_norm_b_, 1,
             &h[r * static_cast<size_t>(d)]);
    logits.resize(rows.size() * static_cast<size_t>(hp_.n_vocab));
    ops::linear(ctx, output_, h.data(), static_cast<int64_t>(rows.size()), logits.data());
    add_bias(output_b_, static_cast<int64_t>(rows.size()), logits.data());
}

void Model::norm(const float* x, const std::vector<float>& w, const std::vector<float>& b, int64_t n_tokens,
                 float* out) const {
    const int64_t d = hp_.n_embd;
    const float eps = static_cast<float>(hp_.rms_eps);
    for (int64_t t = 0; t < n_tokens; ++t) {
        switch (hp_.recipe().norm) {
            case NormKind::rms:
                ops::rms_norm(x + t * d, w.data(), d, eps, out + t * d);
                break;
            case NormKind::layer:
                ops::layer_norm(x + t * d, w.data(), b.data(), d, eps, out + t * d);
                break;
        }
    }
}

const float* Model::rope_factors(int64_t n_ctx) const {
    if (!hp_.recipe().attention.rope_factors) return nullptr;
    return n_ctx > hp_.n_ctx_orig ? rope_factors_long_.data() : rope_factors_short_.data();
}

// Gated DeltaNet (spec §3a): projections for the whole batch, then the conv and delta rule token
// by token through each sequence's state, then the output projection.
void Model::deltanet(const LayerWeights& L, int64_t il, std::span<const SequenceBatch> batch, const float* u,
                     float* out) {
    const ops::Context& ctx = ctx_;
    int64_t n_tokens = 0;
    for (const SequenceBatch& b : batch) n_tokens += static_cast<int64_t>(b.tokens.size());
    const int64_t C = hp_.conv_channels(), Hk = hp_.ssm_k_heads, Hv = hp_.ssm_v_heads, dk = hp_.ssm_state;
    const int64_t dv = hp_.ssm_state, inner = hp_.ssm_inner;
    const float eps = static_cast<float>(hp_.rms_eps);

    std::vector<float> m(static_cast<size_t>(n_tokens * C)), z(static_cast<size_t>(n_tokens * inner));
    std::vector<float> beta(static_cast<size_t>(n_tokens * Hv)), alpha(beta.size());
    ops::linear(ctx, L.attn_qkv, u, n_tokens, m.data());
    ops::linear(ctx, L.attn_gate, u, n_tokens, z.data());
    ops::linear(ctx, L.ssm_beta, u, n_tokens, beta.data());
    ops::linear(ctx, L.ssm_alpha, u, n_tokens, alpha.data());

    // Per sequence, three parallel passes over its whole block of tokens (not one pool job per
    // token): the causal conv by channel blocks, the q/k norms by token, the delta rule by value head.
    std::vector<float> y(static_cast<size_t>(n_tokens * inner));
    std::vector<float> conv_out(static_cast<size_t>(n_tokens * C));
    std::vector<float> g(static_cast<size_t>(n_tokens * Hv)), bt(g.size());
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    const int64_t ri = rec_index_[static_cast<size_t>(il)];
    int64_t t0 = 0;
    for (const SequenceBatch& b : batch) {
        const auto n = static_cast<int64_t>(b.tokens.size());
        float* conv_state = b.state->conv_[static_cast<size_t>(ri)].data();
        float* S = b.state->ssm_[static_cast<size_t>(ri)].data();
        float* co = &conv_out[static_cast<size_t>(t0 * C)];
        constexpr int64_t kConvChannels = 256;
        ctx.parallel((C + kConvChannels - 1) / kConvChannels, [&](int64_t i) {
            const int64_t c0 = i * kConvChannels, c1 = std::min(C, c0 + kConvChannels);
            ops::causal_conv_sequence(conv_state, L.ssm_conv1d.data(), &m[static_cast<size_t>(t0 * C)], n, C,
                                      hp_.ssm_conv_kernel, c0, c1, co);
            for (int64_t t = 0; t < n; ++t)
                for (int64_t c = c0; c < c1; ++c) co[t * C + c] = ops::silu(co[t * C + c]);
        });
        // conv output row: [q: Hk x dk | k: Hk x dk | v: Hv x dv]
        ctx.parallel(n, [&](int64_t t) {
            float* q = co + t * C;
            float* k = q + Hk * dk;
            for (int64_t h = 0; h < Hk; ++h) {
                ops::l2_norm(q + h * dk, dk, eps);
                ops::l2_norm(k + h * dk, dk, eps);
                for (int64_t j = 0; j < dk; ++j) q[h * dk + j] *= q_scale;
            }
            for (int64_t h = 0; h < Hv; ++h) {
                const size_t i = static_cast<size_t>((t0 + t) * Hv + h);
                bt[i] = ops::sigmoid(beta[i]);
                g[i] = L.ssm_a[static_cast<size_t>(h)] *
                       ops::softplus(alpha[i] + L.ssm_dt_bias[static_cast<size_t>(h)]);
            }
        });
        // Value head h reads key/query head h mod Hk (GGUF's tiled head order, spec §2.6).
        ctx.parallel(Hv, [&](int64_t h) {
            std::vector<float> gh(static_cast<size_t>(n)), bh(static_cast<size_t>(n));
            for (int64_t t = 0; t < n; ++t) {
                gh[static_cast<size_t>(t)] = g[static_cast<size_t>((t0 + t) * Hv + h)];
                bh[static_cast<size_t>(t)] = bt[static_cast<size_t>((t0 + t) * Hv + h)];
            }
            ops::DeltaRuleSeq seq;
            seq.q = co + (h % Hk) * dk;
            seq.k = co + Hk * dk + (h % Hk) * dk;
            seq.qk_stride = C;
            seq.v = co + 2 * Hk * dk + h * dv;
            seq.v_stride = C;
            seq.g = gh.data();
            seq.beta = bh.data();
            seq.out = &y[static_cast<size_t>(t0 * inner + h * dv)];
            seq.out_stride = inner;
            seq.n_tokens = n;
            seq.dk = dk;
            seq.dv = dv;
            ops::delta_rule_sequence(ctx, S + h * dv * dk, seq);
            // Gated RMSNorm: norm(o) * silu(z) with one dv-wide weight shared by all heads.
            for (int64_t t = 0; t < n; ++t) {
                float* o = &y[static_cast<size_t>((t0 + t) * inner + h * dv)];
                ops::rms_norm(o, L.ssm_norm.data(), dv, eps, o);
                const float* zh = &z[static_cast<size_t>((t0 + t) * inner + h * dv)];
                for (int64_t j = 0; j < dv; ++j) o[j] *= ops::silu(zh[j]);
            }
        });
        t0 += n;
    }
    ops::linear(ctx, L.ssm_out, y.data(), n_tokens, out);
}

// Full attention (qwen35moe.md §3b, archs.md §2.3): q/k norms and the output gate where the recipe
// has them, RoPE, the KV cache, causal attention over it, the output projection.
void Model::attention(const LayerWeights& L, int64_t il, std::span<const SequenceBatch> batch, const float* u,
                      float* out) {
    const ops::Context& ctx = ctx_;
    const AttentionRecipe& recipe = hp_.recipe().attention;
    int64_t n_tokens = 0;
    for (const SequenceBatch& b : batch) n_tokens += static_cast<int64_t>(b.tokens.size());
    const int64_t H = hp_.n_head, Hkv = hp_.n_head_kv, hd = hp_.head_dim_k;
    const float eps = static_cast<float>(hp_.rms_eps);
    // q rows per head: [query | gate] with the output gate, the query alone without.
    const int64_t q_head_stride = recipe.output_gate ? 2 * hd : hd;
    auto rope = [&](float* head, int64_t pos, const ops::RopeScaling& scaling) {
        switch (recipe.rope) {
            case RopeKind::norm:
                ops::rope_norm(head, hp_.n_rot, pos, hp_.rope_theta, scaling);
                break;
            case RopeKind::neox:
                ops::rope_neox(head, hp_.n_rot, pos, hp_.rope_theta, scaling);
                break;
        }
    };

    std::vector<float> qg(static_cast<size_t>(n_tokens * hp_.q_proj_rows()));
    std::vector<float> k(static_cast<size_t>(n_tokens * Hkv * hd)), v(k.size());
    ops::linear(ctx, L.attn_q, u, n_tokens, qg.data());
    ops::linear(ctx, L.attn_k, u, n_tokens, k.data());
    ops::linear(ctx, L.attn_v, u, n_tokens, v.data());
    add_bias(L.attn_q_b, n_tokens, qg.data());
    add_bias(L.attn_k_b, n_tokens, k.data());
    add_bias(L.attn_v_b, n_tokens, v.data());

    std::vector<float> q(static_cast<size_t>(n_tokens * H * hd)), o(q.size());
    // Take each head's query, norm and rotate q and k, store K/V.
    const int64_t ai = attn_index_[static_cast<size_t>(il)];
    const ops::AttentionShape shape{H, Hkv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
    int64_t t = 0;
    for (const SequenceBatch& b : batch) {
        SequenceState& st = *b.state;
        const StateOptions& so = st.options_;
        ops::KvView kv{st.k_[static_cast<size_t>(ai)].data(),
                       st.v_[static_cast<size_t>(ai)].data(),
                       so.k_type,
                       so.v_type,
                       Hkv * hd,
                       quant::row_bytes(so.k_type, Hkv * hd),
                       quant::row_bytes(so.v_type, Hkv * hd),
                       so.n_ctx};
        const int64_t t0 = t;
        const ops::RopeScaling scaling{rope_factors(so.n_ctx), static_cast<float>(hp_.rope_attn_factor)};
        for (size_t i = 0; i < b.tokens.size(); ++i, ++t) {
            const int64_t pos = st.n_past_ + static_cast<int64_t>(i);
            for (int64_t h = 0; h < H; ++h) {
                float* qh = &q[static_cast<size_t>((t * H + h) * hd)];
                std::memcpy(qh, &qg[static_cast<size_t>((t * H + h) * q_head_stride)],
                            static_cast<size_t>(hd) * sizeof(float));
                if (recipe.qk_norm) ops::rms_norm(qh, L.attn_q_norm.data(), hd, eps, qh);
                rope(qh, pos, scaling);
            }
            for (int64_t h = 0; h < Hkv; ++h) {
                float* kh = &k[static_cast<size_t>((t * Hkv + h) * hd)];
                if (recipe.qk_norm) ops::rms_norm(kh, L.attn_k_norm.data(), hd, eps, kh);
                rope(kh, pos, scaling);
            }
            ops::kv_store(kv, pos, &k[static_cast<size_t>(t * Hkv * hd)],
                          &v[static_cast<size_t>(t * Hkv * hd)]);
        }
        // Every token attends to its sequence's cache up to and including itself.
        const int64_t n = static_cast<int64_t>(b.tokens.size());
        ops::attention_batch(ctx, kv, shape, &q[static_cast<size_t>(t0 * H * hd)], n, st.n_past_,
                             &o[static_cast<size_t>(t0 * H * hd)]);
        if (!recipe.output_gate) continue;
        pool_.run(n, [&](int64_t i) {
            const int64_t tt = t0 + i;
            for (int64_t h = 0; h < H; ++h)
                for (int64_t j = 0; j < hd; ++j)
                    o[static_cast<size_t>((tt * H + h) * hd + j)] *=
                        ops::sigmoid(qg[static_cast<size_t>((tt * H + h) * q_head_stride + hd + j)]);
        });
    }
    ops::linear(ctx, L.attn_output, o.data(), n_tokens, out);
    add_bias(L.attn_output_b, n_tokens, out);
}

void Model::ffn(const LayerWeights& L, int64_t il, const float* u, int64_t n_tokens, float* out) {
    switch (hp_.recipe().ffn) {
        case FfnKind::moe:
            moe(L, il, u, n_tokens, out);
            break;
        case FfnKind::dense:
            ops::swiglu_ffn(ctx_, L.ffn_gate, L.ffn_up, L.ffn_down, u, n_tokens, out);
            break;
    }
}

// Routed experts (the recipe's router) plus, where the model has one, the sigmoid-gated shared expert.
void Model::moe(const LayerWeights& L, int64_t il, const float* u, int64_t n_tokens, float* out) {
    const ops::Context& ctx = ctx_;
    const int64_t d = hp_.n_embd;
    std::vector<float> router_logits(static_cast<size_t>(n_tokens * hp_.n_expert));
    ops::linear(ctx, L.router, u, n_tokens, router_logits.data());
    ops::Routing routing;
    const MoeRecipe& recipe = hp_.recipe().moe;
    switch (recipe.router) {
        case RouterKind::softmax_topk:
            ops::route_softmax_topk(router_logits.data(), n_tokens, hp_.n_expert, hp_.n_expert_used,
                                    recipe.renormalize, routing);
            break;
        case RouterKind::sparsemixer:
            ops::route_sparsemixer(router_logits.data(), n_tokens, hp_.n_expert,
                                   static_cast<float>(hp_.router_jitter), routing);
            break;
    }
    if (replay_) replay_routing(il, routing);
    auto& usage = expert_usage_[static_cast<size_t>(il)];
    for (int64_t e = 0; e < hp_.n_expert; ++e)
        usage[static_cast<size_t>(e)] += routing.expert_counts[static_cast<size_t>(e)];
    if (trace_routing_) {
        routing_trace_.resize(layers_.size());
        auto& trace = routing_trace_[static_cast<size_t>(il)];
        trace.insert(trace.end(), routing.ids.begin(), routing.ids.end());
    }
    ops::moe_ffn(ctx, L.experts, routing, u, out);
    if (!hp_.has_shared_expert()) return;
    std::vector<float> shared(static_cast<size_t>(n_tokens * d));
    ops::swiglu_ffn(ctx, L.shexp_gate, L.shexp_up, L.shexp_down, u, n_tokens, shared.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
        float gate = 0;
        for (int64_t c = 0; c < d; ++c) gate += L.shexp_gate_inp[static_cast<size_t>(c)] * u[t * d + c];
        gate = ops::sigmoid(gate);
        for (int64_t c = 0; c < d; ++c) out[t * d + c] += gate * shared[static_cast<size_t>(t * d + c)];
    }
}

void Model::replay_routing(int64_t il, ops::Routing& routing) const {
    const auto k = static_cast<size_t>(routing.k);
    MOX_CHECK(static_cast<int64_t>(replay_rows_.size()) == routing.n_tokens, "replay rows {} for {} tokens",
              replay_rows_.size(), routing.n_tokens);
    std::fill(routing.expert_counts.begin(), routing.expert_counts.end(), 0);
    for (int64_t t = 0; t < routing.n_tokens; ++t) {
        const uint16_t* ids = replay_->at(replay_rows_[static_cast<size_t>(t)], static_cast<size_t>(il));
        for (size_t i = 0; i < k; ++i) {
            routing.ids[static_cast<size_t>(t) * k + i] = ids[i];
            routing.expert_counts[ids[i]]++;
        }
    }
}

void Model::set_routing_replay(std::shared_ptr<const RoutingTrace> trace) {
    if (trace) check_trace_fits(*trace, hp_, "routing replay");
    if (gpu_) gpu_->set_routing_replay(trace.get());
    replay_ = std::move(trace);
}

RoutingTrace Model::recorded_routing(std::string name) const {
    RoutingTrace r;
    r.arch = hp_.arch_name();
    r.model = std::move(name);
    r.n_expert = hp_.n_expert;
    r.k = hp_.n_expert_used;
    const int64_t n_layers = hp_.n_trunk();
    for (int64_t il = 0; il < n_layers; ++il) r.layers.push_back(static_cast<int32_t>(il));
    if (routing_trace_.empty()) return r;
    const auto k = static_cast<size_t>(r.k);
    r.n_tokens = static_cast<int64_t>(routing_trace_.front().size() / k);
    r.ids.resize(static_cast<size_t>(r.n_tokens * n_layers) * k);
    for (int64_t il = 0; il < n_layers; ++il) {
        const std::vector<int32_t>& layer = routing_trace_[static_cast<size_t>(il)];
        MOX_CHECK(layer.size() == static_cast<size_t>(r.n_tokens) * k, "layer {} traced {} ids", il,
                  layer.size());
        for (int64_t t = 0; t < r.n_tokens; ++t)
            std::copy_n(layer.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(t) * k), k,
                        r.ids.begin() + static_cast<ptrdiff_t>((static_cast<size_t>(t * n_layers + il)) * k));
    }
    return r;
}

std::string Model::device_summary() const {
    return gpu_ ? gpu_->summary() : std::string();
}

std::string Model::cpu_summary() const {
    return fmt::format("{} thread{}{}, {} kernels", pool_.size(), pool_.size() == 1 ? "" : "s",
                       pool_.pinned() ? " (pinned)" : "", quant::isa_name(ctx_.isa));
}

}  // namespace mox::models
