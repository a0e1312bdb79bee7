// Options shared by the commands that load a model (run, chat, serve, logits, perplexity): llama.cpp's
// names, the same defaults and checks in each. mox bench and mox plan take the same names with their
// own value lists (docs/cli.md lists every flag and where it applies).
#pragma once

#include "flag_values.h"
#include "llama_flags.h"
#include "models/model.h"
#include "placement_options.h"

#include <memory>
#include <string>

namespace CLI {
class App;
}

namespace mox::cli {

struct ModelOptions {
    std::string path;
    int threads = 0;
    int64_t n_ctx = -1;  // -c: -1 not given (each command's default), 0 the model's trained context
    std::string cache_type_k = "f16";
    std::string cache_type_v = "f16";
    std::string isa = "auto";  // CPU kernel tier cap: auto, avx512, avx2, scalar (reference)
    bool no_pin = false;
    std::string device = "cpu";  // cpu or cuda
    std::string n_gpu_layers;    // -ngl as llama.cpp: N, -1 or all, auto (= not given: the planner)
    PlacementOptions placement;  // -ot, --n-cpu-moe, ..., --vram-budget, -ub (the GPU only)
    std::string routing_trace;   // replay: the experts that run are this trace's (models/routing_trace.h)

    quant::Isa cpu_isa() const;  // throws on an unknown or unsupported name
    // -c for this model: the tokens given, the trained context for 0, `fallback` (capped by the
    // trained context) when not given.
    int64_t context(const models::Hparams& hp, int64_t fallback) const;
    // --device and -ngl resolved for this model: -ngl 0 is the CPU, -ngl > the layer count (the
    // output layer counts as one, as in llama.cpp) or -1 the GPU, placement flags the GPU; anything
    // between is a partial offload of whole layers, which the GPU forward refuses (place/execute.h).
    models::Device resolve_device(int64_t n_layer) const;

    // Loads the model where the flags say (planning its placement on the GPU). -ctk/-ctv auto are
    // resolved here: cache_type_k/v hold the planned types afterwards, for state_options.
    std::unique_ptr<models::Model> load(const gguf::File& file);
};

// What chat and serve hold, and what a GPU plan is made for, when -c is not given.
inline constexpr int64_t kDefaultContext = 8192;

// The model flags and the llama.cpp flags of the table (llama_flags.h) that apply to `which`.
void add_model_options(CLI::App* cmd, ModelOptions& o, Command which, bool model_required = true);

// State options from the flags; n_needed is the context the job needs at least when -c is not set.
models::StateOptions state_options(const ModelOptions& o, const models::Hparams& hp, int64_t n_needed);

}  // namespace mox::cli
