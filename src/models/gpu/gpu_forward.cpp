// A model's forward on one CUDA device: upload, the forward, the dense layers (gpu_forward.h says
// how the pieces fit; host-resident experts are in gpu_forward_experts.cpp).
#include "models/gpu/gpu_forward.h"

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "models/gpu_memory.h"
#include "ops/cuda_attention.h"
#include "ops/cuda_basic.h"
#include "ops/cuda_device.h"
#include "ops/cuda_moe.h"
#include "ops/linear.h"
#include "quant/cuda_matmul.h"
#include "quant/cuda_matvec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace mox::models {

namespace {

using cuda::DeviceBuffer;

// Logit rows computed per matvec launch (its column limit).
constexpr int64_t kLogitRows = cuda::kMaxMatvecCols;
static_assert(kArgmaxSlotFloats * sizeof(float) == sizeof(uint64_t),
              "the arg max slot holds cuda::argmax's result");
// Smallest attention grid of a decode graph; it doubles as the context grows.
constexpr int64_t kMinKeysBucket = 256;

// The recipe options the GPU blocks implement; anything else is an error naming what is missing,
// never a silent fallback to another path.
void check_supported(const Hparams& hp) {
    const ArchRecipe& r = hp.recipe();
    // Each switch lists the options the GPU blocks implement: a new enum value fails the build
    // (-Wswitch -Werror) until it is handled here, as a path or as an error naming it.
    switch (r.attention.rope) {
        case RopeKind::neox:
        case RopeKind::norm:
            break;
    }
    switch (r.moe.router) {
        case RouterKind::softmax_topk:
        case RouterKind::sparsemixer:
            break;
    }
    switch (r.norm) {
        case NormKind::rms:
        case NormKind::layer:
            break;
    }
    switch (r.moe.shared) {
        case SharedExpertKind::none:
        case SharedExpertKind::sigmoid_gated:
            break;
    }
    switch (r.ffn) {
        case FfnKind::moe:
        case FfnKind::dense:
            break;
    }
    const int64_t hd = hp.head_dim_k;
    if (hd != 64 && hd != 128 && hd != 256)
        fail(
            "--device cuda: {}: attention head dim {} has no CUDA kernel (64, 128 or 256; run it with "
            "--device cpu)",
            hp.arch_name(), hd);
}

cuda::DeltaNetShape delta_net_shape(const Hparams& hp) {
    return {hp.ssm_k_heads, hp.ssm_v_heads, hp.ssm_state, hp.ssm_state, static_cast<float>(hp.rms_eps)};
}

}  // namespace

void WeightArena::allocate() {
    MOX_CHECK(counting_, "weight arena allocated twice");
    buffer_ = DeviceBuffer(std::max<size_t>(used_, kAlign));
    counting_ = false;
    used_ = 0;
}

uint8_t* WeightArena::put(const std::vector<std::pair<const void*, size_t>>& parts, cuda::StreamHandle s) {
    size_t bytes = 0;
    for (const auto& [host, n] : parts) bytes += n;
    const size_t at = used_;
    used_ += (bytes + kPad + kAlign - 1) / kAlign * kAlign;
    if (counting_) return nullptr;
    MOX_CHECK(used_ <= buffer_.size(), "weight arena: the second pass uploads more than the first counted");
    auto* base = buffer_.as<uint8_t>() + at;
    size_t off = 0;
    for (const auto& [host, n] : parts) {
        cuda::copy_to_device(base + off, host, n, s);
        off += n;
    }
    static const uint8_t zeros[kPad] = {};
    cuda::copy_to_device(base + off, zeros, kPad, s);
    return base;
}

uint8_t* WeightArena::put(std::initializer_list<std::pair<const void*, size_t>> parts, cuda::StreamHandle s) {
    return put(std::vector<std::pair<const void*, size_t>>(parts), s);
}

uint64_t GpuSequence::bytes() const {
    uint64_t n = 0;
    for (const auto* list : {&k, &v, &conv, &ssm})
        for (const DeviceBuffer& b : *list) n += b.size();
    return n;
}

void GpuSequence::clear() {
    for (DeviceBuffer& b : conv) b.zero();
    for (DeviceBuffer& b : ssm) b.zero();
}

