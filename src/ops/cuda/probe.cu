// The measurements behind `mox calibrate`'s GPU profile (ops/cuda_probe.h).
#include "ops/cuda_attention.h"
#include "ops/cuda_delta_net.h"
#include "ops/cuda_handoff.h"
#include "ops/cuda_memory.h"
#include "ops/cuda_moe.h"
#include "ops/cuda_probe.h"
#include "quant/cuda/check.cuh"
#include "quant/cuda_matmul.h"
#include "quant/cuda_matvec.h"
#include "quant/random_blocks.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

namespace mox::cuda {

namespace {

// The smallest kernel there is: one warp bumps a counter. Consecutive launches touch the same word,
// so they also depend on each other through memory, as a decode graph's kernels do.
__global__ void tick_kernel(int* counter) {
    if (threadIdx.x == 0) counter[0] += 1;
}

void tick(int* counter, cudaStream_t stream) {
    tick_kernel<<<1, 32, 0, stream>>>(counter);
    MOX_CUDA_CHECK_LAUNCH("tick_kernel");
}

// Host callback with nothing to do: its cost is the hand-off itself (driver thread wake-up and the
// stream waiting for it), which is what a CPU-expert layer adds to a decode step beyond its work.
void CUDART_CB empty_host_fn(void*) {}

float median(std::vector<float> v) {
    MOX_CHECK(!v.empty());
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Median milliseconds of `reps` timed calls of fn on `stream`, after `warmup` untimed ones.
template <typename Fn>
float time_ms(cudaStream_t stream, int warmup, int reps, Fn&& fn) {
    MOX_CHECK(reps >= 1, "{} repetitions", reps);
    for (int i = 0; i < warmup; ++i) fn();
    MOX_CUDA_CHECK(cudaStreamSynchronize(stream));
    Event a, b;
    std::vector<float> ms;
    ms.reserve(static_cast<size_t>(reps));
    for (int i = 0; i < reps; ++i) {
        a.record(stream);
        fn();
        b.record(stream);
        b.synchronize();
        ms.push_back(Event::elapsed_ms(a, b));
    }
    return median(std::move(ms));
}

// Captures whatever `body` enqueues on `stream` into a graph (leaving capture mode if it throws).
template <typename Fn>
Graph capture(cudaStream_t stream, Fn&& body) {
    Graph::begin_capture(stream);
    try {
        body();
    } catch (...) {
        Graph::abort_capture(stream);
        throw;
    }
    return Graph::end_capture(stream);
}

// A device weight of n_out rows x row_bytes filled with random valid blocks of `type`: a pool of up
// to 64 rows is made on the host and uploaded once, then repeated by device copies that double the
// filled part each time (the kernels' speed depends on addresses, not on the values repeating).
// The 16 bytes after the last row are zeroed (cuda_matvec.h: vector loads may touch them).
DeviceBuffer random_weight(quant::TypeId type, int64_t n_in, int64_t n_out, cudaStream_t stream) {
    const quant::TypeTraits& tr = quant::traits(type);
    const size_t rb = quant::row_bytes(type, n_in);
    const size_t bytes = rb * static_cast<size_t>(n_out);
    const int64_t pool_rows = std::min<int64_t>(64, n_out);
    const std::vector<uint8_t> pool =
        quant::random_valid_blocks(type, pool_rows * (n_in / tr.block_elems), 17);
    DeviceBuffer w(bytes + 16);
    w.upload(pool.data(), pool.size(), 0, stream);
    size_t filled = pool.size();
    while (filled < bytes) {
        const size_t n = std::min(filled, bytes - filled);  // [0, n) -> [filled, filled + n): disjoint
        MOX_CUDA_CHECK(
            cudaMemcpyAsync(w.as<uint8_t>() + filled, w.data(), n, cudaMemcpyDeviceToDevice, stream));
        filled += n;
    }
    MOX_CUDA_CHECK(cudaMemsetAsync(w.as<uint8_t>() + bytes, 0, 16, stream));
    MOX_CUDA_CHECK(cudaStreamSynchronize(stream));
    return w;
}

DeviceBuffer random_floats(size_t n, uint32_t seed, cudaStream_t stream) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> host(n);
    for (float& v : host) v = dist(rng);
    DeviceBuffer d(n * sizeof(float));
    d.upload(host.data(), n * sizeof(float), 0, stream);
    MOX_CUDA_CHECK(cudaStreamSynchronize(stream));
    return d;
}

// Qwen3.6-35B-A3B's routed experts (256 of 2048 -> 512 -> 2048) with every matrix of `type`: random
// device stacks and their views. One stack serves every probed layer: each layer routes to its own
// experts, so few of its rows are still in L2 from an earlier one (~450 MB at Q4_K).
struct ExpertStacks {
    static constexpr int64_t kEmbd = 2048, kFf = 512, kExperts = 256;
    DeviceBuffer gate, up, down;
    ops::Weight wg, wu, wd;

