// Grid i-quant dot kernels (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) against Q8_K
// activations, AVX-512 tier (see kernels.h for the rules of ISA-flagged files). Block layouts:
// shared/spec/gguf-and-quants.md §4.2; the scalar references are in ref_iq_grid.cpp.
//
// The arithmetic is the AVX2 tier's (dot_iq_avx2.cpp has the derivation): per super-block
//   sum = d_w * d_a * c * sum_sub k_sub * sum_i w_i * q_i,   w_i = sign_i * m_i,
// with everything inside the d_w * d_a * c factor exact in int32. This tier works on two 32-element
// sub-blocks at a time (one 512-bit register of 64 bytes) and differs in three ways:
//  - grid entries are fetched with one hardware gather per sub-block pair instead of scalar loads;
//  - signs stay bits: a 64-bit mask negates the activation bytes where the weight is negative (AVX-512
//    has no byte sign instruction, a masked subtract from zero does the same);
//  - VNNI's vpdpwssd multiplies the int16 pair sums by the int16 scales and accumulates in one step.
// Negating q is exact because quantize_q8_k never produces -128.
#include "quant/cpu/kernels.h"
#include "quant/iq_grids.h"

#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics build "undefined" vectors as `__m512 __Y = __Y;`, which -Wuninitialized
// reports wherever casts or shuffles inline; the warning is off for the header's lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <stdint.h>
#include <string.h>
#endif

