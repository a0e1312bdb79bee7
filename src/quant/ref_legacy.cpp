// Legacy 32-element block formats (spec §3.1, §5). Shared nibble order for the 4/5-bit types: byte
// qs[j] holds element j in its low nibble and element j+16 in its high nibble.
//
//   Q4_0 (18 B): d f16 @0, qs[16] @2                      value d*(q-8)
//   Q4_1 (20 B): d f16 @0, m f16 @2, qs[16] @4            value d*q + m
//   Q5_0 (22 B): d f16 @0, qh u32 @2, qs[16] @6           value d*(q-16), bit e of qh = bit 4 of q_e
//   Q5_1 (24 B): d f16 @0, m f16 @2, qh u32 @4, qs[16] @8 value d*q + m
//   Q8_0 (34 B): d f16 @0, qs[32] int8 @2                 value d*q
//   Q8_1 (36 B): d f16 @0, s f16 @2 (= d*sum q), qs[32] int8 @4
#include "quant/ref_common.h"
#include "quant/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mox::quant::ref {

namespace {

constexpr size_t kQ4_0Bytes = 18, kQ4_1Bytes = 20, kQ5_0Bytes = 22, kQ5_1Bytes = 24;
constexpr size_t kQ8_0Bytes = 34, kQ8_1Bytes = 36;

// The 4-bit quant of element e (0..31) of a block whose nibbles start at qs.
inline int nibble(const uint8_t* qs, int e) {
    return e < 16 ? (qs[e] & 0x0F) : (qs[e - 16] >> 4);
}

// Packs 32 values (each 0..15 after masking) into 16 bytes: element j low, element j+16 high.
inline void pack_nibbles(uint8_t* qs, const uint8_t q[kQK]) {
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}

// Bit 4 of each of 32 five-bit values, as the u32 `qh` field (bit e for element e).
inline uint32_t pack_high_bits(const uint8_t q[kQK]) {
    uint32_t qh = 0;
    for (int e = 0; e < kQK; ++e) qh |= static_cast<uint32_t>((q[e] >> 4) & 1) << e;
    return qh;
}

// The min and max over a block, the range of the asymmetric (_1) formats.
inline void min_max(const float* x, float* mn, float* mx) {
    float lo = std::numeric_limits<float>::max();
    float hi = -std::numeric_limits<float>::max();
    for (int j = 0; j < kQK; ++j) {
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
    }
    *mn = lo;
    *mx = hi;
}

// Symmetric 4/5-bit quants (Q4_0: levels = 16, Q5_0: levels = 32). The largest-magnitude element maps to
// q = 0, i.e. d = max / -(levels/2). The +0.5 and the truncating cast form a round-half-up; evaluated as
// separate fp32 operations (no FMA), which is what gguf-py and an x86-64 ggml build do.
inline float quantize_symmetric(const float* x, uint8_t q[kQK], int levels) {
    const float max = signed_absmax(x, kQK);
    const float d = max / static_cast<float>(-levels / 2);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float offset = static_cast<float>(levels / 2) + 0.5f;
    for (int j = 0; j < kQK; ++j) {
        const float scaled = x[j] * id;
        q[j] = static_cast<uint8_t>(std::min(levels - 1, static_cast<int>(scaled + offset)));
    }
    return d;
}

// Asymmetric 4/5-bit quants (Q4_1: levels = 16, Q5_1: levels = 32) over [min, max].
inline void quantize_asymmetric(const float* x, uint8_t q[kQK], int levels, float* d_out, float* m_out) {
    float mn, mx;
    min_max(x, &mn, &mx);
    const float d = (mx - mn) / static_cast<float>(levels - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQK; ++j) {
        const float scaled = (x[j] - mn) * id;
        q[j] = static_cast<uint8_t>(std::min(levels - 1, static_cast<int>(scaled + 0.5f)));
    }
    *d_out = d;
    *m_out = mn;
}

// Q8_0/Q8_1 quants: d = amax/127, q = roundf(x/d) (half away from zero, unlike nearest_int). The quants
// use the unrounded fp32 d. Returns d and the sum of the quants.
inline float quantize_q8(const float* x, int8_t q[kQK], int* sum) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int s = 0;
    for (int j = 0; j < kQK; ++j) {
        q[j] = static_cast<int8_t>(std::roundf(x[j] * id));
        s += q[j];
    }
    *sum = s;
    return d;
}

}  // namespace

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQK; ++i, b += kQ4_0Bytes, dst += kQK) {
        const float d = load_f16(b);
        for (int e = 0; e < kQK; ++e) dst[e] = static_cast<float>(nibble(b + 2, e) - 8) * d;
    }
}

