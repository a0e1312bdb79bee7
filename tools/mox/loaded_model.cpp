#include "loaded_model.h"

#include "core/error.h"
#include "core/log.h"
#include "text/vocab_io.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <cstdlib>
#include <random>

#ifndef MOX_DEFAULT_MODEL
#define MOX_DEFAULT_MODEL ""
#endif

namespace mox::cli {

void add_sampling_options(CLI::App* cmd, engine::SamplerParams& s) {
    s.seed = engine::kRandomSeed;
    cmd->add_option("--temp", s.temperature, "Temperature (0 = greedy)")->capture_default_str();
    cmd->add_option("--top-k", s.top_k, "Top-k (0 = off)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--top-p", s.top_p, "Top-p (1 = off)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--min-p", s.min_p, "Min-p (0 = off)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--repeat-penalty", s.repetition_penalty, "Repetition penalty (1 = off)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    cmd->add_option("--repeat-last-n", s.penalty_last_n, "Tokens the penalties look back (-1 = all)")
        ->capture_default_str()
        ->check(CLI::Range(-1, 1 << 30));
    cmd->add_option("--presence-penalty", s.presence_penalty, "Presence penalty")->capture_default_str();
    cmd->add_option("--frequency-penalty", s.frequency_penalty, "Frequency penalty")->capture_default_str();
    cmd->add_option_function<int64_t>(
        "-s,--seed",
        [&s](int64_t v) {
            s.seed = v < 0 || v == 0xFFFFFFFF ? engine::kRandomSeed : static_cast<uint64_t>(v);
        },
        "Sampling seed; the same seed gives the same tokens (default or -1: random, printed with -v)");
}

void resolve_seed(engine::SamplerParams& s) {
    if (s.seed != engine::kRandomSeed) return;
    std::random_device rd;
    s.seed = rd() & 0x7FFFFFFF;  // short enough to type back with -s
    log::debug("sampling seed {} (-s {} repeats this run)", s.seed, s.seed);
}

std::string resolve_model_path(const std::string& given) {
    if (!given.empty()) return given;
    if (const char* env = std::getenv("MOX_DEFAULT_MODEL"); env && *env) return env;
    const std::string builtin = MOX_DEFAULT_MODEL;
    if (builtin.empty() || access(builtin.c_str(), R_OK) != 0)
        fail("no model given (-m) and the default model '{}' is not readable", builtin);
    return builtin;
}

LoadedModel load(ModelOptions& o) {
    LoadedModel m;
    m.file = std::make_unique<gguf::File>(gguf::File::open(o.path));
    m.model = o.load(*m.file);
    if (m.model->device() == models::Device::cpu)
        fmt::print(stderr, "mox: cpu: {}\n", m.model->cpu_summary());
    else
        fmt::print(stderr, "mox: {}\n", m.model->device_summary());
    m.tokenizer = std::make_unique<text::Tokenizer>(text::vocab_from_gguf(*m.file));
    return m;
}

std::string chat_template_of(const text::Tokenizer& tokenizer) {
    const std::string& t = tokenizer.vocab().chat_template;
    return t.empty() ? std::string(text::chatml_template()) : t;
}

text::ChatOptions chat_options(const text::Tokenizer& tokenizer, bool no_think) {
    text::ChatOptions co;
    co.add_generation_prompt = true;
    if (no_think) co.enable_thinking = false;
    const text::Vocab& v = tokenizer.vocab();
    if (v.bos) co.bos_token = tokenizer.token_piece(*v.bos);
    if (v.eos) co.eos_token = tokenizer.token_piece(*v.eos);
    co.strip_bos = v.add_bos;
    co.strip_eos = v.add_eos;
    return co;
}

}  // namespace mox::cli
