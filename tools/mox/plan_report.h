// How `mox plan` shows a searched plan (plan::PlanResult): a table of the evaluated configurations
// in the spirit of the seed article's (KV type, CPU layers, context, memory, predicted t/s), the
// chosen plan with its memory and speed breakdown, and the same as JSON.
#pragma once

#include "plan/hardware.h"
#include "plan/search.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mox::cli {

// "0-3,8,12-15" (the --moe-cpu-layers syntax), "none" when empty.
std::string layer_list(const std::vector<int64_t>& layers);
// "gpu", "pinned", "mmap": a tier in a table cell.
const char* short_tier(place::Tier t);

// llama.cpp's nearest flag for a plan: --n-cpu-moe N keeps the experts of the first N layers on the
// host, so N is the number of host layers; exact when those are layers 0..N-1.
struct NCpuMoe {
    int64_t n = 0;
    bool exact = true;
};
NCpuMoe nearest_n_cpu_moe(const std::vector<int64_t>& host_layers);

void print_plan_result(const std::string& model, const std::string& profile_path,
                       const plan::HardwareProfile& profile, const plan::PlanResult& r);

nlohmann::json plan_result_json(const std::string& model, const std::string& profile_path,
                                const plan::HardwareProfile& profile, const plan::PlanResult& r);

}  // namespace mox::cli
