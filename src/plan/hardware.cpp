#include "plan/hardware.h"

#include "core/error.h"
#include "quant/types.h"

#include <pwd.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace mox::plan {

namespace {

using json = nlohmann::ordered_json;

// The layout written below. A reader refuses other versions rather than guess: a profile is cheap to
// measure again, a planner fed wrong numbers is not cheap to debug.
constexpr int kSchema = 1;

// ---- writing

// JSON has no NaN or infinity (nlohmann would write null, which the reader then refuses with a less
// helpful message): a probe that produced one is refused here, naming the field.
double finite(double v, const char* key) {
    if (!std::isfinite(v)) fail("hardware profile: {} is {}, not a finite number", key, v);
    return v;
}

json rates(const std::map<std::string, double>& m, const char* key) {
    json out = json::object();
    for (const auto& [type, v] : m) out[type] = finite(v, key);
    return out;
}

// ---- reading: every accessor names the full key ("gpu.matvec_gbps.Q4_K") in its error.

std::string join(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
}

const json& require(const json& obj, const std::string& where, const char* key) {
    const auto it = obj.find(key);
    if (it == obj.end()) fail("hardware profile: missing key '{}'", join(where, key));
    return *it;
}

double read_double(const json& v, const std::string& key) {
    if (!v.is_number()) fail("hardware profile: '{}' must be a number, found {}", key, v.type_name());
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0)
        fail("hardware profile: '{}' must be a finite number >= 0, found {}", key, d);
    return d;
}

double get_double(const json& obj, const std::string& where, const char* key) {
    return read_double(require(obj, where, key), join(where, key));
}

uint64_t get_u64(const json& obj, const std::string& where, const char* key) {
    const json& v = require(obj, where, key);
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    // Hand-written profiles may say 1.5e11: accepted when it is a whole number in range.
    const double d = read_double(v, join(where, key));
    if (d != std::floor(d) || d >= 18446744073709551616.0)
        fail("hardware profile: '{}' must be a whole number of bytes, found {}", join(where, key), d);
    return static_cast<uint64_t>(d);
}

int get_int(const json& obj, const std::string& where, const char* key) {
    const uint64_t v = get_u64(obj, where, key);
    if (v > 1u << 20) fail("hardware profile: '{}' = {} is out of range", join(where, key), v);
    return static_cast<int>(v);
}

bool get_bool(const json& obj, const std::string& where, const char* key) {
    const json& v = require(obj, where, key);
    if (!v.is_boolean())
        fail("hardware profile: '{}' must be true or false, found {}", join(where, key), v.type_name());
    return v.get<bool>();
}

// Provenance strings may be left out of a hand-written profile.
std::string get_string_or_empty(const json& obj, const std::string& where, const char* key) {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return {};
    if (!it->is_string())
        fail("hardware profile: '{}' must be a string, found {}", join(where, key), it->type_name());
    return it->get<std::string>();
}

std::string get_string(const json& obj, const std::string& where, const char* key) {
    const json& v = require(obj, where, key);
    if (!v.is_string())
        fail("hardware profile: '{}' must be a string, found {}", join(where, key), v.type_name());
    return v.get<std::string>();
}

const json& get_object(const json& obj, const std::string& where, const char* key) {
    const json& v = require(obj, where, key);
    if (!v.is_object())
        fail("hardware profile: '{}' must be an object, found {}", join(where, key), v.type_name());
    return v;
}

// A per-type rate table; absent means no type was measured. Known type names are stored as
// quant::type_name spells them ("q4_k" and "Q4_K" are the same key); others are kept verbatim.
std::map<std::string, double> get_rates(const json& obj, const std::string& where, const char* key) {
    std::map<std::string, double> out;
    const auto it = obj.find(key);
    if (it == obj.end()) return out;
    const std::string path = join(where, key);
    if (!it->is_object()) fail("hardware profile: '{}' must be an object, found {}", path, it->type_name());
    for (const auto& [name, v] : it->items()) {
        const auto id = quant::type_from_name(name);
        const std::string canonical = id ? std::string(quant::type_name(*id)) : name;
        out[canonical] = read_double(v, path + "." + name);
    }
    return out;
}

std::string hostname() {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "unknown";
    std::string name = buf;
    for (char& c : name)  // a file name part: no separators
        if (c == '/' || c == '\\') c = '_';
    return name;
}

}  // namespace

