// The expert cache on the GPU: the MoE decode kernels reading experts through pool views (uniform
// slots, ops::Weight::expert_bytes) and the slot table; a hybrid model decoding with the cache against
// the same model without it; routing replay on the GPU against the CPU's.
#include "cuda_test_util.h"
#include "expert_stack.h"

#include "gguf/reader.h"
#include "models/expert_cache_policy.h"
#include "models/model.h"
#include "models/synth.h"
#include "ops/cuda_expert_cache.h"
#include "ops/cuda_moe.h"

#include <unistd.h>
#include <algorithm>
#include <deque>
#include <filesystem>
#include <functional>
#include <numeric>
#include <string>

namespace mox {

namespace {

using cuda::test::HostStack;
using cuda::test::make_stack;
using quant::TypeId;

size_t align256(size_t v) {
    return (v + 255) / 256 * 256;
}

// Experts of packed stacks scattered into uniform slots of a device pool (slot s = expert
// expert_of_slot[s]); the same kernels on both must give the same bits.
void check_pool_views(TypeId gu_type, TypeId down_type, int64_t n_embd, int64_t n_ff, int64_t n_expert,
                      int64_t k, cuda::MoeDecodePath path) {
    SCOPED_TRACE(
        fmt::format("{} / {} {}x{}", quant::type_name(gu_type), quant::type_name(down_type), n_embd, n_ff));
    HostStack gate = make_stack(gu_type, n_embd, n_ff, n_expert, 1, 0.05f);
    HostStack up = make_stack(gu_type, n_embd, n_ff, n_expert, 2, 0.05f);
    HostStack down = make_stack(down_type, n_ff, n_embd, n_expert, 3, 0.05f);
    const auto x = cuda::test::randn(static_cast<size_t>(n_embd), 4);
    cuda::Stream stream;
    const cuda::StreamHandle st = stream.handle();
    cuda::DeviceWeight dg = cuda::upload_weight(gate.w, st), du = cuda::upload_weight(up.w, st),
                       dd = cuda::upload_weight(down.w, st);

    // Slots with room to spare (a larger layer's experts would fit), experts in reverse order, one
    // slot of zeros at the end.
    const size_t g = static_cast<size_t>(n_ff) * gate.w.row_bytes,
                 d = static_cast<size_t>(n_embd) * down.w.row_bytes;
    const size_t up_at = align256(g + 16 + 512), down_at = up_at + align256(g + 16 + 512);
    const size_t slot_bytes = down_at + align256(d + 16 + 1024);
    const int64_t n_slots = n_expert + 1;
    cuda::DeviceBuffer pool(static_cast<size_t>(n_slots) * slot_bytes);
    pool.zero(st);
    std::vector<int32_t> table(static_cast<size_t>(n_expert));
    for (int64_t e = 0; e < n_expert; ++e) {
        const int64_t s = n_expert - 1 - e;
        table[static_cast<size_t>(e)] = static_cast<int32_t>(s);
        auto* dst = pool.as<uint8_t>() + static_cast<size_t>(s) * slot_bytes;
        cuda::copy_to_device(dst, gate.w.expert(e).data, g, st);
        cuda::copy_to_device(dst + up_at, up.w.expert(e).data, g, st);
        cuda::copy_to_device(dst + down_at, down.w.expert(e).data, d, st);
    }
    ops::Weight pg = gate.w, pu = up.w, pd = down.w;
    pg.data = pool.as<uint8_t>();
    pu.data = pool.as<uint8_t>() + up_at;
    pd.data = pool.as<uint8_t>() + down_at;
    for (ops::Weight* w : {&pg, &pu, &pd}) {
        w->n_expert = n_slots;
        w->expert_bytes = slot_bytes;
    }

    std::vector<int32_t> ids(static_cast<size_t>(k));
    std::vector<float> weights(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) {
        ids[static_cast<size_t>(i)] = static_cast<int32_t>((3 * i + 1) % n_expert);
        weights[static_cast<size_t>(i)] = 0.1f + 0.05f * static_cast<float>(i);
    }
    cuda::DeviceBuffer d_x = cuda::test::to_device(x), d_ids = cuda::test::to_device(ids),
                       d_w = cuda::test::to_device(weights), d_table = cuda::test::to_device(table);
    cuda::device_synchronize();  // the uploads ran on the default stream, which `st` does not wait for
    cuda::DeviceBuffer h(static_cast<size_t>(k * n_ff) * 4), out(static_cast<size_t>(n_embd) * 4);
    cuda::DeviceBuffer slot_ids(static_cast<size_t>(k) * 4), slot_w(static_cast<size_t>(k) * 4);
    auto run = [&](const ops::Weight& wg, const ops::Weight& wu, const ops::Weight& wd, const int32_t* i,
                   const float* w) {
        cuda::moe_gate_up(wg, wu, i, k, d_x.as<float>(), h.as<float>(), st, nullptr, path);
        cuda::moe_down(wd, i, w, k, h.as<float>(), out.as<float>(), st, nullptr, path);
        stream.synchronize();
        return cuda::test::to_host<float>(out, static_cast<size_t>(n_embd));
    };
    const std::vector<float> packed = run(dg.view, du.view, dd.view, d_ids.as<int32_t>(), d_w.as<float>());
    cuda::expert_cache_lookup(d_table.as<int32_t>(), d_ids.as<int32_t>(), d_w.as<float>(), k,
                              static_cast<int32_t>(n_expert), slot_ids.as<int32_t>(), slot_w.as<float>(), st);
    EXPECT_EQ(run(pg, pu, pd, slot_ids.as<int32_t>(), slot_w.as<float>()), packed);

    // Half the experts absent: they go to the zero slot with weight 0, which adds exactly nothing; the
    // packed stacks with those weights set to 0 give the same bits.
    std::vector<float> kept = weights;
    for (int64_t e = 0; e < n_expert; e += 2) table[static_cast<size_t>(e)] = -1;
    for (int64_t i = 0; i < k; ++i)
        if (table[static_cast<size_t>(ids[static_cast<size_t>(i)])] < 0) kept[static_cast<size_t>(i)] = 0;
    cuda::DeviceBuffer d_table2 = cuda::test::to_device(table), d_kept = cuda::test::to_device(kept);
    cuda::device_synchronize();
    const std::vector<float> partial =
        run(dg.view, du.view, dd.view, d_ids.as<int32_t>(), d_kept.as<float>());
    cuda::expert_cache_lookup(d_table2.as<int32_t>(), d_ids.as<int32_t>(), d_w.as<float>(), k,
                              static_cast<int32_t>(n_expert), slot_ids.as<int32_t>(), slot_w.as<float>(), st);
    stream.synchronize();
    EXPECT_EQ(cuda::test::to_host<float>(slot_w, static_cast<size_t>(k)), kept);
    EXPECT_EQ(run(pg, pu, pd, slot_ids.as<int32_t>(), slot_w.as<float>()), partial);
}

// First in, first out: every miss enters, the oldest resident leaves. The mechanism's test needs
// no cleverness (the policies have their own tests in tests/place).
class FifoPolicy final : public models::ExpertCachePolicy {
public:
    std::string name() const override { return "fifo"; }
    void reset(int64_t, int64_t) override { order_.clear(); }
    void access(models::ExpertKey, bool) override {}
    void end_token() override {}
    bool admit(models::ExpertKey) override { return true; }
    models::ExpertKey victim() override { return order_.front(); }
    void admitted(models::ExpertKey key) override { order_.push_back(key); }
    void evicted(models::ExpertKey key) override {
        order_.erase(std::find(order_.begin(), order_.end(), key));
    }

private:
    std::deque<models::ExpertKey> order_;
};

std::string tiny_model() {
    const std::string p = (std::filesystem::temp_directory_path() /
                           ("mox_cuda_cache_test_" + std::to_string(getpid()) + ".gguf"))
                              .string();
    models::SynthOptions o;
    o.hparams = models::synth_preset("tiny");
    o.hparams.n_layer = 4;
    o.mix = models::QuantMix::q8_0;
    o.seed = 5;
    models::write_synthetic_model(p, o);
    return p;
}

// Greedy decode of `steps` tokens after a prompt (or the tokens of `force`); every step's logits.
std::vector<std::vector<float>> decode(models::Model& model, int steps,
                                       std::vector<int32_t>* tokens = nullptr,
                                       const std::vector<int32_t>* force = nullptr) {
    auto st = model.new_state({.n_ctx = 128});
    const std::vector<int32_t> prompt = {5, 17, 250, 3, 99, 41};
    std::vector<float> logits;
    models::SequenceBatch b{st.get(), prompt};
    model.forward(std::span(&b, 1), false, logits);
    std::vector<std::vector<float>> out{logits};
    for (int i = 0; i < steps; ++i) {
        auto next =
            force ? (*force)[static_cast<size_t>(i)]
                  : static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        if (tokens) tokens->push_back(next);
        models::SequenceBatch d{st.get(), std::span<const int32_t>(&next, 1)};
        model.forward(std::span(&d, 1), false, logits);
        out.push_back(logits);
    }
    return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    float m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return m;
}

}  // namespace

TEST(CudaExpertCache, PoolViewsGiveThePackedStacksBits) {
    MOX_REQUIRE_CUDA_DEVICE();
    check_pool_views(TypeId::q4_k, TypeId::q6_k, 2048, 512, 12, 8, cuda::MoeDecodePath::narrow);
    check_pool_views(TypeId::q8_0, TypeId::q8_0, 256, 96, 9, 4, cuda::MoeDecodePath::narrow);
    check_pool_views(TypeId::q4_k, TypeId::q4_k, 4096, 256, 6, 2, cuda::MoeDecodePath::wide);
}

TEST(CudaExpertCache, HybridDecodeWithTheCacheMatchesWithout) {
    MOX_REQUIRE_CUDA_DEVICE();
    const std::string path = tiny_model();
    {
        const gguf::File file = gguf::File::open(path);
        models::GpuOptions host;
        host.experts.assign(4, models::ExpertHome::mmap);
        std::vector<int32_t> want_tokens;
        std::vector<std::vector<float>> want;
        {
            models::Model plain(file, 2, quant::host_isa(), false, models::Device::cuda, host);
            want = decode(plain, 40, &want_tokens);
            EXPECT_FALSE(plain.expert_cache_stats().has_value());
        }
        // A pool of a third of the model's experts: hits, misses, admissions and evictions all happen.
        const models::Hparams hp = models::read_hparams(file);
        models::GpuOptions cached = host;
        cached.expert_cache_policy = std::make_shared<FifoPolicy>();
        const auto* t = file.find_tensor("blk.0.ffn_down_exps.weight");
        ASSERT_NE(t, nullptr);
        const uint64_t expert_bytes = 3 * t->n_bytes / static_cast<uint64_t>(hp.n_expert);
        cached.expert_cache_bytes = expert_bytes * static_cast<uint64_t>(4 * hp.n_expert / 3);
        models::Model model(file, 2, quant::host_isa(), false, models::Device::cuda, cached);
        // The same tokens in (which experts the GPU computes depends on when copies land, so a
        // near-tie of this random model's logits could otherwise pick another token and diverge).
        const std::vector<std::vector<float>> got = decode(model, 40, nullptr, &want_tokens);
        float worst = 0, scale = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            worst = std::max(worst, max_abs_diff(got[i], want[i]));
            for (float v : want[i]) scale = std::max(scale, std::abs(v));
        }
        // Greedy agrees wherever the reference's best token leads its runner-up by more than twice the
        // difference the two paths showed.
        for (size_t i = 0; i < got.size(); ++i) {
            std::vector<float> sorted = want[i];
            std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
            if (sorted[0] - sorted[1] <= 2 * worst) continue;
            const auto best = [](const std::vector<float>& v) {
                return std::max_element(v.begin(), v.end()) - v.begin();
            };
            EXPECT_EQ(best(got[i]), best(want[i])) << "step " << i;
        }
        // The GPU's and the CPU's expert kernels round differently (the CPU quantizes activations to
        // Q8), and 40 steps of recurrent state carry it: the bound tests/py/test_hybrid.py holds the
        // CPU hand-off's decode to.
        EXPECT_LT(worst, 5e-2f * scale) << "max |diff| " << worst << " of logits up to " << scale;
        const std::optional<models::ExpertCacheStats> s = model.expert_cache_stats();
        ASSERT_TRUE(s.has_value());
        EXPECT_EQ(s->tokens, 40);
        EXPECT_EQ(s->hits + s->misses, 40 * 4 * hp.n_expert_used);
        EXPECT_GT(s->hits, 0);
        EXPECT_GT(s->misses, 0);
        EXPECT_GT(s->evictions, 0);
        EXPECT_LT(s->slots, 4 * hp.n_expert);
    }
    std::filesystem::remove(path);
}

