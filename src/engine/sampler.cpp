#include "engine/sampler.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace mox::engine {
namespace {

// Descending logit, ties by ascending id: a strict total order, so every sort and selection below
// gives the same result on every standard library.
bool before(const Candidate& a, const Candidate& b) {
    if (a.logit != b.logit) return a.logit > b.logit;
    return a.id < b.id;
}

bool is_bad(float x) {
    return std::isnan(x) || x == std::numeric_limits<float>::infinity();
}

// The chain reads a vocabulary's worth of logits per token (248K for Qwen3.6: 0.5-1 ms a token in
// plain per-element loops, a fifth to a third of a GPU decode step). It reads them in blocks: one pass takes
// each block's maximum and finds the blocks that hold NaN or +inf, and the top-k selection then
// skips every block whose maximum cannot enter the kept set.
constexpr size_t kBlock = 64;

// The largest value of v[s, e) (-inf for none above it; NaN never counts, as in `x > m ? x : m`),
// and whether it may hold NaN or +inf (any all-ones exponent: -inf too, which the caller sorts out).
// An all-ones exponent plus one unit of exponent carries into the sign bit; no other does.
void scan_block_scalar(const float* v, size_t s, size_t e, float& max, bool& odd) {
    float m = -std::numeric_limits<float>::infinity();
    uint32_t flags = 0;
    for (size_t i = s; i < e; ++i) {
        m = v[i] > m ? v[i] : m;
        uint32_t u;
        std::memcpy(&u, &v[i], sizeof(u));
        flags |= (u & 0x7F800000u) + 0x00800000u;
    }
    max = m;
    odd = (flags & 0x80000000u) != 0;
}

// out[b] = the largest of v[b kBlock, (b + 1) kBlock). Returns the first block that may hold NaN or
// +inf (the caller checks its values one by one), or n_blocks when none does. SSE2 (every x86-64):
// _mm_max_ps(x, m) is `x > m ? x : m` lane by lane, so the maxima are the scalar loop's; ~5x faster
// than it (GCC does not vectorise that reduction without -ffast-math).
size_t block_maxima(const float* v, size_t n, float* out) {
    const size_t n_blocks = (n + kBlock - 1) / kBlock;
    size_t first_odd = n_blocks;
    for (size_t b = 0; b < n_blocks; ++b) {
        const size_t s = b * kBlock, e = std::min(n, s + kBlock);
        float max = 0.0f;
        bool odd = false;
#if defined(__SSE2__)
        if (e - s == kBlock) {
            const __m128i exponent = _mm_set1_epi32(0x7F800000), carry = _mm_set1_epi32(0x00800000);
            __m128 m[4];
            for (__m128& x : m) x = _mm_set1_ps(-std::numeric_limits<float>::infinity());
            __m128i flags = _mm_setzero_si128();
            for (size_t i = s; i < e; i += 16)
                for (int k = 0; k < 4; ++k) {
                    const __m128 x = _mm_loadu_ps(v + i + 4 * size_t(k));
                    m[k] = _mm_max_ps(x, m[k]);
                    flags = _mm_or_si128(flags,
                                         _mm_add_epi32(_mm_and_si128(_mm_castps_si128(x), exponent), carry));
                }
            float lanes[4];
            _mm_storeu_ps(lanes, _mm_max_ps(_mm_max_ps(m[0], m[1]), _mm_max_ps(m[2], m[3])));
            max = std::max({lanes[0], lanes[1], lanes[2], lanes[3]});
            odd = _mm_movemask_ps(_mm_castsi128_ps(flags)) != 0;
        } else {
            scan_block_scalar(v, s, e, max, odd);
        }
#else
        scan_block_scalar(v, s, e, max, odd);
#endif
        out[b] = max;
        if (odd && first_odd == n_blocks) first_odd = b;
    }
    return first_odd;
}

}  // namespace

Sampler::Sampler(const SamplerParams& params) : params_(params) {
    const SamplerParams& p = params_;
    if (std::isnan(p.temperature)) fail("sampler: temperature is NaN");
    if (std::isnan(p.top_p) || p.top_p < 0.0f) fail("sampler: top_p must be >= 0 (got {})", p.top_p);
    if (std::isnan(p.min_p) || p.min_p < 0.0f || p.min_p > 1.0f)
        fail("sampler: min_p must be in [0, 1] (got {})", p.min_p);
    if (!(p.repetition_penalty > 0.0f) || std::isinf(p.repetition_penalty))
        fail("sampler: repetition_penalty must be a positive number (got {})", p.repetition_penalty);
    if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty))
        fail("sampler: presence/frequency penalties must be finite");
    if (p.penalty_last_n < -1) fail("sampler: penalty_last_n must be >= -1 (got {})", p.penalty_last_n);
    if (p.min_keep < 1) fail("sampler: min_keep must be >= 1 (got {})", p.min_keep);
    reseed(p.seed);
}

