// A SentencePiece model file (tokenizer.model, a serialized ModelProto) read through the
// sentencepiece library: its pieces in id order with their scores and token types, as `mox convert`
// turns them into a GGUF vocabulary (tokenizer.ggml.model "llama").
#pragma once

#include "text/vocab.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mox::text {

struct SpmPiece {
    std::string text;  // the piece as the model spells it (U+2581 for a space, "<0xAB>" for bytes)
    float score = 0.0f;
    // unknown, control, unused and byte pieces as the library reports them (in that precedence, as
    // llama.cpp's converter asks); every other piece, user-defined ones included, is normal.
    TokenType type = TokenType::tt_normal;
};

struct SpmModel {
    std::vector<SpmPiece> pieces;  // [n_pieces] by id
    // Whether the normalizer puts a U+2581 before the text (normalizer_spec.add_dummy_prefix), told
    // from how the model encodes one letter; nullopt when that encoding does not show it.
    std::optional<bool> add_dummy_prefix;
};

// `bytes` is the content of a model file; `name` appears in error messages. Anything the library
// refuses to load (not a ModelProto, an inconsistent one) is a mox::Error naming `name`.
SpmModel spm_model_from_bytes(std::string_view bytes, const std::string& name);
SpmModel read_spm_model(const std::string& path);

}  // namespace mox::text
