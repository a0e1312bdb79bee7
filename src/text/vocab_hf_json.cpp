// HF tokenizers' tokenizer.json <-> Vocab, for the byte-level BPE subset mox tokenizes.
#include "core/error.h"
#include "text/vocab_io.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <sstream>

namespace mox::text {
namespace {

using nlohmann::json;

// The ByteLevel pre-tokenizer's own regex (use_regex: true) is GPT-2's.
constexpr std::string_view kByteLevelPre = "gpt2";

const json& member(const json& j, const char* key, const std::string& where, const std::string& name) {
    if (!j.is_object() || !j.contains(key)) fail("{}: {} has no '{}'", name, where, key);
    return j.at(key);
}

bool flag(const json& j, const char* key) {
    return j.is_object() && j.contains(key) && j.at(key).is_boolean() && j.at(key).get<bool>();
}

void read_normalizer(const json& n, Vocab& v, const std::string& name) {
    if (n.is_null()) return;
    const std::string type = n.value("type", "");
    if (type == "NFC") {
        v.normalizer = Normalizer::nfc;
    } else if (type == "Sequence" && n.value("normalizers", json::array()).empty()) {
        // an empty sequence does nothing
    } else {
        fail("{}: normalizer '{}' is not supported (only NFC or none)", name, type);
    }
}

// A ByteLevel step must not add a prefix space; returns its use_regex.
bool read_byte_level(const json& p, const std::string& name) {
    if (flag(p, "add_prefix_space")) fail("{}: ByteLevel with add_prefix_space is not supported", name);
    return !p.contains("use_regex") || flag(p, "use_regex");
}

void read_pre_tokenizer(const json& p, Vocab& v, const std::string& name) {
    if (p.is_null()) fail("{}: a byte-level BPE needs a ByteLevel pre-tokenizer; this one has none", name);
    const std::string type = p.value("type", "");
    if (type == "ByteLevel") {
        if (!read_byte_level(p, name))
            fail("{}: ByteLevel without a regex splits nothing; not supported", name);
        v.pre = std::string(kByteLevelPre);
        return;
    }
    const json steps = type == "Sequence" ? p.value("pretokenizers", json::array()) : json::array();
    if (steps.size() != 2 || steps[0].value("type", "") != "Split" ||
        steps[1].value("type", "") != "ByteLevel")
        fail("{}: pre-tokenizer must be ByteLevel or Sequence[Split, ByteLevel]", name);
    const json& split = steps[0];
    if (split.value("behavior", "") != "Isolated" || flag(split, "invert"))
        fail("{}: the Split pre-tokenizer must have behavior Isolated and invert false", name);
    const json& pattern = member(split, "pattern", "the Split pre-tokenizer", name);
    if (!pattern.contains("Regex")) fail("{}: the Split pre-tokenizer's pattern must be a Regex", name);
    if (read_byte_level(steps[1], name)) fail("{}: ByteLevel after Split must have use_regex false", name);
    v.pre_regex = pattern.at("Regex").get<std::string>();
    v.pre = "hf-regex";
    for (const char* known : {"qwen35", "qwen2", "gpt2"}) {
        if (builtin_pre_regex(known) == v.pre_regex) {
            v.pre = known;
            v.pre_regex.clear();
            break;
        }
    }
}

// TemplateProcessing's "single" template: [SpecialToken]? Sequence A [SpecialToken]?.
void read_post_processor(const json& p, Vocab& v, const std::map<std::string, int32_t>& added,
                         const std::string& name) {
    if (p.is_null()) return;
    const std::string type = p.value("type", "");
    if (type == "ByteLevel") return;  // only adjusts offsets
    if (type == "Sequence") {
        for (const json& step : p.value("processors", json::array()))
            read_post_processor(step, v, added, name);
        return;
    }
    if (type != "TemplateProcessing") fail("{}: post-processor '{}' is not supported", name, type);
    const json single = p.value("single", json::array());
    bool seen_sequence = false;
    for (const json& item : single) {
        if (item.contains("Sequence")) {
            seen_sequence = true;
            continue;
        }
        if (!item.contains("SpecialToken"))
            fail("{}: unexpected item in the TemplateProcessing template", name);
        const std::string token = item.at("SpecialToken").value("id", "");
        const auto it = added.find(token);
        if (it == added.end())
            fail("{}: the post-processor adds '{}', which is not an added token", name, token);
        if (!seen_sequence) {
            v.bos = it->second;
            v.add_bos = true;
        } else {
            v.eos = it->second;
            v.add_eos = true;
        }
    }
}

}  // namespace

Vocab vocab_from_hf_json(std::string_view json_text, const std::string& name) {
    json j;
    try {
        j = json::parse(json_text);
    } catch (const json::exception& e) {
        fail("{}: not valid JSON: {}", name, e.what());
    }
    try {
        Vocab v;
        v.model = "gpt2";
        const json& model = member(j, "model", "the file", name);
        if (model.value("type", "BPE") != "BPE")
            fail("{}: model type '{}' is not BPE", name, model.value("type", ""));
        if (flag(model, "byte_fallback")) fail("{}: BPE byte_fallback is not supported", name);
        for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
            if (model.contains(key) && model.at(key).is_string() && !model.at(key).get<std::string>().empty())
                fail("{}: BPE {} is not supported", name, key);
        }
        if (model.contains("dropout") && !model.at("dropout").is_null())
            fail("{}: BPE dropout is not supported", name);
        v.ignore_merges = flag(model, "ignore_merges");

        // Ids may leave gaps; a gap becomes an unused row.
        const json& vocab = member(model, "vocab", "the model", name);
        const json added_tokens = j.value("added_tokens", json::array());
        int64_t n = 0;
        for (const auto& [token, id] : vocab.items()) n = std::max<int64_t>(n, id.get<int64_t>() + 1);
        for (const json& a : added_tokens) n = std::max<int64_t>(n, a.at("id").get<int64_t>() + 1);
        if (n <= 0 || n > (int64_t{1} << 30)) fail("{}: implausible vocabulary size {}", name, n);
        v.tokens.assign(static_cast<size_t>(n), std::string());
        v.token_types.assign(static_cast<size_t>(n), TokenType::tt_unused);
        for (const auto& [token, id_json] : vocab.items()) {
            const auto id = id_json.get<int64_t>();
            if (id < 0) fail("{}: token '{}' has negative id {}", name, token, id);
            v.tokens[static_cast<size_t>(id)] = token;
            v.token_types[static_cast<size_t>(id)] = TokenType::tt_normal;
        }
        std::map<std::string, int32_t> added;
        for (const json& a : added_tokens) {
            const auto id = a.at("id").get<int64_t>();
            const auto content = a.at("content").get<std::string>();
            if (id < 0) fail("{}: added token '{}' has negative id {}", name, content, id);
            for (const char* key : {"lstrip", "rstrip", "single_word"}) {
                if (flag(a, key))
                    fail("{}: added token '{}' uses {}, which is not supported", name, content, key);
            }
            v.tokens[static_cast<size_t>(id)] = content;
            v.token_types[static_cast<size_t>(id)] =
                flag(a, "special") ? TokenType::tt_control : TokenType::tt_user_defined;
            added[content] = static_cast<int32_t>(id);
        }
        for (size_t i = 0; i < v.tokens.size(); ++i) {
            if (v.token_types[i] == TokenType::tt_unused) v.tokens[i] = "[PAD" + std::to_string(i) + "]";
        }

        // Merges: "a b" strings (older files) or [a, b] pairs (tokenizers >= 0.20).
        const json merges = model.value("merges", json::array());
        v.merges.reserve(merges.size());
        for (const json& m : merges) {
            if (m.is_string()) {
                v.merges.push_back(m.get<std::string>());
            } else if (m.is_array() && m.size() == 2) {
                v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
            } else {
                fail("{}: merge {} is neither a string nor a pair", name, v.merges.size());
            }
        }
        if (model.contains("unk_token") && model.at("unk_token").is_string()) {
            const auto unk = model.at("unk_token").get<std::string>();
            if (vocab.contains(unk)) v.unk = vocab.at(unk).get<int32_t>();
        }
        read_normalizer(j.value("normalizer", json()), v, name);
        read_pre_tokenizer(j.value("pre_tokenizer", json()), v, name);
        read_post_processor(j.value("post_processor", json()), v, added, name);
        v.validate();
        return v;
    } catch (const json::exception& e) {
        fail("{}: unexpected structure: {}", name, e.what());
    }
}

