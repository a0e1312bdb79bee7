// The tokenizer section of synthetic models.
#pragma once

#include "gguf/writer.h"

#include <cstdint>

namespace mox::models {

// Writes a byte-level BPE vocabulary of exactly n_vocab tokens (tokenizer.ggml.*), loadable by
// llama.cpp and by mox's tokenizer.
void write_synth_vocab(gguf::Writer& writer, int64_t n_vocab);

}  // namespace mox::models