namespace mox::quant::cpu {

#if defined(__AVX512F__)
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
inline uint64_t rd64(const uint8_t* p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
inline float rdf32(const uint8_t* p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

// The grid tables through plain pointers (std::array's accessors are shared inline functions).
inline const void* grid_iq2xxs() {
    return &iq2xxs_grid;
}
inline const void* grid_iq2xs() {
    return &iq2xs_grid;
}
inline const void* grid_iq2s() {
    return &iq2s_grid;
}
inline const void* grid_iq3xxs() {
    return &iq3xxs_grid;
}
inline const void* grid_iq3s() {
    return &iq3s_grid;
}
inline const void* grid_iq1s() {
    return &iq1s_grid;
}

// Eight 7-bit sign indices (bits 7l..7l+6 of a) -> 64 sign bits, group l in byte l. The 8th bit of a
// group is the parity of its 7 stored bits (an even count of negative signs), which is what the
// ksigns_iq2xs table holds; computed here with a byte-wise xor fold instead of 8 table loads.
inline uint64_t signs_from_index(uint64_t a) {
    const uint64_t t = _pdep_u64(a, 0x7F7F7F7F7F7F7F7Full);  // one 7-bit field per byte
    uint64_t p = t ^ (t >> 4);  // bit 0 of each byte ends as the xor of that byte's 8 bits
    p ^= p >> 2;
    p ^= p >> 1;
    return t | (p & 0x0101010101010101ull) << 7;
}

// Sign indices of two IQ2_XXS/IQ3_XXS sub-blocks: bits 0-27 of their aux words.
inline uint64_t signs_from_aux(uint32_t a0, uint32_t a1) {
    return signs_from_index((a0 & 0x0FFFFFFFu) | static_cast<uint64_t>(a1 & 0x0FFFFFFFu) << 28);
}

// Scales of one sub-block pair as int16 lanes, from 4 packed u16 (s0 | s1 << 16 | s2 << 32 | s3 << 48):
// s0 for elements 0-15, s1 for 16-31, s2 for 32-47, s3 for 48-63 (a 128-bit quarter each, the lanes
// that vpmaddubsw's pair sums land in).
inline __m512i scales16(uint64_t packed) {
    const __m512i quarter = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2,  //
                                             1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_epi16(
        quarter, _mm512_castsi128_si512(_mm_cvtsi64_si128(static_cast<long long>(packed))));
}
inline uint64_t pack4(unsigned s0, unsigned s1, unsigned s2, unsigned s3) {
    return s0 | s1 << 16 | static_cast<uint64_t>(s2) << 32 | static_cast<uint64_t>(s3) << 48;
}
inline uint64_t pack2(unsigned s0, unsigned s1) {
    return pack4(s0, s0, s1, s1);
}

// 8 grid indices (one per 64-bit lane) -> 8 u64 grid entries = 64 bytes.
inline __m512i gather64(__m512i index, const void* grid) {
    return _mm512_i64gather_epi64(index, grid, 8);
}

// IQ1 weights 8g + delta from grid bytes g (int8 -1/0/1) and delta bytes (+-1): magnitudes and the
// mask of negative weights.
inline void iq1_weights(__m512i g, __m512i delta, __m512i& mag, __mmask64& neg) {
    __m512i w = _mm512_add_epi8(g, g);
    w = _mm512_add_epi8(w, w);
    w = _mm512_add_epi8(w, w);
    w = _mm512_add_epi8(w, delta);
    mag = _mm512_abs_epi8(w);
    neg = _mm512_movepi8_mask(w);
}

// A byte mask (bit l set -> 8 bytes of 0xFF in group l) as a 64-bit lane mask.
inline uint64_t group_mask(unsigned bits8) {
    return _pdep_u64(bits8, 0x0101010101010101ull) * 0xFFull;
}

// Each decoder: kBytes per block, kFactor = c, d(x) = the block's fp32 scale, and pair(x, p, ...) =
// magnitudes, negative-weight mask and int16 scales of sub-blocks 2p and 2p+1.
struct Iq2xxs {
    static constexpr size_t kBytes = 66;
    static constexpr float kFactor = 0.125f;  // (0.5 + s) * 0.25 = (2s + 1) / 8
    static float d(const uint8_t* x) { return _cvtsh_ss(rd16(x)); }
    static void pair(const uint8_t* x, int p, __m512i& mag, __mmask64& neg, __m512i& sc) {
        const uint8_t* q = x + 2 + 16 * p;  // sub-block 2p: 4 indices, aux; then sub-block 2p+1
        const uint64_t idx = rd32(q) | static_cast<uint64_t>(rd32(q + 8)) << 32;
        mag = gather64(_mm512_cvtepu8_epi64(_mm_cvtsi64_si128(static_cast<long long>(idx))), grid_iq2xxs());
        const uint32_t a0 = rd32(q + 4), a1 = rd32(q + 12);
        neg = signs_from_aux(a0, a1);
        sc = scales16(pack2(2 * (a0 >> 28) + 1, 2 * (a1 >> 28) + 1));
    }
};

struct Iq2xs {
    static constexpr size_t kBytes = 74;
    static constexpr float kFactor = 0.125f;
    static float d(const uint8_t* x) { return _cvtsh_ss(rd16(x)); }
    static void pair(const uint8_t* x, int p, __m512i& mag, __mmask64& neg, __m512i& sc) {
        const uint8_t* qp = x + 2 + 16 * p;  // 8 u16: bits 0-8 grid index, 9-15 sign index
        const __m512i q = _mm512_cvtepu16_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qp)));
        mag = gather64(_mm512_and_si512(q, _mm512_set1_epi64(511)), grid_iq2xs());
        constexpr uint64_t kSignField = 0xFE00FE00FE00FE00ull;  // bits 9-15 of each u16
        neg = signs_from_index(_pext_u64(rd64(qp), kSignField) | _pext_u64(rd64(qp + 8), kSignField) << 28);
        const unsigned s0 = x[66 + 2 * p], s1 = x[67 + 2 * p];
        sc = scales16(pack4(2 * (s0 & 15) + 1, 2 * (s0 >> 4) + 1, 2 * (s1 & 15) + 1, 2 * (s1 >> 4) + 1));
    }
};