std::string profile_to_json(const HardwareProfile& p) {
    json j;
    j["schema"] = kSchema;
    j["machine"] = p.machine;
    j["created"] = p.created;
    j["mox_commit"] = p.mox_commit;
    j["measured"] = p.measured;
    j["host_ram_bytes"] = p.host_ram_bytes;
    j["host_lockable_bytes"] = p.host_lockable_bytes;
    json cpu;
    cpu["threads"] = p.cpu.threads;
    cpu["dram_gbps"] = finite(p.cpu.dram_gbps, "cpu.dram_gbps");
    cpu["expert_gbps"] = rates(p.cpu.expert_gbps, "cpu.expert_gbps");
    cpu["expert_gflops"] = rates(p.cpu.expert_gflops, "cpu.expert_gflops");
    j["cpu"] = std::move(cpu);
    if (p.gpu) {
        const GpuProfile& g = *p.gpu;
        json gpu;
        gpu["name"] = g.name;
        gpu["total_bytes"] = g.total_bytes;
        gpu["context_bytes"] = g.context_bytes;
        gpu["matvec_gbps"] = rates(g.matvec_gbps, "gpu.matvec_gbps");
        gpu["launch_gap_s"] = finite(g.launch_gap_s, "gpu.launch_gap_s");
        gpu["h2d_pinned_gbps"] = finite(g.h2d_pinned_gbps, "gpu.h2d_pinned_gbps");
        gpu["h2d_pageable_gbps"] = finite(g.h2d_pageable_gbps, "gpu.h2d_pageable_gbps");
        gpu["host_roundtrip_s"] = finite(g.host_roundtrip_s, "gpu.host_roundtrip_s");
        gpu["matmul_tflops"] = rates(g.matmul_tflops, "gpu.matmul_tflops");
        gpu["moe_decode_gbps"] = rates(g.moe_decode_gbps, "gpu.moe_decode_gbps");
        gpu["deltanet_step_s"] = finite(g.deltanet_step_s, "gpu.deltanet_step_s");
        gpu["deltanet_state_bytes"] = g.deltanet_state_bytes;
        gpu["handoff_roundtrip_s"] = finite(g.handoff_roundtrip_s, "gpu.handoff_roundtrip_s");
        gpu["moe_prefill_tflops"] = rates(g.moe_prefill_tflops, "gpu.moe_prefill_tflops");
        gpu["deltanet_prefill_token_s"] = finite(g.deltanet_prefill_token_s, "gpu.deltanet_prefill_token_s");
        gpu["moe_prefill_large_tflops"] = rates(g.moe_prefill_large_tflops, "gpu.moe_prefill_large_tflops");
        gpu["moe_prefill_large_tokens"] = g.moe_prefill_large_tokens;
        json points = json::array();
        for (const auto& [keys, s] : g.attention_decode_f16)
            points.push_back(json::array({keys, finite(s, "gpu.attention_decode_f16")}));
        gpu["attention_decode_f16"] = std::move(points);
        j["gpu"] = std::move(gpu);
    } else {
        j["gpu"] = nullptr;
    }
    return j.dump(2) + "\n";
}

