// CUDA KV-cache stores and gated causal attention (ops/cuda_attention.h) against the CPU: kv_store
// byte for byte against the registry's quantizers, attention against ops::attention_reference over
// the same cache bytes (written by the CPU's ops::kv_store), with the sigmoid gate applied on the host.
#include "cuda_test_util.h"

#include "core/tuning.h"
#include "ops/attention.h"
#include "ops/basic.h"
#include "ops/cuda_attention.h"
#include "ops/cuda_device.h"
#include "quant/types.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>

namespace mox::cuda {

namespace {

using quant::TypeId;

constexpr TypeId kKvTypes[] = {TypeId::f32, TypeId::f16, TypeId::bf16, TypeId::q8_0, TypeId::q4_0};

int32_t* device_pos(DeviceBuffer& buf, int32_t pos) {
    buf.upload(&pos, sizeof pos);
    return buf.as<int32_t>();
}

// ---- kv_store

// Quant bytes of a block may differ by one step where an fp32 rounding differs; every other byte
// (scales, float elements, untouched rows) must be identical.
void check_store(TypeId type, int64_t row_elems, int64_t capacity, int64_t pos0, int64_t n_rows) {
    SCOPED_TRACE(fmt::format("type {} row_elems {} pos0 {} rows {}", quant::traits(type).name, row_elems,
                             pos0, n_rows));
    const size_t rb = quant::row_bytes(type, row_elems);
    const int64_t k_stride = row_elems * 2 + 3, v_stride = row_elems;  // k rows interleaved with other data
    std::vector<float> k = test::randn(static_cast<size_t>(n_rows * k_stride), 11);
    std::vector<float> v = test::randn(static_cast<size_t>(n_rows * v_stride), 12, 3.0f);
    // Rows of very different magnitudes, a zero block (d = 0) and a block with a tie for the max.
    for (int64_t i = 0; i < n_rows; ++i)
        for (int64_t j = 0; j < row_elems; ++j)
            k[static_cast<size_t>(i * k_stride + j)] *= std::ldexp(1.0f, static_cast<int>(i % 7) - 3);
    for (int64_t j = 0; j < 32; ++j) v[static_cast<size_t>(j)] = 0.0f;
    if (row_elems >= 64) v[32] = 2.5f, v[33] = -2.5f;

    std::vector<uint8_t> k_cpu(rb * static_cast<size_t>(capacity), 0xA5), v_cpu(k_cpu);
    ops::KvView cpu{k_cpu.data(), v_cpu.data(), type, type, row_elems, rb, rb, capacity};
    for (int64_t i = 0; i < n_rows; ++i)
        ops::kv_store(cpu, pos0 + i, &k[static_cast<size_t>(i * k_stride)],
                      &v[static_cast<size_t>(i * v_stride)]);

    DeviceBuffer kc = test::to_device(std::vector<uint8_t>(k_cpu.size(), 0xA5)),
                 vc = test::to_device(std::vector<uint8_t>(v_cpu.size(), 0xA5));
    DeviceBuffer kd = test::to_device(k), vd = test::to_device(v), posd(sizeof(int32_t));
    ops::KvView gpu{kc.as<uint8_t>(), vc.as<uint8_t>(), type, type, row_elems, rb, rb, capacity};
    kv_store(gpu, device_pos(posd, static_cast<int32_t>(pos0)), n_rows, kd.as<float>(), k_stride,
             vd.as<float>(), v_stride);
    const std::vector<uint8_t> k_gpu = test::to_host<uint8_t>(kc, k_cpu.size()),
                               v_gpu = test::to_host<uint8_t>(vc, v_cpu.size());

    const bool quantized = type == TypeId::q8_0 || type == TypeId::q4_0;
    const size_t block = type == TypeId::q8_0 ? 34 : 18;
    int64_t off_by_one = 0;
    for (int which = 0; which < 2; ++which) {
        const std::vector<uint8_t>& want = which == 0 ? k_cpu : v_cpu;
        const std::vector<uint8_t>& got = which == 0 ? k_gpu : v_gpu;
        for (size_t b = 0; b < want.size(); ++b) {
            if (want[b] == got[b]) continue;
            const size_t row = b / rb, in_row = b % rb;
            const bool stored =
                static_cast<int64_t>(row) >= pos0 && static_cast<int64_t>(row) < pos0 + n_rows;
            ASSERT_TRUE(quantized && stored && in_row % block >= 2)
                << (which ? "V" : "K") << " byte " << b << " (row " << row << "): " << int(got[b]) << " vs "
                << int(want[b]);
            if (type == TypeId::q8_0) {
                ASSERT_LE(std::abs(int(int8_t(got[b])) - int(int8_t(want[b]))), 1) << "byte " << b;
            } else {
                ASSERT_LE(std::abs(int(got[b] & 15) - int(want[b] & 15)), 1) << "byte " << b;
                ASSERT_LE(std::abs(int(got[b] >> 4) - int(want[b] >> 4)), 1) << "byte " << b;
            }
            ++off_by_one;
        }
    }
    if (off_by_one > 0)
        fmt::print("[kv_store] {}: {} quant bytes off by one step\n", quant::traits(type).name, off_by_one);
}

TEST(CudaAttention, KvStoreMatchesCpuQuantizers) {
    MOX_REQUIRE_CUDA_DEVICE();
    for (TypeId t : kKvTypes) {
        check_store(t, 512, 64, 5, 37);  // the real model: 2 KV heads x 256
        check_store(t, 128, 9, 0, 9);
        check_store(t, 64, 300, 299, 1);
    }
}

// ---- attention

struct Case {
    int64_t n_head = 16, n_head_kv = 2, head_dim = 256;
    TypeId k_type = TypeId::f16, v_type = TypeId::f16;
    int64_t n_q = 1;
    int64_t pos0 = 0;
    int64_t max_keys = 0;  // 0: pos0 + n_q
    bool gate = true;
};

std::string describe(const Case& c) {
    return fmt::format("heads {}/{} dim {} K {} V {} n_q {} pos0 {} max_keys {} gate {}", c.n_head,
                       c.n_head_kv, c.head_dim, quant::traits(c.k_type).name, quant::traits(c.v_type).name,
                       c.n_q, c.pos0, c.max_keys, c.gate);
}

void run_case(Case c, uint32_t seed) {
    if (c.max_keys == 0) c.max_keys = c.pos0 + c.n_q;
    SCOPED_TRACE(describe(c));
    const int64_t H = c.n_head, Hkv = c.n_head_kv, D = c.head_dim, row = Hkv * D;
    const int64_t capacity = c.max_keys + 5;
    const int64_t n_keys = c.pos0 + c.n_q;
    const size_t krb = quant::row_bytes(c.k_type, row), vrb = quant::row_bytes(c.v_type, row);

    // The cache written on the CPU; rows past the last query's position hold large values that would
    // show up in any output that reads them (causality).
    std::vector<uint8_t> k_cache(krb * static_cast<size_t>(capacity)),
        v_cache(vrb * static_cast<size_t>(capacity));
    ops::KvView kv{k_cache.data(), v_cache.data(), c.k_type, c.v_type, row, krb, vrb, capacity};
    for (int64_t p = 0; p < capacity; ++p) {
        const float scale = p < n_keys ? 1.0f : 50.0f;
        const std::vector<float> kr =
            test::randn(static_cast<size_t>(row), seed * 7919u + static_cast<uint32_t>(p), scale);
        const std::vector<float> vr =
            test::randn(static_cast<size_t>(row), seed * 7919u + 104729u + static_cast<uint32_t>(p), scale);
        ops::kv_store(kv, p, kr.data(), vr.data());
    }
    // Queries large enough that the softmax is far from uniform.
    const std::vector<float> q = test::randn(static_cast<size_t>(c.n_q * H * D), seed + 1,
                                             0.25f * std::sqrt(static_cast<float>(D)) / 4.0f);
    // [n_q][n_head][q | gate] as the model's q projection lays it out.
    const std::vector<float> qg = test::randn(static_cast<size_t>(c.n_q * H * 2 * D), seed + 2, 2.0f);

    const ops::AttentionShape shape{H, Hkv, D, 1.0f / std::sqrt(static_cast<float>(D))};
    std::vector<float> ref(static_cast<size_t>(c.n_q * H * D));
    for (int64_t i = 0; i < c.n_q; ++i)
        ops::attention_reference(kv, shape, &q[static_cast<size_t>(i * H * D)], c.pos0 + i + 1,
                                 &ref[static_cast<size_t>(i * H * D)]);
    if (c.gate)
        for (int64_t i = 0; i < c.n_q; ++i)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t j = 0; j < D; ++j)
                    ref[static_cast<size_t>((i * H + h) * D + j)] *=
                        ops::sigmoid(qg[static_cast<size_t>((i * H + h) * 2 * D + D + j)]);

