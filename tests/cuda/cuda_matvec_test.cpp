// CUDA matvec against the CPU reference: weights quantized by the reference quantizer (random
// valid blocks for the grid i-quants, which have none), dequantized by the reference dequantizer,
// dotted in double precision with the activations the kernel uses (8-bit ones for one column of
// the int8 types: kernel_activations.h). Every supported type, odd shapes (one block, odd block counts, n_out
// not a multiple of the rows a block handles), 1..8 columns.
#include "cuda_test_util.h"
#include "kernel_activations.h"
#include "random_blocks.h"

#include "quant/cuda_matvec.h"
#include "quant/types.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace mox::cuda {

namespace {

using quant::TypeId;

const TypeId kTypes[] = {TypeId::f32,    TypeId::f16,     TypeId::bf16,   TypeId::q4_0,   TypeId::q4_1,
                         TypeId::q5_0,   TypeId::q5_1,    TypeId::q8_0,   TypeId::iq4_nl, TypeId::mxfp4,
                         TypeId::q2_k,   TypeId::q3_k,    TypeId::q4_k,   TypeId::q5_k,   TypeId::q6_k,
                         TypeId::iq4_xs, TypeId::iq2_xxs, TypeId::iq2_xs, TypeId::iq2_s,  TypeId::iq3_xxs,
                         TypeId::iq3_s,  TypeId::iq1_s,   TypeId::iq1_m};

// n_out rows of n_in weights of `type`: reference-quantized random values where the type has a
// quantizer, random valid blocks otherwise.
std::vector<uint8_t> make_weights(TypeId type, int64_t n_in, int64_t n_out, uint32_t seed) {
    const auto& tr = quant::traits(type);
    const size_t rb = quant::row_bytes(type, n_in);
    if (tr.quantize == nullptr) return test::random_blocks(type, n_out * (n_in / tr.block_elems), seed, 0.5f);
    auto wf = test::randn(static_cast<size_t>(n_in * n_out), seed);
    // Rows of different magnitude, so per-block scales differ.
    for (int64_t r = 0; r < n_out; ++r)
        for (int64_t i = 0; i < n_in; ++i) wf[r * n_in + i] *= 0.25f + 0.1f * static_cast<float>(r % 7);
    std::vector<uint8_t> wq(rb * n_out);
    for (int64_t r = 0; r < n_out; ++r) tr.quantize(wf.data() + r * n_in, wq.data() + r * rb, n_in);
    return wq;
}

struct Shape {
    int64_t blocks;  // n_in in blocks of the type (n_in itself for float types, see below)
    int64_t n_out;
    int n_cols;
};

// Runs one case and compares each output with the double-precision reference. The tolerance is
// relative to sum |w_i x_i| (fp32 accumulation in another order); a wrongly decoded element moves
// a result by about one such term, far above it for these sizes.
void check_case(TypeId type, int64_t n_in, int64_t n_out, int n_cols, uint32_t seed) {
    const auto& tr = quant::traits(type);
    SCOPED_TRACE(fmt::format("{} n_in={} n_out={} cols={}", tr.name, n_in, n_out, n_cols));
    const size_t rb = quant::row_bytes(type, n_in);
    std::vector<uint8_t> wq = make_weights(type, n_in, n_out, seed);
    std::vector<float> wd(static_cast<size_t>(n_in * n_out));
    for (int64_t r = 0; r < n_out; ++r) tr.dequantize(wq.data() + r * rb, wd.data() + r * n_in, n_in);
    const auto x = test::randn(static_cast<size_t>(n_in * n_cols), seed + 1);

    ops::Weight host{
        .data = wq.data(), .type = type, .n_in = n_in, .n_out = n_out, .n_expert = 1, .row_bytes = rb};
    DeviceWeight dw = upload_weight(host);
    DeviceBuffer dx = test::to_device(x);
    DeviceBuffer dy(static_cast<size_t>(n_out * n_cols) * sizeof(float));
    matvec(type, dw.view.data, rb, n_in, n_out, dx.as<float>(), n_cols, dy.as<float>());
    const auto y = test::to_host<float>(dy, static_cast<size_t>(n_out * n_cols));

    int bad = 0;
    for (int c = 0; c < n_cols; ++c) {
        // matvec runs the columns in chunks of 8, 4, 2, 1: a column alone in its chunk (the last of
        // an odd count) takes the one-column kernel and its activations.
        const bool alone = n_cols % 2 == 1 && c == n_cols - 1;
        const std::vector<double> xk =
            alone ? test::kernel_activations(type, x.data() + c * n_in, n_in)
                  : std::vector<double>(x.begin() + c * n_in, x.begin() + (c + 1) * n_in);
        for (int64_t r = 0; r < n_out; ++r) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n_in; ++i) {
                const double t = static_cast<double>(wd[r * n_in + i]) * xk[static_cast<size_t>(i)];
                ref += t;
                mag += std::fabs(t);
            }
            const double got = y[c * n_out + r];
            // 8-bit activations also stay near the fp32 product (a rule wrong in the kernel and its
            // emulation alike, e.g. a zero scale, would pass the exact check): each x moves by at most
            // amax / 254 of its segment.
            double exact = 0;
            for (int64_t i = 0; i < n_in; ++i)
                exact += static_cast<double>(wd[r * n_in + i]) * x[c * n_in + i];
            if (!(std::fabs(got - exact) <= 2e-2 * mag + 1e-6) && bad++ < 5)
                ADD_FAILURE() << "col " << c << " row " << r << ": got " << got << ", fp32 product " << exact;
            if (!(std::fabs(got - ref) <= 1e-5 * mag + 1e-6) && bad++ < 5)
                ADD_FAILURE() << "col " << c << " row " << r << ": got " << got << ", reference " << ref
                              << " (sum |w x| " << mag << ")";
        }
    }
    EXPECT_EQ(bad, 0);
}

}  // namespace

