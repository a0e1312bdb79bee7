#include "place/cache_policies.h"

#include "core/error.h"
#include "place/indexed_heap.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <utility>

namespace mox::place {

namespace {

using models::ExpertCachePolicy;
using models::ExpertKey;

// Least recently used: residents ordered by the access counter at their last selection. A miss is
// admitted when it is among the `slots` most recently used keys, i.e. more recent than the victim:
// then the pool after each token holds exactly the most recently used keys, as the LRU stack does.
class LruPolicy final : public ExpertCachePolicy {
public:
    explicit LruPolicy(std::string name) : name_(std::move(name)) {}

    std::string name() const override { return name_; }
    void reset(int64_t slots, int64_t n_keys) override {
        slots_ = slots;
        clock_ = 0;
        last_use_.assign(static_cast<size_t>(n_keys), -1);
        residents_.reset(n_keys);
    }
    void access(ExpertKey key, bool /*resident*/) override {
        MOX_CHECK(key >= 0 && key < static_cast<int64_t>(last_use_.size()), "key {} out of range", key);
        last_use_[static_cast<size_t>(key)] = clock_++;
        if (residents_.contains(key)) residents_.update(key, last_use_[static_cast<size_t>(key)]);
    }
    void end_token() override {}
    bool admit(ExpertKey key) override {
        if (residents_.size() < slots_) return true;
        return !residents_.empty() &&
               last_use_[static_cast<size_t>(key)] > residents_.priority(residents_.top());
    }
    ExpertKey victim() override { return residents_.top(); }
    void admitted(ExpertKey key) override { residents_.push(key, last_use_[static_cast<size_t>(key)]); }
    void evicted(ExpertKey key) override { residents_.erase(key); }

    bool holds(ExpertKey key) const { return residents_.contains(key); }
    int64_t resident_count() const { return residents_.size(); }

private:
    std::string name_;
    int64_t slots_ = 0;
    int64_t clock_ = 0;                  // selections so far
    std::vector<int64_t> last_use_;      // [n_keys] clock_ at the key's last selection, -1: never
    IndexedMinHeap<int64_t> residents_;  // by last use: the top is the least recently used
};

// A decayed selection count, kept as log2 of the count scaled by 2^(token / half-life) ("forward
// decay"): every count decays by the same factor, so the order never changes with time, nothing
// is rescaled per token, and the log keeps the growing scale in range.
struct FrequencyRank {
    double log2_count = -std::numeric_limits<double>::infinity();
    int64_t last_use = -1;  // ties go to the more recently used key
    bool operator<(const FrequencyRank& o) const {
        return log2_count != o.log2_count ? log2_count < o.log2_count : last_use < o.last_use;
    }
};

// log2(2^a + 2^b) without leaving the double range.
double log2_sum(double a, double b) {
    if (std::isinf(a)) return b;
    const double high = std::max(a, b), low = std::min(a, b);
    return high + std::log1p(std::exp2(low - high)) / std::numbers::ln2;
}

class LfuPolicy final : public ExpertCachePolicy {
public:
    LfuPolicy(std::string name, double half_life_tokens)
        : name_(std::move(name)), half_life_(half_life_tokens) {}

    std::string name() const override { return name_; }
    void reset(int64_t slots, int64_t n_keys) override {
        slots_ = slots;
        clock_ = 0;
        token_ = 0;
        rank_.assign(static_cast<size_t>(n_keys), FrequencyRank{});
        residents_.reset(n_keys);
    }
    void access(ExpertKey key, bool /*resident*/) override {
        MOX_CHECK(key >= 0 && key < static_cast<int64_t>(rank_.size()), "key {} out of range", key);
        FrequencyRank& r = rank_[static_cast<size_t>(key)];
        // One selection now weighs 2^(token / half-life) on the common forward-decayed scale.
        const double log2_weight = half_life_ > 0 ? static_cast<double>(token_) / half_life_ : 0.0;
        r.log2_count = log2_sum(r.log2_count, log2_weight);
        r.last_use = clock_++;
        if (residents_.contains(key)) residents_.update(key, r);
    }
    void end_token() override { ++token_; }
    bool admit(ExpertKey key) override {
        if (residents_.size() < slots_) return true;
        return !residents_.empty() && residents_.priority(residents_.top()) < rank_[static_cast<size_t>(key)];
    }
    ExpertKey victim() override { return residents_.top(); }
    void admitted(ExpertKey key) override { residents_.push(key, rank_[static_cast<size_t>(key)]); }
    void evicted(ExpertKey key) override { residents_.erase(key); }

private:
    std::string name_;
    double half_life_;  // tokens; 0: no decay
    int64_t slots_ = 0;
    int64_t clock_ = 0, token_ = 0;
    std::vector<FrequencyRank> rank_;  // [n_keys]
    IndexedMinHeap<FrequencyRank> residents_;
};

// A fixed hot set: the most selected keys of a profile, loaded before the first token.
class StaticPolicy final : public ExpertCachePolicy {
public:
    StaticPolicy(std::string name, std::vector<int64_t> profile)
        : name_(std::move(name)), profile_(std::move(profile)) {}

