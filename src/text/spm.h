// SentencePiece BPE on tokenizer.ggml.model "llama" vocabularies (Mixtral, Phi-3.5-MoE), with
// llama.cpp's semantics: the text (spaces already escaped to U+2581) starts as one symbol per
// UTF-8 character; the adjacent pair whose concatenation is a token with the highest score is
// merged (leftmost among equal scores), until no adjacent pair spells a token. A final symbol
// that is not a token becomes the <0xAB> tokens of its bytes (byte fallback).
#pragma once

#include "text/vocab.h"

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mox::text {

// U+2581, SentencePiece's visible space.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

// `text` with every ' ' replaced by U+2581, after one more space when `space_prefix`.
std::string spm_escape(std::string_view text, bool space_prefix);
// `piece` with every U+2581 replaced by ' '.
std::string spm_unescape(std::string_view piece);

class SpmModel {
  public:
    explicit SpmModel(const Vocab& vocab);

    // Appends the ids of `escaped` (the output of spm_escape).
    void encode(std::string_view escaped, std::vector<int32_t>& out) const;

    // The token for byte b: <0xAB>, else a token spelled as that single byte, else unk; -1: none.
    int32_t byte_token(uint8_t b) const { return byte_token_[b]; }

  private:
    struct Hash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    int32_t find(std::string_view text) const;  // -1: not a token

    // Every token by its text, whatever its type (llama.cpp looks merges up the same way).
    std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> by_text_;
    std::vector<float> scores_;
    std::array<int32_t, 256> byte_token_{};
    size_t max_token_bytes_ = 0;
};

}  // namespace mox::text
