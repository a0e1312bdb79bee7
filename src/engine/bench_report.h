// mox bench, part 2: statistics over repetitions and the output formats (md, csv, json, jsonl, sql).
// Field names follow llama-bench's JSON (avg_ts, stddev_ts, samples_ts, n_prompt, ...) so tools that
// read llama-bench results read these too; mox's own fields are added after them.
#pragma once

#include "engine/bench_options.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mox::engine {

struct SampleStats {
    double mean = 0, median = 0, stddev = 0, min = 0, max = 0;  // stddev: sample (n - 1), 0 for n < 2
};
SampleStats sample_stats(std::span<const double> values);  // throws on an empty span

// What is the same for every row of one run.
struct BenchMeta {
    std::string build_commit = "unknown";
    std::string cpu_info;  // CPU model name
    int cpu_cores = 0;     // logical CPUs online
    std::string backends = "CPU";
    std::string corpus;             // where the prompt text came from
    std::string bandwidth_source;   // "measured" (in this run), "given" (--host-bandwidth) or "" (none)
    uint64_t bandwidth_buffer = 0;  // bytes the measurement read (measured only)
    bool compare = false;           // --compare: rows carry llama-bench's numbers too (llama_* fields)
};

// Model facts, per -m file.
struct BenchModelInfo {
    std::string filename;
    std::string type;   // "qwen35moe 35B.A3B Q4_K - Medium", as llama-bench (llama_model_type)
    uint64_t size = 0;  // bytes of tensor data
    uint64_t n_params = 0;
    std::string sha256;  // of (first 16 MiB of the file, then the file size as 8 bytes little-endian)
    // For the decode roofline (models/summary, as `mox inspect` prints it):
    double weight_bytes_per_token = 0;   // weight bytes read per generated token at batch 1
    double kv_k_elems_per_token = 0;     // K elements per context token, all attention layers
    double kv_v_elems_per_token = 0;     // V elements likewise
    uint64_t recurrent_state_bytes = 0;  // per sequence; read and written once per token
};

// The model as llama-bench names it, so the two tools' tables join: the architecture, llama.cpp's
// size label for the shape ("35B.A3B", "8x7B"; "?B" for a shape it does not name) and the file type
// of general.file_type ("Q4_K - Medium"; without it, the dominant tensor type and " (guessed)").
std::string llama_model_type(std::string_view arch, int64_t n_layer, int64_t n_expert,
                             std::optional<uint32_t> file_type, std::string_view dominant_type);

// Bytes one generated token reads in a tg test: the active weights, the K/V cache at the test's
// mean context (depth + prompt + half the generated tokens) in the row's cache types, and the
// recurrent state read and written once. 0 for rows without generation.
double decode_bytes_per_token(const BenchModelInfo& model, const BenchConfig& config);

// llama-bench's numbers for one row under --compare (one sample per llama-bench invocation).
struct OtherEngineSamples {
    std::vector<double> samples_ns, samples_ts;
    std::vector<int64_t> run_slots;
    std::string build_commit;
};

struct BenchResult {
    BenchConfig config;
    BenchModelInfo model;
    std::string test_time;             // ISO 8601 UTC of the first timed repetition
    std::vector<double> samples_ns;    // one per repetition, in run order
    std::vector<double> samples_ts;    // tokens per second of each repetition
    std::vector<int64_t> run_slots;    // each repetition's position in the whole run (warm-ups included)
    uint64_t host_rss_bytes = 0;       // VmRSS right after the row's last repetition
    uint64_t host_peak_bytes = 0;      // VmHWM (process peak) at that moment
    double host_read_bytes_per_s = 0;  // host read bandwidth for this row's threads; 0: not measured
    // Per repetition, the shares of all cores' time that went to other work on the machine (other
    // processes, the kernel) and to the hypervisor (steal) while it ran (core/cpu_times.h): a row
    // whose host-side threads were preempted shows it here. Parallel to samples_ts; reported only
    // when every repetition has a reading (/proc readable, at least a clock tick long).
    std::vector<double> host_cpu_other, host_cpu_steal;
    double gpu_bytes_per_s = 0;  // GPU rows: the device's memory bandwidth (driver peak); 0: none
    // GPU and hybrid facts; empty while no GPU is used (there is no CUDA path in mox bench yet).
    std::optional<uint64_t> vram_bytes;            // from the driver, after the row's last repetition
    std::optional<uint64_t> predicted_vram_bytes;  // the memory model's number for the same setup
    std::optional<double> predicted_tps;           // the speed model's number (profile needed)
    std::optional<uint64_t> pcie_bytes;            // host<->device bytes moved per repetition
    std::optional<double> expert_cache_hit_rate;   // of the GPU expert cache
    std::optional<double> expert_cache_misses_per_token;  // selections the CPU computed, per decode token
    std::optional<OtherEngineSamples> llama;       // --compare
};

// One row as ordered (name, value) fields; every format prints exactly these.
nlohmann::ordered_json result_fields(const BenchResult& r, const BenchMeta& meta);

std::string format_markdown(std::span<const BenchResult> rows, const BenchMeta& meta);
std::string format_csv(std::span<const BenchResult> rows, const BenchMeta& meta);
std::string format_json(std::span<const BenchResult> rows, const BenchMeta& meta);   // an array
std::string format_jsonl(std::span<const BenchResult> rows, const BenchMeta& meta);  // one object a line
std::string format_sql(std::span<const BenchResult> rows, const BenchMeta& meta);    // CREATE + INSERTs
// By name: md, csv, json, jsonl, sql. Throws on another name.
std::string format_results(std::string_view format, std::span<const BenchResult> rows, const BenchMeta& meta);

}  // namespace mox::engine