    std::string name() const override { return name_; }
    void reset(int64_t slots, int64_t n_keys) override {
        if (static_cast<int64_t>(profile_.size()) > n_keys)
            fail("cache policy '{}': the profile counts {} experts, the cache has {}", name_, profile_.size(),
                 n_keys);
        std::vector<ExpertKey> used;
        for (size_t key = 0; key < profile_.size(); ++key)
            if (profile_[key] > 0) used.push_back(static_cast<ExpertKey>(key));
        const size_t n_hot = std::min(used.size(), static_cast<size_t>(std::max<int64_t>(slots, 0)));
        std::partial_sort(
            used.begin(), used.begin() + static_cast<std::ptrdiff_t>(n_hot), used.end(),
            [&](ExpertKey a, ExpertKey b) { return count(a) != count(b) ? count(a) > count(b) : a < b; });
        hot_.assign(used.begin(), used.begin() + static_cast<std::ptrdiff_t>(n_hot));
        residents_.reset(n_keys);
    }
    std::vector<ExpertKey> initial() const override { return hot_; }
    void access(ExpertKey, bool) override {}
    void end_token() override {}
    bool admit(ExpertKey) override { return false; }
    // Never needed by the cache (nothing is admitted); the least selected resident, should it ask.
    ExpertKey victim() override { return residents_.top(); }
    void admitted(ExpertKey key) override { residents_.push(key, count(key)); }
    void evicted(ExpertKey key) override { residents_.erase(key); }

private:
    int64_t count(ExpertKey key) const {
        return static_cast<size_t>(key) < profile_.size() ? profile_[static_cast<size_t>(key)] : 0;
    }

    std::string name_;
    std::vector<int64_t> profile_;
    std::vector<ExpertKey> hot_;
    IndexedMinHeap<int64_t> residents_;
};

// LRU that admits only while admissions pay, judged on a shadow: an always-admitting LRU of the
// same size run on the same selections (keys only). Judging the real pool instead would feed back:
// a paused pool keeps its experts longer, so the few it admits look reused.
class AdaptivePolicy final : public ExpertCachePolicy {
public:
    AdaptivePolicy(std::string name, const CachePolicyOptions& o)
        : name_(std::move(name)),
          lru_(name_),
          shadow_(name_),
          min_reuse_(o.adaptive_min_reuse),
          window_(o.adaptive_outcomes) {}