    ExpertStacks(quant::TypeId type, cudaStream_t s)
        : gate(random_weight(type, kEmbd, kFf * kExperts, s)),
          up(random_weight(type, kEmbd, kFf * kExperts, s)),
          down(random_weight(type, kFf, kEmbd * kExperts, s)),
          wg(view(gate, type, kEmbd, kFf, kExperts)),
          wu(view(up, type, kEmbd, kFf, kExperts)),
          wd(view(down, type, kFf, kEmbd, kExperts)) {}

    static ops::Weight view(const DeviceBuffer& b, quant::TypeId type, int64_t n_in, int64_t n_out,
                            int64_t n_expert) {
        return ops::Weight{.data = b.as<uint8_t>(),
                           .type = type,
                           .n_in = n_in,
                           .n_out = n_out,
                           .n_expert = n_expert,
                           .row_bytes = quant::row_bytes(type, n_in)};
    }
};

}  // namespace

DeviceMemoryUse probe_memory_use() {
    MOX_CUDA_CHECK(cudaSetDevice(0));
    // cudaFree(nullptr) is the documented no-op that forces the primary context into existence.
    MOX_CUDA_CHECK(cudaFree(nullptr));
    size_t free_b = 0, total_b = 0;
    MOX_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    cudaDeviceProp prop{};
    MOX_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    DeviceMemoryUse out;
    out.name = prop.name;
    out.total_bytes = total_b;
    out.used_bytes = total_b - std::min(free_b, total_b);
    return out;
}

double probe_h2d_gbps(bool pinned, size_t bytes, int reps) {
    MOX_CHECK(bytes >= 4096, "copy of {} bytes", bytes);
    MOX_CUDA_CHECK(cudaSetDevice(0));
    PinnedBuffer pinned_src;
    std::unique_ptr<uint8_t[]> pageable_src;
    const void* src = nullptr;
    if (pinned) {
        std::string why;
        for (size_t n = bytes;; n /= 2) {
            pinned_src = PinnedBuffer::try_alloc(n, &why);
            if (!pinned_src.empty() || n / 2 < (size_t{16} << 20)) break;
        }
        if (pinned_src.empty()) fail("h2d probe: cannot page-lock a copy buffer: {}", why);
        bytes = pinned_src.size();
        std::memset(pinned_src.data(), 0x5a, bytes);
        src = pinned_src.data();
    } else {
        pageable_src.reset(new uint8_t[bytes]);
        std::memset(pageable_src.get(), 0x5a, bytes);  // fault the pages in before timing
        src = pageable_src.get();
    }
    Stream stream;
    DeviceBuffer dst(bytes);
    const float ms = time_ms(stream.handle(), 1, reps, [&] {
        MOX_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, bytes, cudaMemcpyHostToDevice, stream.handle()));
    });
    return static_cast<double>(bytes) / (static_cast<double>(ms) * 1e-3) / 1e9;
}

