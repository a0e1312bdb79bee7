// Hostile input: every truncation of a valid file, random bit flips, and huge declared counts.
// The reader must throw mox::Error (never crash, never another exception) and must not size an
// allocation from an unchecked count. Each input sits in a heap buffer of exactly its size, so a
// sanitizer build catches any read past the end.
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "gguf_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <random>

// ---- allocation probe: the largest single operator new while a probe is active ----
// Replacing the global operator new is the portable way to see allocation sizes; it only records
// while a probe on this thread is active, so other tests are unaffected.
namespace {
thread_local bool g_probe_active = false;
thread_local size_t g_probe_max = 0;

void* probe_alloc(size_t n) {
    if (g_probe_active) g_probe_max = std::max(g_probe_max, n);
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) {
    return probe_alloc(n);
}
void* operator new[](size_t n) {
    return probe_alloc(n);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
    std::free(p);
}

namespace mox::gguf {
namespace {

using test::TempDir;

struct AllocProbe {
    AllocProbe() {
        g_probe_max = 0;
        g_probe_active = true;
    }
    ~AllocProbe() { g_probe_active = false; }
    size_t max() const { return g_probe_max; }
};

// Parses a copy of `bytes` in an exact-size buffer. Returns "" on success, else the error text.
// Any other exception propagates and fails the test.
std::string parse_copy(const uint8_t* data, size_t n, bool check_data = false) {
    std::unique_ptr<uint8_t[]> buf(new uint8_t[n == 0 ? 1 : n]);
    if (n > 0) std::memcpy(buf.get(), data, n);
    ReadOptions options;
    options.check_tensor_data = check_data;
    try {
        File f = File::parse(std::span<const uint8_t>(buf.get(), n), "fuzzed.gguf", options);
        // Touch everything the File exposes.
        size_t sum = 0;
        for (const KeyValue& kv : f.metadata()) sum += kv.value.to_display().size();
        for (const TensorInfo& t : f.tensors())
            for (uint8_t b : t.bytes()) sum += b;
        (void)sum;
        return "";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        EXPECT_NE(msg.find("fuzzed.gguf: "), std::string::npos) << msg;
        return msg.empty() ? "(empty message)" : msg;
    }
}

// A small file with every kind of record: many value types, nested arrays, tensors of several types.
std::vector<uint8_t> small_valid_file(const TempDir& dir) {
    const std::string path = dir.file("small.gguf");
    {
        Writer w(path);
        w.set("general.architecture", Value::string("qwen35moe"));
        w.set("a.u32", Value::u32(7));
        w.set("a.f32", Value::f32(0.5f));
        w.set("a.bool", Value::boolean(true));
        w.set("a.i64", Value::i64(-5));
        w.set("a.tokens", Value::string_array({"x", "yy", "zzz"}));
        w.set("a.nested",
              Value::array(Array{ValueType::array, {Value::i32_array({1, 2}), Value::i32_array({})}}));
        w.set("split.count", Value::u16(1));
        w.add_tensor("w.q8", {32, 2}, quant::TypeId::q8_0);
        w.add_tensor("w.f16", {3}, quant::TypeId::f16);
        w.add_tensor("w.q4k", {256}, quant::TypeId::q4_k);
        w.add_tensor("w.f32", {2, 2}, quant::TypeId::f32);
        w.write_header();
        w.write_data(test::pattern(68 + 6 + 144, 3));
        const float f[4] = {1, 2, 3, 4};
        w.write_data(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(f), sizeof(f)));
        w.finish();
    }
    return test::read_bytes(path);
}

TEST(GgufRobustness, EveryTruncationThrowsUntilTheLastTensorIsComplete) {
    TempDir dir;
    const std::vector<uint8_t> file = small_valid_file(dir);
    const File full = File::parse(file, "full");
    uint64_t needed = 0;  // bytes up to the end of the last tensor's data
    for (const TensorInfo& t : full.tensors()) needed = std::max(needed, t.file_offset + t.n_bytes);
    ASSERT_LT(needed, file.size());  // the trailing padding may go
    for (size_t n = 0; n <= file.size(); ++n) {
        const std::string err = parse_copy(file.data(), n);
        if (n < needed) {
            EXPECT_FALSE(err.empty()) << "prefix of " << n << " bytes parsed";
        } else {
            EXPECT_TRUE(err.empty()) << "prefix of " << n << " bytes: " << err;
        }
    }
}

TEST(GgufRobustness, RandomBitFlipsNeverCrash) {
    TempDir dir;
    const std::vector<uint8_t> file = small_valid_file(dir);
    std::mt19937_64 rng(12345);
    int rejected = 0;
    constexpr int kRounds = 6000;
    for (int round = 0; round < kRounds; ++round) {
        std::vector<uint8_t> m = file;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k) {
            // Mostly the header and infos (where the structure is), sometimes anywhere.
            const size_t limit = (rng() % 4 == 0) ? m.size() : std::min<size_t>(m.size(), 400);
            m[rng() % limit] ^= static_cast<uint8_t>(1u << (rng() % 8));
        }
        if (!parse_copy(m.data(), m.size(), round % 2 == 1).empty()) ++rejected;
    }
    // Sanity: the flips do hit structure (most mutations of the header are errors).
    EXPECT_GT(rejected, kRounds / 10);
}

// A header claiming 2^62 of something, followed by a few bytes.
std::vector<uint8_t> header(uint64_t n_tensors, uint64_t n_kv, const std::vector<uint8_t>& tail) {
    std::vector<uint8_t> out{'G', 'G', 'U', 'F', 3, 0, 0, 0};
    for (uint64_t v : {n_tensors, n_kv})
        for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
    out.insert(out.end(), tail.begin(), tail.end());
    return out;
}

std::vector<uint8_t> le64(uint64_t v) {
    std::vector<uint8_t> out;
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return out;
}

std::vector<uint8_t> kv_prefix(const std::string& key, uint32_t type) {
    std::vector<uint8_t> out = le64(key.size());
    out.insert(out.end(), key.begin(), key.end());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(type >> (8 * i)));
    return out;
}

