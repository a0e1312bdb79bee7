// Legacy 32-element block dot kernels, avx512 tier (AVX-512 F/BW/DQ/VL + VNNI; see kernels.h for the
// rules of ISA-flagged files, layouts in shared/spec/gguf-and-quants.md §3.1).
//
// Two blocks per zmm: a pair of weight blocks is unpacked once into 64 int8 values (block i in the low
// 256 bits, block i+1 in the high), then per activation row one vpdpbusd gives both blocks' exact
// integer dots in 16 int32 lanes (8 per block), converted and scaled by the per-block d_w * d_a.
//   Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 x Q8_0 (34 B: d f16 @0, qs[32] @2): signed weights enter vpdpbusd as
//     |w| (unsigned) with the activation bytes negated where w < 0 (AVX-512 has no vpsignb; a masked
//     subtract from zero does it).
//   Q4_1, Q5_1 x Q8_1 (36 B: d f16 @0, s f16 @2, qs[32] @4): d d_a sum(q_w q_a) + m d_a sum(q_a), with
//     sum(q_a) recomputed exactly (vpdpbusd with ones) instead of read from the fp16-rounded s.
// Pairs of pairs go per loop step: the two scaled products are added before the accumulator, so the
// loop-carried chain per row is one add per 128 elements.
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

constexpr int kQK = 32;
constexpr size_t kQ8_0Bytes = 34, kQ8_1Bytes = 36;

inline float f16_at(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
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

// 32 bytes at p (low 256 bits) and at q (high 256 bits).
inline __m512i join(const uint8_t* p, const uint8_t* q) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(load256(p)), load256(q), 1);
}

// Two blocks' 16 packed bytes (at p and q) -> 64 nibbles in element order: per block the low nibbles
// (elements 0-15), then the high nibbles (16-31). 128-bit lanes [p p q q] shifted by [0 4 0 4].
inline __m512i nibbles2(const uint8_t* p, const uint8_t* q) {
    const __m256i lo = _mm256_broadcastsi128_si256(load128(p));
    const __m256i hi = _mm256_broadcastsi128_si256(load128(q));
    const __m256i shift256 = _mm256_set_m128i(_mm_set1_epi16(4), _mm_setzero_si128());
    const __m512i shift = _mm512_inserti64x4(_mm512_castsi256_si512(shift256), shift256, 1);
    const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return _mm512_and_si512(_mm512_srlv_epi16(x, shift), _mm512_set1_epi8(0x0F));
}

// Bit e of the two blocks' qh words as a byte mask: bit 4 of 5-bit quant e of each block.
inline __mmask64 high_mask(uint32_t qh0, uint32_t qh1) {
    return _cvtu64_mask64(static_cast<uint64_t>(qh0) | (static_cast<uint64_t>(qh1) << 32));
}

// 16 lanes: x0 in the low 8, x1 in the high 8.
inline __m512 halves(float x0, float x1) {
    return _mm512_insertf32x8(_mm512_set1_ps(x0), _mm256_set1_ps(x1), 1);
}

// Signed-weight pair decoders: write 64 int8 weights (blocks b and b + kBytes), return the two scales
// as 16 lanes.
struct Q4_0 {
    static constexpr size_t kBytes = 18;
    static __m512 decode(const uint8_t* b, __m512i* w) {
        *w = _mm512_sub_epi8(nibbles2(b + 2, b + kBytes + 2), _mm512_set1_epi8(8));
        return halves(f16_at(b), f16_at(b + kBytes));
    }
};
struct Q5_0 {
    static constexpr size_t kBytes = 22;
    static __m512 decode(const uint8_t* b, __m512i* w) {
        const __m512i nib = nibbles2(b + 6, b + kBytes + 6);
        const __m512i q = _mm512_mask_add_epi8(nib, high_mask(u32_at(b + 2), u32_at(b + kBytes + 2)), nib,
                                               _mm512_set1_epi8(16));
        *w = _mm512_sub_epi8(q, _mm512_set1_epi8(16));
        return halves(f16_at(b), f16_at(b + kBytes));
    }
};
struct Q8_0 {
    static constexpr size_t kBytes = 34;
    static __m512 decode(const uint8_t* b, __m512i* w) {
        *w = join(b + 2, b + kBytes + 2);
        return halves(f16_at(b), f16_at(b + kBytes));
    }
};
struct Iq4Nl {
    static constexpr size_t kBytes = 18;
    static __m512 decode(const uint8_t* b, __m512i* w) {
        const __m512i table = _mm512_broadcast_i32x4(
            _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
        *w = _mm512_shuffle_epi8(table, nibbles2(b + 2, b + kBytes + 2));
        return halves(f16_at(b), f16_at(b + kBytes));
    }
};
struct Mxfp4 {
    static constexpr size_t kBytes = 17;
    // E2M1 codes doubled (bit 3 = sign), so the block scale is 2^(e-128): a normal float for e >= 2, the
    // subnormals 2^-128, 2^-127 below.
    static float scale(uint32_t e) {
        const uint32_t bits = e < 2 ? (0x00200000u << e) : ((e - 1) << 23);
        float d;
        memcpy(&d, &bits, sizeof d);
        return d;
    }
    static __m512 decode(const uint8_t* b, __m512i* w) {
        const __m512i table =
            _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
        *w = _mm512_shuffle_epi8(table, nibbles2(b + 1, b + kBytes + 1));
        return halves(scale(b[0]), scale(b[kBytes]));
    }
};

// The exact integer dots of a decoded block pair with a pair of Q8_0 activation blocks at a, as floats.
inline __m512 signed_dot(__m512i aw, __mmask64 neg, const uint8_t* a) {
    const __m512i aq = join(a + 2, a + kQ8_0Bytes + 2);
    const __m512i sa = _mm512_mask_sub_epi8(aq, neg, _mm512_setzero_si512(), aq);
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), aw, sa));
}
inline __m512 act_scales(const uint8_t* a, size_t block_bytes) {
    return halves(f16_at(a), f16_at(a + block_bytes));
}

