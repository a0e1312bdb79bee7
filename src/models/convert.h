// Hugging Face checkpoint (config.json + safetensors) -> llama.cpp-compatible GGUF (`mox convert`),
// for the architectures of the registry: Qwen3.5/3.6-MoE and Qwen3-MoE. Tensor names, shapes,
// metadata and transforms follow shared/spec/qwen35moe.md §2 and archs.md §2; for Qwen3.5:
// zero-centred norms get +1 (not the gated linear_attn.norm), A_log becomes -exp(A_log), dt_bias
// becomes ssm_dt.bias, conv1d is squeezed, fused expert gate_up_proj is split, and the DeltaNet value
// heads are re-ordered from HF's grouped order to llama.cpp's tiled order. The conversion streams:
// one chunk of rows is in memory at a time, whatever the model's size.
#pragma once

#include "models/hf_config.h"
#include "models/hparams.h"
#include "models/synth.h"


#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace mox::models {

// Reads the text model's hyper-parameters from an HF config through the registry row whose
// hf_model_types lists its model_type (the nested `text_config` of a `qwen3_5_moe` config, a flat
// `qwen3_5_moe_text` or `qwen3_moe` config). Throws mox::Error naming the key.
HfTextConfig hparams_from_hf_config(const nlohmann::json& config);

struct ConvertOptions {
    std::string hf_dir;
    std::string output;
    // Per-tensor types; nullopt = the source's own float type (F32, F16 or BF16, read from the
    // embedding). Tensors llama.cpp keeps in F32 (norms, routers, conv, ssm_a, ...) stay F32 always.
    std::optional<QuantMix> mix;
    int threads = 0;  // 0: all hardware threads
    // The checkpoint's tokenizer files become the GGUF vocabulary (convert_vocab.h); with this set,
    // the placeholder vocabulary is written instead (a warning says so). A checkpoint without
    // tokenizer files always gets the placeholder.
    bool placeholder_vocab = false;
};

struct ConvertProgress {
    size_t tensors_done = 0;
    size_t tensors_total = 0;
    uint64_t bytes_done = 0;
    uint64_t bytes_total = 0;
};

struct ConvertSummary {
    Hparams hparams;
    QuantMix mix = QuantMix::f32;
    size_t n_tensors = 0;
    uint64_t data_bytes = 0;
    bool placeholder_vocab = true;
};

ConvertSummary convert_hf(const ConvertOptions& options,
                                 const std::function<void(const ConvertProgress&)>& on_progress = {});

}  // namespace mox::models
