// Float weight dot kernels (F32, F16, BF16) against fp32 activations, AVX-512 tier (see kernels.h
// for the rules of ISA-flagged files).
//
// Same scheme as the AVX2 tier (dot_float_avx2.cpp): activations stay fp32, weights widen on load
// (F16 via vcvtph2ps, BF16 by a 16-bit shift), each weight vector serves all NC activation rows (up
// to 8: 16 accumulators of the 32 registers), and every row sums in U = 2 interleaved accumulators
// whatever NC is, so a result does not depend on the tile it was computed in. 16 elements per vector;
// the last n % 16 elements use masked loads, which read nothing past the row's end.
#include "quant/cpu/kernels.h"

#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics build "undefined" vectors as `__m512 __Y = __Y;`, which -Wuninitialized
// reports wherever casts or shuffles inline; the warning is off for the header's lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <stdint.h>
#endif

namespace mox::quant::cpu {

#if defined(__AVX512F__)
namespace {

struct F32 {
    static __m512 load16(const uint8_t* w, int64_t i) { return _mm512_loadu_ps(w + 4 * i); }
    static __m512 load_tail(const uint8_t* w, int64_t i, __mmask16 m) {
        return _mm512_maskz_loadu_ps(m, w + 4 * i);
    }
};

struct F16 {
    static __m512 load16(const uint8_t* w, int64_t i) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * i)));
    }
    static __m512 load_tail(const uint8_t* w, int64_t i, __mmask16 m) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + 2 * i));
    }
};

struct Bf16 {
    static __m512 load16(const uint8_t* w, int64_t i) {
        const __m512i h =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * i)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    }
    static __m512 load_tail(const uint8_t* w, int64_t i, __mmask16 m) {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, w + 2 * i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    }
};

// Horizontal sum (not _mm512_reduce_add_ps: GCC 12's header trips -Wuninitialized in it).
inline float hsum(__m512 v) {
    const __m512 s = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    __m128 h = _mm_add_ps(_mm512_castps512_ps128(s), _mm256_extractf128_ps(_mm512_castps512_ps256(s), 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

template <class W, int NC>
void dot_nc(int64_t n, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
    constexpr int U = 2;  // fixed for every NC: results independent of the tile width
    const float* a[NC];
    for (int j = 0; j < NC; ++j) a[j] = reinterpret_cast<const float*>(act + j * stride);
    __m512 acc[NC][U];
    for (int j = 0; j < NC; ++j)
        for (int u = 0; u < U; ++u) acc[j][u] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 * U <= n; i += 16 * U) {
        __m512 wv[U];
        for (int u = 0; u < U; ++u) wv[u] = W::load16(w, i + 16 * u);
        for (int j = 0; j < NC; ++j)
            for (int u = 0; u < U; ++u)
                acc[j][u] = _mm512_fmadd_ps(wv[u], _mm512_loadu_ps(a[j] + i + 16 * u), acc[j][u]);
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 wv = W::load16(w, i);
        for (int j = 0; j < NC; ++j) acc[j][0] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(a[j] + i), acc[j][0]);
    }
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m512 wv = W::load_tail(w, i, m);
        for (int j = 0; j < NC; ++j)
            acc[j][0] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, a[j] + i), acc[j][0]);
    }
    for (int j = 0; j < NC; ++j) {
        for (int u = 1; u < U; ++u) acc[j][0] = _mm512_add_ps(acc[j][0], acc[j][u]);
        out[j] = hsum(acc[j][0]);
    }
}

template <class W>
void dot(int64_t n, const void* w, const void* act, size_t stride, int n_cols, float* out) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(act);
    switch (n_cols) {
        case 1:
            return dot_nc<W, 1>(n, wb, ab, stride, out);
        case 2:
            return dot_nc<W, 2>(n, wb, ab, stride, out);
        case 3:
            return dot_nc<W, 3>(n, wb, ab, stride, out);
        case 4:
            return dot_nc<W, 4>(n, wb, ab, stride, out);
        case 5:
            return dot_nc<W, 5>(n, wb, ab, stride, out);
        case 6:
            return dot_nc<W, 6>(n, wb, ab, stride, out);
        case 7:
            return dot_nc<W, 7>(n, wb, ab, stride, out);
        default:
            return dot_nc<W, 8>(n, wb, ab, stride, out);
    }
}

const DotKernel kKernels[] = {
    {TypeId::f32, TypeId::f32, Isa::avx512, &dot<F32>},
    {TypeId::f16, TypeId::f32, Isa::avx512, &dot<F16>},
    {TypeId::bf16, TypeId::f32, Isa::avx512, &dot<Bf16>},
};

}  // namespace

KernelTable float_kernels_avx512() {
    return {kKernels, sizeof(kKernels) / sizeof(kKernels[0])};
}

#else

KernelTable float_kernels_avx512() {
    return {nullptr, 0};
}

#endif

}  // namespace mox::quant::cpu
