// vocab_from_gguf(): the tokenizer.ggml.* metadata of a GGUF file -> Vocab.
#include "core/error.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "text/vocab_io.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <optional>

namespace mox::text {
namespace {

// The array at `key`; `elem` (when given) is the element type it must have.
const gguf::Array& array_of(const gguf::File& file, std::string_view key, std::optional<gguf::ValueType> elem,
                            bool required) {
    static const gguf::Array kEmpty;
    const gguf::Value* value = file.find(key);
    if (!value) {
        if (required) fail("{}: missing key {}", file.path(), key);
        return kEmpty;
    }
    const gguf::Array* array = value->as_array();
    if (!array)
        fail("{}: key {} is a {}, expected an array", file.path(), key, gguf::value_type_name(value->type()));
    if (elem && !array->items.empty() && array->elem_type != *elem)
        fail("{}: key {} is an array of {}, expected {}", file.path(), key,
             gguf::value_type_name(array->elem_type), gguf::value_type_name(*elem));
    return *array;
}

std::vector<std::string> strings_of(const gguf::File& file, std::string_view key, bool required) {
    const gguf::Array& array = array_of(file, key, gguf::ValueType::string, required);
    std::vector<std::string> out;
    out.reserve(array.items.size());
    for (const gguf::Value& item : array.items) {
        const std::string* s = item.as_string();
        if (!s) fail("{}: key {} item {} is not a string", file.path(), key, out.size());
        out.push_back(*s);
    }
    return out;
}

std::optional<int32_t> token_id(const gguf::File& file, std::string_view key) {
    const gguf::Value* value = file.find(key);
    if (!value) return std::nullopt;
    const auto id = value->as_int();
    if (!id || *id < 0 || *id > INT32_MAX)
        fail("{}: key {} is not a token id ({})", file.path(), key, value->to_display());
    return static_cast<int32_t>(*id);
}

// tokenizer.ggml.scores: f32 (or, as llama.cpp also reads, i32) per token; absent: all 0.
std::vector<float> scores_of(const gguf::File& file, size_t n_tokens) {
    const gguf::Array& array = array_of(file, "tokenizer.ggml.scores", std::nullopt, false);
    if (array.items.empty()) return std::vector<float>(n_tokens, 0.0f);
    if (array.elem_type != gguf::ValueType::f32 && array.elem_type != gguf::ValueType::i32)
        fail("{}: key tokenizer.ggml.scores is an array of {}, expected f32", file.path(),
             gguf::value_type_name(array.elem_type));
    if (array.items.size() != n_tokens)
        fail("{}: tokenizer.ggml.scores has {} entries for {} tokens", file.path(), array.items.size(),
             n_tokens);
    std::vector<float> out;
    out.reserve(n_tokens);
    for (const gguf::Value& item : array.items) out.push_back(static_cast<float>(*item.as_float()));
    return out;
}

// llama.cpp gives the added tokens of a file whose general.name says Phi-3 the RSTRIP attribute
// (Phi-3's HF tokenizer strips the whitespace after them), except <unk>, <s> and <|endoftext|>;
// </s> gets it too.
std::vector<int32_t> phi3_rstrip(const gguf::File& file, const Vocab& v) {
    std::string name = file.get_string_or("general.name", "");
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name.find("phi-3") == std::string::npos && name.find("phi3") == std::string::npos) return {};
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < v.size(); ++i) {
        const std::string& t = v.tokens[static_cast<size_t>(i)];
        const TokenType type = v.type(i);
        const bool added = type == TokenType::tt_control || type == TokenType::tt_user_defined ||
                           type == TokenType::tt_unknown || is_end_marker(t);
        if ((added || t == "</s>") && t != "<unk>" && t != "<s>" && t != "<|endoftext|>") ids.push_back(i);
    }
    return ids;
}

}  // namespace

