// The planner's search: for a model, a machine (HardwareProfile) and memory
// budgets, the placement, KV cache types, context, micro-batch size and prefill streaming threshold
// that maximise the predicted decode speed (or prefill speed, or context: Goal) without exceeding
// the budgets. A pure, deterministic function: tests drive it with hand-written profiles.
//
// What it decides, and what the runtime executes (docs/plan.md "Search"):
//  - every non-expert weight of the trunk and the output head on the GPU (the runtime requires it);
//    token_embd on the host (a row lookup per token) unless the constraints say otherwise; MTP
//    blocks (not run) stay in the mapped file;
//  - per trunk layer, its routed experts all on the GPU or all on the host (pinned_host when the
//    locked-memory and RAM budgets allow it: faster prefill streaming; else mmap_host);
//  - with a routing profile and the decode goal, an expert cache: a pool of GPU slots shared by the
//    host layers, sized by what moving more layers' experts to the host frees, its hit rate
//    predicted from the profile (plan/cache_hits.h); chosen when it beats whole layers;
//  - the KV cache types (searched over f16, q8_0, q4_0 unless fixed), the context (fixed, or the
//    largest that fits), n_ubatch (512, 1024, 2048, 4096 unless fixed), and stream_min_tokens (the
//    batch size from which a prefill streams host layers' experts instead of computing them on the
//    CPU: the crossover of the two predicted costs).
// Never returned: a plan whose predicted VRAM plus the safety margin exceeds the VRAM budget, or
// whose locked + anonymous host memory plus its margin exceeds the RAM budget.
#pragma once

#include "gguf/reader.h"
#include "models/routing_trace.h"
#include "place/flags.h"
#include "place/memory.h"
#include "place/placement.h"
#include "plan/cache_hits.h"
#include "plan/hardware.h"
#include "plan/speed.h"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mox::plan {

enum class Goal {
    decode,   // fastest predicted decode (tokens/s at depth 0)
    prefill,  // fastest predicted prefill of the request's prompt
    context,  // the largest context; then the best KV precision that reaches it; then decode
};
const char* goal_name(Goal g);                           // "decode", "prefill", "context"
std::optional<Goal> goal_from_name(std::string_view s);  // the names above

// A --vram-budget / --ram-budget value: "24GiB", "16G", "8000MiB" (binary units), "24GB"
// (decimal), or plain bytes. Zero and malformed values are a mox::Error naming the flag.
uint64_t parse_budget(std::string_view flag, std::string_view text);

inline constexpr std::array<int64_t, 4> kUbatchCandidates{512, 1024, 2048, 4096};
// `--ctx max` answers in steps of this many tokens (or the trained context itself).
inline constexpr int64_t kCtxStep = 256;
// A less precise KV cache type is chosen only when it predicts a goal this much better than the
// best plan with a more precise one (quantized KV costs accuracy the speed model cannot see).
inline constexpr double kKvTolerance = 0.03;
// An expert cache is chosen only when it predicts a decode this much faster than the best plan of
// whole layers: its hit rate is simulated (within about a point of the runtime's, up to 7 points
// high where many copies are in flight: docs/expert-cache.md), and the whole-layer plan prefills
// faster (fewer host layers to stream).
inline constexpr double kCacheMinGain = 0.02;
// Host-layer counts the cache search prices at most before refining around the best of them.
inline constexpr int64_t kCacheCoarseCandidates = 9;
// The default VRAM safety margin: max(2% of the budget, 256 MiB).
uint64_t default_margin(uint64_t budget);
// The default RAM margin: max(10% of the budget, 2 GiB). Larger than the VRAM one: the OS, the page
// cache that feeds mmap_host experts and other processes live there, and pinned pages cannot be
// swapped out to make room.
uint64_t default_ram_margin(uint64_t budget);

// What manual flags pin down; everything left open is searched.
struct PlanConstraints {
    // Trunk layer -> the tier its routed experts must have (gpu, pinned_host or mmap_host).
    std::map<int64_t, place::Tier> layer_experts{};
    // The tier of the host layers the search chooses; nullopt: pinned_host when it fits the
    // locked-memory and RAM budgets, else mmap_host.
    std::optional<place::Tier> host_tier{};
    std::optional<quant::TypeId> k_type{}, v_type{};  // fixed KV cache types
    std::optional<int64_t> n_ubatch{};
    std::optional<bool> stream_experts{};     // default true: prefill streams host layers' experts
    std::optional<place::Tier> token_embd{};  // default mmap_host (gpu when the file has no output.weight)
};

// The constraints that llama.cpp-style placement flags express (flags.h), for a searched plan:
// a layer whose expert stacks an override rule sends to a host tier is forced there, one that a rule
// sends to the GPU is forced to stay. -ngl must be unset (0) or all (-1): the search keeps every
// non-expert weight on the GPU, so a rule that moves any other trunk tensor off it is an error
// naming the tensor and the rule's flag.
PlanConstraints constraints_from_flags(const gguf::File& file, const place::PlacementFlags& flags);