template <class T, int NC>
void run_signed(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
    __m512 acc[NC];
    __m256 tail[NC];  // the last, unpaired block
    for (int j = 0; j < NC; ++j) {
        acc[j] = _mm512_setzero_ps();
        tail[j] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 3 < nb; i += 4, w += 4 * T::kBytes) {
        prefetch_weights(w, 4 * T::kBytes);
        __m512i w0, w1;
        const __m512 d0 = T::decode(w, &w0), d1 = T::decode(w + 2 * T::kBytes, &w1);
        const __m512i aw0 = _mm512_abs_epi8(w0), aw1 = _mm512_abs_epi8(w1);
        const __mmask64 n0 = _mm512_movepi8_mask(w0), n1 = _mm512_movepi8_mask(w1);
        const uint8_t* a0 = act + i * kQ8_0Bytes;
        for (int j = 0; j < NC; ++j) {
            const uint8_t* a = a0 + j * stride;
            const uint8_t* b = a + 2 * kQ8_0Bytes;
            const __m512 t =
                _mm512_mul_ps(_mm512_mul_ps(d0, act_scales(a, kQ8_0Bytes)), signed_dot(aw0, n0, a));
            const __m512 s1 = _mm512_mul_ps(d1, act_scales(b, kQ8_0Bytes));
            acc[j] = _mm512_add_ps(acc[j], _mm512_fmadd_ps(s1, signed_dot(aw1, n1, b), t));
        }
    }
    for (; i + 1 < nb; i += 2, w += 2 * T::kBytes) {
        prefetch_weights(w, 2 * T::kBytes);
        __m512i w0;
        const __m512 d0 = T::decode(w, &w0);
        const __m512i aw0 = _mm512_abs_epi8(w0);
        const __mmask64 n0 = _mm512_movepi8_mask(w0);
        for (int j = 0; j < NC; ++j) {
            const uint8_t* a = act + i * kQ8_0Bytes + j * stride;
            acc[j] =
                _mm512_fmadd_ps(_mm512_mul_ps(d0, act_scales(a, kQ8_0Bytes)), signed_dot(aw0, n0, a), acc[j]);
        }
    }
    if (i < nb) {
        // One block left: decode it as the low half of a pair whose high half is ignored. The pair decoder
        // reads kBytes past the block, so the weights are copied to a padded buffer first.
        alignas(64) uint8_t pad[2 * T::kBytes] = {};
        memcpy(pad, w, T::kBytes);
        __m512i w0;
        const __m512 d0 = T::decode(pad, &w0);
        const __m256i wl = _mm512_castsi512_si256(w0);
        const __m256i aw0 = _mm256_abs_epi8(wl);
        const __mmask32 n0 = _mm256_movepi8_mask(wl);
        for (int j = 0; j < NC; ++j) {
            const uint8_t* a = act + i * kQ8_0Bytes + j * stride;
            const __m256i aq = load256(a + 2);
            const __m256i sa = _mm256_mask_sub_epi8(aq, n0, _mm256_setzero_si256(), aq);
            const __m256 f = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), aw0, sa));
            tail[j] = _mm256_mul_ps(_mm256_set1_ps(_mm512_cvtss_f32(d0) * f16_at(a)), f);
        }
    }
    for (int j = 0; j < NC; ++j) {
        acc[j] = _mm512_add_ps(acc[j], _mm512_zextps256_ps512(tail[j]));
        out[j] = _mm512_reduce_add_ps(acc[j]);
    }
}

// Unsigned-with-min pair decoders: write 64 quants (0..31), return d and m of both blocks as 16 lanes.
struct Q4_1 {
    static constexpr size_t kBytes = 20;
    static void decode(const uint8_t* b, __m512i* q, __m512* d, __m512* m) {
        *q = nibbles2(b + 4, b + kBytes + 4);
        *d = halves(f16_at(b), f16_at(b + kBytes));
        *m = halves(f16_at(b + 2), f16_at(b + kBytes + 2));
    }
};
struct Q5_1 {
    static constexpr size_t kBytes = 24;
    static void decode(const uint8_t* b, __m512i* q, __m512* d, __m512* m) {
        const __m512i nib = nibbles2(b + 8, b + kBytes + 8);
        *q = _mm512_mask_add_epi8(nib, high_mask(u32_at(b + 4), u32_at(b + kBytes + 4)), nib,
                                  _mm512_set1_epi8(16));
        *d = halves(f16_at(b), f16_at(b + kBytes));
        *m = halves(f16_at(b + 2), f16_at(b + kBytes + 2));
    }
};

