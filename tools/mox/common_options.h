// Options shared by the commands that load a model (run, chat, logits, bench): llama.cpp's names.
#pragma once

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
    int64_t n_ctx = 0;  // 0: enough for the job, capped by the model's trained context
    std::string cache_type_k = "f16";
    std::string cache_type_v = "f16";
    std::string isa = "auto";  // CPU kernel tier cap: auto, avx512, avx2, scalar (reference)
    bool no_pin = false;
    std::string device = "cpu";  // cpu or cuda
    int n_gpu_layers = -2;       // -ngl as llama.cpp; -2: not given
    PlacementOptions placement;  // -ot, --n-cpu-moe, ..., --vram-budget, -ub (the GPU only)

    quant::Isa cpu_isa() const;  // throws on an unknown or unsupported name
    // --device and -ngl resolved for this model: -ngl 0 is the CPU, -ngl > the layer count (the
    // output layer counts as one, as in llama.cpp) or -1 the GPU, placement flags the GPU; anything
    // between is a partial offload of whole layers, which the GPU forward refuses (place/execute.h).
    models::Device resolve_device(int64_t n_layer) const;

    // Loads the model where the flags say (planning its placement on the GPU). -ctk/-ctv auto are
    // resolved here: cache_type_k/v hold the planned types afterwards, for state_options.
    std::unique_ptr<models::Model> load(const gguf::File& file);
};

void add_model_options(CLI::App* cmd, ModelOptions& o, bool model_required = true);

// State options from the flags; n_needed is the context the job needs at least when -c is not set.
models::StateOptions state_options(const ModelOptions& o, const models::Hparams& hp, int64_t n_needed);

}  // namespace mox::cli
