// Placement tables and the llama.cpp flags that build them, on a small synthetic qwen35moe file
// (8 layers, 16 experts, llama-quantize's Q4_K_M recipe so the stacks have mixed block types).
#include "place/placement.h"
#include "core/error.h"
#include "gguf/reader.h"
#include "models/synth.h"
#include "place/flags.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <set>
#include <string>

namespace mox::place {

namespace {

// One file per test process: ctest runs cases as parallel processes, none may rewrite a file
// another has mapped.
const std::string& model_path() {
    static const std::string path = [] {
        const std::string p = (std::filesystem::temp_directory_path() /
                               ("mox_place_test_" + std::to_string(getpid()) + ".gguf"))
                                  .string();
        models::SynthOptions o;
        o.hparams = models::synth_preset("tiny");
        o.mix = models::QuantMix::q4_k_m;
        o.seed = 3;
        o.threads = 1;
        models::write_synthetic_model(p, o);
        return p;
    }();
    static const struct Remover {
        ~Remover() { std::filesystem::remove(path); }
    } remover;
    return path;
}

const gguf::File& model() {
    static const gguf::File file = gguf::File::open(model_path());
    return file;
}

constexpr int64_t kLayers = 8;
constexpr int64_t kExperts = 16;

Placement with(int64_t ngl, std::vector<OverrideRule> rules = {}) {
    return place_from_flags(model(), {.n_gpu_layers = ngl, .overrides = std::move(rules)});
}

std::vector<OverrideRule> concat(std::vector<OverrideRule> a, const std::vector<OverrideRule>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

bool is_exps(const std::string& name) {
    return name.find("_exps.weight") != std::string::npos;
}

// Sum of the file's own tensor sizes on `tier`, by the rule `tier_of_tensor`, with experts whole
// stacks (valid where a layer's experts share one tier).
template <typename F>
uint64_t file_bytes_where(F&& pred) {
    uint64_t sum = 0;
    for (const gguf::TensorInfo& t : model().tensors())
        if (pred(t.name)) sum += t.n_bytes;
    return sum;
}

int64_t layer_of(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    return std::stoll(name.substr(4));
}

}  // namespace

TEST(Placement, UniformHoldsEveryTensorOnce) {
    const Placement p = Placement::uniform(model(), Tier::pinned_host);
    EXPECT_EQ(p.n_layer(), kLayers);
    EXPECT_EQ(p.n_expert(), kExperts);
    ASSERT_EQ(p.tensors().size(), model().tensors().size());
    const uint64_t sum = file_bytes_where([](const std::string&) { return true; });
    const TierBytes b = p.bytes_per_tier();
    EXPECT_EQ(b[Tier::pinned_host], sum);
    EXPECT_EQ(b[Tier::gpu], 0u);
    EXPECT_EQ(b[Tier::mmap_host], 0u);
    EXPECT_EQ(p.total_bytes(), sum);
    // The rest of the file (header, metadata, alignment padding) is not weights.
    EXPECT_GT(model().total_file_bytes(), sum);
}

TEST(Placement, ExpertSlicesSumToTheStacks) {
    const Placement p = Placement::uniform(model(), Tier::mmap_host);
    for (int64_t l = 0; l < kLayers; ++l) {
        ASSERT_TRUE(p.has_experts(l));
        uint64_t layer_stacks = 0;
        for (const char* part : {"gate", "up", "down"}) {
            const gguf::TensorInfo* t =
                model().find_tensor(fmt::format("blk.{}.ffn_{}_exps.weight", l, part));
            ASSERT_NE(t, nullptr);
            ASSERT_EQ(t->ne[2], kExperts);
            const ExpertPart ep = std::string(part) == "gate" ? ExpertPart::gate
                                  : std::string(part) == "up" ? ExpertPart::up
                                                              : ExpertPart::down;
            const uint64_t slice = p.expert_slice_bytes(l, ep);
            // An expert is n_out rows of its stack's row size; the slices tile the stack exactly.
            EXPECT_EQ(slice, quant::row_bytes(t->type, t->ne[0]) * static_cast<uint64_t>(t->ne[1]));
            EXPECT_EQ(slice * static_cast<uint64_t>(kExperts), t->n_bytes);
            layer_stacks += t->n_bytes;
        }
        EXPECT_EQ(p.expert_bytes(l) * static_cast<uint64_t>(kExperts), layer_stacks);
    }
}

TEST(Placement, SingleExpertsMoveExactlyTheirSlices) {
    Placement p = Placement::uniform(model(), Tier::mmap_host);
    const uint64_t total = p.total_bytes();
    p.set_expert_tier(2, 5, Tier::gpu);
    p.set_expert_tier(2, 6, Tier::gpu);
    p.set_expert_tier(7, 0, Tier::pinned_host);
    const TierBytes b = p.bytes_per_tier();
    EXPECT_EQ(b[Tier::gpu], 2 * p.expert_bytes(2));
    EXPECT_EQ(b[Tier::pinned_host], p.expert_bytes(7));
    EXPECT_EQ(b.total(), total);
    EXPECT_EQ(p.expert_tier(2, 5), Tier::gpu);
    EXPECT_EQ(p.expert_tier(2, 4), Tier::mmap_host);
    EXPECT_EQ((p.expert_counts(2)), (std::array<int64_t, 3>{2, 0, kExperts - 2}));
    // A stack whose experts are split has no single tier.
    EXPECT_FALSE(p.tier_of("blk.2.ffn_up_exps.weight").has_value());
    EXPECT_EQ(p.tier_of("blk.3.ffn_up_exps.weight"), Tier::mmap_host);
    // Experts move whole: a stack cannot be set on its own.
    EXPECT_THROW(p.set_tier("blk.3.ffn_down_exps.weight", Tier::gpu), Error);
    EXPECT_THROW(p.set_expert_tier(0, kExperts, Tier::gpu), Error);
    EXPECT_THROW(p.set_expert_tier(kLayers, 0, Tier::gpu), Error);
    EXPECT_THROW(p.tier_of("blk.0.no_such.weight"), Error);
}

TEST(PlacementFlags, NoFlagsIsAllOnTheMappedFile) {
    const Placement p = with(0);
    EXPECT_EQ(p.bytes_per_tier()[Tier::mmap_host], p.total_bytes());
}

// llama.cpp numbers the blocks 0..n_layer-1 and the output layer n_layer; -ngl N takes the last N.
TEST(PlacementFlags, NglCountsTheOutputLayerFirst) {
    for (int64_t ngl : {0, 1, 2, 5, 8, 9, 10, 99, -1}) {
        SCOPED_TRACE(ngl);
        const Placement p = with(ngl);
        const int64_t n_gpu = ngl < 0 ? kLayers + 1 : std::min<int64_t>(ngl, kLayers + 1);
        const bool output_gpu = n_gpu >= 1;
        const int64_t first_block_gpu = kLayers + 1 - n_gpu;  // blocks >= this are on the GPU
        for (const TensorEntry& e : p.tensors()) {
            Tier want = Tier::mmap_host;
            if (e.name == "token_embd.weight")
                want = Tier::mmap_host;  // the input layer never moves
            else if (e.layer < 0)
                want = output_gpu ? Tier::gpu : Tier::mmap_host;
            else
                want = e.layer >= first_block_gpu ? Tier::gpu : Tier::mmap_host;
            EXPECT_EQ(p.tier_of(e.name), want) << e.name;
        }
    }
    // -ngl 1: output.weight and output_norm only.
    const Placement one = with(1);
    EXPECT_EQ(one.bytes_per_tier()[Tier::gpu], file_bytes_where([](const std::string& n) {
                  return n == "output.weight" || n == "output_norm.weight";
              }));
    EXPECT_THROW(with(-2), Error);
}

TEST(PlacementFlags, NglParsing) {
    EXPECT_EQ(parse_n_gpu_layers("all"), -1);
    EXPECT_EQ(parse_n_gpu_layers("-1"), -1);
    EXPECT_EQ(parse_n_gpu_layers("12"), 12);
    EXPECT_THROW(parse_n_gpu_layers("auto"), Error);
    EXPECT_THROW(parse_n_gpu_layers("-3"), Error);
    EXPECT_THROW(parse_n_gpu_layers("x"), Error);
}

TEST(PlacementFlags, CpuMoeKeepsEveryExpertOnTheHost) {
    const Placement p = with(-1, {cpu_moe_rule()});
    const uint64_t exps = file_bytes_where(is_exps);
    const uint64_t embd = file_bytes_where([](const std::string& n) { return n == "token_embd.weight"; });
    EXPECT_EQ(p.bytes_per_tier()[Tier::mmap_host], exps + embd);
    EXPECT_EQ(p.bytes_per_tier()[Tier::gpu], p.total_bytes() - exps - embd);
    for (int64_t l = 0; l < kLayers; ++l) EXPECT_EQ(p.expert_counts(l)[2], kExperts);
}

TEST(PlacementFlags, NCpuMoeTakesTheFirstLayers) {
    for (int64_t n : {0, 1, 3, 8, 50}) {
        SCOPED_TRACE(n);
        const Placement p = with(-1, n_cpu_moe_rules(n, kLayers));
        for (int64_t l = 0; l < kLayers; ++l) {
            const Tier want = l < n ? Tier::mmap_host : Tier::gpu;
            EXPECT_EQ(p.tier_of(fmt::format("blk.{}.ffn_gate_exps.weight", l)), want);
            // Only the routed stacks move: router and shared expert stay with the layer.
            EXPECT_EQ(p.tier_of(fmt::format("blk.{}.ffn_gate_inp.weight", l)), Tier::gpu);
            EXPECT_EQ(p.tier_of(fmt::format("blk.{}.ffn_up_shexp.weight", l)), Tier::gpu);
        }
        const uint64_t host_exps =
            file_bytes_where([&](const std::string& name) { return is_exps(name) && layer_of(name) < n; });
        const uint64_t embd =
            file_bytes_where([](const std::string& name) { return name == "token_embd.weight"; });
        EXPECT_EQ(p.bytes_per_tier()[Tier::mmap_host], host_exps + embd);
    }
    EXPECT_THROW(n_cpu_moe_rules(-1, kLayers), Error);
    // The rules stop at layer N-1: layer N's experts keep the tier -ngl gave them.
    const auto rules = n_cpu_moe_rules(2, kLayers);
    EXPECT_EQ(with(-1, rules).tier_of("blk.2.ffn_up_exps.weight"), Tier::gpu);
}

TEST(PlacementFlags, MoeCpuLayersList) {
    EXPECT_EQ(parse_layer_list("0-2,5,4-4,1", kLayers), (std::vector<int64_t>{0, 1, 2, 4, 5}));
    EXPECT_EQ(parse_layer_list(" 7 ", kLayers), (std::vector<int64_t>{7}));
    for (const char* bad : {"", "8", "3-1", "a", "1-", "-1", "1,,2", "0-8"}) {
        SCOPED_TRACE(bad);
        EXPECT_THROW(parse_layer_list(bad, kLayers), Error);
    }
    const Placement p = with(-1, moe_cpu_layers_rules("1,3-4", kLayers));
    std::set<int64_t> host;
    for (int64_t l = 0; l < kLayers; ++l)
        if (p.expert_tier(l, 0) == Tier::mmap_host) host.insert(l);
    EXPECT_EQ(host, (std::set<int64_t>{1, 3, 4}));
}

TEST(PlacementFlags, OverrideTensorParsing) {
    const auto rules = parse_override_tensor("exps=CPU,blk\\.0\\.=CUDA0,norm=pinned_host");
    ASSERT_EQ(rules.size(), 3u);
    EXPECT_EQ(rules[0].pattern, "exps");
    EXPECT_EQ(rules[0].tier, Tier::mmap_host);
    EXPECT_EQ(rules[1].pattern, "blk\\.0\\.");
    EXPECT_EQ(rules[1].tier, Tier::gpu);
    EXPECT_EQ(rules[2].tier, Tier::pinned_host);
    EXPECT_THROW(parse_override_tensor("exps"), Error);         // no device
    EXPECT_THROW(parse_override_tensor("exps=CUDA1"), Error);   // one GPU only
    EXPECT_THROW(parse_override_tensor("exps=Metal"), Error);   // unknown device
    EXPECT_THROW(parse_override_tensor("blk\\.(=CPU"), Error);  // bad regex
    EXPECT_THROW(parse_override_tensor("=CPU"), Error);         // empty pattern
    try {
        parse_override_tensor("a=CPU,[z-a]=CUDA0");
        FAIL() << "bad regex accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("[z-a]"), std::string::npos) << e.what();
    }
}

TEST(PlacementFlags, OverrideFirstMatchWinsAndBeatsNgl) {
    // Order decides: layer 1 goes to the host under the first list, to the GPU under the second.
    const auto host_first = parse_override_tensor("blk\\.1\\.=CPU,blk\\.=CUDA0");
    const auto gpu_first = parse_override_tensor("blk\\.=CUDA0,blk\\.1\\.=CPU");
    const Placement a = with(0, host_first), b = with(0, gpu_first);
    EXPECT_EQ(a.tier_of("blk.1.attn_norm.weight"), Tier::mmap_host);
    EXPECT_EQ(a.tier_of("blk.2.attn_norm.weight"), Tier::gpu);
    EXPECT_EQ(b.tier_of("blk.1.attn_norm.weight"), Tier::gpu);
    EXPECT_EQ(a.tier_of("blk.1.ffn_up_exps.weight"), Tier::mmap_host);
    // -ngl 0 left the output on the host; no rule matched it.
    EXPECT_EQ(a.tier_of("output.weight"), Tier::mmap_host);
    // Overrides beat -ngl, including for the input layer.
    const Placement c = with(-1, parse_override_tensor("token_embd=CUDA0,output\\.weight=CPU"));
    EXPECT_EQ(c.tier_of("token_embd.weight"), Tier::gpu);
    EXPECT_EQ(c.tier_of("output.weight"), Tier::mmap_host);
    EXPECT_EQ(c.tier_of("output_norm.weight"), Tier::gpu);
}

TEST(PlacementFlags, RulesFromDifferentFlagsKeepTheirOrder) {
    // --n-cpu-moe 4 then -ot moving layer 2's experts to the GPU: the earlier flag wins (llama.cpp).
    const auto ot = parse_override_tensor("blk\\.2\\.ffn_.*_exps=CUDA0");
    const Placement a = with(0, concat(n_cpu_moe_rules(4, kLayers), ot));
    const Placement b = with(0, concat(ot, n_cpu_moe_rules(4, kLayers)));
    EXPECT_EQ(a.expert_tier(2, 0), Tier::mmap_host);
    EXPECT_EQ(b.expert_tier(2, 0), Tier::gpu);
    EXPECT_EQ(b.expert_tier(3, 0), Tier::mmap_host);
    // --cpu-moe with --moe-cpu-layers: both say host, the union holds.
    const Placement c = with(-1, concat(moe_cpu_layers_rules("6", kLayers), {cpu_moe_rule()}));
    for (int64_t l = 0; l < kLayers; ++l) EXPECT_EQ(c.expert_tier(l, kExperts - 1), Tier::mmap_host);
}

TEST(PlacementFlags, SplittingAnExpertsStacksIsRefused) {
    try {
        with(-1, parse_override_tensor("blk\\.3\\.ffn_down_exps=CPU"));
        FAIL() << "split stacks accepted";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("layer 3"), std::string::npos) << msg;
        EXPECT_NE(msg.find("-ot"), std::string::npos) << msg;
    }
}

TEST(PlacementFlags, EveryByteInExactlyOneTier) {
    const std::vector<std::vector<OverrideRule>> cases{{},
                                                       {cpu_moe_rule()},
                                                       n_cpu_moe_rules(3, kLayers),
                                                       parse_override_tensor("attn=pinned_host,exps=CPU")};
    for (int64_t ngl : {0, 3, -1})
        for (const auto& rules : cases) {
            const Placement p = with(ngl, rules);
            const TierBytes b = p.bytes_per_tier();
            // Recount from the file: whole tensors by tier_of (stacks are whole under flags).
            TierBytes ref;
            for (const gguf::TensorInfo& t : model().tensors()) ref[*p.tier_of(t.name)] += t.n_bytes;
            EXPECT_EQ(b.bytes, ref.bytes);
            EXPECT_EQ(b.total(), file_bytes_where([](const std::string&) { return true; }));
        }
}

}  // namespace mox::place
