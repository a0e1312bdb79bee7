#include "ops/attention.h"

#include "core/error.h"
#include "ops/basic.h"

#include <cstring>
#include <vector>

namespace mox::ops {

namespace {

void store_row(quant::TypeId type, uint8_t* dst, const float* src, int64_t n) {
    if (type == quant::TypeId::f32) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    const quant::TypeTraits& t = quant::traits(type);
    MOX_CHECK(t.quantize != nullptr, "KV type {} has no quantizer", t.name);
    t.quantize(src, dst, n);
}

void load_row(quant::TypeId type, const uint8_t* src, int64_t n, float* dst) {
    if (type == quant::TypeId::f32) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    quant::traits(type).dequantize(src, dst, n);
}

}  // namespace

void kv_store(const KvView& kv, int64_t pos, const float* k_row, const float* v_row) {
    MOX_CHECK(pos >= 0 && pos < kv.capacity, "KV position {} outside capacity {}", pos, kv.capacity);
    store_row(kv.k_type, kv.k + static_cast<size_t>(pos) * kv.k_row_bytes, k_row, kv.row_elems);
    store_row(kv.v_type, kv.v + static_cast<size_t>(pos) * kv.v_row_bytes, v_row, kv.row_elems);
}


void attention(const KvView& kv, const AttentionShape& s, const float* q, int64_t n_keys, float* out) {
    MOX_CHECK(n_keys >= 1 && n_keys <= kv.capacity);
    MOX_CHECK(s.n_head % s.n_head_kv == 0);
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t d = s.head_dim;
    std::vector<float> row(static_cast<size_t>(kv.row_elems));
    std::vector<float> scores(static_cast<size_t>(s.n_head * n_keys));
    for (int64_t j = 0; j < n_keys; ++j) {
        load_row(kv.k_type, kv.k + static_cast<size_t>(j) * kv.k_row_bytes, kv.row_elems, row.data());
        for (int64_t h = 0; h < s.n_head; ++h) {
            const float* k = row.data() + (h / group) * d;
            const float* qh = q + h * d;
            float dot = 0;
            for (int64_t i = 0; i < d; ++i) dot += qh[i] * k[i];
            scores[static_cast<size_t>(h * n_keys + j)] = dot * s.scale;
        }
    }
    for (int64_t h = 0; h < s.n_head; ++h) softmax(scores.data() + h * n_keys, n_keys);
    std::fill(out, out + s.n_head * d, 0.0f);
    for (int64_t j = 0; j < n_keys; ++j) {
        load_row(kv.v_type, kv.v + static_cast<size_t>(j) * kv.v_row_bytes, kv.row_elems, row.data());
        for (int64_t h = 0; h < s.n_head; ++h) {
            const float p = scores[static_cast<size_t>(h * n_keys + j)];
            const float* v = row.data() + (h / group) * d;
            float* o = out + h * d;
            for (int64_t i = 0; i < d; ++i) o[i] += p * v[i];
        }
    }
}

}  // namespace mox::ops
