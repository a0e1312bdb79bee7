// The dot-kernel harness: every registered kernel, at every tier this CPU runs,
// against a double-precision reference over the dequantized weight row and the dequantized
// activation row it actually reads, for odd shapes and every tile width 1..kMaxDotCols. Only the
// kernels of tiers this CPU runs (MOX_ISA caps them) become tests; a tier it lacks shows as one
// skipped test, AllTiers/DotKernelTierTest.Dispatch/<tier>, whose message says what went untested.
//
// Two checks per case:
//   exact:  |kernel - ref(dequant(w) . dequant(act))| <= tol_exact * sum|w_i a_i|  (integer dot
//           products are exact; only scale arithmetic and fp32 accumulation round)
//   e2e:    |kernel - ref(dequant(w) . x)| <= tol_e2e * sum|w_i x_i|  (adds the activation
//           quantization error: keeps a kernel honest about the act format it declares)
#include "core/fp16.h"
#include "quant/dot.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace mox::quant {
namespace {

std::string kernel_name(const DotKernel& k) {
    return std::string(type_name(k.weight)) + "_" + std::string(isa_name(k.isa));
}

// Bytes of valid weight data for n elements. Types with a quantizer quantize Gaussian values whose scale
// varies per 32-element group; the grid i-quants (no quantizer) are random bytes with each block's
// fp16 scale set to a sane value (IQ1_M keeps its scale in the top nibbles of its last 8 bytes).
std::vector<uint8_t> make_weight_row(TypeId type, int64_t n, std::mt19937& rng) {
    const TypeTraits& t = traits(type);
    std::vector<uint8_t> row(row_bytes(type, n));
    if (t.quantize) {
        std::normal_distribution<float> gauss(0.0f, 1.0f);
        std::uniform_real_distribution<float> scale(0.05f, 2.0f);
        std::vector<float> x(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; i += 32) {
            const float s = scale(rng);
            for (int64_t j = i; j < std::min(n, i + 32); ++j) x[static_cast<size_t>(j)] = s * gauss(rng);
        }
        t.quantize(x.data(), row.data(), n);
        return row;
    }
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& b : row) b = static_cast<uint8_t>(byte(rng));
    std::uniform_int_distribution<int> d_bits(0x2000, 0x2E00);  // fp16 ~ 0.008 .. 0.09
    const int64_t n_blocks = n / t.block_elems;
    for (int64_t b = 0; b < n_blocks; ++b) {
        uint8_t* block = row.data() + static_cast<size_t>(b) * t.block_bytes;
        const uint16_t d = static_cast<uint16_t>(d_bits(rng));
        if (type == TypeId::iq1_m) {
            // scales[8] are the last 8 bytes; fp16 d = the top nibbles of the four uint16 words.
            uint16_t w[4];
            std::memcpy(w, block + t.block_bytes - 8, 8);
            for (int i = 0; i < 4; ++i) w[i] = static_cast<uint16_t>((w[i] & 0x0FFF) | (((d >> (4 * i)) & 0xF) << 12));
            std::memcpy(block + t.block_bytes - 8, w, 8);
        } else {
            std::memcpy(block, &d, 2);
        }
    }
    return row;
}

std::vector<float> dequantize(TypeId type, const uint8_t* data, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    if (type == TypeId::f32) std::memcpy(out.data(), data, static_cast<size_t>(n) * 4);
    else traits(type).dequantize(data, out.data(), n);
    return out;
}

double tol_exact(const DotKernel&) {
    // Also for Q8_1 activations: the kernels recompute sum q from the quants rather than using the
    // fp16-rounded s, so Q4_1/Q5_1 are as exact as the rest.
    return 2e-5;
}

double tol_e2e(const DotKernel& k) {
    if (k.act == TypeId::f32) return 2e-5;
    return 2e-2;  // 8-bit activations: <= 1/254 of each |x_i| per element, far less on the sum
}

class DotKernelTest : public ::testing::TestWithParam<DotKernel> {};

TEST_P(DotKernelTest, MatchesReference) {
    const DotKernel& k = GetParam();
    const int64_t blk = std::max(traits(k.weight).block_elems, traits(k.act).block_elems);
    std::mt19937 rng(1234 + static_cast<unsigned>(k.weight));
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    // Odd shapes: one block, a few blocks (not a multiple of 256 for 32-blocks), a typical row.
    for (int64_t n : {blk, 3 * blk, 9 * blk, std::max<int64_t>(blk, 4096 / blk * blk), 11 * blk}) {
        const std::vector<uint8_t> w = make_weight_row(k.weight, n, rng);
        const std::vector<float> wf = dequantize(k.weight, w.data(), n);
        const size_t arow = activation_row_bytes(k.act, n);
        const size_t stride = arow + 48;  // rows not back to back: the kernel must honour the stride
        for (int n_cols = 1; n_cols <= kMaxDotCols; ++n_cols) {
            std::vector<float> x(static_cast<size_t>(n * n_cols));
            for (float& v : x) v = gauss(rng);
            // Exactly sized buffer: reading past the last row's end trips ASan.
            std::vector<uint8_t> act((n_cols - 1) * stride + arow);
            for (int j = 0; j < n_cols; ++j) quantize_activations(k.act, x.data() + j * n, act.data() + j * stride, n);
            std::vector<float> out(static_cast<size_t>(n_cols) + 2, 12345.0f);  // guards at both ends
            k.dot(n, w.data(), act.data(), stride, n_cols, out.data() + 1);
            ASSERT_EQ(out.front(), 12345.0f) << kernel_name(k) << " wrote before its output";
            ASSERT_EQ(out.back(), 12345.0f) << kernel_name(k) << " wrote past its output (n_cols " << n_cols << ")";
            for (int j = 0; j < n_cols; ++j) {
                const std::vector<float> af = dequantize(k.act, act.data() + j * stride, n);
                double ref = 0, mag = 0, ref_x = 0, mag_x = 0;
                for (int64_t i = 0; i < n; ++i) {
                    const double wi = wf[static_cast<size_t>(i)];
                    ref += wi * af[static_cast<size_t>(i)];
                    mag += std::fabs(wi * af[static_cast<size_t>(i)]);
                    ref_x += wi * x[static_cast<size_t>(j * n + i)];
                    mag_x += std::fabs(wi * x[static_cast<size_t>(j * n + i)]);
                }
                const double got = out[static_cast<size_t>(j) + 1];
                ASSERT_LE(std::fabs(got - ref), tol_exact(k) * mag + 1e-30)
                    << kernel_name(k) << " n=" << n << " n_cols=" << n_cols << " col " << j << ": " << got << " vs " << ref;
                ASSERT_LE(std::fabs(got - ref_x), tol_e2e(k) * mag_x + 1e-30)
                    << kernel_name(k) << " n=" << n << " col " << j << " end to end: " << got << " vs " << ref_x;
            }
        }
    }
}

