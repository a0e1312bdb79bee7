#include "models/synth_vocab.h"

#include "core/error.h"
#include "gguf/reader.h"
#include "text/vocab.h"
#include "text/vocab_io.h"

namespace mox::models {

void write_synth_vocab(gguf::Writer& w, int64_t n_vocab) {
    if (n_vocab > INT32_MAX) fail("vocabulary of {} rows is too large", n_vocab);
    text::vocab_to_gguf(text::placeholder_vocab(static_cast<int32_t>(n_vocab)), w);
}

void write_vocab_from_file(gguf::Writer& w, const std::string& path, int64_t n_vocab, const std::string& chat_template) {
    text::Vocab v = path.ends_with(".gguf") ? text::vocab_from_gguf(gguf::File::open(path))
                                             : text::vocab_from_hf_json_file(path);
    if (v.size() > n_vocab) fail("{}: {} tokens do not fit the model's {} vocabulary rows", path, v.size(), n_vocab);
    text::pad_vocab(v, static_cast<int32_t>(n_vocab));
    if (!chat_template.empty()) v.chat_template = chat_template;
    v.validate();
    text::vocab_to_gguf(v, w);
}

}  // namespace mox::models
