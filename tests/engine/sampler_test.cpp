#include "engine/sampler.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace mox::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Parameters with every truncation stage off, so a test turns on only what it checks.
SamplerParams plain(float temperature = 1.0f) {
    SamplerParams p;
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

std::set<int32_t> ids_of(const std::vector<Candidate>& c) {
    std::set<int32_t> s;
    for (const Candidate& x : c) s.insert(x.id);
    return s;
}

// logits = log(p) so the softmax at temperature 1 is exactly the given distribution (up to
// rounding), which makes top-p / min-p sets easy to compute by hand.
std::vector<float> log_probs(const std::vector<double>& p) {
    std::vector<float> l;
    for (double x : p) l.push_back(float(std::log(x)));
    return l;
}

// Pearson's chi-square of observed counts against expected probabilities.
double chi_square(const std::map<int32_t, int>& counts, const std::map<int32_t, double>& expected, int n) {
    double chi = 0.0;
    for (const auto& [id, prob] : expected) {
        const double e = prob * n;
        const auto it = counts.find(id);
        const double o = it == counts.end() ? 0.0 : it->second;
        chi += (o - e) * (o - e) / e;
    }
    return chi;
}

TEST(Sampler, GreedyPicksArgMaxAndLowestIdOnTies) {
    Sampler s(plain(0.0f));
    const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
    EXPECT_EQ(s.sample(logits, {}), 1);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(logits, {}), 1);
    const auto c = s.candidates(logits, {});
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].id, 1);
    EXPECT_EQ(c[0].logit, 3.0f);
}

TEST(Sampler, NegativeTemperatureIsGreedyToo) {
    SamplerParams p = plain(-1.0f);
    p.top_k = 1000;  // truncation settings are irrelevant when greedy
    Sampler s(p);
    EXPECT_EQ(s.sample(std::vector<float>{0.0f, 0.1f, 0.05f}, {}), 1);
}

TEST(Sampler, GreedySeesPenalties) {
    SamplerParams p = plain(0.0f);
    p.repetition_penalty = 4.0f;
    Sampler s(p);
    const std::vector<float> logits = {2.0f, 1.0f, 0.0f};
    EXPECT_EQ(s.sample(logits, {}), 0);
    const std::vector<int32_t> hist = {0};  // 2 / 4 = 0.5 < 1
    EXPECT_EQ(s.sample(logits, hist), 1);
}

TEST(Sampler, OnlyFiniteTokenIsAlwaysChosen) {
    std::vector<float> logits(1000, kNegInf);
    logits[777] = -50.0f;
    for (float temp : {0.0f, 0.5f, 1.0f, 3.0f}) {
        SamplerParams p;  // library defaults: top-k 40, top-p 0.95, min-p 0.05
        p.temperature = temp;
        p.seed = 7;
        p.min_keep = 5;  // cannot keep more than the one finite token
        Sampler s(p);
        for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits, {}), 777);
        EXPECT_EQ(s.candidates(logits, {}).size(), 1u);
    }
}

TEST(Sampler, BadLogitsAreClearErrors) {
    Sampler s(plain());
    EXPECT_THROW(s.sample(std::vector<float>{}, {}), Error);
    EXPECT_THROW(s.sample(std::vector<float>{0.0f, std::nanf(""), 1.0f}, {}), Error);
    EXPECT_THROW(s.sample(std::vector<float>{0.0f, std::numeric_limits<float>::infinity()}, {}), Error);
    EXPECT_THROW(s.sample(std::vector<float>{kNegInf, kNegInf}, {}), Error);
    SamplerParams p = plain();
    p.repetition_penalty = 1.1f;
    Sampler with_pen(p);
    const std::vector<int32_t> bad_hist = {0, 5};
    EXPECT_THROW(with_pen.sample(std::vector<float>{0.0f, 1.0f}, bad_hist), Error);
    try {
        s.sample(std::vector<float>{0.0f, std::nanf("")}, {});
        FAIL() << "no throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("token 1"), std::string::npos) << e.what();
    }
}

