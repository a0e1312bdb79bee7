// mox's quantizers against llama.cpp's own, byte for byte, on fixed rows: tests/data/quant_oracle holds
// 106 rows (Gaussian, heavy-tailed, outliers, constant, zero, tiny, weight-like up to 4096 wide, mixed
// block scales, sparse, one-signed, exact ties, large) and the blocks ggml wrote for each of them with
// ggml_quantize_chunk(type, row, dst, 0, 1, n, NULL) -- llama-quantize's call without an imatrix (Q8_1
// and Q8_K: quantize_row_q8_1_ref / quantize_row_q8_K_ref). tools/quant_oracle/make_quant_oracle.py
// made them; oracle.json says from which llama.cpp, built how.
//
// Every type is byte-identical on every block, with one stated exception: MXFP4 blocks whose largest
// magnitude is below 2^-125 (fp32 subnormals), where ggml casts a negative float exponent to uint8_t
// (undefined; an x86-64 build wraps -4 to 252, a scale of 2^124 that zeroes the block; aarch64 saturates
// it to 0) and mox clamps it to 0. There mox must lose no more than ggml did.
//
// The data must be present: a missing file fails, it never skips.
#include "quant/types.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace mox::quant {
namespace {

const std::filesystem::path kDir = std::filesystem::path(MOX_TEST_DATA_DIR) / "quant_oracle";

struct OracleRow {
    std::string name;
    int64_t n = 0;       // elements
    int64_t offset = 0;  // first element in rows.f32
};

struct Oracle {
    std::vector<float> values;  // every row back to back
    std::vector<OracleRow> rows;
    std::set<std::string> types;  // the types with a <TYPE>.bin
};

std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return {};
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Loads the rows and the manifest; fails (never skips) when they are missing or inconsistent.
const Oracle& oracle() {
    static const Oracle o = [] {
        Oracle r;
        std::ifstream in(kDir / "oracle.json");
        EXPECT_TRUE(in) << (kDir / "oracle.json") << " is missing (tools/quant_oracle/make_quant_oracle.py)";
        if (!in) return r;
        const nlohmann::json j = nlohmann::json::parse(in);
        const std::vector<uint8_t> raw = read_bytes(kDir / j.at("rows_file").get<std::string>());
        EXPECT_EQ(raw.size(), j.at("n_values").get<size_t>() * sizeof(float))
            << "rows.f32 has the wrong size";
        r.values.resize(raw.size() / sizeof(float));
        std::memcpy(r.values.data(), raw.data(), r.values.size() * sizeof(float));
        for (const auto& row : j.at("rows"))
            r.rows.push_back({row.at("name").get<std::string>(), row.at("n").get<int64_t>(),
                              row.at("offset").get<int64_t>()});
        for (const auto& t : j.at("types")) r.types.insert(t.at("name").get<std::string>());
        return r;
    }();
    return o;
}

std::span<const float> row_values(const Oracle& o, const OracleRow& row) {
    return std::span<const float>(o.values).subspan(static_cast<size_t>(row.offset),
                                                    static_cast<size_t>(row.n));
}

// Squared error of one block's dequantization against its source values.
double block_sq_error(const TypeTraits& t, const uint8_t* block, const float* x) {
    std::vector<float> y(static_cast<size_t>(t.block_elems));
    t.dequantize(block, y.data(), t.block_elems);
    double err = 0;
    for (int64_t i = 0; i < t.block_elems; ++i) {
        const double d = static_cast<double>(x[i]) - y[static_cast<size_t>(i)];
        err += d * d;
    }
    return err;
}

std::string hex(const uint8_t* p, size_t n) {
    std::string s;
    char buf[4];
    for (size_t i = 0; i < n; ++i) {
        std::snprintf(buf, sizeof buf, "%02x", p[i]);
        s += buf;
    }
    return s;
}

// A block that is allowed to differ from ggml's, given its source values.
using ExemptFn = bool (*)(const float* x, int64_t n);

struct Comparison {
    int64_t blocks = 0;
    int64_t identical = 0;
    int64_t exempt = 0;        // differing blocks the type's stated exception covers
    int64_t exempt_worse = 0;  // ... where mox's squared error exceeds ggml's
    std::string report;        // the first few differing blocks
};

// Quantizes every oracle row with mox and compares with ggml's bytes block by block.
Comparison compare(TypeId id, ExemptFn exempt = nullptr) {
    const Oracle& o = oracle();
    const TypeTraits& t = traits(id);
    Comparison c;
    const std::string file = std::string(t.name) + ".bin";
    EXPECT_TRUE(o.types.contains(std::string(t.name))) << "oracle.json lists no " << t.name;
    const std::vector<uint8_t> ggml = read_bytes(kDir / file);
    size_t expected_bytes = 0;
    for (const OracleRow& row : o.rows) expected_bytes += row_bytes(id, row.n);
    EXPECT_EQ(ggml.size(), expected_bytes) << file << " is missing or has the wrong size";
    if (ggml.size() != expected_bytes || t.quantize == nullptr) {
        ADD_FAILURE() << t.name << ": nothing to compare";
        return c;
    }

    size_t at = 0;
    int shown = 0;
    for (const OracleRow& row : o.rows) {
        const std::span<const float> x = row_values(o, row);
        std::vector<uint8_t> mine(row_bytes(id, row.n));
        t.quantize(x.data(), mine.data(), row.n);
        for (int64_t b = 0; b < row.n / t.block_elems; ++b, ++c.blocks) {
            const uint8_t* m = mine.data() + static_cast<size_t>(b) * t.block_bytes;
            const uint8_t* g = ggml.data() + at + static_cast<size_t>(b) * t.block_bytes;
            const float* xb = x.data() + b * t.block_elems;
            if (std::memcmp(m, g, t.block_bytes) == 0) {
                ++c.identical;
                continue;
            }
            if (exempt && exempt(xb, t.block_elems)) {
                ++c.exempt;
                if (block_sq_error(t, m, xb) > block_sq_error(t, g, xb)) ++c.exempt_worse;
                continue;
            }
            if (shown++ < 4)
                c.report += "\n  row " + row.name + " block " + std::to_string(b) + "\n    mox  " +
                            hex(m, t.block_bytes) + "\n    ggml " + hex(g, t.block_bytes);
        }
        at += mine.size();
    }
    return c;
}

void expect_byte_identical(TypeId id) {
    const Comparison c = compare(id);
    EXPECT_GT(c.blocks, 0);
    EXPECT_EQ(c.identical, c.blocks) << type_name(id) << ": " << (c.blocks - c.identical) << " of "
                                     << c.blocks << " blocks differ from llama.cpp's" << c.report;
}

TEST(QuantOracle, Q4_0) {
    expect_byte_identical(TypeId::q4_0);
}
TEST(QuantOracle, Q4_1) {
    expect_byte_identical(TypeId::q4_1);
}
TEST(QuantOracle, Q5_0) {
    expect_byte_identical(TypeId::q5_0);
}
TEST(QuantOracle, Q5_1) {
    expect_byte_identical(TypeId::q5_1);
}
TEST(QuantOracle, Q8_0) {
    expect_byte_identical(TypeId::q8_0);
}
TEST(QuantOracle, Q8_1) {
    expect_byte_identical(TypeId::q8_1);
}
TEST(QuantOracle, Q2_K) {
    expect_byte_identical(TypeId::q2_k);
}
TEST(QuantOracle, Q3_K) {
    expect_byte_identical(TypeId::q3_k);
}
TEST(QuantOracle, Q4_K) {
    expect_byte_identical(TypeId::q4_k);
}
TEST(QuantOracle, Q5_K) {
    expect_byte_identical(TypeId::q5_k);
}
TEST(QuantOracle, Q6_K) {
    expect_byte_identical(TypeId::q6_k);
}
TEST(QuantOracle, Q8_K) {
    expect_byte_identical(TypeId::q8_k);
}
TEST(QuantOracle, IQ4_XS) {
    expect_byte_identical(TypeId::iq4_xs);
}
// llama-quantize's IQ4_NL (quantize_iq4_nl: scale search ntry = 7, entries re-picked), which mox
// writes; not ggml's quantize_row_iq4_nl_ref, which differs on 689 of these 1136 blocks.
TEST(QuantOracle, IQ4_NL) {
    expect_byte_identical(TypeId::iq4_nl);
}

// MXFP4: identical except for blocks below 2^-125 (see the file comment). Measured: 1128 of 1136 blocks
// identical; the 8 others are the fp32-subnormal row tiny_6, where ggml stored e = 252..253 (every
// element 0) and mox e = 0, with a smaller error on each.
TEST(QuantOracle, MXFP4) {
    const Comparison c = compare(TypeId::mxfp4, [](const float* x, int64_t n) {
        float amax = 0;
        for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
        return amax < std::ldexp(1.0f, -125);
    });
    EXPECT_EQ(c.identical + c.exempt, c.blocks) << (c.blocks - c.identical - c.exempt) << " of " << c.blocks
                                                << " MXFP4 blocks above 2^-125 differ" << c.report;
    EXPECT_EQ(c.exempt_worse, 0) << "of " << c.exempt << " MXFP4 blocks below 2^-125 that differ, "
                                 << c.exempt_worse << " lose more than ggml's";
    EXPECT_LE(c.exempt, 8) << "more MXFP4 blocks below 2^-125 than the 8 of row tiny_6 differ";
}

// Every type mox can quantize to (apart from the plain floats, compared against gguf-py) is in the oracle,
// and the oracle holds nothing mox cannot quantize: a new quantizer shows up here as a gap.
TEST(QuantOracle, CoversEveryQuantizer) {
    const Oracle& o = oracle();
    std::set<std::string> quantizable;
    for (const TypeTraits& t : all_types())
        if (t.is_quantized && t.quantize) quantizable.insert(std::string(t.name));
    EXPECT_EQ(o.types, quantizable);
    EXPECT_EQ(o.rows.size(), 106u);
    int64_t n = 0;
    for (const OracleRow& row : o.rows) {
        EXPECT_EQ(row.offset, n) << row.name;
        EXPECT_EQ(row.n % 256, 0) << row.name;
        n += row.n;
    }
    EXPECT_EQ(static_cast<size_t>(n), o.values.size());
}

// The oracle's bytes are real quantizations of its rows (a regenerated file with a wrong type or row
// order would fail here before the comparisons mislead): dequantized with mox's reference (itself
// bit-exact with gguf-py), the Gaussian rows come back within the coarsest type's round-trip error.
// Measured relative RMS errors: Q2_K 0.292, Q3_K 0.149, MXFP4 0.110, Q4_0 0.082, the others below.
TEST(QuantOracle, BytesDecodeToTheRows) {
    const Oracle& o = oracle();
    for (const std::string& name : o.types) {
        const TypeTraits& t = traits(*type_from_name(name));
        const std::vector<uint8_t> ggml = read_bytes(kDir / (name + ".bin"));
        double err = 0, ref = 0;
        size_t at = 0;
        for (const OracleRow& row : o.rows) {
            const size_t bytes = row_bytes(t.id, row.n);
            ASSERT_LE(at + bytes, ggml.size()) << name;
            if (row.name.starts_with("gauss_")) {
                const std::span<const float> x = row_values(o, row);
                std::vector<float> y(static_cast<size_t>(row.n));
                t.dequantize(ggml.data() + at, y.data(), row.n);
                for (size_t i = 0; i < y.size(); ++i) {
                    err += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
                    ref += static_cast<double>(x[i]) * x[i];
                }
            }
            at += bytes;
        }
        ASSERT_GT(ref, 0) << name;
        EXPECT_LT(std::sqrt(err / ref), 0.33) << name;
    }
}

}  // namespace
}  // namespace mox::quant
