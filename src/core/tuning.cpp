#include "core/tuning.h"

#include "core/error.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

namespace mox {

namespace {

// The decimal value of `s` if it is digits only (at most 18), else -1.
int64_t parse_count(const char* s) {
    const size_t n = std::strlen(s);
    if (n == 0 || n > 18) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; ++i) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

const char* value_of(const std::function<const char*(const char*)>& get, const char* env) {
    const char* s = get(env);
    return s != nullptr && *s != '\0' ? s : nullptr;
}

Tuning& current() {
    static Tuning t = read_tuning([](const char* name) -> const char* { return std::getenv(name); });
    return t;
}

}  // namespace

Tuning read_tuning(const std::function<const char*(const char*)>& get) {
    Tuning t;
    if (const char* s = value_of(get, "MOX_SPIN_US")) {
        t.spin_us = parse_count(s);
        if (t.spin_us < 0 || t.spin_us > 60'000'000)
            fail("MOX_SPIN_US={}: expected microseconds, 0 to 60000000", s);
    }
    if (const char* s = value_of(get, "MOX_CUDA_CUBLAS_MIN_TOKENS")) {
        t.cublas_min_tokens = parse_count(s);
        if (t.cublas_min_tokens < 128 || t.cublas_min_tokens > 1'000'000'000)
            fail("MOX_CUDA_CUBLAS_MIN_TOKENS={}: expected a token count, 128 to 1000000000", s);
    }
    if (const char* s = value_of(get, "MOX_CUDA_ATTN_SHORT_MAX")) {
        t.attn_short_max_keys = parse_count(s);
        if (t.attn_short_max_keys != 256 && t.attn_short_max_keys != 512 && t.attn_short_max_keys != 1024)
            fail("MOX_CUDA_ATTN_SHORT_MAX={}: expected 256, 512 or 1024", s);
    }
    if (const char* s = value_of(get, "MOX_MATMUL_V1")) {
        if (std::strcmp(s, "0") != 0 && std::strcmp(s, "1") != 0)
            fail("MOX_MATMUL_V1={}: expected 0 or 1", s);
        t.matmul_v1 = s[0] == '1';
    }
    return t;
}

std::vector<TuningField> tuning_fields(const Tuning& t) {
    const Tuning d;
    return {{"spin_us", "MOX_SPIN_US", t.spin_us, d.spin_us},
            {"cublas_min_tokens", "MOX_CUDA_CUBLAS_MIN_TOKENS", t.cublas_min_tokens, d.cublas_min_tokens},
            {"attn_short_max_keys", "MOX_CUDA_ATTN_SHORT_MAX", t.attn_short_max_keys, d.attn_short_max_keys},
            {"matmul_v1", "MOX_MATMUL_V1", t.matmul_v1 ? 1 : 0, d.matmul_v1 ? 1 : 0}};
}

std::string format_tuning(const Tuning& t) {
    std::string s = "tuning:";
    for (const TuningField& f : tuning_fields(t)) {
        if (f.value == f.default_value)
            s += fmt::format(" {}={} (default)", f.name, f.value);
        else
            s += fmt::format(" {}={} ({}; default {})", f.name, f.value, f.env, f.default_value);
    }
    return s;
}

const Tuning& tuning() {
    return current();
}

ScopedTuning::ScopedTuning(const Tuning& t) : previous_(current()) {
    current() = t;
}

ScopedTuning::~ScopedTuning() {
    current() = previous_;
}

}  // namespace mox
