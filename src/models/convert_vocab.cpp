#include "models/convert_vocab.h"

#include "core/error.h"
#include "core/log.h"
#include "text/spm_hf_json.h"
#include "text/spm_model.h"
#include "text/vocab_io.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>

namespace mox::models {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

enum class TokenizerKind { byte_level_bpe, sentencepiece };

// What the architecture's published checkpoints ship: the Qwen families a byte-level BPE
// tokenizer.json, Mixtral and Phi-3.5-MoE a SentencePiece tokenizer.model.
TokenizerKind tokenizer_kind(Arch arch) {
    return arch == Arch::llama || arch == Arch::phimoe ? TokenizerKind::sentencepiece
                                                       : TokenizerKind::byte_level_bpe;
}

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open", path.string());
    return std::string(std::istreambuf_iterator<char>(in), {});
}

std::optional<json> json_if_present(const fs::path& path) {
    if (!fs::exists(path)) return std::nullopt;
    return read_json_file(path);
}

std::optional<int32_t> token_id_from_config(const json& j, const char* key) {
    if (!j.contains(key)) return std::nullopt;
    const json& v = j[key];
    if (v.is_number_integer()) return v.get<int32_t>();
    if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int32_t>();
    return std::nullopt;
}

// The chat templates, by the rules of llama.cpp's converter: tokenizer_config.json's chat_template
// when it has the key (a string, or a list of {name, template} whose "default" is the main one), else
// chat_template.jinja (with additional_chat_templates/*.jinja as named ones), else
// chat_template.json's chat_template. llama.cpp reads none of them when tokenizer_config.json is
// absent; mox reads the others anyway.
struct ChatTemplates {
    std::string main;
    std::vector<std::pair<std::string, std::string>> named;
};

void add_template_list(ChatTemplates& out, const json& list) {
    for (const json& choice : list) {
        if (!choice.is_object()) continue;
        std::string name = choice.value("name", std::string());
        const json& text = choice.value("template", json());
        if (name.empty() || !text.is_string()) continue;
        // gguf-py keeps letters and digits of a template's name and writes '_' for anything else.
        for (char& c : name)
            if (!std::isalnum(static_cast<unsigned char>(c)) || static_cast<unsigned char>(c) >= 0x80)
                c = '_';
        if (name == "default")
            out.main = text.get<std::string>();
        else
            out.named.emplace_back(name, text.get<std::string>());
    }
}

ChatTemplates read_chat_templates(const fs::path& dir, const json* tokenizer_config) {
    json value;
    if (tokenizer_config && tokenizer_config->is_object() && tokenizer_config->contains("chat_template")) {
        value = tokenizer_config->at("chat_template");
    } else if (fs::exists(dir / "chat_template.jinja")) {
        value = read_text(dir / "chat_template.jinja");
        std::vector<fs::path> extra;
        if (fs::is_directory(dir / "additional_chat_templates"))
            for (const auto& e : fs::directory_iterator(dir / "additional_chat_templates"))
                if (e.path().extension() == ".jinja") extra.push_back(e.path());
        std::sort(extra.begin(), extra.end());
        if (!extra.empty()) {
            json list = json::array({{{"name", "default"}, {"template", value}}});
            for (const fs::path& p : extra)
                list.push_back({{"name", p.stem().string()}, {"template", read_text(p)}});
            value = list;
        }
    } else if (fs::exists(dir / "chat_template.json")) {
        const json j = read_json_file(dir / "chat_template.json");
        value = j.is_object() ? j.value("chat_template", json()) : json();
    }
    ChatTemplates out;
    if (value.is_string())
        out.main = value.get<std::string>();
    else if (value.is_array())
        add_template_list(out, value);
    else if (!value.is_null())
        log::warn("{}: chat_template is neither a string nor a list; ignored", dir.string());
    return out;
}

// The checkpoint's byte-level BPE tokenizer.json: eos from config/generation_config when the
// tokenizer itself does not name one, and unused padding rows up to the embedding's row count (as
// real Qwen files carry 248320 rows for 248077 tokens).
text::Vocab read_bpe_vocab(const fs::path& dir, int64_t n_vocab) {
    if (!fs::exists(dir / "tokenizer.json"))
        fail(
            "{}: only tokenizer.json tokenizers are supported (pass --placeholder-vocab to ignore the "
            "tokenizer)",
            dir.string());
    text::Vocab v = text::vocab_from_hf_json_file((dir / "tokenizer.json").string());
    for (const char* cfg : {"generation_config.json", "config.json"}) {
        if (v.eos || !fs::exists(dir / cfg)) continue;
        if (auto id = token_id_from_config(read_json_file(dir / cfg), "eos_token_id")) v.eos = *id;
    }
    if (v.size() > n_vocab)
        fail("{}: tokenizer has {} tokens but the model's vocabulary has {} rows", dir.string(), v.size(),
             n_vocab);
    text::pad_vocab(v, static_cast<int32_t>(n_vocab));
    v.validate();
    return v;
}