TEST(Sampler, BadParamsAreRejected) {
    auto make = [](auto edit) {
        SamplerParams p;
        edit(p);
        return Sampler(p);
    };
    EXPECT_THROW(make([](SamplerParams& p) { p.temperature = std::nanf(""); }), Error);
    EXPECT_THROW(make([](SamplerParams& p) { p.top_p = -0.1f; }), Error);
    EXPECT_THROW(make([](SamplerParams& p) { p.min_p = 1.5f; }), Error);
    EXPECT_THROW(make([](SamplerParams& p) { p.repetition_penalty = 0.0f; }), Error);
    EXPECT_THROW(make([](SamplerParams& p) { p.frequency_penalty = INFINITY; }), Error);
    EXPECT_THROW(make([](SamplerParams& p) { p.penalty_last_n = -2; }), Error);
    EXPECT_THROW(make([](SamplerParams& p) { p.min_keep = 0; }), Error);
}

TEST(Sampler, TopKKeepsTheKLargestWithIdTieBreak) {
    SamplerParams p = plain();
    p.top_k = 2;
    Sampler s(p);
    const std::vector<float> logits = {1.0f, 5.0f, 3.0f, 5.0f, 2.0f};
    EXPECT_EQ(ids_of(s.candidates(logits, {})), (std::set<int32_t>{1, 3}));
    Sampler s3([] {
        SamplerParams q = plain();
        q.top_k = 3;
        return q;
    }());
    const auto c = s3.candidates(logits, {});
    ASSERT_EQ(c.size(), 3u);
    // Sorted descending, ties by id.
    EXPECT_EQ(c[0].id, 1);
    EXPECT_EQ(c[1].id, 3);
    EXPECT_EQ(c[2].id, 2);
    // A tie straddling the boundary keeps the lower ids.
    EXPECT_EQ(ids_of(s.candidates(std::vector<float>{3.0f, 3.0f, 3.0f, 1.0f}, {})),
              (std::set<int32_t>{0, 1}));
}

TEST(Sampler, TopPKeepsSmallestHeadReachingP) {
    // Probabilities 0.5, 0.3, 0.15, 0.05 placed at ids 2, 0, 3, 1.
    const std::vector<float> logits = log_probs({0.3, 0.05, 0.5, 0.15});
    auto set_for = [&](float top_p, int top_k = 0) {
        SamplerParams p = plain();
        p.top_p = top_p;
        p.top_k = top_k;
        return ids_of(Sampler(p).candidates(logits, {}));
    };
    EXPECT_EQ(set_for(0.4f), (std::set<int32_t>{2}));            // 0.5 >= 0.4
    EXPECT_EQ(set_for(0.7f), (std::set<int32_t>{2, 0}));         // 0.5 < 0.7 <= 0.8
    EXPECT_EQ(set_for(0.83f), (std::set<int32_t>{2, 0, 3}));     // 0.8 < 0.83 <= 0.95
    EXPECT_EQ(set_for(0.96f), (std::set<int32_t>{2, 0, 3, 1}));  // needs everything
    EXPECT_EQ(set_for(0.0f), (std::set<int32_t>{2}));            // min_keep = 1
    // After top-k 3 the mass renormalises to 0.526, 0.316, 0.158: 0.83 is reached by two tokens.
    EXPECT_EQ(set_for(0.83f, 3), (std::set<int32_t>{2, 0}));
}

