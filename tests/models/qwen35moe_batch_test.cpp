// Several sequences in one batch compute exactly what each computes alone, and state limits hold.
#include "core/error.h"
#include "gguf/reader.h"
#include "models/model.h"
#include "models/synth.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <unistd.h>

namespace mox::models {

namespace {

// One tiny synthetic model per test process (random weights; the math does not care). ctest runs
// test cases as parallel processes, so each gets its own file: one process must never rewrite a
// file another has mapped.
const std::string& tiny_model_path() {
    static const std::string path = [] {
        const std::string p =
            (std::filesystem::temp_directory_path() / ("mox_batch_test_tiny_" + std::to_string(getpid()) + ".gguf")).string();
        SynthOptions o;
        o.hparams = synth_preset("tiny");
        o.hparams.n_layer = 4;
        o.mix = QuantMix::q8_0;
        o.seed = 7;
        write_synthetic_model(p, o);
        return p;
    }();
    static const struct Remover {
        ~Remover() { std::filesystem::remove(path); }
    } remover;
    return path;
}

std::vector<int32_t> iota_tokens(int n, int start) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), start);
    return t;
}

}  // namespace

TEST(Qwen35MoeBatch, TwoSequencesInOneBatchEqualSeparateRuns) {
    const gguf::File file = gguf::File::open(tiny_model_path());
    Model model(file, 2);
    const StateOptions so{.n_ctx = 64, .k_type = quant::TypeId::q8_0, .v_type = quant::TypeId::f16};
    const auto a_tokens = iota_tokens(9, 5), b_tokens = iota_tokens(4, 300);

    std::vector<float> a_alone, b_alone;
    auto sa = model.new_state(so), sb = model.new_state(so);
    SequenceBatch a{sa.get(), a_tokens}, b{sb.get(), b_tokens};
    model.forward(std::span(&a, 1), true, a_alone);
    model.forward(std::span(&b, 1), true, b_alone);

    auto sa2 = model.new_state(so), sb2 = model.new_state(so);
    const SequenceBatch both[] = {{sa2.get(), a_tokens}, {sb2.get(), b_tokens}};
    std::vector<float> joint;
    model.forward(both, true, joint);
    const size_t V = static_cast<size_t>(model.n_vocab());
    ASSERT_EQ(joint.size(), (a_tokens.size() + b_tokens.size()) * V);
    for (size_t i = 0; i < a_alone.size(); ++i) ASSERT_EQ(joint[i], a_alone[i]) << i;
    for (size_t i = 0; i < b_alone.size(); ++i) ASSERT_EQ(joint[a_alone.size() + i], b_alone[i]) << i;

    // Continue both sequences by one token each in a joint decode step: equal to separate steps.
    const int32_t next_a = 11, next_b = 12;
    const SequenceBatch step[] = {{sa2.get(), std::span(&next_a, 1)}, {sb2.get(), std::span(&next_b, 1)}};
    std::vector<float> joint_step, a_step, b_step;
    model.forward(step, false, joint_step);
    SequenceBatch a1{sa.get(), std::span(&next_a, 1)}, b1{sb.get(), std::span(&next_b, 1)};
    model.forward(std::span(&a1, 1), false, a_step);
    model.forward(std::span(&b1, 1), false, b_step);
    ASSERT_EQ(joint_step.size(), 2 * V);
    for (size_t i = 0; i < V; ++i) {
        ASSERT_EQ(joint_step[i], a_step[i]);
        ASSERT_EQ(joint_step[V + i], b_step[i]);
    }
    EXPECT_EQ(sa2->n_past(), 10);
    EXPECT_EQ(sb2->n_past(), 5);
}

TEST(Qwen35MoeBatch, ContextOverflowIsAnErrorAndLeavesStateUntouched) {
    const gguf::File file = gguf::File::open(tiny_model_path());
    Model model(file, 1);
    auto s = model.new_state({.n_ctx = 8, .k_type = quant::TypeId::f16, .v_type = quant::TypeId::f16});
    const auto tokens = iota_tokens(6, 1);
    SequenceBatch b{s.get(), tokens};
    std::vector<float> logits;
    model.forward(std::span(&b, 1), false, logits);
    EXPECT_THROW(model.forward(std::span(&b, 1), false, logits), Error);  // 6 + 6 > 8
    EXPECT_EQ(s->n_past(), 6);
    const int32_t bad = static_cast<int32_t>(model.n_vocab());
    SequenceBatch c{s.get(), std::span(&bad, 1)};
    EXPECT_THROW(model.forward(std::span(&c, 1), false, logits), Error);
    EXPECT_EQ(s->n_past(), 6);
}

TEST(Qwen35MoeBatch, UnsupportedKvSettingsAreErrors) {
    const gguf::File file = gguf::File::open(tiny_model_path());
    Model model(file, 1);
    EXPECT_THROW(model.new_state({.n_ctx = 8, .k_type = quant::TypeId::q4_k, .v_type = quant::TypeId::f16}), Error);
    EXPECT_THROW(model.new_state({.n_ctx = 0, .k_type = quant::TypeId::f16, .v_type = quant::TypeId::f16}), Error);
    EXPECT_THROW(model.new_state({.n_ctx = 1 << 20, .k_type = quant::TypeId::f16, .v_type = quant::TypeId::f16}), Error);
}

TEST(Qwen35MoeBatch, ForwardArgmaxOnTheCpuReturnsTheLogits) {
    // The CPU path has no device arg max: forward_argmax is forward, and the caller scans the row.
    const gguf::File file = gguf::File::open(tiny_model_path());
    Model model(file, 2);
    const StateOptions so{.n_ctx = 64};
    auto s1 = model.new_state(so), s2 = model.new_state(so);
    const auto tokens = iota_tokens(5, 40);
    std::vector<float> want, got;
    SequenceBatch a{s1.get(), tokens}, b{s2.get(), tokens};
    model.forward(std::span(&a, 1), false, want);
    EXPECT_FALSE(model.forward_argmax(std::span(&b, 1), model.n_vocab(), got).has_value());
    EXPECT_EQ(got, want);
    EXPECT_EQ(s2->n_past(), 5);
    // Checked like forward: a token outside the vocabulary leaves the state as it was.
    const int32_t bad = static_cast<int32_t>(model.n_vocab());
    SequenceBatch c{s2.get(), std::span<const int32_t>(&bad, 1)};
    EXPECT_THROW(model.forward_argmax(std::span(&c, 1), model.n_vocab(), got), Error);
    EXPECT_EQ(s2->n_past(), 5);
}

}  // namespace mox::models
