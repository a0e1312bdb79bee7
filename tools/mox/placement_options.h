// The placement flags llama.cpp users know, shared by every command that loads a model on the GPU
// (run, chat, serve, logits, perplexity, plan): -ot, --n-cpu-moe, --cpu-moe, --moe-cpu-layers (one rule
// list in command-line order, place/flags.h), plus --vram-budget, -ub and --stream-min-tokens.
#pragma once

#include "gguf/reader.h"
#include "models/model.h"
#include "place/flags.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace mox::cli {

struct PlacementOptions {
    std::vector<std::string> override_tensor;
    std::vector<int64_t> n_cpu_moe;
    bool cpu_moe = false;
    std::vector<std::string> moe_cpu_layers;
    std::string vram_budget;  // "" = none (auto: what the GPU has free)
    int64_t n_ubatch = 0;     // 0: searched (auto) or 512 (manual)
    int64_t stream_min_tokens = 0;  // 0: the plan's (auto) or 32 (manual)
    std::string plan = "auto";      // auto: the planner (plan/auto_plan.h); manual: the flags alone
    std::string profile;            // hardware profile (default: the cached one)
    std::string expert_cache;       // "" or "off": none; a size: the pool of expert slots (GPU)
    std::string cache_policy = "lru";
    int64_t cache_admit_cap = 32;
    std::string cache_profile;      // a routing trace: the static policy's hot set
    std::string routing_profile;    // a routing trace: --expert-cache auto sizes the pool from it

    // Set by add_placement_options: the command and its options, to read the command-line order.
    const CLI::App* cmd = nullptr;
    const CLI::Option *ot = nullptr, *ncmoe = nullptr, *cmoe = nullptr, *layers = nullptr;

    bool any_rule() const { return !override_tensor.empty() || !n_cpu_moe.empty() || cpu_moe || !moe_cpu_layers.empty(); }
    uint64_t vram_budget_bytes() const;  // 0 = none
    uint64_t expert_cache_bytes() const;  // 0 = none (or auto)
    bool expert_cache_auto() const { return expert_cache == "auto"; }
    // The override rules in command-line order (first match wins).
    std::vector<place::OverrideRule> rules(int64_t n_layer) const;
};

// The override rule flags alone (-ot, --n-cpu-moe, --cpu-moe, --moe-cpu-layers): mox plan has its
// own budget and search flags.
void add_rule_options(CLI::App* cmd, PlacementOptions& o);
// The rule flags plus --vram-budget, --plan, --profile, -ub, --stream-min-tokens and the expert
// cache's --expert-cache, --cache-policy and --cache-admit-cap.
void add_placement_options(CLI::App* cmd, PlacementOptions& o);

// GpuOptions for a model on the GPU. --plan manual: the placement from -ngl (n_gpu_layers: -1 all)
// and the rules, made executable (place/execute.h). --plan auto (the default): the planner's
// placement within the budget, the flags as constraints, for a context of n_ctx tokens with these
// KV types (plan/auto_plan.h); it prints a one-line summary of the plan on stderr. A KV type that
// is nullopt (-ctk/-ctv auto) is searched too, and set to the plan's choice on return; --plan
// manual refuses it.
models::GpuOptions gpu_options(const gguf::File& file, const PlacementOptions& o, int64_t n_gpu_layers,
                               int64_t n_ctx, std::optional<quant::TypeId>& k_type,
                               std::optional<quant::TypeId>& v_type);

}  // namespace mox::cli
