// Causal multi-head attention with grouped KV heads over a KV cache stored in a block format
// (f32, f16, bf16, q8_0, q4_0, ...). Reference path: rows are dequantized to fp32 on read.
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
// q head h reads KV head h / (n_head / n_head_kv).
void attention(const KvView& kv, const AttentionShape& shape, const float* q, int64_t n_keys, float* out);

}  // namespace mox::ops