TEST(CudaExpertCache, APoolSmallerThanATokensSelectionStillMatches) {
    MOX_REQUIRE_CUDA_DEVICE();
    const std::string path = tiny_model();
    {
        const gguf::File file = gguf::File::open(path);
        const models::Hparams hp = models::read_hparams(file);
        models::GpuOptions host;
        host.experts.assign(4, models::ExpertHome::mmap);
        std::vector<int32_t> want_tokens, got_tokens;
        std::vector<std::vector<float>> want;
        {
            models::Model plain(file, 2, quant::host_isa(), false, models::Device::cuda, host);
            want = decode(plain, 16, &want_tokens);
        }
        // Three slots for top-8 over four layers: most selections miss, admissions evict every token.
        models::GpuOptions cached = host;
        cached.expert_cache_policy = std::make_shared<FifoPolicy>();
        const auto* t = file.find_tensor("blk.0.ffn_down_exps.weight");
        ASSERT_NE(t, nullptr);
        const uint64_t slot = 3 * (t->n_bytes / static_cast<uint64_t>(hp.n_expert)) + 3 * 512;
        cached.expert_cache_bytes = 4 * slot;
        models::Model model(file, 2, quant::host_isa(), false, models::Device::cuda, cached);
        const std::vector<std::vector<float>> got = decode(model, 16, nullptr, &want_tokens);
        float worst = 0, scale = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            worst = std::max(worst, max_abs_diff(got[i], want[i]));
            for (float v : want[i]) scale = std::max(scale, std::abs(v));
        }
        EXPECT_LT(worst, 5e-2f * scale);
        const std::optional<models::ExpertCacheStats> s = model.expert_cache_stats();
        ASSERT_TRUE(s.has_value());
        EXPECT_LT(s->slots, hp.n_expert_used);  // fewer slots than one token selects in one layer
        EXPECT_EQ(s->hits + s->misses, 16 * 4 * hp.n_expert_used);
        EXPECT_GT(s->evictions, 0);
    }
    std::filesystem::remove(path);
}

