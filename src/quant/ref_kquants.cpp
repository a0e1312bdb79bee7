// K-quants: 256-element super-blocks (spec §3.3 layouts, §5 reference quantizers without an imatrix).
//
//   Q2_K (84 B):  scales[16] @0 (lo nibble scale, hi nibble min), qs[64] @16, d f16 @80, dmin f16 @82
//   Q3_K (110 B): hmask[32] @0, qs[64] @32, scales[12] @96 (6-bit, biased +32), d f16 @108
//   Q4_K (144 B): d f16 @0, dmin f16 @2, scales[12] @4 (get_scale_min_k4), qs[128] @16
//   Q5_K (176 B): d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48
//   Q6_K (210 B): ql[128] @0, qh[64] @128, scales[16] int8 @192, d f16 @208
//   Q8_K (292 B): d f32 @0, qs[256] int8 @4, bsums[16] int16 @260
//
// Dequantization forms (super-scale * integer sub-scale) first, then * q, then subtracts (dmin * m):
// that order is what makes the floats identical to ggml's.
#include "quant/ref_common.h"
#include "quant/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mox::quant::ref {

namespace {

constexpr size_t kQ2KBytes = 84, kQ3KBytes = 110, kQ4KBytes = 144, kQ5KBytes = 176, kQ6KBytes = 210;
constexpr size_t kQ8KBytes = 292;
constexpr int kMaxGroup = 32;  // the per-group fits see 16 (Q2_K, Q3_K, Q6_K) or 32 (Q4_K, Q5_K) elements

// ---------------------------------------------------------------------------------------------------
// Bit placement shared by Q2_K and Q3_K: the 2-bit quant of element e = 128h + 32s + l (h 0..1, s 0..3,
// l 0..31) is bits 2s..2s+1 of qs[32h + l].
inline int crumb(const uint8_t* qs, int e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    return (qs[32 * h + l] >> (2 * s)) & 3;
}
inline void pack_crumbs(uint8_t* qs, const uint8_t L[kQKK]) {
    std::memset(qs, 0, kQKK / 4);
    for (int e = 0; e < kQKK; ++e) {
        const int h = e / 128, s = (e % 128) / 32, l = e % 32;
        qs[32 * h + l] |= static_cast<uint8_t>((L[e] & 3) << (2 * s));
    }
}

// Q4_K / Q5_K low nibble of element e: chunk c = e/64 uses qs[32c .. 32c+31]; the low nibble of byte
// 32c+l is element 64c+l and the high nibble is element 64c+32+l.
inline int k4_nibble(const uint8_t* qs, int e) {
    const int c = e / 64, r = e % 64;
    return r < 32 ? (qs[32 * c + r] & 0x0F) : (qs[32 * c + r - 32] >> 4);
}
inline void pack_k4_nibbles(uint8_t* qs, const uint8_t L[kQKK]) {
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l)
            qs[32 * c + l] =
                static_cast<uint8_t>((L[64 * c + l] & 0x0F) | ((L[64 * c + 32 + l] & 0x0F) << 4));
}

// Bit e/32 of bits[e % 32]: Q3_K's hmask and Q5_K's qh place one extra bit per element this way.
inline int high_bit(const uint8_t* bits, int e) {
    return (bits[e % 32] >> (e / 32)) & 1;
}

// Q6_K element e = 128h + 32k + l: low 4 bits from ql[64h + l + 32(k&1)] (low nibble for k < 2, high for
// k >= 2), high 2 bits = bits 2k..2k+1 of qh[32h + l]. Returns q in 0..63 (the stored, +32 biased value).
inline int q6k_quant(const uint8_t* ql, const uint8_t* qh, int e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t lo_byte = ql[64 * h + l + 32 * (k & 1)];
    const int lo = k < 2 ? (lo_byte & 0x0F) : (lo_byte >> 4);
    const int hi = (qh[32 * h + l] >> (2 * k)) & 3;
    return lo | (hi << 4);
}

// ---------------------------------------------------------------------------------------------------
// Per-group fits (ggml's make_qkx2_quants, make_qx_quants and make_q3_quants, spec §5). The fp32
// expressions keep ggml's operand order, e.g. (w*l)*x, because the chosen quants depend on rounding.

