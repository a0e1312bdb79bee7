#include "llama_flags.h"

#include "core/error.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdio>
#include <string_view>
#include <vector>

namespace mox::cli {

void note(const std::string& text) {
    std::fprintf(stderr, "mox: note: %s\n", text.c_str());
}

namespace {

constexpr unsigned bit(Command c) {
    return static_cast<unsigned>(c);
}
constexpr unsigned kText = bit(Command::run) | bit(Command::chat) | bit(Command::serve);
constexpr unsigned kModel = kText | bit(Command::logits) | bit(Command::perplexity);
constexpr unsigned kBench = bit(Command::bench);
constexpr unsigned kAll = kModel | kBench | bit(Command::plan);

enum class Arity { flag, value, optional_value };

// What a given flag does: prints a note, refuses (throws), or nothing when it is what mox does anyway.
// `value` is "" for a flag or an optional value left out. mox bench gets every item of a list.
using Verdict = void (*)(Command cmd, const std::string& value);

struct Entry {
    const char* names;  // CLI11 names; single-dash spellings map to them in command_line.cpp
    Arity arity;
    unsigned commands;
    const char* help;
    Verdict verdict;
};

int64_t integer(const char* flag, const std::string& value) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size())
        fail("{} {}: expected a whole number", flag, value);
    return v;
}

bool on_off(const char* flag, const std::string& value, bool if_empty) {
    if (value.empty()) return if_empty;
    if (value == "on" || value == "1" || value == "true" || value == "auto" || value == "-1") return true;
    if (value == "off" || value == "0" || value == "false") return false;
    fail("{} {}: expected on, off or auto", flag, value);
}

// "Qwen/Qwen3-4B-GGUF:Q8_0" -> a download command for that file.
std::string hf_hint(const std::string& spec) {
    const size_t colon = spec.find(':');
    const std::string repo = spec.substr(0, colon);
    const std::string quant = colon == std::string::npos ? "" : spec.substr(colon + 1);
    return fmt::format("hf download {}{} --local-dir .", repo,
                       quant.empty() ? "" : fmt::format(" --include '*{}*'", quant));
}

