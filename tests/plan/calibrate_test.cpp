// The CPU calibration on small sizes (the CI has 2 cores and runs this under ASan): every number is
// finite and positive, DRAM bandwidth is within what any machine can do, the per-type tables hold
// exactly the types asked for, and the host facts are read.
#include "plan/calibrate.h"
#include "core/error.h"
#include "plan/auto_plan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

namespace mox::plan {
namespace {

CalibrateOptions small_options() {
    CalibrateOptions o = quick_calibrate_options();
    o.threads = 2;
    o.types = {quant::TypeId::q4_k};
    o.dram_bytes = uint64_t{32} << 20;
    o.dram_reps = 2;
    o.expert_stack_bytes = uint64_t{8} << 20;  // the minimum of 2k = 16 experts applies (~27 MB)
    o.decode_reps = 3;
    o.prefill_tokens = 16;
    o.prefill_reps = 1;
    o.gpu = false;
    return o;
}

TEST(Calibrate, CpuNumbersAreFiniteAndPositive) {
    std::vector<std::string> steps;
    CalibrateOptions o = small_options();
    o.progress = [&](const std::string& s) { steps.push_back(s); };
    const CpuProfile cpu = calibrate_cpu(o);
    EXPECT_EQ(cpu.threads, 2);
    EXPECT_TRUE(std::isfinite(cpu.dram_gbps));
    EXPECT_GT(cpu.dram_gbps, 0.1);
    EXPECT_LT(cpu.dram_gbps, 10000.0);
    ASSERT_EQ(cpu.expert_gbps.size(), 1u);
    ASSERT_EQ(cpu.expert_gflops.size(), 1u);
    for (const auto* m : {&cpu.expert_gbps, &cpu.expert_gflops}) {
        ASSERT_EQ(m->count("Q4_K"), 1u);
        EXPECT_TRUE(std::isfinite(m->at("Q4_K")));
        EXPECT_GT(m->at("Q4_K"), 0.0);
    }
    EXPECT_EQ(steps.size(), 2u);  // DRAM, then one type
}

TEST(Calibrate, WholeProfileWithoutGpu) {
    const HardwareProfile p = calibrate(small_options());
    EXPECT_TRUE(p.measured);
    EXPECT_FALSE(p.machine.empty());
    EXPECT_EQ(p.created.size(), 20u);  // 2026-11-29T19:00:00Z
    EXPECT_GT(p.host_ram_bytes, uint64_t{64} << 20);
    EXPECT_GT(p.host_lockable_bytes, 0u);
    EXPECT_LE(p.host_lockable_bytes, p.host_ram_bytes);
    EXPECT_FALSE(p.gpu.has_value());
    EXPECT_EQ(p.cpu.expert_gbps.size(), 1u);
}

TEST(Calibrate, MissingTypesAreMeasuredOnceAndAdded) {
    HardwareProfile p = calibrate(small_options());  // Q4_K only
    const double q4 = p.cpu.expert_gbps.at("Q4_K");
    const std::vector<quant::TypeId> want = {quant::TypeId::f32, quant::TypeId::q4_k, quant::TypeId::q6_k,
                                             quant::TypeId::q8_k};
    const std::vector<quant::TypeId> added = calibrate_missing_types(p, want, small_options());
    // F32 has no block format to measure, Q4_K is there, Q8_K cannot hold experts: only Q6_K.
    ASSERT_EQ(added, std::vector<quant::TypeId>{quant::TypeId::q6_k});
    EXPECT_GT(p.cpu.expert_gbps.at("Q6_K"), 0.0);
    EXPECT_GT(p.cpu.expert_gflops.at("Q6_K"), 0.0);
    EXPECT_EQ(p.cpu.expert_gbps.at("Q4_K"), q4);  // measured rates are kept, not redone
    EXPECT_TRUE(calibrate_missing_types(p, want, small_options()).empty());
}

TEST(Calibrate, AutoPlanCompletesACachedProfileWithTheModelsTypes) {
    // A cached profile that lacks Q6_K (made for another model): --plan auto's profile_or_calibrate
    // measures Q6_K once, saves it to the file and says so; the next call finds everything.
    const std::string path =
        (std::filesystem::temp_directory_path() / fmt::format("mox-profile-test-{}.json", ::getpid())).string();
    save_profile(calibrate(small_options()), path);  // Q4_K only, no GPU
    std::string note;
    const std::vector<quant::TypeId> types = {quant::TypeId::q4_k, quant::TypeId::q6_k, quant::TypeId::f32};
    const HardwareProfile p = profile_or_calibrate(path, types, &note);
    EXPECT_GT(p.cpu.expert_gbps.at("Q6_K"), 0.0);
    EXPECT_NE(note.find("measured Q6_K"), std::string::npos) << note;
    EXPECT_EQ(load_profile(path)->cpu.expert_gbps.count("Q6_K"), 1u);
    profile_or_calibrate(path, types, &note);
    EXPECT_EQ(note, "hardware profile " + path);
    std::filesystem::remove(path);
}

TEST(Calibrate, HostLockableIsCappedByRam) {
    EXPECT_LE(host_lockable_bytes(4096), 4096u);
    EXPECT_GT(host_ram_bytes(), 0u);
}

// /proc/stat's aggregate line: busy is everything but idle and iowait; guest time is already inside
// user and nice, so it is not added twice; malformed text is no measurement.
TEST(Calibrate, CpuTimesFromProcStat) {
    const auto t = parse_cpu_times(
        "cpu  100 5 50 800 20 3 2 0 7 0\ncpu0 50 2 25 400 10 1 1 0 3 0\nintr 12345\n");
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->total, 980u);
    EXPECT_EQ(t->busy, 160u);
    EXPECT_FALSE(parse_cpu_times("cpu0 1 2 3 4 5 6 7 8\n").has_value());  // no aggregate line
    EXPECT_FALSE(parse_cpu_times("cpu  1 2 3\n").has_value());            // truncated
    EXPECT_FALSE(parse_cpu_times("").has_value());
    // On this machine: a fraction, when /proc/stat is there.
    if (const auto busy = host_busy_fraction(0.05)) {
        EXPECT_GE(*busy, 0.0);
        EXPECT_LE(*busy, 1.0);
    }
}

// The batch-1 expert probe runs for its minimum time however few calls that takes: a fixed call count
// was ~6 ms on the H200 host, too short to average out a shared machine's momentary state.
TEST(Calibrate, ExpertDecodeProbeRunsForItsMinimumTime) {
    CalibrateOptions o = small_options();
    o.decode_min_seconds = 0.3;
    const auto t0 = std::chrono::steady_clock::now();
    const ExpertRates r = measure_expert_rates(quant::TypeId::q4_k, o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(s, 0.3);
    EXPECT_GT(r.gbps, 0.0);
    o.decode_min_seconds = -1;
    EXPECT_THROW(measure_expert_rates(quant::TypeId::q4_k, o), Error);
}

TEST(Calibrate, RefusesTypesThatCannotBeExperts) {
    CalibrateOptions o = small_options();
    EXPECT_THROW(measure_expert_rates(quant::TypeId::i32, o), Error);
    EXPECT_THROW(measure_expert_rates(quant::TypeId::q8_k, o), Error);
}

}  // namespace
}  // namespace mox::plan
