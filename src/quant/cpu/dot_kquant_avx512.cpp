// K-quant (Q2_K..Q6_K) and IQ4_XS dot kernels against Q8_K activations, avx512 tier (AVX-512
// F/BW/DQ/VL + VNNI; see kernels.h for the rules of ISA-flagged files, block layouts in
// shared/spec/gguf-and-quants.md §3.3, §3.4).
//
// Same arithmetic as the avx2 tier, 64 elements per zmm: each 256-element super-block is unpacked once
// into four zmm of unsigned quants (element order) plus int16 scale vectors, then per activation row
//   maddubs(weight u8, act s8) -> 32 x int16 pair sums, vpdpwssd(isum, pairs, scales) -> 16 x int32
// (VNNI fuses the scale multiply and the accumulate), exact in int32 over the super-block, then one FMA
// by d_w * d_a. Offsets come from the Q8_K bsums as in the avx2 tier. IQ4_XS's signed weights use |w|
// and negate the activation bytes under the weights' sign mask (AVX-512 has no vpsignb).
#include "quant/cpu/kernels.h"

// GCC 12's AVX-512 headers initialise pass-through operands from _mm512_undefined_*(), which its
// -Wuninitialized reports once the intrinsics are inlined (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

namespace mox::quant::cpu {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

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
inline __m512i load512(const uint8_t* p) {
    return _mm512_loadu_si512(p);
}
inline __m256i load256(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m128i load128(const uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// 32 bytes -> zmm [x, x] (both 256-bit halves).
inline __m512i twice(const uint8_t* p) {
    return _mm512_broadcast_i64x4(load256(p));
}

// Per-16-bit-lane shift counts: `lo` for the low 256 bits, `hi` for the high 256 bits.
inline __m512i counts(int lo, int hi) {
    return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(lo)),
                              _mm256_set1_epi16(static_cast<short>(hi)), 1);
}

// Bytes with bit `lo_bit` set (low 256 bits) / `hi_bit` set (high 256 bits), for the high-bit masks.
inline __m512i bit_select(int lo_bit, int hi_bit) {
    return _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << lo_bit)),
                              _mm256_set1_epi8(static_cast<char>(1 << hi_bit)), 1);
}

// int16 lane l of the result = lane (first + l / 16) of the int16 values in s (one scale per 32-element
// sub-block: two per zmm).
inline __m512i scales_per32(__m512i s, int first) {
    const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(first)),
                                           _mm256_set1_epi16(static_cast<short>(first + 1)), 1);
    return _mm512_permutexvar_epi16(idx, s);
}
// int16 lane l of the result = lane (first + l / 8) of s (one scale per 16-group: four per zmm).
inline __m512i scales_per16(__m512i s, int first) {
    const __m256i lo = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(first + 1)),
                                        _mm_set1_epi16(static_cast<short>(first)));
    const __m256i hi = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(first + 3)),
                                        _mm_set1_epi16(static_cast<short>(first + 2)));
    return _mm512_permutexvar_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), s);
}

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

// Per-row work of every K-quant: q[4] unsigned quants (64 elements each), sv[4] int16 scales per pair of
// weight quants, and an int32 correction per 16-group pair computed from the bsums:
//   kMin:  acc -= dmin * d_a * madd(bsums, mins16)            (Q4_K, Q5_K, Q2_K)
//   else:  isum -= (madd(bsums, scales16) << kBiasShift)      (Q6_K: bias 32, Q3_K: bias 4)
// The zmm accumulators keep 16 lanes; the min part is a separate ymm accumulator.
template <int NC, bool kMin, int kBiasShift>
inline void rows(const __m512i q[4], const __m512i sv[4], __m256i corr16, float d, float dmin,
                 const uint8_t* a0, size_t stride, __m512 acc[NC], __m256 macc[NC]) {
    for (int j = 0; j < NC; ++j) {
        const uint8_t* a = a0 + j * stride;
        const float da = f32_at(a);
        __m512i isum = _mm512_setzero_si512();
        for (int c = 0; c < 4; ++c)
            isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q[c], load512(a + 4 + 64 * c)), sv[c]);
        const __m256i corr = _mm256_madd_epi16(load256(a + 260), corr16);
        if constexpr (kMin) {
            macc[j] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * da), _mm256_cvtepi32_ps(corr), macc[j]);
        } else {
            isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(_mm256_slli_epi32(corr, kBiasShift)));
        }
        acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(d * da), _mm512_cvtepi32_ps(isum), acc[j]);
    }
}

