// Grid i-quant dot kernels (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) against Q8_K
// activations, AVX2 tier (see kernels.h for the rules of ISA-flagged files). Block layouts:
// shared/spec/gguf-and-quants.md §4.2; the scalar references are in ref_iq_grid.cpp.
//
// Every format stores, per 32-element sub-block, an integer scale k and 32 integer weights, and its
// value is d * k * weight * c with a per-format constant c (1/8, 1/4 or 1). So one super-block is
//   sum = d_w * d_a * c * sum_sub k_sub * sum_i w_i * q_i
// and everything inside the d_w * d_a * c factor is exact int32 arithmetic (largest IQ3_XXS case:
// 8 * 31 * 32 * 62 * 127 < 2^31).
//
// A sub-block decodes to one 256-bit register of unsigned magnitudes m (grid bytes) and one of +-1
// signs, and the sign moves onto the activation: w*q = m * sign(q). _mm256_maddubs_epi16 multiplies
// unsigned by signed bytes into int16 pairs (|pair| <= 2 * 62 * 127, no saturation), and
// _mm256_madd_epi16 against the sub-block scale widens them to int32. Negating q is exact because
// quantize_q8_k never produces -128 (its range is -127..127).
//
// IQ1_S/IQ1_M weights are grid values g in {-1, 0, 1} plus a shift delta = +-1/8, so they become the
// integers 8g +- 1 (c = 1/8); their magnitude is |8g +- 1| and the sign vector is the weight itself.
//
// The decoded sub-block is reused for all n_cols activation rows (prefill tiles); NC is a template
// parameter so the accumulators live in registers.
#include "quant/cpu/kernels.h"
#include "quant/iq_grids.h"

#if defined(__AVX2__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#endif

namespace mox::quant::cpu {

#if defined(__AVX2__)
namespace {

// Q8_K: fp32 d @0, int8 qs[256] @4, int16 bsums[16] @260.
constexpr size_t kQ8KBytes = 292;
constexpr int64_t kBlockElems = 256;
constexpr size_t kPrefetchBytes = 1024;

inline uint16_t rd16(const uint8_t* p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
inline uint32_t rd32(const uint8_t* p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
inline float rdf32(const uint8_t* p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

// The grid tables through plain pointers (std::array's accessors are shared inline functions).
inline const uint64_t* grid_iq2xxs() {
    return reinterpret_cast<const uint64_t*>(&iq2xxs_grid);
}
inline const uint64_t* grid_iq2xs() {
    return reinterpret_cast<const uint64_t*>(&iq2xs_grid);
}
inline const uint64_t* grid_iq2s() {
    return reinterpret_cast<const uint64_t*>(&iq2s_grid);
}
inline const uint32_t* grid_iq3xxs() {
    return reinterpret_cast<const uint32_t*>(&iq3xxs_grid);
}
inline const uint32_t* grid_iq3s() {
    return reinterpret_cast<const uint32_t*>(&iq3s_grid);
}
inline const uint64_t* grid_iq1s() {
    return reinterpret_cast<const uint64_t*>(&iq1s_grid);
}
inline const uint8_t* ksigns() {
    return reinterpret_cast<const uint8_t*>(&ksigns_iq2xs);
}

// 32 sign bits (bit i set = element i negative) -> bytes -1 / +1 for _mm256_sign_epi8.
inline __m256i sign_bytes(uint32_t bits) {
    // Byte i of the result looks at sign byte i / 8 (the shuffle works within 128-bit lanes, and
    // both lanes hold all four bytes), then at bit i % 8 of it.
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i v =
        _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), pick), bit);
    return _mm256_or_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(1));
}

// Four 7-bit sign indices (bits 7l..7l+6 of aux) -> 32 sign bits, group l in byte l. The 8th bit of a
// group is the parity of its 7 stored bits (even count of negative signs), what the ksigns_iq2xs
// table holds; computed with shifts and a byte-wise xor fold instead of 4 table loads (no pdep: it
// is microcoded on Zen 1/2, which run this tier).
inline uint32_t signs_from_index(uint32_t aux) {
    const uint32_t a = aux & 0x0FFFFFFFu;
    const uint32_t b = (a & 0x3FFFu) | (a & 0x0FFFC000u) << 2;      // two 14-bit fields at bits 0, 16
    const uint32_t t = (b & 0x007F007Fu) | (b & 0x3F803F80u) << 1;  // four 7-bit fields at 0, 8, 16, 24
    uint32_t p = t ^ (t >> 4);  // bit 0 of each byte ends as the xor of that byte's bits
    p ^= p >> 2;
    p ^= p >> 1;
    return t | (p & 0x01010101u) << 7;
}

// One int16 scale for elements 0-15 (lo) and one for 16-31 (hi) of a sub-block.
inline __m256i scales16(int lo, int hi) {
    return _mm256_setr_m128i(_mm_set1_epi16(static_cast<short>(lo)), _mm_set1_epi16(static_cast<short>(hi)));
}

// IQ1 weights 8g + delta from a grid register g (int8 -1/0/1) and a delta register (+-1 bytes).
inline void iq1_weights(__m256i g, __m256i delta, __m256i& mag, __m256i& sgn) {
    const __m256i w = _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), g), delta);
    mag = _mm256_abs_epi8(w);
    sgn = w;
}

