// Causal multi-head attention with grouped KV heads over a KV cache stored in a block format
// (f32, f16, bf16, q8_0, q4_0, ...). Reference path: rows are dequantized to fp32 on read; fast path
// (ops/cpu/attention_*.cpp): flash-style online softmax over tiles of keys, rows converted to fp32
// once per tile and shared by all query heads of a KV head.
#pragma once

#include "ops/context.h"
#include "quant/types.h"

#include <cstddef>
#include <cstdint>

namespace mox::ops {

// One layer's K and V cache for one sequence: `capacity` rows of `row_elems` elements
// (n_head_kv * head_dim), row r at position r.
struct KvView {
    uint8_t* k = nullptr;
    uint8_t* v = nullptr;
    quant::TypeId k_type = quant::TypeId::f16;
    quant::TypeId v_type = quant::TypeId::f16;
    int64_t row_elems = 0;
    size_t k_row_bytes = 0;
    size_t v_row_bytes = 0;
    int64_t capacity = 0;
};

// Quantizes one token's K and V rows into position `pos`.
void kv_store(const KvView& kv, int64_t pos, const float* k_row, const float* v_row);

struct AttentionShape {
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;  // same for K and V here
    float scale = 0;       // usually 1/sqrt(head_dim)
};

// out [n_head * head_dim] = softmax(q K^T * scale) V over positions [0, n_keys) of the cache;
// q head h reads KV head h / (n_head / n_head_kv). Dispatches on ctx.isa and runs on ctx.pool (so it
// must not be called from inside a task of that pool).
void attention(const Context& ctx, const KvView& kv, const AttentionShape& shape, const float* q, int64_t n_keys,
               float* out);

// A block of n_q consecutive query tokens at positions pos0 .. pos0 + n_q - 1 of one sequence, causal:
// query i attends to cache positions [0, pos0 + i] (their K/V must already be stored).
// q, out: [n_q][n_head * head_dim]. One call per layer and sequence; parallel over KV heads x query
// blocks, and over the context as well when that alone leaves threads idle (decode, long contexts).
void attention_batch(const Context& ctx, const KvView& kv, const AttentionShape& shape, const float* q, int64_t n_q,
                     int64_t pos0, float* out);

// The scalar reference for one query (fp32 rows dequantized on read, two passes, n_head * n_keys
// scores); the fast kernels are tested against it.
void attention_reference(const KvView& kv, const AttentionShape& shape, const float* q, int64_t n_keys, float* out);

}  // namespace mox::ops