TEST_P(DotKernelTest, ZeroWeightsGiveZero) {
    const DotKernel& k = GetParam();
    const int64_t n = std::max<int64_t>(256, traits(k.weight).block_elems);
    std::vector<float> zeros(static_cast<size_t>(n), 0.0f), x(static_cast<size_t>(n * kMaxDotCols), 1.0f);
    std::vector<uint8_t> w(row_bytes(k.weight, n), 0);
    if (traits(k.weight).quantize) traits(k.weight).quantize(zeros.data(), w.data(), n);
    const std::vector<float> wf = dequantize(k.weight, w.data(), n);
    const size_t arow = activation_row_bytes(k.act, n);
    std::vector<uint8_t> act(arow * kMaxDotCols);
    for (int j = 0; j < kMaxDotCols; ++j) quantize_activations(k.act, x.data() + j * n, act.data() + j * arow, n);
    float out[kMaxDotCols];
    k.dot(n, w.data(), act.data(), arow, kMaxDotCols, out);
    double ref = 0;
    for (float v : wf) ref += v;  // all-zero bytes are not zero weights for every format (e.g. IQ grids)
    for (float v : out) EXPECT_NEAR(v, ref, 1e-4 * (std::fabs(ref) + 1)) << kernel_name(k);
}

// The kernels of the tiers this CPU runs.
std::vector<DotKernel> runnable_kernels() {
    std::vector<DotKernel> out;
    for (const DotKernel& k : all_dot_kernels())
        if (k.isa <= host_isa()) out.push_back(k);
    return out;
}

INSTANTIATE_TEST_SUITE_P(AllKernels, DotKernelTest, ::testing::ValuesIn(runnable_kernels()),
                         [](const ::testing::TestParamInfo<DotKernel>& info) {
                             return kernel_name(info.param);
                         });

// One test per tier: where the CPU runs it, every weight type with a kernel of that tier dispatches to
// it (dot_kernel never falls back below a tier that has the kernel); where the CPU lacks it, one skip
// whose message names the tier and how many kernels went untested (scripts/check_skips.py prints it
// in CI's log, tests/expected_gtest_skips.txt allows it).
class DotKernelTierTest : public ::testing::TestWithParam<Isa> {};

TEST_P(DotKernelTierTest, Dispatch) {
    const Isa tier = GetParam();
    std::vector<TypeId> types;
    for (const DotKernel& k : all_dot_kernels())
        if (k.isa == tier) types.push_back(k.weight);
    if (tier > host_isa())
        GTEST_SKIP() << "dot kernels: " << isa_name(tier) << " tier not tested (" << types.size()
                     << " kernels): this CPU runs up to " << isa_name(host_isa())
                     << (std::getenv("MOX_ISA") ? " (MOX_ISA caps it)" : "");
    for (TypeId w : types) {
        EXPECT_EQ(dot_kernel(w, tier).isa, tier) << type_name(w);
        EXPECT_GE(static_cast<int>(dot_kernel(w, host_isa()).isa), static_cast<int>(tier)) << type_name(w);
    }
}

INSTANTIATE_TEST_SUITE_P(AllTiers, DotKernelTierTest, ::testing::Values(Isa::scalar, Isa::avx2, Isa::avx512),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                             return std::string(isa_name(info.param));
                         });

// Every weight type has its reference kernel, every act format can be produced and read back, and the
// table of (type, tier) combinations is printed so a CI log says what exists and what ran here.
TEST(DotKernels, CoverageReport) {
    const auto kernels = all_dot_kernels();
    std::string report = "dot kernels (weight: tiers; * = ran on this CPU, tier " + std::string(isa_name(host_isa())) + ")\n";
    for (const TypeTraits& t : all_types()) {
        if (!t.dequantize || t.id == TypeId::f64) continue;
        bool has_scalar = false;
        std::string line = "  " + std::string(t.name) + ":";
        for (const DotKernel& k : kernels) {
            if (k.weight != t.id) continue;
            has_scalar |= k.isa == Isa::scalar;
            EXPECT_TRUE(k.act == TypeId::f32 || (traits(k.act).quantize && traits(k.act).dequantize)) << kernel_name(k);
            line += " " + std::string(isa_name(k.isa)) + "(" + std::string(type_name(k.act)) + ")" + (k.isa <= host_isa() ? "*" : "");
        }
        EXPECT_TRUE(has_scalar) << t.name << " has no reference kernel";
        report += line + "\n";
    }
    std::printf("%s", report.c_str());
}

}  // namespace
}  // namespace mox::quant