Vocab vocab_from_hf_json_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open", path);
    std::ostringstream text;
    text << in.rdbuf();
    return vocab_from_hf_json(text.str(), path);
}

std::string vocab_to_hf_json(const Vocab& vocab) {
    vocab.validate();
    if (vocab.sentencepiece())
        fail("tokenizer.json: only byte-level BPE vocabularies are written, not '{}'", vocab.model);
    json added = json::array();
    json model_vocab = json::object();
    for (int32_t i = 0; i < vocab.size(); ++i) {
        const std::string& token = vocab.tokens[static_cast<size_t>(i)];
        const TokenType type = vocab.type(i);
        if (type == TokenType::tt_control || type == TokenType::tt_user_defined) {
            // HF keeps an added token's id only when the model's vocab has it (otherwise it
            // renumbers it after the vocab), so it goes there too. Merges never produce it.
            if (model_vocab.contains(token))
                fail("tokenizer.json: added token {} ('{}') is also spelled like a normal token", i, token);
            model_vocab[token] = i;
            added.push_back({{"id", i},
                             {"content", token},
                             {"single_word", false},
                             {"lstrip", false},
                             {"rstrip", false},
                             {"normalized", false},
                             {"special", type == TokenType::tt_control}});
        } else if (!token.empty() && !model_vocab.contains(token)) {
            model_vocab[token] = i;
        }
    }
    json merges = json::array();
    for (const std::string& m : vocab.merges) {
        const size_t space = m.find(' ');
        merges.push_back(json::array({m.substr(0, space), m.substr(space + 1)}));
    }
    const json byte_level = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
    json out = {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", added},
        {"normalizer", vocab.normalizer == Normalizer::nfc ? json{{"type", "NFC"}} : json()},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers", json::array({{{"type", "Split"},
                                          {"pattern", {{"Regex", vocab.effective_pre_regex()}}},
                                          {"behavior", "Isolated"},
                                          {"invert", false}},
                                         byte_level})}}},
        {"post_processor", nullptr},
        {"decoder", byte_level},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", vocab.unk ? json(vocab.tokens[static_cast<size_t>(*vocab.unk)]) : json()},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", vocab.ignore_merges},
          {"vocab", model_vocab},
          {"merges", merges}}},
    };
    if (vocab.add_bos || vocab.add_eos) {
        json single = json::array();
        if (vocab.add_bos)
            single.push_back(
                {{"SpecialToken", {{"id", vocab.tokens[static_cast<size_t>(*vocab.bos)]}, {"type_id", 0}}}});
        single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
        if (vocab.add_eos)
            single.push_back(
                {{"SpecialToken", {{"id", vocab.tokens[static_cast<size_t>(*vocab.eos)]}, {"type_id", 0}}}});
        json special_tokens = json::object();
        for (const auto& id :
             {vocab.add_bos ? vocab.bos : std::nullopt, vocab.add_eos ? vocab.eos : std::nullopt}) {
            if (!id) continue;
            const std::string& t = vocab.tokens[static_cast<size_t>(*id)];
            special_tokens[t] = {{"id", t}, {"ids", json::array({*id})}, {"tokens", json::array({t})}};
        }
        out["post_processor"] = {{"type", "TemplateProcessing"},
                                 {"single", single},
                                 {"pair", single},
                                 {"special_tokens", special_tokens}};
    }
    return out.dump();
}

}  // namespace mox::text