    std::string name() const override { return name_; }
    void reset(int64_t slots, int64_t n_keys) override {
        slots_ = slots;
        lru_.reset(slots, n_keys);
        shadow_.reset(slots, n_keys);
        shadow_missed_.clear();
        awaiting_reuse_.assign(static_cast<size_t>(n_keys), 0);
        outcomes_.assign(static_cast<size_t>(window_), 0);
        n_outcomes_ = 0;
        next_outcome_ = 0;
        reused_in_window_ = 0;
        admitting_ = true;
    }
    void access(ExpertKey key, bool resident) override {
        lru_.access(key, resident);
        const bool shadow_hit = shadow_.holds(key);
        shadow_.access(key, shadow_hit);
        if (!shadow_hit) {
            shadow_missed_.push_back(key);
        } else if (awaiting_reuse_[static_cast<size_t>(key)]) {
            awaiting_reuse_[static_cast<size_t>(key)] = 0;
            record(true);
        }
    }
    void end_token() override {
        lru_.end_token();
        shadow_.end_token();
        // The shadow admits its misses as the cache admits lru's, without a copy limit.
        for (ExpertKey key : shadow_missed_) {
            if (slots_ == 0 || !shadow_.admit(key)) continue;
            if (shadow_.resident_count() == slots_) {
                const ExpertKey v = shadow_.victim();
                if (awaiting_reuse_[static_cast<size_t>(v)]) {
                    awaiting_reuse_[static_cast<size_t>(v)] = 0;
                    record(false);
                }
                shadow_.evicted(v);
            }
            shadow_.admitted(key);
            awaiting_reuse_[static_cast<size_t>(key)] = 1;
        }
        shadow_missed_.clear();
        if (n_outcomes_ == window_)
            admitting_ = static_cast<double>(reused_in_window_) >= min_reuse_ * static_cast<double>(window_);
    }
    bool admit(ExpertKey key) override { return admitting_ && lru_.admit(key); }
    ExpertKey victim() override { return lru_.victim(); }
    void admitted(ExpertKey key) override { lru_.admitted(key); }
    void evicted(ExpertKey key) override { lru_.evicted(key); }

private:
    // One shadow admission's outcome into the sliding window of the last `window_`.
    void record(bool reused) {
        if (n_outcomes_ == window_)
            reused_in_window_ -= outcomes_[static_cast<size_t>(next_outcome_)];
        else
            ++n_outcomes_;
        outcomes_[static_cast<size_t>(next_outcome_)] = reused ? 1 : 0;
        reused_in_window_ += reused ? 1 : 0;
        next_outcome_ = (next_outcome_ + 1) % window_;
    }

    std::string name_;
    LruPolicy lru_;     // the real pool
    LruPolicy shadow_;  // what always admitting would hold
    double min_reuse_;
    int64_t window_;
    int64_t slots_ = 0;
    std::vector<ExpertKey> shadow_missed_;  // the shadow's misses in this token
    std::vector<uint8_t> awaiting_reuse_;   // [n_keys] admitted to the shadow and not hit since
    std::vector<uint8_t> outcomes_;         // ring of the last window_ outcomes, 1: reused
    int64_t n_outcomes_ = 0, next_outcome_ = 0, reused_in_window_ = 0;
    bool admitting_ = true;
};

// Admission after repeated use, around any policy: a key is a candidate once it missed
// `after` times within the last `window` tokens (the token just ended included).
class AdmitAfterMisses final : public ExpertCachePolicy {
public:
    AdmitAfterMisses(std::unique_ptr<ExpertCachePolicy> inner, int64_t after, int64_t window)
        : inner_(std::move(inner)), after_(after), window_(window) {}

    std::string name() const override { return inner_->name(); }
    void reset(int64_t slots, int64_t n_keys) override {
        inner_->reset(slots, n_keys);
        miss_tokens_.assign(static_cast<size_t>(n_keys * after_), kNever);
        oldest_.assign(static_cast<size_t>(n_keys), 0);
        token_ = 0;
    }
    std::vector<ExpertKey> initial() const override { return inner_->initial(); }
    void access(ExpertKey key, bool resident) override {
        inner_->access(key, resident);
        if (resident) return;
        // The ring of this key's last `after_` miss tokens: overwrite the oldest.
        int64_t& oldest = oldest_[static_cast<size_t>(key)];
        miss_tokens_[static_cast<size_t>(key * after_ + oldest)] = token_;
        oldest = (oldest + 1) % after_;
    }
    void end_token() override {
        inner_->end_token();
        ++token_;
    }
    bool admit(ExpertKey key) override {
        const int64_t oldest_miss =
            miss_tokens_[static_cast<size_t>(key * after_ + oldest_[static_cast<size_t>(key)])];
        return oldest_miss >= token_ - window_ && inner_->admit(key);
    }
    ExpertKey victim() override { return inner_->victim(); }
    void admitted(ExpertKey key) override { inner_->admitted(key); }
    void evicted(ExpertKey key) override { inner_->evicted(key); }

private:
    static constexpr int64_t kNever = std::numeric_limits<int64_t>::min() / 2;