HardwareProfile profile_from_json(const std::string& text) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        fail("hardware profile: not valid JSON ({})", e.what());
    }
    if (!j.is_object()) fail("hardware profile: the top level must be an object, found {}", j.type_name());
    const json& schema = require(j, "", "schema");
    if (!schema.is_number_integer() || schema.get<int64_t>() != kSchema)
        fail("hardware profile: schema {} is not the version this mox reads ({}); run `mox calibrate` again",
             schema.dump(), kSchema);
    HardwareProfile p;
    p.machine = get_string_or_empty(j, "", "machine");
    p.created = get_string_or_empty(j, "", "created");
    p.mox_commit = get_string_or_empty(j, "", "mox_commit");
    p.measured = get_bool(j, "", "measured");
    p.host_ram_bytes = get_u64(j, "", "host_ram_bytes");
    p.host_lockable_bytes = get_u64(j, "", "host_lockable_bytes");
    const json& cpu = get_object(j, "", "cpu");
    p.cpu.threads = get_int(cpu, "cpu", "threads");
    p.cpu.dram_gbps = get_double(cpu, "cpu", "dram_gbps");
    p.cpu.expert_gbps = get_rates(cpu, "cpu", "expert_gbps");
    p.cpu.expert_gflops = get_rates(cpu, "cpu", "expert_gflops");
    const auto gpu_it = j.find("gpu");
    if (gpu_it != j.end() && !gpu_it->is_null()) {
        if (!gpu_it->is_object())
            fail("hardware profile: 'gpu' must be an object or null, found {}", gpu_it->type_name());
        const json& gpu = *gpu_it;
        GpuProfile g;
        g.name = get_string(gpu, "gpu", "name");
        g.total_bytes = get_u64(gpu, "gpu", "total_bytes");
        g.context_bytes = get_u64(gpu, "gpu", "context_bytes");
        g.matvec_gbps = get_rates(gpu, "gpu", "matvec_gbps");
        g.launch_gap_s = get_double(gpu, "gpu", "launch_gap_s");
        g.h2d_pinned_gbps = get_double(gpu, "gpu", "h2d_pinned_gbps");
        g.h2d_pageable_gbps = get_double(gpu, "gpu", "h2d_pageable_gbps");
        g.host_roundtrip_s = get_double(gpu, "gpu", "host_roundtrip_s");
        g.matmul_tflops = get_rates(gpu, "gpu", "matmul_tflops");
        // Optional (added after schema 1 was fixed): absent in older profiles.
        g.moe_decode_gbps = get_rates(gpu, "gpu", "moe_decode_gbps");
        if (gpu.contains("deltanet_step_s")) {
            g.deltanet_step_s = get_double(gpu, "gpu", "deltanet_step_s");
            g.deltanet_state_bytes = get_u64(gpu, "gpu", "deltanet_state_bytes");
            if (g.deltanet_step_s > 0 && g.deltanet_state_bytes == 0)
                fail("hardware profile: 'gpu.deltanet_step_s' without 'gpu.deltanet_state_bytes'");
        }
        // (Older profiles also hold "norm_epilogue_s", a probe of a decode epilogue that lost its A/B and
        // was removed: ignored, like any key this build does not read.)
        if (gpu.contains("handoff_roundtrip_s"))
            g.handoff_roundtrip_s = get_double(gpu, "gpu", "handoff_roundtrip_s");
        g.moe_prefill_tflops = get_rates(gpu, "gpu", "moe_prefill_tflops");
        if (gpu.contains("deltanet_prefill_token_s")) {
            g.deltanet_prefill_token_s = get_double(gpu, "gpu", "deltanet_prefill_token_s");
            if (g.deltanet_prefill_token_s > 0 && g.deltanet_state_bytes == 0)
                fail("hardware profile: 'gpu.deltanet_prefill_token_s' without 'gpu.deltanet_state_bytes'");
        }
        if (const auto it = gpu.find("attention_decode_f16"); it != gpu.end()) {
            const std::string key = "gpu.attention_decode_f16";
            if (!it->is_array())
                fail("hardware profile: '{}' must be an array, found {}", key, it->type_name());
            for (const json& point : *it) {
                if (!point.is_array() || point.size() != 2 || !point[0].is_number_integer())
                    fail("hardware profile: '{}' holds [keys, seconds] pairs, found {}", key, point.dump());
                const int64_t keys = point[0].get<int64_t>();
                const double s = read_double(point[1], key);
                if (keys < 1 ||
                    (!g.attention_decode_f16.empty() && keys <= g.attention_decode_f16.back().first))
                    fail("hardware profile: '{}' needs increasing key counts >= 1, found {}", key,
                         it->dump());
                g.attention_decode_f16.emplace_back(keys, s);
            }
        }
        g.moe_prefill_large_tflops = get_rates(gpu, "gpu", "moe_prefill_large_tflops");
        if (!g.moe_prefill_large_tflops.empty()) {
            g.moe_prefill_large_tokens = get_int(gpu, "gpu", "moe_prefill_large_tokens");
            if (g.moe_prefill_large_tokens <= 512)
                fail("hardware profile: 'gpu.moe_prefill_large_tokens' must be above the 512 tokens of "
                     "'gpu.moe_prefill_tflops', found {}",
                     g.moe_prefill_large_tokens);
        }
        p.gpu = std::move(g);
    }
    return p;
}

std::string default_profile_path() {
    namespace fs = std::filesystem;
    auto env = [](const char* name) -> std::string {
        const char* v = std::getenv(name);
        return v ? std::string(v) : std::string();
    };
    fs::path dir;
    if (const std::string d = env("MOX_CACHE_DIR"); !d.empty()) {
        dir = d;
    } else if (const std::string x = env("XDG_CACHE_HOME"); !x.empty()) {
        dir = fs::path(x) / "mox";
    } else {
        std::string home = env("HOME");
        if (home.empty()) {  // e.g. a service without a login environment
            if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_dir) home = pw->pw_dir;
        }
        if (home.empty()) fail("no cache folder for the hardware profile: set MOX_CACHE_DIR or HOME");
        dir = fs::path(home) / ".cache" / "mox";
    }
    return (dir / ("hardware-" + hostname() + ".json")).string();
}

std::optional<HardwareProfile> load_profile(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("hardware profile {}: cannot open it", path);
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) fail("hardware profile {}: read error", path);
    try {
        return profile_from_json(text.str());
    } catch (const Error& e) {
        fail("{}: {}", path, e.what());
    }
}

void save_profile(const HardwareProfile& p, const std::string& path) {
    namespace fs = std::filesystem;
    const std::string text = profile_to_json(p);
    const fs::path target(path);
    std::error_code ec;
    if (target.has_parent_path()) {
        fs::create_directories(target.parent_path(), ec);
        if (ec) fail("hardware profile {}: cannot create its folder: {}", path, ec.message());
    }
    // Written next to the target and renamed over it, so a reader (or a crash mid-write) never sees
    // half a file.
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) fail("hardware profile {}: cannot write {}", path, tmp);
        out << text;
        out.flush();
        if (!out) {
            fs::remove(tmp, ec);
            fail("hardware profile {}: write error on {}", path, tmp);
        }
    }
    fs::rename(tmp, target, ec);
    if (ec) {
        std::error_code ignored;
        fs::remove(tmp, ignored);
        fail("hardware profile {}: cannot rename {} over it: {}", path, tmp, ec.message());
    }
}

}  // namespace mox::plan