TEST(CudaMatvec, EveryTypeMatchesReference) {
    MOX_REQUIRE_CUDA_DEVICE();
    const Shape shapes[] = {{1, 1, 1},  {1, 9, 2},  {3, 33, 1}, {5, 130, 3},
                            {8, 17, 8}, {9, 64, 7}, {2, 257, 4}};
    uint32_t seed = 100;
    for (TypeId type : kTypes) {
        ASSERT_TRUE(matvec_supported(type)) << quant::type_name(type);
        const auto& tr = quant::traits(type);
        for (const Shape& s : shapes) {
            // Float types: n_in need not be a multiple of anything; use odd lengths around the blocks.
            const int64_t n_in = tr.is_quantized ? s.blocks * tr.block_elems : s.blocks * 32 + 5;
            check_case(type, n_in, s.n_out, s.n_cols, seed++);
        }
    }
}

TEST(CudaMatvec, ModelSizedRowsMatchReference) {
    MOX_REQUIRE_CUDA_DEVICE();
    // n_embd 2048 in, as Qwen3.5-MoE's projections; 8 columns need 64 KiB of staged activations
    // (the opt-in shared-memory path).
    for (TypeId type : {TypeId::q4_k, TypeId::q6_k, TypeId::q8_0, TypeId::mxfp4, TypeId::iq4_xs, TypeId::q5_1,
                        TypeId::iq2_xxs, TypeId::iq3_s, TypeId::iq1_m}) {
        check_case(type, 2048, 96, 1, 7);
        check_case(type, 2048, 40, 8, 8);
    }
    check_case(TypeId::f32, 2049, 20, 1, 9);
    // Short float matrices of whole segments take the one-warp kernel (the router's 2048 -> 257).
    for (TypeId type : {TypeId::f32, TypeId::f16, TypeId::bf16}) {
        check_case(type, 2048, 257, 1, 13);
        check_case(type, 96, 3, 1, 14);
    }
    // 4096-wide rows: two passes of the batch-1 lanes (the second prefetched during the first).
    check_case(TypeId::q4_k, 4096, 33, 1, 10);
    check_case(TypeId::q6_k, 4096, 17, 1, 11);
    check_case(TypeId::bf16, 4096 + 7, 9, 1, 12);
    // A dense 17408-wide down projection (Qwen3.6-27B): 8 or 4 staged fp32 columns would not fit in
    // shared memory, so the columns run two per launch.
    check_case(TypeId::q4_k, 17408, 24, 8, 15);
    check_case(TypeId::q6_k, 17408, 12, 5, 16);
}

// Host-side facts of the integer path (no device needed: runs in CI's CUDA stage too): which types
// take it, and that their segments cover every element of x exactly once, in groups of 8
// consecutive elements (what stage_x_i8 and the tests' emulation rely on).
TEST(CudaMatvec, Int8SegmentsCoverEveryElementOnce) {
    for (TypeId type : kTypes) {
        const bool integer = type == TypeId::q4_0 || type == TypeId::q8_0 || type == TypeId::q4_k ||
                             type == TypeId::q5_k || type == TypeId::q6_k;
        EXPECT_EQ(int8_activations(type), integer) << quant::type_name(type);
        if (!integer) continue;
        const int64_t n_in = 3 * quant::traits(type).block_elems;
        const std::vector<int64_t> elems = activation_segments(type, n_in);
        ASSERT_EQ(elems.size() % 32, 0u);
        std::vector<int> seen(static_cast<size_t>(n_in), 0);
        for (size_t i = 0; i < elems.size(); ++i) {
            ASSERT_GE(elems[i], 0) << quant::type_name(type);
            ASSERT_LT(elems[i], n_in);
            ++seen[static_cast<size_t>(elems[i])];
            if (i % 8 != 0) {
                EXPECT_EQ(elems[i], elems[i - 1] + 1) << quant::type_name(type) << " value " << i;
            }
        }
        for (int64_t e = 0; e < n_in; ++e)
            EXPECT_EQ(seen[static_cast<size_t>(e)], 1) << quant::type_name(type) << " element " << e;
    }
}

TEST(CudaMatvec, RejectsWhatItCannotDo) {
    MOX_REQUIRE_CUDA_DEVICE();
    EXPECT_FALSE(matvec_supported(TypeId::q8_k));  // an activation format, never a weight
    EXPECT_FALSE(matvec_supported(TypeId::i32));
    DeviceBuffer buf(1024);
    EXPECT_THROW(matvec(TypeId::q8_k, buf.data(), 292, 256, 1, buf.as<float>(), 1, buf.as<float>()), Error);
    // Q4_K rows are whole super-blocks.
    EXPECT_THROW(matvec(TypeId::q4_k, buf.data(), 144, 200, 1, buf.as<float>(), 1, buf.as<float>()), Error);
}

}  // namespace mox::cuda