template <int NC>
inline void zero(__m512 acc[NC], __m256 macc[NC]) {
    for (int j = 0; j < NC; ++j) {
        acc[j] = _mm512_setzero_ps();
        macc[j] = _mm256_setzero_ps();
    }
}
template <int NC>
inline void finish(const __m512 acc[NC], const __m256 macc[NC], float* out) {
    for (int j = 0; j < NC; ++j) out[j] = _mm512_reduce_add_ps(acc[j]) + hsum256(macc[j]);
}

// ---------------------------------------------------------------------------------------------------
// Q4_K (144 B): d f16 @0, dmin f16 @2, scales[12] @4, qs[128] @16. Chunk c (64 elements) is qs[32c..]:
// low nibbles = sub-block 2c, high nibbles = sub-block 2c+1, i.e. zmm [x & 15, x >> 4].

// The 8 six-bit scales and 8 mins of a Q4_K / Q5_K super-block, byte b = sub-block b.
inline void k4_scales(const uint8_t* s, uint64_t* sc, uint64_t* mn) {
    const uint32_t s0 = u32_at(s), s1 = u32_at(s + 4), s2 = u32_at(s + 8);
    const uint32_t sc_lo = s0 & 0x3f3f3f3fu, m_lo = s1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
    const uint32_t m_hi = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
    *sc = sc_lo | (static_cast<uint64_t>(sc_hi) << 32);
    *mn = m_lo | (static_cast<uint64_t>(m_hi) << 32);
}

// Scale vectors (two sub-blocks per zmm) and the mins, duplicated per 16-group for the bsums.
inline void k4_scale_vectors(const uint8_t* scales, __m512i sv[4], __m256i* mins16) {
    uint64_t sc, mn;
    k4_scales(scales, &sc, &mn);
    const __m512i sc16 =
        _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc))));
    for (int c = 0; c < 4; ++c) sv[c] = scales_per32(sc16, 2 * c);
    const __m128i mn8 = _mm_cvtsi64_si128(static_cast<long long>(mn));
    *mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));  // m0 m0 m1 m1 ... m7 m7
}

struct Q4K {
    template <int NC>
    static void run(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
        __m512 acc[NC];
        __m256 macc[NC];
        zero<NC>(acc, macc);
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        const __m512i shift = counts(0, 4);
        for (int64_t i = 0; i < nb; ++i, w += 144) {
            prefetch_weights(w, 144);
            __m512i q[4], sv[4];
            for (int c = 0; c < 4; ++c)
                q[c] = _mm512_and_si512(_mm512_srlv_epi16(twice(w + 16 + 32 * c), shift), low4);
            __m256i mins16;
            k4_scale_vectors(w + 4, sv, &mins16);
            rows<NC, true, 0>(q, sv, mins16, f16_at(w), f16_at(w + 2), act + i * kQ8KBytes, stride, acc,
                              macc);
        }
        finish<NC>(acc, macc, out);
    }
};

// Q5_K (176 B): d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48. Bit 4 of element 32s+l is bit s
// of qh[l].
struct Q5K {
    template <int NC>
    static void run(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
        __m512 acc[NC];
        __m256 macc[NC];
        zero<NC>(acc, macc);
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        const __m512i shift = counts(0, 4);
        const __m512i bit4 = _mm512_set1_epi8(0x10);
        for (int64_t i = 0; i < nb; ++i, w += 176) {
            prefetch_weights(w, 176);
            const __m512i h = twice(w + 16);
            __m512i q[4], sv[4];
            for (int c = 0; c < 4; ++c) {
                const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(twice(w + 48 + 32 * c), shift), low4);
                const __mmask64 hi = _mm512_test_epi8_mask(h, bit_select(2 * c, 2 * c + 1));
                q[c] = _mm512_mask_add_epi8(nib, hi, nib, bit4);
            }
            __m256i mins16;
            k4_scale_vectors(w + 4, sv, &mins16);
            rows<NC, true, 0>(q, sv, mins16, f16_at(w), f16_at(w + 2), act + i * kQ8KBytes, stride, acc,
                              macc);
        }
        finish<NC>(acc, macc, out);
    }
};

