// K-quant (Q2_K..Q6_K) and IQ4_XS dot kernels against Q8_K activations, avx2 tier (see kernels.h for
// the rules of ISA-flagged files; block layouts in shared/spec/gguf-and-quants.md §3.3, §3.4).
//
// Shape of every kernel: for each 256-element super-block, the weight quants are unpacked once into
// eight ymm registers of 32 bytes (one per 32 elements, in element order) plus the sub-block scales,
// then reused for each of the NC activation rows. Per row the integer work is
//   maddubs(weight u8, act s8) -> 16 x int16 pair sums, madd(that, scale int16) -> 8 x int32,
// summed over the super-block in int32 (exact), then converted and scaled by d_w * d_a with one FMA.
// Offsets are folded in with the activation's bsums (sums of 16 consecutive quants):
//   Q4_K / Q5_K / Q2_K:  value = d*sc*q - dmin*m   -> subtract dmin*d_a * sum(m_g * bsum_g)
//   Q6_K / Q3_K:          value = d*sc*(u - 32 / 4) -> subtract 32 / 4 * sum(sc_g * bsum_g) in int32
// IQ4_XS weights are signed table values, so they use |w| as maddubs's unsigned operand and move the
// sign onto the activation (_mm256_sign_epi8).
#include "quant/cpu/kernels.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

namespace mox::quant::cpu {

#if defined(__AVX2__)

namespace {

constexpr size_t kQ8KBytes = 292;  // d f32 @0, qs[256] @4, bsums[16] int16 @260
constexpr int kQKK = 256;

inline float f16_at(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}
inline float f32_at(const uint8_t* p) {
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}
inline uint32_t u32_at(const uint8_t* p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

// The weight stream is read once and only forward: prefetching a fixed distance ahead keeps enough
// cache-line misses in flight to reach memory bandwidth even where the hardware prefetcher falls short.
// (Prefetches past the end of the data are harmless: they never fault.)
constexpr size_t kPrefetchAhead = 2048;
inline void prefetch_weights(const uint8_t* p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAhead + off), _MM_HINT_T0);
}
inline __m256i load256(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m128i load128(const uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Broadcast of int16 lane k (0..7) of a 128-bit vector that holds 8 scales in both ymm halves.
inline __m256i lane16(__m256i both, int k) {
    return _mm256_shuffle_epi8(both, _mm256_set1_epi16(static_cast<short>(((2 * k + 1) << 8) | (2 * k))));
}

// int16 scales for one 32-element chunk covering 16-groups 2t and 2t+1: lanes 0-7 = s[2t], lanes 8-15 =
// s[2t+1], from 16 int8 scales (sign-extended).
inline __m256i pair16(__m128i s8, int t) {
    const __m128i pick =
        _mm_set_epi8(static_cast<char>(2 * t + 1), static_cast<char>(2 * t + 1), static_cast<char>(2 * t + 1),
                     static_cast<char>(2 * t + 1), static_cast<char>(2 * t + 1), static_cast<char>(2 * t + 1),
                     static_cast<char>(2 * t + 1), static_cast<char>(2 * t + 1), static_cast<char>(2 * t),
                     static_cast<char>(2 * t), static_cast<char>(2 * t), static_cast<char>(2 * t),
                     static_cast<char>(2 * t), static_cast<char>(2 * t), static_cast<char>(2 * t),
                     static_cast<char>(2 * t));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s8, pick));
}

// Moves bit `from` of every byte to bit `to` and clears the others (the epi16 shifts leak bits across
// byte boundaries only into positions the mask clears).
inline __m256i bit_to(__m256i x, int from, int to) {
    const __m256i m = _mm256_set1_epi8(static_cast<char>(1 << to));
    if (from == to) return _mm256_and_si256(x, m);
    if (from < to) return _mm256_and_si256(_mm256_slli_epi16(x, to - from), m);
    return _mm256_and_si256(_mm256_srli_epi16(x, from - to), m);
}

// Runs kernel K with the column count as a compile-time constant, so its accumulators live in
// registers (NC = 1 is the decode path).
template <class K>
void dot_cols(int64_t n, const void* w, const void* act, size_t stride, int nc, float* out) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(act);
    switch (nc) {
        case 1:
            K::template run<1>(n / kQKK, wb, ab, stride, out);
            break;
        case 2:
            K::template run<2>(n / kQKK, wb, ab, stride, out);
            break;
        case 3:
            K::template run<3>(n / kQKK, wb, ab, stride, out);
            break;
        case 4:
            K::template run<4>(n / kQKK, wb, ab, stride, out);
            break;
        case 5:
            K::template run<5>(n / kQKK, wb, ab, stride, out);
            break;
        case 6:
            K::template run<6>(n / kQKK, wb, ab, stride, out);
            break;
        case 7:
            K::template run<7>(n / kQKK, wb, ab, stride, out);
            break;
        default:
            K::template run<8>(n / kQKK, wb, ab, stride, out);
            break;
    }
}

