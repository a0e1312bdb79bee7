// The memory model's scratch terms (models/gpu_memory.h) against the kernels' own workspace
// functions: the GPU forward allocates the model's numbers, so every kernel's need must fit, for
// every weight type and the shapes a micro-batch can have. Host arithmetic only: runs without a GPU.
#include "models/gpu_memory.h"
#include "ops/cuda_attention.h"
#include "ops/cuda_delta_net.h"
#include "ops/cuda_moe.h"
#include "quant/cuda_matmul.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace mox::models {

TEST(GpuMemoryModel, MatmulScratchCoversEveryTypeAndShape) {
    int checked = 0;
    for (const quant::TypeTraits& tr : quant::all_types()) {
        const quant::TypeId type = tr.id;
        if (!cuda::matmul_supported(type)) continue;
        const int64_t block = quant::traits(type).block_elems;
        for (int64_t n_in : {256, 512, 2048, 4096, 8192})
            for (int64_t n_out : {1, 16, 32, 64, 256, 512, 1024, 2048, 4096, 8192, 12352, 248320})
                for (int64_t n : {9, 64, 100, 512, 1024, 4096}) {
                    if (n_in % block != 0) continue;
                    EXPECT_GE(gpu_matmul_scratch(n_in, n_out, n), cuda::matmul_workspace_bytes(type, n_in, n_out, n))
                        << quant::type_name(type) << " " << n_in << " -> " << n_out << " x " << n;
                    ++checked;
                }
    }
    EXPECT_GT(checked, 1000);
}

TEST(GpuMemoryModel, MoeScratchCoversTheBatchedKernel) {
    for (quant::TypeId type : {quant::TypeId::q4_k, quant::TypeId::q6_k, quant::TypeId::q8_0, quant::TypeId::iq4_xs,
                               quant::TypeId::f16, quant::TypeId::bf16, quant::TypeId::f32})
        for (int64_t n : {9, 64, 512, 1024, 4096})
            for (int64_t k : {1, 4, 8}) {
                // Shapes only: the workspace depends on the types and sizes, never on the bytes.
                const ops::Weight gate{.data = nullptr, .type = type, .n_in = 2048, .n_out = 512, .n_expert = 256,
                                       .row_bytes = quant::row_bytes(type, 2048)};
                const ops::Weight down{.data = nullptr, .type = type, .n_in = 512, .n_out = 2048, .n_expert = 256,
                                       .row_bytes = quant::row_bytes(type, 512)};
                EXPECT_GE(gpu_moe_scratch(256, 2048, 512, n, k), cuda::moe_batch_workspace_bytes(gate, down, n, k))
                    << quant::type_name(type) << " n " << n << " k " << k;
            }
}

TEST(GpuMemoryModel, DeltaNetScratchIsTheChunkedKernels) {
    for (int64_t hv : {1, 3, 32, 64})
        for (int64_t n : {1, 15, 16, 63, 64, 65, 512, 4096, 4097}) {
            const cuda::DeltaNetShape shape{.n_k_heads = 1, .n_v_heads = hv, .dk = 128, .dv = 128};
            EXPECT_EQ(gpu_delta_net_scratch(hv, n), cuda::delta_net_workspace_bytes(shape, n))
                << hv << " heads, " << n;
        }
}

// The model's attention scratch is the kernels' bound, and the bound covers every call a shared
// buffer sees: any query count up to the micro-batch (the need is not monotone: 952 queries of
// Qwen3.6 take two splits where 4096 take none; a buffer sized for 1 and 4096 overflowed) and any
// key count up to the context.
TEST(GpuMemoryModel, AttentionScratchCoversEveryCall) {
    int64_t checked = 0;
    for (int64_t h : {16, 32})
        for (int64_t hkv : {2, 4, 8})
            for (int64_t keys : {1, 100, 256, 4096, 32768, 262144})
                for (int64_t nb : {1, 8, 64, 512, 4096}) {
                    if (nb > keys) continue;
                    const ops::AttentionShape shape{h, hkv, 256, 0.0f};
                    const uint64_t bound = gpu_attention_scratch(h, hkv, 256, nb, keys);
                    ASSERT_EQ(bound, cuda::attention_workspace_bound(shape, nb, keys))
                        << h << "/" << hkv << " heads, " << nb << " queries over " << keys << " keys";
                    for (int64_t q = 1; q <= nb; q += q < 64 ? 1 : 7)
                        for (int64_t k : {q, (q + keys) / 2, keys - 1, keys}) {
                            if (k < q) continue;
                            ASSERT_GE(bound, cuda::attention_workspace_bytes(shape, q, k))
                                << h << "/" << hkv << " heads, " << q << " of " << nb << " queries over " << k
                                << " of " << keys << " keys";
                            ++checked;
                        }
                }
    EXPECT_GT(checked, 10000);
}

}  // namespace mox::models