TEST(CudaExpertCache, TooSmallACacheIsAClearError) {
    MOX_REQUIRE_CUDA_DEVICE();
    const std::string path = tiny_model();
    {
        const gguf::File file = gguf::File::open(path);
        models::GpuOptions o;
        o.experts.assign(4, models::ExpertHome::mmap);
        o.expert_cache_policy = std::make_shared<FifoPolicy>();
        o.expert_cache_bytes = 4096;
        try {
            models::Model model(file, 2, quant::host_isa(), false, models::Device::cuda, o);
            ADD_FAILURE() << "a 4 KiB pool was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("smaller than two expert slots"), std::string::npos)
                << e.what();
        }
    }
    std::filesystem::remove(path);
}

TEST(CudaExpertCache, ReplayOnTheGpuRunsTheTracesExperts) {
    MOX_REQUIRE_CUDA_DEVICE();
    const std::string path = tiny_model();
    {
        const gguf::File file = gguf::File::open(path);
        const models::Hparams hp = models::read_hparams(file);
        auto trace = std::make_shared<models::RoutingTrace>();
        trace->arch = hp.arch_name();
        trace->n_expert = hp.n_expert;
        trace->k = hp.n_expert_used;
        for (int64_t il = 0; il < hp.n_trunk(); ++il) trace->layers.push_back(static_cast<int32_t>(il));
        trace->n_tokens = 5;
        for (int64_t t = 0; t < trace->n_tokens; ++t)
            for (int64_t il = 0; il < hp.n_trunk(); ++il)
                for (int64_t i = 0; i < trace->k; ++i)
                    trace->ids.push_back(static_cast<uint16_t>((7 * t + 3 * i + il) % hp.n_expert));
        models::Model cpu(file, 2);
        cpu.set_routing_replay(trace);
        std::vector<int32_t> tokens;
        const auto want = decode(cpu, 12, &tokens);
        // On the GPU alone, and with the experts in host memory (the hand-off and its cache).
        models::GpuOptions host;
        host.experts.assign(4, models::ExpertHome::mmap);
        for (const models::GpuOptions& o : {models::GpuOptions{}, host}) {
            models::Model gpu(file, 2, quant::host_isa(), false, models::Device::cuda, o);
            gpu.set_routing_replay(trace);
            const auto got = decode(gpu, 12, nullptr, &tokens);
            float worst = 0, scale = 0;
            for (size_t i = 0; i < got.size(); ++i) {
                worst = std::max(worst, max_abs_diff(got[i], want[i]));
                for (float v : want[i]) scale = std::max(scale, std::abs(v));
            }
            EXPECT_LT(worst, 5e-2f * scale) << "host experts: " << !o.experts.empty();
        }
    }
    std::filesystem::remove(path);
}

}  // namespace mox