const Entry kEntries[] = {
    // Models come from files.
    {"--hf-repo", Arity::value, kAll, "-hf REPO[:QUANT]: refused, mox reads local GGUF files (-m)",
     [](Command, const std::string& v) {
         fail(
             "-hf {}: mox does not download models; download the GGUF file (e.g. `{}`) and give it with -m "
             "FILE",
             v, hf_hint(v));
     }},
    {"--hf-file", Arity::value, kAll, "-hff FILE: refused, as -hf",
     [](Command, const std::string& v) {
         fail("-hff {}: mox does not download models; give the downloaded GGUF file with -m FILE", v);
     }},
    // Text models only.
    {"--mmproj", Arity::value, kAll, "-mm FILE: refused, mox runs text models only",
     [](Command, const std::string& v) {
         fail("--mmproj {}: mox runs text-only models and has no multimodal projector; leave --mmproj out",
              v);
     }},
    {"--no-mmproj", Arity::flag, kAll, "Accepted: mox loads no multimodal projector",
     [](Command, const std::string&) {}},
    // The chat template.
    {"--jinja", Arity::flag, kText,
     "Accepted: mox renders the model's chat template with its own Jinja interpreter",
     [](Command c, const std::string&) {
         if (c == Command::run)
             note("--jinja: mox run applies the model's chat template only with --chat (mox chat always)");
     }},
    {"--chat-template", Arity::value, kText,
     "NAME: refused, give the template as a file (--chat-template-file)",
     [](Command c, const std::string& v) {
         if (c == Command::serve)
             fail(
                 "--chat-template {}: mox has no built-in templates by name; use the model's own (the "
                 "default) or "
                 "--chat-template-file FILE",
                 v);
         fail(
             "--chat-template {}: mox has no built-in templates by name; it uses the template in the model "
             "file",
             v);
     }},
    {"--conversation", Arity::flag, kText, "-cnv: mox chat is the conversation",
     [](Command c, const std::string&) {
         if (c != Command::chat) fail("-cnv: the conversation mode is `mox chat` (it takes the same flags)");
     }},
    {"--no-conversation", Arity::flag, kText, "-no-cnv: mox run is one prompt without conversation",
     [](Command c, const std::string&) {
         if (c == Command::chat) fail("-no-cnv: one prompt without a conversation is `mox run -p TEXT`");
     }},
    // Generation.
    {"--no-context-shift", Arity::flag, kText,
     "Accepted: mox never shifts the context (a full context ends the answer)",
     [](Command, const std::string&) {}},
    {"--context-shift", Arity::flag, kText, "Refused: mox does not shift the context",
     [](Command, const std::string&) {
         fail(
             "--context-shift: mox does not drop old tokens to go on generating; a full context ends the "
             "answer "
             "(give a larger -c)");
     }},
    {"--ignore-eos", Arity::flag, kText, "Refused: generation ends at the model's end-of-generation token",
     [](Command, const std::string&) {
         fail(
             "--ignore-eos: mox ends an answer at the model's end-of-generation token; to time a fixed "
             "number of "
             "tokens use `mox bench -n N`");
     }},
    {"--reverse-prompt,-r", Arity::value, bit(Command::run) | bit(Command::chat),
     "TEXT: refused, answers end at the model's end-of-turn token",
     [](Command, const std::string& v) {
         fail(
             "-r '{}': mox ends an answer at the model's end-of-turn token and has no stop strings on the "
             "command "
             "line; mox serve takes them per request (\"stop\")",
             v);
     }},
    {"--color", Arity::optional_value, bit(Command::run) | bit(Command::chat),
     "[on|off|auto]: accepted; mox prints plain text",
     [](Command, const std::string& v) {
         if (on_off("--color", v, true)) note("--color: mox prints plain text (no colors)");
     }},
    {"--no-warmup", Arity::flag, kModel, "Accepted: mox runs no warm-up pass",
     [](Command, const std::string&) {}},
    // Speed knobs that mox sets by itself.
    {"--flash-attn", Arity::optional_value, kModel | bit(Command::plan),
     "-fa [on|off|auto]: accepted; mox's attention is always fused (flash-style)",
     [](Command, const std::string& v) {
         if (!on_off("-fa", v, true))
             note("-fa off: mox has only fused (flash-style) attention kernels; it uses them");
     }},
    {"--batch-size,-b", Arity::value, kModel | bit(Command::plan),
     "N: accepted; mox feeds prompts in micro-batches of -ub tokens",
     [](Command, const std::string& v) {
         if (integer("-b", v) < 1) fail("-b {}: must be at least 1", v);
         note(fmt::format(
             "-b {}: mox feeds a prompt to the model in micro-batches of -ub tokens; -b has no effect", v));
     }},
    {"--threads-batch", Arity::value, kModel | bit(Command::plan),
     "-tb N: accepted; prompts use the -t threads too",
     [](Command, const std::string& v) {
         if (integer("-tb", v) < 1) fail("-tb {}: must be at least 1", v);
         note(fmt::format(
             "-tb {}: llama.cpp's prompt-processing threads; mox uses the -t threads for prompts too "
             "(the prompt micro-batch size is -ub)",
             v));
     }},
    {"--parallel", Arity::value, kText, "-np N: accepted; mox serves one sequence at a time",
     [](Command c, const std::string& v) {
         const int64_t n = integer("-np", v);
         if (n < 1 && n != -1) fail("-np {}: at least 1", v);
         if (n != 1)
             note(fmt::format("-np {}: mox {} one sequence; requests are answered one at a time", v,
                              c == Command::serve ? "serves" : "runs"));
     }},
    {"--numa", Arity::value, kAll, "MODE: accepted; mox pins one thread per physical core",
     [](Command, const std::string& v) {
         note(fmt::format(
             "--numa {}: mox pins one worker thread per physical core (--no-pin: none); --numa has no "
             "effect",
             v));
     }},
    // Loading: mox maps the file.
    {"--mmap", Arity::optional_value, kAll, "-mmp [0|1]: accepted; mox maps the model file",
     [](Command, const std::string& v) {
         if (!on_off("--mmap", v, true))
             note(
                 "--mmap 0: mox always maps the model file (the page cache holds it); reading it whole has "
                 "no "
                 "effect on the result");
     }},
    {"--no-mmap", Arity::flag, kModel | bit(Command::plan), "Accepted; mox maps the model file",
     [](Command, const std::string&) {
         note("--no-mmap: mox always maps the model file (the page cache holds it); the flag has no effect");
     }},
    {"--mlock", Arity::flag, kModel | bit(Command::plan), "Accepted; mox does not lock the mapped file",
     [](Command, const std::string&) {
         note(
             "--mlock: mox does not lock the mapped model file in RAM (the experts a plan keeps in pinned "
             "host "
             "memory are locked); the flag has no effect");
     }},
    {"--load-mode", Arity::value, kModel | bit(Command::plan),
     "mmap|mlock|none: accepted; mox maps the model file",
     [](Command, const std::string& v) {
         if (v == "mmap") return;
         if (v != "mlock" && v != "none" && v != "full")
             fail("--load-mode {}: expected mmap, mlock or none", v);
         note(fmt::format(
             "--load-mode {}: mox maps the model file and does not lock it (mmap); the flag has no "
             "effect",
             v));
     }},
    // One GPU.
    {"--split-mode", Arity::value, kAll, "-sm none|layer|row: accepted; mox uses one GPU",
     [](Command, const std::string& v) {
         if (v != "none" && v != "layer" && v != "row") fail("-sm {}: expected none, layer or row", v);
         if (v != "none") note(fmt::format("-sm {}: mox runs on one GPU; there is nothing to split", v));
     }},
    {"--main-gpu", Arity::value, kAll, "-mg N: accepted; mox uses the first GPU",
     [](Command, const std::string& v) {
         if (integer("-mg", v) != 0)
             fail("-mg {}: mox runs on the first GPU only (CUDA_VISIBLE_DEVICES picks it)", v);
     }},
    {"--tensor-split", Arity::value, kAll, "-ts LIST: refused; mox uses one GPU",
     [](Command, const std::string& v) {
         fail("-ts {}: mox runs on one GPU and cannot split tensors over several; leave -ts out", v);
     }},
    {"--no-kv-offload", Arity::flag, kModel | bit(Command::plan),
     "-nkvo: refused; the KV cache stays with its layer",
     [](Command, const std::string&) {
         fail(
             "-nkvo: mox keeps each layer's KV cache where the layer runs; to save VRAM use -ctk/-ctv q8_0, "
             "a "
             "smaller -c, or --vram-budget (the planner moves experts to the host instead)");
     }},
};

