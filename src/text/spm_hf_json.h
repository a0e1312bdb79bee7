// A Llama-style HF tokenizer.json, the file transformers' LlamaTokenizerFast writes for a
// SentencePiece model: a BPE model with byte_fallback over pieces that spell a space U+2581, a
// normalizer (or Metaspace pre-tokenizer) that turns spaces into U+2581 and may prepend one. Read as
// the pieces of a SentencePiece vocabulary (tokenizer.ggml.model "llama") for `mox convert`.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mox::text {

struct HfAddedToken {
    int32_t id = 0;
    std::string content;
    bool special = false;
};

struct SpmHfJson {
    std::vector<std::string> vocab;  // [n_base] the BPE model's vocabulary by id
    // [n_base] merge priority for the SentencePiece merge loop: -r for a token the merge of rank r
    // forms first; tokens no merge forms (characters, bytes, specials) rank below every merge.
    std::vector<float> scores;
    std::vector<HfAddedToken> added_tokens;  // as the file lists them
    bool add_dummy_prefix = true;            // a U+2581 goes before the text
};

// Whether `tokenizer` (a parsed tokenizer.json) has a BPE model with byte_fallback: the Llama kind;
// llama.cpp converts any other through its byte-level BPE path.
bool is_spm_hf_json(const nlohmann::json& tokenizer);

// Throws mox::Error naming `name` and the part for anything mox's SentencePiece tokenizer would not
// reproduce (another normalizer or pre-tokenizer, a Metaspace that splits words) and for a
// malformed vocabulary (ids not 0..n-1, duplicates, merges of unknown tokens).
SpmHfJson spm_from_hf_json(const nlohmann::json& tokenizer, const std::string& name);

}  // namespace mox::text