// Asymmetric weighted fit: x[i] ~= scale * L[i] - neg_min with L in 0..nmax and neg_min >= 0.
// Starts from the plain min/max mapping, then tries nstep+1 stretched inverse scales
// (rmin + rdelta*is + nmax)/(max - min); for each, solves the 2x2 weighted least-squares problem for
// (scale, min) (forcing min = 0 if it comes out positive) and keeps it if its weighted error, squared or
// absolute (use_mad), is lower. Returns the scale; writes -min to *neg_min.
float fit_asymmetric(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                     float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; ++i) {
        min = std::min(min, x[i]);  // written as ggml's "if (x < min)" / "if (x > max)"
        max = x[i] > max ? x[i] : max;
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;  // the format's offset only ever subtracts
    if (max == min) {
        std::fill(L, L + n, uint8_t{0});
        *neg_min = -min;
        return 0.0f;
    }
    auto error_of = [&](float scale, float offset, const uint8_t* q) {
        float err = 0;
        for (int i = 0; i < n; ++i) {
            float diff = scale * static_cast<float>(q[i]) + offset - x[i];
            diff = use_mad ? std::fabs(diff) : diff * diff;
            err += w[i] * diff;
        }
        return err;
    };
    auto quantize_with = [&](float iscale, uint8_t* q) {
        for (int i = 0; i < n; ++i)
            q[i] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
    };

    float iscale = static_cast<float>(nmax) / (max - min);
    float scale = 1 / iscale;
    quantize_with(iscale, L);
    float best_error = error_of(scale, min, L);

    // Note: once a candidate is accepted, later candidates are derived from the *updated* min (both the
    // range max - min and the offset x - min), as in ggml; it is part of the reference's behaviour.
    uint8_t trial[kMaxGroup];
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
        quantize_with(iscale, trial);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const float wl = w[i] * static_cast<float>(trial[i]);
            sum_l += wl;
            sum_l2 += wl * static_cast<float>(trial[i]);
            sum_xl += wl * x[i];
        }
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        const float err = error_of(this_scale, this_min, trial);
        if (err < best_error) {
            std::copy(trial, trial + n, L);
            best_error = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

// Symmetric fit with weights x^2 (make_qx_quants, rmse_type 1, no imatrix): x[i] ~= scale * (L[i] - nmax)
// with L[i] - nmax in -nmax..nmax-1. The largest-|x| element starts at -nmax; then the inverse scales
// -(nmax + 0.1*is)/max, is = -9..9, are tried, keeping the one that maximises (sum wxl)^2 / sum wl^2,
// with the least-squares scale sum wxl / sum wl^2. Returns the (signed) scale; 0 for an all-zero group.
float fit_symmetric(int n, int nmax, const float* x, uint8_t* L) {
    const float max = signed_absmax(x, n);
    if (std::fabs(max) < kGroupMaxEps) {
        std::fill(L, L + n, uint8_t{0});
        return 0.0f;
    }
    // Quantizes with iscale into L (if non-null) and returns the weighted sums.
    auto sums_for = [&](float iscale, uint8_t* out, float* sumlx, float* suml2) {
        float slx = 0, sl2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            if (out) out[i] = static_cast<uint8_t>(l + nmax);
            const float w = x[i] * x[i];
            slx += w * x[i] * static_cast<float>(l);
            sl2 += w * static_cast<float>(l) * static_cast<float>(l);
        }
        *sumlx = slx;
        *suml2 = sl2;
    };
    float sumlx, suml2;
    sums_for(static_cast<float>(-nmax) / max, L, &sumlx, &suml2);
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
        sums_for(iscale, nullptr, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            sums_for(iscale, L, &sumlx, &suml2);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Q3_K's symmetric fit (make_q3_quants with rmse): as fit_symmetric's first pass (weights x^2, levels
// -nmax..nmax-1), then up to 5 rounds of coordinate descent: each quant in turn is re-chosen as the
// nearest level to x / (scale the other quants imply), and kept if that raises (sum wxl)^2 / sum wl^2.
// Returns sum wxl / sum wl^2; L gets the levels biased by +nmax.
float fit_symmetric_q3(int n, int nmax, const float* x, uint8_t* L) {
    const float max = signed_absmax(x, n);
    if (std::fabs(max) < kGroupMaxEps) {
        std::fill(L, L + n, uint8_t{0});
        return 0.0f;
    }
    const float iscale = static_cast<float>(-nmax) / max;
    int level[kMaxGroup];
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        level[i] = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * static_cast<float>(level[i]);
        suml2 += w * static_cast<float>(level[i]) * static_cast<float>(level[i]);
    }
    for (int round = 0; round < 5; ++round) {
        int changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            const float li = static_cast<float>(level[i]);
            float slx = sumlx - w * x[i] * li;  // the sums without element i
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * li * li;
            const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (new_l == level[i]) continue;
            const float nl = static_cast<float>(new_l);
            slx += w * x[i] * nl;
            sl2 += w * nl * nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                level[i] = new_l;
                sumlx = slx;
                suml2 = sl2;
                ++changed;
            }
        }
        if (changed == 0) break;
    }
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(level[i] + nmax);
    return sumlx / suml2;
}

