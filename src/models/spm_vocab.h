// SentencePiece vocabularies (tokenizer.ggml.model "llama") of HF checkpoints, laid out as
// llama.cpp's converter lays them out for Mixtral (`llama`) and Phi-3.5-MoE (`phimoe`): the pieces
// in id order, the checkpoint's added tokens over them, unused "[PAD<id>]" rows up to the
// embedding's row count, and the special ids and add_bos / add_eos flags of hf_special_tokens().
// convert_vocab.cpp reads the files and picks the function.
#pragma once

#include "gguf/value.h"
#include "text/spm_hf_json.h"
#include "text/spm_model.h"
#include "text/vocab.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mox::models {

// The parsed tokenizer files of a checkpoint folder; nullptr for a file it lacks.
struct HfTokenizerFiles {
    const nlohmann::json* tokenizer = nullptr;         // tokenizer.json
    const nlohmann::json* tokenizer_config = nullptr;  // tokenizer_config.json
    const nlohmann::json* added_tokens = nullptr;      // added_tokens.json
    const nlohmann::json* config = nullptr;            // config.json
};

struct ConvertedVocab {
    text::Vocab vocab;
    // Keys llama.cpp's converter writes that text::Vocab does not carry (the sep / mask / eom ids,
    // add_sep_token, named chat templates), set after the vocabulary's own.
    std::vector<std::pair<std::string, gguf::Value>> extra_keys;
};

// Mixtral from tokenizer.model (llama.cpp's _create_vocab_sentencepiece): pieces at or beyond
// n_vocab are dropped with a warning; added_tokens.json's tokens are user-defined; the entries of
// tokenizer_config.json's added_tokens_decoder are control tokens when "special" or spelled like one
// (<|...|>, <pad>, <mask>, <unusedN>, ...), else user-defined with U+2581 read as a space; every added
// token scores -1000, every row nothing fills "[PAD<id>]" (unused, -10000). add_space_prefix:
// tokenizer_config.json's add_prefix_space, else the model's dummy prefix.
ConvertedVocab spm_vocab_llama(const text::SpmModel& model, const HfTokenizerFiles& files, int64_t n_vocab);

// Phi-3.5-MoE from tokenizer.model (llama.cpp's Phi-3 rules): as above, except that the entries of
// added_tokens_decoder and then tokenizer.json's added_tokens are control tokens when "special",
// else user-defined, spelled as given; a piece or added token beyond n_vocab is an error.
ConvertedVocab spm_vocab_phi3(const text::SpmModel& model, const HfTokenizerFiles& files, int64_t n_vocab);

// Mixtral from a Llama-style tokenizer.json alone (llama.cpp's _set_vocab_llama_hf): the BPE
// vocabulary by id (byte tokens <0xAB> typed byte, the tokenizer's special tokens control), then
// its added tokens beyond it in id order (control when special, else user-defined, score -1000),
// then "[PAD<id>]" rows. Scores of the base tokens come from the merge ranks (spm_from_hf_json),
// where llama.cpp writes -1000 for every token: with equal scores its tokenizer merges left to
// right instead of by rank.
ConvertedVocab spm_vocab_llama_hf(const text::SpmHfJson& hf, const HfTokenizerFiles& files, int64_t n_vocab);

// Whether llama.cpp's converter counts an added token's text as a control token even when the
// checkpoint does not mark it special.
bool looks_special(std::string_view text);

}  // namespace mox::models