TEST(Sampler, MinPKeepsTokensAboveFractionOfMax) {
    const std::vector<float> logits = log_probs({0.3, 0.05, 0.5, 0.15});
    auto set_for = [&](float min_p, int top_k = 0) {
        SamplerParams p = plain();
        p.min_p = min_p;
        p.top_k = top_k;
        return ids_of(Sampler(p).candidates(logits, {}));
    };
    EXPECT_EQ(set_for(0.2f), (std::set<int32_t>{2, 0, 3}));  // threshold 0.10
    EXPECT_EQ(set_for(0.35f), (std::set<int32_t>{2, 0}));    // threshold 0.175
    EXPECT_EQ(set_for(0.9f), (std::set<int32_t>{2}));        // threshold 0.45
    EXPECT_EQ(set_for(0.05f), (std::set<int32_t>{2, 0, 3, 1}));
    EXPECT_EQ(set_for(0.2f, 4), (std::set<int32_t>{2, 0, 3}));  // same on the sorted path
}

TEST(Sampler, MinKeepOverridesTruncation) {
    const std::vector<float> logits = log_probs({0.3, 0.05, 0.5, 0.15});
    SamplerParams p = plain();
    p.min_keep = 3;
    p.top_k = 1;
    EXPECT_EQ(Sampler(p).candidates(logits, {}).size(), 3u);
    p.top_k = 0;
    p.top_p = 0.1f;
    EXPECT_EQ(Sampler(p).candidates(logits, {}).size(), 3u);
    p.top_p = 1.0f;
    p.min_p = 0.99f;
    EXPECT_EQ(ids_of(Sampler(p).candidates(logits, {})), (std::set<int32_t>{2, 0, 3}));
}

TEST(Sampler, TemperatureDividesSurvivingLogits) {
    SamplerParams p = plain(0.5f);
    const auto c = Sampler(p).candidates(std::vector<float>{1.0f, -3.0f, 2.5f}, {});
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ(c[0].id, 2);
    EXPECT_FLOAT_EQ(c[0].logit, 5.0f);
    EXPECT_FLOAT_EQ(c[1].logit, 2.0f);
    EXPECT_FLOAT_EQ(c[2].logit, -6.0f);
}

TEST(Sampler, PenaltyArithmetic) {
    SamplerParams p = plain();
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    const std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    const std::vector<int32_t> hist = {0, 1, 0, 3, 4};
    auto by_id = [](const std::vector<Candidate>& c) {
        std::map<int32_t, float> m;
        for (const Candidate& x : c) m[x.id] = x.logit;
        return m;
    };
    // Whole history: token 0 seen twice, 1, 3, 4 once, 2 never.
    auto m = by_id(Sampler(p).candidates(logits, hist));
    EXPECT_FLOAT_EQ(m[0], 2.0f / 2.0f - (2 * 0.5f + 0.25f));  // -0.25
    EXPECT_FLOAT_EQ(m[1], -2.0f * 2.0f - (0.5f + 0.25f));     // -4.75
    EXPECT_FLOAT_EQ(m[2], 1.0f);
    EXPECT_FLOAT_EQ(m[3], 0.5f / 2.0f - 0.75f);  // -0.5
    EXPECT_FLOAT_EQ(m[4], 0.0f - 0.75f);         // zero is neither divided nor multiplied
    // Window of the last 2 tokens {3, 4}: tokens 0 and 1 are untouched.
    p.penalty_last_n = 2;
    m = by_id(Sampler(p).candidates(logits, hist));
    EXPECT_FLOAT_EQ(m[0], 2.0f);
    EXPECT_FLOAT_EQ(m[1], -2.0f);
    EXPECT_FLOAT_EQ(m[3], -0.5f);
    // Window 0: penalties off.
    p.penalty_last_n = 0;
    m = by_id(Sampler(p).candidates(logits, hist));
    EXPECT_FLOAT_EQ(m[0], 2.0f);
    EXPECT_FLOAT_EQ(m[4], 0.0f);
    // Negative presence/frequency (OpenAI allows them) make repeats more likely.
    SamplerParams q = plain();
    q.presence_penalty = -1.0f;
    m = by_id(Sampler(q).candidates(logits, hist));
    EXPECT_FLOAT_EQ(m[2], 1.0f);
    EXPECT_FLOAT_EQ(m[3], 1.5f);
}

