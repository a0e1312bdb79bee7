#include "engine/generate.h"

#include "core/error.h"

#include <chrono>

namespace mox::engine {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

Generator::Generator(models::Model& model, const text::Tokenizer& tokenizer, const models::StateOptions& state,
                     const SamplerParams& sampling)
    : model_(model), tokenizer_(tokenizer), state_(model.new_state(state)), sampler_(sampling) {
    if (tokenizer.n_tokens() > model.n_vocab())
        fail("tokenizer has {} tokens but the model's vocabulary has {} rows", tokenizer.n_tokens(), model.n_vocab());
}

void Generator::reset() {
    state_->clear();
    history_.clear();
    pending_.reset();
}

std::vector<int32_t> Generator::generate(std::span<const int32_t> tokens, int64_t n_predict,
                                         const std::function<void(const std::string&)>& on_text,
                                         GenerationStats* stats) {
    // The last token sampled by the previous call was never fed to the model: it goes first now.
    std::vector<int32_t> input;
    if (pending_) input.push_back(*pending_);
    input.insert(input.end(), tokens.begin(), tokens.end());
    if (input.empty()) fail("empty prompt");
    const int64_t room = state_->n_ctx() - state_->n_past();
    if (static_cast<int64_t>(input.size()) > room)
        fail("prompt of {} tokens does not fit the {} tokens left in the context of {} (-c)", input.size(), room,
             state_->n_ctx());
    GenerationStats local;
    GenerationStats& st = stats ? *stats : local;
    st = {};
    st.prompt_tokens = static_cast<int64_t>(input.size());

    std::vector<float> logits;
    auto t0 = std::chrono::steady_clock::now();
    models::SequenceBatch batch{state_.get(), input};
    model_.forward(std::span(&batch, 1), false, logits);
    pending_.reset();
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    st.prompt_seconds = seconds_since(t0);

    std::vector<int32_t> out;
    text::DecodeStream stream(tokenizer_);
    t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n_predict; ++i) {
        // Only the tokenizer's ids can be sampled: padding rows of the embedding have no text.
        const std::span<const float> row(logits.data(), static_cast<size_t>(tokenizer_.n_tokens()));
        const int32_t id = sampler_.sample(row, history_);
        out.push_back(id);
        history_.push_back(id);
        pending_ = id;
        ++st.generated_tokens;
        if (tokenizer_.is_end_of_generation(id)) {
            st.stopped_by_eog = true;
            break;
        }
        if (on_text) on_text(stream.push(id));
        if (i + 1 == n_predict || state_->n_past() >= state_->n_ctx()) break;
        models::SequenceBatch step{state_.get(), std::span<const int32_t>(&out.back(), 1)};
        model_.forward(std::span(&step, 1), false, logits);
        pending_.reset();
    }
    if (on_text) on_text(stream.finish());
    st.generate_seconds = seconds_since(t0);
    return out;
}

}  // namespace mox::engine
