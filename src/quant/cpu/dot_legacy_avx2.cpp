// Legacy 32-element block dot kernels, avx2 tier (see kernels.h for the rules of ISA-flagged files;
// layouts in shared/spec/gguf-and-quants.md §3.1).
//   Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 x Q8_0 (34 B: d f16 @0, qs[32] @2):
//     each weight block is unpacked once to 32 signed int8 values in element order (one ymm); per
//     activation row, maddubs(|w|, sign(a, w)) + madd(ones) gives the exact integer dot in 8 int32
//     lanes, which is converted and scaled by d_w * d_a.
//   Q4_1, Q5_1 x Q8_1 (36 B: d f16 @0, s f16 @2 = d*sum(q), qs[32] @4):
//     sum (d q_w + m) d_a q_a = d d_a sum(q_w q_a) + m d_a sum(q_a); q_w is unsigned, so it feeds maddubs
//     as is. sum(q_a) is recomputed from the quants rather than read from s: s is rounded to fp16, which
//     would put an error of 2^-11 * |m s_a| on every block.
// Blocks go in pairs: the two scaled products are added first, so the loop-carried chain per row is
// one add per 64 elements (the one-row decode case must not wait on FMA latency).
#include "quant/cpu/kernels.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

namespace mox::quant::cpu {

#if defined(__AVX2__)

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

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// 16 packed bytes -> 32 nibbles in element order: low nibbles (elements 0-15), then high (16-31).
inline __m256i nibbles(const uint8_t* qs) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Bit e of the u32 qh as 0x10 in byte e (bit 4 of 5-bit quant e), 0 otherwise.
inline __m256i high_bits(uint32_t qh) {
    const __m256i spread =
        _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)),
                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2,
                                             2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// The exact integer dot of 32 signed weights (w, with |w| precomputed) and 32 int8 activations, as
// floats in 8 lanes. |w| <= 128 and |a| <= 127 keep maddubs's int16 pair sums from saturating.
inline __m256 signed_dot(__m256i w, __m256i aw, const uint8_t* aq) {
    const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(load256(aq), w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

// d * sum(q_w q_a) + m * sum(q_a) over one block, in 8 lanes (the integer sums are exact).
inline __m256 unsigned_dot(__m256i q, const uint8_t* aq, float d, float m) {
    const __m256i a = load256(aq);
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, a), ones16);
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), a), ones16);
    return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p),
                           _mm256_mul_ps(_mm256_set1_ps(m), _mm256_cvtepi32_ps(s)));
}

// Signed-weight block decoders: write the 32 int8 weights, return the block's scale.
struct Q4_0 {
    static constexpr size_t kBytes = 18;
    static float decode(const uint8_t* b, __m256i* w) {
        *w = _mm256_sub_epi8(nibbles(b + 2), _mm256_set1_epi8(8));
        return f16_at(b);
    }
};
struct Q5_0 {
    static constexpr size_t kBytes = 22;
    static float decode(const uint8_t* b, __m256i* w) {
        const __m256i q = _mm256_or_si256(nibbles(b + 6), high_bits(u32_at(b + 2)));
        *w = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
        return f16_at(b);
    }
};
struct Q8_0 {
    static constexpr size_t kBytes = 34;
    static float decode(const uint8_t* b, __m256i* w) {
        *w = load256(b + 2);
        return f16_at(b);
    }
};
struct Iq4Nl {
    static constexpr size_t kBytes = 18;
    static float decode(const uint8_t* b, __m256i* w) {
        const __m256i table =
            _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113, -127,
                             -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
        *w = _mm256_shuffle_epi8(table, nibbles(b + 2));
        return f16_at(b);
    }
};
struct Mxfp4 {
    static constexpr size_t kBytes = 17;
    static float decode(const uint8_t* b, __m256i* w) {
        // E2M1 codes doubled (bit 3 = sign), so the block scale is 2^(e-128): a normal float for e >= 2,
        // the subnormals 2^-128, 2^-127 below.
        const __m256i table = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1,
                                               2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
        *w = _mm256_shuffle_epi8(table, nibbles(b + 1));
        const uint32_t e = b[0];
        const uint32_t bits = e < 2 ? (0x00200000u << e) : ((e - 1) << 23);
        float d;
        memcpy(&d, &bits, sizeof d);
        return d;
    }
};