GpuForward::GpuForward(const Model& m, const GpuOptions& o)
    : m_(m),
      hp_(m.hp_),
      n_ubatch_(o.n_ubatch),
      n_ctx_max_(o.n_ctx_max > 0 ? o.n_ctx_max : m.hp_.n_ctx_train),
      stream_min_tokens_(o.stream_min_tokens) {
    check_supported(hp_);
    if (cuda::device_count() == 0) fail("--device cuda: no CUDA device found");
    if (n_ubatch_ < 1 || n_ubatch_ > 65536)
        fail("-ub {}: expected 1..65536 tokens per micro-batch", n_ubatch_);
    if (n_ctx_max_ < 1 || n_ctx_max_ > hp_.n_ctx_train)
        fail("context {} is outside 1..{} (the model's trained context)", n_ctx_max_, hp_.n_ctx_train);
    if (stream_min_tokens_ < 2)
        fail("--stream-min-tokens {}: at least 2 (decode always hands off)", stream_min_tokens_);
    cuda::set_device(0);
    // cuBLAS's handle (large-batch projections) takes its device memory first, so that it counts as
    // part of the context, which set_vram_budget measures now, before any allocation of ours; with
    // a budget, every later device allocation is checked against it.
    cuda::matmul_init();
    cuda::set_vram_budget(o.vram_budget);
    const ops::CudaDeviceInfo info = ops::cuda_devices().front();
    if (const char* e = std::getenv("MOX_PROFILE"); e && *e == '1') profile_ = true;
    if (const char* e = std::getenv("MOX_CUDA_PROFILE_STEP"); e && *e) {
        char* end = nullptr;
        profile_step_ = std::strtoll(e, &end, 10);
        if (*end != '\0' || profile_step_ < 0)
            fail("MOX_CUDA_PROFILE_STEP={}: expected a decode step number", e);
    }
    // Two passes over the same upload code: count, allocate once, fill.
    upload_weights(o, arena_);
    arena_.allocate();
    const uint64_t weight_bytes = upload_weights(o, arena_);
    load_host_experts(o);
    load_expert_cache(o);
    // The CPU computes host experts while this thread waits for the GPU: do not spin on a core then.
    cuda::set_blocking_sync(!host_.empty());

    // Activation buffers for n_ubatch tokens.
    const int64_t nb = n_ubatch_, d = hp_.n_embd;
    auto fbuf = [](int64_t count) {
        return DeviceBuffer(static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(float));
    };
    tokens_ = DeviceBuffer(nb * sizeof(int32_t));
    pos_ = DeviceBuffer(sizeof(int32_t));
    x_ = fbuf(nb * d), u_ = fbuf(nb * d), mix_ = fbuf(nb * d), shared_ = fbuf(nb * d), mixer_out_ = fbuf(d);
    const int64_t C = hp_.conv_channels(), inner = hp_.ssm_inner, Hv = hp_.ssm_v_heads;
    // The projections of a DeltaNet / attention input, laid out for their InputGroup.
    dn_proj_ = fbuf(nb * (C + inner + 2 * Hv)), conv_ = fbuf(nb * C), y_ = fbuf(nb * inner);
    const int64_t H = hp_.n_head, Hkv = hp_.n_head_kv, hd = hp_.head_dim_k;
    attn_proj_ = fbuf(nb * (hp_.q_proj_rows() + 2 * Hkv * hd)), q_ = fbuf(nb * H * hd),
    o_ = fbuf(nb * H * hd);
    const int64_t E = hp_.n_expert, K = hp_.n_ffn_experts_used();
    router_logits_ = fbuf(nb * E + 1);
    ids_ = DeviceBuffer(static_cast<size_t>(nb * K) * sizeof(int32_t));
    weights_ = fbuf(nb * K);
    if (!hp_.has_moe()) {
        // A dense FFN left in host memory is handed to the CPU as expert 0 of weight 1 for every
        // token: the routing the hand-off reads, written once (no router ever overwrites it).
        const std::vector<int32_t> zeros(static_cast<size_t>(nb), 0);
        const std::vector<float> ones(static_cast<size_t>(nb), 1.0f);
        cuda::copy_to_device(ids_.data(), zeros.data(), zeros.size() * sizeof(int32_t), stream_.handle());
        cuda::copy_to_device(weights_.data(), ones.data(), ones.size() * sizeof(float), stream_.handle());
        stream_.synchronize();
    }
    h_ = fbuf(hp_.n_expert_used * hp_.n_ff_exp + hp_.n_ff_shexp);  // routed rows, then the shared expert's
    const int64_t ffs = std::max<int64_t>(hp_.n_ff_unrouted(), 1);
    swiglu_gu_ = fbuf(nb * 2 * ffs), swiglu_h_ = fbuf(nb * ffs);

    // Scratch of the largest matmul / batched MoE of a micro-batch (host expert layers count too:
    // streamed, they run the same batched MoE from a staging buffer).
    size_t work_bytes = 0;
    for (size_t i = 0; i < layers_.size(); ++i) {
        const GpuLayer& G = layers_[i];
        std::vector<ops::Weight> ws = {G.ssm_out, G.attn_output, G.swiglu_down};
        for (const InputGroup::Run& r : G.swiglu_gate_up.runs) ws.push_back(r.whole);
        ws.insert(ws.end(), G.dn_in.parts.begin(), G.dn_in.parts.end());
        ws.insert(ws.end(), G.attn_in.parts.begin(), G.attn_in.parts.end());
        ws.insert(ws.end(), G.router_in.parts.begin(), G.router_in.parts.end());
        for (const ops::Weight& w : ws)
            if (w.valid())
                work_bytes = std::max(work_bytes, cuda::matmul_workspace_bytes(w.type, w.n_in, w.n_out, nb));
        const ops::ExpertStack& host = m.layers_[i].experts;
        if (hp_.has_moe() || host_index_[i] >= 0)  // a dense FFN streamed from the host too
            work_bytes = std::max(work_bytes, cuda::moe_batch_workspace_bytes(host.gate, host.down, nb, K));
    }
    // The chunked delta rule's records of a micro-batch, between the projections that use the scratch.
    if (hp_.ssm_v_heads > 0)
        work_bytes = std::max(work_bytes, cuda::delta_net_workspace_bytes(delta_net_shape(hp_), nb));
    // The memory model (models/gpu_memory.h) says what to allocate; the kernels' own needs must fit.
    uint64_t largest_streamed = 0;
    for (int64_t il : streamed_)
        largest_streamed = std::max<uint64_t>(
            largest_streamed, host_[static_cast<size_t>(host_index_[static_cast<size_t>(il)])].bytes);
    const GpuBufferBytes plan = gpu_buffer_bytes(hp_, {.n_ubatch = nb,
                                                       .n_ctx_max = n_ctx_max_,
                                                       .any_host_experts = !host_.empty(),
                                                       .token_embd_on_gpu = o.token_embd_on_gpu,
                                                       .largest_streamed_layer = largest_streamed});
    MOX_CHECK(work_bytes <= plan.matmul_scratch, "memory model: matmul scratch {} < the kernels' {}",
              plan.matmul_scratch, work_bytes);
    work_ = DeviceBuffer(plan.matmul_scratch);
    // The attention workspace is shared by all sequences and sized once for the longest context,
    // so captured decode graphs never see it move.
    const ops::AttentionShape shape{H, Hkv, hd, 0.0f};
    const size_t attn_ws_bytes = cuda::attention_workspace_bound(shape, std::min(nb, n_ctx_max_), n_ctx_max_);
    MOX_CHECK(attn_ws_bytes <= plan.attention_scratch, "memory model: attention scratch {} < the kernel's {}",
              plan.attention_scratch, attn_ws_bytes);
    attn_ws_ = DeviceBuffer(plan.attention_scratch);
    // The logit rows, then the 8-byte arg max of a single row (cuda::argmax), fetched together.
    logits_ = fbuf(kLogitRows * hp_.n_vocab + kArgmaxSlotFloats);
    std::string why;
    logits_host_ = cuda::PinnedBuffer::try_alloc(
        static_cast<size_t>(kLogitRows * hp_.n_vocab + kArgmaxSlotFloats) * sizeof(float), &why);
    staging_ids_ = cuda::PinnedBuffer::try_alloc((nb + 1) * sizeof(int32_t), &why);
    if (logits_host_.empty() || staging_ids_.empty()) fail("--device cuda: pinned host memory: {}", why);
    if (!o.token_embd_on_gpu) {
        hand_embd_ = cuda::PinnedBuffer::try_alloc(static_cast<size_t>(nb * d) * sizeof(float), &why);
        if (hand_embd_.empty()) fail("--device cuda: pinned host memory for the embeddings: {}", why);
    }
    uint64_t activation_bytes = logits_.size();
    for (const DeviceBuffer* b :
         {&tokens_, &pos_, &x_, &u_, &mix_, &shared_, &mixer_out_, &dn_proj_, &conv_, &y_, &attn_proj_, &q_,
          &o_, &router_logits_, &ids_, &weights_, &h_, &swiglu_gu_, &swiglu_h_})
        activation_bytes += b->size();
    MOX_CHECK(activation_bytes == plan.activations,
              "memory model: activations {} B predicted, {} B allocated", plan.activations, activation_bytes);
    MOX_CHECK(staging_[0].size() + staging_[1].size() == plan.staging,
              "memory model: staging {} B predicted, {} B", plan.staging,
              staging_[0].size() + staging_[1].size());
    stream_.synchronize();
    uint64_t host_bytes = 0;
    for (const HostExpertLayer& h : host_) host_bytes += h.bytes;
    summary_ = fmt::format("cuda: {}, {} of weights", info.name, format_bytes(weight_bytes));
    if (!host_.empty())
        summary_ +=
            fmt::format(", experts of {} layers ({}) in host memory", host_.size(), format_bytes(host_bytes));
    if (cache_) {
        const ExpertCacheStats cs = cache_->stats();
        summary_ += fmt::format(", expert cache of {} slots ({}, policy {})", cs.slots,
                                format_bytes(cs.device_bytes), cache_->policy_name());
    }
    if (o.vram_budget > 0) summary_ += fmt::format(", VRAM budget {}", format_bytes(o.vram_budget));
}