    DeviceBuffer kd = test::to_device(k_cache), vd = test::to_device(v_cache), qd = test::to_device(q),
                 gd = test::to_device(qg);
    DeviceBuffer posd(sizeof(int32_t));
    std::vector<float> poison(ref.size(), std::numeric_limits<float>::quiet_NaN());
    DeviceBuffer od = test::to_device(poison);
    const size_t ws_bytes = attention_workspace_bytes(shape, c.n_q, c.max_keys);
    DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
    if (ws_bytes > 0) ws.upload(std::vector<uint8_t>(ws_bytes, 0xFF).data(), ws_bytes);  // NaN-ish garbage
    const ops::KvView kvd{kd.as<uint8_t>(), vd.as<uint8_t>(), c.k_type, c.v_type, row, krb, vrb, capacity};
    AttentionGate gate;
    if (c.gate) gate = {gd.as<float>() + D, 2 * H * D, 2 * D};
    attention(kvd, shape, qd.as<float>(), c.n_q, device_pos(posd, static_cast<int32_t>(c.pos0)), c.max_keys,
              gate, od.as<float>(), ws_bytes > 0 ? ws.data() : nullptr, ws_bytes);
    const std::vector<float> got = test::to_host<float>(od, ref.size());

    double err2 = 0, ref2 = 0, max_abs = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[i])) << "element " << i << " = " << got[i];
        const double e = static_cast<double>(got[i]) - ref[i];
        err2 += e * e;
        ref2 += static_cast<double>(ref[i]) * ref[i];
        max_abs = std::max(max_abs, std::fabs(e));
    }
    const double rel = std::sqrt(err2 / ref2);
    // Same dequantized values on both sides; only the fp32 summation order differs.
    EXPECT_LT(rel, 2e-5) << "max abs " << max_abs;
    EXPECT_LT(max_abs, 1e-4) << "rel " << rel;
}