TEST(GgufRobustness, HugeDeclaredCountsAreRejectedWithoutAllocating) {
    std::vector<std::pair<std::vector<uint8_t>, std::string>> cases;
    const std::vector<uint8_t> pad(64, 0);
    cases.push_back({header(0, uint64_t{1} << 62, pad), "kv_count at byte 16"});
    cases.push_back({header(uint64_t{1} << 62, 0, pad), "tensor_count at byte 8"});
    cases.push_back({header(~0ull, ~0ull, pad), "is negative as int64"});
    // One KV: an array of 2^30 u64 (within ggml's element cap) but only a few bytes follow.
    {
        std::vector<uint8_t> kv = kv_prefix("big", 9);
        kv.insert(kv.end(), {10, 0, 0, 0});  // elem type u64
        auto cnt = le64(uint64_t{1} << 30);
        kv.insert(kv.end(), cnt.begin(), cnt.end());
        kv.insert(kv.end(), pad.begin(), pad.end());
        cases.push_back({header(0, 1, kv), "array count at byte 43: 1073741824 elements of type u64"});
    }
    // A string of length 2^40.
    {
        std::vector<uint8_t> kv = kv_prefix("s", 8);
        auto len = le64(uint64_t{1} << 40);
        kv.insert(kv.end(), len.begin(), len.end());
        kv.insert(kv.end(), pad.begin(), pad.end());
        cases.push_back({header(0, 1, kv), "string length 1099511627776 exceeds the limit"});
    }
    // Arrays of empty arrays: 12 bytes each on disk but a Value each in memory, so the count is
    // bounded by bytes / 12.
    {
        std::vector<uint8_t> kv = kv_prefix("aa", 9);
        kv.insert(kv.end(), {9, 0, 0, 0});
        auto cnt = le64(1000);
        kv.insert(kv.end(), cnt.begin(), cnt.end());
        kv.insert(kv.end(), pad.begin(), pad.end());
        cases.push_back({header(0, 1, kv), "1000 elements of type array need at least 12 bytes each"});
    }
    for (const auto& [bytes, want] : cases) {
        SCOPED_TRACE(want);
        AllocProbe probe;
        const std::string err = parse_copy(bytes.data(), bytes.size());
        const size_t biggest = probe.max();
        EXPECT_NE(err.find(want), std::string::npos) << err;
        EXPECT_LT(biggest, size_t{16} << 10) << "an allocation of " << biggest << " bytes";
    }
}

TEST(GgufRobustness, AllocationsStayProportionalToTheInput) {
    // A legitimate 4096-element u8 array: memory follows the bytes that are really there.
    std::vector<uint8_t> kv = kv_prefix("bytes", 9);
    kv.insert(kv.end(), {0, 0, 0, 0});
    auto cnt = le64(4096);
    kv.insert(kv.end(), cnt.begin(), cnt.end());
    kv.resize(kv.size() + 4096, 0xAB);
    const std::vector<uint8_t> bytes = header(0, 1, kv);
    AllocProbe probe;
    EXPECT_EQ(parse_copy(bytes.data(), bytes.size()), "");
    EXPECT_LT(probe.max(), size_t{4096} * 64);
}

}  // namespace
}  // namespace mox::gguf
