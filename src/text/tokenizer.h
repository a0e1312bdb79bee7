// Text <-> token ids for byte-level BPE vocabularies (Qwen3.5/3.6 and other GPT-2-style ones) and
// SentencePiece BPE vocabularies (tokenizer.ggml.model "llama": Mixtral, Phi-3.5-MoE).
//
// encode: (1) added tokens (control / user-defined; also unknown-typed ones and the end markers of
// vocab.h, which llama.cpp treats as control) are cut out of the raw text, leftmost-longest first.
// Byte-level BPE: (2) each remaining span is split into well-formed UTF-8 runs and ill-formed
// bytes; (3) runs are normalized (NFC when the vocabulary asks) and pre-tokenized by the regex;
// (4) each piece is BPE-merged. An ill-formed byte is a piece of its own and becomes its byte
// token, so every byte string round-trips: decode(encode(x)) == x.
// SentencePiece: each remaining span gets a leading space when the vocabulary's add_space_prefix
// is set and the span starts the text or follows an added token, its spaces become U+2581, and
// it is merged by score as a whole (spm.h), characters without a token falling back to byte
// tokens. decode(encode(x)) == x for valid UTF-8 x without added tokens and without BOS.
#pragma once

#include "text/bpe.h"
#include "text/pretokenizer.h"
#include "text/spm.h"
#include "text/vocab.h"

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mox::text {

struct EncodeOptions {
    bool parse_special = true;  // match control tokens (<|im_start|>) in the text
    bool add_special = true;    // prepend bos / append eos when the vocabulary says so (Qwen3.5: never)
};

struct DecodeOptions {
    bool skip_special = false;  // drop control tokens (and what is_special() counts with them)
    bool lossy = false;         // replace ill-formed UTF-8 by U+FFFD (as HF's decode does)
};

class Tokenizer {
  public:
    // Validates `vocab` and builds the lookup structures; throws mox::Error on a bad vocabulary.
    explicit Tokenizer(Vocab vocab);

    std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;

    // Concatenated token bytes (exact unless options.lossy). Throws mox::Error for an id outside
    // the vocabulary. Unused (padding) tokens decode to nothing. With add_space_prefix
    // (SentencePiece), the first id's piece loses one leading space, as llama.cpp's detokenize
    // does: decode(encode(x, no BOS)) == x, and a leading BOS keeps the space of what follows.
    std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;
    // The bytes one token stands for (may be part of a UTF-8 character; SentencePiece: U+2581 as
    // a space, so a streamed reply keeps the space that starts a word). Throws for a bad id.
    const std::string& token_piece(int32_t id) const;
    // Control and unknown-typed tokens and the end markers (vocab.h's is_end_marker): what
    // skip_special drops.
    bool is_special(int32_t id) const;

    const Vocab& vocab() const { return vocab_; }
    int32_t n_tokens() const { return vocab_.size(); }
    bool is_end_of_generation(int32_t id) const;
    const std::vector<int32_t>& end_of_generation() const { return eog_; }

  private:
    struct Added {
        std::string text;
        int32_t id;
        bool control;  // only matched when parse_special is on
        bool rstrip;   // swallows the whitespace after it
    };

    void encode_span(std::string_view span, std::vector<int32_t>& out) const;
    void encode_valid_run(std::string_view run, std::vector<int32_t>& out) const;
    // The longest added token that matches at text[pos], or nullptr.
    const Added* match_added(std::string_view text, size_t pos, bool parse_special) const;
    void check_id(int32_t id) const;

    Vocab vocab_;
    // One of the two models: the regex and BPE for byte-level vocabularies, SpmModel otherwise.
    std::unique_ptr<PreTokenizer> pre_;
    std::unique_ptr<BpeModel> bpe_;
    std::unique_ptr<SpmModel> spm_;
    std::vector<std::string> pieces_;  // [n_vocab] raw bytes per token
    std::vector<bool> special_;        // [n_vocab] is_special
    std::vector<Added> added_;         // sorted by first byte, then longest first
    std::array<bool, 256> added_first_byte_{};
    std::vector<int32_t> eog_;
};

// Incremental decoding for streamed generation: returns text only up to the last whole UTF-8
// character, holding back a character whose bytes are split across tokens. Output is always
// well-formed UTF-8 (ill-formed bytes become U+FFFD).
class DecodeStream {
  public:
    explicit DecodeStream(const Tokenizer& tokenizer, DecodeOptions options = {});
    std::string push(int32_t id);
    std::string finish();  // the held-back bytes (U+FFFD if they never completed)

  private:
    const Tokenizer& tokenizer_;
    DecodeOptions options_;
    std::string pending_;
};

}  // namespace mox::text