// Re-quantizes one group with the stored (rounded) scale d and offset dm: q = clamp(round((x+dm)/d), 0,
// nmax).
inline void requantize_asym(const float* x, int n, float d, float dm, int nmax, uint8_t* L) {
    for (int i = 0; i < n; ++i)
        L[i] = static_cast<uint8_t>(std::clamp(nearest_int((x[i] + dm) / d), 0, nmax));
}

// The Q4_K/Q5_K quantizer body: per 32 sub-block an asymmetric fit with weights sqrt(mean x^2) + |x|,
// then the 8 scales and 8 mins are mapped to 6 bits against their maxima and every element is
// re-quantized with the rounded values. Writes d, dmin, the 12 scale bytes and L (0..nmax).
void quantize_k4_body(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* block,
                      uint8_t L[kQKK]) {
    float scales[8], mins[8];
    float max_scale = 0, max_min = 0;
    for (int b = 0; b < 8; ++b) {
        const float* xb = x + 32 * b;
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += xb[l] * xb[l];
        const float av_x = std::sqrt(sum_x2 / 32);
        float w[32];
        for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xb[l]);
        scales[b] = fit_asymmetric(32, nmax, xb, w, L + 32 * b, &mins[b], rmin, rdelta, nstep, false);
        if (scales[b] > max_scale) max_scale = scales[b];
        if (mins[b] > max_min) max_min = mins[b];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int b = 0; b < 8; ++b) {
        // Narrowed to uint8 before the clamp, as ggml does (only matters for a negative fitted scale).
        ls[b] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[b])));
        lm[b] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[b])));
    }
    store_f16(block, max_scale / 63.f);
    store_f16(block + 2, max_min / 63.f);
    set_scale_min_k4(block + 4, ls, lm);

    const float d_all = load_f16(block), dmin_all = load_f16(block + 2);
    for (int b = 0; b < 8; ++b) {
        uint8_t sc, m;
        get_scale_min_k4(block + 4, b, &sc, &m);
        const float d = d_all * static_cast<float>(sc);
        if (d == 0) continue;  // keeps the first-pass quants; they dequantize to -dm regardless
        requantize_asym(x + 32 * b, 32, d, dmin_all * static_cast<float>(m), nmax, L + 32 * b);
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Q2_K

void dequantize_q2_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kQ2KBytes, dst += kQKK) {
        const uint8_t* scales = b;
        const uint8_t* qs = b + 16;
        const float d = load_f16(b + 80), dmin = load_f16(b + 82);
        for (int g = 0; g < 16; ++g) {
            const float dl = d * static_cast<float>(scales[g] & 0x0F);
            const float ml = dmin * static_cast<float>(scales[g] >> 4);
            for (int e = 16 * g; e < 16 * g + 16; ++e) dst[e] = dl * static_cast<float>(crumb(qs, e)) - ml;
        }
    }
}

// Per 16-group asymmetric fit (weights |x|, mean absolute error), then the 16 scales and mins are mapped
// to 4 bits against their maxima and every element is re-quantized with the rounded values.
void quantize_q2_k(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kQ2KBytes, src += kQKK) {
        uint8_t L[kQKK];
        float scales[16], mins[16];
        float max_scale = 0, max_min = 0;
        for (int g = 0; g < 16; ++g) {
            float w[16];
            for (int l = 0; l < 16; ++l) w[l] = std::fabs(src[16 * g + l]);
            scales[g] = fit_asymmetric(16, 3, src + 16 * g, w, L + 16 * g, &mins[g], -0.5f, 0.1f, 15, true);
            if (scales[g] > max_scale) max_scale = scales[g];
            if (mins[g] > max_min) max_min = mins[g];
        }
        uint8_t* packed = b;
        std::memset(packed, 0, 16);
        if (max_scale > 0) {
            const float iscale = 15.f / max_scale;
            for (int g = 0; g < 16; ++g)
                packed[g] = static_cast<uint8_t>(std::min(15, nearest_int(iscale * scales[g])));
            store_f16(b + 80, max_scale / 15.f);
        } else {
            store_f16(b + 80, 0.0f);
        }
        if (max_min > 0) {
            const float iscale = 15.f / max_min;
            for (int g = 0; g < 16; ++g)
                packed[g] |= static_cast<uint8_t>(std::min(15, nearest_int(iscale * mins[g])) << 4);
            store_f16(b + 82, max_min / 15.f);
        } else {
            store_f16(b + 82, 0.0f);
        }
        const float d_all = load_f16(b + 80), dmin_all = load_f16(b + 82);
        for (int g = 0; g < 16; ++g) {
            const float d = d_all * static_cast<float>(packed[g] & 0x0F);
            if (d == 0) continue;
            requantize_asym(src + 16 * g, 16, d, dmin_all * static_cast<float>(packed[g] >> 4), 3,
                            L + 16 * g);
        }
        pack_crumbs(b + 16, L);
    }
}