// Each decoder: kBytes per block, kFactor = c, d(x) = the block's fp32 scale, and sub(x, ib, ...) =
// magnitudes, signs and int16 scales of sub-block ib.
struct Iq2xxs {
    static constexpr size_t kBytes = 66;
    static constexpr float kFactor = 0.125f;  // (0.5 + s) * 0.25 = (2s + 1) / 8
    static float d(const uint8_t* x) { return _cvtsh_ss(rd16(x)); }
    static void sub(const uint8_t* x, int ib, __m256i& mag, __m256i& sgn, __m256i& sc) {
        const uint64_t* grid = grid_iq2xxs();
        const uint8_t* q = x + 2 + 8 * ib;
        const uint32_t aux = rd32(q + 4);
        mag = _mm256_setr_epi64x(static_cast<long long>(grid[q[0]]), static_cast<long long>(grid[q[1]]),
                                 static_cast<long long>(grid[q[2]]), static_cast<long long>(grid[q[3]]));
        sgn = sign_bytes(signs_from_index(aux));
        sc = _mm256_set1_epi16(static_cast<short>(2 * (aux >> 28) + 1));
    }
};

struct Iq2xs {
    static constexpr size_t kBytes = 74;
    static constexpr float kFactor = 0.125f;
    static float d(const uint8_t* x) { return _cvtsh_ss(rd16(x)); }
    static void sub(const uint8_t* x, int ib, __m256i& mag, __m256i& sgn, __m256i& sc) {
        const uint64_t* grid = grid_iq2xs();
        const uint8_t* ks = ksigns();
        uint16_t q[4];
        memcpy(q, x + 2 + 8 * ib, 8);
        mag = _mm256_setr_epi64x(
            static_cast<long long>(grid[q[0] & 511]), static_cast<long long>(grid[q[1] & 511]),
            static_cast<long long>(grid[q[2] & 511]), static_cast<long long>(grid[q[3] & 511]));
        const uint32_t bits =
            static_cast<uint32_t>(ks[q[0] >> 9]) | static_cast<uint32_t>(ks[q[1] >> 9]) << 8 |
            static_cast<uint32_t>(ks[q[2] >> 9]) << 16 | static_cast<uint32_t>(ks[q[3] >> 9]) << 24;
        sgn = sign_bytes(bits);
        const int s = x[66 + ib];
        sc = scales16(2 * (s & 15) + 1, 2 * (s >> 4) + 1);
    }
};

struct Iq2s {
    static constexpr size_t kBytes = 82;
    static constexpr float kFactor = 0.125f;
    static float d(const uint8_t* x) { return _cvtsh_ss(rd16(x)); }
    static void sub(const uint8_t* x, int ib, __m256i& mag, __m256i& sgn, __m256i& sc) {
        const uint64_t* grid = grid_iq2s();
        const uint8_t* qs = x + 2 + 4 * ib;
        const unsigned qh = x[66 + ib];
        mag = _mm256_setr_epi64x(static_cast<long long>(grid[qs[0] | ((qh << 8) & 0x300)]),
                                 static_cast<long long>(grid[qs[1] | ((qh << 6) & 0x300)]),
                                 static_cast<long long>(grid[qs[2] | ((qh << 4) & 0x300)]),
                                 static_cast<long long>(grid[qs[3] | ((qh << 2) & 0x300)]));
        sgn = sign_bytes(rd32(x + 34 + 4 * ib));
        const int s = x[74 + ib];
        sc = scales16(2 * (s & 15) + 1, 2 * (s >> 4) + 1);
    }
};

