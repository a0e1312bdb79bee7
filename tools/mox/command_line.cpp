#include "command_line.h"

#include "core/error.h"
#include "did_you_mean.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <utility>

namespace mox::cli {

namespace {

// llama.cpp's (and llama-bench's) multi-letter single-dash spellings -> the long names mox registers.
// Whether a command accepts one is decided by its options, not here.
constexpr std::pair<const char*, const char*> kLlamaSpellings[] = {
    {"-ngl", "--n-gpu-layers"},
    {"-ncmoe", "--n-cpu-moe"},
    {"-ctk", "--cache-type-k"},
    {"-ctv", "--cache-type-v"},
    {"-ub", "--ubatch-size"},
    {"-fa", "--flash-attn"},
    {"-ot", "--override-tensor"},
    {"-sm", "--split-mode"},
    {"-mg", "--main-gpu"},
    {"-ts", "--tensor-split"},
    {"-tb", "--threads-batch"},
    {"-np", "--parallel"},
    {"-hf", "--hf-repo"},
    {"-hfr", "--hf-repo"},
    {"-hff", "--hf-file"},
    {"-sys", "--system-prompt"},
    {"-cnv", "--conversation"},
    {"-no-cnv", "--no-conversation"},
    {"-mm", "--mmproj"},
    {"-mmp", "--mmap"},
    {"-nkvo", "--no-kv-offload"},
    {"-dev", "--device"},
    {"-cb", "--cont-batching"},
    {"-nocb", "--no-cont-batching"},
    {"-pg", "--pg"},
    {"-oe", "--output-err"},
};

const char* kGlobalOptions[] = {"-v", "--verbose", "-h", "--help", "--version"};

bool is_negative_number(const std::string& s) {
    if (s.size() < 2 || s[0] != '-') return false;
    size_t i = 1, digits = 0;
    for (; i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.'); ++i)
        digits += s[i] != '.';
    return digits > 0 && i == s.size();
}

// An option word: "-x", "--name", "-name" (not "-", not a negative number).
bool is_option_word(const std::string& s) {
    return s.size() > 1 && s[0] == '-' && !is_negative_number(s);
}

const CLI::Option* find_option(const CLI::App& cmd, const std::string& word) {
    if (word.rfind("--", 0) == 0) {
        const std::string name = word.substr(2);
        for (const CLI::Option* o : cmd.get_options())
            if (std::find(o->get_lnames().begin(), o->get_lnames().end(), name) != o->get_lnames().end())
                return o;
    } else if (word.size() == 2) {
        const std::string name = word.substr(1);
        for (const CLI::Option* o : cmd.get_options())
            if (std::find(o->get_snames().begin(), o->get_snames().end(), name) != o->get_snames().end())
                return o;
    }
    return nullptr;
}

// Every spelling a command understands: its own names, the llama.cpp ones that map to them, the
// global options.
std::vector<std::string> known_names(const CLI::App& cmd) {
    std::vector<std::string> names(std::begin(kGlobalOptions), std::end(kGlobalOptions));
    for (const CLI::Option* o : cmd.get_options()) {
        for (const auto& l : o->get_lnames()) names.push_back("--" + l);
        for (const auto& s : o->get_snames()) names.push_back("-" + s);
    }
    for (const auto& [short_name, long_name] : kLlamaSpellings)
        if (find_option(cmd, long_name)) names.push_back(short_name);
    return names;
}

std::vector<std::string> command_names(const CLI::App& app) {
    std::vector<std::string> names;
    for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; }))
        names.push_back(c->get_name());
    return names;
}

const CLI::App* find_command(const CLI::App& app, const std::string& name) {
    for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; }))
        if (c->get_name() == name) return c;
    return nullptr;
}

bool is_global(const std::string& word) {
    return std::find(std::begin(kGlobalOptions), std::end(kGlobalOptions), word) != std::end(kGlobalOptions);
}

}  // namespace

std::string llama_long_name(const std::string& arg) {
    for (const auto& [short_name, long_name] : kLlamaSpellings)
        if (arg == short_name) return long_name;
    return "";
}

std::vector<std::string> prepare_command_line(const CLI::App& app, const std::vector<std::string>& args) {
    std::vector<std::string> out;
    size_t i = 0;
    for (; i < args.size() && is_option_word(args[i]); ++i) {
        if (!is_global(args[i]))
            fail("unknown option '{}'{} (a command's options go after the command: mox COMMAND [OPTIONS])",
                 args[i], did_you_mean(args[i], {std::begin(kGlobalOptions), std::end(kGlobalOptions)}));
        out.push_back(args[i]);
    }
    if (i == args.size()) return out;
    const CLI::App* cmd = find_command(app, args[i]);
    if (!cmd) {
        const std::string hint = did_you_mean(args[i], command_names(app));
        fail("unknown command '{}'{}", args[i], hint.empty() ? "; 'mox help' lists the commands" : hint);
    }
    out.push_back(args[i++]);
    const std::string where = "mox " + cmd->get_name();
    for (; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--") {
            out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
            break;
        }
        if (!is_option_word(a)) {
            out.push_back(a);  // a positional argument
            continue;
        }
        // "--name=value" / "-ngl=99": the value stays attached.
        const size_t eq = a.find('=');
        std::string word = a.substr(0, eq);
        std::optional<std::string> value;
        if (eq != std::string::npos) value = a.substr(eq + 1);
        if (is_global(word)) {
            out.push_back(a);
            continue;
        }
        if (const std::string l = llama_long_name(word); !l.empty()) word = l;
        const CLI::Option* opt = find_option(*cmd, word);
        if (!opt && word.size() > 2 && word[1] != '-') {
            // "-t8": a one-letter option with its number attached.
            const std::string rest = word.substr(2);
            const CLI::Option* s = find_option(*cmd, word.substr(0, 2));
            const bool number =
                std::all_of(rest.begin(), rest.end(), [](unsigned char c) { return std::isdigit(c); });
            if (s && number && !value && s->get_type_size_max() > 0) {
                opt = s;
                value = rest;
                word = word.substr(0, 2);
            }
        }
        if (!opt) {
            const std::string shown = a.substr(0, eq);
            fail("unknown option '{}' for '{}'{}", shown, where, did_you_mean(shown, known_names(*cmd)));
        }
        const std::string name =
            opt->get_lnames().empty() ? "-" + opt->get_snames().front() : "--" + opt->get_lnames().front();
        const bool takes_value = opt->get_type_size_max() > 0;
        const bool value_optional = takes_value && opt->get_items_expected_min() == 0;
        if (!value && takes_value && i + 1 < args.size()) {
            // A required value is the next word whatever it looks like (-n -1, -p "-x"); an
            // optional one (--color [on], -fa [on]) only when it is not an option.
            const std::string& next = args[i + 1];
            if (!value_optional || !is_option_word(next)) value = args[++i];
        }
        if (value && !takes_value)
            fail("option '{}' of '{}' takes no value (got '{}')", a.substr(0, eq), where, *value);
        if (value && value->empty()) {
            out.insert(out.end(), {name, ""});  // CLI11 reads "--name=" as a missing value
        } else {
            out.push_back(value ? name + "=" + *value : name);
        }
    }
    return out;
}

}  // namespace mox::cli
