#include "engine/completion.h"

#include "core/error.h"
#include "engine/stop_strings.h"

#include <algorithm>
#include <chrono>

namespace mox::engine {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

CompletionSlot::CompletionSlot(models::Model& model, const text::Tokenizer& tokenizer,
                               const models::StateOptions& state)
    : model_(model), tokenizer_(tokenizer), state_(model.new_state(state)) {
    if (tokenizer.n_tokens() > model.n_vocab())
        fail("tokenizer has {} tokens but the model's vocabulary has {} rows", tokenizer.n_tokens(),
             model.n_vocab());
}

CompletionResult CompletionSlot::complete(std::span<const int32_t> prompt, const CompletionParams& params,
                                          const std::function<bool(const std::string&)>& on_text) {
    if (prompt.empty()) fail("empty prompt");
    const int64_t n_prompt = static_cast<int64_t>(prompt.size());
    if (n_prompt >= state_->n_ctx())
        fail("the prompt has {} tokens; the context holds {} (-c), and at least one must be left to generate",
             n_prompt, state_->n_ctx());
    Sampler sampler(params.sampling);  // validates the parameters before any work
    CompletionResult res;
    res.prompt_tokens = n_prompt;

    // Continue the state when it holds a strict prefix of this prompt; otherwise start over (an
    // equal prompt too: the logits of its last token are not kept).
    const bool reuse = fed_.size() < prompt.size() && std::equal(fed_.begin(), fed_.end(), prompt.begin());
    if (!reuse) {
        state_->clear();
        fed_.clear();
    }
    res.cached_tokens = static_cast<int64_t>(fed_.size());
    const std::span<const int32_t> new_tokens = prompt.subspan(fed_.size());  // what the state lacks

    std::vector<float> logits;
    std::vector<int32_t> history(prompt.begin(), prompt.end());  // the penalties' window
    StopStrings stops(params.stop);
    text::DecodeStream decoded(tokenizer_);
    bool cancelled = false;
    auto send = [&](const std::string& piece) {
        if (piece.empty() || cancelled) return;
        res.text += piece;
        if (on_text && !on_text(piece)) cancelled = true;
    };
    const std::optional<models::ExpertCacheStats> cache0 = model_.expert_cache_stats();
    try {
        auto t0 = std::chrono::steady_clock::now();
        models::SequenceBatch batch{state_.get(), new_tokens};
        model_.forward(std::span(&batch, 1), false, logits);
        fed_.insert(fed_.end(), new_tokens.begin(), new_tokens.end());
        res.prompt_seconds = seconds_since(t0);

        t0 = std::chrono::steady_clock::now();
        res.finish = FinishReason::length;
        const int64_t budget = params.max_tokens < 0 ? state_->n_ctx() : params.max_tokens;
        for (int64_t i = 0; i < budget; ++i) {
            // Only the tokenizer's ids can be sampled: padding rows of the embedding have no text.
            const std::span<const float> row(logits.data(), static_cast<size_t>(tokenizer_.n_tokens()));
            const int32_t id = sampler.sample(row, history);
            history.push_back(id);
            ++res.completion_tokens;
            if (tokenizer_.is_end_of_generation(id)) {
                res.finish = FinishReason::stop;
                break;
            }
            send(stops.push(decoded.push(id)));
            if (stops.stopped()) {
                res.finish = FinishReason::stop;
                break;
            }
            if (cancelled) break;
            if (i + 1 == budget || state_->n_past() >= state_->n_ctx()) break;
            models::SequenceBatch step{state_.get(), std::span<const int32_t>(&history.back(), 1)};
            model_.forward(std::span(&step, 1), false, logits);
            fed_.push_back(id);
        }
        if (!stops.stopped()) send(stops.push(decoded.finish()));
        if (!stops.stopped()) send(stops.finish());
        if (cancelled) res.finish = FinishReason::cancelled;
        res.generate_seconds = seconds_since(t0);
        if (const std::optional<models::ExpertCacheStats> cache1 = model_.expert_cache_stats(); cache0 && cache1) {
            models::ExpertCacheStats d = *cache1;
            d.tokens -= cache0->tokens, d.hits -= cache0->hits, d.misses -= cache0->misses;
            d.admissions -= cache0->admissions, d.evictions -= cache0->evictions;
            d.bytes_copied -= cache0->bytes_copied;
            res.expert_cache = d;
        }
    } catch (...) {
        // A forward that failed part way leaves the state unknown: the next request starts over.
        state_->clear();
        fed_.clear();
        throw;
    }
    return res;
}

}  // namespace mox::engine
