// mox run: generate text from a prompt (optionally through the chat template), streaming, with
// honest prompt and generation speeds. mox chat: the same as an interactive conversation.
#include "commands.h"
#include "common_options.h"
#include "core/error.h"
#include "core/units.h"
#include "engine/generate.h"
#include "engine/routing_stats.h"
#include "gguf/reader.h"
#include "loaded_model.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/vocab_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>

namespace mox::cli {

namespace {

struct RunOptions {
    ModelOptions model;
    std::string prompt, prompt_file, system;
    int64_t n_predict = 128;
    bool chat = false;
    bool no_think = false;
    std::string routing_stats;
    std::string routing_trace_out;
    std::string ids_out;
    engine::SamplerParams sampling;
};

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot read prompt file '{}'", path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void print_stats(const engine::GenerationStats& s) {
    fmt::print(
        stderr,
        "\nmox: prompt {} tokens in {:.2f} s ({:.1f} t/s); generated {} tokens in {:.2f} s ({:.2f} t/s){}\n",
        s.prompt_tokens, s.prompt_seconds, s.prompt_tokens_per_s(), s.generated_tokens, s.generate_seconds,
        s.generate_tokens_per_s(), s.stopped_by_eog ? ", stopped at end of generation" : "");
}

// The expert cache over generation (decode steps; prompts are streamed as without it).
void print_cache_stats(const models::ExpertCacheStats& now, const models::ExpertCacheStats& before, double seconds,
                       const std::string& policy) {
    const int64_t tokens = now.tokens - before.tokens;
    const int64_t hits = now.hits - before.hits, misses = now.misses - before.misses;
    const double copied = static_cast<double>(now.bytes_copied - before.bytes_copied);
    fmt::print(stderr,
               "mox: expert cache: {} slots of {} ({}), policy {}: {:.1f}% of {} selections hit over {} tokens, "
               "{:.1f} misses/token (computed by the CPU), {} admitted, {:.2f} GB copied ({:.2f} GB/s)\n",
               now.slots, format_bytes(now.slot_bytes), format_bytes(now.slot_bytes * static_cast<uint64_t>(now.slots)),
               policy, hits + misses > 0 ? 100.0 * static_cast<double>(hits) / static_cast<double>(hits + misses) : 0.0,
               hits + misses, tokens, tokens > 0 ? static_cast<double>(misses) / static_cast<double>(tokens) : 0.0,
               now.admissions - before.admissions, copied / 1e9, seconds > 0 ? copied / 1e9 / seconds : 0.0);
}

text::ChatMessage message(const std::string& role, const std::string& content) {
    text::ChatMessage m;
    m.role = role;
    m.content = content;
    return m;
}

void check_n_predict(int64_t n) {
    if (n < -1) fail("-n {}: expected a number of tokens, or -1 for no limit", n);
}

auto stream_to_stdout = [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
};

}  // namespace

void register_run(CLI::App& app) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* cmd =
        app.add_subcommand("run", "Generate text from a prompt (default model: the embedded mox-tiny)");
    add_model_options(cmd, o->model, Command::run, false);
    cmd->add_option("-p,--prompt", o->prompt, "Prompt text (default: \"Once upon a time\")");
    cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from a file");
    cmd->add_option("-n,--n-predict,--predict", o->n_predict,
                    "Tokens to generate (-1: until the end of generation or a full context)")
        ->capture_default_str();
    cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template (a user turn)");
    cmd->add_option("--system,--system-prompt", o->system, "System message (-sys; implies --chat)");
    cmd->add_flag("--no-think", o->no_think, "Chat template with thinking off (enable_thinking=false)");
    cmd->add_option("--routing-stats", o->routing_stats,
                    "Write expert-routing statistics of prompt and generation (JSON) to this file");
    cmd->add_option("--routing-trace-out", o->routing_trace_out,
                    "Write the experts every token of prompt and generation selected, per layer, as a "
                    "routing trace (models/routing_trace.h) for --routing-trace and `mox cache-sim`");
    cmd->add_option(
        "--ids-out", o->ids_out,
        "Write the prompt's and the generated token ids to this file (two comma-separated lines)");
    add_sampling_options(cmd, o->sampling);
    cmd->callback([o, cmd] {
        o->model.path = resolve_model_path(o->model.path);
        check_n_predict(o->n_predict);
        if (cmd->count("--prompt") && !o->prompt_file.empty())
            fail("-p and -f both give the prompt: give one");
        if (cmd->count("--prompt") && o->prompt.empty()) fail("-p: the prompt is empty");
        std::string prompt = o->prompt_file.empty() ? o->prompt : read_file(o->prompt_file);
        if (!cmd->count("--prompt") && o->prompt_file.empty()) prompt = "Once upon a time";
        if (prompt.empty()) fail("-f {}: the file is empty", o->prompt_file);
        if (!o->system.empty() && !o->chat) {
            note("--system: the prompt goes through the chat template (--chat)");
            o->chat = true;
        }
        if (!o->ids_out.empty()) check_writable("--ids-out", o->ids_out);
        if (!o->routing_stats.empty()) check_writable("--routing-stats", o->routing_stats);
        if (!o->routing_trace_out.empty()) check_writable("--routing-trace-out", o->routing_trace_out);
        resolve_seed(o->sampling);
        LoadedModel m = load(o->model);
        if (o->chat) {
            std::vector<text::ChatMessage> msgs;
            if (!o->system.empty()) msgs.push_back(message("system", o->system));
            msgs.push_back(message("user", prompt));
            prompt = text::apply_chat_template(chat_template_of(*m.tokenizer), msgs,
                                               chat_options(*m.tokenizer, o->no_think));
        }
        const std::vector<int32_t> ids = m.tokenizer->encode(prompt);
        const auto n_prompt = static_cast<int64_t>(ids.size());
        // -n -1: as many tokens as the context holds after the prompt (-c, else chat's 8192).
        ModelOptions mo = o->model;
        if (o->n_predict < 0) mo.n_ctx = mo.context(m.model->hparams(), kDefaultContext);
        const auto so = state_options(mo, m.model->hparams(), n_prompt + std::max<int64_t>(o->n_predict, 1));
        const int64_t n_predict = o->n_predict < 0 ? so.n_ctx - n_prompt : o->n_predict;
        engine::Generator gen(*m.model, *m.tokenizer, so, o->sampling);
        if (!o->chat) stream_to_stdout(prompt);
        engine::GenerationStats stats;
        m.model->set_routing_trace(!o->routing_stats.empty() || !o->routing_trace_out.empty());
        const std::optional<models::ExpertCacheStats> cache0 = m.model->expert_cache_stats();
        const std::vector<int32_t> out_ids = gen.generate(ids, n_predict, stream_to_stdout, &stats);
        print_stats(stats);
        if (const std::optional<models::ExpertCacheStats> cache = m.model->expert_cache_stats())
            print_cache_stats(*cache, *cache0, stats.generate_seconds, o->model.placement.cache_policy);
        if (!o->routing_trace_out.empty()) {
            const std::string name = m.file->get_string_or("general.name", o->model.path);
            models::write_routing_trace(o->routing_trace_out, m.model->recorded_routing(name));
        }
        if (!o->ids_out.empty()) {
            std::ofstream out(o->ids_out);
            out << fmt::format("{}\n{}\n", fmt::join(ids, ","), fmt::join(out_ids, ","));
            if (!out) fail("cannot write '{}'", o->ids_out);
        }
        if (!o->routing_stats.empty()) {
            const auto& hp = m.model->hparams();
            const auto rs =
                engine::compute_routing_stats(m.model->routing_trace(), hp.n_expert, hp.n_expert_used);
            std::ofstream out(o->routing_stats);
            out << engine::routing_stats_json(rs) << "\n";
            if (!out) fail("cannot write '{}'", o->routing_stats);
            fmt::print(stderr,
                       "mox: routing over {} tokens: {:.1f}% of selections repeat on the next token, {:.1f}% "
                       "within 8 "
                       "(uniform random: {:.1f}%, {:.1f}%)\n",
                       rs.n_tokens, 100 * rs.repeat_next, 100 * rs.repeat_within_8,
                       100 * rs.random_repeat_next, 100 * rs.random_repeat_within_8);
        }
    });
}

