// `--plan auto` for the commands that load a model (run, chat, serve, logits, perplexity, bench): the
// planner's search (plan/search.h) with what the command already fixes (context, KV types, the
// user's placement flags, -ub), turned into what the GPU forward executes (models::GpuOptions).
// The hardware profile is the one `mox calibrate` cached for this machine; when there is none, a
// quick calibration runs first and is cached (a note says so), so that a first run needs no step
// by hand.
#pragma once

#include "gguf/reader.h"
#include "models/model.h"
#include "place/flags.h"
#include "plan/cache_hits.h"
#include "plan/search.h"
#include "quant/types.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mox::plan {

struct AutoPlanInputs {
    place::PlacementFlags flags;          // -ngl (0 or -1 only) and the override rules: constraints
    int64_t n_ctx = 4096;                 // the context the command needs (fixed)
    // Fixed KV types; nullopt: searched with the rest (-ctk/-ctv auto), the plan's choice in
    // result.cache. The commands default to f16: a lossy cache is chosen only when asked for.
    std::optional<quant::TypeId> k_type = quant::TypeId::f16, v_type = quant::TypeId::f16;
    std::optional<int64_t> n_ubatch;      // fixed when given
    uint64_t vram_budget = 0;             // 0: what the GPU has free now, plus the context's share
    // Device bytes the plan leaves free inside the budget (the expert cache's pool): the placement
    // is searched for budget - reserve, the forward's budget stays the whole.
    uint64_t reserve_bytes = 0;
    std::string profile_path;             // "": default_profile_path()
    // `--expert-cache auto`: a routing profile of the model, from which the planner chooses the
    // expert cache's pool (none is a valid choice) with this policy and admission cap; the result's
    // GpuOptions carry the pool and the policy. Null: the plan has no cache (reserve_bytes aside).
    std::shared_ptr<const models::RoutingTrace> routing_profile;
    std::string cache_policy = "lru";
    int64_t cache_admit_cap = kDefaultCacheAdmitCap;
};

struct AutoPlan {
    PlanResult result;
    models::GpuOptions gpu;  // the placement made executable, with budget, ubatch, threshold, context
    std::string summary;     // one line for the user: where the experts went, memory, predicted speed
};

AutoPlan auto_plan(const gguf::File& file, const AutoPlanInputs& in);

// The cached profile of this machine, or a quick calibration cached now; either way with rates for
// every quantized type in `types` (missing ones are measured and added to the cached file). `note`
// says what happened.
HardwareProfile profile_or_calibrate(const std::string& path, const std::vector<quant::TypeId>& types,
                                     std::string* note = nullptr);

// The distinct tensor types of a model file, in first-seen order.
std::vector<quant::TypeId> weight_types(const gguf::File& file);

}  // namespace mox::plan