// ---------------------------------------------------------------------------------------------------
// Q4_K (144 B): d f16 @0, dmin f16 @2, scales[12] @4, qs[128] @16. Chunk c (64 elements) is qs[32c..]:
// low nibbles = sub-block 2c, high nibbles = sub-block 2c+1.

// The 8 six-bit scales and 8 mins of a Q4_K / Q5_K super-block as two 8-byte integers (byte b = sub-block
// b), unpacked 4 at a time with 32-bit masks.
inline void k4_scales(const uint8_t* s, uint64_t* sc, uint64_t* mn) {
    const uint32_t s0 = u32_at(s), s1 = u32_at(s + 4), s2 = u32_at(s + 8);
    const uint32_t sc_lo = s0 & 0x3f3f3f3fu, m_lo = s1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
    const uint32_t m_hi = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
    *sc = sc_lo | (static_cast<uint64_t>(sc_hi) << 32);
    *mn = m_lo | (static_cast<uint64_t>(m_hi) << 32);
}

// Per-row work shared by Q4_K and Q5_K: q[8] unsigned quants of the 8 sub-blocks, scales in int16 lanes
// (both halves), mins duplicated per 16-group for the bsums.
template <int NC>
inline void k4_rows(const __m256i q[8], __m256i sc16, __m256i mins16, float d, float dmin, const uint8_t* a0,
                    size_t stride, __m256 acc[NC]) {
    for (int j = 0; j < NC; ++j) {
        const uint8_t* a = a0 + j * stride;
        const float da = f32_at(a);
        __m256i isum = _mm256_setzero_si256();
        for (int s = 0; s < 8; ++s) {
            const __m256i p = _mm256_maddubs_epi16(q[s], load256(a + 4 + 32 * s));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, lane16(sc16, s)));
        }
        const __m256i msum = _mm256_madd_epi16(load256(a + 260), mins16);
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * da), _mm256_cvtepi32_ps(isum), acc[j]);
        acc[j] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * da), _mm256_cvtepi32_ps(msum), acc[j]);
    }
}

inline void k4_scale_vectors(const uint8_t* scales, __m256i* sc16, __m256i* mins16) {
    uint64_t sc, mn;
    k4_scales(scales, &sc, &mn);
    const __m128i sc8 = _mm_cvtsi64_si128(static_cast<long long>(sc));
    const __m128i mn8 = _mm_cvtsi64_si128(static_cast<long long>(mn));
    *sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));
    *mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));  // m0 m0 m1 m1 ... m7 m7
}

struct Q4K {
    template <int NC>
    static void run(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
        __m256 acc[NC];
        for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_ps();
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        for (int64_t i = 0; i < nb; ++i, w += 144) {
            prefetch_weights(w, 144);
            __m256i q[8];
            for (int c = 0; c < 4; ++c) {
                const __m256i x = load256(w + 16 + 32 * c);
                q[2 * c] = _mm256_and_si256(x, low4);
                q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), low4);
            }
            __m256i sc16, mins16;
            k4_scale_vectors(w + 4, &sc16, &mins16);
            k4_rows<NC>(q, sc16, mins16, f16_at(w), f16_at(w + 2), act + i * kQ8KBytes, stride, acc);
        }
        for (int j = 0; j < NC; ++j) out[j] = hsum(acc[j]);
    }
};

