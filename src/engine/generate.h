// One sequence generating text: prompt prefill, then sample -> decode until an end-of-generation
// token or the token budget. The loop behind `mox run` and `mox chat`; the server's batched
// engine will generalise it.
#pragma once

#include "engine/sampler.h"
#include "models/model.h"
#include "text/tokenizer.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mox::engine {

struct GenerationStats {
    int64_t prompt_tokens = 0;
    int64_t generated_tokens = 0;
    double prompt_seconds = 0;
    double generate_seconds = 0;  // from the first decode step to the last token
    bool stopped_by_eog = false;
    double prompt_tokens_per_s() const { return prompt_seconds > 0 ? prompt_tokens / prompt_seconds : 0; }
    double generate_tokens_per_s() const {
        return generate_seconds > 0 ? generated_tokens / generate_seconds : 0;
    }
};

class Generator {
public:
    Generator(models::Model& model, const text::Tokenizer& tokenizer, const models::StateOptions& state,
              const SamplerParams& sampling);

    // Appends `tokens` to the context (one prefill batch) and generates up to n_predict tokens,
    // calling on_text with each decoded piece of text as soon as it is complete UTF-8. Returns
    // the generated ids. A prompt that does not fit the remaining context is a mox::Error
    // (nothing is appended then).
    std::vector<int32_t> generate(std::span<const int32_t> tokens, int64_t n_predict,
                                  const std::function<void(const std::string&)>& on_text,
                                  GenerationStats* stats = nullptr);

    int64_t n_past() const { return state_->n_past(); }
    models::SequenceState& state() { return *state_; }
    int64_t n_ctx() const { return state_->n_ctx(); }
    const std::vector<int32_t>& history() const { return history_; }
    void reset();

private:
    models::Model& model_;
    const text::Tokenizer& tokenizer_;
    std::unique_ptr<models::SequenceState> state_;
    Sampler sampler_;
    std::vector<int32_t> history_;  // every token of the sequence, the pending one included
    std::optional<int32_t> pending_;  // sampled last but not yet run through the model
};

}  // namespace mox::engine