TEST(CudaAttention, DecodeRealShapeEveryType) {
    MOX_REQUIRE_CUDA_DEVICE();
    uint32_t seed = 100;
    for (TypeId t : kKvTypes)
        for (int64_t len : {1, 7, 256, 1000, 4097}) {
            Case c;
            c.k_type = c.v_type = t;
            c.pos0 = len - 1;
            c.max_keys = len + (len % 3) * 100;  // sometimes the exact length, usually more
            c.gate = (len % 2) == 1;
            run_case(c, ++seed);
        }
}

TEST(CudaAttention, DecodeMaxKeysFarBeyondLength) {
    MOX_REQUIRE_CUDA_DEVICE();
    Case c;
    c.pos0 = 999;
    c.max_keys = 32768;  // most splits see no key
    run_case(c, 7);
    c.k_type = TypeId::q8_0, c.v_type = TypeId::q4_0, c.pos0 = 0;  // mixed types, one key
    run_case(c, 8);
}

// Decode over at most 1024 keys takes the one-block-per-query-head kernel (attention_short_kernel),
// beyond that the grouped one: both sides of the boundary, every KV type.
TEST(CudaAttention, DecodeShortContextBoundary) {
    MOX_REQUIRE_CUDA_DEVICE();
    uint32_t seed = 500;
    for (TypeId t : kKvTypes) {
        Case c;
        c.k_type = c.v_type = t;
        c.pos0 = 1023;
        c.max_keys = 1024;
        run_case(c, ++seed);
        c.max_keys = 1025;
        run_case(c, ++seed);
    }
}