    std::unique_ptr<ExpertCachePolicy> inner_;
    int64_t after_, window_;
    std::vector<int64_t> miss_tokens_;  // [n_keys][after_] token of each of the last misses
    std::vector<int64_t> oldest_;       // [n_keys] index of the oldest of them
    int64_t token_ = 0;                 // tokens ended so far
};

// The options each policy takes, by their spec names.
struct PolicyRow {
    const char* name;
    std::vector<std::string_view> options;
};

const std::vector<PolicyRow>& policy_rows() {
    static const std::vector<PolicyRow> rows = {
        {"lru", {"admit", "admit-window"}},
        {"lfu", {"half-life", "admit", "admit-window"}},
        {"static", {}},
        {"adaptive", {"reuse", "outcomes", "admit", "admit-window"}},
    };
    return rows;
}

template <typename T>
T parse_number(std::string_view spec, std::string_view option, std::string_view text) {
    T value{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size())
        fail("cache policy '{}': {}={} is not a number", spec, option, text);
    return value;
}

void set_option(std::string_view spec, std::string_view option, std::string_view text,
                CachePolicyOptions& o) {
    auto at_least = [&](int64_t v, int64_t min) {
        if (v < min) fail("cache policy '{}': {} must be at least {} (got {})", spec, option, min, v);
        return v;
    };
    if (option == "half-life") {
        o.half_life_tokens = parse_number<double>(spec, option, text);
        if (!(o.half_life_tokens >= 0))
            fail("cache policy '{}': half-life must be >= 0 tokens (0: no decay)", spec);
    } else if (option == "admit") {
        o.admit_after_misses = at_least(parse_number<int64_t>(spec, option, text), 1);
    } else if (option == "admit-window") {
        o.admit_window_tokens = at_least(parse_number<int64_t>(spec, option, text), 1);
    } else if (option == "reuse") {
        o.adaptive_min_reuse = parse_number<double>(spec, option, text);
        if (!(o.adaptive_min_reuse >= 0 && o.adaptive_min_reuse <= 1))
            fail("cache policy '{}': reuse must be a fraction in [0, 1]", spec);
    } else if (option == "outcomes") {
        o.adaptive_outcomes = at_least(parse_number<int64_t>(spec, option, text), 1);
    }
}

std::string join(const std::vector<std::string_view>& items) {
    std::string out;
    for (std::string_view item : items) out += (out.empty() ? "" : ", ") + std::string(item);
    return out;
}

}  // namespace

std::string known_cache_policies() {
    std::vector<std::string_view> names;
    for (const PolicyRow& row : policy_rows()) names.push_back(row.name);
    return join(names);
}

std::unique_ptr<models::ExpertCachePolicy> make_cache_policy(std::string_view spec,
                                                             const CachePolicyOptions& defaults) {
    const std::string_view name = spec.substr(0, spec.find(':'));
    const auto row = std::find_if(policy_rows().begin(), policy_rows().end(),
                                  [&](const PolicyRow& r) { return r.name == name; });
    if (row == policy_rows().end())
        fail("unknown cache policy '{}' (known: {}; options follow ':', e.g. lru:admit=2)", spec,
             known_cache_policies());

    CachePolicyOptions o = defaults;
    for (size_t at = name.size(); at < spec.size();) {
        const size_t end = std::min(spec.find(':', at + 1), spec.size());
        const std::string_view option = spec.substr(at + 1, end - at - 1);
        const size_t equals = option.find('=');
        const std::string_view key = option.substr(0, equals);
        if (std::find(row->options.begin(), row->options.end(), key) == row->options.end())
            fail("cache policy '{}': unknown option '{}' ({} takes {})", spec, key, row->name,
                 row->options.empty() ? std::string("none") : join(row->options));
        if (equals == std::string_view::npos)
            fail("cache policy '{}': option '{}' needs a value ({}=VALUE)", spec, key, key);
        set_option(spec, key, option.substr(equals + 1), o);
        at = end;
    }

    std::unique_ptr<models::ExpertCachePolicy> policy;
    const std::string label(spec);
    if (name == "lru") {
        policy = std::make_unique<LruPolicy>(label);
    } else if (name == "lfu") {
        policy = std::make_unique<LfuPolicy>(label, o.half_life_tokens);
    } else if (name == "adaptive") {
        policy = std::make_unique<AdaptivePolicy>(label, o);
    } else {
        if (o.profile.empty())
            fail("cache policy '{}' needs a profile (selections per expert, e.g. counted on a trace)", spec);
        return std::make_unique<StaticPolicy>(label, o.profile);
    }
    if (o.admit_after_misses > 1)
        policy = std::make_unique<AdmitAfterMisses>(std::move(policy), o.admit_after_misses,
                                                    o.admit_window_tokens);
    return policy;
}

}  // namespace mox::place
