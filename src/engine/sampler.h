// Token sampling: logits of one position + the token history -> one token id.
//
// The chain runs in llama.cpp's default order (docs/sampling.md):
//   penalties -> top-k -> top-p -> min-p -> temperature -> draw
// so top-p and min-p see the probabilities at temperature 1 over the tokens that top-k kept, and
// temperature only reshapes what survived. temperature <= 0 means greedy: the arg max of the
// penalized logits (ties go to the lowest id) and no truncation stage runs.
//
// Determinism: the sampler owns its random generator (std::mt19937_64, whose output sequence the C++
// standard fixes), draws doubles with its own bit arithmetic (std distributions are
// implementation-defined), and breaks every tie by token id. The same seed, logits and history
// therefore give the same tokens on every platform and build.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace mox::engine {

struct SamplerParams {
    float temperature = 0.8f;               // <= 0: greedy
    int top_k = 40;                         // <= 0 or >= n_vocab: off
    float top_p = 0.95f;                    // >= 1: off
    float min_p = 0.05f;                    // <= 0: off
    float repetition_penalty = 1.0f;        // 1: off. Divides positive logits, multiplies negative ones.
    float presence_penalty = 0.0f;          // subtracted once from every token seen in the window
    float frequency_penalty = 0.0f;         // subtracted per occurrence in the window
    int penalty_last_n = 64;                // window of the history the penalties look at; 0: off, -1: all
    uint64_t seed = 0xFFFFFFFFFFFFFFFFull;  // kRandomSeed: seeded from std::random_device
    int min_keep = 1;                       // truncation stages never keep fewer candidates than this
};

inline constexpr uint64_t kRandomSeed = 0xFFFFFFFFFFFFFFFFull;

// One surviving token: its id and its logit after penalties and temperature.
struct Candidate {
    int32_t id;
    float logit;
};

class Sampler {
  public:
    // Throws mox::Error on parameters outside their domain (negative penalty, NaN temperature...).
    explicit Sampler(const SamplerParams& params);

    // logits: [n_vocab]; history: every token of the sequence so far (prompt + generated).
    // Throws mox::Error on empty logits, NaN/+inf logits, all logits -inf, or a history token
    // outside [0, n_vocab).
    int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

    // The chain without the draw: the candidates that survive penalties and truncation, with their
    // final logits (after temperature), in descending logit order (ties: ascending id). Greedy
    // returns the single arg max. Used by sample() and by tests that check truncation sets exactly.
    std::vector<Candidate> candidates(std::span<const float> logits, std::span<const int32_t> history);

    // Re-seeds the generator (same rules as SamplerParams::seed).
    void reseed(uint64_t seed);
    const SamplerParams& params() const { return params_; }

    // Uniform double in [0, 1) from 53 random bits. Public so tests can check its range.
    double next_uniform();

  private:
      bool penalties_active() const;
      void apply_penalties(std::span<const int32_t> history, int32_t n_vocab);
      // Leaves the surviving candidates in work_: sorted as candidates() documents when want_sorted,
      // otherwise in id order or sorted order (both deterministic).
      void run_chain(std::span<const float> logits, std::span<const int32_t> history, bool want_sorted);

      SamplerParams params_;
      std::mt19937_64 rng_;
      std::vector<float> adj_;  // [n_vocab] penalized logits (only with penalties), reused between calls
      std::vector<float> block_max_;  // the largest value of each kBlock values the selection reads
      std::vector<Candidate> work_;   // surviving candidates, reused between calls
      std::vector<double> weights_;   // exp(logit - max) of work_, for the draw
};

}  // namespace mox::engine
