// The special-token facts of an HF checkpoint's tokenizer files, found by the rules llama.cpp's
// converter applies (gguf-py's SpecialVocab): which ids are bos, eos, unk, ..., and whether BOS /
// EOS / SEP are added. Used by `mox convert` for SentencePiece vocabularies.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>

namespace mox::models {

struct HfSpecialTokens {
    // Type ("bos", "eos", "unk", "sep", "pad", "cls", "mask", and "eot" / "eom" when a post-processor
    // moves eos) -> id. The first source that names an id below n_vocab wins: tokenizer_config.json's
    // <type>_token text looked up among tokenizer.json's added_tokens, then config.json's
    // <type>_token_id (or text_config's).
    std::map<std::string, int32_t> ids;
    // Type -> add_<type>_token: from tokenizer.json's post-processor (TemplateProcessing: a leading
    // bos / trailing eos in `single`, a separator in `pair`; RobertaProcessing: all three), then
    // overridden by tokenizer_config.json's add_<type>_token.
    std::map<std::string, bool> add;
};

// The parsed files; nullptr for a file the checkpoint lacks. Throws mox::Error for a negative id.
// An id at or beyond n_vocab is skipped with a warning, as llama.cpp does.
HfSpecialTokens hf_special_tokens(const nlohmann::json* tokenizer, const nlohmann::json* tokenizer_config,
                                  const nlohmann::json* config, int64_t n_vocab);

// Python's truth value of a JSON value (null, false, 0, "", [] and {} are false): llama.cpp's rules
// test json.load's objects so.
bool truthy(const nlohmann::json& value);

}  // namespace mox::models