// d * sum(q_w q_a) + m * sum(q_a) for a block pair against Q8_1 blocks at a, times d_a, in 16 lanes.
inline __m512 min_dot(__m512i q, __m512 d, __m512 m, const uint8_t* a) {
    const __m512i aq = join(a + 4, a + kQ8_1Bytes + 4);
    const __m512i zero = _mm512_setzero_si512();
    const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, q, aq));
    const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, _mm512_set1_epi8(1), aq));
    return _mm512_mul_ps(act_scales(a, kQ8_1Bytes), _mm512_fmadd_ps(d, p, _mm512_mul_ps(m, s)));
}

template <class T, int NC>
void run_min(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
    __m512 acc[NC];
    for (int j = 0; j < NC; ++j) acc[j] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2, w += 2 * T::kBytes) {
        prefetch_weights(w, 2 * T::kBytes);
        __m512i q;
        __m512 d, m;
        T::decode(w, &q, &d, &m);
        for (int j = 0; j < NC; ++j)
            acc[j] = _mm512_add_ps(acc[j], min_dot(q, d, m, act + i * kQ8_1Bytes + j * stride));
    }
    float tail[NC] = {};
    if (i < nb) {
        // One block left: the pair decoder reads kBytes past it, so it works on a padded copy, and only the
        // low 256 bits (that block) are used.
        alignas(64) uint8_t pad[2 * T::kBytes] = {};
        memcpy(pad, w, T::kBytes);
        __m512i q;
        __m512 d, m;
        T::decode(pad, &q, &d, &m);
        const __m256i ql = _mm512_castsi512_si256(q);
        const float d0 = _mm512_cvtss_f32(d), m0 = _mm512_cvtss_f32(m);
        for (int j = 0; j < NC; ++j) {
            const uint8_t* a = act + i * kQ8_1Bytes + j * stride;
            const __m256i aq = load256(a + 4);
            const __m256i zero = _mm256_setzero_si256();
            const __m256 p = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(zero, ql, aq));
            const __m256 s = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(zero, _mm256_set1_epi8(1), aq));
            const __m256 v = _mm256_fmadd_ps(_mm256_set1_ps(d0), p, _mm256_mul_ps(_mm256_set1_ps(m0), s));
            const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
            tail[j] = f16_at(a) * _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
        }
    }
    for (int j = 0; j < NC; ++j) out[j] = _mm512_reduce_add_ps(acc[j]) + tail[j];
}

// The column count becomes a compile-time constant so each row's accumulator stays in a register.
template <class T, bool kMin>
void dot_cols(int64_t n, const void* wv, const void* av, size_t stride, int nc, float* out) {
    const auto* w = static_cast<const uint8_t*>(wv);
    const auto* a = static_cast<const uint8_t*>(av);
    const int64_t nb = n / kQK;
    auto run = [&]<int NC>() {
        if constexpr (kMin)
            run_min<T, NC>(nb, w, a, stride, out);
        else
            run_signed<T, NC>(nb, w, a, stride, out);
    };
    switch (nc) {
        case 1:
            run.template operator()<1>();
            break;
        case 2:
            run.template operator()<2>();
            break;
        case 3:
            run.template operator()<3>();
            break;
        case 4:
            run.template operator()<4>();
            break;
        case 5:
            run.template operator()<5>();
            break;
        case 6:
            run.template operator()<6>();
            break;
        case 7:
            run.template operator()<7>();
            break;
        default:
            run.template operator()<8>();
            break;
    }
}

constexpr DotKernel kKernels[] = {
    {TypeId::q4_0, TypeId::q8_0, Isa::avx512, &dot_cols<Q4_0, false>},
    {TypeId::q5_0, TypeId::q8_0, Isa::avx512, &dot_cols<Q5_0, false>},
    {TypeId::q8_0, TypeId::q8_0, Isa::avx512, &dot_cols<Q8_0, false>},
    {TypeId::iq4_nl, TypeId::q8_0, Isa::avx512, &dot_cols<Iq4Nl, false>},
    {TypeId::mxfp4, TypeId::q8_0, Isa::avx512, &dot_cols<Mxfp4, false>},
    {TypeId::q4_1, TypeId::q8_1, Isa::avx512, &dot_cols<Q4_1, true>},
    {TypeId::q5_1, TypeId::q8_1, Isa::avx512, &dot_cols<Q5_1, true>},
};

}  // namespace

KernelTable legacy_kernels_avx512() {
    return {kKernels, sizeof kKernels / sizeof kKernels[0]};
}

#else

KernelTable legacy_kernels_avx512() {
    return {nullptr, 0};
}

#endif

}  // namespace mox::quant::cpu