uint64_t GpuForward::upload_weights(const GpuOptions& o, WeightArena& arena) {
    const Model& m = m_;
    const cuda::StreamHandle s = stream_.handle();
    uint64_t weight_bytes = 0;
    auto check_type = [](const ops::Weight& w) {
        if (!cuda::matvec_supported(w.type))
            fail("--device cuda: weight type {} has no CUDA kernel", quant::traits(w.type).name);
    };
    auto upw = [&](const ops::Weight& w) {
        check_type(w);
        weight_bytes += cuda::weight_bytes(w);
        ops::Weight v = w;
        v.data = arena.put({{w.data, cuda::weight_bytes(w)}}, s);
        return v;
    };
    auto upf = [&](const std::vector<float>& v) {
        return reinterpret_cast<const float*>(arena.put({{v.data(), v.size() * sizeof(float)}}, s));
    };
    // A tensor the recipe may lack (empty on the host): null on the device then.
    auto upf_opt = [&](const std::vector<float>& v) { return v.empty() ? nullptr : upf(v); };
    // Projections sharing an input, back to back in one run (InputGroup).
    auto upg = [&](const std::vector<const ops::Weight*>& ws) {
        std::vector<std::pair<const void*, size_t>> parts;
        for (const ops::Weight* w : ws) {
            check_type(*w);
            weight_bytes += cuda::weight_bytes(*w);
            parts.emplace_back(w->data, cuda::weight_bytes(*w));
        }
        const uint8_t* base = arena.put(parts, s);
        InputGroup g;
        size_t at = 0;
        for (const ops::Weight* w : ws) {
            ops::Weight v = *w;
            v.data = base ? base + at : nullptr;
            at += cuda::weight_bytes(*w);
            const bool extends =
                !g.runs.empty() && g.runs.back().whole.type == v.type && g.runs.back().whole.n_in == v.n_in;
            if (extends)
                g.runs.back().whole.n_out += v.n_out;
            else
                g.runs.push_back({v, g.n_out});
            g.parts.push_back(v);
            g.offset.push_back(g.n_out);
            g.n_out += v.n_out;
        }
        return g;
    };
    token_embd_ = o.token_embd_on_gpu ? upw(m.token_embd_) : ops::Weight{};
    output_ = upw(m.output_);
    output_norm_ = upf(m.output_norm_);
    output_norm_b_ = upf_opt(m.output_norm_b_);
    output_b_ = upf_opt(m.output_b_);
    rope_factors_short_ = upf_opt(m.rope_factors_short_);
    rope_factors_long_ = upf_opt(m.rope_factors_long_);
    layers_.assign(m.layers_.size(), GpuLayer{});
    for (size_t i = 0; i < m.layers_.size(); ++i) {
        const LayerWeights& L = m.layers_[i];
        GpuLayer& G = layers_[i];
        G.attn_norm = upf(L.attn_norm);
        G.ffn_norm = upf(L.ffn_norm);
        G.attn_norm_b = upf_opt(L.attn_norm_b);
        G.ffn_norm_b = upf_opt(L.ffn_norm_b);
        if (L.recurrent) {
            G.dn_in = upg({&L.attn_qkv, &L.attn_gate, &L.ssm_beta, &L.ssm_alpha});
            G.ssm_out = upw(L.ssm_out);
            G.ssm_conv1d = upf(L.ssm_conv1d);
            G.ssm_dt_bias = upf(L.ssm_dt_bias);
            G.ssm_a = upf(L.ssm_a);
            G.ssm_norm = upf(L.ssm_norm);
        } else {
            G.attn_in = upg({&L.attn_q, &L.attn_k, &L.attn_v});
            G.attn_output = upw(L.attn_output);
            G.attn_in_b[0] = upf_opt(L.attn_q_b);
            G.attn_in_b[1] = upf_opt(L.attn_k_b);
            G.attn_in_b[2] = upf_opt(L.attn_v_b);
            G.attn_output_b = upf_opt(L.attn_output_b);
            if (hp_.recipe().attention.qk_norm) {
                G.attn_q_norm = upf(L.attn_q_norm);
                G.attn_k_norm = upf(L.attn_k_norm);
            }
        }
        if (!hp_.has_moe()) {
            if (o.experts.empty() || o.experts[i] == ExpertHome::gpu) {
                G.swiglu_gate_up = upg({&L.ffn_gate, &L.ffn_up});
                G.swiglu_down = upw(L.ffn_down);
            } else {
                for (const ops::Weight* w : {&L.ffn_gate, &L.ffn_up, &L.ffn_down}) check_type(*w);
            }
            continue;
        }
        if (hp_.has_shared_expert()) {
            const ops::Weight shared_gate{.data = reinterpret_cast<const uint8_t*>(L.shexp_gate_inp.data()),
                                          .type = quant::TypeId::f32,
                                          .n_in = hp_.n_embd,
                                          .n_out = 1,
                                          .n_expert = 1,
                                          .row_bytes = static_cast<size_t>(hp_.n_embd) * sizeof(float)};
            G.router_in = upg({&L.router, &shared_gate});
        } else {
            G.router_in = upg({&L.router});
        }
        if (o.experts.empty() || o.experts[i] == ExpertHome::gpu) {
            G.gate_exps = upw(L.experts.gate);
            G.up_exps = upw(L.experts.up);
            G.down_exps = upw(L.experts.down);
        } else {
            for (const ops::Weight* w : {&L.experts.gate, &L.experts.up, &L.experts.down}) check_type(*w);
        }
        if (hp_.has_shared_expert()) {
            G.swiglu_gate_up = upg({&L.shexp_gate, &L.shexp_up});
            G.swiglu_down = upw(L.shexp_down);
            G.shexp_gate_inp = upf(L.shexp_gate_inp);
        }
    }
    stream_.synchronize();  // the host sources (file pages, vectors) may go away after this
    return weight_bytes;
}

