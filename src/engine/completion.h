// One sequence slot that serves completion requests one after another (the engine behind mox
// serve). Each request brings its whole prompt; the slot keeps the state of the previous one and,
// when the new prompt continues exactly the tokens the state already holds (a chat's next turn),
// processes only the new tokens. Anything else starts the sequence over: the Gated DeltaNet state
// is a running summary, it cannot be cut back to a shorter prefix.
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

struct CompletionParams {
    SamplerParams sampling;
    int64_t max_tokens = -1;  // < 0: until end of generation or the context is full
    std::vector<std::string> stop;
};

enum class FinishReason { stop, length, cancelled };
// OpenAI's names: "stop", "length"; and "cancelled" (the client went away).
inline const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::stop:
            return "stop";
        case FinishReason::length:
            return "length";
        case FinishReason::cancelled:
            return "cancelled";
    }
    return "?";
}

struct CompletionResult {
    std::string text;               // everything sent (stop string and end-of-generation token excluded)
    int64_t prompt_tokens = 0;      // the request's prompt
    int64_t cached_tokens = 0;      // of those, already in the state from the previous request
    int64_t completion_tokens = 0;  // sampled tokens, the end-of-generation one included
    FinishReason finish = FinishReason::stop;
    double prompt_seconds = 0, generate_seconds = 0;
    // With an expert cache (models::GpuOptions::expert_cache_bytes): what it did for this request.
    std::optional<models::ExpertCacheStats> expert_cache;
};

class CompletionSlot {
public:
    CompletionSlot(models::Model& model, const text::Tokenizer& tokenizer,
                   const models::StateOptions& state);

    // Runs one request. on_text receives each piece of text as soon as it is complete UTF-8 and
    // cannot be part of a stop string; returning false cancels (the client went away). An empty
    // prompt or one that leaves no room to generate in the context is a mox::Error before
    // anything runs.
    CompletionResult complete(std::span<const int32_t> prompt, const CompletionParams& params,
                              const std::function<bool(const std::string&)>& on_text);

    int64_t n_ctx() const { return state_->n_ctx(); }

private:
    models::Model& model_;
    const text::Tokenizer& tokenizer_;
    std::unique_ptr<models::SequenceState> state_;
    std::vector<int32_t> fed_;  // exactly the tokens the state has processed, in order
};

}  // namespace mox::engine