// One decode token at position len - 1 of a graph sized for max_keys keys, for every KV type (Qwen3.6's
// attention shape), against the reference; seed advances once per case.
void decode_every_kv_type(int64_t len, int64_t max_keys, uint32_t& seed) {
    for (TypeId t : kKvTypes) {
        Case c;
        c.k_type = c.v_type = t;
        c.pos0 = len - 1;
        c.max_keys = max_keys;
        run_case(c, ++seed);
    }
}

// A lower tuning().attn_short_max_keys (MOX_CUDA_ATTN_SHORT_MAX) lowers the longest context the
// short-context kernel serves: graphs sized for up to 1024 keys then take the other decode kernels,
// with the same results.
TEST(CudaAttention, DecodeShortContextBound) {
    MOX_REQUIRE_CUDA_DEVICE();
    uint32_t seed = 950;
    for (const int64_t bound : {512, 256}) {
        Tuning t = tuning();
        t.attn_short_max_keys = bound;
        const ScopedTuning scoped(t);
        for (int64_t len : {200, 300, 700, 1024})
            decode_every_kv_type(len, len <= 256 ? 256 : len <= 512 ? 512 : 1024, seed);
    }
}

// The short-context kernel with 4, 8 and 16 warps per block (short_warps picks by the graph's key
// bound: up to 256, 512 and 1024 keys): the same results as the reference for lengths that leave
// some warps without a key, and at the bound, every KV type.
TEST(CudaAttention, DecodeShortContextWarps) {
    MOX_REQUIRE_CUDA_DEVICE();
    uint32_t seed = 900;
    for (const int64_t bound : {256, 512, 1024}) {
        for (int64_t len : {1, 5, 70, 256, 300, 513, 1024})
            if (len <= bound) decode_every_kv_type(len, bound, seed);
        for (int64_t dim : {64, 128})  // the other head sizes the kernel has
            run_case({.n_head = 8, .n_head_kv = 2, .head_dim = dim, .pos0 = bound - 5, .max_keys = bound}, ++seed);
    }
}

// Decode over f16 caches beyond 1024 keys takes the tensor-core kernel (attention_mma_kernel, f16 K and
// V, groups of up to 8 query heads, head_dim 128 or 256), held to the fp32 kernels' tolerance: Q and P
// enter the MMAs as two f16 parts. One split and many, groups of 8, 4 and 3, gate on and off, a length
// that is not a multiple of the 16-key step.
TEST(CudaAttention, DecodeLongContextTensorCores) {
    MOX_REQUIRE_CUDA_DEVICE();
    uint32_t seed = 700;
    for (int64_t len : {1025, 4097, 20011})
        for (const auto& [heads, kv_heads, dim] : {std::tuple<int64_t, int64_t, int64_t>{16, 2, 256}, {8, 2, 128},
                                                   {6, 2, 256}, {32, 4, 128}}) {
            Case c{.n_head = heads, .n_head_kv = kv_heads, .head_dim = dim, .pos0 = len - 1};
            c.max_keys = len + (len % 7) * 16;
            c.gate = (len % 2) == 1;
            run_case(c, ++seed);
        }
}

TEST(CudaAttention, DecodeOtherShapes) {
    MOX_REQUIRE_CUDA_DEVICE();
    uint32_t seed = 300;
    for (TypeId t : kKvTypes)
        for (int64_t len : {1, 33, 700, 4097}) {
            run_case(
                {.n_head = 8, .n_head_kv = 2, .head_dim = 128, .k_type = t, .v_type = t, .pos0 = len - 1},
                ++seed);
            run_case({.n_head = 4,
                      .n_head_kv = 4,
                      .head_dim = 64,
                      .k_type = t,
                      .v_type = t,
                      .pos0 = len - 1,
                      .max_keys = len + 64,
                      .gate = false},
                     ++seed);
            run_case(
                {.n_head = 32, .n_head_kv = 2, .head_dim = 64, .k_type = t, .v_type = t, .pos0 = len - 1},
                ++seed);
        }
}