void quantize_q4_0(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQK; ++i, b += kQ4_0Bytes, src += kQK) {
        uint8_t q[kQK];
        store_f16(b, quantize_symmetric(src, q, 16));
        pack_nibbles(b + 2, q);
    }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQK; ++i, b += kQ4_1Bytes, dst += kQK) {
        const float d = load_f16(b);
        const float m = load_f16(b + 2);
        for (int e = 0; e < kQK; ++e) dst[e] = static_cast<float>(nibble(b + 4, e)) * d + m;
    }
}

void quantize_q4_1(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQK; ++i, b += kQ4_1Bytes, src += kQK) {
        uint8_t q[kQK];
        float d, m;
        quantize_asymmetric(src, q, 16, &d, &m);
        store_f16(b, d);
        store_f16(b + 2, m);
        pack_nibbles(b + 4, q);
    }
}

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQK; ++i, b += kQ5_0Bytes, dst += kQK) {
        const float d = load_f16(b);
        const uint32_t qh = load_u32(b + 2);
        for (int e = 0; e < kQK; ++e) {
            const int q = nibble(b + 6, e) | static_cast<int>(((qh >> e) & 1) << 4);
            dst[e] = static_cast<float>(q - 16) * d;
        }
    }
}

void quantize_q5_0(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQK; ++i, b += kQ5_0Bytes, src += kQK) {
        uint8_t q[kQK];
        store_f16(b, quantize_symmetric(src, q, 32));
        store_u32(b + 2, pack_high_bits(q));
        pack_nibbles(b + 6, q);
    }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQK; ++i, b += kQ5_1Bytes, dst += kQK) {
        const float d = load_f16(b);
        const float m = load_f16(b + 2);
        const uint32_t qh = load_u32(b + 4);
        for (int e = 0; e < kQK; ++e) {
            const int q = nibble(b + 8, e) | static_cast<int>(((qh >> e) & 1) << 4);
            dst[e] = static_cast<float>(q) * d + m;
        }
    }
}

void quantize_q5_1(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQK; ++i, b += kQ5_1Bytes, src += kQK) {
        uint8_t q[kQK];
        float d, m;
        quantize_asymmetric(src, q, 32, &d, &m);
        store_f16(b, d);
        store_f16(b + 2, m);
        store_u32(b + 4, pack_high_bits(q));
        pack_nibbles(b + 8, q);
    }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQK; ++i, b += kQ8_0Bytes, dst += kQK) {
        const float d = load_f16(b);
        for (int e = 0; e < kQK; ++e) dst[e] = static_cast<float>(static_cast<int8_t>(b[2 + e])) * d;
    }
}

void quantize_q8_0(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQK; ++i, b += kQ8_0Bytes, src += kQK) {
        int8_t q[kQK];
        int sum;
        store_f16(b, quantize_q8(src, q, &sum));
        std::memcpy(b + 2, q, kQK);
    }
}

void dequantize_q8_1(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQK; ++i, b += kQ8_1Bytes, dst += kQK) {
        const float d = load_f16(b);  // s (@2) only serves dot products
        for (int e = 0; e < kQK; ++e) dst[e] = static_cast<float>(static_cast<int8_t>(b[4 + e])) * d;
    }
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQK; ++i, b += kQ8_1Bytes, src += kQK) {
        int8_t q[kQK];
        int sum;
        const float d = quantize_q8(src, q, &sum);
        store_f16(b, d);
        store_f16(b + 2, static_cast<float>(sum) * d);
        std::memcpy(b + 4, q, kQK);
    }
}

}  // namespace mox::quant::ref