void Sampler::reseed(uint64_t seed) {
    params_.seed = seed;
    if (seed == kRandomSeed) {
        std::random_device rd;
        seed = (uint64_t(rd()) << 32) ^ rd();
    }
    rng_.seed(seed);
}

double Sampler::next_uniform() {
    // The top 53 bits of one 64-bit draw, scaled by 2^-53: every double in [0, 1) on that grid is
    // equally likely and 1.0 cannot occur.
    return double(rng_() >> 11) * 0x1.0p-53;
}

bool Sampler::penalties_active() const {
    const SamplerParams& p = params_;
    if (p.penalty_last_n == 0) return false;
    return !(p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f);
}

void Sampler::apply_penalties(std::span<const int32_t> history, int32_t n_vocab) {
    const SamplerParams& p = params_;
    if (!penalties_active()) return;
    size_t n = history.size();
    if (p.penalty_last_n > 0) n = std::min(n, size_t(p.penalty_last_n));
    std::vector<int32_t> window(history.end() - n, history.end());
    std::sort(window.begin(), window.end());
    for (size_t i = 0; i < window.size();) {
        const int32_t id = window[i];
        size_t j = i;
        while (j < window.size() && window[j] == id) ++j;
        const float count = float(j - i);
        i = j;
        if (id < 0 || id >= n_vocab)
            fail("sampler: history token {} outside the vocabulary [0, {})", id, n_vocab);
        float& l = adj_[size_t(id)];
        // llama.cpp's rule: shrink a token's logit toward "less likely" whatever its sign.
        l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
        // OpenAI's rule: mu[j] -= c[j] * frequency + (c[j] > 0) * presence.
        l -= count * p.frequency_penalty + p.presence_penalty;
    }
}

