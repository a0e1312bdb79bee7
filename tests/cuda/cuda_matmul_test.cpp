// CUDA batched matmul (tensor cores, fp16 operands, fp32 accumulation) against a double-precision
// loop over the reference dequantizer's weights: every supported type, 1..512 tokens (partial token
// tiles), n_out not a multiple of the 128-row tile, one and several blocks along n_in; the tile
// kernels with the cuBLAS path off, and the cuBLAS path (kCublasMinTokens tokens and more) on its
// own. (Their timings at the model's dense sizes: mox_cuda_bench, CudaBench.MatmulTflops.)
#include "cuda_test_util.h"

#include "core/tuning.h"
#include "quant/cuda_matmul.h"
#include "quant/types.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace mox::cuda {

namespace {

using quant::TypeId;

const TypeId kTypes[] = {TypeId::f32,    TypeId::f16,   TypeId::bf16,  TypeId::q4_0, TypeId::q8_0,
                         TypeId::iq4_nl, TypeId::mxfp4, TypeId::q2_k,  TypeId::q3_k, TypeId::q4_k,
                         TypeId::q5_k,   TypeId::q6_k,  TypeId::iq4_xs};

// Each output against sum_i w_i x_i in double. Bound: both operands are rounded to fp16 (relative
// error <= 2^-11 each, so <= 1e-3 per product), then summed in fp32; so |err| <= 1.25e-3 * sum |w_i x_i|
// (+ a small absolute term for fp16 subnormals). A weight decoded or paired wrongly moves a result by
// about one term, which for n_in = 256 is far above that bound. The whole output's relative L2 error
// must also stay below 1e-3 (typically ~3e-4: the rounding errors are not all of one sign).
//
// Precise mode: each operand is hi + lo fp16 parts (representation error <= 2^-22 relative, the
// dropped lo x lo term 2^-22 of the product), chunks of 64 products summed by the tensor cores
// (<= a few ulp of fp32) and chunk sums added in fp32: |err| <= 2e-5 sum |w_i x_i| (about 5x above the
// worst case of those terms) and relative L2 below 2e-5 (typically ~1e-6).
// The process's tuning with another cuBLAS threshold (the matmul reads it at every call).
Tuning with_cublas_min(int64_t n_tokens) {
    Tuning t = tuning();
    t.cublas_min_tokens = n_tokens;
    return t;
}

// The tile kernels at every batch size of these tests, for one scope.
struct TilesOnly {
    ScopedTuning scoped{with_cublas_min(int64_t{1} << 30)};
};

void check_case(TypeId type, int64_t n_in, int64_t n_out, int64_t n_tokens, uint32_t seed,
                bool precise = false) {
    const auto& tr = quant::traits(type);
    SCOPED_TRACE(
        fmt::format("{} n_in={} n_out={} tokens={} precise={}", tr.name, n_in, n_out, n_tokens, precise));
    const size_t rb = quant::row_bytes(type, n_in);
    auto wf = test::randn(static_cast<size_t>(n_in * n_out), seed);
    for (int64_t r = 0; r < n_out; ++r)  // rows of different magnitude, so block scales differ
        for (int64_t i = 0; i < n_in; ++i) wf[r * n_in + i] *= 0.25f + 0.1f * static_cast<float>(r % 7);
    std::vector<uint8_t> wq(rb * n_out);
    std::vector<float> wd(static_cast<size_t>(n_in * n_out));
    test::parallel_for(n_out, [&](int64_t r) {
        tr.quantize(wf.data() + r * n_in, wq.data() + r * rb, n_in);
        tr.dequantize(wq.data() + r * rb, wd.data() + r * n_in, n_in);
    });
    auto x = test::randn(static_cast<size_t>(n_in * n_tokens), seed + 1);
    for (int64_t t = 0; t < n_tokens; ++t)  // tokens of different magnitude too (up to ~40)
        for (int64_t i = 0; i < n_in; ++i) x[t * n_in + i] *= 1.0f + static_cast<float>(t % 11);

    ops::Weight host{
        .data = wq.data(), .type = type, .n_in = n_in, .n_out = n_out, .n_expert = 1, .row_bytes = rb};
    DeviceWeight dw = upload_weight(host);
    DeviceBuffer dx = test::to_device(x);
    const std::vector<float> poison(static_cast<size_t>(n_out * n_tokens), std::nanf(""));
    DeviceBuffer dy = test::to_device(poison);  // unwritten outputs stay NaN and fail
    DeviceBuffer ws(std::max<size_t>(1, matmul_workspace_bytes(type, n_in, n_out, n_tokens)));
    matmul(type, dw.view.data, rb, n_in, n_out, dx.as<float>(), n_tokens, dy.as<float>(), ws.data(), nullptr,
           precise);
    const auto y = test::to_host<float>(dy, static_cast<size_t>(n_out * n_tokens));

    // The double-precision reference and sum |w x| of every output, one token per task.
    std::vector<double> refs(static_cast<size_t>(n_out * n_tokens)), mags(refs.size());
    test::parallel_for(n_tokens, [&](int64_t t) {
        for (int64_t r = 0; r < n_out; ++r) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n_in; ++i) {
                const double p = static_cast<double>(wd[r * n_in + i]) * x[t * n_in + i];
                ref += p;
                mag += std::fabs(p);
            }
            refs[static_cast<size_t>(t * n_out + r)] = ref;
            mags[static_cast<size_t>(t * n_out + r)] = mag;
        }
    });
    int bad = 0;
    double err2 = 0, ref2 = 0;
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < n_out; ++r) {
            const double ref = refs[static_cast<size_t>(t * n_out + r)], mag = mags[static_cast<size_t>(t * n_out + r)];
            const double got = y[t * n_out + r];
            err2 += (got - ref) * (got - ref);
            ref2 += ref * ref;
            const double bound = precise ? 2e-5 * mag + 1e-7 : 1.25e-3 * mag + 1e-5;
            if (!(std::fabs(got - ref) <= bound) && bad++ < 5)
                ADD_FAILURE() << "token " << t << " row " << r << ": got " << got << ", reference " << ref
                              << " (sum |w x| " << mag << ")";
        }
    }
    EXPECT_LT(std::sqrt(err2 / ref2), precise ? 2e-5 : 1e-3);
}

}  // namespace

