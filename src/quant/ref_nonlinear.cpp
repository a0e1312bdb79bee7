// Non-linear 4-bit formats (spec §3.1, §3.4, §5): values come from a 16-entry table, not a linear grid.
//
//   IQ4_NL (18 B / 32):  d f16 @0, qs[16] @2                                   value d * kvalues_iq4nl[q]
//   IQ4_XS (136 B / 256): d f16 @0, scales_h u16 @2, scales_l[4] @4, qs[128] @8  value
//   d*(ls-32)*kvalues_iq4nl[q] MXFP4 (17 B / 32):   e u8 (E8M0) @0, qs[16] @1 value kvalues_mxfp4[q] *
//   2^(e-128)
//
// Nibble order as the legacy types: within each 32-element (sub-)block, byte j holds element j in its
// low nibble and element j+16 in its high nibble.
#include "quant/ref_common.h"
#include "quant/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mox::quant::ref {

namespace {

constexpr size_t kIq4nlBytes = 18, kIq4xsBytes = 136, kMxfp4Bytes = 17;

inline int nibble(const uint8_t* qs, int e) {
    return e < 16 ? (qs[e] & 0x0F) : (qs[e - 16] >> 4);
}

inline void pack_nibbles(uint8_t* qs, const uint8_t* q) {
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}

// Index of the kvalues_iq4nl entry nearest to x (values are sorted). Between two neighbours the lower one
// wins only if strictly nearer, i.e. exact midpoints go to the upper entry (as ggml's best_index_int8).
int nearest_iq4nl_index(float x) {
    const int8_t* v = kValuesIq4nl;
    if (x <= v[0]) return 0;
    if (x >= v[15]) return 15;
    int lo = 0, hi = 15;  // invariant: v[lo] <= x < v[hi]
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < v[mid])
            hi = mid;
        else
            lo = mid;
    }
    return x - static_cast<float>(v[lo]) < static_cast<float>(v[hi]) - x ? lo : hi;
}

