// What the text-generating commands (run, chat, serve) share: the default model, the sampling flags,
// a model loaded with its tokenizer, and the chat template with its options.
#pragma once

#include "common_options.h"
#include "engine/sampler.h"
#include "gguf/reader.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#include <memory>
#include <string>

namespace CLI {
class App;
}

namespace mox::cli {

// --temp, --top-k, --top-p, --min-p, the penalties and -s (a random seed unless given).
void add_sampling_options(CLI::App* cmd, engine::SamplerParams& s);
// A random seed drawn now and printed with -v, so a run can be repeated with -s.
void resolve_seed(engine::SamplerParams& s);

// The model every command falls back to: the small MoE trained for mox (assets/mox-tiny), or
// $MOX_DEFAULT_MODEL.
std::string resolve_model_path(const std::string& given);

struct LoadedModel {
    std::unique_ptr<gguf::File> file;
    std::unique_ptr<models::Model> model;
    std::unique_ptr<text::Tokenizer> tokenizer;
};

// Opens o.path, loads the model where the flags say (resolving -ctk/-ctv auto into o), prints
// where it runs on stderr.
LoadedModel load(ModelOptions& o);

// The model's chat template (GGUF tokenizer.chat_template), or ChatML when it has none.
std::string chat_template_of(const text::Tokenizer& tokenizer);
// Options for a generation prompt: the vocabulary's bos/eos pieces; no_think turns thinking off.
text::ChatOptions chat_options(const text::Tokenizer& tokenizer, bool no_think);

}  // namespace mox::cli