GpuForward::~GpuForward() {
    // Host nodes of pending work point at this object: let them finish first.
    try {
        stream_.synchronize();
    } catch (...) {
    }
    if (profile_ && host_jobs_ > 0)
        fmt::print(
            stderr,
            "mox profile: {} CPU expert hand-offs ({} tokens), {:.1f} us each on average, {:.3f} s in all\n",
            host_jobs_.load(), host_tokens_.load(), host_ns_.load() / 1e3 / host_jobs_.load(),
            host_ns_.load() / 1e9);
}

std::unique_ptr<DeviceSequenceState> GpuForward::new_state(const StateOptions& o) {
    for (quant::TypeId t : {o.k_type, o.v_type})
        if (t != quant::TypeId::f32 && t != quant::TypeId::f16 && t != quant::TypeId::bf16 &&
            t != quant::TypeId::q8_0 && t != quant::TypeId::q4_0)
            fail("--device cuda: KV cache type {} is not supported (f32, f16, bf16, q8_0, q4_0)",
                 quant::traits(t).name);
    auto seq = std::make_unique<GpuSequence>();
    seq->options = o;
    if (o.n_ctx > n_ctx_max_)
        fail(
            "a context of {} tokens: the model was placed on the GPU for up to {} (give -c to plan for more)",
            o.n_ctx, n_ctx_max_);
    const int64_t row = hp_.n_head_kv * hp_.head_dim_k;
    for (int64_t i = 0; i < hp_.n_attention_layers(); ++i) {
        seq->k.emplace_back(quant::row_bytes(o.k_type, row) * static_cast<size_t>(o.n_ctx));
        seq->v.emplace_back(quant::row_bytes(o.v_type, row) * static_cast<size_t>(o.n_ctx));
    }
    for (int64_t i = 0; i < hp_.n_recurrent_layers(); ++i) {
        seq->conv.emplace_back(static_cast<size_t>((hp_.ssm_conv_kernel - 1) * hp_.conv_channels()) *
                               sizeof(float));
        seq->ssm.emplace_back(static_cast<size_t>(hp_.ssm_v_heads * hp_.ssm_state * hp_.ssm_state) *
                              sizeof(float));
    }
    seq->clear();
    cuda::device_synchronize();
    return seq;
}

void GpuForward::project(const InputGroup& g, const float* x, int64_t n, float* base) {
    if (n == 1) {
        for (const InputGroup::Run& r : g.runs) linear(r.whole, x, 1, base + r.offset);
    } else {
        for (size_t i = 0; i < g.parts.size(); ++i) linear(g.parts[i], x, n, g.out(base, i, n, n_ubatch_));
    }
}

void GpuForward::linear(const ops::Weight& v, const float* x, int64_t n, float* y,
                        cuda::StreamHandle stream) {
    if (n <= cuda::kMaxMatvecCols)
        cuda::matvec(v.type, v.data, v.row_bytes, v.n_in, v.n_out, x, static_cast<int>(n), y, stream);
    else
        cuda::matmul(v.type, v.data, v.row_bytes, v.n_in, v.n_out, x, n, y, work_.data(), stream,
                     precise(v.type));
}

void GpuForward::embed_on_host(const int32_t* tokens, int64_t n) {
    auto* rows = hand_embd_.as<float>();
    for (int64_t t = 0; t < n; ++t) ops::dequantize_rows(m_.token_embd_, tokens[t], 1, rows + t * hp_.n_embd);
}