double probe_host_roundtrip_s(int iterations, int reps) {
    MOX_CHECK(iterations >= 1, "{} iterations", iterations);
    MOX_CUDA_CHECK(cudaSetDevice(0));
    constexpr size_t kBytes = 8 << 10;
    std::string why;
    PinnedBuffer host = PinnedBuffer::try_alloc(kBytes, &why);
    if (host.empty()) fail("host round-trip probe: cannot page-lock {} bytes: {}", kBytes, why);
    std::memset(host.data(), 0, kBytes);
    Stream stream;
    const cudaStream_t s = stream.handle();
    DeviceBuffer counter(sizeof(int)), dev(kBytes);
    counter.zero(s);
    dev.zero(s);
    MOX_CUDA_CHECK(cudaStreamSynchronize(s));
    int* c = counter.as<int>();
    const Graph with_host = capture(s, [&] {
        for (int i = 0; i < iterations; ++i) {
            tick(c, s);
            MOX_CUDA_CHECK(cudaMemcpyAsync(host.data(), dev.data(), kBytes, cudaMemcpyDeviceToHost, s));
            MOX_CUDA_CHECK(cudaLaunchHostFunc(s, empty_host_fn, nullptr));
            MOX_CUDA_CHECK(cudaMemcpyAsync(dev.data(), host.data(), kBytes, cudaMemcpyHostToDevice, s));
            tick(c, s);
        }
    });
    const Graph kernels_only = capture(s, [&] {
        for (int i = 0; i < iterations; ++i) {
            tick(c, s);
            tick(c, s);
        }
    });
    const float ms_with = time_ms(s, 2, reps, [&] { with_host.launch(s); });
    const float ms_without = time_ms(s, 2, reps, [&] { kernels_only.launch(s); });
    return (static_cast<double>(ms_with) - static_cast<double>(ms_without)) * 1e-3 / iterations;
}

double probe_handoff_roundtrip_s(int slots, int reps) {
    MOX_CHECK(slots >= 1 && reps >= 1, "{} slots, {} repetitions", slots, reps);
    MOX_CUDA_CHECK(cudaSetDevice(0));
    constexpr int64_t kEmbd = 2048, kUsed = 8;  // Qwen3.6-35B-A3B's hidden state and k
    HandoffChannel channel(slots, kEmbd, kUsed);
    Stream stream;
    const cudaStream_t s = stream.handle();
    DeviceBuffer counter(sizeof(int)), out(kEmbd * sizeof(float)), ids(kUsed * sizeof(int32_t));
    counter.zero(s);
    ids.zero(s);  // expert 0 everywhere: the host side does not look at them here
    const DeviceBuffer x = random_floats(kEmbd, 31, s), wts = random_floats(kUsed, 32, s);
    int* c = counter.as<int>();
    const Graph with_host = capture(s, [&] {
        for (int i = 0; i < slots; ++i) {
            tick(c, s);
            channel.publish(i, x.as<float>(), ids.as<int32_t>(), wts.as<float>(), s);
            channel.collect(i, out.as<float>(), s);
            tick(c, s);
        }
    });
    const Graph kernels_only = capture(s, [&] {
        for (int i = 0; i < slots; ++i) {
            tick(c, s);
            tick(c, s);
        }
    });
    // One step: the graph runs while this thread answers each slot as soon as it is published, as
    // the decode loop's launching thread does (with the experts' work taken out).
    Event a, b;
    auto step = [&] {
        const uint32_t n = channel.begin_step();
        a.record(s);
        with_host.launch(s);
        b.record(s);
        try {
            for (int i = 0; i < slots; ++i) {
                if (!channel.wait_ready(i, n, s)) fail("hand-off probe: the GPU gave up at slot {}", i);
                channel.answer(i, n, true);
            }
        } catch (...) {
            // wait_ready recorded host_abort, so the graph's collects return at once: let it finish
            // before the channel it reads goes away.
            (void)cudaStreamSynchronize(s);
            throw;
        }
        b.synchronize();
        const HandoffStatus st = channel.status();
        if (st.error != HandoffError::none)
            fail("hand-off probe: error {} at slot {}", static_cast<uint32_t>(st.error), st.slot);
        return Event::elapsed_ms(a, b);
    };
    for (int i = 0; i < 2; ++i) step();
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) ms.push_back(step());
    const float ms_without = time_ms(s, 2, reps, [&] { kernels_only.launch(s); });
    return std::max(0.0, static_cast<double>(median(std::move(ms))) - static_cast<double>(ms_without)) *
           1e-3 / slots;
}

