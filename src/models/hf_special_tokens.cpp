#include "models/hf_special_tokens.h"

#include "core/error.h"
#include "core/log.h"

#include <algorithm>
#include <vector>

namespace mox::models {
namespace {

using nlohmann::json;

const json& get(const json& obj, const char* key) {
    static const json kNull;
    return obj.is_object() && obj.contains(key) ? obj.at(key) : kNull;
}

// The id of a post-processor entry's SpecialToken ({"SpecialToken": {"id": "<s>"}}), or null.
json special_token_id(const json& entry) {
    return get(get(entry, "SpecialToken"), "id");
}

class Finder {
public:
    explicit Finder(int64_t n_vocab) : n_vocab_(n_vocab) {}

    void set_id(const std::string& type, const json& id) {
        if (!id.is_number_integer()) return;
        const int64_t v = id.get<int64_t>();
        if (v < 0) fail("special token {}: invalid id {}", type, v);
        if (v >= n_vocab_) {
            log::warn("special token {}: id {} is outside the vocabulary of {} tokens; skipped", type, v,
                      n_vocab_);
            return;
        }
        out.ids.emplace(type, static_cast<int32_t>(v));  // the first source wins
    }

    // tokenizer.json's post-processor: which specials encoding adds. `config` is tokenizer_config.json
    // (a copy this may edit, as the rules do: a trailing token other than eos becomes eos, the old eos
    // eot or eom).
    void read_post_processor(const json& tokenizer, json& config) {
        const bool have_config = truthy(config);
        json bos = get(config, "bos_token"), cls = get(config, "cls_token");
        json eos = get(config, "eos_token"), sep = get(config, "sep_token");
        if (!truthy(bos) && truthy(cls) && have_config) config["bos_token"] = bos = cls;
        if (!truthy(eos) && truthy(sep) && have_config) config["eos_token"] = eos = sep;
        const json& post = get(tokenizer, "post_processor");
        if (!truthy(post)) return;
        const json processors =
            post.is_object() && post.contains("processors") ? post["processors"] : json::array({post});
        if (!processors.is_array()) return;
        for (const json& p : processors) {
            const json type = get(p, "type");
            if (type == "RobertaProcessing") {
                out.add["bos"] = out.add["eos"] = out.add["sep"] = true;
                if (!truthy(cls) && have_config) config["cls_token"] = cls = first_of(get(p, "cls"), bos);
                if (!truthy(sep) && have_config) config["sep_token"] = sep = first_of(get(p, "sep"), eos);
            } else if (type == "TemplateProcessing") {
                read_template(p, config, have_config, bos, cls, eos, sep);
            }
        }
    }

    // tokenizer_config.json's add_<type>_token flags and <type>_token texts.
    void read_config(const json& config, const json* tokenizer) {
        const json added = tokenizer ? get(*tokenizer, "added_tokens") : json();
        for (const std::string& type : types) {
            const json& add = get(config, ("add_" + type + "_token").c_str());
            if (add.is_boolean()) out.add[type] = add.get<bool>();
            const json& entry = get(config, (type + "_token").c_str());
            const json content = entry.is_object() ? get(entry, "content") : entry;
            if (!content.is_string() || !added.is_array()) continue;
            for (const json& a : added) {
                if (get(a, "content") == content) {  // the first match
                    set_id(type, get(a, "id"));
                    break;
                }
            }
        }
    }

    void read_model_config(const json& config) {
        for (const std::string& type : types) {
            const std::string key = type + "_token_id";
            json id = get(config, key.c_str());
            if (id.is_null()) id = get(get(config, "text_config"), key.c_str());
            set_id(type, id);
        }
    }

    std::vector<std::string> types = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
    HfSpecialTokens out;

private:
    static json first_of(const json& pair, const json& fallback) {
        return pair.is_array() && !pair.empty() ? pair[0] : fallback;
    }

    // TemplateProcessing, as llama.cpp parses it: `single` [bos, $A, eos] decides add_bos / add_eos,
    // `pair` [bos, $A, sep..., $B, eos] add_sep.
    void read_template(const json& p, json& config, bool have_config, json& bos, const json& cls, json& eos,
                       json& sep) {
        const json single = get(p, "single"), pair = get(p, "pair");
        json first, last;
        if (single.is_array() && single.size() > 1) {
            first = special_token_id(single.front());
            if (truthy(first)) {
                if (!have_config) bos = first;
                out.add["bos"] = first == bos || first == cls;
                if (!out.add["bos"])
                    log::warn("tokenizer.json: unknown leading special token {}", first.dump());
            }
            last = special_token_id(single.back());
            if (truthy(last)) {
                if (!have_config) {
                    eos = last;
                } else if (last != eos) {
                    // The old eos becomes eot (or eom), the trailing token eos.
                    for (const char* t : {"eot", "eom"}) {
                        if (std::find(types.begin(), types.end(), t) == types.end()) {
                            types.push_back(t);
                            config[std::string(t) + "_token"] = eos;
                            break;
                        }
                    }
                    config["eos_token"] = eos = last;
                }
                out.add["eos"] = last == eos;
            }
        }
        if (!pair.is_array() || pair.empty()) return;
        const size_t start = truthy(first) && special_token_id(pair.front()) == first ? 1 : 0;
        const size_t stop =
            truthy(last) && special_token_id(pair.back()) == last ? pair.size() - 1 : pair.size();
        if (start >= stop) return;
        const json a = get(get(pair[start], "Sequence"), "id"),
                   b = get(get(pair[stop - 1], "Sequence"), "id");
        if (a != "A" || b != "B" || stop - start < 3) return;
        // Between $A and $B: one or two separators.
        bool add_sep = false;
        const json mid1 = special_token_id(pair[start + 1]);
        if (truthy(mid1) && (mid1 == sep || mid1 == eos) && !truthy(last)) add_sep = true;
        if (stop - start - 2 == 2) {
            const json mid2 = special_token_id(pair[start + 2]);
            if (truthy(mid2) && (mid2 == sep || mid2 == eos)) add_sep = true;
        }
        out.add["sep"] = add_sep;
        if (add_sep && !truthy(sep) && have_config) config["sep_token"] = eos;
    }

    int64_t n_vocab_;
};

}  // namespace

bool truthy(const json& j) {
    if (j.is_null()) return false;
    if (j.is_boolean()) return j.get<bool>();
    if (j.is_number()) return j.get<double>() != 0.0;
    if (j.is_string() || j.is_array() || j.is_object()) return !j.empty();
    return true;
}

HfSpecialTokens hf_special_tokens(const json* tokenizer, const json* tokenizer_config, const json* config,
                                  int64_t n_vocab) {
    Finder f(n_vocab);
    json tc = tokenizer_config && tokenizer_config->is_object() ? *tokenizer_config : json();
    if (tokenizer) f.read_post_processor(*tokenizer, tc);
    if (truthy(tc)) f.read_config(tc, tokenizer);
    if (config) f.read_model_config(*config);
    return f.out;
}

}  // namespace mox::models