TEST(CudaMatmul, SupportsEveryMatvecType) {
    for (TypeId t : kTypes) EXPECT_TRUE(matmul_supported(t)) << quant::traits(t).name;
}

TEST(CudaMatmul, MatchesReferenceEveryType) {
    MOX_REQUIRE_CUDA_DEVICE();
    const TilesOnly tiles;
    uint32_t seed = 1;
    for (TypeId type : kTypes) {
        const int64_t be = quant::traits(type).block_elems;
        // Float types get odd n_in (a partial last segment); block types 1 and 3 blocks of 256.
        const int64_t n_small = be == 1 ? 100 : std::max<int64_t>(be, 256);
        const int64_t n_mid = be == 1 ? 777 : 768;
        check_case(type, n_small, 100, 1, seed++);
        check_case(type, n_small, 513, 7, seed++);
        check_case(type, n_mid, 129, 16, seed++);
        check_case(type, n_mid, 64, 33, seed++);
        check_case(type, n_small, 200, 130, seed++);  // three token tiles, the last with 2 tokens
    }
}

// Version 2 splits the inner dimension over blocks when the row x token tiles are few (fewer than
// 264 blocks, at least 8 chunks of 64 inner elements): these shapes land on uneven splits (the last
// one shorter), a padding chunk at the row's end (an odd number of 32-element segments), one token,
// one output row and odd n_out.
TEST(CudaMatmul, SplitInnerDimension) {
    MOX_REQUIRE_CUDA_DEVICE();
    const TilesOnly tiles;
    check_case(TypeId::q8_0, 544, 1, 1, 201);      // 17 segments: 9 chunks, 2 splits, padded last chunk
    check_case(TypeId::q8_0, 544, 131, 63, 202);   // 2 x 1 tiles
    check_case(TypeId::q4_k, 1792, 77, 65, 203);   // 56 segments: 28 chunks over 7 splits of 4
    check_case(TypeId::q6_k, 4096, 127, 5, 204);   // 64 chunks over 16 splits of 4
    check_case(TypeId::f16, 1000, 255, 129, 205);  // 32 segments (the last partial), 4 splits
    check_case(TypeId::iq4_xs, 512, 3, 200, 206);  // exactly 8 chunks: 2 splits of 4
    check_case(TypeId::q5_k, 512, 2048, 70, 207);  // 16 x 2 tiles: 2 splits of 4 chunks
    // 100 x 1 tiles: 3 splits of 11 chunks, so split 1 starts in the middle of a super-block with one
    // chunk of it left (the raw-staged tile's first unit holds one chunk), split 2 with two.
    check_case(TypeId::q4_k, 2048, 12800, 1, 208);
}