TEST(Sampler, SameSeedSameTokens) {
    std::mt19937 gen(99);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> logits(5000);
    for (float& x : logits) x = nd(gen);
    SamplerParams p;  // defaults: top-k 40, top-p 0.95, min-p 0.05, temperature 0.8
    p.seed = 42;
    p.repetition_penalty = 1.1f;
    auto run = [&](uint64_t seed) {
        SamplerParams q = p;
        q.seed = seed;
        Sampler s(q);
        std::vector<int32_t> out;
        for (int i = 0; i < 300; ++i) out.push_back(s.sample(logits, out));
        return out;
    };
    const auto a = run(42), b = run(42), c = run(43);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    // reseed() restarts the same stream.
    Sampler s(p);
    const int32_t first = s.sample(logits, {});
    s.sample(logits, {});
    s.reseed(42);
    EXPECT_EQ(s.sample(logits, {}), first);
}

TEST(Sampler, UniformDrawsStayInUnitInterval) {
    Sampler s(plain());
    double lo = 1.0, hi = 0.0, sum = 0.0;
    const int n = 100000;
    for (int i = 0; i < n; ++i) {
        const double u = s.next_uniform();
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        lo = std::min(lo, u);
        hi = std::max(hi, u);
        sum += u;
    }
    EXPECT_LT(lo, 1e-3);
    EXPECT_GT(hi, 1.0 - 1e-3);
    EXPECT_NEAR(sum / n, 0.5, 0.005);  // sd of the mean is 0.0009
}

// 10^5 draws against probabilities computed here from the definition: softmax(logit / T) over the
// top-k survivors. Critical values are chi-square at p = 0.001.
TEST(Sampler, DrawsFollowTemperatureSoftmaxOverTopK) {
    const std::vector<float> logits = {0.3f, 2.0f, -1.0f, 1.1f, 0.0f, 1.7f, -0.4f, 0.9f};
    SamplerParams p = plain(0.7f);
    p.top_k = 6;  // drops ids 2 (-1.0) and 6 (-0.4)
    p.seed = 2024;
    Sampler s(p);
    const int n = 100000;
    std::map<int32_t, int> counts;
    for (int i = 0; i < n; ++i) counts[s.sample(logits, {})]++;
    EXPECT_EQ(counts.count(2), 0u);
    EXPECT_EQ(counts.count(6), 0u);
    std::map<int32_t, double> expected;
    double z = 0.0;
    for (int32_t id : {0, 1, 3, 4, 5, 7}) z += std::exp(double(logits[size_t(id)]) / 0.7);
    for (int32_t id : {0, 1, 3, 4, 5, 7}) expected[id] = std::exp(double(logits[size_t(id)]) / 0.7) / z;
    EXPECT_LT(chi_square(counts, expected, n), 20.52);  // 5 degrees of freedom
}