struct Iq2s {
    static constexpr size_t kBytes = 82;
    static constexpr float kFactor = 0.125f;
    static float d(const uint8_t* x) { return _cvtsh_ss(rd16(x)); }
    static void pair(const uint8_t* x, int p, __m512i& mag, __mmask64& neg, __m512i& sc) {
        // Group l of the pair: low index byte x[2 + 8p + l]; bits 8-9 are bits 2l..2l+1 of the 16 qh bits.
        const __m512i lo =
            _mm512_cvtepu8_epi64(_mm_cvtsi64_si128(static_cast<long long>(rd64(x + 2 + 8 * p))));
        const __m512i qh = _mm512_set1_epi64(rd16(x + 66 + 2 * p));
        const __m512i shift = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
        const __m512i hi =
            _mm512_slli_epi64(_mm512_and_si512(_mm512_srlv_epi64(qh, shift), _mm512_set1_epi64(3)), 8);
        mag = gather64(_mm512_or_si512(lo, hi), grid_iq2s());
        neg = rd64(x + 34 + 8 * p);
        const unsigned s0 = x[74 + 2 * p], s1 = x[75 + 2 * p];
        sc = scales16(pack4(2 * (s0 & 15) + 1, 2 * (s0 >> 4) + 1, 2 * (s1 & 15) + 1, 2 * (s1 >> 4) + 1));
    }
};

struct Iq3xxs {
    static constexpr size_t kBytes = 98;
    static constexpr float kFactor = 0.25f;  // (0.5 + s) * 0.5 = (2s + 1) / 4
    static float d(const uint8_t* x) { return _cvtsh_ss(rd16(x)); }
    static void pair(const uint8_t* x, int p, __m512i& mag, __mmask64& neg, __m512i& sc) {
        // 16 byte indices, 4 magnitudes (one u32) each.
        const __m512i idx =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 2 + 16 * p)));
        mag = _mm512_i32gather_epi32(idx, grid_iq3xxs(), 4);
        const uint32_t a0 = rd32(x + 66 + 8 * p), a1 = rd32(x + 70 + 8 * p);
        neg = signs_from_aux(a0, a1);
        sc = scales16(pack2(2 * (a0 >> 28) + 1, 2 * (a1 >> 28) + 1));
    }
};

struct Iq3s {
    static constexpr size_t kBytes = 110;
    static constexpr float kFactor = 1.0f;  // d * (1 + 2 nib)
    static float d(const uint8_t* x) { return _cvtsh_ss(rd16(x)); }
    static void pair(const uint8_t* x, int p, __m512i& mag, __mmask64& neg, __m512i& sc) {
        // 16 indices: low bytes x[2 + 16p + k]; bit 8 is bit k of the 16 qh bits.
        __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 2 + 16 * p)));
        idx = _mm512_mask_or_epi32(idx, static_cast<__mmask16>(rd16(x + 66 + 2 * p)), idx,
                                   _mm512_set1_epi32(256));
        mag = _mm512_i32gather_epi32(idx, grid_iq3s(), 4);
        neg = rd64(x + 74 + 8 * p);
        const unsigned nib = x[106 + p];
        const unsigned s0 = 2 * (nib & 15) + 1, s1 = 2 * (nib >> 4) + 1;
        sc = scales16(pack2(s0, s1));
    }
};