// Token tiles of 128 (version 2 uses them when row tiles x 128-token tiles >= 264 blocks): partial
// row and token tiles (4100 rows: 33 row tiles, the last with 4 rows; 1029 tokens: 9 tiles, the last
// with 5), and a float type whose rows end in a partial segment.
TEST(CudaMatmul, BigTokenTiles) {
    MOX_REQUIRE_CUDA_DEVICE();
    const TilesOnly tiles;
    check_case(TypeId::q4_k, 256, 4100, 1029, 501);
    check_case(TypeId::q8_0, 512, 8200, 650, 502);
    check_case(TypeId::f16, 100, 8193, 600, 503);
}

// Where a device fits the raw-staged tiles (the H200 does for every quantized type at token tile 32
// or 64 but Q6_K at 64), the tests above run them; set_direct_tiles runs their direct-load twins,
// which GPUs with ~100 KB of shared memory per SM take: every quantized type, split and unsplit.
TEST(CudaMatmul, DirectLoadTiles) {
    MOX_REQUIRE_CUDA_DEVICE();
    const TilesOnly tiles;
    set_direct_tiles(true);
    uint32_t seed = 401;
    for (TypeId type : kTypes) {
        if (!quant::traits(type).is_quantized) continue;
        check_case(type, 768, 129, 16, seed++);
        check_case(type, 256, 200, 130, seed++);
    }
    check_case(TypeId::q8_0, 544, 131, 63, seed++);  // 2 splits, padded last chunk
    check_case(TypeId::q4_k, 1792, 77, 65, seed++);  // 7 splits
    set_direct_tiles(false);
}

// The version-1 kernel (tuning().matmul_v1, MOX_MATMUL_V1=1) stays available as a fallback and stays
// correct.
TEST(CudaMatmul, Version1Fallback) {
    MOX_REQUIRE_CUDA_DEVICE();
    Tuning t = tuning();
    t.matmul_v1 = true;
    const ScopedTuning v1(t);
    check_case(TypeId::q4_k, 768, 129, 16, 301);
    check_case(TypeId::bf16, 777, 200, 130, 302);
}

// Precise mode on every type (quantized weights are split too: a decoded d q - m is not an fp16
// number in general), token tiles of 32 (1, 31, 32, 33 tokens), split and unsplit inner dimensions.
TEST(CudaMatmul, PreciseEveryType) {
    MOX_REQUIRE_CUDA_DEVICE();
    uint32_t seed = 401;
    for (TypeId type : kTypes) {
        const int64_t be = quant::traits(type).block_elems;
        const int64_t n_small = be == 1 ? 100 : std::max<int64_t>(be, 256);
        const int64_t n_mid = be == 1 ? 777 : 768;
        check_case(type, n_small, 100, 1, seed++, true);
        check_case(type, n_mid, 129, 31, seed++, true);  // split inner dimension
        check_case(type, n_small, 200, 33, seed++, true);
    }
    check_case(TypeId::q4_k, 2048, 512, 32, seed++, true);  // the model's 2048 -> 512, split
    check_case(TypeId::bf16, 2048, 300, 65, seed++, true);
    check_case(TypeId::q6_k, 4096, 256, 40, seed++, true);
}

