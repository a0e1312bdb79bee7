// placeholder_vocab(): a small byte-level BPE vocabulary learned from a sample text, for
// synthetic models that ship no tokenizer.
#include "core/error.h"
#include "text/byte_level.h"
#include "text/pretokenizer.h"
#include "text/utf8.h"
#include "text/vocab.h"

#include <array>
#include <map>
#include <unordered_map>

namespace mox::text {
namespace {

// Written for this purpose: a little English prose, some code and numbers, so the first merges
// are the common ones (" t", "he", "in", "  ", ...).
constexpr std::string_view kSampleText = R"(The quick brown fox jumps over the lazy dog. It is the
first of many sentences that the tokenizer will see, and the words that appear most often in
English text are the, of, and, to, in, is, that, it, was, for, on, are, with, as, they, be, at.
When the model is small, these common pieces are all it needs: the rest of any text falls back to
single bytes, which always works, so every string can still be written and read back exactly.

def tokenize(text: str) -> list[int]:
    """Return the token ids of the text."""
    ids = []
    for word in text.split():
        if word in vocab:
            ids.append(vocab[word])
        else:
            ids.extend(encode_bytes(word))
    return ids

int main(int argc, char** argv) {
    for (int i = 0; i < argc; ++i) printf("%d: %s\n", i, argv[i]);
    return 0;
}

Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 1024 3.14159 2025-01-01 12:30
)";

constexpr std::array<std::string_view, 3> kSpecials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

}  // namespace

Vocab placeholder_vocab(int32_t n_tokens, std::string_view training_text) {
    const auto n_specials = static_cast<int32_t>(kSpecials.size());
    if (n_tokens < 256 + n_specials)
        fail("placeholder vocabulary: {} tokens is fewer than the {} needed (256 bytes + {} specials)",
             n_tokens, 256 + n_specials, n_specials);
    if (training_text.empty()) training_text = kSampleText;
    if (!utf8_is_valid(training_text)) fail("placeholder vocabulary: the training text is not valid UTF-8");

    Vocab v;
    v.model = "gpt2";
    v.pre = "qwen35";
    v.normalizer = Normalizer::nfc;
    for (int b = 0; b < 256; ++b) v.tokens.push_back(bytes_to_mapped(std::string(1, static_cast<char>(b))));

    // Distinct pre-tokenized pieces with their counts, each as a sequence of token ids. std::map
    // keeps the order (and so the learned merges) deterministic.
    std::map<std::string, int64_t> counts;
    {
        const PreTokenizer pre(v.effective_pre_regex());
        std::vector<std::string_view> pieces;
        pre.split(training_text, pieces);
        for (std::string_view p : pieces) ++counts[std::string(p)];
    }
    std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
    for (const auto& [piece, count] : counts) {
        std::vector<int32_t> ids;
        for (char c : piece) ids.push_back(static_cast<uint8_t>(c));
        words.emplace_back(std::move(ids), count);
    }

    std::unordered_map<std::string, int32_t> id_of;
    for (int32_t i = 0; i < 256; ++i) id_of.emplace(v.tokens[static_cast<size_t>(i)], i);
    const int32_t n_learned_max = n_tokens - n_specials;
    while (static_cast<int32_t>(v.tokens.size()) < n_learned_max) {
        // Most frequent adjacent pair; ties go to the smallest (left, right) ids.
        std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
        for (const auto& [ids, count] : words)
            for (size_t i = 0; i + 1 < ids.size(); ++i) pairs[{ids[i], ids[i + 1]}] += count;
        if (pairs.empty()) break;
        auto best = pairs.begin();
        for (auto it = pairs.begin(); it != pairs.end(); ++it)
            if (it->second > best->second) best = it;
        const auto [left, right] = best->first;
        const std::string& ls = v.tokens[static_cast<size_t>(left)];
        const std::string& rs = v.tokens[static_cast<size_t>(right)];
        std::string merged_spelling = ls + rs;
        v.merges.push_back(ls + " " + rs);
        // Two different pairs can spell the same token ("a"+"bc", "ab"+"c"): reuse its id.
        auto [it, inserted] = id_of.emplace(merged_spelling, static_cast<int32_t>(v.tokens.size()));
        if (inserted) v.tokens.push_back(std::move(merged_spelling));
        const int32_t merged = it->second;
        for (auto& [ids, count] : words) {
            std::vector<int32_t> next;
            next.reserve(ids.size());
            for (size_t i = 0; i < ids.size(); ++i) {
                if (i + 1 < ids.size() && ids[i] == left && ids[i + 1] == right) {
                    next.push_back(merged);
                    ++i;
                } else {
                    next.push_back(ids[i]);
                }
            }
            ids = std::move(next);
        }
    }
    v.token_types.assign(v.tokens.size(), TokenType::tt_normal);

    const auto first_special = static_cast<int32_t>(v.tokens.size());
    for (std::string_view s : kSpecials) {
        v.tokens.emplace_back(s);
        v.token_types.push_back(TokenType::tt_control);
    }
    v.bos = first_special;  // <|endoftext|>, as Qwen's GGUFs name it; never prepended
    v.pad = first_special;
    v.eos = first_special + 2;  // <|im_end|>
    while (v.size() < n_tokens) {
        v.tokens.push_back("[PAD" + std::to_string(v.size()) + "]");
        v.token_types.push_back(TokenType::tt_unused);
    }
    v.validate();
    return v;
}

}  // namespace mox::text