void GpuForward::forward(std::span<const SequenceBatch> batch, bool all_logits, std::vector<float>& logits) {
    const int64_t V = hp_.n_vocab;
    last_argmax_.reset();
    int64_t n_rows = 0;
    for (const SequenceBatch& b : batch) n_rows += all_logits ? static_cast<int64_t>(b.tokens.size()) : 1;
    // forward_argmax: the rows are sized only if the device's pick is refused (logits_fetch).
    if (argmax_limit_ > 0)
        logits.clear();
    else
        logits.resize(static_cast<size_t>(n_rows * V));
    const cuda::StreamHandle s = stream_.handle();
    int64_t row_out = 0;
    for (const SequenceBatch& b : batch)  // before anything runs, so no state is left half-updated
        if (!dynamic_cast<GpuSequence*>(b.state->device_.get()))
            fail("this sequence's state was made by a model on another device");
    // Sequences run one after another (each continues its own state); tokens of one go in
    // micro-batches of up to n_ubatch.
    for (const SequenceBatch& b : batch) {
        SequenceState& st = *b.state;
        auto* seq = static_cast<GpuSequence*>(st.device_.get());
        const auto n_total = static_cast<int64_t>(b.tokens.size());
        for (int64_t c0 = 0; c0 < n_total; c0 += n_ubatch_) {
            const int64_t n = std::min(n_ubatch_, n_total - c0);
            const int64_t pos = st.n_past_ + c0;
            stream_.synchronize();  // the previous chunk's upload may still read the staging buffers
            auto* stage = staging_ids_.as<int32_t>();
            std::memcpy(stage, b.tokens.data() + c0, static_cast<size_t>(n) * sizeof(int32_t));
            stage[n_ubatch_] = static_cast<int32_t>(pos);
            cuda::copy_to_device(tokens_.data(), stage, static_cast<size_t>(n) * sizeof(int32_t), s);
            cuda::copy_to_device(pos_.data(), stage + n_ubatch_, sizeof(int32_t), s);
            if (!token_embd_.valid()) embed_on_host(b.tokens.data() + c0, n);
            if (replay_) replay_upload(pos, n);
            if (n == 1) {
                // Decode: replay the captured step; capture again when the context outgrows its grid.
                if (seq->decode_graph.empty() || pos + 1 > seq->graph_keys ||
                    seq->graph_epoch != graph_epoch_) {
                    int64_t keys = kMinKeysBucket;
                    while (keys < pos + 1) keys *= 2;
                    keys = std::min(keys, st.n_ctx());
                    seq->decode_graph = cuda::Graph();
                    cuda::Graph::begin_capture(s);
                    try {
                        trunk(*seq, 1, keys);
                        logits_compute(0, 1);
                    } catch (...) {
                        cuda::Graph::abort_capture(s);
                        throw;
                    }
                    seq->decode_graph = cuda::Graph::end_capture(s);
                    seq->graph_keys = keys;
                    seq->graph_epoch = graph_epoch_;
                }
                // Host expert layers come ~60-110 us of GPU work apart: longer than the pool's
                // spin window, so without a hold its workers would sleep and wake at every layer.
                std::optional<ThreadPool::Hold> warm;
                if (!host_.empty() && m_.ctx_.pool) warm.emplace(*m_.ctx_.pool);
                // MOX_CUDA_PROFILE_STEP=N: the N-th decode step of the process (from 1) alone runs
                // between profiler start and stop, for `ncu --profile-from-start off` (docs/cuda.md).
                const bool profiled = ++decode_steps_ == profile_step_;
                if (profiled) {
                    stream_.synchronize();
                    cuda::profiler_start();
                }
                // Polling hand-off (gpu_forward_experts.cpp): the step number goes to mapped memory
                // before the launch; then this thread computes each host layer the graph publishes.
                const bool poll = !channel_.empty();
                if (cache_) cache_->before_step(s);  // residency for this step; the table goes up first
                const uint32_t step = poll ? channel_.begin_step() : 0;
                seq->decode_graph.launch(s);
                if (poll) serve_host_layers(step);
                if (profiled) {
                    stream_.synchronize();
                    cuda::profiler_stop();
                }
                logits_fetch(1, logits, row_out);  // the graph computed them
                if (poll) check_handoff();         // the stream is done: a GPU-side failure is final now
                if (cache_) cache_->after_step();  // admissions start copying while the caller samples
                ++row_out;
                continue;
            }
            trunk(*seq, n, std::min(st.n_ctx(), pos + n));
            // Logits: every row of the chunk, or the sequence's last row in its last chunk.
            const bool last_chunk = c0 + n == n_total;
            const int64_t r_first = all_logits ? 0 : (last_chunk ? n - 1 : n);
            for (int64_t r = r_first; r < n; r += kLogitRows) {
                const int64_t cnt = std::min(kLogitRows, n - r);
                logits_compute(r, cnt);
                logits_fetch(cnt, logits, row_out);
                row_out += cnt;
            }
        }
    }
    stream_.synchronize();
    if (host_failed_) std::rethrow_exception(host_error_);
}

void GpuForward::logits_compute(int64_t r0, int64_t count) {
    const ops::Weight& w = output_;
    float* logits = logits_.as<float>();
    cuda::matvec(w.type, w.data, w.row_bytes, w.n_in, w.n_out, u_.as<float>() + r0 * hp_.n_embd,
                 static_cast<int>(count), logits, stream_.handle());
    if (output_b_) cuda::add_bias(logits, output_b_, count, hp_.n_vocab, stream_.handle());
    // A single row (every decode step, a prompt's last token) also gets its arg max on the device:
    // `mox bench` takes its greedy token from it instead of scanning the row on the host while the
    // GPU waits (tg128 391.5 vs 346.7 t/s on the H200, bench/results/2026-11-30-device-argmax-h200).
    if (count == 1) cuda::argmax(logits, hp_.n_vocab, argmax_slot(logits), stream_.handle());
}

uint64_t* GpuForward::argmax_slot(void* logits_base) const {
    return reinterpret_cast<uint64_t*>(static_cast<float*>(logits_base) + kLogitRows * hp_.n_vocab);
}

std::optional<int32_t> GpuForward::forward_argmax(std::span<const SequenceBatch> batch, int64_t n_candidates,
                                                  std::vector<float>& logits) {
    MOX_CHECK(n_candidates > 0 && n_candidates <= hp_.n_vocab, "{} arg max candidates", n_candidates);
    if (batch.size() != 1) {
        forward(batch, false, logits);
        if (last_argmax_ && *last_argmax_ < n_candidates) return last_argmax_;
        return std::nullopt;
    }
    argmax_limit_ = n_candidates;
    try {
        forward(batch, false, logits);
    } catch (...) {
        argmax_limit_ = 0;
        throw;
    }
    argmax_limit_ = 0;
    return logits.empty() ? last_argmax_ : std::nullopt;
}