double probe_launch_gap_s(int kernels, int reps) {
    MOX_CHECK(kernels >= 1, "{} kernels", kernels);
    MOX_CUDA_CHECK(cudaSetDevice(0));
    Stream stream;
    const cudaStream_t s = stream.handle();
    // Not an empty kernel: a real decode launch (a matvec over a tiny, L2-resident 2048 -> 16 Q8_0
    // weight) costs its grid's start, its reduction and its drain, which an empty kernel does not.
    constexpr int64_t kIn = 2048, kOut = 16;
    const quant::TypeId type = quant::TypeId::q8_0;
    const size_t rb = quant::row_bytes(type, kIn);
    const DeviceBuffer w = random_weight(type, kIn, kOut, s);
    const DeviceBuffer x = random_floats(kIn, 7, s);
    DeviceBuffer y(kOut * sizeof(float));
    const Graph graph = capture(s, [&] {
        for (int i = 0; i < kernels; ++i)
            matvec(type, w.data(), rb, kIn, kOut, x.as<float>(), 1, y.as<float>(), s);
    });
    const float ms = time_ms(s, 2, reps, [&] { graph.launch(s); });
    return static_cast<double>(ms) * 1e-3 / kernels;
}

double probe_matvec_gbps(quant::TypeId type, size_t min_bytes, int reps) {
    if (!matvec_supported(type)) fail("matvec probe: no CUDA matvec kernel for {}", quant::type_name(type));
    MOX_CUDA_CHECK(cudaSetDevice(0));
    constexpr int64_t kIn = 2048;  // the model's n_embd: decode matvecs read rows of this length
    const size_t rb = quant::row_bytes(type, kIn);
    const int64_t n_out = std::max<int64_t>(1, static_cast<int64_t>((min_bytes + rb - 1) / rb));
    Stream stream;
    const cudaStream_t s = stream.handle();
    const DeviceBuffer w = random_weight(type, kIn, n_out, s);
    const DeviceBuffer x = random_floats(kIn, 3, s);
    DeviceBuffer y(static_cast<size_t>(n_out) * sizeof(float));
    // Decode reads many matrices of a few MiB one after another, never one huge one: the weight is
    // cut into slices of a decode projection's shape run back to back in a replayed graph, as a
    // decode step runs them. Seconds per launch of `rows`-row slices:
    auto per_launch_s = [&](int64_t rows) {
        const int64_t n_slices = std::max<int64_t>(1, n_out / rows);
        const int64_t slice_rows = std::min(n_out, rows);
        Graph graph = capture(s, [&] {
            for (int64_t i = 0; i < n_slices; ++i)
                matvec(type, w.as<uint8_t>() + static_cast<size_t>(i * slice_rows) * rb, rb, kIn, slice_rows,
                       x.as<float>(), 1, y.as<float>() + i * slice_rows, s);
        });
        const float ms = time_ms(s, 2, reps, [&] { graph.launch(s); });
        return std::pair{static_cast<double>(ms) * 1e-3 / static_cast<double>(n_slices),
                         static_cast<double>(rb) * static_cast<double>(slice_rows)};
    };
    // The marginal rate between 2048- and 8192-row slices (an out-projection's and a DeltaNet
    // in-projection's shapes): each launch also costs a fixed start and drain, which the speed model
    // charges as gpu.launch_gap_s per kernel. The plain rate of 8192-row slices counted that cost
    // twice (~0.3 ms of a ~2.7 ms Qwen3.6 step on the H200, bench/results/2026-11-30-device-argmax-h200).
    const auto [t_big, b_big] = per_launch_s(8192);
    const auto [t_small, b_small] = per_launch_s(2048);
    if (b_big > b_small && t_big > 1.05 * t_small) return (b_big - b_small) / (t_big - t_small) / 1e9;
    return b_big / t_big / 1e9;  // too small a weight (or too noisy) to separate the two
}

