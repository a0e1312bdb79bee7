// What the Qwen3.5/3.6 family shares between its MoE (qwen35moe.cpp) and dense (qwen35.cpp) rows:
// the DeltaNet and rotary-section keys and the HF config reader.
#pragma once

#include "models/arch.h"
#include "models/hf_config.h"

namespace mox::models::archs {

void read_qwen35_keys(const gguf::File& file, Hparams& hp);
void write_qwen35_keys(gguf::Writer& writer, const Hparams& hp);
// `arch`: Arch::qwen35moe (experts and the shared expert) or Arch::qwen35 (intermediate_size).
HfTextConfig qwen35_family_from_hf_config(const nlohmann::json& config, Arch arch);

}  // namespace mox::models::archs