TEST(Sampler, DrawsFollowPenalizedTopPDistribution) {
    // 0.4, 0.25, 0.2, 0.1, 0.05 at ids 0..4; token 0 repeated once with presence 1.0 lowers its
    // logit by 1; then top-p 0.8 at temperature 1.
    std::vector<float> logits = log_probs({0.4, 0.25, 0.2, 0.1, 0.05});
    SamplerParams p = plain();
    p.presence_penalty = 1.0f;
    p.top_p = 0.8f;
    p.seed = 5;
    Sampler s(p);
    const std::vector<int32_t> hist = {0};
    std::vector<double> w = {0.4 * std::exp(-1.0), 0.25, 0.2, 0.1, 0.05};
    const double tot = w[0] + w[1] + w[2] + w[3] + w[4];
    // Sorted masses 0.25, 0.2, 0.147, 0.1, 0.05 (over tot = 0.747): cumulative 0.335, 0.602, 0.799,
    // 0.933, so top-p 0.8 keeps four tokens and drops id 4.
    std::vector<int32_t> order = {1, 2, 0, 3, 4};
    double cum = 0.0;
    std::map<int32_t, double> expected;
    for (int32_t id : order) {
        cum += w[size_t(id)] / tot;
        expected[id] = w[size_t(id)];
        if (cum >= 0.8) break;
    }
    ASSERT_EQ(expected.size(), 4u);
    double z = 0.0;
    for (auto& [id, v] : expected) z += v;
    for (auto& [id, v] : expected) v /= z;
    EXPECT_EQ(ids_of(s.candidates(logits, hist)).size(), expected.size());
    const int n = 100000;
    std::map<int32_t, int> counts;
    for (int i = 0; i < n; ++i) counts[s.sample(logits, hist)]++;
    for (const auto& [id, c] : counts) EXPECT_TRUE(expected.count(id)) << "drew truncated token " << id;
    EXPECT_LT(chi_square(counts, expected, n), 16.27);  // 3 degrees of freedom
}

// A straightforward reference over a full sort, to check the selection shortcuts on a real-size
// vocabulary (nth_element for top-k, growing partial sorts for top-p).
std::vector<int32_t> reference_set(const std::vector<float>& logits, int top_k, float top_p, float min_p) {
    std::vector<Candidate> all;
    for (size_t i = 0; i < logits.size(); ++i) all.push_back({int32_t(i), logits[i]});
    std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
        return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
    });
    if (top_k > 0 && size_t(top_k) < all.size()) all.resize(size_t(top_k));
    if (top_p < 1.0f) {
        double total = 0.0;
        for (const Candidate& c : all) total += std::exp(double(c.logit) - all[0].logit);
        double cum = 0.0;
        for (size_t i = 0; i < all.size(); ++i) {
            cum += std::exp(double(all[i].logit) - all[0].logit) / total;
            if (cum >= double(top_p)) {
                all.resize(i + 1);
                break;
            }
        }
    }
    if (min_p > 0.0f) {
        const double thr = double(all[0].logit) + std::log(double(min_p));
        size_t k = 0;
        while (k < all.size() && double(all[k].logit) >= thr) ++k;
        all.resize(std::max<size_t>(k, 1));
    }
    std::vector<int32_t> ids;
    for (const Candidate& c : all) ids.push_back(c.id);
    return ids;
}

TEST(Sampler, FullVocabularyMatchesFullSortReference) {
    const size_t n_vocab = 248320;
    std::mt19937 gen(3);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> peaked(n_vocab), flat(n_vocab, 0.25f);
    for (float& x : peaked) x = nd(gen);
    for (size_t i = 0; i < n_vocab; i += 1000) flat[i] = 0.5f;  // a few bumps on a flat floor
    struct Case {
        const std::vector<float>* logits;
        int top_k;
        float top_p, min_p;
    };
    const Case cases[] = {{&peaked, 40, 0.95f, 0.05f}, {&peaked, 0, 0.9f, 0.0f}, {&peaked, 0, 0.0f, 0.01f},
                          {&peaked, 1000, 1.0f, 0.0f}, {&flat, 0, 0.95f, 0.0f},  {&flat, 0, 1.0f, 0.9f},
                          {&flat, 50, 0.5f, 0.0f}};
    for (const Case& c : cases) {
        SamplerParams p = plain();
        p.top_k = c.top_k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        Sampler s(p);
        const auto got = s.candidates(*c.logits, {});
        std::vector<int32_t> got_ids;
        for (const Candidate& x : got) got_ids.push_back(x.id);
        const auto want = reference_set(*c.logits, c.top_k, c.top_p, c.min_p);
        EXPECT_EQ(got_ids, want) << "top_k=" << c.top_k << " top_p=" << c.top_p << " min_p=" << c.min_p;
        const int32_t tok = s.sample(*c.logits, {});
        EXPECT_TRUE(std::find(want.begin(), want.end(), tok) != want.end());
    }
}

