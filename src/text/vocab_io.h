// Reading and writing vocabularies: GGUF metadata (tokenizer.ggml.*) and HF tokenizer.json.
#pragma once

#include "text/vocab.h"

#include <string>
#include <string_view>

namespace mox::gguf {
class File;
class Writer;
}  // namespace mox::gguf

namespace mox::text {

// From GGUF metadata: tokenizer.ggml.{model, pre, tokens, token_type, merges, scores, bos_token_id,
// eos_token_id, eot_token_id, padding_token_id, unknown_token_id, add_bos_token, add_eos_token,
// add_space_prefix} and tokenizer.chat_template. Byte-level BPE ("gpt2"): an absent add_bos_token
// means no BOS; the qwen2 / qwen35 pre-tokenizers get NFC normalization, as their HF tokenizers do.
// SentencePiece ("llama"): llama.cpp's defaults for absent keys (bos 1, eos 2, unk 0, BOS added,
// space prefix on, scores 0) and its RSTRIP for the added tokens of files named Phi-3. Throws
// mox::Error naming the key on a missing or mistyped key and on an inconsistent vocabulary.
Vocab vocab_from_gguf(const gguf::File& file);

// Sets the same keys on `writer` (before its write_header), so vocab_from_gguf reads `vocab`
// back; llama.cpp's key names and types (token_type as i32, ids as u32).
void vocab_to_gguf(const Vocab& vocab, gguf::Writer& writer);

// From the text of an HF tokenizer.json with a BPE model, a byte-level pre-tokenizer (ByteLevel
// with its GPT-2 regex, or Split(regex, Isolated) followed by ByteLevel without regex), an NFC or
// no normalizer, and optionally a TemplateProcessing post-processor that adds BOS/EOS. Anything
// else (lstrip/rstrip added tokens, byte_fallback, subword prefixes, ...) is rejected with
// mox::Error rather than tokenized differently. `name` appears in error messages.
Vocab vocab_from_hf_json(std::string_view json_text, const std::string& name = "tokenizer.json");
Vocab vocab_from_hf_json_file(const std::string& path);

// Writes `vocab` as an HF tokenizer.json that the tokenizers package loads and that tokenizes
// like mox::text::Tokenizer (used to check placeholder vocabularies against HF).
std::string vocab_to_hf_json(const Vocab& vocab);

}  // namespace mox::text