Vocab vocab_from_gguf(const gguf::File& file) {
    Vocab v;
    v.model = file.get_string("tokenizer.ggml.model");
    v.pre = file.get_string_or("tokenizer.ggml.pre", "default");
    // The HF tokenizers of the Qwen families normalize to NFC; llama.cpp skips that step, which
    // only matters for text that is not already NFC.
    if (v.pre == "qwen2" || v.pre == "qwen35") v.normalizer = Normalizer::nfc;
    const bool spm = v.sentencepiece();

    v.tokens = strings_of(file, "tokenizer.ggml.tokens", true);
    const gguf::Array& types = array_of(file, "tokenizer.ggml.token_type", std::nullopt, false);
    if (types.items.empty()) {
        v.token_types.assign(v.tokens.size(), TokenType::tt_normal);
    } else {
        if (types.items.size() != v.tokens.size())
            fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", file.path(),
                 types.items.size(), v.tokens.size());
        v.token_types.reserve(types.items.size());
        for (const gguf::Value& t : types.items) {
            const auto type = t.as_int();
            if (!type || *type < 0 || *type > static_cast<int64_t>(TokenType::tt_byte))
                fail("{}: tokenizer.ggml.token_type[{}] = {} is not a token type", file.path(),
                     v.token_types.size(), t.to_display());
            v.token_types.push_back(static_cast<TokenType>(*type));
        }
    }
    v.merges = strings_of(file, "tokenizer.ggml.merges", false);
    if (spm) v.scores = scores_of(file, v.tokens.size());
    // A SentencePiece vocabulary's special ids default to llama.cpp's: <unk> 0, <s> 1, </s> 2.
    const auto id_or = [&](const char* key, int32_t fallback) -> std::optional<int32_t> {
        if (const auto id = token_id(file, key)) return id;
        if (spm && fallback < v.size()) return fallback;
        return std::nullopt;
    };
    v.bos = id_or("tokenizer.ggml.bos_token_id", 1);
    v.eos = id_or("tokenizer.ggml.eos_token_id", 2);
    v.eot = token_id(file, "tokenizer.ggml.eot_token_id");
    v.pad = token_id(file, "tokenizer.ggml.padding_token_id");
    v.unk = id_or("tokenizer.ggml.unknown_token_id", 0);
    // Absent means no for byte-level BPE: prepending a BOS the model never saw in training is the
    // worse mistake. SentencePiece vocabularies default to BOS and the space prefix (llama.cpp).
    v.add_bos = file.get_bool_or("tokenizer.ggml.add_bos_token", spm);
    v.add_eos = file.get_bool_or("tokenizer.ggml.add_eos_token", false);
    if (spm) {
        v.add_space_prefix = file.get_bool_or("tokenizer.ggml.add_space_prefix", true);
        v.rstrip = phi3_rstrip(file, v);
    }
    v.chat_template = file.get_string_or("tokenizer.chat_template", "");
    try {
        v.validate();
    } catch (const Error& e) {
        fail("{}: {}", file.path(), e.what());
    }
    return v;
}

void vocab_to_gguf(const Vocab& vocab, gguf::Writer& writer) {
    vocab.validate();
    using gguf::Value;
    writer.set("tokenizer.ggml.model", Value::string(vocab.model));
    writer.set("tokenizer.ggml.pre", Value::string(vocab.pre));
    writer.set("tokenizer.ggml.tokens", Value::string_array(vocab.tokens));
    std::vector<int32_t> types;
    types.reserve(vocab.token_types.size());
    for (TokenType t : vocab.token_types) types.push_back(static_cast<int32_t>(t));
    writer.set("tokenizer.ggml.token_type", Value::i32_array(types));
    if (!vocab.merges.empty()) writer.set("tokenizer.ggml.merges", Value::string_array(vocab.merges));
    if (vocab.sentencepiece()) {
        writer.set("tokenizer.ggml.scores", Value::f32_array(vocab.scores));
        writer.set("tokenizer.ggml.add_space_prefix", Value::boolean(vocab.add_space_prefix));
    }
    const auto set_id = [&](const char* key, const std::optional<int32_t>& id) {
        if (id) writer.set(key, Value::u32(static_cast<uint32_t>(*id)));
    };
    set_id("tokenizer.ggml.bos_token_id", vocab.bos);
    set_id("tokenizer.ggml.eos_token_id", vocab.eos);
    set_id("tokenizer.ggml.eot_token_id", vocab.eot);
    set_id("tokenizer.ggml.padding_token_id", vocab.pad);
    set_id("tokenizer.ggml.unknown_token_id", vocab.unk);
    writer.set("tokenizer.ggml.add_bos_token", Value::boolean(vocab.add_bos));
    writer.set("tokenizer.ggml.add_eos_token", Value::boolean(vocab.add_eos));
    if (!vocab.chat_template.empty())
        writer.set("tokenizer.chat_template", Value::string(vocab.chat_template));
}

}  // namespace mox::text