// llama-bench's own flags for what mox does by itself; values are lists ("0,1").
const Entry kBenchEntries[] = {
    {"--no-kv-offload", Arity::value, kBench, "-nkvo 0|1: 1 is refused; the KV cache stays with its layer",
     [](Command, const std::string& v) {
         if (on_off("-nkvo", v, false))
             fail(
                 "-nkvo 1: mox keeps each layer's KV cache where the layer runs; measure -ctk/-ctv q8_0 "
                 "instead");
     }},
    {"--embeddings", Arity::value, kBench, "-embd 0|1: 1 is refused; mox measures generation",
     [](Command, const std::string& v) {
         if (on_off("-embd", v, false)) fail("-embd 1: mox has no embeddings mode");
     }},
    {"--prio", Arity::value, kBench, "N: accepted; mox runs at normal priority",
     [](Command, const std::string& v) {
         if (integer("--prio", v) != 0)
             note(fmt::format("--prio {}: mox runs at the priority it was started with", v));
     }},
    {"--delay", Arity::value, kBench, "S: accepted; mox interleaves repetitions instead",
     [](Command, const std::string& v) {
         if (integer("--delay", v) != 0)
             note(fmt::format(
                 "--delay {}: mox does not pause between tests; it interleaves the repetitions of all "
                 "configurations",
                 v));
     }},
    {"--poll", Arity::value, kBench, "N: accepted; the spin window is MOX_SPIN_US",
     [](Command, const std::string& v) {
         note(fmt::format(
             "--poll {}: mox's worker threads spin for MOX_SPIN_US microseconds (mox devices prints it)", v));
     }},
    {"--cpu-mask,-C", Arity::value, kBench, "MASK: refused; mox pins one thread per physical core",
     [](Command, const std::string& v) {
         fail(
             "-C {}: mox pins one worker thread per physical core it may run on; restrict the cores with "
             "taskset",
             v);
     }},
    {"--cpu-strict", Arity::value, kBench, "0|1: accepted; mox always pins (--no-pin: never)",
     [](Command, const std::string&) {}},
};

std::vector<std::string> items(Command c, const std::string& value) {
    if (c != Command::bench) return {value};
    std::vector<std::string> out;
    size_t start = 0;
    for (;;) {
        const size_t comma = value.find(',', start);
        out.push_back(value.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) return out;
        start = comma + 1;
    }
}

void add(CLI::App* cmd, Command which, const Entry& e) {
    const Verdict verdict = e.verdict;
    auto check = [which, verdict](const std::string& value) {
        for (const std::string& item : items(which, value)) verdict(which, item);
    };
    CLI::Option* o = nullptr;
    if (e.arity == Arity::flag) {
        o = cmd->add_flag_function(
            e.names, [check](int64_t) { check(""); }, e.help);
    } else {
        o = cmd->add_option_function<std::string>(e.names, check, e.help);
        if (e.arity == Arity::optional_value) o->expected(0, 1);
    }
    o->group("llama.cpp flags mox takes without acting on, or refuses");
}

}  // namespace

void add_llama_flags(CLI::App* cmd, Command which) {
    auto has = [&](const Entry& e) { return (e.commands & bit(which)) != 0; };
    if (which == Command::bench) {
        // llama-bench's versions of some flags take values ("-nkvo 0,1"); they come first.
        for (const Entry& e : kBenchEntries) add(cmd, which, e);
        for (const Entry& e : kEntries)
            if (has(e) &&
                !cmd->get_option_no_throw(std::string(e.names).substr(0, std::string(e.names).find(','))))
                add(cmd, which, e);
        return;
    }
    for (const Entry& e : kEntries)
        if (has(e)) add(cmd, which, e);
}

}  // namespace mox::cli