// ---------------------------------------------------------------------------------------------------
// Q3_K

void dequantize_q3_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kQ3KBytes, dst += kQKK) {
        const uint8_t* hmask = b;
        const uint8_t* qs = b + 32;
        const uint8_t* scales = b + 96;
        const float d_all = load_f16(b + 108);
        for (int g = 0; g < 16; ++g) {
            const float dl = d_all * static_cast<float>(get_scale_q3k(scales, g) - 32);
            for (int e = 16 * g; e < 16 * g + 16; ++e) {
                const int q = crumb(qs, e) - (high_bit(hmask, e) ? 0 : 4);  // a set bit means no offset
                dst[e] = dl * static_cast<float>(q);
            }
        }
    }
}

// Per 16-group symmetric fit (levels -4..3), 6-bit signed group scales against the largest-|.| one
// (iscale = -32/max_scale, d = 1/iscale), then re-quantization with the rounded scales.
void quantize_q3_k(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kQ3KBytes, src += kQKK) {
        uint8_t L[kQKK];
        float scales[16];
        for (int g = 0; g < 16; ++g) scales[g] = fit_symmetric_q3(16, 4, src + 16 * g, L + 16 * g);
        const float max_scale = signed_absmax(scales, 16);

        uint8_t biased[16] = {};
        if (max_scale != 0) {
            const float iscale = -32.f / max_scale;
            for (int g = 0; g < 16; ++g)
                biased[g] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * scales[g]), -32, 31) + 32);
            store_f16(b + 108, 1 / iscale);
        } else {
            store_f16(b + 108, 0.0f);  // all-zero block: d = 0, scale bytes 0 (i.e. -32)
        }
        set_scales_q3k(b + 96, biased);

        const float d_all = load_f16(b + 108);
        for (int g = 0; g < 16; ++g) {
            const float d = d_all * static_cast<float>(get_scale_q3k(b + 96, g) - 32);
            if (d == 0) continue;
            for (int l = 0; l < 16; ++l) {
                const int q = std::clamp(nearest_int(src[16 * g + l] / d), -4, 3);
                L[16 * g + l] = static_cast<uint8_t>(q + 4);
            }
        }
        uint8_t* hmask = b;
        std::memset(hmask, 0, 32);
        for (int e = 0; e < kQKK; ++e) {
            if (L[e] > 3) {
                hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
                L[e] -= 4;
            }
        }
        pack_crumbs(b + 32, L);
    }
}

// ---------------------------------------------------------------------------------------------------
// Q4_K / Q5_K

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kQ4KBytes, dst += kQKK) {
        const float d = load_f16(b), dmin = load_f16(b + 2);
        const uint8_t* qs = b + 16;
        for (int sb = 0; sb < 8; ++sb) {
            uint8_t sc, m;
            get_scale_min_k4(b + 4, sb, &sc, &m);
            const float d1 = d * static_cast<float>(sc);
            const float m1 = dmin * static_cast<float>(m);
            for (int e = 32 * sb; e < 32 * sb + 32; ++e)
                dst[e] = d1 * static_cast<float>(k4_nibble(qs, e)) - m1;
        }
    }
}

void quantize_q4_k(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kQ4KBytes, src += kQKK) {
        uint8_t L[kQKK];
        quantize_k4_body(src, 15, -1.0f, 0.1f, 20, b, L);
        pack_k4_nibbles(b + 16, L);
    }
}

void dequantize_q5_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kQ5KBytes, dst += kQKK) {
        const float d = load_f16(b), dmin = load_f16(b + 2);
        const uint8_t* qh = b + 16;
        const uint8_t* qs = b + 48;
        for (int sb = 0; sb < 8; ++sb) {
            uint8_t sc, m;
            get_scale_min_k4(b + 4, sb, &sc, &m);
            const float d1 = d * static_cast<float>(sc);
            const float m1 = dmin * static_cast<float>(m);
            for (int e = 32 * sb; e < 32 * sb + 32; ++e) {
                const int q = k4_nibble(qs, e) | (high_bit(qh, e) << 4);
                dst[e] = d1 * static_cast<float>(q) - m1;
            }
        }
    }
}

