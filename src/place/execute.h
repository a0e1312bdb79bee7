// From a Placement to what the GPU forward executes (models::GpuOptions), or a clear refusal of what
// it cannot execute. The runtime only executes placements (DESIGN.md "Placement is data"); this is
// the one place that says which placements it can run:
//  - the routed experts of each trunk layer (a dense model's FFN: placement.h) on one tier: gpu,
//    pinned_host or mmap_host (an expert split within a layer, the expert cache, is not executed yet);
//  - every other tensor of the trunk layers, output and output_norm on the GPU (layers on the CPU,
//    llama.cpp's partial -ngl, are not executed: keeping attention on the GPU and moving experts
//    is always the faster use of the same VRAM for these models);
//  - token_embd on the GPU or the host (a row lookup by the CPU, as llama.cpp does).
// MTP blocks are not run by the trunk and may live anywhere.
#pragma once

#include "models/model.h"
#include "place/placement.h"

namespace mox::place {

// What the placement alone decides; n_ubatch, the budget etc. keep their defaults for the caller.
models::GpuOptions gpu_options_for(const Placement& p, const models::Hparams& hp);

// A placement with everything on the GPU but token_embd (llama.cpp's -ngl all) for a file.
Placement all_on_gpu(const gguf::File& file);

}  // namespace mox::place
