// Routed experts that stay in host memory while the rest of the model runs on the GPU (and dense FFNs
// there, handed off as one expert of weight 1 for every token).
//
// Decode: the GPU computes the router and top-k, a kernel stores the normalized hidden state and the
// routing (8 KiB for Qwen3.6) straight into host-mapped memory and raises that layer's `ready` word;
// the thread that launched the decode graph, spinning on it, runs the CPU's MoE operator and raises
// `done`; a second kernel, spinning on that, copies the result into mix_ (ops/cuda_handoff.h). The
// shared expert runs on a second stream meanwhile. A host node (cudaLaunchHostFunc) with copies
// around it did the same at ~55 us per round trip on an H200; MOX_HANDOFF=hostfn selects it still.
// Small batches (n > 1, launched eagerly, not in a graph) keep the host node: the launching thread
// enqueues the whole forward before it could serve a layer, and a full launch queue would block it
// while the GPU waits for it.
// Prefill micro-batches of at least stream_min_tokens tokens copy each host layer's expert stacks
// into one of two device staging buffers instead and run the batched MoE there: the copy of the next
// streamed layer (copy stream) overlaps the compute of this one. A stack is copied whole: at
// hundreds of tokens per batch nearly every expert is selected anyway (256 experts, top-8).
#include "models/gpu/gpu_forward.h"

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "models/gpu_memory.h"
#include "ops/cuda_basic.h"
#include "ops/cuda_expert_cache.h"
#include "ops/cuda_moe.h"

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