void register_chat(CLI::App& app) {
    auto o = std::make_shared<RunOptions>();
    o->n_predict = 512;
    CLI::App* cmd =
        app.add_subcommand("chat", "Chat with a model in the terminal (one line per turn; Ctrl-D ends)");
    add_model_options(cmd, o->model, Command::chat, false);
    cmd->add_option("--system,--system-prompt", o->system, "System message (-sys)");
    cmd->add_option("-n,--n-predict,--predict", o->n_predict,
                    "Most tokens per reply (-1: until the end of the turn)")
        ->capture_default_str();
    cmd->add_flag("--no-think", o->no_think, "Thinking off (enable_thinking=false)");
    cmd->add_option(
        "--ids-out", o->ids_out,
        "Write the prompt's and the generated token ids to this file (two comma-separated lines)");
    add_sampling_options(cmd, o->sampling);
    cmd->callback([o] {
        o->model.path = resolve_model_path(o->model.path);
        check_n_predict(o->n_predict);
        if (!o->ids_out.empty()) check_writable("--ids-out", o->ids_out);
        resolve_seed(o->sampling);
        LoadedModel m = load(o->model);
        const std::string tmpl = chat_template_of(*m.tokenizer);
        const text::ChatOptions co = chat_options(*m.tokenizer, o->no_think);
        ModelOptions mo = o->model;
        mo.n_ctx = mo.context(m.model->hparams(), kDefaultContext);
        const int64_t n_reply = o->n_predict < 0 ? std::numeric_limits<int64_t>::max() : o->n_predict;
        engine::Generator gen(*m.model, *m.tokenizer, state_options(mo, m.model->hparams(), 1), o->sampling);
        std::vector<text::ChatMessage> msgs;
        if (!o->system.empty()) msgs.push_back(message("system", o->system));
        const bool tty = isatty(STDIN_FILENO);
        std::string line;
        for (;;) {
            if (tty) fmt::print("> "), std::fflush(stdout);
            if (!std::getline(std::cin, line)) break;
            if (line.empty()) continue;
            msgs.push_back(message("user", line));
            // Render the whole conversation; feed only what extends the tokens already in context.
            // When the template rewrote earlier turns (e.g. dropped old reasoning), start over: the
            // DeltaNet state cannot be rolled back.
            const std::vector<int32_t> all = m.tokenizer->encode(text::apply_chat_template(tmpl, msgs, co));
            const auto& hist = gen.history();
            size_t common = 0;
            while (common < hist.size() && common < all.size() && hist[common] == all[common]) ++common;
            if (common < hist.size()) {
                gen.reset();
                common = 0;
            }
            engine::GenerationStats stats;
            const std::vector<int32_t> reply =
                gen.generate(std::span(all).subspan(common), n_reply, stream_to_stdout, &stats);
            std::vector<int32_t> text_ids(reply);
            if (!text_ids.empty() && m.tokenizer->is_end_of_generation(text_ids.back())) text_ids.pop_back();
            text::DecodeOptions lossy;
            lossy.lossy = true;
            msgs.push_back(message("assistant", m.tokenizer->decode(text_ids, lossy)));
            print_stats(stats);
        }
    });
}

}  // namespace mox::cli
