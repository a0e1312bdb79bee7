// The tokenizer section of synthetic and converted models without a tokenizer of their own.
#pragma once

#include "gguf/writer.h"

#include <cstdint>
#include <string>

namespace mox::models {

// Writes a byte-level BPE placeholder vocabulary of exactly n_vocab rows (text::placeholder_vocab),
// loadable by llama.cpp and by mox's tokenizer.
void write_synth_vocab(gguf::Writer& writer, int64_t n_vocab);

// Writes the vocabulary of `path` (an HF tokenizer.json, or a GGUF whose tokenizer.ggml.* keys are
// used), padded with unused rows to n_vocab; `chat_template`, when not empty, replaces its template.
void write_vocab_from_file(gguf::Writer& writer, const std::string& path, int64_t n_vocab,
                           const std::string& chat_template);

}  // namespace mox::models