double probe_matmul_tflops(quant::TypeId type, int64_t n_tokens, int reps) {
    if (!matmul_supported(type)) fail("matmul probe: no CUDA matmul kernel for {}", quant::type_name(type));
    MOX_CHECK(n_tokens >= 1, "{} tokens", n_tokens);
    MOX_CUDA_CHECK(cudaSetDevice(0));
    constexpr int64_t kIn = 2048, kOut = 8192;
    const size_t rb = quant::row_bytes(type, kIn);
    Stream stream;
    const cudaStream_t s = stream.handle();
    const DeviceBuffer w = random_weight(type, kIn, kOut, s);
    const DeviceBuffer x = random_floats(static_cast<size_t>(n_tokens * kIn), 5, s);
    DeviceBuffer y(static_cast<size_t>(n_tokens * kOut) * sizeof(float));
    DeviceBuffer workspace(matmul_workspace_bytes(type, kIn, kOut, n_tokens));
    const float ms = time_ms(s, 2, reps, [&] {
        matmul(type, w.data(), rb, kIn, kOut, x.as<float>(), n_tokens, y.as<float>(), workspace.data(), s);
    });
    const double flops = 2.0 * static_cast<double>(n_tokens) * kIn * kOut;
    return flops / (static_cast<double>(ms) * 1e-3) / 1e12;
}

double probe_moe_decode_gbps(quant::TypeId type, int reps) {
    if (!matvec_supported(type))
        fail("MoE decode probe: no CUDA matvec kernel for {}", quant::type_name(type));
    MOX_CUDA_CHECK(cudaSetDevice(0));
    constexpr int64_t kEmbd = ExpertStacks::kEmbd, kFf = ExpertStacks::kFf, kExperts = ExpertStacks::kExperts;
    constexpr int64_t kUsed = 8, kLayers = 40;
    Stream stream;
    const cudaStream_t s = stream.handle();
    const size_t rb_embd = quant::row_bytes(type, kEmbd), rb_ff = quant::row_bytes(type, kFf);
    const ExpertStacks stacks(type, s);
    const ops::Weight &wg = stacks.wg, &wu = stacks.wu, &wd = stacks.wd;
    const DeviceBuffer sh_gate = random_weight(type, kEmbd, kFf, s),
                       sh_up = random_weight(type, kEmbd, kFf, s);
    const DeviceBuffer sh_down = random_weight(type, kFf, kEmbd, s);
    const ops::Weight sg = ExpertStacks::view(sh_gate, type, kEmbd, kFf, 1),
                      su = ExpertStacks::view(sh_up, type, kEmbd, kFf, 1);
    const ops::Weight sd = ExpertStacks::view(sh_down, type, kFf, kEmbd, 1);
    // Router logits of every layer (n_expert + the shared expert's gate logit), the layer input.
    const DeviceBuffer logits = random_floats(static_cast<size_t>(kLayers * (kExperts + 1)), 11, s);
    const DeviceBuffer x = random_floats(kEmbd, 12, s);
    DeviceBuffer h(static_cast<size_t>((kUsed + 1) * kFf) * sizeof(float)), out(kEmbd * sizeof(float));
    DeviceBuffer ids(kUsed * sizeof(int32_t)), wts(kUsed * sizeof(float));
    const Graph graph = capture(s, [&] {
        for (int64_t l = 0; l < kLayers; ++l) {
            const float* lg = logits.as<float>() + l * (kExperts + 1);
            const MoeDecodeShared shared{.gate = &sg, .up = &su, .down = &sd, .gate_logit = lg + kExperts};
            moe_route_gate_up(lg, true, ids.as<int32_t>(), wts.as<float>(), wg, wu, kUsed, x.as<float>(),
                              h.as<float>(), s, &shared);
            moe_down(wd, ids.as<int32_t>(), wts.as<float>(), kUsed, h.as<float>(), out.as<float>(), s,
                     &shared);
        }
    });
    const float ms = time_ms(s, 2, reps, [&] { graph.launch(s); });
    const double bytes = static_cast<double>(kLayers * (kUsed + 1)) *
                         (2.0 * static_cast<double>(kFf) * static_cast<double>(rb_embd) +
                          static_cast<double>(kEmbd) * static_cast<double>(rb_ff));
    return bytes / (static_cast<double>(ms) * 1e-3) / 1e9;
}

