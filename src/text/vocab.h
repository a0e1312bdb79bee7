// A vocabulary as GGUF stores it (tokenizer.ggml.*) and as the Tokenizer consumes it: byte-level
// BPE (model "gpt2": Qwen) or SentencePiece BPE (model "llama": Mixtral, Phi-3.5-MoE). Loaders:
// vocab_gguf.cpp (GGUF metadata, both kinds), vocab_hf_json.cpp (HF tokenizer.json, byte-level
// BPE); placeholder_vocab.cpp builds a byte-level one for tiny synthetic models.
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
    tt_byte = 6,          // SentencePiece <0xAB> tokens (byte fallback); not used by byte-level BPE
};

enum class Normalizer { none, nfc };

struct Vocab {
    std::string model = "gpt2";  // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
    std::string pre = "qwen35";  // tokenizer.ggml.pre; selects a built-in pre-tokenizer regex (gpt2 only)
    // Pre-tokenizer regex in HF tokenizers (Oniguruma) syntax. Empty: the built-in one for `pre`.
    std::string pre_regex;
    Normalizer normalizer = Normalizer::none;

    // [n_vocab] gpt2: normal tokens are spelled in the byte-level mapping (byte_level.h). llama:
    // normal tokens are UTF-8 with U+2581 for a space, byte tokens are "<0xAB>". Control and
    // user-defined tokens are their literal UTF-8 text in both.
    std::vector<std::string> tokens;
    std::vector<TokenType> token_types;  // [n_vocab]
    std::vector<std::string> merges;     // gpt2: "left right" in rank order (rank 0 first)
    bool ignore_merges = false;          // gpt2: a piece that is itself a token skips the merges (HF option)
    // llama: [n_vocab] merge priority, higher first (SentencePiece's piece scores)
    std::vector<float> scores;
    // llama: a space goes before the text and after every added token (SentencePiece's dummy
    // prefix, as llama.cpp applies it); decoding drops it from the first token.
    bool add_space_prefix = false;
    // Added tokens that swallow the whitespace after them in the text (llama.cpp's RSTRIP
    // attribute, which it gives the specials of files named Phi-3). Sorted ids.
    std::vector<int32_t> rstrip;

    std::optional<int32_t> bos, eos, eot, pad, unk;
    bool add_bos = false;  // prepend bos when encoding with add_special (never for Qwen3.5; llama files: yes)
    bool add_eos = false;
    std::string chat_template;

    int32_t size() const { return static_cast<int32_t>(tokens.size()); }
    TokenType type(int32_t id) const { return token_types[static_cast<size_t>(id)]; }
    bool sentencepiece() const { return model == "llama"; }

    // Linear search by spelling; for tests and setup, not for hot paths.
    std::optional<int32_t> find(std::string_view token) const;

    // Ids that end generation: eos, eot, and the tokens whose text is one of the well-known
    // end-of-turn / end-of-document markers (is_end_marker), whatever their type, as llama.cpp
    // marks them. Sorted, unique.
    std::vector<int32_t> end_of_generation() const;

    // Throws mox::Error naming the first inconsistency (sizes, id ranges, empty tokens,
    // duplicates among matchable tokens, malformed merges, scores, byte tokens).
    void validate() const;

    // The pre-tokenizer regex in HF syntax: pre_regex, or the built-in one for `pre` (throws for an
    // unknown name).
    std::string effective_pre_regex() const;
};

// Whether `text` is an end-of-turn / end-of-document marker: <|endoftext|>, <|im_end|>,
// <|fim_pad|>, <|repo_name|>, <|file_sep|>, <|eot_id|>, <|eom_id|>, <|end|>, <|end_of_text|>,
// <end_of_turn>, </s>. llama.cpp treats such a token as a control token even when the file
// types it otherwise.
bool is_end_marker(std::string_view text);

// Appends unused rows "[PAD<id>]" until the vocabulary has n_rows tokens, as GGUF files pad the
// token list to the embedding's row count (Qwen3.5: 248320 rows for 248077 tokens; a
// SentencePiece vocabulary's padding rows get score 0). Throws mox::Error if the vocabulary is
// already larger.
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