struct Iq3xxs {
    static constexpr size_t kBytes = 98;
    static constexpr float kFactor = 0.25f;  // (0.5 + s) * 0.5 = (2s + 1) / 4
    static float d(const uint8_t* x) { return _cvtsh_ss(rd16(x)); }
    static void sub(const uint8_t* x, int ib, __m256i& mag, __m256i& sgn, __m256i& sc) {
        const uint32_t* grid = grid_iq3xxs();
        const uint8_t* q = x + 2 + 8 * ib;
        const uint32_t aux = rd32(x + 66 + 4 * ib);
        mag = _mm256_setr_epi32(static_cast<int>(grid[q[0]]), static_cast<int>(grid[q[1]]),
                                static_cast<int>(grid[q[2]]), static_cast<int>(grid[q[3]]),
                                static_cast<int>(grid[q[4]]), static_cast<int>(grid[q[5]]),
                                static_cast<int>(grid[q[6]]), static_cast<int>(grid[q[7]]));
        sgn = sign_bytes(signs_from_index(aux));
        sc = _mm256_set1_epi16(static_cast<short>(2 * (aux >> 28) + 1));
    }
};

struct Iq3s {
    static constexpr size_t kBytes = 110;
    static constexpr float kFactor = 1.0f;  // d * (1 + 2 nib)
    static float d(const uint8_t* x) { return _cvtsh_ss(rd16(x)); }
    static void sub(const uint8_t* x, int ib, __m256i& mag, __m256i& sgn, __m256i& sc) {
        const uint32_t* grid = grid_iq3s();
        const uint8_t* q = x + 2 + 8 * ib;
        const unsigned qh = x[66 + ib];
        mag = _mm256_setr_epi32(static_cast<int>(grid[q[0] | ((qh << 8) & 256)]),
                                static_cast<int>(grid[q[1] | ((qh << 7) & 256)]),
                                static_cast<int>(grid[q[2] | ((qh << 6) & 256)]),
                                static_cast<int>(grid[q[3] | ((qh << 5) & 256)]),
                                static_cast<int>(grid[q[4] | ((qh << 4) & 256)]),
                                static_cast<int>(grid[q[5] | ((qh << 3) & 256)]),
                                static_cast<int>(grid[q[6] | ((qh << 2) & 256)]),
                                static_cast<int>(grid[q[7] | ((qh << 1) & 256)]));
        sgn = sign_bytes(rd32(x + 74 + 4 * ib));
        const unsigned nib = (x[106 + ib / 2] >> (4 * (ib % 2))) & 15u;
        sc = _mm256_set1_epi16(static_cast<short>(2 * nib + 1));
    }
};

struct Iq1s {
    static constexpr size_t kBytes = 50;
    static constexpr float kFactor = 0.125f;  // grid + delta = (8 grid +- 1) / 8
    static float d(const uint8_t* x) { return _cvtsh_ss(rd16(x)); }
    static void sub(const uint8_t* x, int ib, __m256i& mag, __m256i& sgn, __m256i& sc) {
        const uint64_t* grid = grid_iq1s();
        const uint8_t* qs = x + 2 + 4 * ib;
        const unsigned qh = rd16(x + 34 + 2 * ib);
        const __m256i g = _mm256_setr_epi64x(static_cast<long long>(grid[qs[0] | ((qh << 8) & 0x700)]),
                                             static_cast<long long>(grid[qs[1] | ((qh << 5) & 0x700)]),
                                             static_cast<long long>(grid[qs[2] | ((qh << 2) & 0x700)]),
                                             static_cast<long long>(grid[qs[3] | ((qh >> 1) & 0x700)]));
        iq1_weights(g, _mm256_set1_epi8((qh & 0x8000u) ? -1 : 1), mag, sgn);
        sc = _mm256_set1_epi16(static_cast<short>(2 * ((qh >> 12) & 7u) + 1));
    }
};