void Sampler::run_chain(std::span<const float> logits, std::span<const int32_t> history, bool want_sorted) {
    const SamplerParams& p = params_;
    const size_t n_vocab = logits.size();
    if (n_vocab == 0) fail("sampler: empty logits");
    if (n_vocab > size_t(std::numeric_limits<int32_t>::max())) fail("sampler: vocabulary too large");
    // [n_vocab] penalized logits. Tokens at -inf are skipped from here on: they can never be drawn,
    // and leaving them out keeps min_keep and top-p honest.
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const size_t n_blocks = (n_vocab + kBlock - 1) / kBlock;
    block_max_.resize(n_blocks);
    // Validation: the blocks that may hold NaN or +inf, checked value by value in order, so the
    // error names the first bad token.
    for (size_t b = block_maxima(logits.data(), n_vocab, block_max_.data()); b < n_blocks; ++b)
        for (size_t i = b * kBlock; i < std::min(n_vocab, (b + 1) * kBlock); ++i)
            if (is_bad(logits[i])) fail("sampler: logit of token {} is {}", i, logits[i]);
    // The values the chain reads: the logits themselves, or a penalized copy (penalties may raise
    // logits too: the maxima are taken again).
    const float* v = logits.data();
    if (penalties_active()) {
        adj_.assign(logits.begin(), logits.end());
        apply_penalties(history, int32_t(n_vocab));
        block_maxima(adj_.data(), n_vocab, block_max_.data());
        v = adj_.data();
    }

    const size_t min_keep = size_t(p.min_keep);
    const bool greedy = p.temperature <= 0.0f;
    const size_t k = greedy ? 1 : p.top_k > 0 ? std::max(size_t(p.top_k), min_keep) : n_vocab;
    bool sorted = false;
    work_.clear();
    if (k <= 1024 && k < n_vocab) {
        // Small k (greedy, typical top-k): one pass with a heap whose front is the worst kept
        // candidate; once it is full, a block whose maximum is below that front holds nothing
        // that could enter (a tie could, by a lower id: such blocks are read).
        for (size_t b = 0; b < n_blocks; ++b) {
            if (work_.size() == k && block_max_[b] < work_.front().logit) continue;
            for (size_t i = b * kBlock; i < std::min(n_vocab, (b + 1) * kBlock); ++i) {
                const Candidate c{int32_t(i), v[i]};
                if (c.logit == neg_inf) continue;
                if (work_.size() < k) {
                    work_.push_back(c);
                    std::push_heap(work_.begin(), work_.end(), before);
                } else if (before(c, work_.front())) {
                    std::pop_heap(work_.begin(), work_.end(), before);
                    work_.back() = c;
                    std::push_heap(work_.begin(), work_.end(), before);
                }
            }
        }
        std::sort_heap(work_.begin(), work_.end(), before);
        sorted = true;
    } else {
        for (size_t i = 0; i < n_vocab; ++i)
            if (v[i] != neg_inf) work_.push_back({int32_t(i), v[i]});  // id order
        if (k < work_.size()) {
            std::nth_element(work_.begin(), work_.begin() + ptrdiff_t(k), work_.end(), before);
            work_.resize(k);
            std::sort(work_.begin(), work_.end(), before);
            sorted = true;
        }
    }
    if (work_.empty()) fail("sampler: every logit is -inf");
    if (greedy) return;

    if (p.top_p < 1.0f && work_.size() > min_keep) {
        // Probabilities at temperature 1 over the current candidates. The normaliser needs one pass
        // over all of them; the cut needs only the sorted head. Unsorted, the head grows in chunks:
        // select the next chunk of the remainder (O(n)), sort just that chunk, continue the sum.
        float max_logit = neg_inf;
        for (const Candidate& c : work_) max_logit = std::max(max_logit, c.logit);
        double total = 0.0;
        for (const Candidate& c : work_) total += std::exp(double(c.logit) - max_logit);
        size_t cut = work_.size(), done = 0, chunk = 256;
        double cum = 0.0;
        while (done < work_.size()) {
            const size_t head = sorted ? work_.size() : std::min(work_.size(), done + chunk);
            if (!sorted) {
                const auto first = work_.begin() + ptrdiff_t(done), last = work_.begin() + ptrdiff_t(head);
                if (head < work_.size()) std::nth_element(first, last, work_.end(), before);
                std::sort(first, last, before);
            }
            bool found = false;
            for (size_t i = done; i < head; ++i) {
                cum += std::exp(double(work_[i].logit) - max_logit) / total;
                if (cum >= double(p.top_p) && i + 1 >= min_keep) {
                    cut = i + 1;
                    found = true;
                    break;
                }
            }
            if (found) break;
            done = head;
            chunk *= 4;
        }
        work_.resize(cut);  // the head up to cut is sorted
        sorted = true;
    }

    if (p.min_p > 0.0f && work_.size() > min_keep) {
        // p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p): no normalisation needed.
        float max_logit = neg_inf;
        for (const Candidate& c : work_) max_logit = std::max(max_logit, c.logit);
        const double threshold = double(max_logit) + std::log(double(p.min_p));
        auto keep = [&](const Candidate& c) { return double(c.logit) >= threshold; };
        if (sorted) {
            size_t cut = size_t(std::find_if_not(work_.begin(), work_.end(), keep) - work_.begin());
            work_.resize(std::max(cut, min_keep));
        } else {
            size_t kept = size_t(std::count_if(work_.begin(), work_.end(), keep));
            if (kept >= min_keep) {
                work_.erase(
                    std::remove_if(work_.begin(), work_.end(), [&](const Candidate& c) { return !keep(c); }),
                    work_.end());
            } else {
                std::partial_sort(work_.begin(), work_.begin() + ptrdiff_t(min_keep), work_.end(), before);
                work_.resize(min_keep);
                sorted = true;
            }
        }
    }

    if (p.temperature != 1.0f)
        for (Candidate& c : work_) c.logit /= p.temperature;

    if (want_sorted && !sorted) std::sort(work_.begin(), work_.end(), before);
}

std::vector<Candidate> Sampler::candidates(std::span<const float> logits, std::span<const int32_t> history) {
    run_chain(logits, history, /*want_sorted=*/true);
    return work_;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
    // Unsorted is fine for the draw: the order is still deterministic (id order or sorted order).
    run_chain(logits, history, /*want_sorted=*/false);
    const std::vector<Candidate>& cands = work_;
    if (cands.size() == 1) return cands[0].id;
    float max_logit = cands[0].logit;
    for (const Candidate& c : cands) max_logit = std::max(max_logit, c.logit);
    weights_.resize(cands.size());
    double total = 0.0;
    for (size_t i = 0; i < cands.size(); ++i)
        total += weights_[i] = std::exp(double(cands[i].logit) - max_logit);
    const double target = next_uniform() * total;
    double cum = 0.0;
    for (size_t i = 0; i < cands.size(); ++i) {
        cum += weights_[i];
        if (target < cum) return cands[i].id;
    }
    // Rounding can leave target >= the running sum; the last candidate with any mass takes it.
    for (size_t i = cands.size(); i-- > 0;)
        if (weights_[i] > 0.0) return cands[i].id;
    return cands[0].id;  // unreachable: the max candidate has weight 1
}

}  // namespace mox::engine
