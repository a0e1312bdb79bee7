// The command line as llama.cpp users type it, made into what CLI11 parses, and checked first.
//
// llama.cpp spells many options with one dash and several letters (-ngl, -sm, -tb, -hf...), which
// CLI11 would read as bundles of one-letter options (-sm row = -s m ...). Here they become their
// long names; every option becomes one token ("--name=value" when it takes a value, so a value
// may begin with '-', as in -n -1); and an unknown command or option is one error line that names
// it with the nearest known name.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mox::cli {

// args: argv without argv[0]. Returns the arguments CLI11 parses (argv[0] not included). Throws
// mox::Error on an unknown command or option. Options before the command are the global ones
// (-v, --help, --version); after "--" nothing is rewritten.
std::vector<std::string> prepare_command_line(const CLI::App& app, const std::vector<std::string>& args);

// The long name a llama.cpp single-dash spelling stands for ("-ngl" -> "--n-gpu-layers"), or ""
// when `arg` is not one.
std::string llama_long_name(const std::string& arg);

}  // namespace mox::cli
