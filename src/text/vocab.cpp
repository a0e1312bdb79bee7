#include "text/vocab.h"

#include <fmt/format.h>

#include "core/error.h"

#include <algorithm>
#include <array>
#include <unordered_set>

namespace mox::text {
namespace {

// Pre-tokenizer regexes in HF tokenizers syntax. qwen35 differs from qwen2 in that combining
// marks (\p{M}) join letter runs and are excluded from the punctuation run.
constexpr std::string_view kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Token texts that end a turn or a document, in the model families mox targets (Phi-3.5: <|end|>;
// SentencePiece vocabularies: </s>).
constexpr std::array<std::string_view, 11> kEndMarkers = {
    "<|endoftext|>", "<|im_end|>", "<|fim_pad|>",     "<|repo_name|>", "<|file_sep|>", "<|eot_id|>",
    "<|eom_id|>",    "<|end|>",    "<|end_of_text|>", "<end_of_turn>", "</s>",
};

// "<0xAB>", as SentencePiece spells its byte tokens.
bool is_byte_spelling(std::string_view s) {
    const auto hex = [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
    };
    return s.size() == 6 && s.substr(0, 3) == "<0x" && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

}  // namespace

bool is_end_marker(std::string_view text) {
    return std::find(kEndMarkers.begin(), kEndMarkers.end(), text) != kEndMarkers.end();
}

std::optional<std::string> builtin_pre_regex(std::string_view pre) {
    if (pre == "qwen35") return std::string(kQwen35Regex);
    if (pre == "qwen2") return std::string(kQwen2Regex);
    if (pre == "gpt2" || pre == "default") return std::string(kGpt2Regex);
    return std::nullopt;
}

std::string Vocab::effective_pre_regex() const {
    if (!pre_regex.empty()) return pre_regex;
    auto regex = builtin_pre_regex(pre);
    if (!regex) fail("tokenizer: unsupported pre-tokenizer '{}' (supported: qwen35, qwen2, gpt2)", pre);
    return *regex;
}

std::optional<int32_t> Vocab::find(std::string_view token) const {
    for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] == token) return static_cast<int32_t>(i);
    return std::nullopt;
}

void pad_vocab(Vocab& v, int32_t n_rows) {
    if (v.size() > n_rows) fail("vocabulary has {} tokens, more than the model's {} rows", v.size(), n_rows);
    for (int32_t id = v.size(); id < n_rows; ++id) {
        v.tokens.push_back(fmt::format("[PAD{}]", id));
        v.token_types.push_back(TokenType::tt_unused);
        if (!v.scores.empty()) v.scores.push_back(0.0f);
    }
}

std::vector<int32_t> Vocab::end_of_generation() const {
    std::vector<int32_t> ids;
    if (eos) ids.push_back(*eos);
    if (eot) ids.push_back(*eot);
    for (int32_t i = 0; i < size(); ++i)
        if (is_end_marker(tokens[static_cast<size_t>(i)])) ids.push_back(i);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
}

void Vocab::validate() const {
    if (model != "gpt2" && model != "llama")
        fail("tokenizer: unsupported tokenizer model '{}' (supported: gpt2, llama)", model);
    if (tokens.empty()) fail("tokenizer: the vocabulary has no tokens");
    if (token_types.size() != tokens.size())
        fail("tokenizer: {} token types for {} tokens", token_types.size(), tokens.size());
    if (sentencepiece()) {
        if (scores.size() != tokens.size())
            fail("tokenizer: {} scores for {} tokens", scores.size(), tokens.size());
        if (!merges.empty())
            fail("tokenizer: a SentencePiece vocabulary has no merges list ({} given)", merges.size());
        for (size_t i = 0; i < tokens.size(); ++i)
            if (token_types[i] == TokenType::tt_byte && !is_byte_spelling(tokens[i]))
                fail("tokenizer: byte token {} ('{}') is not spelled <0xAB>", i, tokens[i]);
    } else {
        (void)effective_pre_regex();  // throws for an unknown pre-tokenizer name
    }

    std::unordered_set<std::string_view> seen_normal, seen_added;
    for (size_t i = 0; i < tokens.size(); ++i) {
        const auto t = static_cast<int32_t>(token_types[i]);
        if (t < 0 || t > static_cast<int32_t>(TokenType::tt_byte))
            fail("tokenizer: token {} has unknown token type {}", i, t);
        const TokenType type = token_types[i];
        if (type == TokenType::tt_unused) continue;
        if (tokens[i].empty()) fail("tokenizer: token {} is empty", i);
        const bool added = type == TokenType::tt_control || type == TokenType::tt_user_defined;
        auto& seen = added ? seen_added : seen_normal;
        if (!seen.insert(tokens[i]).second)
            fail("tokenizer: token {} ('{}') appears twice in the vocabulary", i, tokens[i]);
    }
    const auto check_id = [&](const std::optional<int32_t>& id, std::string_view what) {
        if (id && (*id < 0 || *id >= size()))
            fail("tokenizer: {} id {} is outside the vocabulary of {} tokens", what, *id, size());
    };
    check_id(bos, "bos");
    check_id(eos, "eos");
    check_id(eot, "eot");
    check_id(pad, "padding");
    check_id(unk, "unknown");
    if (add_bos && !bos) fail("tokenizer: add_bos is set but there is no bos token");
    if (add_eos && !eos) fail("tokenizer: add_eos is set but there is no eos token");
    for (const int32_t id : rstrip) check_id(id, "rstrip");
    for (size_t i = 0; i < merges.size(); ++i) {
        const auto& m = merges[i];
        const size_t space = m.find(' ');
        if (space == std::string::npos || space == 0 || space + 1 == m.size() ||
            m.find(' ', space + 1) != std::string::npos)
            fail("tokenizer: merge {} ('{}') is not two tokens separated by one space", i, m);
    }
}

}  // namespace mox::text
