#include "models/gpu_memory.h"

#include "core/error.h"
#include "quant/cuda_matmul.h"

#include <algorithm>

namespace mox::models {

namespace {

uint64_t round_up(uint64_t v, uint64_t a) {
    return (v + a - 1) / a * a;
}
uint64_t u(int64_t v) {
    return static_cast<uint64_t>(std::max<int64_t>(v, 0));
}
uint64_t floats(int64_t n) {
    return u(std::max<int64_t>(n, 1)) * 4;
}

constexpr int64_t kTargetBlocks = 264;  // both kernels aim at two blocks per SM of a 132-SM H200

}  // namespace

uint64_t gpu_matmul_scratch(int64_t n_in, int64_t n_out, int64_t n_tokens) {
    // Permuted fp16 activations, rows padded to 64 elements (2 segments of 32), hi and lo parts.
    const uint64_t xh = round_up(u(n_tokens) * round_up(u(n_in), 64) * 2 * 2, 256);
    // Split-K partial sums, capped at 64 * ceil(2 * 264 / row_tiles) token rows per output column.
    const int64_t row_tiles = (n_out + 127) / 128;
    const int64_t cap_rows = 64 * ((2 * kTargetBlocks + row_tiles - 1) / row_tiles);
    const uint64_t tiles = xh + u(cap_rows) * u(n_out) * 4;
    // The cuBLAS path of large batches: fp16 activations and weight, cuBLAS's own scratch.
    const uint64_t stride = round_up(u(n_in), 64);
    if (n_tokens < cuda::kCublasMinTokens || u(n_out) * stride > u(cuda::kCublasMaxWeightElems)) return tiles;
    const uint64_t blas = round_up(u(n_tokens) * stride * 2, 256) + round_up(u(n_out) * stride * 2, 256) +
                          cuda::kCublasWorkspaceBytes;
    return std::max(tiles, blas);
}

uint64_t gpu_moe_scratch(int64_t n_expert, int64_t n_embd, int64_t n_ff, int64_t n_tokens, int64_t k) {
    const int64_t pairs = n_tokens * k;
    const int64_t tiles = (pairs + std::min(n_expert, pairs) * 31) / 32;  // tile list at 32-token tiles
    uint64_t at = 0;
    for (uint64_t part : {u(n_expert) * 4, u(n_expert) * 4, uint64_t{4}, u(tiles) * 8, u(pairs) * 4,
                          u(pairs) * u(n_ff) * 4, u(pairs) * u(n_embd) * 4,
                          u(n_tokens) * round_up(u(n_embd), 64) * 4, u(pairs) * round_up(u(n_ff), 64) * 4})
        at += round_up(part, 256);
    return at;
}

uint64_t gpu_delta_net_scratch(int64_t n_v_heads, int64_t n_tokens) {
    // cuda::delta_net_workspace_bytes: per (64-token chunk, value head) T and the masked Q K^T
    // (64 x 64 each) and three gates per row.
    const int64_t chunks = (n_tokens + 63) / 64;
    return u(chunks) * u(n_v_heads) * (2 * 64 * 64 + 3 * 64) * 4;
}

uint64_t gpu_attention_scratch(int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t max_n_q,
                               int64_t max_keys) {
    // cuda::attention_workspace_bound: blocks of 8 query rows (fp32 kernel) or 64 (tensor-core
    // prefill); splits fill 264 blocks, each covering at least 256 keys; the most any query count up
    // to max_n_q needs (not monotone in it: many queries fill the GPU without splits).
    const int64_t group = n_head / std::max<int64_t>(n_head_kv, 1);
    uint64_t most = 0;
    for (int64_t n_q = 1; n_q <= max_n_q; ++n_q)
        for (const int64_t rows : {8, 64}) {
            const int64_t base = (n_q * group + rows - 1) / rows * n_head_kv;
            const int64_t s0 =
                std::min((kTargetBlocks + base - 1) / base, std::max<int64_t>(1, max_keys / 256));
            if (s0 > 1) most = std::max(most, u(s0) * u(n_q * n_head) * u(head_dim + 2) * 4);
        }
    return most;
}

uint64_t gpu_staging_bytes(uint64_t gate, uint64_t up, uint64_t down) {
    const uint64_t up_at = round_up(gate + 16, 256);
    const uint64_t down_at = round_up(up_at + up + 16, 256);
    return down_at + down + 16;
}

ExpertSlotLayout expert_slot_layout(uint64_t max_gate_bytes, uint64_t max_up_bytes, uint64_t max_down_bytes) {
    constexpr uint64_t kAlign = 256;  // every part starts here (the kernels' vector loads)
    constexpr uint64_t kPad = 16;     // bytes a kernel may read past a part's end
    ExpertSlotLayout l;
    l.up_at = round_up(max_gate_bytes + kPad, kAlign);
    l.down_at = l.up_at + round_up(max_up_bytes + kPad, kAlign);
    l.bytes = l.down_at + round_up(max_down_bytes + kPad, kAlign);
    return l;
}

int64_t expert_cache_slots(uint64_t pool_bytes, uint64_t slot_bytes) {
    MOX_CHECK(slot_bytes > 0, "expert cache slot of 0 bytes");
    return static_cast<int64_t>(pool_bytes / slot_bytes) - 1;
}

uint64_t expert_cache_pool_bytes(int64_t slots, uint64_t slot_bytes) {
    return static_cast<uint64_t>(std::max<int64_t>(slots, 0) + 1) * slot_bytes;
}

uint64_t expert_cache_device_bytes(int64_t slots, uint64_t slot_bytes, int64_t n_layer, int64_t n_expert) {
    return expert_cache_pool_bytes(slots, slot_bytes) +
           static_cast<uint64_t>(n_layer * n_expert) * sizeof(int32_t);
}

GpuBufferBytes gpu_buffer_bytes(const Hparams& hp, const GpuBufferShape& s) {
    GpuBufferBytes b;
    const int64_t nb = s.n_ubatch, d = hp.n_embd;
    const int64_t ctx = s.n_ctx_max > 0 ? s.n_ctx_max : hp.n_ctx_train;
    const int64_t C = hp.conv_channels(), inner = hp.ssm_inner, Hv = hp.ssm_v_heads;
    const int64_t H = hp.n_head, Hkv = hp.n_head_kv, hd = hp.head_dim_k;
    const int64_t E = hp.n_expert, K = hp.n_ffn_experts_used(),
                  ffs = std::max<int64_t>(hp.n_ff_unrouted(), 1);
    // The buffers of models/gpu/gpu_forward.cpp, in its order.
    b.activations = u(nb) * 4 + 4                     // token ids, position
                    + 4 * floats(nb * d) + floats(d)  // x, u, mix, shared, mixer_out
                    + floats(nb * (C + inner + 2 * Hv)) + floats(nb * C) + floats(nb * inner)   // DeltaNet
                    + floats(nb * (hp.q_proj_rows() + 2 * Hkv * hd)) + 2 * floats(nb * H * hd)  // attention
                    + floats(nb * E + 1) + u(nb * K) * 4 + floats(nb * K)     // router, ids, weights
                    + floats(hp.n_expert_used * hp.n_ff_exp + hp.n_ff_shexp)  // decode MoE rows
                    + floats(nb * 2 * ffs) + floats(nb * ffs)                 // shared expert / dense FFN
                    + floats(8 * hp.n_vocab + kArgmaxSlotFloats);             // logits (8 rows), arg max
    // Scratch: the largest matmul of a micro-batch (every projection's shape), batched MoE or chunked
    // delta rule.
    uint64_t work = 16;
    const int64_t shapes[][2] = {{d, C},        {d, inner},  {d, Hv}, {inner, d},   {d, hp.q_proj_rows()},
                                 {d, Hkv * hd}, {H * hd, d}, {d, E},  {d, 2 * ffs}, {ffs, d}};
    for (const auto& sh : shapes)  // a block the model lacks (DeltaNet in qwen3moe) has no shapes
        if (sh[0] > 0 && sh[1] > 0) work = std::max(work, gpu_matmul_scratch(sh[0], sh[1], nb));
    // The batched MoE: routed experts, or a dense FFN streamed from host memory as one expert.
    if (hp.has_moe())
        work = std::max(work, gpu_moe_scratch(E, d, hp.n_ff_exp, nb, K));
    else if (s.any_host_experts)
        work = std::max(work, gpu_moe_scratch(1, d, hp.n_ff, nb, 1));
    if (Hv > 0) work = std::max(work, gpu_delta_net_scratch(Hv, nb));
    b.matmul_scratch = work;
    b.attention_scratch = std::max<uint64_t>(16, gpu_attention_scratch(H, Hkv, hd, std::min(nb, ctx), ctx));
    b.staging = 2 * s.largest_streamed_layer;
    b.pinned_host =
        floats(8 * hp.n_vocab + kArgmaxSlotFloats) + u(nb + 1) * 4;  // logits, token ids, position
    if (!s.token_embd_on_gpu) b.pinned_host += floats(nb * d);
    if (s.any_host_experts) b.pinned_host += 2 * floats(nb * d) + 2 * u(nb * K) * 4;
    if (s.expert_cache_slots > 0) {
        // The pool and its tables, the lookup's slot ids and weights of one token (device), and the
        // tables' pinned staging for their uploads.
        b.expert_cache = expert_cache_device_bytes(s.expert_cache_slots, s.expert_cache_slot_bytes,
                                                   hp.n_trunk(), hp.n_expert) +
                         u(K) * 4 + floats(K);
        b.pinned_host += static_cast<uint64_t>(hp.n_trunk() * hp.n_expert) * sizeof(int32_t);
    }
    return b;
}

}  // namespace mox::models
