#include "place/synthetic_trace.h"

#include "core/error.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

namespace mox::place {

namespace {

class Random {
public:
    explicit Random(uint64_t seed) : engine_(seed) {}
    // Uniform in [0, n), by a 128-bit product rather than std::uniform_int_distribution, whose
    // algorithm differs between standard libraries.
    uint64_t below(uint64_t n) {
        return static_cast<uint64_t>((static_cast<unsigned __int128>(engine_()) * n) >> 64);
    }
    double unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)

private:
    std::mt19937_64 engine_;
};

// Integer weights per expert with prefix sums, so that drawing without replacement (zero a weight,
// restore it after the token) is exact and O(log n_expert).
class WeightTree {
public:
    explicit WeightTree(const std::vector<uint64_t>& weights)
        : weight_(weights), tree_(weights.size() + 1, 0) {
        for (size_t i = 0; i < weights.size(); ++i) add(i, weights[i]);
    }
    uint64_t total() const { return total_; }
    void remove(size_t i) { add(i, ~weight_[i] + 1); }  // adds -weight modulo 2^64
    void restore(size_t i) { add(i, weight_[i]); }
    // The index whose cumulative weight range holds `target` (< total()).
    size_t find(uint64_t target) const {
        size_t at = 0;
        for (size_t step = std::bit_floor(tree_.size() - 1); step > 0; step >>= 1) {
            if (at + step < tree_.size() && tree_[at + step] <= target) {
                at += step;
                target -= tree_[at];
            }
        }
        return at;  // tree index at+1 is element `at`
    }

private:
    void add(size_t i, uint64_t delta) {
        total_ += delta;
        for (size_t j = i + 1; j < tree_.size(); j += j & (~j + 1)) tree_[j] += delta;
    }

    std::vector<uint64_t> weight_;
    std::vector<uint64_t> tree_;
    uint64_t total_ = 0;
};

}  // namespace

models::RoutingTrace synthetic_routing_trace(int64_t n_layers, int64_t n_expert, int64_t k, int64_t n_tokens,
                                             double skew, double reuse, uint64_t seed) {
    if (n_layers < 1 || n_layers > 65536) fail("synthetic trace: {} layers (1..65536)", n_layers);
    if (n_expert < 1 || n_expert > 65536) fail("synthetic trace: {} experts (1..65536)", n_expert);
    if (k < 1 || k > n_expert) fail("synthetic trace: k {} out of range (1..{} experts)", k, n_expert);
    if (n_tokens < 0) fail("synthetic trace: {} tokens", n_tokens);
    if (n_tokens > (int64_t{1} << 32) / (n_layers * k))
        fail("synthetic trace: {} tokens x {} layers x k {} is too large", n_tokens, n_layers, k);
    if (!(skew >= 0) || !std::isfinite(skew)) fail("synthetic trace: skew {} (must be >= 0)", skew);
    if (!(reuse >= 0 && reuse <= 1)) fail("synthetic trace: reuse {} (must be in [0, 1])", reuse);

    models::RoutingTrace t;
    t.n_expert = n_expert;
    t.k = k;
    t.n_tokens = n_tokens;
    for (int64_t l = 0; l < n_layers; ++l) t.layers.push_back(static_cast<int32_t>(l));
    t.ids.resize(static_cast<size_t>(n_tokens * n_layers * k));

    Random rng(seed);
    // Weight 2^40 / (rank + 1)^skew, at least 1 so that every expert can be drawn; each layer gives
    // the ranks to its own permutation of the experts.
    std::vector<WeightTree> popularity;
    for (int64_t l = 0; l < n_layers; ++l) {
        std::vector<uint64_t> weight_of_rank(static_cast<size_t>(n_expert));
        for (int64_t r = 0; r < n_expert; ++r)
            weight_of_rank[static_cast<size_t>(r)] =
                std::max<uint64_t>(1, static_cast<uint64_t>(std::ldexp(std::pow(r + 1.0, -skew), 40)));
        std::vector<uint64_t> weight(static_cast<size_t>(n_expert));
        std::vector<size_t> order(static_cast<size_t>(n_expert));
        for (size_t e = 0; e < order.size(); ++e) order[e] = e;
        for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
        for (size_t r = 0; r < order.size(); ++r) weight[order[r]] = weight_of_rank[r];
        popularity.emplace_back(weight);
    }

    std::vector<uint16_t> repeatable;  // the previous token's ids this token has not chosen yet
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
        for (size_t li = 0; li < static_cast<size_t>(n_layers); ++li) {
            uint16_t* ids =
                t.ids.data() + (static_cast<size_t>(tok) * t.layers.size() + li) * static_cast<size_t>(k);
            const uint16_t* previous = tok > 0 ? t.at(tok - 1, li) : nullptr;
            repeatable.clear();
            if (previous) repeatable.assign(previous, previous + k);
            WeightTree& tree = popularity[li];
            for (int64_t j = 0; j < k; ++j) {
                uint16_t id;
                if (previous && rng.unit() < reuse) {
                    // At least k - j of the previous token's k ids are still unchosen.
                    id = repeatable[static_cast<size_t>(rng.below(repeatable.size()))];
                } else {
                    id = static_cast<uint16_t>(tree.find(rng.below(tree.total())));
                }
                ids[j] = id;
                tree.remove(id);
                repeatable.erase(std::remove(repeatable.begin(), repeatable.end(), id), repeatable.end());
            }
            for (int64_t j = 0; j < k; ++j) tree.restore(ids[j]);
        }
    }
    return t;
}

}  // namespace mox::place
