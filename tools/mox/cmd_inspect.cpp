#include "commands.h"

#include <CLI/CLI.hpp>

namespace mox::cli {

void register_inspect(CLI::App& app) { app.add_subcommand("inspect", "(being written)"); }

}  // namespace mox::cli
