// mox: one executable, subcommands (run, inspect, synth, ...).
#include "command_line.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tuning.h"
#include "did_you_mean.h"
#include "version.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

// llama.cpp's rule for an option given twice: the last one counts (CLI11 would refuse it).
void last_value_wins(CLI::App& app) {
    for (CLI::App* cmd : app.get_subcommands([](const CLI::App*) { return true; }))
        for (CLI::Option* o : cmd->get_options())
            if (o->get_items_expected_max() <= 1 &&
                o->get_multi_option_policy() == CLI::MultiOptionPolicy::Throw)
                o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// The top-level help, whichever command was parsed (CLI11's App::help() shows the selected one's).
std::string top_help(const CLI::App& app) {
    return app.get_formatter()->make_help(&app, app.get_name(), CLI::AppFormatMode::Normal);
}

// `mox help [COMMAND]`: the same text as --help.
void print_help(const CLI::App& app, const std::string& command) {
    if (command.empty()) {
        fmt::print("{}", top_help(app));
        return;
    }
    std::vector<std::string> names;
    for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; })) {
        if (c->get_name() == command) {
            fmt::print("{}", c->help(app.get_name()));
            return;
        }
        names.push_back(c->get_name());
    }
    mox::fail("unknown command '{}'{}", command, mox::cli::did_you_mean(command, names));
}

// Listed with the commands; main() answers it before CLI11 parses (print_help), since CLI11 would
// take `mox help run` for the run command.
void register_help(CLI::App& app) {
    app.add_subcommand("help", "Show the commands, or one command's options (mox help COMMAND)")
        ->add_option("command", "A command whose options to show");
}

void register_version(CLI::App& app) {
    app.add_subcommand("version", "Print the version and the commit mox was built from")->callback([] {
        fmt::print("{}\n", mox::cli::version_text());
    });
}

// A CLI11 parse error as one line (its messages may span lines).
std::string one_line(std::string text) {
    std::replace(text.begin(), text.end(), '\n', ' ');
    while (!text.empty() && text.back() == ' ') text.pop_back();
    return text;
}

}  // namespace

int main(int argc, char** argv) {
    // CUDA's default lazy module loading stays: kernels load at first use, which grows the context
    // by a few MiB after mox measured it for --vram-budget (inside the planner's margin; `mox
    // calibrate` measures the context after its probes ran the kernels). Eager loading made that
    // exact while mox was the only library, but it also loads every kernel cuBLAS has for the GPU:
    // ~460 MiB on the H200 (bench/results/2026-11-30-cublas-projections-h200), VRAM a small card needs
    // for experts.
    CLI::App app{"mox: Mixture-of-Experts inference that plans its own GPU/CPU placement", "mox"};
    app.footer(
        "'mox help COMMAND' shows a command's options. llama.cpp's spellings work (-ngl, -ctk, -fa...).");
    app.fallthrough();  // -v also after the command, as llama.cpp users put it
    bool verbose = false, version = false;
    app.add_flag("-v,--verbose", verbose, "Debug logging (prints the sampling seed, the plan's details...)");
    app.add_flag("--version", version, "Print the version and the commit mox was built from");
    app.parse_complete_callback([&] {
        if (verbose) mox::log::set_level(mox::log::Level::debug);
        mox::tuning();  // a bad MOX_* tuning value is an error before any command runs (core/tuning.h)
    });
    mox::cli::register_run(app);
    mox::cli::register_chat(app);
    mox::cli::register_perplexity(app);
    mox::cli::register_inspect(app);
    mox::cli::register_synth(app);
    mox::cli::register_logits(app);
    mox::cli::register_devices(app);
    mox::cli::register_convert(app);
    mox::cli::register_bench(app);
    mox::cli::register_plan(app);
    mox::cli::register_calibrate(app);
    mox::cli::register_serve(app);
    mox::cli::register_cache_sim(app);
    mox::cli::register_trace_synth(app);
    register_help(app);
    register_version(app);
    last_value_wins(app);
    try {
        std::vector<std::string> args =
            mox::cli::prepare_command_line(app, std::vector<std::string>(argv + 1, argv + argc));
        // `mox help COMMAND` before CLI11, which would take COMMAND for the command itself.
        const auto first =
            std::find_if(args.begin(), args.end(), [](const std::string& a) { return a[0] != '-'; });
        if (first != args.end() && *first == "help") {
            print_help(app, first + 1 == args.end() ? "" : *(first + 1));
            return 0;
        }
        args.insert(args.begin(), argv[0]);
        std::vector<char*> ptrs;
        for (auto& a : args) ptrs.push_back(a.data());
        app.parse(static_cast<int>(ptrs.size()), ptrs.data());
        if (version) {
            fmt::print("{}\n", mox::cli::version_text());
        } else if (app.get_subcommands().empty()) {
            fmt::print("{}", top_help(app));
        }
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "mox: error: %s\n", one_line(e.what()).c_str());
        return 1;
    } catch (const mox::Error& e) {
        std::fprintf(stderr, "mox: error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "mox: error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mox: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
