#include "models/spm_vocab.h"

#include "core/error.h"
#include "core/log.h"
#include "models/hf_special_tokens.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <set>

namespace mox::models {

using nlohmann::json;
using text::TokenType;

namespace {

constexpr float kAddedScore = -1000.0f;              // what llama.cpp scores an added token
constexpr float kUnusedScore = -10000.0f;            // and a row no piece or added token fills
constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581

// The token rows being assembled. [n_vocab] each
struct Rows {
    explicit Rows(int64_t n) {
        if (n <= 0 || n > std::numeric_limits<int32_t>::max()) fail("vocabulary of {} rows", n);
        for (int64_t i = 0; i < n; ++i) tokens.push_back(fmt::format("[PAD{}]", i));
        scores.assign(tokens.size(), kUnusedScore);
        types.assign(tokens.size(), TokenType::tt_unused);
    }
    int64_t size() const { return static_cast<int64_t>(tokens.size()); }

    // An added token over row `id`; llama.cpp says when it replaces a different piece.
    void add(int64_t id, std::string text, TokenType type) {
        const auto i = static_cast<size_t>(id);
        if (types[i] != TokenType::tt_unused && tokens[i] != text)
            log::warn("tokenizer: replacing token {}: '{}' -> '{}'", id, tokens[i], text);
        tokens[i] = std::move(text);
        scores[i] = kAddedScore;
        types[i] = type;
    }

    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<TokenType> types;
};

void put_pieces(Rows& rows, const text::SpmModel& model, bool drop_beyond) {
    const auto n = static_cast<int64_t>(model.pieces.size());
    if (n > rows.size()) {
        if (!drop_beyond)
            fail("tokenizer.model has {} pieces, more than the model's {} vocabulary rows", n, rows.size());
        log::warn("tokenizer.model: pieces from id {} on are ignored: the model has {} vocabulary rows",
                  rows.size(), rows.size());
    }
    for (int64_t id = 0; id < std::min(n, rows.size()); ++id) {
        const text::SpmPiece& p = model.pieces[static_cast<size_t>(id)];
        const auto i = static_cast<size_t>(id);
        rows.tokens[i] = p.text;
        rows.scores[i] = p.score;
        rows.types[i] = p.type;
    }
}

// An id of a tokenizer file. One past the rows is skipped with a warning (nullopt) when
// `skip_beyond` (llama.cpp's Mixtral rules), else an error (where llama.cpp's Phi-3 rules fail).
std::optional<int64_t> row_id(const json& id, const Rows& rows, const std::string& where, bool skip_beyond) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) fail("{}: {} is not a token id", where, id.dump());
    const int64_t v = id.get<int64_t>();
    if (v < rows.size()) return v;
    if (!skip_beyond) fail("{}: token id {} is beyond the model's {} vocabulary rows", where, v, rows.size());
    log::warn("{}: token id {} ignored: beyond the model's {} vocabulary rows", where, v, rows.size());
    return std::nullopt;
}

// added_tokens.json: {"<text>": id, ...}, user-defined tokens.
void put_added_tokens_json(Rows& rows, const json* added) {
    if (!added) return;
    if (!added->is_object()) fail("added_tokens.json: not an object of token -> id");
    for (const auto& [text, id] : added->items())
        if (const auto row = row_id(id, rows, fmt::format("added_tokens.json['{}']", text), true))
            rows.add(*row, text, TokenType::tt_user_defined);
}

// tokenizer_config.json's added_tokens_decoder: {"<id>": {"content": ..., "special": ...}, ...}.
// `type_of(text, special)` types an entry and may respell its text.
using AddedTypeRule = TokenType (*)(std::string& text, bool special);

void put_added_tokens_decoder(Rows& rows, const json* config, bool skip_beyond, AddedTypeRule type_of) {
    if (!config || !config->is_object() || !config->contains("added_tokens_decoder")) return;
    const json& decoder = config->at("added_tokens_decoder");
    if (!decoder.is_object()) fail("tokenizer_config.json: added_tokens_decoder is not an object");
    for (const auto& [key, data] : decoder.items()) {
        const std::string where = fmt::format("tokenizer_config.json: added_tokens_decoder['{}']", key);
        if (key.empty() || key.size() > 18 ||
            !std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }))
            fail("{}: the key is not a token id", where);
        if (!data.is_object() || !data.contains("content") || !data["content"].is_string())
            fail("{}: no string 'content'", where);
        const auto row = row_id(json(std::stoll(key)), rows, where, skip_beyond);
        if (!row) continue;
        std::string text = data["content"].get<std::string>();
        const TokenType type = type_of(text, truthy(data.value("special", json())));
        rows.add(*row, std::move(text), type);
    }
}