void GpuForward::logits_fetch(int64_t count, std::vector<float>& logits, int64_t row_out) {
    const cuda::StreamHandle s = stream_.handle();
    const size_t bytes = static_cast<size_t>(count * hp_.n_vocab) * sizeof(float);
    const bool with_argmax = count == 1;
    last_argmax_.reset();
    if (with_argmax && argmax_limit_ > 0) {
        // Greedy: 8 bytes instead of the 1 MB row and the host's copy of it, while the GPU waits
        // (tg128 407.8-408.1 vs 395.4-397.0 t/s on the H200, bench/results/2026-12-01-decode-step-h200).
        cuda::copy_to_host(argmax_slot(logits_host_.data()), argmax_slot(logits_.data()), sizeof(uint64_t),
                           s);
        if (host_failed_) std::rethrow_exception(host_error_);
        const int64_t i = cuda::argmax_index(*argmax_slot(logits_host_.data()));
        if (i >= 0 && i < argmax_limit_) {
            last_argmax_ = static_cast<int32_t>(i);
            return;
        }
        logits.resize(static_cast<size_t>((row_out + count) * hp_.n_vocab));  // refused: the rows after all
    }
    float* host = logits.data() + row_out * hp_.n_vocab;
    // The arg max first, without a wait: the logits' copy after it on the same stream waits for both.
    if (with_argmax)
        cuda::copy_to_host_async(argmax_slot(logits_host_.data()), argmax_slot(logits_.data()),
                                 sizeof(uint64_t), s);
    cuda::copy_to_host(logits_host_.data(), logits_.data(), bytes, s);
    // A host hand-off that failed left garbage behind: say why instead of returning it.
    if (host_failed_) std::rethrow_exception(host_error_);
    std::memcpy(host, logits_host_.data(), bytes);
    if (with_argmax) {
        const int64_t i = cuda::argmax_index(*argmax_slot(logits_host_.data()));
        if (i >= 0) last_argmax_ = static_cast<int32_t>(i);
    }
}

void GpuForward::trunk(GpuSequence& seq, int64_t n, int64_t max_keys) {
    const cuda::StreamHandle s = stream_.handle();
    const int64_t d = hp_.n_embd;
    const float eps = static_cast<float>(hp_.rms_eps);
    float* x = x_.as<float>();
    float* u = u_.as<float>();
    float* mix = mix_.as<float>();
    if (token_embd_.valid())
        cuda::embed_rows(token_embd_, tokens_.as<int32_t>(), n, x, s);
    else
        cuda::copy_to_device(x, hand_embd_.data(), static_cast<size_t>(n * d) * sizeof(float), s);
    if (streaming(n)) stream_begin();
    // Block outputs not yet added to x (pending first): the last MoE's, or the last mixer's and MoE's.
    const float* pending = nullptr;
    const float* pending2 = nullptr;
    for (size_t il = 0; il < layers_.size(); ++il) {
        const GpuLayer& L = layers_[il];
        const auto li = static_cast<int64_t>(il);
        norm(x, pending, L.attn_norm, L.attn_norm_b, n, u, pending2);
        const bool fused = fused_norm_router(li, n);
        float* mixed = fused ? mixer_out_.as<float>() : mix;
        if (m_.layers_[il].recurrent)
            deltanet(L, m_.rec_index_[il], seq, n, mixed);
        else
            attention(L, m_.attn_index_[il], seq, n, max_keys, mixed);
        if (fused) {
            // x + mixed normed in the router's launch; x takes mixed at the next norm.
            cuda::add_rms_norm_matvec(x, mixed, L.ffn_norm, eps, u, L.router_in.runs.front().whole,
                                      router_logits_.as<float>(), s);
            ffn(L, li, n, true);
            pending = mixed, pending2 = mix;
        } else {
            norm(x, mix, L.ffn_norm, L.ffn_norm_b, n, u);
            ffn(L, li, n);
            pending = mix, pending2 = nullptr;
        }
    }
    norm(x, pending, output_norm_, output_norm_b_, n, u, pending2);
}

void GpuForward::norm(float* x, const float* add, const float* w, const float* b, int64_t n, float* out,
                      const float* add2) {
    const cuda::StreamHandle s = stream_.handle();
    const float eps = static_cast<float>(hp_.rms_eps);
    switch (hp_.recipe().norm) {
        case NormKind::rms:
            cuda::add_rms_norm(x, add, w, n, hp_.n_embd, eps, out, s, add2);
            break;
        case NormKind::layer:
            cuda::add_layer_norm(x, add, w, b, n, hp_.n_embd, eps, out, s, add2);
            break;
    }
}

void GpuForward::route(int64_t il, int64_t n, int64_t stride, cuda::StreamHandle s) {
    const float* logits = router_logits_.as<float>();
    const MoeRecipe& r = hp_.recipe().moe;
    switch (r.router) {
        case RouterKind::softmax_topk:
            cuda::route_softmax_topk(logits, n, hp_.n_expert, hp_.n_expert_used, r.renormalize,
                                     ids_.as<int32_t>(), weights_.as<float>(), s, stride);
            break;
        case RouterKind::sparsemixer:
            cuda::route_sparsemixer(logits, n, hp_.n_expert, static_cast<float>(hp_.router_jitter),
                                    ids_.as<int32_t>(), weights_.as<float>(), s, stride);
            break;
    }
    if (replay_) {
        const int64_t K = hp_.n_expert_used;
        cuda::copy_on_device(ids_.data(), replay_ids_.as<int32_t>() + il * n_ubatch_ * K,
                             static_cast<size_t>(n * K) * sizeof(int32_t), s);
    }
}

void GpuForward::replay_upload(int64_t pos, int64_t n) {
    const RoutingTrace& r = *replay_;
    const int64_t K = hp_.n_expert_used, n_layer = hp_.n_trunk();
    auto* stage = replay_stage_.as<int32_t>();
    for (int64_t il = 0; il < n_layer; ++il)
        for (int64_t t = 0; t < n; ++t) {
            const uint16_t* ids = r.at((pos + t) % r.n_tokens, static_cast<size_t>(il));
            std::copy_n(ids, K, stage + (il * n_ubatch_ + t) * K);
        }
    // One copy of the whole [n_layer][n_ubatch][k] block (the rows past n are not read).
    cuda::copy_to_device(replay_ids_.data(), stage, replay_stage_.size(), stream_.handle());
}

void GpuForward::set_routing_replay(const RoutingTrace* trace) {
    if (trace && replay_ids_.empty()) {
        const size_t bytes =
            static_cast<size_t>(hp_.n_trunk() * n_ubatch_ * hp_.n_expert_used) * sizeof(int32_t);
        replay_ids_ = cuda::DeviceBuffer(bytes);
        std::string why;
        replay_stage_ = cuda::PinnedBuffer::try_alloc(bytes, &why);
        if (replay_stage_.empty()) fail("routing replay: pinned host memory for the trace's ids: {}", why);
    }
    stream_.synchronize();  // the staging buffer may still be read by the last upload
    replay_ = trace;
    graph_epoch_++;  // decode graphs captured before do not copy the trace's ids: capture again
}