// The cuBLAS path: every type (decoded weights and permuted activations must pair up element by
// element, with zero padding where a float row ends inside a segment or chunk), token counts from the
// threshold up, n_out not a multiple of anything, a K-quant row of 16 super-blocks; the same bound as
// the tiles (the same fp16 operands, fp32 sums).
TEST(CudaMatmul, CublasEveryType) {
    MOX_REQUIRE_CUDA_DEVICE();
    uint32_t seed = 601;
    for (TypeId type : kTypes) {
        const int64_t be = quant::traits(type).block_elems;
        check_case(type, be == 1 ? 100 : std::max<int64_t>(be, 256), 129, kCublasMinTokens, seed++);
        check_case(type, be == 1 ? 777 : 768, 200, kCublasMinTokens + 75, seed++);
    }
    check_case(TypeId::q4_k, 4096, 257, 600, seed++);
    check_case(TypeId::q6_k, 2048, 1000, 1029, seed++);
}

// Below the threshold the tiles run, and tuning().cublas_min_tokens (MOX_CUDA_CUBLAS_MIN_TOKENS) only
// raises it: both give the tile kernels' results bit for bit (the cuBLAS sums come in another order).
TEST(CudaMatmul, CublasThreshold) {
    MOX_REQUIRE_CUDA_DEVICE();
    const TypeId type = TypeId::q4_k;
    const int64_t n_in = 512, n_out = 300, n = kCublasMinTokens + 10;
    const size_t rb = quant::row_bytes(type, n_in);
    const auto wf = test::randn(static_cast<size_t>(n_in * n_out), 7);
    std::vector<uint8_t> wq(rb * n_out);
    for (int64_t r = 0; r < n_out; ++r)
        quant::traits(type).quantize(wf.data() + r * n_in, wq.data() + r * rb, n_in);
    ops::Weight host{
        .data = wq.data(), .type = type, .n_in = n_in, .n_out = n_out, .n_expert = 1, .row_bytes = rb};
    DeviceWeight dw = upload_weight(host);
    DeviceBuffer dx = test::to_device(test::randn(static_cast<size_t>(n_in * n), 8));
    DeviceBuffer dy(static_cast<size_t>(n_out * n) * 4), ws(matmul_workspace_bytes(type, n_in, n_out, n));
    const auto run = [&] {
        matmul(type, dw.view.data, rb, n_in, n_out, dx.as<float>(), n, dy.as<float>(), ws.data());
        return test::to_host<float>(dy, static_cast<size_t>(n_out * n));
    };
    const std::vector<float> with_blas = run();
    std::vector<float> tiles, raised;
    {
        const TilesOnly off;
        tiles = run();
    }
    {
        const ScopedTuning up(with_cublas_min(n + 1));
        raised = run();
    }
    EXPECT_EQ(tiles, raised);
    EXPECT_NE(tiles, with_blas);  // the path did run: another summation order moves some last bits
    {
        const ScopedTuning down(with_cublas_min(1));  // clamped to kCublasMinTokens
        EXPECT_EQ(run(), with_blas);
    }
}

TEST(CudaMatmul, ModelSizes) {
    MOX_REQUIRE_CUDA_DEVICE();
    const TilesOnly tiles;
    check_case(TypeId::q4_k, 2048, 513, 512, 101);
    check_case(TypeId::q6_k, 4096, 256, 65, 102);
    check_case(TypeId::q8_0, 512, 2048, 100, 103);
    check_case(TypeId::bf16, 2048, 300, 40, 104);
    check_case(TypeId::iq4_xs, 4096, 130, 33, 105);
}

}  // namespace mox::cuda