// Scale vectors for 16 int8 group scales (four groups per zmm) and the same scales as int16 for the
// bsums correction.
inline void g16_scale_vectors(__m128i s8, __m512i sv[4], __m256i* s16) {
    *s16 = _mm256_cvtepi8_epi16(s8);
    const __m512i wide = _mm512_castsi256_si512(*s16);
    for (int c = 0; c < 4; ++c) sv[c] = scales_per16(wide, 4 * c);
}

// Q6_K (210 B): ql[128] @0, qh[64] @128, scales[16] int8 @192, d f16 @208. Element 128h + 32k + l: low
// nibble from ql[64h + l + 32(k&1)] (low nibble for k < 2, high for k >= 2), bits 4-5 from bits 2k..2k+1 of
// qh[32h + l]; the stored u (0..63) is q + 32. zmm 2h+p holds k = 2p, 2p+1, i.e. ql[64h..64h+63] as is.
struct Q6K {
    template <int NC>
    static void run(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
        __m512 acc[NC];
        __m256 macc[NC];
        zero<NC>(acc, macc);
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        const __m512i bits45 = _mm512_set1_epi8(0x30);
        const __m512i up = counts(4, 2), down = counts(0, 2);
        for (int64_t i = 0; i < nb; ++i, w += 210) {
            prefetch_weights(w, 210);
            __m512i q[4], sv[4];
            for (int h = 0; h < 2; ++h) {
                const __m512i l = load512(w + 64 * h);
                const __m512i hb = twice(w + 128 + 32 * h);
                q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, low4),
                                           _mm512_and_si512(_mm512_sllv_epi16(hb, up), bits45));
                q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4),
                                               _mm512_and_si512(_mm512_srlv_epi16(hb, down), bits45));
            }
            __m256i s16;
            g16_scale_vectors(load128(w + 192), sv, &s16);
            rows<NC, false, 5>(q, sv, s16, f16_at(w + 208), 0.0f, act + i * kQ8KBytes, stride, acc, macc);
        }
        finish<NC>(acc, macc, out);
    }
};

// Q3_K (110 B): hmask[32] @0, qs[64] @32, scales[12] @96, d f16 @108. Element e = 128h + 32s + l: bits 0-1
// from bits 2s..2s+1 of qs[32h + l], bit 2 = bit e/32 of hmask[l]; the stored u (0..7) is q + 4.
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

// 2-bit fields of Q2_K / Q3_K: zmm 2h+p holds s = 2p (low 256 bits) and 2p+1 (high) of qs[32h..32h+31].
inline __m512i crumbs(const uint8_t* qs, int p) {
    return _mm512_and_si512(_mm512_srlv_epi16(twice(qs), counts(4 * p, 4 * p + 2)), _mm512_set1_epi8(3));
}

struct Q3K {
    template <int NC>
    static void run(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
        __m512 acc[NC];
        __m256 macc[NC];
        zero<NC>(acc, macc);
        const __m512i bit2 = _mm512_set1_epi8(4);
        for (int64_t i = 0; i < nb; ++i, w += 110) {
            prefetch_weights(w, 110);
            const __m512i hm = twice(w);
            __m512i q[4], sv[4];
            for (int c = 0; c < 4; ++c) {
                const __m512i lo = crumbs(w + 32 + 32 * (c / 2), c % 2);
                const __mmask64 hi = _mm512_test_epi8_mask(hm, bit_select(2 * c, 2 * c + 1));
                q[c] = _mm512_mask_add_epi8(lo, hi, lo, bit2);
            }
            __m256i s16;
            g16_scale_vectors(q3k_scales(w + 96), sv, &s16);
            rows<NC, false, 2>(q, sv, s16, f16_at(w + 108), 0.0f, act + i * kQ8KBytes, stride, acc, macc);
        }
        finish<NC>(acc, macc, out);
    }
};

// Q2_K (84 B): scales[16] @0 (low nibble scale, high nibble min per 16-group), qs[64] @16, d @80,
// dmin @82. Element 128h + 32s + l is bits 2s..2s+1 of qs[32h + l].
struct Q2K {
    template <int NC>
    static void run(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
        __m512 acc[NC];
        __m256 macc[NC];
        zero<NC>(acc, macc);
        for (int64_t i = 0; i < nb; ++i, w += 84) {
            prefetch_weights(w, 84);
            __m512i q[4], sv[4];
            for (int c = 0; c < 4; ++c) q[c] = crumbs(w + 16 + 32 * (c / 2), c % 2);
            const __m128i packed = load128(w);
            const __m128i sc8 = _mm_and_si128(packed, _mm_set1_epi8(0x0F));
            const __m256i mins16 =
                _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
            __m256i unused;
            g16_scale_vectors(sc8, sv, &unused);
            rows<NC, true, 0>(q, sv, mins16, f16_at(w + 80), f16_at(w + 82), act + i * kQ8KBytes, stride, acc,
                              macc);
        }
        finish<NC>(acc, macc, out);
    }
};

