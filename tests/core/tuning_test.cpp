#include "core/tuning.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace mox {
namespace {

Tuning read(const std::map<std::string, std::string>& env) {
    return read_tuning([&](const char* name) -> const char* {
        const auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
    });
}

TEST(Tuning, UnsetAndEmptyKeepTheDefaults) {
    const Tuning t = read({{"MOX_SPIN_US", ""}});
    const Tuning d;
    EXPECT_EQ(t.spin_us, d.spin_us);
    EXPECT_EQ(t.cublas_min_tokens, d.cublas_min_tokens);
    EXPECT_EQ(t.attn_short_max_keys, d.attn_short_max_keys);
    EXPECT_EQ(t.matmul_v1, d.matmul_v1);
    EXPECT_EQ(
        format_tuning(t),
        "tuning: spin_us=200 (default) cublas_min_tokens=128 (default) attn_short_max_keys=1024 (default) "
        "matmul_v1=0 (default)");
}

TEST(Tuning, ReadsEachVariable) {
    const Tuning t = read({{"MOX_SPIN_US", "0"},
                           {"MOX_CUDA_CUBLAS_MIN_TOKENS", "4096"},
                           {"MOX_CUDA_ATTN_SHORT_MAX", "256"},
                           {"MOX_MATMUL_V1", "1"}});
    EXPECT_EQ(t.spin_us, 0);
    EXPECT_EQ(t.cublas_min_tokens, 4096);
    EXPECT_EQ(t.attn_short_max_keys, 256);
    EXPECT_TRUE(t.matmul_v1);
    EXPECT_EQ(
        format_tuning(t),
        "tuning: spin_us=0 (MOX_SPIN_US; default 200) cublas_min_tokens=4096 (MOX_CUDA_CUBLAS_MIN_TOKENS; "
        "default 128) attn_short_max_keys=256 (MOX_CUDA_ATTN_SHORT_MAX; default 1024) matmul_v1=1 "
        "(MOX_MATMUL_V1; default 0)");
}

TEST(Tuning, RefusesBadValuesByName) {
    const auto message = [](const char* name, const char* value) {
        try {
            read({{name, value}});
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_EQ(message("MOX_SPIN_US", "abc"), "MOX_SPIN_US=abc: expected microseconds, 0 to 60000000");
    EXPECT_EQ(message("MOX_SPIN_US", "-1"), "MOX_SPIN_US=-1: expected microseconds, 0 to 60000000");
    EXPECT_EQ(message("MOX_SPIN_US", "60000001"),
              "MOX_SPIN_US=60000001: expected microseconds, 0 to 60000000");
    EXPECT_EQ(message("MOX_SPIN_US", " 5"), "MOX_SPIN_US= 5: expected microseconds, 0 to 60000000");
    EXPECT_EQ(message("MOX_SPIN_US", "99999999999999999999"),
              "MOX_SPIN_US=99999999999999999999: expected microseconds, 0 to 60000000");
    // The memory model reserves cuBLAS's scratch from 128 tokens on: the threshold only goes up.
    EXPECT_EQ(message("MOX_CUDA_CUBLAS_MIN_TOKENS", "127"),
              "MOX_CUDA_CUBLAS_MIN_TOKENS=127: expected a token count, 128 to 1000000000");
    EXPECT_EQ(message("MOX_CUDA_CUBLAS_MIN_TOKENS", "128"), "accepted");
    EXPECT_EQ(message("MOX_CUDA_ATTN_SHORT_MAX", "2048"),
              "MOX_CUDA_ATTN_SHORT_MAX=2048: expected 256, 512 or 1024");
    EXPECT_EQ(message("MOX_MATMUL_V1", "true"), "MOX_MATMUL_V1=true: expected 0 or 1");
}

TEST(Tuning, ScopedTuningReplacesTheProcessValuesWhileItLives) {
    const Tuning before = tuning();
    {
        Tuning t = before;
        t.cublas_min_tokens = before.cublas_min_tokens + 1;
        const ScopedTuning scoped(t);
        EXPECT_EQ(tuning().cublas_min_tokens, before.cublas_min_tokens + 1);
    }
    EXPECT_EQ(tuning().cublas_min_tokens, before.cublas_min_tokens);
}

}  // namespace
}  // namespace mox
