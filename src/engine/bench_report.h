// mox bench, part 2: statistics over repetitions and the output formats (md, csv, json, jsonl, sql).
// Field names follow llama-bench's JSON (avg_ts, stddev_ts, samples_ts, n_prompt, ...) so tools that
// read llama-bench results read these too; mox's own fields are added after them.
#pragma once

#include "engine/bench_options.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
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
    std::string corpus;  // where the prompt text came from
};

// Model facts, per -m file.
struct BenchModelInfo {
    std::string filename;
    std::string type;   // "qwen35moe 35.1B Q4_K" (architecture, parameters, dominant tensor type)
    uint64_t size = 0;  // bytes of tensor data
    uint64_t n_params = 0;
    std::string sha256;  // of (first 16 MiB of the file, then the file size as 8 bytes little-endian)
};

struct BenchResult {
    BenchConfig config;
    BenchModelInfo model;
    std::string test_time;           // ISO 8601 UTC of the first timed repetition
    std::vector<double> samples_ns;  // one per repetition, in run order
    std::vector<double> samples_ts;  // tokens per second of each repetition
    std::vector<int64_t> run_slots;  // each repetition's position in the whole run (warm-ups included)
    uint64_t host_rss_bytes = 0;     // VmRSS right after the row's last repetition
    uint64_t host_peak_bytes = 0;    // VmHWM (process peak) at that moment
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
