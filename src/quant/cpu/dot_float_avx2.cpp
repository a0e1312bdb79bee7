// Float weight dot kernels (F32, F16, BF16) against fp32 activations, AVX2 tier (see kernels.h for
// the rules of ISA-flagged files).
//
// Activations stay fp32 (not rounded to the weight's format as ggml does): exact for f16 models, and
// decode is memory bound, so the wider activation reads cost nothing that matters. Weights widen to
// fp32 on load: F16 through F16C's vcvtph2ps, BF16 by moving its 16 bits to the top of an fp32.
//
// Each 8-element weight vector is loaded once and used for up to 4 activation rows; 5-8 rows run as
// two passes of at most 4 (8 accumulators + weights fit the 16 registers; the second pass finds the
// row in L1). Every row sums in U = 2 interleaved accumulators, so FMA latency (4 cycles) does not
// cap a one-row matvec below memory bandwidth, and the summation order, hence every result bit, is
// the same whatever the tile width (batched and separate runs of a sequence agree exactly). Rows of
// any length: the last n % 8 elements run scalar.
#include "quant/cpu/kernels.h"

#if defined(__AVX2__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#endif

namespace mox::quant::cpu {

#if defined(__AVX2__)
namespace {

struct F32 {
    static __m256 load8(const uint8_t* w, int64_t i) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + i);
    }
    static float load1(const uint8_t* w, int64_t i) {
        float v;
        memcpy(&v, w + 4 * i, 4);
        return v;
    }
};

struct F16 {
    static __m256 load8(const uint8_t* w, int64_t i) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i)));
    }
    static float load1(const uint8_t* w, int64_t i) {
        uint16_t h;
        memcpy(&h, w + 2 * i, 2);
        return _cvtsh_ss(h);
    }
};

struct Bf16 {
    static __m256 load8(const uint8_t* w, int64_t i) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
    static float load1(const uint8_t* w, int64_t i) {
        uint16_t h;
        memcpy(&h, w + 2 * i, 2);
        const uint32_t bits = static_cast<uint32_t>(h) << 16;
        float v;
        memcpy(&v, &bits, 4);
        return v;
    }
};

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

template <class W, int NC>
void dot_nc(int64_t n, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
    constexpr int U = 2;  // fixed for every NC: see the top of the file
    const float* a[NC];
    for (int j = 0; j < NC; ++j) a[j] = reinterpret_cast<const float*>(act + j * stride);
    __m256 acc[NC][U];
    for (int j = 0; j < NC; ++j)
        for (int u = 0; u < U; ++u) acc[j][u] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 * U <= n; i += 8 * U) {
        __m256 wv[U];
        for (int u = 0; u < U; ++u) wv[u] = W::load8(w, i + 8 * u);
        for (int j = 0; j < NC; ++j)
            for (int u = 0; u < U; ++u)
                acc[j][u] = _mm256_fmadd_ps(wv[u], _mm256_loadu_ps(a[j] + i + 8 * u), acc[j][u]);
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 wv = W::load8(w, i);
        for (int j = 0; j < NC; ++j) acc[j][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(a[j] + i), acc[j][0]);
    }
    for (int j = 0; j < NC; ++j) {
        for (int u = 1; u < U; ++u) acc[j][0] = _mm256_add_ps(acc[j][0], acc[j][u]);
        float sum = hsum(acc[j][0]);
        for (int64_t k = i; k < n; ++k) sum += W::load1(w, k) * a[j][k];
        out[j] = sum;
    }
}

template <class W>
void dot(int64_t n, const void* w, const void* act, size_t stride, int n_cols, float* out) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(act);
    if (n_cols > 4) {  // two passes: 4 rows, then the rest (same per-row order, so same bits)
        dot_nc<W, 4>(n, wb, ab, stride, out);
        n_cols -= 4;
        ab += 4 * stride;
        out += 4;
    }
    switch (n_cols) {
        case 1:
            return dot_nc<W, 1>(n, wb, ab, stride, out);
        case 2:
            return dot_nc<W, 2>(n, wb, ab, stride, out);
        case 3:
            return dot_nc<W, 3>(n, wb, ab, stride, out);
        default:
            return dot_nc<W, 4>(n, wb, ab, stride, out);
    }
}

const DotKernel kKernels[] = {
    {TypeId::f32, TypeId::f32, Isa::avx2, &dot<F32>},
    {TypeId::f16, TypeId::f32, Isa::avx2, &dot<F16>},
    {TypeId::bf16, TypeId::f32, Isa::avx2, &dot<Bf16>},
};

}  // namespace

KernelTable float_kernels_avx2() {
    return {kKernels, sizeof(kKernels) / sizeof(kKernels[0])};
}

#else

KernelTable float_kernels_avx2() {
    return {nullptr, 0};
}

#endif

}  // namespace mox::quant::cpu
