// mox bench --compare: llama.cpp's llama-bench on the same file with the same options, one
// configuration and one repetition per invocation, so its runs can be interleaved with mox's.
#pragma once

#include "engine/bench_options.h"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace mox::engine {

// llama-bench's arguments (without the program) for one repetition of `config`:
// -m -r 1 -o json, the test (-p/-n, or -p 0 -n 0 -pg P,G), -d -t -ctk -ctv -b -ub -ngl -ncmoe -fa,
// then `extra` (--compare-args, e.g. "--repack 0" where llama.cpp's AMX repacking crashes).
std::vector<std::string> llama_bench_args(const BenchConfig& config, const std::vector<std::string>& extra);

// --compare-args "a b  c" -> {"a", "b", "c"} (split on whitespace; no quoting).
std::vector<std::string> split_args(std::string_view text);

struct LlamaBenchSample {
    double ns = 0;
    double tokens_per_s = 0;
    std::string build_commit;
};

// Parses llama-bench's `-o json` output for one invocation: an array that must hold exactly one row,
// whose n_prompt/n_gen/n_depth must be the config's (else the two engines would not be measuring
// the same thing). Takes samples_ns[0]/samples_ts[0], or avg_ns/avg_ts when the samples are missing.
// Throws mox::Error with the reason.
LlamaBenchSample parse_llama_bench_json(std::string_view text, const BenchConfig& config);

struct ProcessResult {
    int exit_code = 0;  // 128 + signal when killed by one
    std::string out;    // stdout
    std::string err;    // stderr
};
// Runs program with args (no shell), capturing stdout and stderr. Throws if it cannot be started.
ProcessResult run_process(const std::string& program, const std::vector<std::string>& args);

// One repetition through llama-bench: runs it, checks the exit code, parses the output.
LlamaBenchSample run_llama_bench(const std::string& program, const BenchConfig& config,
                                 const std::vector<std::string>& extra);

}  // namespace mox::engine
