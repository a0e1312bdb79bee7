// mox bench, part 4: running one repetition of one configuration on the model (CPU path).
// Prompts are real text: the corpus tokenized by each model's own tokenizer, cycled to the length
// needed. Depth (-d) is filled by a real, untimed prefill; the prompt (pp) is processed in chunks of
// n_ubatch tokens; generation (tg) is greedy decoding of real tokens, one token per forward.
#pragma once

#include "core/cpu_times.h"
#include "engine/bench_options.h"
#include "engine/bench_report.h"
#include "models/expert_cache_policy.h"

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace mox::engine {

struct BenchSample {
    double ns = 0;            // the timed part: prompt processing plus generation
    double tokens_per_s = 0;  // (n_prompt + n_gen) / seconds, as llama-bench counts pp+tg tests
    std::optional<uint64_t> vram_bytes;  // GPU rows: device memory in use (driver) at the end, state alive
    // GPU rows: what the memory model (place/memory.h) predicts for this placement and state, with
    // the CUDA context as measured when the model was loaded.
    std::optional<uint64_t> predicted_vram_bytes;
    // pp or tg rows on the GPU with a hardware profile: the speed model's tokens/s (plan/speed.h).
    std::optional<double> predicted_tps;
    // How the machine's CPU time was shared during the timed part (core/cpu_times.h); absent where
    // /proc cannot be read or the part was shorter than a clock tick.
    std::optional<CpuShares> cpu;
    // Rows with an expert cache: what it did during the timed part (counters' difference).
    std::optional<models::ExpertCacheStats> cache;
};

class BenchRunner {
public:
    // corpus_text: the text prompts are made of (must tokenize to at least one token).
    explicit BenchRunner(std::string corpus_text);
    // Prompts of uniformly random token ids instead (llama-bench's way; asked for with
    // --random-prompt): the same ids for a given seed and vocabulary size.
    static BenchRunner random_tokens(uint64_t seed);
    ~BenchRunner();
    BenchRunner(BenchRunner&&) noexcept;

    // Loads the model (once per path) and returns its facts.
    const BenchModelInfo& model_info(const std::string& path);
    // Runs the configuration once: fresh state, depth prefill, timed pp and tg.
    BenchSample run(const BenchConfig& config);

private:
    struct Loaded;
    Loaded& load(const std::string& path);
    std::string corpus_text_;
    std::optional<uint64_t> random_seed_;
    std::map<std::string, std::unique_ptr<Loaded>> models_;
};

}  // namespace mox::engine
