// The tokenizer section of `mox convert`'s output: which of a checkpoint's tokenizer files becomes
// the GGUF vocabulary, decided by the architecture's tokenizer kind and the files present.
//
//   byte-level BPE architectures (qwen35moe, qwen35, qwen3moe): tokenizer.json.
//   llama (Mixtral):  tokenizer.model (SentencePiece); else a Llama-style tokenizer.json (BPE with
//                     byte_fallback); else a byte-level tokenizer.json, as llama.cpp falls back.
//   phimoe:           tokenizer.model (tokenizer_config.json's tokenizer_class GPT2Tokenizer: the
//                     byte-level tokenizer.json).
#pragma once

#include "gguf/writer.h"
#include "models/hparams.h"
#include "models/spm_vocab.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>

namespace mox::models {

// Whether the folder holds any tokenizer file (tokenizer.json, tokenizer.model, vocab.json).
bool has_tokenizer_files(const std::filesystem::path& dir);

// The checkpoint's vocabulary, its rows padded to hp.n_vocab (the embedding's rows), with the chat
// template (hf_chat_template rules) and llama.cpp's special ids and flags. Throws mox::Error naming
// the file that is missing, malformed or of a kind mox does not tokenize.
ConvertedVocab read_checkpoint_vocab(const std::filesystem::path& dir, const Hparams& hp);

// Sets the vocabulary's keys and then its extra keys on `writer`.
void write_converted_vocab(const ConvertedVocab& vocab, gguf::Writer& writer);

// A JSON file of the checkpoint; mox::Error naming it when it cannot be read or parsed.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace mox::models
