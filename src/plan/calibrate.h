// `mox calibrate`: measures the numbers of a HardwareProfile (plan/hardware.h) on this machine. The
// CPU side runs mox's own operators (ops::moe_ffn on expert stacks of the real model's shape) on a
// mox ThreadPool; the GPU side (builds with CUDA, device 0) runs the probes of ops/cuda_probe.h.
// Every measurement is the median of its repetitions after warm-up. Units: GB/s = 1e9 bytes/s,
// GFLOP/s = 1e9 FLOP/s, a multiply-add counted as 2 FLOPs (as the GPU's TFLOP/s).
#pragma once

#include "plan/hardware.h"
#include "quant/types.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mox::plan {

// The weight types measured when none are asked for: what Qwen3.5/3.6-MoE GGUFs store experts in.
std::vector<quant::TypeId> default_calibration_types();

struct CalibrateOptions {
    int threads = 0;  // <= 0: one per physical core (mox's default)
    std::vector<quant::TypeId> types = default_calibration_types();

    // DRAM: every thread streams its share of a buffer of this size, `dram_reps` passes (the best).
    uint64_t dram_bytes = uint64_t{1} << 30;
    int dram_reps = 5;

    // Experts: a stack of the model's expert shape (n_embd 2048, n_ff 512) with at least this many
    // bytes of one type, so that random experts come from DRAM, not from the caches. 0: 16 times
    // the last-level cache and at least 1 GiB, at most a quarter of RAM (and 8 GiB).
    uint64_t expert_stack_bytes = 0;
    int expert_k = 8;      // experts per token (the model's top-k)
    int decode_reps = 40;  // batch-1 calls, each with k fresh random experts (at least)
    // ... and calls until this much time has passed: 40 Q4_K calls are ~6 ms on the H200 host, a
    // glimpse of a shared machine's momentary state (85 vs 92 GB/s ten minutes apart:
    // bench/results/2026-11-30-planner-accuracy-h200).
    double decode_min_seconds = 0.25;
    int64_t prefill_tokens = 256;
    int prefill_reps = 3;

    bool gpu = true;  // run the GPU probes (builds with CUDA and a device present)
    // GPU probe sizes (ops/cuda_probe.h).
    uint64_t gpu_copy_bytes = uint64_t{256} << 20;
    uint64_t gpu_matvec_bytes = uint64_t{256} << 20;
    int gpu_reps = 10;
    int64_t gpu_matmul_tokens = 512;
    // The batched MoE's rate is also measured at this larger micro-batch (-ub 4096 is the hybrid
    // prefill's): its per-expert products grow with the tokens, and so does its efficiency.
    int64_t gpu_moe_large_tokens = 4096;

    std::string mox_commit;  // recorded in the profile

    // Called before each step with a short description ("DRAM read", "CPU experts Q4_K"...).
    std::function<void(const std::string&)> progress;
};

// Smaller sizes and fewer repetitions (a few seconds): for tests and a first look.
CalibrateOptions quick_calibrate_options();

// MemTotal of /proc/meminfo in bytes (0 when it cannot be read).
uint64_t host_ram_bytes();

// CPU time counters of /proc/stat's aggregate "cpu" line: busy = all but idle and iowait.
struct CpuTimes {
    uint64_t busy = 0, total = 0;
};
// nullopt when `stat_text` has no well-formed "cpu" line.
std::optional<CpuTimes> parse_cpu_times(const std::string& stat_text);
// The fraction of all CPUs' time that other processes kept busy over `window_s` seconds, sampled
// before calibrating (calibrate itself idles meanwhile); nullopt where /proc/stat cannot be read.
// Calibrating on a busy host measures low CPU rates and a slow host round trip without any error.
std::optional<double> host_busy_fraction(double window_s = 0.25);
// Above this, calibrate says the profile was measured on a busy host.
inline constexpr double kBusyHostFraction = 0.2;
// RLIMIT_MEMLOCK's soft limit, or `ram` where it is unlimited: how much host memory may be pinned.
uint64_t host_lockable_bytes(uint64_t ram);

// `threads` threads (<= 0: one per physical core) read a buffer of `bytes`, `reps` passes; the best
// pass in GB/s (core/read_bandwidth.h, the same measurement `mox bench` reports).
double measure_dram_gbps(int threads, uint64_t bytes, int reps);

struct ExpertRates {
    double gbps = 0;    // batch 1: expert weight bytes read per second, GB/s
    double gflops = 0;  // prefill_tokens tokens: GFLOP/s
};
// ops::moe_ffn on a stack of `type` experts (see CalibrateOptions), batch 1 and a prefill batch.
ExpertRates measure_expert_rates(quant::TypeId type, const CalibrateOptions& o);

// The CPU part of the profile.
CpuProfile calibrate_cpu(const CalibrateOptions& o);

// The per-type rates of `types` that `p` lacks (CPU experts; GPU matvec and matmul where p has a GPU
// and mox has the kernel), measured with o's sizes and added to p. Returns the types measured (empty:
// nothing was missing). A profile from a quick calibration holds two types; a model stores others.
std::vector<quant::TypeId> calibrate_missing_types(HardwareProfile& p, const std::vector<quant::TypeId>& types,
                                                   const CalibrateOptions& o);

// The whole profile: host facts, CPU and (when there is one and o.gpu) the GPU. `notes` receives
// remarks for the user (e.g. that the GPU's memory use includes other processes).
HardwareProfile calibrate(const CalibrateOptions& o, std::vector<std::string>* notes = nullptr);

}  // namespace mox::plan