// Writes `s`'s ids and flags into `v` (those text::Vocab holds) and out.extra_keys (the rest).
void put_special_tokens(const HfSpecialTokens& s, text::Vocab& v, ConvertedVocab& out) {
    const auto id = [&](const char* type) -> std::optional<int32_t> {
        const auto it = s.ids.find(type);
        return it == s.ids.end() ? std::nullopt : std::optional<int32_t>(it->second);
    };
    v.bos = id("bos");
    v.eos = id("eos");
    v.unk = id("unk");
    v.pad = id("pad");
    v.eot = id("eot");
    // gguf-py writes these under its own names ("seperator" is its spelling); it has no key for cls.
    for (const auto& [type, key] :
         {std::pair{"sep", "tokenizer.ggml.seperator_token_id"},
          std::pair{"mask", "tokenizer.ggml.mask_token_id"}, std::pair{"eom", "tokenizer.ggml.eom_token_id"}})
        if (const auto i = id(type))
            out.extra_keys.emplace_back(key, gguf::Value::u32(static_cast<uint32_t>(*i)));
    // Absent flags are llama.cpp's SentencePiece defaults: BOS added, EOS not.
    const auto add = [&](const char* type, bool fallback) {
        const auto it = s.add.find(type);
        return it == s.add.end() ? fallback : it->second;
    };
    v.add_bos = add("bos", true);
    v.add_eos = add("eos", false);
    if (s.add.count("sep"))
        out.extra_keys.emplace_back("tokenizer.ggml.add_sep_token", gguf::Value::boolean(s.add.at("sep")));
    // A file without a bos / eos id means llama.cpp's 1 / 2; say so where a flag needs the id.
    if (v.add_bos && !v.bos && v.size() > 1) v.bos = 1;
    if (v.add_eos && !v.eos && v.size() > 2) v.eos = 2;
}

ConvertedVocab finish(Rows rows, const HfTokenizerFiles& files, bool add_space_prefix) {
    ConvertedVocab out;
    text::Vocab& v = out.vocab;
    v.model = "llama";
    v.pre = "default";
    v.tokens = std::move(rows.tokens);
    v.scores = std::move(rows.scores);
    v.token_types = std::move(rows.types);
    v.add_space_prefix = add_space_prefix;
    put_special_tokens(hf_special_tokens(files.tokenizer, files.tokenizer_config, files.config, v.size()), v,
                       out);
    try {
        v.validate();
    } catch (const Error& e) {
        fail("the checkpoint's tokenizer files: {}", e.what());
    }
    return out;
}

// tokenizer_config.json's add_prefix_space, which llama.cpp writes as add_space_prefix for llama.
std::optional<bool> add_prefix_space(const HfTokenizerFiles& files) {
    if (!files.tokenizer_config || !files.tokenizer_config->is_object()) return std::nullopt;
    const json& v = files.tokenizer_config->value("add_prefix_space", json());
    return v.is_boolean() ? std::optional<bool>(v.get<bool>()) : std::nullopt;
}

}  // namespace

bool looks_special(std::string_view t) {
    const auto wrapped = [&](std::string_view open, std::string_view close) {
        return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
    };
    return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
           wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || wrapped("<unused", ">");
}

ConvertedVocab spm_vocab_llama(const text::SpmModel& model, const HfTokenizerFiles& files, int64_t n_vocab) {
    Rows rows(n_vocab);
    put_pieces(rows, model, true);
    put_added_tokens_json(rows, files.added_tokens);
    put_added_tokens_decoder(
        rows, files.tokenizer_config, true, [](std::string& text, bool special) -> TokenType {
            if (special || looks_special(text)) return TokenType::tt_control;
            // A user-defined token is matched in the raw text, where a space is a space.
            for (size_t at = text.find(kSpace); at != std::string::npos; at = text.find(kSpace, at + 1))
                text.replace(at, kSpace.size(), " ");
            return TokenType::tt_user_defined;
        });
    return finish(std::move(rows), files,
                  add_prefix_space(files).value_or(model.add_dummy_prefix.value_or(true)));
}

