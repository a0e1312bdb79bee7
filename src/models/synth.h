// Synthetic GGUF models: llama.cpp-loadable files with random weights of sane scale, for tests and
// benchmarks of full-size shapes that cannot be downloaded here (`mox synth`).
#pragma once

#include "models/hparams.h"
#include "quant/types.h"

#include <cstdint>
#include <functional>
#include <string>

namespace mox::models {

// Per-tensor type recipes, following llama-quantize's rules for the qwen35moe tensors
// (shared/spec/gguf-and-quants.md §7, shared/spec/qwen35moe.md §6).
enum class QuantMix { q4_k_m, q8_0, q6_k, iq4_xs, bf16, f16, f32 };

QuantMix quant_mix_from_name(const std::string& name);  // "q4_k_m", "Q8_0", ... ; throws on unknown
const char* quant_mix_name(QuantMix mix);
uint32_t llama_ftype_of(QuantMix mix);                     // general.file_type value

// The type llama-quantize would give `spec` under `mix` (F32 for the tensors it never quantizes),
// after the row-length fallback when ne0 is not a multiple of the block size.
quant::TypeId choose_tensor_type(const TensorSpec& spec, QuantMix mix, const Hparams& hp);

struct SynthOptions {
    Hparams hparams;
    QuantMix mix = QuantMix::q4_k_m;
    uint64_t seed = 42;
    int threads = 0;            // 0: all hardware threads
    double router_skew = 0;     // Zipf-like exponent of expert popularity; 0 = uniform
    std::string name = "mox-synthetic";
    std::string vocab_path;     // tokenizer.json or GGUF to take the vocabulary from; empty: placeholder
    std::string chat_template;  // template text to store (tokenizer.chat_template); empty: the vocab's
};

// Named presets: qwen35moe "qwen3.6-35b-a3b" (full size) and "tiny" (a few MB, same structure);
// qwen35 (dense) "qwen3.6-27b" and "qwen35-tiny";
// qwen3moe "qwen3-30b-a3b", "qwen3-235b-a22b" (full size) and "qwen3moe-tiny"; llama (Mixtral)
// "mixtral-8x7b" and "mixtral-tiny"; phimoe "phi-3.5-moe" and "phimoe-tiny".
Hparams synth_preset(const std::string& name);

struct SynthProgress {
    uint64_t bytes_done = 0;
    uint64_t bytes_total = 0;
};

// Writes the model to `path`, streaming: memory use is a few chunk buffers regardless of size.
// The output is a deterministic function of the options (thread count included or not).
void write_synthetic_model(const std::string& path, const SynthOptions& options,
                           const std::function<void(const SynthProgress&)>& on_progress = {});

}  // namespace mox::models
