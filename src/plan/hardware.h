// What the planner knows about a machine (the speed model's inputs): bandwidths, latencies
// and fixed costs measured once by `mox calibrate` and cached per machine as JSON. Tests build
// synthetic profiles by hand (measured = false) to exercise the planner as a pure function.
//
// Rates are keyed by weight type name ("q4_K", "iq4_xs"...: quant::type_name) where the kernels
// differ per block format; a type that was not measured has no entry and the speed model says so.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mox::plan {

struct GpuProfile {
    std::string name;           // "NVIDIA H200"
    uint64_t total_bytes = 0;   // device memory (driver)
    // Device memory the driver reports as used right after mox created its CUDA context and loaded
    // its kernels, before any allocation of ours: what --vram-budget charges first.
    uint64_t context_bytes = 0;
    // Decode matvec over a weight far larger than the caches: bytes of weight per second, per type.
    std::map<std::string, double> matvec_gbps;
    double launch_gap_s = 0;       // time per kernel of a replayed decode graph beyond its bytes
    double h2d_pinned_gbps = 0;    // cudaMemcpyAsync host -> device from page-locked memory
    double h2d_pageable_gbps = 0;  // the same from ordinary (mmap'd or malloc'd) memory
    // One hybrid hand-off inside a decode graph: a small device -> host copy, a host callback and a
    // host -> device copy, with nothing to compute (the fixed cost per CPU-expert layer per token).
    double host_roundtrip_s = 0;
    // The decode graph's own hand-off (ops/cuda_handoff.h: publish, a spinning host thread answers,
    // collect) with nothing to compute, launches included. Optional (0: absent in older profiles,
    // where the speed model charges host_roundtrip_s instead).
    double handoff_roundtrip_s = 0;
    // Prefill probes (optional, as above): moe_prefill_tflops, a GPU expert layer's batched MoE at a
    // 512-token micro-batch, routed FLOPs per second per type (its tokens spread over the experts, so
    // well below matmul_tflops); deltanet_prefill_token_s, a Gated DeltaNet layer's conv + chunked
    // delta rule per token at that micro-batch, for deltanet_state_bytes of state.
    std::map<std::string, double> moe_prefill_tflops;
    double deltanet_prefill_token_s = 0;
    // The batched MoE's rate at a larger micro-batch of moe_prefill_large_tokens tokens (optional, as
    // above; the speed model interpolates between the two sizes in log2 of the tokens).
    std::map<std::string, double> moe_prefill_large_tflops;
    int64_t moe_prefill_large_tokens = 0;
    // Decode attention of Qwen3.6's shape over an f16 cache (16 query and 2 KV heads of 256) at a few
    // context lengths: (keys, seconds per layer), keys increasing (optional, as above; the speed model
    // interpolates, and charges the cache's bytes where this is absent or the cache is not f16).
    std::vector<std::pair<int64_t, double>> attention_decode_f16;
    // Tensor-core matmul over quantized weights at prefill batch sizes (512+ tokens), per type.
    std::map<std::string, double> matmul_tflops;
    // Latency-bound decode launches, measured as the decode graph runs them (cuda_probe.h); absent
    // (empty / 0) in profiles of older builds, where the speed model falls back to bytes at the
    // matvec rate and says so. moe_decode_gbps: a GPU MoE layer's routed + shared expert bytes per
    // second through its two fused launches, per type. deltanet_step_s: a Gated DeltaNet layer's conv
    // + delta rule for deltanet_state_bytes of state (other shapes scale by their state bytes).
    std::map<std::string, double> moe_decode_gbps;
    double deltanet_step_s = 0;
    uint64_t deltanet_state_bytes = 0;
};

struct CpuProfile {
    int threads = 0;          // the threads the measurement used (mox's default: physical cores)
    double dram_gbps = 0;     // streaming read of a large buffer by all threads
    // Routed experts on the CPU at batch 1 (mox's MoE operator, k = 8 experts of the model's shape):
    // expert weight bytes read per second, per type.
    std::map<std::string, double> expert_gbps;
    // The same operator at a prefill batch (>= 128 tokens): multiply-adds as GFLOP/s, per type.
    std::map<std::string, double> expert_gflops;
};

struct HardwareProfile {
    std::string machine;     // hostname
    std::string created;     // UTC, ISO 8601
    std::string mox_commit;  // the build that measured it
    bool measured = false;   // false: written by hand (tests, what-if planning)
    uint64_t host_ram_bytes = 0;        // MemTotal
    uint64_t host_lockable_bytes = 0;   // RLIMIT_MEMLOCK (or RAM when unlimited): pinned memory ceiling
    CpuProfile cpu;
    std::optional<GpuProfile> gpu;      // none: no CUDA device (or a build without CUDA)
};

// JSON round trip (every field; unknown keys are ignored, missing required ones are an error naming
// the key). A file written by another version of the schema is refused with its version.
std::string profile_to_json(const HardwareProfile& p);
HardwareProfile profile_from_json(const std::string& text);

// Where `mox calibrate` caches the profile of this machine: $MOX_CACHE_DIR, else
// $XDG_CACHE_HOME/mox, else ~/.cache/mox; file hardware-<hostname>.json.
std::string default_profile_path();
// nullopt when the file does not exist; a malformed file is a mox::Error naming it.
std::optional<HardwareProfile> load_profile(const std::string& path);
void save_profile(const HardwareProfile& p, const std::string& path);  // creates the folder

}  // namespace mox::plan