double probe_attention_decode_s(int64_t keys, int reps) {
    if (keys < 1) fail("decode attention probe over {} keys", keys);
    MOX_CUDA_CHECK(cudaSetDevice(0));
    constexpr int64_t kHeads = 16, kKvHeads = 2, kDim = 256, kLayers = 10;
    constexpr quant::TypeId kType = quant::TypeId::f16;
    int64_t max_keys = 256;  // the decode graph's bucket for this context
    while (max_keys < keys) max_keys *= 2;
    Stream stream;
    const cudaStream_t s = stream.handle();
    const int64_t row = kKvHeads * kDim;
    const size_t rb = quant::row_bytes(kType, row);
    std::vector<DeviceBuffer> k_cache, v_cache;
    for (int64_t l = 0; l < kLayers; ++l) {
        k_cache.push_back(random_weight(kType, row, max_keys, s));  // the graph's bucket fits the cache
        v_cache.push_back(random_weight(kType, row, max_keys, s));
    }
    const DeviceBuffer q = random_floats(kHeads * kDim, 71, s), gate = random_floats(kHeads * kDim, 72, s);
    DeviceBuffer pos(sizeof(int32_t)), out(kHeads * kDim * sizeof(float));
    const auto last = static_cast<int32_t>(keys - 1);
    pos.upload(&last, sizeof(last), 0, s);
    const ops::AttentionShape shape{
        .n_head = kHeads, .n_head_kv = kKvHeads, .head_dim = kDim, .scale = 1.0f / 16.0f};
    DeviceBuffer workspace(std::max<size_t>(16, attention_workspace_bytes(shape, 1, max_keys)));
    const AttentionGate g{.gate = gate.as<float>(), .token_stride = kHeads * kDim, .head_stride = kDim};
    const Graph graph = capture(s, [&] {
        for (int64_t l = 0; l < kLayers; ++l) {
            const auto i = static_cast<size_t>(l);
            const ops::KvView kv{.k = k_cache[i].as<uint8_t>(),
                                 .v = v_cache[i].as<uint8_t>(),
                                 .k_type = kType,
                                 .v_type = kType,
                                 .row_elems = row,
                                 .k_row_bytes = rb,
                                 .v_row_bytes = rb,
                                 .capacity = max_keys};
            attention(kv, shape, q.as<float>(), 1, pos.as<int32_t>(), max_keys, g, out.as<float>(),
                      workspace.data(), workspace.size(), s);
        }
    });
    const float ms = time_ms(s, 2, reps, [&] { graph.launch(s); });
    return static_cast<double>(ms) * 1e-3 / kLayers;
}

double probe_moe_prefill_tflops(quant::TypeId type, int64_t n_tokens, int reps) {
    if (!matmul_supported(type))
        fail("MoE prefill probe: no CUDA matmul kernel for {}", quant::type_name(type));
    MOX_CHECK(n_tokens >= 1, "{} tokens", n_tokens);
    MOX_CUDA_CHECK(cudaSetDevice(0));
    constexpr int64_t kEmbd = ExpertStacks::kEmbd, kFf = ExpertStacks::kFf, kExperts = ExpertStacks::kExperts;
    constexpr int64_t kUsed = 8;
    Stream stream;
    const cudaStream_t s = stream.handle();
    const ExpertStacks stacks(type, s);
    const ops::Weight &wg = stacks.wg, &wu = stacks.wu, &wd = stacks.wd;
    // Routing from random logits: k distinct experts per token, spread uniformly as a trained router's
    // are on average.
    const DeviceBuffer logits = random_floats(static_cast<size_t>(n_tokens * kExperts), 41, s);
    DeviceBuffer ids(static_cast<size_t>(n_tokens * kUsed) * sizeof(int32_t)),
        wts(static_cast<size_t>(n_tokens * kUsed) * sizeof(float));
    route_softmax_topk(logits.as<float>(), n_tokens, kExperts, kUsed, true, ids.as<int32_t>(),
                       wts.as<float>(), s);
    const DeviceBuffer x = random_floats(static_cast<size_t>(n_tokens * kEmbd), 42, s);
    DeviceBuffer out(static_cast<size_t>(n_tokens * kEmbd) * sizeof(float));
    DeviceBuffer workspace(moe_batch_workspace_bytes(wg, wd, n_tokens, kUsed));
    const float ms = time_ms(s, 2, reps, [&] {
        moe_batch(wg, wu, wd, ids.as<int32_t>(), wts.as<float>(), n_tokens, kUsed, x.as<float>(),
                  out.as<float>(), workspace.data(), s);
    });
    const double flops = 2.0 * static_cast<double>(n_tokens * kUsed) * 3.0 * kEmbd * kFf;
    return flops / (static_cast<double>(ms) * 1e-3) / 1e12;
}