// Fits one 32-element block to d * kvalues_iq4nl[L[j]] with weights x^2 (no imatrix).
// Start: 1/d = kvalues[0]/max (ntry > 0) or -kvalues[0]/max (ggml's quantize_row_iq4_nl_ref, ntry = -1),
// max being the signed largest-|x| element; pick nearest entries; refit d by weighted least squares. Then,
// for itry in [-ntry, ntry], try 1/d = (itry + kvalues[0])/max and keep the d that maximises
// (sum wqx)^2 / sum wq^2 (the loop is empty for ntry = -1). Returns d, or 0 for an all-zero block
// (L untouched then). L holds the entries of the *starting* scale: callers that want entries matching
// the returned d re-pick them.
float fit_iq4_block(const float* x, int ntry, uint8_t* L) {
    const float max = signed_absmax(x, kQK);
    if (std::fabs(max) < kGroupMaxEps) return 0.0f;
    const float v0 = kValuesIq4nl[0];
    float d = ntry > 0 ? -max / v0 : max / v0;
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < kQK; ++j) {
        L[j] = static_cast<uint8_t>(nearest_iq4nl_index(id * x[j]));
        const float q = kValuesIq4nl[L[j]];
        const float w = x[j] * x[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
        id = static_cast<float>(itry + kValuesIq4nl[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < kQK; ++j) {
            const float q = kValuesIq4nl[nearest_iq4nl_index(id * x[j])];
            const float w = x[j] * x[j];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

// Index of the kvalues_mxfp4 entry whose scaled value is nearest to x; ties go to the lower index.
int nearest_mxfp4_index(float x, float scale) {
    int best = 0;
    float best_err = std::fabs(static_cast<float>(kValuesMxfp4[0]) * scale - x);
    for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(static_cast<float>(kValuesMxfp4[i]) * scale - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// IQ4_NL

void dequantize_iq4_nl(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQK; ++i, b += kIq4nlBytes, dst += kQK) {
        const float d = load_f16(b);
        for (int e = 0; e < kQK; ++e) dst[e] = d * static_cast<float>(kValuesIq4nl[nibble(b + 2, e)]);
    }
}

// What llama-quantize writes (ggml's quantize_iq4_nl without an imatrix): the fit with ntry = 7, then every
// element's entry re-picked for the fitted fp32 d; an all-zero block gets d = 0 and entry 8 (the value 1,
// nearest to 0) everywhere. Not quantize_row_iq4_nl_ref (ntry = -1: the entries of the starting scale),
// which ggml's CPU backend uses for tensors it converts at run time (an IQ4_NL KV cache) and which loses
// more. tests/quant/quant_oracle_test.cpp compares these bytes with llama.cpp's.
void quantize_iq4_nl(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQK; ++i, b += kIq4nlBytes, src += kQK) {
        uint8_t L[kQK];
        const float d = fit_iq4_block(src, 7, L);
        store_f16(b, d);
        const float id = d != 0 ? 1 / d : 0.f;
        for (int j = 0; j < kQK; ++j) L[j] = static_cast<uint8_t>(nearest_iq4nl_index(id * src[j]));
        pack_nibbles(b + 2, L);
    }
}

// ---------------------------------------------------------------------------------------------------
// IQ4_XS

void dequantize_iq4_xs(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kIq4xsBytes, dst += kQKK) {
        const float d = load_f16(b);
        const uint16_t scales_h = load_u16(b + 2);
        const uint8_t* scales_l = b + 4;
        const uint8_t* qs = b + 8;
        for (int ib = 0; ib < 8; ++ib) {
            const int ls =
                ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * static_cast<float>(ls - 32);
            for (int e = 0; e < kQK; ++e)
                dst[32 * ib + e] = dl * static_cast<float>(kValuesIq4nl[nibble(qs + 16 * ib, e)]);
        }
    }
}

// Per 32 sub-block fit with ntry = 7; then the 8 sub-block scales become 6-bit integers against the
// largest-|.| one (d = -max_scale/32), and every element's entry is re-picked for its quantized scale.
// The re-pick uses the fp32 d, not the stored fp16 one.
void quantize_iq4_xs(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kIq4xsBytes, src += kQKK) {
        float scales[8];
        uint8_t L[kQKK];
        for (int ib = 0; ib < 8; ++ib) scales[ib] = fit_iq4_block(src + 32 * ib, 7, L + 32 * ib);
        const float max_scale = signed_absmax(scales, 8);
        const float d = -max_scale / 32;
        store_f16(b, d);
        const float id = d != 0 ? 1 / d : 0.f;
        uint16_t scales_h = 0;
        uint8_t* scales_l = b + 4;
        std::memset(scales_l, 0, 4);
        for (int ib = 0; ib < 8; ++ib) {
            const int l = std::clamp(nearest_int(id * scales[ib]), -32, 31);
            const float dl = d * static_cast<float>(l);
            const float idl = dl != 0 ? 1 / dl : 0.f;
            for (int j = 0; j < kQK; ++j)
                L[32 * ib + j] = static_cast<uint8_t>(nearest_iq4nl_index(idl * src[32 * ib + j]));
            const int biased = l + 32;
            scales_l[ib / 2] |= static_cast<uint8_t>((biased & 0x0F) << (4 * (ib % 2)));
            scales_h |= static_cast<uint16_t>((biased >> 4) << (2 * ib));
        }
        store_u16(b + 2, scales_h);
        for (int ib = 0; ib < 8; ++ib) pack_nibbles(b + 8 + 16 * ib, L + 32 * ib);
    }
}

// ---------------------------------------------------------------------------------------------------
// MXFP4

void dequantize_mxfp4(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQK; ++i, b += kMxfp4Bytes, dst += kQK) {
        const float d = e8m0_to_fp32_half(b[0]);
        for (int e = 0; e < kQK; ++e) dst[e] = static_cast<float>(kValuesMxfp4[nibble(b + 1, e)]) * d;
    }
}

// e = floor(log2(amax)) - 2 + 127, so the largest element lands in the top binade of the doubled table
// (values up to 12 * 2^(e-128) = 6 * 2^(e-127)); then each element takes its nearest table entry.
void quantize_mxfp4(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQK; ++i, b += kMxfp4Bytes, src += kQK) {
        float amax = 0;
        for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(src[j]));
        uint8_t e = 0;
        if (amax > 0) {
            // Below 2^-125 the exponent would go negative; ggml's cast is undefined there, we clamp to 0.
            const float biased = std::floor(std::log2(amax)) - 2 + 127;
            e = biased < 0 ? 0 : static_cast<uint8_t>(biased);
        }
        b[0] = e;
        const float d = e8m0_to_fp32_half(e);
        uint8_t q[kQK];
        for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(nearest_mxfp4_index(src[j], d));
        pack_nibbles(b + 1, q);
    }
}

}  // namespace mox::quant::ref