const float* GpuForward::rope_factors(int64_t n_ctx) const {
    if (!hp_.recipe().attention.rope_factors) return nullptr;
    return n_ctx > hp_.n_ctx_orig ? rope_factors_long_ : rope_factors_short_;
}

bool GpuForward::fused_norm_router(int64_t il, int64_t n) const {
    const GpuLayer& L = layers_[static_cast<size_t>(il)];
    return n == 1 && hp_.has_moe() && hp_.recipe().norm == NormKind::rms &&
           hp_.recipe().moe.router == RouterKind::softmax_topk && host_index_[static_cast<size_t>(il)] < 0 &&
           L.router_in.runs.size() == 1 &&
           cuda::add_rms_norm_matvec_supported(L.router_in.runs.front().whole);
}

// Gated DeltaNet (spec §3a): u_ -> out.
void GpuForward::deltanet(const GpuLayer& L, int64_t ri, GpuSequence& seq, int64_t n, float* out) {
    const cuda::StreamHandle s = stream_.handle();
    const float* u = u_.as<float>();
    float* proj = dn_proj_.as<float>();
    float* z = L.dn_in.out(proj, 1, n, n_ubatch_);
    float* beta = L.dn_in.out(proj, 2, n, n_ubatch_);
    float* alpha = L.dn_in.out(proj, 3, n, n_ubatch_);
    const int64_t C = hp_.conv_channels();
    float* conv_state = seq.conv[static_cast<size_t>(ri)].as<float>();
    // The qkv part (part 0, C rows) opens the group's first run.
    const ops::Weight& first = L.dn_in.runs.front().whole;
    if (n == 1 && cuda::conv_projection_supported(first.type)) {
        cuda::conv_projection(first.type, first.data, first.row_bytes, first.n_in, first.n_out, u, proj,
                              conv_state, L.ssm_conv1d, hp_.ssm_conv_kernel, C, conv_.as<float>(), s);
        for (size_t i = 1; i < L.dn_in.runs.size(); ++i)
            linear(L.dn_in.runs[i].whole, u, 1, proj + L.dn_in.runs[i].offset);
    } else {
        project(L.dn_in, u, n, proj);
        const float* qkv = L.dn_in.out(proj, 0, n, n_ubatch_);
        cuda::conv_silu(conv_state, L.ssm_conv1d, qkv, C, n, C, hp_.ssm_conv_kernel, conv_.as<float>(), s);
    }
    const cuda::DeltaNetShape shape = delta_net_shape(hp_);
    const cuda::DeltaNetWeights w{L.ssm_a, L.ssm_dt_bias, L.ssm_norm};
    cuda::delta_net(seq.ssm[static_cast<size_t>(ri)].as<float>(), conv_.as<float>(), beta, alpha, z, w, shape,
                    n, y_.as<float>(), work_.data(), work_.size(), s);
    linear(L.ssm_out, y_.as<float>(), n, out);
}

