// mox: one executable, subcommands (run, inspect, synth, ...).
#include "commands.h"
#include "core/error.h"
#include "core/log.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
    CLI::App app{"mox: Mixture-of-Experts inference that plans its own GPU/CPU placement"};
    app.require_subcommand(1);
    bool verbose = false;
    app.add_flag("-v,--verbose", verbose, "Debug logging");
    app.parse_complete_callback([&] {
        if (verbose) mox::log::set_level(mox::log::Level::debug);
    });
    mox::cli::register_inspect(app);
    mox::cli::register_synth(app);
    mox::cli::register_logits(app);
    mox::cli::register_devices(app);
    mox::cli::register_convert(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
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