namespace mox::models {

namespace {

constexpr size_t kPad = 16;  // zero bytes after each staged stack (the kernels' vector loads)

size_t align_up(size_t v, size_t a) {
    return (v + a - 1) / a * a;
}

// MOX_HANDOFF=poll (default) | hostfn: how decode hands host layers to the CPU (to compare them).
bool polling_handoff() {
    const char* e = std::getenv("MOX_HANDOFF");
    if (!e || !*e) return true;
    const std::string v = e;
    if (v == "poll") return true;
    if (v == "hostfn") return false;
    fail("MOX_HANDOFF={}: expected poll or hostfn", v);
}

void host_job_entry(void* arg) {
    const auto* job = static_cast<const HostJob*>(arg);
    job->self->run_host_job(*job);
}

struct Range {
    uintptr_t begin = 0, end = 0;
};

}  // namespace

void GpuForward::load_host_experts(const GpuOptions& o) {
    const size_t n_layer = m_.layers_.size();
    host_index_.assign(n_layer, -1);
    stream_order_.assign(n_layer, -1);
    decode_jobs_.resize(n_layer);
    batch_jobs_.resize(n_layer);
    const bool poll = polling_handoff();
    if (o.experts.empty()) return;
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    std::vector<Range> mapped;  // page-rounded stacks left in the mapped file
    for (size_t i = 0; i < n_layer; ++i) {
        if (o.experts[i] == ExpertHome::gpu) continue;
        host_index_[i] = static_cast<int64_t>(host_.size());
        HostExpertLayer h;
        h.layer = static_cast<int64_t>(i);
        h.home = o.experts[i];
        h.stack = m_.layers_[i].experts;
        const size_t g = cuda::weight_bytes(h.stack.gate), u = cuda::weight_bytes(h.stack.up);
        const size_t dn = cuda::weight_bytes(h.stack.down);
        h.up_at = align_up(g + kPad, 256);
        h.down_at = align_up(h.up_at + u + kPad, 256);
        h.bytes = gpu_staging_bytes(g, u, dn);  // = down_at + dn + kPad (models/gpu_memory.h)
        if (h.home == ExpertHome::pinned) {
            std::string why;
            h.copy = cuda::PinnedBuffer::try_alloc(g + u + dn, &why);
            if (h.copy.empty()) {
                log::warn("layer {}: cannot pin {} of experts ({}); they stay in the mapped file", i,
                          format_bytes(g + u + dn), why);
                h.home = ExpertHome::mmap;
            } else {
                auto* dst = h.copy.as<uint8_t>();
                std::memcpy(dst, h.stack.gate.data, g);
                std::memcpy(dst + g, h.stack.up.data, u);
                std::memcpy(dst + g + u, h.stack.down.data, dn);
                h.stack.gate.data = dst;
                h.stack.up.data = dst + g;
                h.stack.down.data = dst + g + u;
                h.streamable = true;
            }
        }
        if (h.home == ExpertHome::mmap)
            for (const ops::Weight* w : {&h.stack.gate, &h.stack.up, &h.stack.down}) {
                const auto b = reinterpret_cast<uintptr_t>(w->data);
                mapped.push_back({b / page * page, align_up(b + cuda::weight_bytes(*w), page)});
            }
        decode_jobs_[i] = std::make_unique<HostJob>(HostJob{this, static_cast<int64_t>(i), 1});
        batch_jobs_[i] = std::make_unique<HostJob>(HostJob{this, static_cast<int64_t>(i), 1});
        host_.push_back(std::move(h));
    }
    // Lock the mapped stacks in place (no copy) so the copy engine can read them at full speed.
    // Registrations may not overlap: merge the page-rounded ranges first.
    std::sort(mapped.begin(), mapped.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    std::vector<Range> merged, locked;
    for (const Range& r : mapped) {
        if (!merged.empty() && r.begin <= merged.back().end)
            merged.back().end = std::max(merged.back().end, r.end);
        else
            merged.push_back(r);
    }
    for (const Range& r : merged) {
        std::string why;
        auto reg = cuda::HostRegistration::try_register(reinterpret_cast<const void*>(r.begin),
                                                        r.end - r.begin, &why);
        if (reg.empty()) {
            log::warn(
                "cannot lock {} of mapped experts for streaming ({}); their layers' prefill runs on the CPU",
                format_bytes(r.end - r.begin), why);
            continue;
        }
        registrations_.push_back(std::move(reg));
        locked.push_back(r);
    }
    auto is_locked = [&](const ops::Weight& w) {
        const auto b = reinterpret_cast<uintptr_t>(w.data), e = b + cuda::weight_bytes(w);
        return std::any_of(locked.begin(), locked.end(),
                           [&](const Range& r) { return r.begin <= b && e <= r.end; });
    };
    for (HostExpertLayer& h : host_)
        if (h.home == ExpertHome::mmap)
            h.streamable = is_locked(h.stack.gate) && is_locked(h.stack.up) && is_locked(h.stack.down);

    // Streaming order and the two staging buffers (only if a micro-batch can reach the threshold).
    size_t staging_bytes = 0;
    if (n_ubatch_ >= stream_min_tokens_)
        for (size_t i = 0; i < n_layer; ++i) {
            const int64_t hi = host_index_[i];
            if (hi < 0 || !host_[static_cast<size_t>(hi)].streamable) continue;
            stream_order_[i] = static_cast<int64_t>(streamed_.size());
            streamed_.push_back(static_cast<int64_t>(i));
            staging_bytes = std::max(staging_bytes, host_[static_cast<size_t>(hi)].bytes);
        }
    if (!streamed_.empty())
        for (cuda::DeviceBuffer& b : staging_) {
            b = cuda::DeviceBuffer(staging_bytes);
            b.zero(stream_.handle());  // the pads stay zero: copies only write the stacks
        }

    // Hand-off buffers for a whole micro-batch.
    const int64_t nb = n_ubatch_, d = hp_.n_embd, K = hp_.n_ffn_experts_used();
    std::string why;
    hand_x_ = cuda::PinnedBuffer::try_alloc(static_cast<size_t>(nb * d) * sizeof(float), &why);
    hand_out_ = cuda::PinnedBuffer::try_alloc(static_cast<size_t>(nb * d) * sizeof(float), &why);
    hand_ids_ = cuda::PinnedBuffer::try_alloc(static_cast<size_t>(nb * K) * sizeof(int32_t), &why);
    hand_weights_ = cuda::PinnedBuffer::try_alloc(static_cast<size_t>(nb * K) * sizeof(float), &why);
    if (hand_x_.empty() || hand_out_.empty() || hand_ids_.empty() || hand_weights_.empty())
        fail("--device cuda: pinned host memory for the CPU expert hand-off: {}", why);
    if (poll && !host_.empty()) channel_ = cuda::HandoffChannel(static_cast<int64_t>(host_.size()), d, K);
    host_routing_.ids.reserve(static_cast<size_t>(nb * K));
    host_routing_.weights.reserve(static_cast<size_t>(nb * K));
    host_routing_.expert_counts.reserve(static_cast<size_t>(hp_.n_ffn_experts()));
}

bool GpuForward::streaming(int64_t n) const {
    return n >= stream_min_tokens_ && !streamed_.empty();
}

void GpuForward::run_host_job(const HostJob& job) noexcept {
    (void)host_moe(job.layer, job.n, hand_x_.as<float>(), hand_ids_.as<int32_t>(), hand_weights_.as<float>(),
                   hand_out_.as<float>());
}

bool GpuForward::host_moe(int64_t layer, int64_t n, const float* x, const int32_t* ids, const float* w,
                          float* out) noexcept {
    if (host_failed_) return false;  // a failed hand-off poisons the rest of this forward
    try {
        const int64_t K = hp_.n_ffn_experts_used(), E = hp_.n_ffn_experts();
        ops::Routing& r = host_routing_;
        r.n_tokens = n;
        r.k = K;
        r.ids.assign(ids, ids + n * K);
        r.weights.assign(w, w + n * K);
        if (n == 1 && cache_ && cache_->serves(layer) && !channel_.empty()) {
            // The GPU computes the experts the pool holds for this step: the CPU only the others.
            int64_t kept = 0;
            for (int64_t i = 0; i < K; ++i) {
                MOX_CHECK(ids[i] >= 0 && ids[i] < E, "host expert hand-off: expert id {} of {}", ids[i], E);
                if (cache_->access(layer, ids[i])) continue;
                r.ids[static_cast<size_t>(kept)] = ids[i];
                r.weights[static_cast<size_t>(kept)] = w[i];
                kept++;
            }
            r.k = kept;
            r.ids.resize(static_cast<size_t>(kept));
            r.weights.resize(static_cast<size_t>(kept));
            if (kept == 0) {
                std::fill(out, out + hp_.n_embd, 0.0f);
                return true;
            }
        }
        r.expert_counts.assign(static_cast<size_t>(E), 0);
        for (const int32_t e : r.ids) {
            MOX_CHECK(e >= 0 && e < E, "host expert hand-off: expert id {} of {}", e, E);
            r.expert_counts[static_cast<size_t>(e)]++;
        }
        const HostExpertLayer& h = host_[static_cast<size_t>(host_index_[static_cast<size_t>(layer)])];
        const auto t0 = std::chrono::steady_clock::now();
        ops::moe_ffn(m_.ctx_, h.stack, r, x, out);
        if (profile_) {
            host_ns_ +=
                std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
                    .count();
            host_jobs_++;
            host_tokens_ += n;
        }
        return true;
    } catch (...) {
        host_error_ = std::current_exception();
        host_failed_ = true;
        return false;
    }
}

void GpuForward::serve_host_layers(uint32_t step) {
    // The graph publishes the host layers in trunk order, which is host_'s order (= the slots).
    for (size_t slot = 0; slot < host_.size(); ++slot) {
        const auto i = static_cast<int64_t>(slot);
        // false: the GPU side gave up on this step already; its remaining collects return at once.
        if (!channel_.wait_ready(i, step, stream_.handle())) return;
        const bool ok = host_moe(host_[slot].layer, 1, channel_.x(), channel_.ids(), channel_.weights(),
                                 channel_.result());
        channel_.answer(i, step, ok);  // !ok: the GPU writes zeros and stops waiting for the CPU
        if (!ok) return;
    }
}

void GpuForward::check_handoff() const {
    const cuda::HandoffStatus st = channel_.status();
    if (st.error == cuda::HandoffError::none) return;
    const bool known = st.slot >= 0 && st.slot < static_cast<int64_t>(host_.size());
    const int64_t layer = known ? host_[static_cast<size_t>(st.slot)].layer : -1;
    switch (st.error) {
        case cuda::HandoffError::gpu_timeout:
            fail(
                "decode: the GPU waited {:.0f} s for the CPU's experts of layer {} and gave up "
                "(the CPU side never answered); this step's output is invalid",
                cuda::HandoffChannel::kDefaultTimeoutNs / 1e9, layer);
        case cuda::HandoffError::cpu_failed:
            fail("decode: the CPU's experts of layer {} failed; this step's output is invalid", layer);
        case cuda::HandoffError::host_abort:
            fail("decode: the CPU expert hand-off of layer {} was aborted; this step's output is invalid",
                 layer);
        default:
            fail("decode: CPU expert hand-off of layer {}: unknown error {}", layer,
                 static_cast<uint32_t>(st.error));
    }
}

void GpuForward::host_moe_handoff(const GpuLayer& L, int64_t il, int64_t n) {
    if (n == 1 && cache_ && cache_->serves(il) && !channel_.empty()) return cached_moe_handoff(L, il);
    const cuda::StreamHandle s = stream_.handle();
    const float* u = u_.as<float>();
    const int64_t K = hp_.n_ffn_experts_used(), d = hp_.n_embd;
    if (hp_.has_moe()) {  // a dense FFN's routing (expert 0, weight 1) is in ids_ and weights_ already
        float* logits = router_logits_.as<float>();
        if (n == 1)
            project(L.router_in, u, 1, logits);  // n_expert + 1 logits (the last: shared gate)
        else
            linear(L.router_in.parts[0], u, n, logits);
        route(il, n, hp_.n_expert, s);
    }
    const bool shared = hp_.n_ff_shexp > 0;
    if (shared) {  // fork: the shared expert runs on the side stream while the CPU works
        fork_.record(s);
        side_stream_.wait(fork_.handle());
        swiglu(L, n, shared_.as<float>(), side_stream_.handle());
        join_.record(side_stream_.handle());
    }
    if (n == 1 && !channel_.empty()) {  // n == 1 is always the decode graph (forward)
        const auto slot = host_index_[static_cast<size_t>(il)];
        channel_.publish(slot, u, ids_.as<int32_t>(), weights_.as<float>(), s);
        channel_.collect(slot, mix_.as<float>(), s);
    } else {
        cuda::copy_to_host_async(hand_x_.data(), u, static_cast<size_t>(n * d) * sizeof(float), s);
        cuda::copy_to_host_async(hand_ids_.data(), ids_.data(), static_cast<size_t>(n * K) * sizeof(int32_t),
                                 s);
        cuda::copy_to_host_async(hand_weights_.data(), weights_.data(),
                                 static_cast<size_t>(n * K) * sizeof(float), s);
        HostJob* job =
            n == 1 ? decode_jobs_[static_cast<size_t>(il)].get() : batch_jobs_[static_cast<size_t>(il)].get();
        job->n = n;  // the previous micro-batch finished (forward synchronizes between them)
        cuda::launch_host_func(s, host_job_entry, job);
        cuda::copy_to_device(mix_.data(), hand_out_.data(), static_cast<size_t>(n * d) * sizeof(float), s);
    }
    if (shared) {
        stream_.wait(join_.handle());
        cuda::shared_expert_add(mix_.as<float>(), shared_.as<float>(), u, L.shexp_gate_inp, n, d, s);
    }
}

void GpuForward::cached_moe_handoff(const GpuLayer& L, int64_t il) {
    const cuda::StreamHandle s = stream_.handle(), side = side_stream_.handle();
    const float* u = u_.as<float>();
    const int64_t E = hp_.n_expert, K = hp_.n_expert_used, d = hp_.n_embd;
    float* logits = router_logits_.as<float>();
    project(L.router_in, u, 1, logits);  // n_expert + 1 logits with a shared expert (the last: its gate)
    route(il, 1, hp_.n_expert, s);
    // The side stream: the pool's share of the selection, and the shared expert in the same launches.
    fork_.record(s);
    side_stream_.wait(fork_.handle());
    const ops::ExpertStack& pool = cache_->pool_view(il);
    int32_t* slot_ids = cache_ids_.as<int32_t>();
    float* slot_weights = cache_weights_.as<float>();
    cuda::expert_cache_lookup(cache_->device_table(il), ids_.as<int32_t>(), weights_.as<float>(), K,
                              cache_->zero_slot(), slot_ids, slot_weights, side);
    cuda::MoeDecodeShared shared;
    if (hp_.has_shared_expert())
        shared = {&L.swiglu_gate_up.parts[0], &L.swiglu_gate_up.parts[1], &L.swiglu_down, logits + E};
    const cuda::MoeDecodeShared* sh = hp_.has_shared_expert() ? &shared : nullptr;
    cuda::moe_gate_up(pool.gate, pool.up, slot_ids, K, u, h_.as<float>(), side, sh);
    cuda::moe_down(pool.down, slot_ids, slot_weights, K, h_.as<float>(), shared_.as<float>(), side, sh);
    join_.record(side);
    // The CPU's share: every selection goes over; it skips those the pool holds (host_moe).
    const auto slot = host_index_[static_cast<size_t>(il)];
    channel_.publish(slot, u, ids_.as<int32_t>(), weights_.as<float>(), s);
    channel_.collect(slot, mix_.as<float>(), s);
    stream_.wait(join_.handle());
    cuda::add_bias(mix_.as<float>(), shared_.as<const float>(), 1, d, s);  // mix_ += the GPU's share
}

void GpuForward::load_expert_cache(const GpuOptions& o) {
    if (o.expert_cache_bytes == 0) return;
    if (!hp_.has_moe())
        fail("--expert-cache: {} is a dense model (no routed experts to cache)", hp_.arch_name());
    if (host_.empty())
        fail(
            "--expert-cache: every layer's experts are on the GPU already (nothing to cache; keep some "
            "layers' experts in host memory, e.g. --n-cpu-moe N)");
    if (channel_.empty()) fail("--expert-cache: needs the polling hand-off (unset MOX_HANDOFF=hostfn)");
    std::vector<GpuExpertCache::Layer> layers;
    for (const HostExpertLayer& h : host_) {
        if (!h.streamable)
            fail(
                "--expert-cache: the experts of layer {} are not in page-locked memory (locking them "
                "failed; see the warning above), so they cannot be copied in the background",
                h.layer);
        layers.push_back({h.layer, h.stack});
    }
    cache_ =
        std::make_unique<GpuExpertCache>(std::move(layers), hp_.n_trunk(), hp_.n_expert, o.expert_cache_bytes,
                                         o.expert_cache_policy, o.expert_cache_admit_cap, stream_.handle());
    const int64_t K = hp_.n_expert_used;
    cache_ids_ = cuda::DeviceBuffer(static_cast<size_t>(K) * sizeof(int32_t));
    cache_weights_ = cuda::DeviceBuffer(static_cast<size_t>(K) * sizeof(float));
}

void GpuForward::stream_begin() {
    for (size_t order = 0; order < std::min<size_t>(2, streamed_.size()); ++order)
        stream_copy(order, static_cast<int>(order));
}

void GpuForward::stream_copy(size_t order, int buffer) {
    const int64_t il = streamed_[order];
    const HostExpertLayer& h = host_[static_cast<size_t>(host_index_[static_cast<size_t>(il)])];
    const cuda::StreamHandle c = copy_stream_.handle();
    copy_stream_.wait(freed_[buffer].handle());  // the layer that last used this buffer is done
    auto* dst = staging_[buffer].as<uint8_t>();
    cuda::copy_to_device(dst, h.stack.gate.data, cuda::weight_bytes(h.stack.gate), c);
    cuda::copy_to_device(dst + h.up_at, h.stack.up.data, cuda::weight_bytes(h.stack.up), c);
    cuda::copy_to_device(dst + h.down_at, h.stack.down.data, cuda::weight_bytes(h.stack.down), c);
    ready_[buffer].record(c);
}

void GpuForward::host_moe_streamed(const GpuLayer& L, int64_t il, int64_t n) {
    const cuda::StreamHandle s = stream_.handle();
    const float* u = u_.as<float>();
    const int64_t K = hp_.n_ffn_experts_used(), d = hp_.n_embd;
    if (hp_.has_moe()) {
        linear(L.router_in.parts[0], u, n, router_logits_.as<float>());
        route(il, n, hp_.n_expert, s);
    }
    const auto order = static_cast<size_t>(stream_order_[static_cast<size_t>(il)]);
    const int b = static_cast<int>(order % 2);
    const HostExpertLayer& h = host_[static_cast<size_t>(host_index_[static_cast<size_t>(il)])];
    stream_.wait(ready_[b].handle());
    const auto* base = staging_[b].as<const uint8_t>();
    ops::Weight gate = h.stack.gate, up = h.stack.up, down = h.stack.down;
    gate.data = base;
    up.data = base + h.up_at;
    down.data = base + h.down_at;
    cuda::moe_batch(gate, up, down, ids_.as<int32_t>(), weights_.as<float>(), n, K, u, mix_.as<float>(),
                    work_.data(), s, precise(gate.type));
    freed_[b].record(s);
    if (order + 2 < streamed_.size()) stream_copy(order + 2, b);
    if (hp_.n_ff_shexp == 0) return;
    swiglu(L, n, shared_.as<float>(), s);
    cuda::shared_expert_add(mix_.as<float>(), shared_.as<float>(), u, L.shexp_gate_inp, n, d, s);
}

}  // namespace mox::models