struct PlanRequest {
    place::Placement base;  // the file's tensors (Placement::uniform(file, Tier::gpu)); tiers are reset
    models::Hparams hparams;
    HardwareProfile profile;
    std::optional<uint64_t> vram_budget{};  // default: the profile's GPU memory (a larger one is clipped)
    std::optional<uint64_t> ram_budget{};   // default: the profile's host RAM (0 there: not checked)
    std::optional<uint64_t> vram_margin{};  // default: default_margin(vram budget)
    std::optional<uint64_t> ram_margin{};   // default: default_ram_margin(ram budget)
    std::optional<int64_t> n_ctx{};         // nullopt: the largest context that fits (`--ctx max`)
    int64_t n_seq = 1;                      // sequences whose KV/state the cache holds
    Goal goal = Goal::decode;
    int64_t prompt_tokens = 0;  // prefill is predicted for this prompt; 0: min(n_ctx, 4096)
    PlanConstraints constraints{};
    // A routing profile of the model (a routing trace, models/routing_trace.h): with one, the decode
    // goal also weighs an expert cache, a pool of GPU slots for the host layers' hot experts, against
    // keeping whole layers' experts on the GPU (docs/plan.md "Expert cache"). Null: no cache.
    std::shared_ptr<const models::RoutingTrace> routing_profile{};
    std::string cache_policy = "lru";  // the cache's policy (place/cache_policies.h spec)
    int64_t cache_admit_cap = kDefaultCacheAdmitCap;  // its admissions per token
};

// One evaluated configuration: a row of the table `mox plan` prints.
struct PlanCandidate {
    quant::TypeId k_type = quant::TypeId::f16, v_type = quant::TypeId::f16;
    int64_t n_ctx = 0;
    int64_t n_ubatch = 0;
    bool stream_experts = true;
    place::Tier host_tier = place::Tier::mmap_host;
    std::vector<int64_t> host_layers;  // trunk layers whose experts are on the host, ascending
    uint64_t vram_bytes = 0;           // predict_memory's gpu_total()
    uint64_t host_bytes = 0;           // locked + anonymous RAM (the hard part)
    uint64_t page_cache_bytes = 0;     // mmap_host weights (evictable)
    bool fits = false;
    std::string why_not;  // when !fits: which budget, by how much
    // Predictions (0 when the candidate does not fit: not evaluated).
    double decode_tps = 0, decode_half_tps = 0, prefill_tps = 0;
    int64_t stream_min_tokens = 0;
    // The expert cache of the row (0 slots: none): its device bytes (part of vram_bytes) and the hit
    // rate the routing profile predicts for it.
    int64_t cache_slots = 0;
    uint64_t cache_bytes = 0;
    double cache_hit_rate = 0;
    bool chosen = false;
};

// The expert cache a plan runs with (GpuOptions::expert_cache_bytes, _policy): none when slots is 0.
struct ExpertCachePlan {
    int64_t slots = 0;
    uint64_t slot_bytes = 0;    // one expert of the largest host layer's parts (models::expert_slot_layout)
    uint64_t pool_bytes = 0;    // GpuOptions::expert_cache_bytes: the slots and the zero slot
    uint64_t device_bytes = 0;  // the pool, its tables and lookup (in PlanResult::memory.gpu_total())
    std::string policy;
    double hit_rate = 0;              // predicted from the routing profile
    double admissions_per_token = 0;  // likewise
    std::string why_none;             // with a profile but no cache: why (for the summary)
};

struct PlanResult {
    Goal goal = Goal::decode;
    place::Placement placement;  // run this (every tensor and expert has its tier)
    place::CacheOptions cache;   // n_ctx, KV types, n_seq
    place::RunShape run;         // n_ubatch, stream_experts
    int64_t stream_min_tokens = kDefaultStreamMinTokens;
    place::Allowance allowance;  // what predict_memory was given (from the profile)
    place::MemoryPrediction memory;
    SpeedPrediction speed;
    std::vector<int64_t> host_layers;
    place::Tier host_tier = place::Tier::mmap_host;
    uint64_t vram_budget = 0, vram_margin = 0, ram_budget = 0, ram_margin = 0;
    ExpertCachePlan expert_cache;      // run.expert_cache_slots experts of the host layers
    std::vector<PlanCandidate> table;  // evaluated configurations; the chosen one has chosen = true
    std::vector<std::string> notes;    // budget clipping, unchecked RAM, approximations
};

// The memory allowance a profile implies: its measured CUDA context (the placeholder default when
// the profile has none), marked measured when the profile was.
place::Allowance allowance_from_profile(const HardwareProfile& p);

// The planner. For `mox run/bench/serve --plan auto` (the default) the runtime builds the request
// from the model file, the cached profile (plan::load_profile(plan::default_profile_path())) and
// the user's flags (constraints_from_flags, -c, -ctk/-ctv, -ub), then loads result.placement with
// result.cache, result.run and result.stream_min_tokens. Throws mox::Error when nothing fits (the
// message gives what the smallest configuration needs against the budget), when the request is
// inconsistent (a forced layer out of range, a fixed context above the trained one), or when the
// profile lacks a rate the model needs (predict_speed's message).
PlanResult plan_auto(const PlanRequest& request);

}  // namespace mox::plan