double probe_deltanet_prefill_token_s(uint64_t* state_bytes, int64_t n_tokens, int reps) {
    MOX_CHECK(n_tokens >= 1, "{} tokens", n_tokens);
    MOX_CUDA_CHECK(cudaSetDevice(0));
    constexpr int64_t kHk = 16, kHv = 32, kD = 128, kKernel = 4;
    constexpr int64_t kChannels = 2 * kHk * kD + kHv * kD;  // conv rows: q | k | v
    Stream stream;
    const cudaStream_t s = stream.handle();
    DeviceBuffer conv_state = random_floats(static_cast<size_t>((kKernel - 1) * kChannels), 50, s);
    const DeviceBuffer conv_w = random_floats(static_cast<size_t>(kKernel * kChannels), 51, s);
    DeviceBuffer S(static_cast<size_t>(kHv * kD * kD) * sizeof(float));
    S.zero(s);
    const auto n = static_cast<size_t>(n_tokens);
    const DeviceBuffer x = random_floats(n * kChannels, 52, s), b = random_floats(n * kHv, 53, s),
                       alpha = random_floats(n * kHv, 54, s), z = random_floats(n * kHv * kD, 55, s);
    const DeviceBuffer a = random_floats(kHv, 56, s), dt = random_floats(kHv, 57, s),
                       norm = random_floats(kD, 58, s);
    DeviceBuffer conv_out(n * kChannels * sizeof(float)), out(n * kHv * kD * sizeof(float));
    const DeltaNetWeights w{.a = a.as<float>(), .dt_bias = dt.as<float>(), .norm = norm.as<float>()};
    const DeltaNetShape shape{.n_k_heads = kHk, .n_v_heads = kHv, .dk = kD, .dv = kD};
    DeviceBuffer work(std::max<size_t>(16, delta_net_workspace_bytes(shape, n_tokens)));
    const float ms = time_ms(s, 2, reps, [&] {
        conv_silu(conv_state.as<float>(), conv_w.as<float>(), x.as<float>(), kChannels, n_tokens, kChannels,
                  kKernel, conv_out.as<float>(), s);
        delta_net(S.as<float>(), conv_out.as<float>(), b.as<float>(), alpha.as<float>(), z.as<float>(), w,
                  shape, n_tokens, out.as<float>(), work.data(), work.size(), s, DeltaNetMethod::automatic);
    });
    if (state_bytes != nullptr)
        *state_bytes = static_cast<uint64_t>((kKernel - 1) * kChannels + kHv * kD * kD) * sizeof(float);
    return static_cast<double>(ms) * 1e-3 / static_cast<double>(n_tokens);
}