void quantize_q5_k(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kQ5KBytes, src += kQKK) {
        uint8_t L[kQKK];
        quantize_k4_body(src, 31, -0.5f, 0.1f, 15, b, L);
        uint8_t* qh = b + 16;
        std::memset(qh, 0, 32);
        for (int e = 0; e < kQKK; ++e) {
            if (L[e] > 15) {
                qh[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
                L[e] -= 16;
            }
        }
        pack_k4_nibbles(b + 48, L);
    }
}

// ---------------------------------------------------------------------------------------------------
// Q6_K

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kQ6KBytes, dst += kQKK) {
        const uint8_t* ql = b;
        const uint8_t* qh = b + 128;
        const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
        const float d = load_f16(b + 208);
        for (int g = 0; g < 16; ++g) {
            const float dl = d * static_cast<float>(scales[g]);
            for (int e = 16 * g; e < 16 * g + 16; ++e)
                dst[e] = dl * static_cast<float>(q6k_quant(ql, qh, e) - 32);
        }
    }
}

// Per 16-group symmetric fit (levels -32..31, weights x^2), int8 group scales against the largest-|.|
// one (iscale = -128/max_scale, d = 1/iscale), then re-quantization with the rounded scales.
void quantize_q6_k(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kQ6KBytes, src += kQKK) {
        uint8_t L[kQKK];
        float scales[16];
        for (int g = 0; g < 16; ++g) scales[g] = fit_symmetric(16, 32, src + 16 * g, L + 16 * g);
        const float max_scale = signed_absmax(scales, 16);
        if (std::fabs(max_scale) < kGroupMaxEps) {
            std::memset(b, 0, kQ6KBytes);  // all-zero block; d = +0
            continue;
        }
        const float iscale = -128.f / max_scale;
        store_f16(b + 208, 1 / iscale);
        auto* qscales = reinterpret_cast<int8_t*>(b + 192);
        for (int g = 0; g < 16; ++g)
            qscales[g] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[g])));

        const float d_all = load_f16(b + 208);
        for (int g = 0; g < 16; ++g) {
            const float d = d_all * static_cast<float>(qscales[g]);
            if (d == 0) continue;
            for (int l = 0; l < 16; ++l)
                L[16 * g + l] =
                    static_cast<uint8_t>(std::clamp(nearest_int(src[16 * g + l] / d), -32, 31) + 32);
        }
        uint8_t* ql = b;
        uint8_t* qh = b + 128;
        std::memset(ql, 0, 128);
        std::memset(qh, 0, 64);
        for (int e = 0; e < kQKK; ++e) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            ql[64 * h + l + 32 * (k & 1)] |= static_cast<uint8_t>((L[e] & 0x0F) << (k < 2 ? 0 : 4));
            qh[32 * h + l] |= static_cast<uint8_t>((L[e] >> 4) << (2 * k));
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Q8_K (activation format: fp32 d, may be negative)

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kQ8KBytes, dst += kQKK) {
        const float d = load_f32(b);
        for (int e = 0; e < kQKK; ++e) dst[e] = d * static_cast<float>(static_cast<int8_t>(b[4 + e]));
    }
}

// iscale = -127/max with max the signed largest-|x| element (so it maps to -127), q = min(127,
// nearest_int(iscale*x)), d = 1/iscale in fp32; bsums[g] = sum of the 16 quants of group g.
void quantize_q8_k(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / kQKK; ++i, b += kQ8KBytes, src += kQKK) {
        const float max = signed_absmax(src, kQKK);
        if (max == 0) {
            std::memset(b, 0, kQ8KBytes);  // ggml leaves bsums unset here; zero is their true value
            continue;
        }
        const float iscale = -127.f / max;
        auto* qs = reinterpret_cast<int8_t*>(b + 4);
        for (int e = 0; e < kQKK; ++e)
            qs[e] = static_cast<int8_t>(std::min(127, nearest_int(iscale * src[e])));
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int l = 0; l < 16; ++l) sum += qs[16 * g + l];
            store_u16(b + 260 + 2 * g, static_cast<uint16_t>(static_cast<int16_t>(sum)));
        }
        store_f32(b, 1 / iscale);
    }
}

}  // namespace mox::quant::ref
