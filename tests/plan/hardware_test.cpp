// The hardware profile's JSON: a round trip keeps every field, unknown keys are ignored, other schema
// versions, missing keys, wrong types and broken files are refused with errors that name them, and
// the cache file helpers create folders and report an absent file as nullopt.
#include "plan/hardware.h"
#include "core/error.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>

namespace mox::plan {
namespace {

namespace fs = std::filesystem;

// Every field set to a distinct value, none of them a default.
HardwareProfile full_profile() {
    HardwareProfile p;
    p.machine = "node-7";
    p.created = "2026-11-29T19:00:00Z";
    p.mox_commit = "abc1234-dirty";
    p.measured = true;
    p.host_ram_bytes = 540'000'000'123ull;
    p.host_lockable_bytes = 8'388'608ull;
    p.cpu.threads = 48;
    p.cpu.dram_gbps = 231.25;
    p.cpu.expert_gbps = {{"Q4_K", 150.5}, {"IQ2_XXS", 99.125}};
    p.cpu.expert_gflops = {{"Q4_K", 1234.5}, {"Q8_0", 0.001953125}};
    GpuProfile g;
    g.name = "NVIDIA H200";
    g.total_bytes = 150'754'820'096ull;
    g.context_bytes = 536'870'912ull;
    g.matvec_gbps = {{"Q4_K", 4100.5}, {"MXFP4", 3900.25}};
    g.launch_gap_s = 1.5e-6;
    g.h2d_pinned_gbps = 52.75;
    g.h2d_pageable_gbps = 20.5;
    g.host_roundtrip_s = 1.25e-5;
    g.matmul_tflops = {{"Q4_K", 210.5}, {"Q6_K", 180.0}};
    g.moe_decode_gbps = {{"Q4_K", 640.5}, {"Q6_K", 600.25}};
    g.deltanet_step_s = 1.125e-5;
    g.deltanet_state_bytes = 2'195'456ull;
    g.handoff_roundtrip_s = 6.25e-6;
    g.moe_prefill_tflops = {{"Q4_K", 30.5}, {"Q6_K", 28.25}};
    g.deltanet_prefill_token_s = 4.5e-7;
    g.moe_prefill_large_tflops = {{"Q4_K", 61.5}, {"Q6_K", 55.25}};
    g.moe_prefill_large_tokens = 4096;
    g.attention_decode_f16 = {{256, 5.5e-6}, {1024, 1.25e-5}, {32768, 7.5e-5}};
    p.gpu = g;
    return p;
}

void expect_same(const HardwareProfile& a, const HardwareProfile& b) {
    EXPECT_EQ(a.machine, b.machine);
    EXPECT_EQ(a.created, b.created);
    EXPECT_EQ(a.mox_commit, b.mox_commit);
    EXPECT_EQ(a.measured, b.measured);
    EXPECT_EQ(a.host_ram_bytes, b.host_ram_bytes);
    EXPECT_EQ(a.host_lockable_bytes, b.host_lockable_bytes);
    EXPECT_EQ(a.cpu.threads, b.cpu.threads);
    EXPECT_EQ(a.cpu.dram_gbps, b.cpu.dram_gbps);
    EXPECT_EQ(a.cpu.expert_gbps, b.cpu.expert_gbps);
    EXPECT_EQ(a.cpu.expert_gflops, b.cpu.expert_gflops);
    ASSERT_EQ(a.gpu.has_value(), b.gpu.has_value());
    if (!a.gpu) return;
    EXPECT_EQ(a.gpu->name, b.gpu->name);
    EXPECT_EQ(a.gpu->total_bytes, b.gpu->total_bytes);
    EXPECT_EQ(a.gpu->context_bytes, b.gpu->context_bytes);
    EXPECT_EQ(a.gpu->matvec_gbps, b.gpu->matvec_gbps);
    EXPECT_EQ(a.gpu->launch_gap_s, b.gpu->launch_gap_s);
    EXPECT_EQ(a.gpu->h2d_pinned_gbps, b.gpu->h2d_pinned_gbps);
    EXPECT_EQ(a.gpu->h2d_pageable_gbps, b.gpu->h2d_pageable_gbps);
    EXPECT_EQ(a.gpu->host_roundtrip_s, b.gpu->host_roundtrip_s);
    EXPECT_EQ(a.gpu->matmul_tflops, b.gpu->matmul_tflops);
    EXPECT_EQ(a.gpu->moe_decode_gbps, b.gpu->moe_decode_gbps);
    EXPECT_EQ(a.gpu->deltanet_step_s, b.gpu->deltanet_step_s);
    EXPECT_EQ(a.gpu->deltanet_state_bytes, b.gpu->deltanet_state_bytes);
    EXPECT_EQ(a.gpu->handoff_roundtrip_s, b.gpu->handoff_roundtrip_s);
    EXPECT_EQ(a.gpu->moe_prefill_tflops, b.gpu->moe_prefill_tflops);
    EXPECT_EQ(a.gpu->deltanet_prefill_token_s, b.gpu->deltanet_prefill_token_s);
    EXPECT_EQ(a.gpu->moe_prefill_large_tflops, b.gpu->moe_prefill_large_tflops);
    EXPECT_EQ(a.gpu->moe_prefill_large_tokens, b.gpu->moe_prefill_large_tokens);
    EXPECT_EQ(a.gpu->attention_decode_f16, b.gpu->attention_decode_f16);
}

std::string error_of(const std::string& text) {
    try {
        profile_from_json(text);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

// A fresh folder under the system temp dir, removed at the end of the test.
class TempDir {
public:
    TempDir() {
        std::random_device rd;
        path_ = fs::temp_directory_path() /
                ("mox-hw-test-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
        fs::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    const fs::path& path() const { return path_; }

private:
    fs::path path_;
};

TEST(HardwareProfile, RoundTripKeepsEveryField) {
    const HardwareProfile p = full_profile();
    const std::string text = profile_to_json(p);
    expect_same(profile_from_json(text), p);
    EXPECT_EQ(nlohmann::json::parse(text).at("schema"), 1);
    // Written again, the same text (stable key order).
    EXPECT_EQ(profile_to_json(profile_from_json(text)), text);
}

TEST(HardwareProfile, RoundTripWithoutGpu) {
    HardwareProfile p = full_profile();
    p.gpu.reset();
    p.measured = false;
    const HardwareProfile q = profile_from_json(profile_to_json(p));
    expect_same(q, p);
    EXPECT_FALSE(q.gpu.has_value());
}

TEST(HardwareProfile, UnknownKeysAreIgnoredAndTypeNamesCanonical) {
    nlohmann::json j = nlohmann::json::parse(profile_to_json(full_profile()));
    j["future_field"] = {1, 2, 3};
    j["cpu"]["numa"] = "two nodes";
    j["gpu"]["clock_mhz"] = 1980;
    j["cpu"]["expert_gbps"] = {{"q4_k", 10.0}, {"iq4_xs", 20.0}, {"not_a_type", 1.0}};
    const HardwareProfile p = profile_from_json(j.dump());
    expect_same(p, [&] {
        HardwareProfile e = full_profile();
        e.cpu.expert_gbps = {{"Q4_K", 10.0}, {"IQ4_XS", 20.0}, {"not_a_type", 1.0}};
        return e;
    }());
}

TEST(HardwareProfile, OptionalPartsMayBeLeftOut) {
    nlohmann::json j = nlohmann::json::parse(profile_to_json(full_profile()));
    j.erase("machine");
    j.erase("created");
    j.erase("mox_commit");
    j.erase("gpu");
    j["cpu"].erase("expert_gflops");
    const HardwareProfile p = profile_from_json(j.dump());
    EXPECT_EQ(p.machine, "");
    EXPECT_FALSE(p.gpu.has_value());
    EXPECT_TRUE(p.cpu.expert_gflops.empty());
    EXPECT_EQ(p.cpu.expert_gbps.size(), 2u);
}

// Profiles written before the MoE and DeltaNet decode probes existed still load, without them (the
// speed model then charges bytes at the matvec rate); a step time without its state size is refused.
TEST(HardwareProfile, DecodeProbesMayBeAbsent) {
    {  // a key this build does not read (an older profile's norm_epilogue_s) is ignored
        nlohmann::json old = nlohmann::json::parse(profile_to_json(full_profile()));
        old["gpu"]["norm_epilogue_s"] = 4.05e-6;
        expect_same(profile_from_json(old.dump()), full_profile());
    }
    nlohmann::json j = nlohmann::json::parse(profile_to_json(full_profile()));
    j["gpu"].erase("moe_decode_gbps");
    j["gpu"].erase("deltanet_step_s");
    j["gpu"].erase("deltanet_state_bytes");
    j["gpu"].erase("handoff_roundtrip_s");
    j["gpu"].erase("moe_prefill_tflops");
    j["gpu"].erase("deltanet_prefill_token_s");
    j["gpu"].erase("moe_prefill_large_tflops");
    j["gpu"].erase("moe_prefill_large_tokens");
    j["gpu"].erase("attention_decode_f16");
    const HardwareProfile p = profile_from_json(j.dump());
    ASSERT_TRUE(p.gpu.has_value());
    EXPECT_TRUE(p.gpu->moe_decode_gbps.empty());
    EXPECT_EQ(p.gpu->deltanet_step_s, 0.0);
    EXPECT_EQ(p.gpu->handoff_roundtrip_s, 0.0);
    EXPECT_TRUE(p.gpu->moe_prefill_tflops.empty());
    EXPECT_EQ(p.gpu->deltanet_prefill_token_s, 0.0);
    EXPECT_TRUE(p.gpu->moe_prefill_large_tflops.empty());
    EXPECT_EQ(p.gpu->moe_prefill_large_tokens, 0);
    EXPECT_TRUE(p.gpu->attention_decode_f16.empty());
    EXPECT_EQ(p.gpu->matvec_gbps.size(), 2u);
    j = nlohmann::json::parse(profile_to_json(full_profile()));
    j["gpu"].erase("deltanet_state_bytes");
    EXPECT_NE(error_of(j.dump()).find("deltanet_state_bytes"), std::string::npos) << error_of(j.dump());
    j["gpu"]["deltanet_state_bytes"] = 0;
    EXPECT_NE(error_of(j.dump()).find("deltanet_state_bytes"), std::string::npos) << error_of(j.dump());
    j["gpu"].erase("deltanet_step_s");  // the prefill probe needs the state bytes too
    EXPECT_NE(error_of(j.dump()).find("deltanet_prefill_token_s"), std::string::npos) << error_of(j.dump());
    // A large-batch MoE rate needs its size, above the 512 tokens of the other rate.
    j = nlohmann::json::parse(profile_to_json(full_profile()));
    j["gpu"].erase("moe_prefill_large_tokens");
    EXPECT_NE(error_of(j.dump()).find("moe_prefill_large_tokens"), std::string::npos) << error_of(j.dump());
    j["gpu"]["moe_prefill_large_tokens"] = 512;
    EXPECT_NE(error_of(j.dump()).find("moe_prefill_large_tokens"), std::string::npos) << error_of(j.dump());
    // Attention points: [keys, seconds] pairs with increasing keys.
    for (const char* bad : {R"([[256, 1e-5], [256, 2e-5]])", R"([[0, 1e-5]])", R"([[256]])", R"([[256, -1]])",
                            R"({"256": 1e-5})", R"([[256.5, 1e-5]])"}) {
        j = nlohmann::json::parse(profile_to_json(full_profile()));
        j["gpu"]["attention_decode_f16"] = nlohmann::json::parse(bad);
        EXPECT_NE(error_of(j.dump()).find("attention_decode_f16"), std::string::npos)
            << bad << ": " << error_of(j.dump());
    }
}

TEST(HardwareProfile, OtherSchemaVersionsAreRefused) {
    nlohmann::json j = nlohmann::json::parse(profile_to_json(full_profile()));
    j["schema"] = 2;
    EXPECT_NE(error_of(j.dump()).find("schema 2"), std::string::npos) << error_of(j.dump());
    j["schema"] = "1";
    EXPECT_NE(error_of(j.dump()).find("schema"), std::string::npos);
    j.erase("schema");
    EXPECT_NE(error_of(j.dump()).find("missing key 'schema'"), std::string::npos) << error_of(j.dump());
}

TEST(HardwareProfile, MissingKeysAreNamed) {
    const nlohmann::json full = nlohmann::json::parse(profile_to_json(full_profile()));
    for (const char* key : {"measured", "host_ram_bytes", "host_lockable_bytes", "cpu"}) {
        nlohmann::json j = full;
        j.erase(key);
        EXPECT_NE(error_of(j.dump()).find(std::string("missing key '") + key + "'"), std::string::npos)
            << key << ": " << error_of(j.dump());
    }
    for (const char* key : {"threads", "dram_gbps"}) {
        nlohmann::json j = full;
        j["cpu"].erase(key);
        EXPECT_NE(error_of(j.dump()).find(std::string("missing key 'cpu.") + key + "'"), std::string::npos)
            << key << ": " << error_of(j.dump());
    }
    for (const char* key : {"name", "total_bytes", "context_bytes", "launch_gap_s", "h2d_pinned_gbps",
                            "h2d_pageable_gbps", "host_roundtrip_s"}) {
        nlohmann::json j = full;
        j["gpu"].erase(key);
        EXPECT_NE(error_of(j.dump()).find(std::string("missing key 'gpu.") + key + "'"), std::string::npos)
            << key << ": " << error_of(j.dump());
    }
}

TEST(HardwareProfile, WrongTypesAndValuesAreNamed) {
    const nlohmann::json full = nlohmann::json::parse(profile_to_json(full_profile()));
    nlohmann::json j = full;
    j["cpu"]["dram_gbps"] = "fast";
    EXPECT_NE(error_of(j.dump()).find("cpu.dram_gbps"), std::string::npos);
    j = full;
    j["gpu"]["matvec_gbps"]["Q4_K"] = -1.0;
    EXPECT_NE(error_of(j.dump()).find("gpu.matvec_gbps.Q4_K"), std::string::npos) << error_of(j.dump());
    j = full;
    j["host_ram_bytes"] = 1.5;
    EXPECT_NE(error_of(j.dump()).find("host_ram_bytes"), std::string::npos);
    j = full;
    j["host_ram_bytes"] = 2e9;  // a whole number written as a float is fine
    EXPECT_EQ(profile_from_json(j.dump()).host_ram_bytes, 2'000'000'000ull);
    j = full;
    j["gpu"] = 3;
    EXPECT_NE(error_of(j.dump()).find("'gpu'"), std::string::npos);
    EXPECT_NE(error_of("[1, 2]").find("top level"), std::string::npos);
    EXPECT_NE(error_of("{\"schema\": 1,").find("not valid JSON"), std::string::npos);
}

TEST(HardwareProfile, NonFiniteNumbersAreNotWritten) {
    HardwareProfile p = full_profile();
    p.cpu.expert_gbps["Q4_K"] = std::numeric_limits<double>::quiet_NaN();
    EXPECT_THROW(profile_to_json(p), Error);
}

TEST(HardwareProfile, SaveCreatesFoldersAndLoadReadsIt) {
    TempDir dir;
    const std::string path = (dir.path() / "a" / "b" / "hw.json").string();
    EXPECT_FALSE(load_profile(path).has_value());
    save_profile(full_profile(), path);
    const auto loaded = load_profile(path);
    ASSERT_TRUE(loaded.has_value());
    expect_same(*loaded, full_profile());
    // Saving again replaces the file and leaves no temporary behind.
    HardwareProfile p = full_profile();
    p.cpu.threads = 2;
    save_profile(p, path);
    EXPECT_EQ(load_profile(path)->cpu.threads, 2);
    int files = 0;
    for (const auto& e : fs::directory_iterator(dir.path() / "a" / "b")) files += e.is_regular_file();
    EXPECT_EQ(files, 1);
}

TEST(HardwareProfile, MalformedFileIsAnErrorNamingIt) {
    TempDir dir;
    const std::string path = (dir.path() / "bad.json").string();
    {
        std::ofstream out(path);
        out << "{ not json";
    }
    try {
        load_profile(path);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
}

TEST(HardwareProfile, DefaultPathFollowsTheEnvironment) {
    const char* old_mox = std::getenv("MOX_CACHE_DIR");
    const std::string saved = old_mox ? old_mox : "";
    setenv("MOX_CACHE_DIR", "/tmp/mox-cache-test", 1);
    const std::string p = default_profile_path();
    EXPECT_EQ(p.rfind("/tmp/mox-cache-test/hardware-", 0), 0u) << p;
    EXPECT_EQ(p.substr(p.size() - 5), ".json");
    unsetenv("MOX_CACHE_DIR");
    const char* old_xdg = std::getenv("XDG_CACHE_HOME");
    const std::string saved_xdg = old_xdg ? old_xdg : "";
    setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
    EXPECT_EQ(default_profile_path().rfind("/tmp/xdg-test/mox/hardware-", 0), 0u) << default_profile_path();
    if (old_xdg)
        setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
    else
        unsetenv("XDG_CACHE_HOME");
    if (old_mox) setenv("MOX_CACHE_DIR", saved.c_str(), 1);
}

}  // namespace
}  // namespace mox::plan