double probe_deltanet_step_s(uint64_t* state_bytes, int reps) {
    MOX_CUDA_CHECK(cudaSetDevice(0));
    constexpr int64_t kHk = 16, kHv = 32, kD = 128, kKernel = 4, kLayers = 30;
    constexpr int64_t kChannels = 2 * kHk * kD + kHv * kD;  // conv rows: q | k | v
    Stream stream;
    const cudaStream_t s = stream.handle();
    std::vector<DeviceBuffer> conv_state, conv_w, S;
    for (int64_t l = 0; l < kLayers; ++l) {
        conv_state.push_back(random_floats(static_cast<size_t>((kKernel - 1) * kChannels), 20 + l, s));
        conv_w.push_back(random_floats(static_cast<size_t>(kKernel * kChannels), 60 + l, s));
        DeviceBuffer st(static_cast<size_t>(kHv * kD * kD) * sizeof(float));
        st.zero(s);
        S.push_back(std::move(st));
    }
    const DeviceBuffer x = random_floats(kChannels, 1, s), b = random_floats(kHv, 2, s),
                       alpha = random_floats(kHv, 3, s);
    const DeviceBuffer z = random_floats(kHv * kD, 4, s), a = random_floats(kHv, 5, s),
                       dt = random_floats(kHv, 6, s);
    const DeviceBuffer norm = random_floats(kD, 7, s);
    DeviceBuffer conv_out(kChannels * sizeof(float)), out(kHv * kD * sizeof(float));
    const DeltaNetWeights w{.a = a.as<float>(), .dt_bias = dt.as<float>(), .norm = norm.as<float>()};
    const DeltaNetShape shape{.n_k_heads = kHk, .n_v_heads = kHv, .dk = kD, .dv = kD};
    const Graph graph = capture(s, [&] {
        for (int64_t l = 0; l < kLayers; ++l) {
            const auto i = static_cast<size_t>(l);
            conv_silu(conv_state[i].as<float>(), conv_w[i].as<float>(), x.as<float>(), kChannels, 1,
                      kChannels, kKernel, conv_out.as<float>(), s);
            delta_net(S[i].as<float>(), conv_out.as<float>(), b.as<float>(), alpha.as<float>(), z.as<float>(),
                      w, shape, 1, out.as<float>(), nullptr, 0, s, DeltaNetMethod::sequential);
        }
    });
    const float ms = time_ms(s, 2, reps, [&] { graph.launch(s); });
    if (state_bytes != nullptr)
        *state_bytes = static_cast<uint64_t>((kKernel - 1) * kChannels + kHv * kD * kD) * sizeof(float);
    return static_cast<double>(ms) * 1e-3 / kLayers;
}

namespace {

// Every block passes `iterations` grid-wide barriers. Thread 0 of a block reads the generation, then
// arrives; the last of gridDim.x arrivals resets the count and advances the generation, the others
// spin until it moves. The fences order the reset before the release and each block's earlier
// writes before its arrival (what a persistent kernel's phases would rely on).
__global__ void __launch_bounds__(256)
    grid_barrier_kernel(unsigned* count, unsigned* generation, int iterations) {
    volatile unsigned* gen = generation;
    for (int i = 0; i < iterations; ++i) {
        __syncthreads();
        if (threadIdx.x == 0) {
            const unsigned g = *gen;
            __threadfence();
            if (atomicAdd(count, 1u) == gridDim.x - 1) {
                *count = 0;
                __threadfence();
                atomicAdd(generation, 1u);
            } else {
                while (*gen == g) {
                }
            }
            __threadfence();
        }
        __syncthreads();
    }
}

}  // namespace

double probe_grid_barrier_s(int blocks_per_sm, int iterations, int reps) {
    if (blocks_per_sm < 1 || iterations < 2)
        fail("grid barrier probe: {} blocks per SM, {} barriers", blocks_per_sm, iterations);
    MOX_CUDA_CHECK(cudaSetDevice(0));
    int dev = 0, coop = 0, sms = 0, fit = 0;
    MOX_CUDA_CHECK(cudaGetDevice(&dev));
    MOX_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop) fail("grid barrier probe: the device has no cooperative launch");
    MOX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    MOX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, grid_barrier_kernel, 256, 0));
    if (blocks_per_sm > fit) fail("grid barrier probe: {} blocks per SM, {} fit", blocks_per_sm, fit);
    Stream stream;
    const cudaStream_t s = stream.handle();
    DeviceBuffer words(2 * sizeof(unsigned));
    words.zero(s);  // on the probe's stream: a non-blocking stream does not wait for the default one
    unsigned* count = words.as<unsigned>();
    unsigned* generation = count + 1;
    const auto launch = [&](int n) {
        void* args[] = {&count, &generation, &n};
        MOX_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(grid_barrier_kernel),
                                                   dim3(static_cast<unsigned>(sms * blocks_per_sm)),
                                                   dim3(256), args, 0, s));
    };
    const float one = time_ms(s, 1, reps, [&] { launch(1); });
    const float many = time_ms(s, 1, reps, [&] { launch(iterations); });
    return static_cast<double>(many - one) * 1e-3 / (iterations - 1);
}

}  // namespace mox::cuda