struct Iq1s {
    static constexpr size_t kBytes = 50;
    static constexpr float kFactor = 0.125f;  // grid + delta = (8 grid +- 1) / 8
    static float d(const uint8_t* x) { return _cvtsh_ss(rd16(x)); }
    static void pair(const uint8_t* x, int p, __m512i& mag, __mmask64& neg, __m512i& sc) {
        // Groups 0-3 from sub-block 2p (qh word h0), 4-7 from 2p+1 (h1): index bits 8-10 are bits
        // 3l..3l+2 of the word; bits 12-14 are the scale, bit 15 the delta sign.
        const unsigned h0 = rd16(x + 34 + 4 * p), h1 = rd16(x + 36 + 4 * p);
        const __m512i lo =
            _mm512_cvtepu8_epi64(_mm_cvtsi64_si128(static_cast<long long>(rd64(x + 2 + 8 * p))));
        const __m512i qh = _mm512_set1_epi64(static_cast<long long>(h0 | (h1 << 16)));
        const __m512i shift = _mm512_setr_epi64(0, 3, 6, 9, 16, 19, 22, 25);
        const __m512i hi =
            _mm512_slli_epi64(_mm512_and_si512(_mm512_srlv_epi64(qh, shift), _mm512_set1_epi64(7)), 8);
        const __m512i g = gather64(_mm512_or_si512(lo, hi), grid_iq1s());
        const uint64_t dneg =
            ((h0 & 0x8000u) ? 0xFFFFFFFFull : 0) | ((h1 & 0x8000u) ? 0xFFFFFFFF00000000ull : 0);
        iq1_weights(g, _mm512_mask_blend_epi8(dneg, _mm512_set1_epi8(1), _mm512_set1_epi8(-1)), mag, neg);
        const unsigned s0 = 2 * ((h0 >> 12) & 7) + 1, s1 = 2 * ((h1 >> 12) & 7) + 1;
        sc = scales16(pack2(s0, s1));
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
    static void pair(const uint8_t* x, int p, __m512i& mag, __mmask64& neg, __m512i& sc) {
        // Nibble l (low first) of the pair's 4 qh bytes: index bits 8-10 of group l, bit 3 = delta negative.
        const uint32_t h = rd32(x + 32 + 4 * p);
        const __m512i lo = _mm512_cvtepu8_epi64(_mm_cvtsi64_si128(static_cast<long long>(rd64(x + 8 * p))));
        const __m512i shift = _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28);
        const __m512i hi = _mm512_slli_epi64(
            _mm512_and_si512(_mm512_srlv_epi64(_mm512_set1_epi64(h), shift), _mm512_set1_epi64(7)), 8);
        const __m512i g = gather64(_mm512_or_si512(lo, hi), grid_iq1s());
        const uint64_t dneg = group_mask(_pext_u32(h, 0x88888888u));
        iq1_weights(g, _mm512_mask_blend_epi8(dneg, _mm512_set1_epi8(1), _mm512_set1_epi8(-1)), mag, neg);
        // Both sub-blocks' 3-bit scales sit in scale word p: bits 0-2, 3-5 (sub-block 2p), 6-8, 9-11.
        const unsigned w = rd16(x + 48 + 2 * p);
        sc = scales16(
            pack4(2 * (w & 7) + 1, 2 * ((w >> 3) & 7) + 1, 2 * ((w >> 6) & 7) + 1, 2 * ((w >> 9) & 7) + 1));
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

template <class D, int NC>
void dot_nc(int64_t n, const uint8_t* w, const uint8_t* act, size_t stride, float* out) {
    __m512 accf[NC];
    for (int j = 0; j < NC; ++j) accf[j] = _mm512_setzero_ps();
    const __m512i zero = _mm512_setzero_si512();
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
        __m512i acc[NC];
        for (int j = 0; j < NC; ++j) acc[j] = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p) {
            __m512i mag, sc;
            __mmask64 neg;
            D::pair(x, p, mag, neg, sc);
            for (int j = 0; j < NC; ++j) {
                const __m512i q = _mm512_loadu_si512(act + j * stride + a_off + 4 + 64 * p);
                const __m512i qs = _mm512_mask_sub_epi8(q, neg, zero, q);
                acc[j] = _mm512_dpwssd_epi32(acc[j], _mm512_maddubs_epi16(mag, qs), sc);
            }
        }
        const float dw = D::d(x) * D::kFactor;
        for (int j = 0; j < NC; ++j) {
            const float da = rdf32(act + j * stride + a_off);
            accf[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[j]), _mm512_set1_ps(dw * da), accf[j]);
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
    {TypeId::iq2_xxs, TypeId::q8_k, Isa::avx512, &dot<Iq2xxs>},
    {TypeId::iq2_xs, TypeId::q8_k, Isa::avx512, &dot<Iq2xs>},
    {TypeId::iq2_s, TypeId::q8_k, Isa::avx512, &dot<Iq2s>},
    {TypeId::iq3_xxs, TypeId::q8_k, Isa::avx512, &dot<Iq3xxs>},
    {TypeId::iq3_s, TypeId::q8_k, Isa::avx512, &dot<Iq3s>},
    {TypeId::iq1_s, TypeId::q8_k, Isa::avx512, &dot<Iq1s>},
    {TypeId::iq1_m, TypeId::q8_k, Isa::avx512, &dot<Iq1m>},
};

}  // namespace

KernelTable iq_kernels_avx512() {
    return {kKernels, sizeof(kKernels) / sizeof(kKernels[0])};
}

#else

KernelTable iq_kernels_avx512() {
    return {nullptr, 0};
}

#endif

}  // namespace mox::quant::cpu