TEST(CudaAttention, PrefillRealShape) {
    MOX_REQUIRE_CUDA_DEVICE();
    uint32_t seed = 500;
    int ti = 0;
    for (int64_t n_q : {1, 2, 3, 7, 8, 9, 16, 31, 33, 64, 70})
        for (int64_t pos0 : {0, 300}) {
            const TypeId t = kKvTypes[ti++ % 5];
            run_case({.k_type = t,
                      .v_type = t,
                      .n_q = n_q,
                      .pos0 = pos0,
                      .max_keys = pos0 + n_q + (n_q % 2) * 40,
                      .gate = n_q % 3 != 0},
                     ++seed);
        }
}

// A prefill block over a long cache with max_keys far beyond it: the context is split across blocks
// for n_q > 1 too, and the early rows' blocks past their last key contribute nothing.
TEST(CudaAttention, PrefillSplitContext) {
    MOX_REQUIRE_CUDA_DEVICE();
    run_case({.k_type = TypeId::q8_0, .v_type = TypeId::q8_0, .n_q = 9, .pos0 = 3000, .max_keys = 8192}, 850);
    run_case({.n_head = 4, .n_head_kv = 4, .head_dim = 64, .n_q = 3, .pos0 = 700, .max_keys = 4096}, 851);
}

TEST(CudaAttention, PrefillOtherShapes) {
    MOX_REQUIRE_CUDA_DEVICE();
    uint32_t seed = 700;
    for (TypeId t : kKvTypes)
        for (int64_t pos0 : {0, 45}) {
            run_case({.n_head = 4,
                      .n_head_kv = 4,
                      .head_dim = 64,
                      .k_type = t,
                      .v_type = t,
                      .n_q = 37,
                      .pos0 = pos0},
                     ++seed);
            run_case({.n_head = 6,
                      .n_head_kv = 2,
                      .head_dim = 128,
                      .k_type = t,
                      .v_type = t,
                      .n_q = 70,
                      .pos0 = pos0,
                      .max_keys = pos0 + 200},
                     ++seed);
            run_case({.n_head = 8,
                      .n_head_kv = 2,
                      .head_dim = 128,
                      .k_type = t,
                      .v_type = t,
                      .n_q = 512,
                      .pos0 = pos0 * 5},
                     ++seed);
        }
}

// Prefill over f16 caches runs on the tensor cores (attention_prefill_mma_kernel: 64 query rows per
// block, 32-key tiles), held to the fp32 kernels' tolerance like the decode one: partial row blocks
// (n_q * group not a multiple of 64), groups of 8, 4 and 3, a cache already holding keys, a context
// split across blocks (partials + combine), the gate on and off.
TEST(CudaAttention, PrefillTensorCores) {
    MOX_REQUIRE_CUDA_DEVICE();
    uint32_t seed = 1000;
    for (const auto& [heads, kv_heads, dim] :
         {std::tuple<int64_t, int64_t, int64_t>{16, 2, 256}, {8, 2, 128}, {6, 2, 256}, {32, 4, 128}})
        for (const auto& [n_q, pos0] : {std::pair<int64_t, int64_t>{2, 0}, {17, 0}, {64, 5}, {65, 37}, {200, 0},
                                        {9, 3000}}) {
            Case c{.n_head = heads, .n_head_kv = kv_heads, .head_dim = dim, .n_q = n_q, .pos0 = pos0};
            c.max_keys = pos0 >= 3000 ? 8192 : pos0 + n_q + (n_q % 3) * 16;
            c.gate = (n_q % 2) == 1;
            run_case(c, ++seed);
        }
}

TEST(CudaAttention, Prefill512RealShape) {
    MOX_REQUIRE_CUDA_DEVICE();
    run_case({.n_q = 512, .pos0 = 0}, 900);
    run_case({.k_type = TypeId::q8_0, .v_type = TypeId::q8_0, .n_q = 512, .pos0 = 200, .max_keys = 1024},
             901);
}

