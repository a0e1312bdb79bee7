// Memory prediction of a placement: KV and DeltaNet-state bytes agree with models::summarize (the
// numbers `mox inspect` prints) and with the buffers the CPU forward allocates; totals add up.
#include "place/memory.h"
#include "core/error.h"
#include "gguf/reader.h"
#include "models/model.h"
#include "models/summary.h"
#include "models/synth.h"
#include "place/flags.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <string>

namespace mox::place {

namespace {

// A tiny synthetic model per process (ctest runs cases as parallel processes); n_nextn MTP blocks at
// the end (the trunk never runs them).
std::string write_model(int64_t n_nextn, const char* preset = "tiny") {
    const std::string p = (std::filesystem::temp_directory_path() /
                           fmt::format("mox_place_memory_test_{}_{}_{}.gguf", getpid(), n_nextn, preset))
                              .string();
    models::SynthOptions o;
    o.hparams = models::synth_preset(preset);
    o.hparams.n_nextn = n_nextn;
    o.mix = models::QuantMix::q8_0;
    o.seed = 5;
    o.threads = 1;
    models::write_synthetic_model(p, o);
    return p;
}

struct TempModel {
    std::string path;
    gguf::File file;
    explicit TempModel(int64_t n_nextn, const char* preset = "tiny")
        : path(write_model(n_nextn, preset)), file(gguf::File::open(path)) {}
    ~TempModel() { std::filesystem::remove(path); }
};

const gguf::File& model() {
    static const TempModel m(0);
    return m.file;
}

double summary_kv_per_token(const models::ModelSummary& s, const std::string& type) {
    for (const auto& kv : s.kv)
        if (kv.type == type) return kv.bytes_per_token;
    ADD_FAILURE() << "summary has no KV row for " << type;
    return 0;
}

}  // namespace

// A model without DeltaNet layers (qwen3moe): no state, every layer's KV cache, the buffers sized
// for attention alone (the DeltaNet projections have no shapes to size scratch for).
TEST(PlaceMemory, AttentionOnlyModelHasNoStateAndItsOwnBuffers) {
    static const TempModel q3(0, "qwen3moe-tiny");
    const models::Hparams hp = models::read_hparams(q3.file);
    ASSERT_EQ(hp.arch, models::Arch::qwen3moe);
    const models::ModelSummary s = models::summarize(q3.file);
    const Placement p = place_from_flags(q3.file, {.n_gpu_layers = -1, .overrides = {}});
    const CacheOptions cache{.n_ctx = 1000, .k_type = quant::TypeId::f16, .v_type = quant::TypeId::f16};
    const MemoryPrediction m = predict_memory(p, hp, cache);
    EXPECT_EQ(static_cast<double>(m.kv_gpu), summary_kv_per_token(s, "f16") * 1000.0);
    EXPECT_EQ(m.kv_gpu, 1000u * hp.n_layer * 2 * hp.n_head_kv * hp.head_dim_k * 2);
    EXPECT_EQ(m.state_gpu, 0u);
    EXPECT_EQ(m.attention_layers_gpu, hp.n_layer);
    EXPECT_EQ(m.recurrent_layers_gpu, 0);
    EXPECT_GT(m.buffers.activations, 0u);
    EXPECT_GT(m.buffers.matmul_scratch, 0u);
    // The same model with Qwen3.5's gated attention would need twice the q projection rows.
    models::Hparams gated = hp;
    gated.arch = models::Arch::qwen35moe;
    gated.full_attn_interval = 1;
    EXPECT_EQ(gated.q_proj_rows(), 2 * hp.q_proj_rows());
}

TEST(PlaceMemory, AllOnGpuMatchesTheSummary) {
    const models::Hparams hp = models::read_hparams(model());
    const models::ModelSummary s = models::summarize(model());
    const Placement p = place_from_flags(model(), {.n_gpu_layers = -1, .overrides = {}});
    for (const char* type : {"f16", "q8_0", "q4_0"}) {
        SCOPED_TRACE(type);
        const quant::TypeId t = *quant::type_from_name(type);
        const CacheOptions cache{.n_ctx = 1000, .k_type = t, .v_type = t};
        const MemoryPrediction m = predict_memory(p, hp, cache);
        EXPECT_EQ(static_cast<double>(m.kv_gpu), summary_kv_per_token(s, type) * 1000.0);
        EXPECT_EQ(m.kv_host, 0u);
        EXPECT_EQ(m.state_gpu, s.recurrent_state_bytes);
        EXPECT_EQ(m.state_host, 0u);
        EXPECT_EQ(m.attention_layers_gpu, hp.n_attention_layers());
        EXPECT_EQ(m.recurrent_layers_gpu, hp.n_recurrent_layers());
        EXPECT_TRUE(m.gpu_used);
        EXPECT_EQ(m.gpu_total(), m.weights[Tier::gpu] + m.kv_gpu + m.state_gpu + m.buffers.device_total() +
                                     m.allowance.cuda_context_bytes);
        // Nothing streams when every expert is on the GPU; the activations are there.
        EXPECT_EQ(m.buffers.staging, 0u);
        EXPECT_GT(m.buffers.activations, 0u);
        // token_embd stays on the host (llama.cpp's input layer): the page cache holds exactly it.
        EXPECT_EQ(m.host_page_cache(), model().find_tensor("token_embd.weight")->n_bytes);
        EXPECT_EQ(m.weights.total(), p.total_bytes());
    }
}

TEST(PlaceMemory, KvEqualsTheForwardsBuffers) {
    // The CPU forward's state allocates one K and one V buffer per attention layer: their sizes are
    // the reference for a mixed K/V type pair.
    const models::Hparams hp = models::read_hparams(model());
    models::Model fwd(model(), 1);
    const models::StateOptions so{.n_ctx = 96, .k_type = quant::TypeId::q8_0, .v_type = quant::TypeId::f16};
    const auto state = fwd.new_state(so);
    const MemoryPrediction m =
        predict_memory(Placement::uniform(model(), Tier::mmap_host), hp,
                       {.n_ctx = 96, .k_type = quant::TypeId::q8_0, .v_type = quant::TypeId::f16});
    EXPECT_EQ(m.kv_host + m.state_host, state->bytes());
}

TEST(PlaceMemory, NothingOnTheGpuCostsNoGpuMemory) {
    const models::Hparams hp = models::read_hparams(model());
    const Placement p = place_from_flags(model(), {});
    const MemoryPrediction m = predict_memory(p, hp, {.n_ctx = 512});
    EXPECT_FALSE(m.gpu_used);
    EXPECT_EQ(m.gpu_total(), 0u);
    EXPECT_EQ(m.host_page_cache(), p.total_bytes());
    EXPECT_EQ(m.host_locked(), 0u);
    EXPECT_EQ(m.host_ram(), m.kv_total() + m.state_total());
    EXPECT_EQ(m.host_total(), p.total_bytes() + m.kv_total() + m.state_total());
}

TEST(PlaceMemory, CacheFollowsTheLayersMixer) {
    const models::Hparams hp = models::read_hparams(model());
    // -ngl 2: block 7 (full attention, (7+1) % 4 == 0) and the output layer on the GPU.
    ASSERT_FALSE(hp.is_recurrent(7));
    const Placement p = place_from_flags(model(), {.n_gpu_layers = 2, .overrides = {}});
    const CacheOptions cache{.n_ctx = 256};
    const MemoryPrediction m = predict_memory(p, hp, cache);
    const MemoryPrediction all = predict_memory(Placement::uniform(model(), Tier::gpu), hp, cache);
    EXPECT_EQ(m.attention_layers_gpu, 1);
    EXPECT_EQ(m.attention_layers_host, hp.n_attention_layers() - 1);
    EXPECT_EQ(m.kv_gpu * static_cast<uint64_t>(hp.n_attention_layers()), all.kv_gpu);
    EXPECT_EQ(m.kv_gpu + m.kv_host, all.kv_gpu);
    EXPECT_EQ(m.state_gpu, 0u);
    EXPECT_EQ(m.state_host, all.state_gpu);
    // Pinned weights count as locked RAM, not page cache.
    const Placement pinned =
        place_from_flags(model(), {.overrides = parse_override_tensor("exps=pinned_host")});
    const MemoryPrediction mp = predict_memory(pinned, hp, cache);
    uint64_t exps = 0;
    for (const gguf::TensorInfo& t : model().tensors())
        if (t.name.find("_exps.") != std::string::npos) exps += t.n_bytes;
    EXPECT_EQ(mp.host_locked(), exps);
    EXPECT_EQ(mp.host_page_cache(), pinned.total_bytes() - exps);
    // Two sequences hold twice the cache.
    const MemoryPrediction two = predict_memory(p, hp, {.n_ctx = 256, .n_seq = 2});
    EXPECT_EQ(two.kv_total(), 2 * m.kv_total());
    EXPECT_EQ(two.state_total(), 2 * m.state_total());
}

TEST(PlaceMemory, BadCacheOptionsAreErrors) {
    const models::Hparams hp = models::read_hparams(model());
    const Placement p = Placement::uniform(model(), Tier::mmap_host);
    EXPECT_THROW(predict_memory(p, hp, {.n_ctx = 0}), Error);
    EXPECT_THROW(predict_memory(p, hp, {.n_ctx = hp.n_ctx_train + 1}), Error);
    EXPECT_THROW(predict_memory(p, hp, {.n_ctx = 16, .k_type = quant::TypeId::q4_k}),
                 Error);  // 256-blocks > head dim 64
    EXPECT_THROW(predict_memory(p, hp, {.n_ctx = 16, .v_type = quant::TypeId::i32}), Error);
    EXPECT_THROW(predict_memory(p, hp, {.n_ctx = 16, .n_seq = 0}), Error);
}

TEST(PlaceMemory, MtpBlocksCountForNglButHoldNoCache) {
    const TempModel m(1);  // 8 blocks: trunk 0..6, MTP block 7
    const models::Hparams hp = models::read_hparams(m.file);
    ASSERT_EQ(hp.n_trunk(), 7);
    // llama.cpp counts every block of block_count: -ngl 2 is the output layer and the MTP block.
    const Placement p = place_from_flags(m.file, {.n_gpu_layers = 2, .overrides = {}});
    EXPECT_TRUE(layer_view(p, 7).mtp);
    EXPECT_EQ(p.tier_of("blk.7.nextn.eh_proj.weight"), Tier::gpu);
    EXPECT_EQ(p.tier_of("blk.6.attn_norm.weight"), Tier::mmap_host);
    const MemoryPrediction mp = predict_memory(p, hp, {.n_ctx = 64});
    EXPECT_EQ(mp.kv_gpu + mp.state_gpu, 0u);
    // All on the GPU: the cache is the trunk's, as the summary counts it.
    const models::ModelSummary s = models::summarize(m.file);
    const MemoryPrediction all = predict_memory(Placement::uniform(m.file, Tier::gpu), hp, {.n_ctx = 64});
    EXPECT_EQ(static_cast<double>(all.kv_gpu), summary_kv_per_token(s, "f16") * 64.0);
    EXPECT_EQ(all.state_gpu, s.recurrent_state_bytes);
    EXPECT_EQ(all.attention_layers_gpu + all.recurrent_layers_gpu, 7);
}

TEST(PlaceMemory, HostExpertsAddStagingAndHandOffBuffers) {
    const models::Hparams hp = models::read_hparams(model());
    const std::vector<OverrideRule> rules = n_cpu_moe_rules(2, hp.n_layer);
    const Placement p = place_from_flags(model(), {.n_gpu_layers = -1, .overrides = rules});
    const Placement all = place_from_flags(model(), {.n_gpu_layers = -1, .overrides = {}});
    const CacheOptions cache{.n_ctx = 512};
    const MemoryPrediction m = predict_memory(p, hp, cache, {}, {.n_ubatch = 64});
    const MemoryPrediction a = predict_memory(all, hp, cache, {}, {.n_ubatch = 64});
    // Two staging buffers of the larger of the two host layers' stacks (each stack + 16 B, 256-aligned).
    uint64_t largest = 0;
    for (int64_t l = 0; l < 2; ++l) {
        const auto stack = [&](const char* part) {
            return model().find_tensor(fmt::format("blk.{}.ffn_{}_exps.weight", l, part))->n_bytes;
        };
        largest = std::max(largest, models::gpu_staging_bytes(stack("gate"), stack("up"), stack("down")));
    }
    EXPECT_EQ(m.buffers.staging, 2 * largest);
    EXPECT_EQ(m.buffers.activations, a.buffers.activations);
    // Hand-off: hidden states in and out for 64 tokens, and their routing, in pinned memory.
    EXPECT_EQ(m.buffers.pinned_host - a.buffers.pinned_host,
              2 * 64 * static_cast<uint64_t>(hp.n_embd) * 4 + 2 * 64 * static_cast<uint64_t>(hp.n_expert_used) * 4);
    // The experts that left the GPU, less the staging that streams them back, is the VRAM saved.
    EXPECT_EQ(m.gpu_total() + (m.weights[Tier::mmap_host] - a.weights[Tier::mmap_host]),
              a.gpu_total() + m.buffers.staging);
    // Micro-batches below the streaming threshold never stream: no staging.
    EXPECT_EQ(predict_memory(p, hp, cache, {}, {.n_ubatch = 16, .stream_min_tokens = 32}).buffers.staging, 0u);
    // Activations grow with the micro-batch.
    EXPECT_GT(predict_memory(p, hp, cache, {}, {.n_ubatch = 512}).buffers.activations, m.buffers.activations);
}

}  // namespace mox::place