// Q5_K (176 B): d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48. Bit 4 of element 32s+l is bit s
// of qh[l].
struct Q5K {
    template <int NC>
    static void run(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
        __m256 acc[NC];
        for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_ps();
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        for (int64_t i = 0; i < nb; ++i, w += 176) {
            prefetch_weights(w, 176);
            const __m256i h = load256(w + 16);
            __m256i q[8];
            for (int c = 0; c < 4; ++c) {
                const __m256i x = load256(w + 48 + 32 * c);
                q[2 * c] = _mm256_or_si256(_mm256_and_si256(x, low4), bit_to(h, 2 * c, 4));
                q[2 * c + 1] =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x, 4), low4), bit_to(h, 2 * c + 1, 4));
            }
            __m256i sc16, mins16;
            k4_scale_vectors(w + 4, &sc16, &mins16);
            k4_rows<NC>(q, sc16, mins16, f16_at(w), f16_at(w + 2), act + i * kQ8KBytes, stride, acc);
        }
        for (int j = 0; j < NC; ++j) out[j] = hsum(acc[j]);
    }
};

// Per-row work shared by Q6_K, Q3_K (offset quants u - bias, int8 scales per 16-group) and Q2_K-like
// layouts: q[8] unsigned quants per 32-element chunk, s8 the 16 group scales.
//   sum_g s_g * sum_l (u - bias) * a = sum_g s_g * (sum_l u*a) - bias * sum_g s_g * bsum_g
template <int NC, int kBiasShift>
inline void g16_rows(const __m256i q[8], __m128i s8, float d, const uint8_t* a0, size_t stride,
                     __m256 acc[NC]) {
    __m256i sv[8];
    for (int t = 0; t < 8; ++t) sv[t] = pair16(s8, t);
    const __m256i s16 = _mm256_cvtepi8_epi16(s8);
    for (int j = 0; j < NC; ++j) {
        const uint8_t* a = a0 + j * stride;
        const float da = f32_at(a);
        __m256i isum = _mm256_setzero_si256();
        for (int t = 0; t < 8; ++t) {
            const __m256i p = _mm256_maddubs_epi16(q[t], load256(a + 4 + 32 * t));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sv[t]));
        }
        const __m256i off = _mm256_madd_epi16(load256(a + 260), s16);
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, kBiasShift));
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * da), _mm256_cvtepi32_ps(isum), acc[j]);
    }
}

// Q6_K (210 B): ql[128] @0, qh[64] @128, scales[16] int8 @192, d f16 @208. Element 128h + 32k + l: low
// nibble from ql[64h + l + 32(k&1)] (low nibble for k < 2, high for k >= 2), bits 4-5 from bits 2k..2k+1 of
// qh[32h + l]; the stored u (0..63) is q + 32.
struct Q6K {
    template <int NC>
    static void run(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
        __m256 acc[NC];
        for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_ps();
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        const __m256i bits45 = _mm256_set1_epi8(0x30);
        for (int64_t i = 0; i < nb; ++i, w += 210) {
            prefetch_weights(w, 210);
            __m256i q[8];
            for (int h = 0; h < 2; ++h) {
                const __m256i l0 = load256(w + 64 * h), l1 = load256(w + 64 * h + 32);
                const __m256i hb = load256(w + 128 + 32 * h);
                q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, low4),
                                               _mm256_and_si256(_mm256_slli_epi16(hb, 4), bits45));
                q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, low4),
                                               _mm256_and_si256(_mm256_slli_epi16(hb, 2), bits45));
                q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                                               _mm256_and_si256(hb, bits45));
                q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                               _mm256_and_si256(_mm256_srli_epi16(hb, 2), bits45));
            }
            g16_rows<NC, 5>(q, load128(w + 192), f16_at(w + 208), act + i * kQ8KBytes, stride, acc);
        }
        for (int j = 0; j < NC; ++j) out[j] = hsum(acc[j]);
    }
};

