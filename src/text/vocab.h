// A byte-level BPE vocabulary as GGUF stores it (tokenizer.ggml.*) and as the Tokenizer consumes
// it. Loaders: vocab_gguf.cpp (GGUF metadata), vocab_hf_json.cpp (HF tokenizer.json);
// placeholder_vocab.cpp builds one for tiny synthetic models.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mox::text {

// Values of tokenizer.ggml.token_type (the same ids as gguf-py's TokenType).
enum class TokenType : int32_t {
    tt_undefined = 0,
    tt_normal = 1,
    tt_unknown = 2,
    tt_control = 3,       // special token (<|im_start|>): matched in text only when parse_special is on
    tt_user_defined = 4,  // added token that is always matched in text (HF "special": false)
    tt_unused = 5,        // padding rows ([PAD248077]): never produced, decode to nothing
    tt_byte = 6,          // SentencePiece <0xAB> tokens; not used by byte-level BPE
};

enum class Normalizer { none, nfc };

struct Vocab {
    std::string model = "gpt2";  // tokenizer.ggml.model; only "gpt2" (byte-level BPE) is supported
    std::string pre = "qwen35";  // tokenizer.ggml.pre; selects a built-in pre-tokenizer regex
    // Pre-tokenizer regex in HF tokenizers (Oniguruma) syntax. Empty: the built-in one for `pre`.
    std::string pre_regex;
    Normalizer normalizer = Normalizer::none;

    // [n_vocab] Normal tokens are spelled in the byte-level mapping (byte_level.h); control and
    // user-defined tokens are their literal UTF-8 text.
    std::vector<std::string> tokens;
    std::vector<TokenType> token_types;  // [n_vocab]
    std::vector<std::string> merges;     // "left right" in rank order (rank 0 first)
    bool ignore_merges = false;          // a piece that is itself a token skips the merges (HF option)

    std::optional<int32_t> bos, eos, eot, pad, unk;
    bool add_bos = false;  // prepend bos when encoding with add_special (never for Qwen3.5)
    bool add_eos = false;
    std::string chat_template;

    int32_t size() const { return static_cast<int32_t>(tokens.size()); }
    TokenType type(int32_t id) const { return token_types[static_cast<size_t>(id)]; }

    // Linear search by spelling; for tests and setup, not for hot paths.
    std::optional<int32_t> find(std::string_view token) const;

    // Ids that end generation: eos, eot, and control tokens whose text is one of the well-known
    // end-of-turn / end-of-document markers (<|endoftext|>, <|im_end|>, <|fim_pad|>,
    // <|repo_name|>, <|file_sep|>, <|eot_id|>, <|end|>). Sorted, unique.
    std::vector<int32_t> end_of_generation() const;

    // Throws mox::Error naming the first inconsistency (sizes, id ranges, empty tokens,
    // duplicates among matchable tokens, malformed merges).
    void validate() const;

    // The pre-tokenizer regex in HF syntax: pre_regex, or the built-in one for `pre` (throws for an
    // unknown name).
    std::string effective_pre_regex() const;
};

// Appends unused rows "[PAD<id>]" until the vocabulary has n_rows tokens, as GGUF files pad the
// token list to the embedding's row count (Qwen3.5: 248320 rows for 248077 tokens). Throws
// mox::Error if the vocabulary is already larger.
void pad_vocab(Vocab& vocab, int32_t n_rows);

// HF-syntax regex of a built-in pre-tokenizer name ("qwen35", "qwen2", "gpt2"), or nullopt.
std::optional<std::string> builtin_pre_regex(std::string_view pre);

// A byte-level vocabulary of exactly `n_tokens` rows for tiny synthetic models that come without
// a tokenizer: 256 byte tokens, BPE merges learned greedily (most frequent pair first) from
// `training_text` (a built-in English/code sample when empty) until the vocabulary is full, then
// the specials <|endoftext|> (bos/pad), <|im_start|>, <|im_end|> (eos). If the text runs out of
// pairs first, the remaining rows are unused padding. Needs n_tokens >= 259. Any text round-trips.
Vocab placeholder_vocab(int32_t n_tokens, std::string_view training_text = {});

}  // namespace mox::text