template <class T, int NC>
void run_signed(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
    __m256 acc[NC];
    for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2, w += 2 * T::kBytes) {
        prefetch_weights(w, 2 * T::kBytes);
        __m256i w0, w1;
        const float d0 = T::decode(w, &w0), d1 = T::decode(w + T::kBytes, &w1);
        const __m256i aw0 = _mm256_abs_epi8(w0), aw1 = _mm256_abs_epi8(w1);
        const uint8_t* a0 = act + i * kQ8_0Bytes;
        for (int j = 0; j < NC; ++j) {
            const uint8_t* a = a0 + j * stride;
            const __m256 t = _mm256_mul_ps(_mm256_set1_ps(d0 * f16_at(a)), signed_dot(w0, aw0, a + 2));
            const __m256 f1 = signed_dot(w1, aw1, a + kQ8_0Bytes + 2);
            acc[j] =
                _mm256_add_ps(acc[j], _mm256_fmadd_ps(_mm256_set1_ps(d1 * f16_at(a + kQ8_0Bytes)), f1, t));
        }
    }
    if (i < nb) {
        __m256i w0;
        const float d0 = T::decode(w, &w0);
        const __m256i aw0 = _mm256_abs_epi8(w0);
        for (int j = 0; j < NC; ++j) {
            const uint8_t* a = act + i * kQ8_0Bytes + j * stride;
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * f16_at(a)), signed_dot(w0, aw0, a + 2), acc[j]);
        }
    }
    for (int j = 0; j < NC; ++j) out[j] = hsum(acc[j]);
}

// Unsigned-with-min block decoders: write the 32 quants (0..31), return d and m.
struct Q4_1 {
    static constexpr size_t kBytes = 20;
    static void decode(const uint8_t* b, __m256i* q, float* d, float* m) {
        *q = nibbles(b + 4);
        *d = f16_at(b);
        *m = f16_at(b + 2);
    }
};
struct Q5_1 {
    static constexpr size_t kBytes = 24;
    static void decode(const uint8_t* b, __m256i* q, float* d, float* m) {
        *q = _mm256_or_si256(nibbles(b + 8), high_bits(u32_at(b + 4)));
        *d = f16_at(b);
        *m = f16_at(b + 2);
    }
};

template <class T, int NC>
void run_min(int64_t nb, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
    __m256 acc[NC];
    for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2, w += 2 * T::kBytes) {
        prefetch_weights(w, 2 * T::kBytes);
        __m256i q0, q1;
        float d0, m0, d1, m1;
        T::decode(w, &q0, &d0, &m0);
        T::decode(w + T::kBytes, &q1, &d1, &m1);
        const uint8_t* a0 = act + i * kQ8_1Bytes;
        for (int j = 0; j < NC; ++j) {
            const uint8_t* a = a0 + j * stride;
            const uint8_t* b = a + kQ8_1Bytes;
            const float da = f16_at(a), db = f16_at(b);
            const __m256 t = _mm256_mul_ps(_mm256_set1_ps(da), unsigned_dot(q0, a + 4, d0, m0));
            acc[j] = _mm256_add_ps(acc[j],
                                   _mm256_fmadd_ps(_mm256_set1_ps(db), unsigned_dot(q1, b + 4, d1, m1), t));
        }
    }
    if (i < nb) {
        __m256i q0;
        float d0, m0;
        T::decode(w, &q0, &d0, &m0);
        for (int j = 0; j < NC; ++j) {
            const uint8_t* a = act + i * kQ8_1Bytes + j * stride;
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(a)), unsigned_dot(q0, a + 4, d0, m0), acc[j]);
        }
    }
    for (int j = 0; j < NC; ++j) out[j] = hsum(acc[j]);
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
    {TypeId::q4_0, TypeId::q8_0, Isa::avx2, &dot_cols<Q4_0, false>},
    {TypeId::q5_0, TypeId::q8_0, Isa::avx2, &dot_cols<Q5_0, false>},
    {TypeId::q8_0, TypeId::q8_0, Isa::avx2, &dot_cols<Q8_0, false>},
    {TypeId::iq4_nl, TypeId::q8_0, Isa::avx2, &dot_cols<Iq4Nl, false>},
    {TypeId::mxfp4, TypeId::q8_0, Isa::avx2, &dot_cols<Mxfp4, false>},
    {TypeId::q4_1, TypeId::q8_1, Isa::avx2, &dot_cols<Q4_1, true>},
    {TypeId::q5_1, TypeId::q8_1, Isa::avx2, &dot_cols<Q5_1, true>},
};

}  // namespace

KernelTable legacy_kernels_avx2() {
    return {kKernels, sizeof kKernels / sizeof kKernels[0]};
}

#else

KernelTable legacy_kernels_avx2() {
    return {nullptr, 0};
}

#endif

}  // namespace mox::quant::cpu
