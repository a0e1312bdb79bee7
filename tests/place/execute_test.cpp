// Which placements the GPU forward executes (place/execute.h), on a small synthetic qwen35moe file.
#include "place/execute.h"
#include "core/error.h"
#include "gguf/reader.h"
#include "models/hparams.h"
#include "models/synth.h"
#include "place/flags.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <string>

namespace mox::place {

namespace {

const gguf::File& model() {
    static const std::string path = [] {
        const std::string p = (std::filesystem::temp_directory_path() /
                               ("mox_execute_test_" + std::to_string(getpid()) + ".gguf"))
                                  .string();
        models::SynthOptions o;
        o.hparams = models::synth_preset("tiny");
        o.seed = 5;
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

models::Hparams hp() { return models::read_hparams(model()); }

std::string error_of(const Placement& p) {
    try {
        gpu_options_for(p, hp());
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(PlaceExecute, AllOnGpuKeepsTheEmbeddingOnTheHost) {
    const models::GpuOptions o = gpu_options_for(all_on_gpu(model()), hp());
    ASSERT_EQ(static_cast<int64_t>(o.experts.size()), hp().n_trunk());
    for (models::ExpertHome h : o.experts) EXPECT_EQ(h, models::ExpertHome::gpu);
    EXPECT_FALSE(o.token_embd_on_gpu);  // llama.cpp's -ngl all: the row lookup stays on the CPU
    Placement everything = Placement::uniform(model(), Tier::gpu);
    EXPECT_TRUE(gpu_options_for(everything, hp()).token_embd_on_gpu);
}

TEST(PlaceExecute, ExpertFlagsBecomeExpertHomes) {
    const int64_t n = hp().n_trunk();
    PlacementFlags f{.n_gpu_layers = -1, .overrides = n_cpu_moe_rules(2, hp().n_layer)};
    for (auto& r : parse_override_tensor("blk\\.3\\.ffn_.*_exps=pinned_host")) f.overrides.insert(f.overrides.begin(), r);
    const models::GpuOptions o = gpu_options_for(place_from_flags(model(), f), hp());
    ASSERT_EQ(static_cast<int64_t>(o.experts.size()), n);
    EXPECT_EQ(o.experts[0], models::ExpertHome::mmap);
    EXPECT_EQ(o.experts[1], models::ExpertHome::mmap);
    EXPECT_EQ(o.experts[2], models::ExpertHome::gpu);
    EXPECT_EQ(o.experts[3], models::ExpertHome::pinned);
    for (int64_t l = 4; l < n; ++l) EXPECT_EQ(o.experts[static_cast<size_t>(l)], models::ExpertHome::gpu);
}

TEST(PlaceExecute, WholeLayersOnTheCpuAreRefusedByName) {
    // -ngl 2: the output layer and the last block on the GPU, the other blocks' tensors on the host.
    const std::string why = error_of(place_from_flags(model(), {.n_gpu_layers = 2, .overrides = {}}));
    EXPECT_NE(why.find("blk.0."), std::string::npos) << why;
    EXPECT_NE(why.find("layers on the CPU are not supported"), std::string::npos) << why;
    // -ngl 0 leaves even the output layer on the host.
    EXPECT_NE(error_of(place_from_flags(model(), {.n_gpu_layers = 0, .overrides = {}})), "");
}

TEST(PlaceExecute, ExpertsSplitWithinALayerAreRefused) {
    Placement p = all_on_gpu(model());
    p.set_expert_tier(1, 0, Tier::mmap_host);
    const std::string why = error_of(p);
    EXPECT_NE(why.find("layer 1"), std::string::npos) << why;
    EXPECT_NE(why.find("split"), std::string::npos) << why;
}

TEST(PlaceExecute, LayerCountMustMatch) {
    models::Hparams other = hp();
    other.n_layer += 1;
    EXPECT_THROW(gpu_options_for(all_on_gpu(model()), other), Error);
}

}  // namespace mox::place
