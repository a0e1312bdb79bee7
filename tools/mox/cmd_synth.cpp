#include "commands.h"

#include <CLI/CLI.hpp>

namespace mox::cli {

void register_synth(CLI::App& app) { app.add_subcommand("synth", "(being written)"); }

}  // namespace mox::cli
