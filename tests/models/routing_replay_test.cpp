// Routing replay on the CPU path: the experts that run are the trace's, the router's weights stay.
#include "core/error.h"
#include "gguf/reader.h"
#include "models/model.h"
#include "models/routing_trace.h"
#include "models/synth.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>

namespace mox::models {

namespace {

const std::string& tiny_model_path() {
    static const std::string path = [] {
        const std::string p = (std::filesystem::temp_directory_path() /
                               ("mox_replay_test_tiny_" + std::to_string(getpid()) + ".gguf"))
                                  .string();
        SynthOptions o;
        o.hparams = synth_preset("tiny");
        o.hparams.n_layer = 4;
        o.mix = QuantMix::q8_0;
        o.seed = 11;
        write_synthetic_model(p, o);
        return p;
    }();
    static const struct Remover {
        ~Remover() { std::filesystem::remove(path); }
    } remover;
    return path;
}

std::vector<int32_t> tokens(int n, int start) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), start);
    return t;
}

const StateOptions kState{.n_ctx = 64, .k_type = quant::TypeId::f16, .v_type = quant::TypeId::f16};

// Logits of every position: a prompt of `prompt` tokens, then `decode` tokens one at a time.
std::vector<float> run(Model& model, const std::vector<int32_t>& ids, int prompt) {
    auto st = model.new_state(kState);
    std::vector<float> all, logits;
    SequenceBatch b{st.get(), std::span(ids).first(static_cast<size_t>(prompt))};
    model.forward(std::span(&b, 1), true, logits);
    all = logits;
    for (size_t i = static_cast<size_t>(prompt); i < ids.size(); ++i) {
        SequenceBatch d{st.get(), std::span(ids).subspan(i, 1)};
        model.forward(std::span(&d, 1), true, logits);
        all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
}

}  // namespace

TEST(RoutingReplay, ReplayingTheRoutersOwnChoiceChangesNothing) {
    const gguf::File file = gguf::File::open(tiny_model_path());
    Model model(file, 2);
    const auto ids = tokens(12, 40);
    model.set_routing_trace(true);
    const std::vector<float> plain = run(model, ids, 7);
    auto trace = std::make_shared<RoutingTrace>(model.recorded_routing("tiny"));
    ASSERT_EQ(trace->n_tokens, 12);
    ASSERT_EQ(trace->layers.size(), 4u);

    Model replayed(file, 2);
    replayed.set_routing_replay(trace);
    replayed.set_routing_trace(true);
    EXPECT_EQ(run(replayed, ids, 7), plain);  // the same experts with the same weights: bit for bit
    EXPECT_EQ(replayed.recorded_routing("tiny").ids, trace->ids);
}

TEST(RoutingReplay, TheTracesExpertsRunAndPositionsWrapAround) {
    const gguf::File file = gguf::File::open(tiny_model_path());
    Model model(file, 2);
    const auto ids = tokens(10, 3);
    const std::vector<float> plain = run(model, ids, 4);

    // A trace of 3 tokens whose every selection is experts 0..k-1 in turn: a routing no router chose.
    const Hparams& hp = model.hparams();
    auto trace = std::make_shared<RoutingTrace>();
    trace->arch = hp.arch_name();
    trace->model = "made up";
    trace->n_expert = hp.n_expert;
    trace->k = hp.n_expert_used;
    for (int64_t il = 0; il < hp.n_trunk(); ++il) trace->layers.push_back(static_cast<int32_t>(il));
    trace->n_tokens = 3;
    for (int64_t t = 0; t < trace->n_tokens; ++t)
        for (int64_t il = 0; il < hp.n_trunk(); ++il)
            for (int64_t i = 0; i < trace->k; ++i)
                trace->ids.push_back(static_cast<uint16_t>((t * trace->k + i + il) % hp.n_expert));
    Model replayed(file, 2);
    replayed.set_routing_replay(trace);
    replayed.set_routing_trace(true);
    const std::vector<float> forced = run(replayed, ids, 4);
    EXPECT_NE(forced, plain);
    // Token p ran trace token p mod 3, prompt and decode alike.
    const RoutingTrace got = replayed.recorded_routing("x");
    ASSERT_EQ(got.n_tokens, 10);
    for (int64_t p = 0; p < 10; ++p)
        for (size_t il = 0; il < got.layers.size(); ++il)
            for (int64_t i = 0; i < got.k; ++i) EXPECT_EQ(got.at(p, il)[i], trace->at(p % 3, il)[i]);
    // Replay off again: the router's own choice.
    replayed.set_routing_replay(nullptr);
    EXPECT_EQ(run(replayed, ids, 4), plain);
}

TEST(RoutingReplay, ATraceOfAnotherModelIsRefused) {
    const gguf::File file = gguf::File::open(tiny_model_path());
    Model model(file, 2);
    const Hparams& hp = model.hparams();
    RoutingTrace base;
    base.arch = hp.arch_name();
    base.n_expert = hp.n_expert;
    base.k = hp.n_expert_used;
    for (int64_t il = 0; il < hp.n_trunk(); ++il) base.layers.push_back(static_cast<int32_t>(il));
    base.n_tokens = 1;
    base.ids.assign(static_cast<size_t>(hp.n_trunk() * hp.n_expert_used), 0);
    auto refused = [&](RoutingTrace t) {
        EXPECT_THROW(model.set_routing_replay(std::make_shared<RoutingTrace>(std::move(t))), Error);
    };
    RoutingTrace t = base;
    t.arch = "qwen3moe";
    refused(t);
    t = base;
    t.n_expert *= 2;
    refused(t);
    t = base;
    t.k = 1;
    refused(t);
    t = base;
    t.layers.pop_back();
    refused(t);
    t = base;
    t.n_tokens = 0;
    t.ids.clear();
    refused(t);
    EXPECT_EQ(model.routing_replay(), nullptr);  // a refused trace leaves the model as it was
    EXPECT_NO_THROW(model.set_routing_replay(std::make_shared<RoutingTrace>(base)));
}

}  // namespace mox::models