// Q3_K (110 B): hmask[32] @0, qs[64] @32, scales[12] @96, d f16 @108. Element e = 128h + 32s + l: bits 0-1
// from bits 2s..2s+1 of qs[32h + l], bit 2 = bit e/32 of hmask[l]; the stored u (0..7) is q + 4.
// The 16 six-bit scales (biased +32): low nibbles in bytes 0-7 (scale j and j+8), bits 4-5 of scales
// k, k+4, k+8, k+12 in the bit pairs of byte 8+k.
inline __m128i q3k_scales(const uint8_t* s) {
    const uint32_t a0 = u32_at(s), a1 = u32_at(s + 4), a2 = u32_at(s + 8);
    const uint32_t g0 = (a0 & 0x0f0f0f0fu) | ((a2 << 4) & 0x30303030u);
    const uint32_t g1 = (a1 & 0x0f0f0f0fu) | ((a2 << 2) & 0x30303030u);
    const uint32_t g2 = ((a0 >> 4) & 0x0f0f0f0fu) | (a2 & 0x30303030u);
    const uint32_t g3 = ((a1 >> 4) & 0x0f0f0f0fu) | ((a2 >> 2) & 0x30303030u);
    const __m128i biased =
        _mm_set_epi32(static_cast<int>(g3), static_cast<int>(g2), static_cast<int>(g1), static_cast<int>(g0));
    return _mm_sub_epi8(biased, _mm_set1_epi8(32));
}

struct Q3K {
    template <int NC>
    static void run(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
        __m256 acc[NC];
        for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_ps();
        const __m256i two = _mm256_set1_epi8(3);
        for (int64_t i = 0; i < nb; ++i, w += 110) {
            prefetch_weights(w, 110);
            const __m256i hm = load256(w);
            __m256i q[8];
            for (int h = 0; h < 2; ++h) {
                const __m256i x = load256(w + 32 + 32 * h);
                for (int s = 0; s < 4; ++s) {
                    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(x, 2 * s), two);
                    q[4 * h + s] = _mm256_or_si256(lo, bit_to(hm, 4 * h + s, 2));
                }
            }
            g16_rows<NC, 2>(q, q3k_scales(w + 96), f16_at(w + 108), act + i * kQ8KBytes, stride, acc);
        }
        for (int j = 0; j < NC; ++j) out[j] = hsum(acc[j]);
    }
};

// Q2_K (84 B): scales[16] @0 (low nibble scale, high nibble min per 16-group), qs[64] @16, d @80,
// dmin @82. Element 128h + 32s + l is bits 2s..2s+1 of qs[32h + l].
struct Q2K {
    template <int NC>
    static void run(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
        __m256 acc[NC];
        for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_ps();
        const __m256i two = _mm256_set1_epi8(3);
        for (int64_t i = 0; i < nb; ++i, w += 84) {
            prefetch_weights(w, 84);
            __m256i q[8];
            for (int h = 0; h < 2; ++h) {
                const __m256i x = load256(w + 16 + 32 * h);
                for (int s = 0; s < 4; ++s) q[4 * h + s] = _mm256_and_si256(_mm256_srli_epi16(x, 2 * s), two);
            }
            const __m128i packed = load128(w);
            const __m128i sc8 = _mm_and_si128(packed, _mm_set1_epi8(0x0F));
            const __m256i mins16 =
                _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
            __m256i sv[8];
            for (int t = 0; t < 8; ++t) sv[t] = pair16(sc8, t);
            const float d = f16_at(w + 80), dmin = f16_at(w + 82);
            const uint8_t* a0 = act + i * kQ8KBytes;
            for (int j = 0; j < NC; ++j) {
                const uint8_t* a = a0 + j * stride;
                const float da = f32_at(a);
                __m256i isum = _mm256_setzero_si256();
                for (int t = 0; t < 8; ++t) {
                    const __m256i p = _mm256_maddubs_epi16(q[t], load256(a + 4 + 32 * t));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sv[t]));
                }
                const __m256i msum = _mm256_madd_epi16(load256(a + 260), mins16);
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * da), _mm256_cvtepi32_ps(isum), acc[j]);
                acc[j] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * da), _mm256_cvtepi32_ps(msum), acc[j]);
            }
        }
        for (int j = 0; j < NC; ++j) out[j] = hsum(acc[j]);
    }
};