// Full attention (qwen35moe.md §3b, archs.md §2.3): u_ -> out.
void GpuForward::attention(const GpuLayer& L, int64_t ai, GpuSequence& seq, int64_t n, int64_t max_keys,
                           float* out) {
    const cuda::StreamHandle s = stream_.handle();
    const float* u = u_.as<float>();
    const int64_t H = hp_.n_head, Hkv = hp_.n_head_kv, hd = hp_.head_dim_k;
    const bool gated = hp_.recipe().attention.output_gate;
    float* proj = attn_proj_.as<float>();
    project(L.attn_in, u, n, proj);
    float* qg = L.attn_in.out(proj, 0, n, n_ubatch_);  // [n][H][query: hd | gate: hd] or [n][H][query: hd]
    float* k = L.attn_in.out(proj, 1, n, n_ubatch_);
    float* v = L.attn_in.out(proj, 2, n, n_ubatch_);
    for (size_t i = 0; i < 3; ++i)
        if (L.attn_in_b[i])
            cuda::add_bias(L.attn_in.out(proj, i, n, n_ubatch_), L.attn_in_b[i], n, L.attn_in.parts[i].n_out,
                           s);
    const int64_t q_head_stride = gated ? 2 * hd : hd;
    const AttentionRecipe& recipe = hp_.recipe().attention;
    const cuda::QkPrepShape qs{.n_head = H,
                               .n_head_kv = Hkv,
                               .head_dim = hd,
                               .n_rot = hp_.n_rot,
                               .eps = static_cast<float>(hp_.rms_eps),
                               .theta = static_cast<float>(hp_.rope_theta),
                               .q_head_stride = q_head_stride,
                               .qk_norm = recipe.qk_norm,
                               .rope_adjacent = recipe.rope == RopeKind::norm,
                               .rope_factors = rope_factors(seq.options.n_ctx),
                               .attn_factor = static_cast<float>(hp_.rope_attn_factor)};
    const StateOptions& so = seq.options;
    const ops::KvView kv{seq.k[static_cast<size_t>(ai)].as<uint8_t>(),
                         seq.v[static_cast<size_t>(ai)].as<uint8_t>(),
                         so.k_type,
                         so.v_type,
                         Hkv * hd,
                         quant::row_bytes(so.k_type, Hkv * hd),
                         quant::row_bytes(so.v_type, Hkv * hd),
                         so.n_ctx};
    if (cuda::qk_cache_store_supported(kv)) {
        // f32/f16/bf16 caches: the q/k preparation writes k and v into the cache itself, two launches
        // fewer per layer (tg128 317 / 319 vs 311 t/s with kv_store on the H200,
        // bench/results/2026-11-30-mma-prefill-attention-h200).
        const cuda::QkCacheStore store{kv, v, Hkv * hd};
        cuda::qk_norm_rope(qg, L.attn_q_norm, k, L.attn_k_norm, pos_.as<int32_t>(), n, qs, q_.as<float>(), s,
                           &store);
    } else {
        cuda::qk_norm_rope(qg, L.attn_q_norm, k, L.attn_k_norm, pos_.as<int32_t>(), n, qs, q_.as<float>(), s);
        cuda::kv_store(kv, pos_.as<int32_t>(), n, k, Hkv * hd, v, Hkv * hd, s);
    }
    const ops::AttentionShape shape{H, Hkv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
    // The gate sits after each head's query in the q projection: [n][H][q: hd | gate: hd].
    const cuda::AttentionGate gate =
        gated ? cuda::AttentionGate{qg + hd, 2 * H * hd, 2 * hd} : cuda::AttentionGate{};
    cuda::attention(kv, shape, q_.as<float>(), n, pos_.as<int32_t>(), max_keys, gate, o_.as<float>(),
                    attn_ws_.data(), attn_ws_.size(), s);
    linear(L.attn_output, o_.as<float>(), n, out);
    if (L.attn_output_b) cuda::add_bias(out, L.attn_output_b, n, hp_.n_embd, s);
}

// Routed experts plus, where the model has one, the sigmoid-gated shared expert: u_ -> mix_.
void GpuForward::moe(const GpuLayer& L, int64_t il, int64_t n, bool logits_ready) {
    const cuda::StreamHandle s = stream_.handle();
    const float* u = u_.as<float>();
    const int64_t E = hp_.n_expert, K = hp_.n_expert_used, d = hp_.n_embd;
    float* logits = router_logits_.as<float>();
    if (host_index_[static_cast<size_t>(il)] >= 0) {
        if (streaming(n) && stream_order_[static_cast<size_t>(il)] >= 0)
            host_moe_streamed(L, il, n);
        else
            host_moe_handoff(L, il, n);
        return;
    }
    if (n == 1 && hp_.recipe().moe.router != RouterKind::softmax_topk) {
        // Decode with a router the fused launch does not compute: route, then the two expert launches.
        if (!logits_ready) project(L.router_in, u, 1, logits);
        route(il, 1, L.router_in.n_out, s);
        cuda::moe_gate_up(L.gate_exps, L.up_exps, ids_.as<int32_t>(), K, u, h_.as<float>(), s);
        cuda::moe_down(L.down_exps, ids_.as<int32_t>(), weights_.as<float>(), K, h_.as<float>(),
                       mix_.as<float>(), s);
        return;
    }
    if (n == 1 && replay_) {
        // Replay: the router's launch, the trace's ids over its own, then the expert launches.
        if (!logits_ready) project(L.router_in, u, 1, logits);
        route(il, 1, L.router_in.n_out, s);
        cuda::MoeDecodeShared shared;
        if (hp_.has_shared_expert())
            shared = {&L.swiglu_gate_up.parts[0], &L.swiglu_gate_up.parts[1], &L.swiglu_down, logits + E};
        const cuda::MoeDecodeShared* sh = hp_.has_shared_expert() ? &shared : nullptr;
        cuda::moe_gate_up(L.gate_exps, L.up_exps, ids_.as<int32_t>(), K, u, h_.as<float>(), s, sh);
        cuda::moe_down(L.down_exps, ids_.as<int32_t>(), weights_.as<float>(), K, h_.as<float>(),
                       mix_.as<float>(), s, sh);
        return;
    }
    if (n == 1) {
        // Decode: two launches for the whole layer. The router's top-k runs inside the gate/up
        // launch, the shared expert rides along as one more expert, and the down launch sums all of
        // them with their weights (the shared one's: sigmoid of the router's extra logit).
        if (!logits_ready) project(L.router_in, u, 1, logits);
        cuda::MoeDecodeShared shared;
        if (hp_.has_shared_expert())
            shared = {&L.swiglu_gate_up.parts[0], &L.swiglu_gate_up.parts[1], &L.swiglu_down, logits + E};
        const cuda::MoeDecodeShared* sh = hp_.has_shared_expert() ? &shared : nullptr;
        cuda::moe_route_gate_up(logits, hp_.recipe().moe.renormalize, ids_.as<int32_t>(),
                                weights_.as<float>(), L.gate_exps, L.up_exps, K, u, h_.as<float>(), s, sh);
        cuda::moe_down(L.down_exps, ids_.as<int32_t>(), weights_.as<float>(), K, h_.as<float>(),
                       mix_.as<float>(), s, sh);
        return;
    }
    linear(L.router_in.parts[0], u, n, logits);
    route(il, n, E, s);
    cuda::moe_batch(L.gate_exps, L.up_exps, L.down_exps, ids_.as<int32_t>(), weights_.as<float>(), n, K, u,
                    mix_.as<float>(), work_.data(), s, precise(L.gate_exps.type));
    if (!hp_.has_shared_expert()) return;
    swiglu(L, n, shared_.as<float>(), s);
    cuda::shared_expert_add(mix_.as<float>(), shared_.as<float>(), u, L.shexp_gate_inp, n, d, s);
}

void GpuForward::ffn(const GpuLayer& L, int64_t il, int64_t n, bool logits_ready) {
    switch (hp_.recipe().ffn) {
        case FfnKind::moe:
            moe(L, il, n, logits_ready);
            break;
        case FfnKind::dense:
            if (host_index_[static_cast<size_t>(il)] < 0)
                swiglu(L, n, mix_.as<float>(), stream_.handle());
            else if (streaming(n) && stream_order_[static_cast<size_t>(il)] >= 0)
                host_moe_streamed(L, il, n);
            else
                host_moe_handoff(L, il, n);
            break;
    }
}

void GpuForward::swiglu(const GpuLayer& L, int64_t n, float* out, cuda::StreamHandle s) {
    const float* u = u_.as<float>();
    const int64_t ff = hp_.n_ff_unrouted();
    float* gu = swiglu_gu_.as<float>();
    if (n == 1 || L.swiglu_gate_up.runs.size() == 1) {
        // Rows [gate | up] of width 2 ff (one matmul; at n = 1 the runs land side by side too).
        if (n == 1) {
            for (const InputGroup::Run& r : L.swiglu_gate_up.runs) linear(r.whole, u, 1, gu + r.offset, s);
        } else {
            linear(L.swiglu_gate_up.runs[0].whole, u, n, gu, s);
        }
        cuda::swiglu(gu, gu + ff, n, ff, 2 * ff, swiglu_h_.as<float>(), s);
    } else {
        linear(L.swiglu_gate_up.parts[0], u, n, gu, s);
        linear(L.swiglu_gate_up.parts[1], u, n, gu + n * ff, s);
        cuda::swiglu(gu, gu + n * ff, n, ff, ff, swiglu_h_.as<float>(), s);
    }
    linear(L.swiglu_down, swiglu_h_.as<float>(), n, out, s);
}

std::unique_ptr<ForwardBackend> make_gpu_forward(const Model& model, const GpuOptions& options) {
    return std::make_unique<GpuForward>(model, options);
}

}  // namespace mox::models
