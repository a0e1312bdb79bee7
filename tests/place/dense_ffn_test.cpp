// A dense model's FFNs as placement units (place/placement.h): each layer's ffn_gate/up/down is a
// stack of one expert, moved by -ot rules as a whole, executed as a host layer by the GPU forward,
// and costed like routed experts by the memory model. On a small synthetic dense qwen35 file.
#include "core/error.h"
#include "gguf/reader.h"
#include "models/gpu_memory.h"
#include "models/hparams.h"
#include "models/synth.h"
#include "place/execute.h"
#include "place/flags.h"
#include "place/memory.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <string>

namespace mox::place {

namespace {

const gguf::File& model() {
    static const std::string path = [] {
        const std::string p = (std::filesystem::temp_directory_path() /
                               ("mox_dense_ffn_test_" + std::to_string(getpid()) + ".gguf"))
                                  .string();
        models::SynthOptions o;
        o.hparams = models::synth_preset("qwen35-tiny");
        o.mix = models::QuantMix::q8_0;
        o.seed = 3;
        o.threads = 1;
        models::write_synthetic_model(p, o);
        return p;
    }();
    static const gguf::File file = gguf::File::open(path);
    static const struct Remover {
        ~Remover() { std::filesystem::remove(path); }
    } remover;
    return file;
}

models::Hparams hp() {
    return models::read_hparams(model());
}

Placement with_rules(const std::string& ot) {
    return place_from_flags(model(), {.n_gpu_layers = -1, .overrides = parse_override_tensor(ot)});
}

}  // namespace

TEST(DenseFfnPlacement, EachLayersFfnIsOneExpert) {
    const Placement p = Placement::uniform(model(), Tier::gpu);
    EXPECT_TRUE(p.dense_ffn());
    EXPECT_EQ(p.n_expert(), 1);
    for (int64_t l = 0; l < hp().n_trunk(); ++l) {
        ASSERT_TRUE(p.has_experts(l));
        uint64_t ffn = 0;
        for (const char* part : {"gate", "up", "down"})
            ffn += model().find_tensor(fmt::format("blk.{}.ffn_{}.weight", l, part))->n_bytes;
        EXPECT_EQ(p.expert_bytes(l), ffn);
    }
}

TEST(DenseFfnPlacement, OverrideRulesMoveWholeFfns) {
    const Placement p = with_rules("blk\\.[01]\\.ffn_=CPU");
    const models::GpuOptions o = gpu_options_for(p, hp());
    ASSERT_EQ(static_cast<int64_t>(o.experts.size()), hp().n_trunk());
    EXPECT_EQ(o.experts[0], models::ExpertHome::mmap);
    EXPECT_EQ(o.experts[1], models::ExpertHome::mmap);
    for (int64_t l = 2; l < hp().n_trunk(); ++l)
        EXPECT_EQ(o.experts[static_cast<size_t>(l)], models::ExpertHome::gpu);
    // The mixers stay on the GPU: only the three FFN matrices of layers 0 and 1 left it.
    EXPECT_EQ(p.tier_of("blk.0.attn_qkv.weight"), Tier::gpu);
    EXPECT_EQ(p.tier_of("blk.0.post_attention_norm.weight"), Tier::gpu);
}

TEST(DenseFfnPlacement, HalfAnFfnIsRefused) {
    EXPECT_THROW(with_rules("blk\\.0\\.ffn_down=CPU"), Error);
}

TEST(DenseFfnPlacement, ExpertFlagsAreRefusedByName) {
    const int64_t n = hp().n_layer;
    for (const auto& rules : {std::vector<OverrideRule>{cpu_moe_rule()}, n_cpu_moe_rules(2, n)}) {
        try {
            place_from_flags(model(), {.n_gpu_layers = -1, .overrides = rules});
            ADD_FAILURE() << rules.front().origin << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("dense model"), std::string::npos) << e.what();
        }
    }
}

TEST(DenseFfnPlacement, HostFfnsAddStagingAndHandOffBuffers) {
    const models::Hparams h = hp();
    const Placement p = with_rules("blk\\.[01]\\.ffn_=CPU");
    const Placement all = place_from_flags(model(), {.n_gpu_layers = -1, .overrides = {}});
    const CacheOptions cache{.n_ctx = 512};
    const MemoryPrediction m = predict_memory(p, h, cache, {}, {.n_ubatch = 64});
    const MemoryPrediction a = predict_memory(all, h, cache, {}, {.n_ubatch = 64});
    const auto ffn = [&](int64_t l, const char* part) {
        return model().find_tensor(fmt::format("blk.{}.ffn_{}.weight", l, part))->n_bytes;
    };
    EXPECT_EQ(m.buffers.staging, 2 * models::gpu_staging_bytes(ffn(0, "gate"), ffn(0, "up"), ffn(0, "down")));
    // Hand-off: hidden states in and out, and the routing of one expert per token.
    EXPECT_EQ(m.buffers.pinned_host - a.buffers.pinned_host,
              2 * 64 * static_cast<uint64_t>(h.n_embd) * 4 + 2 * 64 * 4);
    EXPECT_EQ(m.gpu_total() + (m.weights[Tier::mmap_host] - a.weights[Tier::mmap_host]),
              a.gpu_total() + m.buffers.staging + (m.buffers.matmul_scratch - a.buffers.matmul_scratch));
    EXPECT_GE(m.buffers.matmul_scratch, a.buffers.matmul_scratch);  // the streamed FFN's batched product
}

}  // namespace mox::place