// IQ4_XS (136 B): d f16 @0, scales_h u16 @2, scales_l[4] @4, qs[128] @8. Sub-block ib uses qs[16ib..]:
// low nibbles = elements 0-15, high nibbles = 16-31; value d * (ls - 32) * kvalues_iq4nl[nibble].
struct Iq4Xs {
    template <int NC>
    static void run(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
        __m512 acc[NC];
        __m256 macc[NC];
        zero<NC>(acc, macc);
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        const __m512i table = _mm512_broadcast_i32x4(
            _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
        // 128-bit lanes [x0 x0 x1 x1] shifted by [0 4 0 4]: sub-block 2p in the low 256 bits, 2p+1 high.
        const __m512i shift = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(4), _mm_setzero_si128())),
            _mm256_set_m128i(_mm_set1_epi16(4), _mm_setzero_si128()), 1);
        const __m512i zero8 = _mm512_setzero_si512();
        for (int64_t i = 0; i < nb; ++i, w += 136) {
            prefetch_weights(w, 136);
            __m512i av[4], sv[4];
            __mmask64 neg[4];
            for (int p = 0; p < 4; ++p) {
                const __m512i x = twice(w + 8 + 32 * p);
                const __m512i spread = _mm512_shuffle_i64x2(x, x, _MM_SHUFFLE(1, 1, 0, 0));
                const __m512i v =
                    _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srlv_epi16(spread, shift), low4));
                neg[p] = _mm512_movepi8_mask(v);
                av[p] = _mm512_abs_epi8(v);
            }
            const uint32_t sh = static_cast<uint32_t>(w[2]) | (static_cast<uint32_t>(w[3]) << 8);
            const uint32_t sl = u32_at(w + 4);
            alignas(16) int16_t ls[8];
            for (int ib = 0; ib < 8; ++ib)
                ls[ib] =
                    static_cast<int16_t>((((sl >> (4 * ib)) & 0x0F) | (((sh >> (2 * ib)) & 3) << 4)) - 32);
            const __m512i ls16 = _mm512_castsi128_si512(_mm_load_si128(reinterpret_cast<const __m128i*>(ls)));
            for (int p = 0; p < 4; ++p) sv[p] = scales_per32(ls16, 2 * p);
            const float d = f16_at(w);
            const uint8_t* a0 = act + i * kQ8KBytes;
            for (int j = 0; j < NC; ++j) {
                const uint8_t* a = a0 + j * stride;
                const float da = f32_at(a);
                __m512i isum = _mm512_setzero_si512();
                for (int p = 0; p < 4; ++p) {
                    const __m512i aq = load512(a + 4 + 64 * p);
                    const __m512i sa = _mm512_mask_sub_epi8(aq, neg[p], zero8, aq);
                    isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(av[p], sa), sv[p]);
                }
                acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(d * da), _mm512_cvtepi32_ps(isum), acc[j]);
            }
        }
        finish<NC>(acc, macc, out);
    }
};

constexpr DotKernel kKernels[] = {
    {TypeId::q2_k, TypeId::q8_k, Isa::avx512, &dot_cols<Q2K>},
    {TypeId::q3_k, TypeId::q8_k, Isa::avx512, &dot_cols<Q3K>},
    {TypeId::q4_k, TypeId::q8_k, Isa::avx512, &dot_cols<Q4K>},
    {TypeId::q5_k, TypeId::q8_k, Isa::avx512, &dot_cols<Q5K>},
    {TypeId::q6_k, TypeId::q8_k, Isa::avx512, &dot_cols<Q6K>},
    {TypeId::iq4_xs, TypeId::q8_k, Isa::avx512, &dot_cols<Iq4Xs>},
};

}  // namespace

KernelTable kquant_kernels_avx512() {
    return {kKernels, sizeof kKernels / sizeof kKernels[0]};
}

#else

KernelTable kquant_kernels_avx512() {
    return {nullptr, 0};
}

#endif

}  // namespace mox::quant::cpu