struct Iq1m {
    static constexpr size_t kBytes = 56;
    static constexpr float kFactor = 0.125f;
    // No stored d: the fp16 bits are the top nibbles of the four scale words (word w: bits 4w..4w+3).
    static float d(const uint8_t* x) {
        uint16_t sc[4];
        memcpy(sc, x + 48, 8);
        const uint16_t bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 12) << 4) |
                                                    ((sc[2] >> 12) << 8) | ((sc[3] >> 12) << 12));
        return _cvtsh_ss(bits);
    }
    static void sub(const uint8_t* x, int ib, __m256i& mag, __m256i& sgn, __m256i& sc) {
        const uint64_t* grid = grid_iq1s();
        const uint8_t* qs = x + 4 * ib;
        // Nibble l (low first) of these 16 bits: index bits 8-10 of group l, bit 3 = delta negative.
        const unsigned h = rd16(x + 32 + 2 * ib);
        const __m256i g = _mm256_setr_epi64x(static_cast<long long>(grid[qs[0] | ((h << 8) & 0x700)]),
                                             static_cast<long long>(grid[qs[1] | ((h << 4) & 0x700)]),
                                             static_cast<long long>(grid[qs[2] | (h & 0x700)]),
                                             static_cast<long long>(grid[qs[3] | ((h >> 4) & 0x700)]));
        constexpr long long kPos = 0x0101010101010101ll, kNeg = -1ll;
        const __m256i delta = _mm256_setr_epi64x((h & 0x8) ? kNeg : kPos, (h & 0x80) ? kNeg : kPos,
                                                 (h & 0x800) ? kNeg : kPos, (h & 0x8000) ? kNeg : kPos);
        iq1_weights(g, delta, mag, sgn);
        const unsigned w = rd16(x + 48 + 2 * (ib / 2)) >> (6 * (ib % 2));
        sc = scales16(static_cast<int>(2 * (w & 7) + 1), static_cast<int>(2 * ((w >> 3) & 7) + 1));
    }
};

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

template <class D, int NC>
void dot_nc(int64_t n, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
    __m256 accf[NC];
    for (int j = 0; j < NC; ++j) accf[j] = _mm256_setzero_ps();
    const int64_t nb = n / kBlockElems;
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* x = w + b * D::kBytes;
        // Decoding a block takes ~100 instructions per cache line of weights, so the out-of-order
        // window reaches only a line or two ahead; asking for the lines kPrefetchBytes ahead keeps
        // DRAM latency off the critical path of a one-row matvec. (A prefetch past the row's end
        // is harmless: it never faults.)
        _mm_prefetch(reinterpret_cast<const char*>(x + kPrefetchBytes), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(x + kPrefetchBytes + 64), _MM_HINT_T0);
        const size_t a_off = static_cast<size_t>(b) * kQ8KBytes;
        __m256i acc[NC];
        for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ++ib) {
            __m256i mag, sgn, sc;
            D::sub(x, ib, mag, sgn, sc);
            for (int j = 0; j < NC; ++j) {
                const __m256i q = _mm256_loadu_si256(
                    reinterpret_cast<const __m256i*>(act + j * stride + a_off + 4 + 32 * ib));
                const __m256i p = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(q, sgn));
                acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(p, sc));
            }
        }
        const float dw = D::d(x) * D::kFactor;
        for (int j = 0; j < NC; ++j) {
            const float da = rdf32(act + j * stride + a_off);
            accf[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[j]), _mm256_set1_ps(dw * da), accf[j]);
        }
    }
    for (int j = 0; j < NC; ++j) out[j] = hsum(accf[j]);
}

template <class D>
void dot(int64_t n, const void* w, const void* act, size_t stride, int n_cols, float* out) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(act);
    switch (n_cols) {
        case 1:
            return dot_nc<D, 1>(n, wb, ab, stride, out);
        case 2:
            return dot_nc<D, 2>(n, wb, ab, stride, out);
        case 3:
            return dot_nc<D, 3>(n, wb, ab, stride, out);
        case 4:
            return dot_nc<D, 4>(n, wb, ab, stride, out);
        case 5:
            return dot_nc<D, 5>(n, wb, ab, stride, out);
        case 6:
            return dot_nc<D, 6>(n, wb, ab, stride, out);
        case 7:
            return dot_nc<D, 7>(n, wb, ab, stride, out);
        default:
            return dot_nc<D, 8>(n, wb, ab, stride, out);
    }
}

const DotKernel kKernels[] = {
    {TypeId::iq2_xxs, TypeId::q8_k, Isa::avx2, &dot<Iq2xxs>},
    {TypeId::iq2_xs, TypeId::q8_k, Isa::avx2, &dot<Iq2xs>},
    {TypeId::iq2_s, TypeId::q8_k, Isa::avx2, &dot<Iq2s>},
    {TypeId::iq3_xxs, TypeId::q8_k, Isa::avx2, &dot<Iq3xxs>},
    {TypeId::iq3_s, TypeId::q8_k, Isa::avx2, &dot<Iq3s>},
    {TypeId::iq1_s, TypeId::q8_k, Isa::avx2, &dot<Iq1s>},
    {TypeId::iq1_m, TypeId::q8_k, Isa::avx2, &dot<Iq1m>},
};

}  // namespace

KernelTable iq_kernels_avx2() {
    return {kKernels, sizeof(kKernels) / sizeof(kKernels[0])};
}

#else

KernelTable iq_kernels_avx2() {
    return {nullptr, 0};
}

#endif

}  // namespace mox::quant::cpu