ConvertedVocab read_spm_vocab(const fs::path& dir, const Hparams& hp, const std::optional<json>& tokenizer) {
    const std::optional<json> tokenizer_config = json_if_present(dir / "tokenizer_config.json");
    const std::optional<json> added_tokens = json_if_present(dir / "added_tokens.json");
    const std::optional<json> config = json_if_present(dir / "config.json");
    const HfTokenizerFiles files{.tokenizer = tokenizer ? &*tokenizer : nullptr,
                                 .tokenizer_config = tokenizer_config ? &*tokenizer_config : nullptr,
                                 .added_tokens = added_tokens ? &*added_tokens : nullptr,
                                 .config = config ? &*config : nullptr};
    const fs::path model = dir / "tokenizer.model";
    if (hp.arch == Arch::phimoe) {
        if (!fs::exists(model))
            fail(
                "{}: no tokenizer.model: a phimoe vocabulary is converted from its SentencePiece model (pass "
                "--placeholder-vocab to write a placeholder vocabulary instead)",
                dir.string());
        return spm_vocab_phi3(text::read_spm_model(model.string()), files, hp.n_vocab);
    }
    if (fs::exists(model)) return spm_vocab_llama(text::read_spm_model(model.string()), files, hp.n_vocab);
    MOX_CHECK(tokenizer && text::is_spm_hf_json(*tokenizer), "no SentencePiece source chosen");
    return spm_vocab_llama_hf(text::spm_from_hf_json(*tokenizer, (dir / "tokenizer.json").string()), files,
                              hp.n_vocab);
}

ConvertedVocab read_vocab(const fs::path& dir, const Hparams& hp) {
    ConvertedVocab out;
    const bool spm_arch = tokenizer_kind(hp.arch) == TokenizerKind::sentencepiece;
    const std::optional<json> tokenizer_config = json_if_present(dir / "tokenizer_config.json");
    // Phi-4-style checkpoints of the Phi-3 family name a GPT-2 tokenizer; llama.cpp converts those
    // byte-level.
    const bool gpt2_class = hp.arch == Arch::phimoe && tokenizer_config && tokenizer_config->is_object() &&
                            tokenizer_config->value("tokenizer_class", json()) == "GPT2Tokenizer";
    const bool has_model = fs::exists(dir / "tokenizer.model");
    std::optional<json> tokenizer;
    if (spm_arch && fs::exists(dir / "tokenizer.json")) tokenizer = read_json_file(dir / "tokenizer.json");
    const bool spm_json = tokenizer && text::is_spm_hf_json(*tokenizer);

    if (!spm_arch || gpt2_class || (hp.arch == Arch::llama && !has_model && tokenizer && !spm_json)) {
        out.vocab = read_bpe_vocab(dir, hp.n_vocab);
    } else if (has_model || spm_json || hp.arch == Arch::phimoe) {
        out = read_spm_vocab(dir, hp, tokenizer);
    } else {
        fail(
            "{}: a {} vocabulary is converted from tokenizer.model or tokenizer.json; the folder has neither "
            "(pass "
            "--placeholder-vocab to write a placeholder vocabulary instead)",
            dir.string(), hp.arch_name());
    }

    const ChatTemplates templates = read_chat_templates(dir, tokenizer_config ? &*tokenizer_config : nullptr);
    out.vocab.chat_template = templates.main;
    if (!templates.named.empty()) {
        std::vector<std::string> names;
        for (const auto& [name, text] : templates.named) {
            out.extra_keys.emplace_back("tokenizer.chat_template." + name, gguf::Value::string(text));
            names.push_back(name);
        }
        out.extra_keys.emplace_back("tokenizer.chat_templates", gguf::Value::string_array(names));
    }
    return out;
}

}  // namespace

json read_json_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open", path.string());
    const json j = json::parse(in, nullptr, false);
    if (j.is_discarded()) fail("{}: not valid JSON", path.string());
    return j;
}

bool has_tokenizer_files(const fs::path& dir) {
    for (const char* f : {"tokenizer.json", "tokenizer.model", "vocab.json"})
        if (fs::exists(dir / f)) return true;
    return false;
}

ConvertedVocab read_checkpoint_vocab(const fs::path& dir, const Hparams& hp) {
    // nlohmann's typed accessors throw their own exceptions on a value of the wrong type.
    try {
        return read_vocab(dir, hp);
    } catch (const json::exception& e) {
        fail("{}: tokenizer files: {}", dir.string(), e.what());
    }
}

void write_converted_vocab(const ConvertedVocab& v, gguf::Writer& w) {
    text::vocab_to_gguf(v.vocab, w);
    for (const auto& [key, value] : v.extra_keys) w.set(key, value);
}

}  // namespace mox::models
