#include "plan/auto_plan.h"

#include "core/error.h"
#include "core/units.h"
#include "place/cache_policies.h"
#include "place/cache_sim.h"
#include "place/execute.h"
#include "place/flags.h"
#include "plan/calibrate.h"
#include "plan/hardware.h"

#ifdef MOX_HAVE_CUDA
#include "ops/cuda_device.h"
#endif

#include <fmt/format.h>

#include <algorithm>

namespace mox::plan {

HardwareProfile profile_or_calibrate(const std::string& path, const std::vector<quant::TypeId>& types,
                                     std::string* note) {
    std::optional<HardwareProfile> loaded = load_profile(path);
    const CalibrateOptions quick = quick_calibrate_options();
    const bool fresh = !loaded;
    HardwareProfile p = fresh ? calibrate(quick) : std::move(*loaded);
    // A profile made for another model (or a quick one) may lack this one's weight types: measure
    // just those (calibrate_missing_types skips float and activation-only types).
    const std::vector<quant::TypeId> added = calibrate_missing_types(p, types, quick);
    if (fresh || !added.empty()) save_profile(p, path);
    if (note) {
        std::string names;
        for (const quant::TypeId t : added) names += (names.empty() ? "" : ", ") + std::string(quant::type_name(t));
        if (fresh)
            *note = fmt::format("no hardware profile yet: measured a quick one and saved it to {} (`mox calibrate` "
                                "measures a fuller one)",
                                path);
        else if (!added.empty())
            *note = fmt::format("hardware profile {}; measured {} for this model and added them to it", path, names);
        else
            *note = fmt::format("hardware profile {}", path);
    }
    return p;
}

std::vector<quant::TypeId> weight_types(const gguf::File& file) {
    std::vector<quant::TypeId> types;
    for (const gguf::TensorInfo& t : file.tensors())
        if (std::find(types.begin(), types.end(), t.type) == types.end()) types.push_back(t.type);
    return types;
}

AutoPlan auto_plan(const gguf::File& file, const AutoPlanInputs& in) {
    // The flags first: a request that cannot be planned must not cost a calibration.
    const PlanConstraints constraints = constraints_from_flags(file, in.flags);
    const std::string path = in.profile_path.empty() ? default_profile_path() : in.profile_path;
    std::string note;
    const HardwareProfile profile = profile_or_calibrate(path, weight_types(file), &note);
    if (!profile.gpu) fail("--plan auto on the GPU: the hardware profile {} has no GPU (run `mox calibrate` again)", path);
    const models::Hparams hp = models::read_hparams(file);
    PlanRequest req{.base = place::Placement::uniform(file, place::Tier::gpu), .hparams = hp, .profile = profile};
    req.n_ctx = in.n_ctx;
    req.prompt_tokens = std::min<int64_t>(in.n_ctx, 4096);
    req.constraints = constraints;
    req.constraints.k_type = in.k_type;
    req.constraints.v_type = in.v_type;
    if (in.n_ubatch) req.constraints.n_ubatch = *in.n_ubatch;
    req.routing_profile = in.routing_profile;
    req.cache_policy = in.cache_policy;
    req.cache_admit_cap = in.cache_admit_cap;
    if (in.routing_profile && in.reserve_bytes > 0)
        fail("--expert-cache: either a size or auto (the planner sizes the pool from --routing-profile), not both");
    uint64_t budget = in.vram_budget;
#ifdef MOX_HAVE_CUDA
    if (budget == 0) {
        // What is free now plus what our own context takes (it is already counted as used): a GPU
        // shared with other processes is planned for what is left of it.
        const ops::CudaDeviceInfo dev = ops::cuda_devices().front();
        budget = std::min(dev.total_bytes, dev.free_bytes + profile.gpu->context_bytes);
    }
#endif
    if (in.reserve_bytes > 0) {
        if (budget == 0 || in.reserve_bytes >= budget)
            fail("--expert-cache {}: leaves nothing of the VRAM budget {} for the model", format_bytes(in.reserve_bytes),
                 budget == 0 ? std::string("(none given)") : format_bytes(budget));
        budget -= in.reserve_bytes;
    }
    if (budget > 0) req.vram_budget = budget;
    AutoPlan out;
    out.result = plan_auto(req);
    const PlanResult& r = out.result;
    out.gpu = place::gpu_options_for(r.placement, hp);
    out.gpu.vram_budget = r.vram_budget + in.reserve_bytes;
    out.gpu.n_ubatch = r.run.n_ubatch;
    out.gpu.stream_min_tokens = r.run.stream_experts ? std::max<int64_t>(2, r.stream_min_tokens) : (r.run.n_ubatch + 1);
    out.gpu.n_ctx_max = r.cache.n_ctx;
    const ExpertCachePlan& c = r.expert_cache;
    std::string cache;
    if (c.slots > 0) {
        out.gpu.expert_cache_bytes = c.pool_bytes;
        place::CachePolicyOptions options;
        if (c.policy.starts_with("static")) options.profile = place::trace_key_counts(*in.routing_profile);
        out.gpu.expert_cache_policy = place::make_cache_policy(c.policy, options);
        out.gpu.expert_cache_admit_cap = in.cache_admit_cap;
        cache = fmt::format("; expert cache {} ({} slots, {}, {:.0f}% hits predicted)", format_bytes(c.device_bytes),
                            c.slots, c.policy, 100 * c.hit_rate);
    } else if (in.routing_profile) {
        cache = fmt::format("; expert cache none ({})", c.why_none);
    }
    const std::string where = r.host_layers.empty()
                                  ? std::string("every expert on the GPU")
                                  : fmt::format("experts of layers {} in {} memory", place::format_layer_list(r.host_layers),
                                                r.host_tier == place::Tier::pinned_host ? "pinned host" : "mapped host");
    const std::string kv =
        in.k_type && in.v_type
            ? std::string()
            : fmt::format("; KV {}/{}", quant::type_name(r.cache.k_type), quant::type_name(r.cache.v_type));
    const std::string reserved =
        in.reserve_bytes > 0 ? fmt::format(" plus {} kept for the expert cache", format_bytes(in.reserve_bytes))
                             : std::string();
    out.summary = fmt::format(
        "plan: {}{}; -ub {}{}; VRAM {} of {}{} (predicted); decode ~{:.0f} t/s, prefill ~{:.0f} t/s "
        "(predicted{}; {})",
        where, cache, r.run.n_ubatch, kv, format_bytes(r.memory.gpu_total()), format_bytes(r.vram_budget), reserved,
        r.speed.decode.tokens_per_s, r.speed.prefill.tokens_per_s, in.reserve_bytes > 0 ? " without the cache" : "",
        note);
    return out;
}

}  // namespace mox::plan
