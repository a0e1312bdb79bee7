// llama.cpp flags that mox accepts without acting on them, or refuses, each with one line that says
// what mox does instead. A pasted llama.cpp command line either runs or says why not; nothing that
// changes the result is ignored in silence. The flags mox implements live with their commands.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace mox::cli {

// The model-running commands; a flag of the table applies to some of them.
enum class Command : unsigned {
    run = 1,
    chat = 2,
    serve = 4,
    logits = 8,
    perplexity = 16,
    bench = 32,
    plan = 64,
};

// Registers the table's flags that apply to `which` on cmd (in their own help group). When given,
// each prints "mox: note: ..." on stderr or throws mox::Error, while the command line is parsed.
void add_llama_flags(CLI::App* cmd, Command which);

// "mox: note: TEXT" on stderr: a flag was taken, and this is what mox does with it.
void note(const std::string& text);

}  // namespace mox::cli