// IQ4_XS (136 B): d f16 @0, scales_h u16 @2, scales_l[4] @4, qs[128] @8. Sub-block ib uses qs[16ib..]:
// low nibbles = elements 0-15, high nibbles = 16-31; value d * (ls - 32) * kvalues_iq4nl[nibble].
struct Iq4Xs {
    template <int NC>
    static void run(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
        __m256 acc[NC];
        for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_ps();
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        const __m256i table =
            _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113, -127,
                             -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
        for (int64_t i = 0; i < nb; ++i, w += 136) {
            prefetch_weights(w, 136);
            __m256i v[8], av[8];
            for (int p = 0; p < 4; ++p) {
                const __m256i x = load256(w + 8 + 32 * p);  // sub-blocks 2p (low 128) and 2p+1 (high 128)
                const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(x, low4));
                const __m256i hi =
                    _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(x, 4), low4));
                v[2 * p] = _mm256_permute2x128_si256(lo, hi, 0x20);
                v[2 * p + 1] = _mm256_permute2x128_si256(lo, hi, 0x31);
                av[2 * p] = _mm256_abs_epi8(v[2 * p]);
                av[2 * p + 1] = _mm256_abs_epi8(v[2 * p + 1]);
            }
            const uint32_t sh = static_cast<uint32_t>(w[2]) | (static_cast<uint32_t>(w[3]) << 8);
            const uint32_t sl = u32_at(w + 4);
            // ls for sub-block ib: nibble ib%2 of scales_l[ib/2] | bits 2ib..2ib+1 of scales_h << 4.
            alignas(16) int16_t ls[8];
            for (int ib = 0; ib < 8; ++ib)
                ls[ib] =
                    static_cast<int16_t>((((sl >> (4 * ib)) & 0x0F) | (((sh >> (2 * ib)) & 3) << 4)) - 32);
            const __m256i sc16 =
                _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(ls)));
            const float d = f16_at(w);
            const uint8_t* a0 = act + i * kQ8KBytes;
            for (int j = 0; j < NC; ++j) {
                const uint8_t* a = a0 + j * stride;
                const float da = f32_at(a);
                __m256i isum = _mm256_setzero_si256();
                for (int s = 0; s < 8; ++s) {
                    const __m256i sa = _mm256_sign_epi8(load256(a + 4 + 32 * s), v[s]);
                    const __m256i p = _mm256_maddubs_epi16(av[s], sa);
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, lane16(sc16, s)));
                }
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * da), _mm256_cvtepi32_ps(isum), acc[j]);
            }
        }
        for (int j = 0; j < NC; ++j) out[j] = hsum(acc[j]);
    }
};

constexpr DotKernel kKernels[] = {
    {TypeId::q2_k, TypeId::q8_k, Isa::avx2, &dot_cols<Q2K>},
    {TypeId::q3_k, TypeId::q8_k, Isa::avx2, &dot_cols<Q3K>},
    {TypeId::q4_k, TypeId::q8_k, Isa::avx2, &dot_cols<Q4K>},
    {TypeId::q5_k, TypeId::q8_k, Isa::avx2, &dot_cols<Q5K>},
    {TypeId::q6_k, TypeId::q8_k, Isa::avx2, &dot_cols<Q6K>},
    {TypeId::iq4_xs, TypeId::q8_k, Isa::avx2, &dot_cols<Iq4Xs>},
};

}  // namespace

KernelTable kquant_kernels_avx2() {
    return {kKernels, sizeof kKernels / sizeof kKernels[0]};
}

#else

KernelTable kquant_kernels_avx2() {
    return {nullptr, 0};
}

#endif

}  // namespace mox::quant::cpu
