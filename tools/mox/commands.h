// Each subcommand registers itself on the CLI11 app; main() only dispatches.
#pragma once

namespace CLI {
class App;
}

namespace mox::cli {

void register_inspect(CLI::App& app);
void register_synth(CLI::App& app);
void register_logits(CLI::App& app);
void register_devices(CLI::App& app);
void register_run(CLI::App& app);
void register_chat(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_convert(CLI::App& app);
void register_bench(CLI::App& app);
void register_plan(CLI::App& app);
void register_calibrate(CLI::App& app);
void register_serve(CLI::App& app);
void register_cache_sim(CLI::App& app);
void register_trace_synth(CLI::App& app);

}  // namespace mox::cli