// A 952-token prefill of Qwen3.6's attention splits the context in two (a 4096-token one does not):
// it runs with its own workspace size and refuses one byte less instead of writing past it (the
// model once sized the buffer for 1 and 4096 queries only: an illegal address,
// bench/results/2026-11-30-decode-fusions-h200).
TEST(CudaAttention, PrefillWorkspaceIsChecked) {
    MOX_REQUIRE_CUDA_DEVICE();
    const ops::AttentionShape shape{16, 2, 256, 1.0f / 16.0f};
    const size_t need = attention_workspace_bytes(shape, 952, 952);
    ASSERT_GT(need, attention_workspace_bytes(shape, 4096, 4096));
    ASSERT_GE(attention_workspace_bound(shape, 4096, 4096), need);
    run_case({.n_q = 952, .pos0 = 0}, 950);
    DeviceBuffer dummy(16);
    const ops::KvView kv{
        dummy.as<uint8_t>(), dummy.as<uint8_t>(), TypeId::f16, TypeId::f16, 2 * 256, 1024, 1024, 4096};
    EXPECT_THROW(attention(kv, shape, dummy.as<float>(), 952, dummy.as<int32_t>(), 952, {}, dummy.as<float>(),
                           dummy.data(), need - 1),
                 Error);
}

// The model's flow: the GPU stores each new token's K/V, then attends over the cache.
TEST(CudaAttention, StoreThenAttend) {
    MOX_REQUIRE_CUDA_DEVICE();
    const int64_t H = 16, Hkv = 2, D = 256, row = Hkv * D, cap = 300, n_q = 20, pos0 = 250;
    for (TypeId t : {TypeId::q8_0, TypeId::bf16}) {
        SCOPED_TRACE(quant::traits(t).name);
        const size_t rb = quant::row_bytes(t, row);
        const std::vector<float> kv_rows = test::randn(static_cast<size_t>(cap * row * 2), 31);
        std::vector<uint8_t> kc(rb * cap), vc(rb * cap);
        ops::KvView cpu{kc.data(), vc.data(), t, t, row, rb, rb, cap};
        for (int64_t p = 0; p < pos0 + n_q; ++p)
            ops::kv_store(cpu, p, &kv_rows[static_cast<size_t>(2 * p * row)],
                          &kv_rows[static_cast<size_t>((2 * p + 1) * row)]);
        // The GPU cache gets the first pos0 rows from the CPU and the last n_q from kv_store.
        std::vector<uint8_t> kc0 = kc, vc0 = vc;
        std::fill(kc0.begin() + static_cast<int64_t>(rb * pos0), kc0.end(), 0);
        std::fill(vc0.begin() + static_cast<int64_t>(rb * pos0), vc0.end(), 0);
        DeviceBuffer kd = test::to_device(kc0), vd = test::to_device(vc0), rows = test::to_device(kv_rows),
                     posd(4);
        const ops::KvView gpu{kd.as<uint8_t>(), vd.as<uint8_t>(), t, t, row, rb, rb, cap};
        const float* src = rows.as<float>() + 2 * pos0 * row;
        const int32_t* pd = device_pos(posd, static_cast<int32_t>(pos0));
        kv_store(gpu, pd, n_q, src, 2 * row, src + row, 2 * row);
        const std::vector<float> q = test::randn(static_cast<size_t>(n_q * H * D), 32);
        const ops::AttentionShape shape{H, Hkv, D, 1.0f / 16.0f};
        DeviceBuffer qd = test::to_device(q), od(q.size() * 4);
        const size_t ws_bytes = attention_workspace_bytes(shape, n_q, cap);
        DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
        attention(gpu, shape, qd.as<float>(), n_q, pd, cap, {}, od.as<float>(), ws.data(), ws.size());
        const std::vector<float> got = test::to_host<float>(od, q.size());
        std::vector<float> ref(q.size());
        for (int64_t i = 0; i < n_q; ++i)
            ops::attention_reference(cpu, shape, &q[static_cast<size_t>(i * H * D)], pos0 + i + 1,
                                     &ref[static_cast<size_t>(i * H * D)]);
        double err2 = 0, ref2 = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
            err2 += (got[i] - ref[i]) * double(got[i] - ref[i]);
            ref2 += ref[i] * double(ref[i]);
        }
        // A q8_0 quant off by one step (if any) moves a value by d; a tolerance well above the fp32 noise.
        EXPECT_LT(std::sqrt(err2 / ref2), t == TypeId::q8_0 ? 1e-3 : 2e-5);
    }
}

}  // namespace

}  // namespace mox::cuda
