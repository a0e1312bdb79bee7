#include "text/spm_hf_json.h"

#include "core/error.h"

#include <limits>
#include <unordered_map>

namespace mox::text {
namespace {

using nlohmann::json;

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581

std::string type_of(const json& j) {
    return j.is_object() ? j.value("type", std::string()) : std::string();
}

// The String pattern of a Replace step, or "" for any other pattern.
std::string replace_pattern(const json& step) {
    const json p = step.value("pattern", json::object());
    return p.is_object() && p.contains("String") && p["String"].is_string() ? p["String"].get<std::string>()
                                                                            : "";
}

// Normalizer steps LlamaTokenizerFast writes: Prepend("▁") then Replace(" " -> "▁"). Returns whether
// a prefix is prepended.
bool read_normalizer(const json& n, const std::string& name) {
    const json steps = type_of(n) == "Sequence" ? n.value("normalizers", json::array()) : json::array({n});
    bool prepend = false, replace = false;
    for (const json& step : steps) {
        const std::string type = type_of(step);
        if (type == "Prepend" && step.value("prepend", std::string()) == kSpace) {
            prepend = true;
        } else if (type == "Replace" && replace_pattern(step) == " " &&
                   step.value("content", std::string()) == kSpace) {
            replace = true;
        } else {
            fail(
                "{}: normalizer step '{}' is not Prepend \u2581 or Replace ' ' -> \u2581, the steps a "
                "SentencePiece vocabulary reproduces",
                name, type);
        }
    }
    if (!replace)
        fail("{}: the normalizer does not spell spaces \u2581 (no Replace \" \" -> \"\u2581\")", name);
    return prepend;
}

// The Metaspace pre-tokenizer newer transformers write instead of the normalizer; only without a
// prefix (prepend_scheme never) does it spell text as SentencePiece does. Returns false (no prefix).
bool read_metaspace(const json& p, const std::string& name) {
    if (type_of(p) != "Metaspace")
        fail("{}: pre-tokenizer '{}' is not one a SentencePiece vocabulary reproduces (Metaspace or none)",
             name, type_of(p));
    if (p.value("replacement", std::string()) != kSpace)
        fail("{}: the Metaspace replacement is not \u2581", name);
    if (p.value("split", false))
        fail("{}: a Metaspace that splits words (split: true) is not reproduced by SentencePiece merging",
             name);
    const bool prepend = p.contains("prepend_scheme") ? p.value("prepend_scheme", std::string()) != "never"
                                                      : p.value("add_prefix_space", true);
    // HF prepends the U+2581 only to text that does not start with one; SentencePiece, llama.cpp
    // and mox prepend it always, so " a" would tokenize differently.
    if (prepend)
        fail(
            "{}: the Metaspace pre-tokenizer prepends \u2581 only to text that does not start with a space, "
            "which a SentencePiece vocabulary does not reproduce; convert from tokenizer.model",
            name);
    return false;
}

std::pair<std::string, std::string> merge_pair(const json& m, size_t rank, const std::string& name) {
    if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space != std::string::npos && space > 0 && space + 1 < s.size() &&
            s.find(' ', space + 1) == std::string::npos)
            return {s.substr(0, space), s.substr(space + 1)};
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        return {m[0].get<std::string>(), m[1].get<std::string>()};
    }
    fail("{}: merge {} is not two tokens", name, rank);
}

}  // namespace

bool is_spm_hf_json(const json& tokenizer) {
    if (!tokenizer.is_object() || !tokenizer.contains("model")) return false;
    const json& model = tokenizer["model"];
    return type_of(model) == "BPE" && model.contains("byte_fallback") &&
           model["byte_fallback"].is_boolean() && model["byte_fallback"].get<bool>();
}

namespace {

SpmHfJson read(const json& tokenizer, const std::string& name) {
    const json& model = tokenizer["model"];
    SpmHfJson out;

    const json normalizer = tokenizer.value("normalizer", json());
    const json pre = tokenizer.value("pre_tokenizer", json());
    if (!normalizer.is_null() && !pre.is_null())
        fail("{}: both a normalizer and a pre-tokenizer; a SentencePiece vocabulary has one space rule",
             name);
    if (!normalizer.is_null())
        out.add_dummy_prefix = read_normalizer(normalizer, name);
    else if (!pre.is_null())
        out.add_dummy_prefix = read_metaspace(pre, name);
    else
        fail("{}: neither a normalizer nor a Metaspace pre-tokenizer spells spaces \u2581", name);

    const json vocab = model.value("vocab", json());
    if (!vocab.is_object() || vocab.empty()) fail("{}: model.vocab is not a non-empty object", name);
    if (vocab.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        fail("{}: model.vocab has {} tokens", name, vocab.size());
    out.vocab.resize(vocab.size());
    std::vector<bool> seen(vocab.size(), false);
    std::unordered_map<std::string, int32_t> id_of;
    for (const auto& [token, id] : vocab.items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
            id.get<int64_t>() >= static_cast<int64_t>(vocab.size()))
            fail("{}: model.vocab['{}'] is not an id in 0..{}", name, token, vocab.size() - 1);
        const auto i = static_cast<size_t>(id.get<int64_t>());
        if (seen[i]) fail("{}: model.vocab gives id {} twice", name, i);
        seen[i] = true;
        out.vocab[i] = token;
        id_of.emplace(token, static_cast<int32_t>(i));
    }

    // Rank r scores -r: SentencePiece merges the pair whose result scores highest, HF BPE the pair of
    // lowest rank, so the first merge forming a token decides its priority.
    const json merges = model.value("merges", json::array());
    if (!merges.is_array()) fail("{}: model.merges is not an array", name);
    const float unmerged = -static_cast<float>(merges.size());
    out.scores.assign(out.vocab.size(), unmerged);
    std::vector<bool> scored(out.vocab.size(), false);
    for (size_t r = 0; r < merges.size(); ++r) {
        const auto [left, right] = merge_pair(merges[r], r, name);
        if (!id_of.count(left) || !id_of.count(right))
            fail("{}: merge {} ('{} {}') joins a token the vocabulary lacks", name, r, left, right);
        const auto it = id_of.find(left + right);
        if (it == id_of.end())
            fail("{}: merge {} ('{} {}') forms a token the vocabulary lacks", name, r, left, right);
        const auto i = static_cast<size_t>(it->second);
        if (!scored[i]) out.scores[i] = -static_cast<float>(r);
        scored[i] = true;
    }

    const json added = tokenizer.value("added_tokens", json::array());
    if (!added.is_array()) fail("{}: added_tokens is not an array", name);
    for (const json& a : added) {
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
            !a["content"].is_string())
            fail("{}: an added_tokens entry lacks an integer id or a string content", name);
        const int64_t id = a["id"].get<int64_t>();
        if (id < 0 || id > std::numeric_limits<int32_t>::max())
            fail("{}: added token id {} is out of range", name, id);
        out.added_tokens.push_back({.id = static_cast<int32_t>(id),
                                    .content = a["content"].get<std::string>(),
                                    .special = a.value("special", false)});
    }
    return out;
}

}  // namespace

SpmHfJson spm_from_hf_json(const json& tokenizer, const std::string& name) {
    if (!is_spm_hf_json(tokenizer)) fail("{}: not a BPE model with byte_fallback", name);
    // nlohmann's typed accessors throw their own exceptions on a value of the wrong type.
    try {
        return read(tokenizer, name);
    } catch (const json::exception& e) {
        fail("{}: {}", name, e.what());
    }
}

}  // namespace mox::text
