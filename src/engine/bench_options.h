// mox bench, part 1: llama-bench's option model. Options take several values ("1,2,3") and ranges
// ("first-last", "first-last+step", "first-last*mult"); every combination is one configuration, and
// repetitions run interleaved (rep 1 of every configuration, then rep 2, ...). Pure: no model here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mox::engine {

// "512", "1,2,4", "0-40+4", "1-64*2", "16-18" (step 1); items may mix: "1,8-32*2". Throws mox::Error.
std::vector<int64_t> parse_int_values(std::string_view spec);
// "f16,q8_0" -> {"f16", "q8_0"}; empty items are an error.
std::vector<std::string> parse_string_values(std::string_view spec);
// "512,128" -> {512, 128} (one -pg value).
std::pair<int64_t, int64_t> parse_pg_value(std::string_view spec);

// One timed test: n_depth tokens prefilled (untimed), then n_prompt tokens processed, then n_gen
// tokens generated one at a time.
struct BenchTest {
    int64_t n_prompt = 0;
    int64_t n_gen = 0;
    int64_t n_depth = 0;
    std::string name() const;  // "pp512", "tg128", "pp512+tg128", with " @ d4096" for a depth
};

// Flash attention as llama-bench records it: -1 auto, 0 off, 1 on.
int flash_attn_value(std::string_view text);

struct BenchConfig {
    std::string model;
    int threads = 0;
    std::string type_k = "f16", type_v = "f16";
    int64_t n_batch = 2048, n_ubatch = 512;
    int n_gpu_layers = 0;
    int n_cpu_moe = 0;
    int flash_attn = -1;
    uint64_t vram_budget = 0;     // bytes of GPU memory mox may use (context included); 0: no budget
    std::string plan = "manual";  // "manual": placement from the flags (-ngl, -ncmoe); "auto": planner
    // Placement beyond -ngl/-ncmoe (the same for every configuration): llama.cpp's -ot rules and
    // mox's --moe-cpu-layers list; the GPU's threshold for streaming CPU-resident experts.
    std::string override_tensor, moe_cpu_layers;
    bool cpu_moe = false;  // --cpu-moe: every layer's experts on the host
    int64_t stream_min_tokens = 32;
    int64_t n_ctx = 0;  // -c: the state's context (0: what the test needs), the KV cache held
    // As mox run's flags, the same for every configuration: the CPU kernel tier cap ("auto", "avx2",
    // ...), pinned worker threads, the hardware profile --plan auto and the predictions use.
    std::string isa = "auto";
    bool pin = true;
    std::string profile;
    // The expert cache (GPU rows with host expert layers): the pool's bytes (0: none), its policy and
    // admissions per token; a routing trace whose experts run instead of the router's ("": none).
    uint64_t expert_cache = 0;
    std::string cache_policy = "lru";
    int64_t cache_admit_cap = 32;
    std::string cache_profile;  // a routing trace choosing the static policy's hot set
    std::string routing_trace;
    BenchTest test;
};

// Every option as a list of values (each list non-empty after defaults are applied).
struct BenchParams {
    std::vector<std::string> models;
    std::vector<int64_t> n_prompt{512}, n_gen{128}, n_depth{0};
    std::vector<std::pair<int64_t, int64_t>> pg;
    std::vector<int64_t> threads{0};
    std::vector<std::string> type_k{"f16"}, type_v{"f16"};
    std::vector<int64_t> n_batch{2048}, n_ubatch{512};
    std::vector<int64_t> n_gpu_layers{0}, n_cpu_moe{0};
    std::vector<int64_t> flash_attn{-1};
    std::vector<uint64_t> vram_budget{0};
    std::vector<std::string> plan{"manual"};
    std::string override_tensor, moe_cpu_layers;
    bool cpu_moe = false;
    int64_t stream_min_tokens = 32;
    int64_t n_ctx = 0;
    std::string isa = "auto";
    bool pin = true;
    std::string profile;
    std::vector<uint64_t> expert_cache{0};
    std::vector<std::string> cache_policy{"lru"};
    int64_t cache_admit_cap = 32;
    std::string cache_profile;
    std::string routing_trace;
    int repetitions = 5;
};

// All configurations: model outermost, then batch, ubatch, type_k, type_v, threads, ngl, ncmoe,
// vram budget, plan, expert cache, cache policy (one row per policy only where there is a cache), fa,
// depth, and the tests innermost (every -p, then every -n, then every -pg), like
// llama-bench's rows. -p 0 / -n 0 add no pp / tg test. Throws if there is no test or a value is out of range.
std::vector<BenchConfig> expand_configs(const BenchParams& params);

// "--plan" values: manual or auto. Throws on anything else.
std::string plan_value(std::string_view text);

// Refuses configurations this build cannot run, with one clear message instead of silently running
// something else: -ngl != 0 needs a CUDA build (what the GPU forward cannot execute, e.g. whole
// layers on the CPU, is refused at run time by place/execute.h); --plan auto needs the planner.
void check_supported(const std::vector<BenchConfig>& configs, bool have_cuda);

enum class BenchEngine { mox, llama };

// The run order. Round 0 warms every configuration up once (mox only, not recorded: each
// llama-bench invocation warms itself up); round r = 1..R runs repetition r of every configuration
// in order, so slow drift (heat, other load) spreads over all configurations instead of biasing the
// ones that ran last. With `compare`, every timed mox run is paired with one llama-bench run of the
// same configuration; odd rounds run mox first, even rounds llama-bench first, so neither engine
// always runs right after the other.
struct ScheduleEntry {
    size_t config = 0;
    int repetition = 0;  // 0 for the warm-up
    bool warmup = false;
    BenchEngine engine = BenchEngine::mox;
};
std::vector<ScheduleEntry> interleaved_schedule(size_t n_configs, int repetitions, bool compare = false);

}  // namespace mox::engine