// The top-k selection reads the logits in blocks of 64 and skips blocks whose maximum cannot enter
// the kept set. Against a plain reference (penalize a copy, sort everything, keep k): vocabularies
// that are not a multiple of 64, ties between blocks (equal logits: the lowest ids win), -inf
// blocks, and penalties that raise a low block's logit above every other block's maximum.
std::vector<Candidate> reference_top_k(std::vector<float> l, const std::vector<int32_t>& history, float rep,
                                       size_t k) {
    std::map<int32_t, int> count;
    for (int32_t id : history) count[id]++;
    for (const auto& [id, c] : count) {
        float& x = l[size_t(id)];
        x = x > 0.0f ? x / rep : x * rep;
    }
    std::vector<Candidate> all;
    for (size_t i = 0; i < l.size(); ++i)
        if (l[i] != kNegInf) all.push_back({int32_t(i), l[i]});
    std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
        return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
    });
    all.resize(std::min(k, all.size()));
    return all;
}

TEST(Sampler, BlockedSelectionEqualsTheReference) {
    std::mt19937 rng(77);
    for (size_t n : {1u, 63u, 64u, 65u, 1000u, 248320u}) {
        for (int trial = 0; trial < 3; ++trial) {
            std::vector<float> l(n);
            std::normal_distribution<float> d(0.0f, 2.0f);
            for (float& x : l) x = trial == 2 ? std::round(d(rng)) : d(rng);  // trial 2: many ties
            if (n > 200) {
                for (size_t i = 64; i < 128; ++i) l[i] = kNegInf;  // a whole block at -inf
                l[n - 1] = l[3];                                   // a tie across blocks
            }
            std::vector<int32_t> history;
            if (n > 100) history = {int32_t(n - 70), int32_t(n - 70), 5};
            for (float rep : {1.0f, 0.25f}) {  // 0.25: positive logits of the history grow 4x
                for (int k : {1, 40, 1024}) {
                    SamplerParams p = plain();
                    p.top_k = k;
                    p.repetition_penalty = rep;
                    if (!history.empty() && rep != 1.0f) l[size_t(n - 70)] = 3.0f;  // 12 after the penalty
                    Sampler s(p);
                    const std::vector<Candidate> got = s.candidates(l, history);
                    const std::vector<Candidate> want = reference_top_k(l, history, rep, size_t(k));
                    ASSERT_EQ(got.size(), want.size()) << n << " " << trial << " " << k << " " << rep;
                    for (size_t i = 0; i < got.size(); ++i) {
                        ASSERT_EQ(got[i].id, want[i].id)
                            << n << " " << trial << " " << k << " " << rep << " " << i;
                        ASSERT_EQ(got[i].logit, want[i].logit);
                    }
                    // Greedy picks the same first candidate.
                    p.temperature = 0.0f;
                    Sampler g(p);
                    EXPECT_EQ(g.sample(l, history), want[0].id);
                }
            }
        }
    }
}

TEST(Sampler, FirstBadLogitIsNamedWhateverBlockItSitsIn) {
    std::vector<float> l(1000, 0.5f);
    l[700] = kNegInf;  // allowed; its block is checked value by value
    l[900] = std::numeric_limits<float>::quiet_NaN();
    l[950] = std::numeric_limits<float>::infinity();
    Sampler s(plain());
    try {
        s.sample(l, {});
        FAIL() << "NaN accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("token 900"), std::string::npos) << e.what();
    }
    l[900] = 0.5f;
    EXPECT_THROW(s.sample(l, {}), Error);  // +inf at 950
    l[950] = 0.5f;
    l[999] = 1.0f;
    SamplerParams p = plain(0.0f);
    Sampler g(p);
    EXPECT_EQ(g.sample(l, {}), 999);
}

}  // namespace
}  // namespace mox::engine