ConvertedVocab spm_vocab_phi3(const text::SpmModel& model, const HfTokenizerFiles& files, int64_t n_vocab) {
    Rows rows(n_vocab);
    put_pieces(rows, model, false);
    put_added_tokens_json(rows, files.added_tokens);
    const AddedTypeRule type_of = [](std::string&, bool special) {
        return special ? TokenType::tt_control : TokenType::tt_user_defined;
    };
    put_added_tokens_decoder(rows, files.tokenizer_config, false, type_of);
    if (files.tokenizer) {
        const json& added = files.tokenizer->value("added_tokens", json::array());
        if (!added.is_array()) fail("tokenizer.json: added_tokens is not an array");
        for (const json& a : added) {
            if (!a.is_object() || !a.contains("content") || !a["content"].is_string())
                fail("tokenizer.json: an added_tokens entry has no string 'content'");
            const auto row = row_id(a.value("id", json()), rows, "tokenizer.json: added_tokens", false);
            std::string text = a["content"].get<std::string>();
            const TokenType type = type_of(text, truthy(a.value("special", json())));
            rows.add(*row, std::move(text), type);
        }
    }
    return finish(std::move(rows), files, model.add_dummy_prefix.value_or(true));
}

ConvertedVocab spm_vocab_llama_hf(const text::SpmHfJson& hf, const HfTokenizerFiles& files, int64_t n_vocab) {
    // transformers' special tokens of a Llama tokenizer: tokenizer_config.json's <type>_token and
    // additional_special_tokens, with LlamaTokenizerFast's defaults for bos, eos and unk.
    std::set<std::string> specials;
    const json config = files.tokenizer_config && files.tokenizer_config->is_object()
                            ? *files.tokenizer_config
                            : json::object();
    const auto content = [](const json& e) -> std::optional<std::string> {
        if (e.is_string()) return e.get<std::string>();
        if (e.is_object() && e.contains("content") && e["content"].is_string())
            return e["content"].get<std::string>();
        return std::nullopt;
    };
    for (const char* type : {"bos", "eos", "unk", "sep", "pad", "cls", "mask"}) {
        const std::string key = std::string(type) + "_token";
        if (config.contains(key)) {
            if (const auto c = content(config[key])) specials.insert(*c);
        } else if (key == "bos_token" || key == "eos_token" || key == "unk_token") {
            specials.insert(key == "bos_token" ? "<s>" : key == "eos_token" ? "</s>" : "<unk>");
        }
    }
    if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array())
        for (const json& e : config["additional_special_tokens"])
            if (const auto c = content(e)) specials.insert(*c);

    const auto n_base = static_cast<int64_t>(hf.vocab.size());
    std::vector<text::HfAddedToken> added;
    for (const text::HfAddedToken& a : hf.added_tokens)
        if (a.id >= n_base) added.push_back(a);
    std::sort(added.begin(), added.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    for (size_t k = 0; k < added.size(); ++k)
        if (added[k].id != n_base + static_cast<int64_t>(k))
            fail(
                "tokenizer.json: added token '{}' has id {}, expected {}: added ids follow the {} base "
                "tokens",
                added[k].content, added[k].id, n_base + static_cast<int64_t>(k), n_base);
    const int64_t n = n_base + static_cast<int64_t>(added.size());
    if (n > n_vocab) fail("tokenizer.json: {} tokens, more than the model's {} vocabulary rows", n, n_vocab);

    Rows rows(n_vocab);
    // Ids of the special texts, as transformers' get_vocab() gives them (added tokens over the base).
    std::set<int64_t> special_ids;
    for (int64_t id = 0; id < n_base; ++id)
        if (specials.count(hf.vocab[static_cast<size_t>(id)])) special_ids.insert(id);
    for (const text::HfAddedToken& a : hf.added_tokens)
        if (specials.count(a.content)) special_ids.insert(a.id);
    for (int64_t id = 0; id < n_base; ++id) {
        const auto i = static_cast<size_t>(id);
        const std::string& t = hf.vocab[i];
        const bool byte = t.size() == 6 && t.starts_with("<0x") && t.ends_with(">") &&
                          std::isxdigit(static_cast<unsigned char>(t[3])) &&
                          std::isxdigit(static_cast<unsigned char>(t[4]));
        rows.tokens[i] = t;
        rows.scores[i] = hf.scores[i];
        rows.types[i] = byte                    ? TokenType::tt_byte
                        : special_ids.count(id) ? TokenType::tt_control
                                                : TokenType::tt_normal;
    }
    for (const text::HfAddedToken& a : added)
        rows.add(a.id, a.content,
                 specials.count(a.content) ? TokenType::tt_control : TokenType::tt_user_defined);
    return finish(std::move(rows), files, add_prefix_space(files).value_or(hf.add_dummy_prefix));
}

}  // namespace mox::models
