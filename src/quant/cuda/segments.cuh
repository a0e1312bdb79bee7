// Per-type decoders of 32-element "segments" of a weight row, the unit of work of one lane in the
// CUDA matvec and MoE kernels (quant/cuda/matvec.cuh). Only .cu files include this header.
//
// A segment is 32 elements that one lane decodes from one block with a few wide loads: a whole
// 32-element block (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, float types) or one eighth of a
// 256-element super-block (K-quants, IQ4_XS, the grid i-quants IQ2_*, IQ3_*, IQ1_*). The 32
// values come out in the order the bytes hold them ("consumption order" j = 0..31), which is not
// always element order: elem_of(sb, j) maps j of segment sb of a block to its element index inside
// the block, and the kernels lay the activations out in shared memory in that order (matvec.cuh),
// so decoding never shuffles values.
//
// Decoded value of j: d[j / 8] * q[j] - m[j / 8]  (m only where kHasMin). q holds small integers or
// table values, exactly as floats; d and m are the fp32 products (d * sub-scale), (dmin * sub-min)
// that the reference forms first (shared/spec/gguf-and-quants.md §3), so each weight is bit-exact
// with the CPU reference before it meets the activation. This holds for every type here: Q4_1/Q5_1
// (value d * q + m) keep m negated, exactly; the grid i-quants keep the reference's sub-block scale
// as d and the signed grid value (IQ1_*: grid + delta, formed first by the reference too) as q.
//
// Integer form (load_i8, only some types): the same segment as 8 words of 4 signed bytes q (values
// in consumption order, word w holding j = 4w..4w+3) with d[j / 8] and m[j / 8] as above, for dot
// products against 8-bit activations with dp4a (matvec.cuh, "int8 activations"). It exists where the
// weight integers fit a signed byte exactly: Q4_0, Q8_0, Q4_K, Q5_K, Q6_K.
//
// Block layouts: shared/spec/gguf-and-quants.md §3.1 (legacy), §3.3 (K-quants), §3.4 (IQ4_XS), §3.5,
// §4 (grid i-quants; their tables live in quant/cuda/iq_tables.cuh).
#pragma once

#include "quant/cuda/iq_tables.cuh"

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace mox::cuda::seg {

inline constexpr int kSegElems = 32;

struct Seg {
    float q[32];
    float d[4];
    float m[4];
};

struct SegI {
    uint32_t q[8];  // 4 signed bytes each
    float d[4];
    float m[4];
};
// A type with load_i8 also says how many distinct (d, m) its segment has, kI8Groups (1, 2 or 4:
// d[4 / kI8Groups * i] for words 8 / kI8Groups * i ..), so the dot converts one integer sum per
// distinct scale instead of one per 8 values.

// Table-driven types read their 16 values from a shared-memory copy (16 distinct words, so lanes
// with different nibbles never conflict); these are the values it is filled from.
enum Table : int { kNoTable = 0, kTableIq4nl = 1, kTableMxfp4 = 2 };

__device__ __forceinline__ float table_value(int table, int i) {
    // kvalues_iq4nl and kvalues_mxfp4 (the E2M1 code table doubled), spec §3.1.
    constexpr int8_t iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    constexpr int8_t mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    return static_cast<float>(table == kTableIq4nl ? iq4nl[i] : mxfp4[i]);
}

// ---- loads. Blocks are packed, so a field's alignment is what the block size allows: the loaders
// below say which alignment they need and every type uses the widest one its layout guarantees
// (device allocations are 256-byte aligned and rows are whole blocks).

// Where a loader reads a row's bytes: global memory through the read-only data path (Gmem, the
// default: the decode kernels), or shared memory (Smem: the prefill tiles stage raw blocks there
// first, quant/cuda/matmul.cuh). Plain dereferences below (16-bit fields, single bytes) work in both.
struct Gmem {
    template <class P>
    __device__ __forceinline__ static P ld(const P* p) {
        return __ldg(p);
    }
};
struct Smem {
    template <class P>
    __device__ __forceinline__ static P ld(const P* p) {
        return *p;
    }
};

__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) {
    const auto* h = reinterpret_cast<const uint16_t*>(p);
    return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
}
__device__ __forceinline__ uint32_t ld32_a4(const uint8_t* p) {
    return *reinterpret_cast<const uint32_t*>(p);
}
template <class M = Gmem>
__device__ __forceinline__ uint4 ld128_a16(const uint8_t* p) {
    return M::ld(reinterpret_cast<const uint4*>(p));
}
template <class M = Gmem>
__device__ __forceinline__ uint2 ld64_a8(const uint8_t* p) {
    return M::ld(reinterpret_cast<const uint2*>(p));
}

// N little-endian words of the bytes at p (any alignment) from aligned 4-byte loads: one load per
// word plus one when p is unaligned, instead of byte or 16-bit loads. An unaligned p reads up to 3
// bytes past p + 4N, inside the aligned word holding p + 4N (allocations from upload_weight are
// padded by 16 bytes, so the last row's last block stays inside its allocation).
template <class M = Gmem, int N>
__device__ __forceinline__ void load_words(const uint8_t* p, uint32_t (&w)[N]) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const auto* base = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
    const uint32_t sh = static_cast<uint32_t>(a & 3) * 8;
    uint32_t raw[N + 1];
#pragma unroll
    for (int i = 0; i < N; ++i) raw[i] = M::ld(base + i);
    raw[N] = sh ? M::ld(base + N) : 0u;
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = __funnelshift_r(raw[i], raw[i + 1], sh);
}

__device__ __forceinline__ float f16_bits(uint32_t h) {
    return __half2float(__ushort_as_half(static_cast<uint16_t>(h)));
}

__device__ __forceinline__ float f16_at(const uint8_t* p) {
    return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}

// Byte I of v (0..255) as a float, minus `offset`, without an int->float conversion instruction:
// 0x4B0000bb is the float 2^23 + bb, so subtracting 2^23 + offset leaves bb - offset exactly.
inline constexpr float kMagic = 8388608.0f;
template <int I>
__device__ __forceinline__ float byte_f(uint32_t v, float bias) {
    return __int_as_float(static_cast<int>(__byte_perm(v, 0x4B000000u, 0x7440u | I))) - bias;
}
// Four bytes of v into q[0..3].
__device__ __forceinline__ void put4(float* q, uint32_t v, float bias) {
    q[0] = byte_f<0>(v, bias);
    q[1] = byte_f<1>(v, bias);
    q[2] = byte_f<2>(v, bias);
    q[3] = byte_f<3>(v, bias);
}
// The four nibble values of v's bytes (each < 16) through a table.
__device__ __forceinline__ void put4_table(float* q, uint32_t v, const float* tbl) {
    q[0] = tbl[v & 15];
    q[1] = tbl[(v >> 8) & 15];
    q[2] = tbl[(v >> 16) & 15];
    q[3] = tbl[(v >> 24) & 15];
}

// Each byte of v minus c, as signed bytes (v's bytes and c < 128, every byte of the result in
// -128..127): setting bit 7 first keeps the subtraction from borrowing across bytes.
__device__ __forceinline__ uint32_t sub_bytes(uint32_t v, uint32_t c) {
    return ((v | 0x80808080u) - c) ^ 0x80808080u;
}

template <class S>
__device__ __forceinline__ void set_d(S& s, float d) {
#pragma unroll
    for (int g = 0; g < 4; ++g) s.d[g] = d;
}

// ---- float types: a segment is 32 consecutive elements; the last one of a row may be partial
// (n_in need not be a multiple of 32), its missing values read as 0.

struct F32 {
    static constexpr int kBlockElems = 32, kSegs = 1, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int, int j) { return j; }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t n_in, Seg& s, const float*) {
        const int64_t e0 = g * 32;
        const auto* p = reinterpret_cast<const float*>(row) + e0;
        if (e0 + 32 <= n_in && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const float4 v = M::ld(reinterpret_cast<const float4*>(p) + k);
                s.q[4 * k] = v.x, s.q[4 * k + 1] = v.y, s.q[4 * k + 2] = v.z, s.q[4 * k + 3] = v.w;
            }
        } else {
            const int64_t n = n_in - e0;
#pragma unroll
            for (int j = 0; j < 32; ++j) s.q[j] = j < n ? p[j] : 0.0f;
        }
        set_d(s, 1.0f);
    }
};

// F16 and BF16 share the loop: 16-bit words, converted by `Cvt`.
template <bool kBf16>
struct Half16 {
    static constexpr int kBlockElems = 32, kSegs = 1, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int, int j) { return j; }
    __device__ static float cvt(uint32_t h) {
        if constexpr (kBf16)
            return __uint_as_float(h << 16);
        else
            return __half2float(__ushort_as_half(static_cast<uint16_t>(h)));
    }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t n_in, Seg& s, const float*) {
        const int64_t e0 = g * 32;
        const auto* p = reinterpret_cast<const uint16_t*>(row) + e0;
        if (e0 + 32 <= n_in && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const uint4 v = M::ld(reinterpret_cast<const uint4*>(p) + k);
                const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    s.q[8 * k + 2 * i] = cvt(w[i] & 0xFFFFu);
                    s.q[8 * k + 2 * i + 1] = cvt(w[i] >> 16);
                }
            }
        } else {
            const int64_t n = n_in - e0;
#pragma unroll
            for (int j = 0; j < 32; ++j) s.q[j] = j < n ? cvt(p[j]) : 0.0f;
        }
        set_d(s, 1.0f);
    }
};
using F16 = Half16<false>;
using BF16 = Half16<true>;

template <class T>
inline constexpr bool kIsFloat = std::is_same_v<T, F32> || std::is_same_v<T, F16> || std::is_same_v<T, BF16>;

// ---- 32-element blocks: low nibble of qs[i] is element i, high nibble element i + 16 (spec §3.1).

struct Q4_0 {  // 18 B: d f16, qs[16]
    static constexpr int kBlockElems = 32, kBlockBytes = 18, kSegs = 1, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    static constexpr int kI8Groups = 1;
    __host__ __device__ static constexpr int elem_of(int, int j) { return j; }
    // The 32 nibble values (0..15) in consumption order, 4 per word: word k < 4 the low nibbles of
    // bytes 4k..4k+3, word 4 + k their high nibbles. Both decoders start from these.
    template <class M = Gmem>
    __device__ static void qwords(const uint8_t* b, uint32_t (&w)[8]) {
        uint32_t v[4];
        load_words<M>(b + 2, v);
#pragma unroll
        for (int k = 0; k < 4; ++k) w[k] = v[k] & 0x0F0F0F0Fu, w[4 + k] = (v[k] >> 4) & 0x0F0F0F0Fu;
    }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + g * kBlockBytes;
        set_d(s, f16_at(b));
        uint32_t w[8];
        qwords<M>(b, w);
#pragma unroll
        for (int k = 0; k < 8; ++k) put4(s.q + 4 * k, w[k], kMagic + 8.0f);
    }
    __device__ static void load_i8(const uint8_t* row, int64_t g, SegI& s) {
        const uint8_t* b = row + g * kBlockBytes;
        set_d(s, f16_at(b));
        qwords(b, s.q);
#pragma unroll
        for (int k = 0; k < 8; ++k) s.q[k] = sub_bytes(s.q[k], 0x08080808u);
    }
};

struct IQ4_NL {  // 18 B: d f16, qs[16]; value d * kvalues_iq4nl[nibble]
    static constexpr int kBlockElems = 32, kBlockBytes = 18, kSegs = 1, kTable = kTableIq4nl;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int, int j) { return j; }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float* tbl) {
        const uint8_t* b = row + g * kBlockBytes;
        set_d(s, f16_at(b));
        uint32_t w[4];
        load_words<M>(b + 2, w);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t v = w[k];
            put4_table(s.q + 4 * k, v, tbl);
            put4_table(s.q + 16 + 4 * k, v >> 4, tbl);
        }
    }
};

struct MXFP4 {  // 17 B: e (E8M0) u8, qs[16]; value kvalues_mxfp4[nibble] * 2^(e-128)
    static constexpr int kBlockElems = 32, kBlockBytes = 17, kSegs = 1, kTable = kTableMxfp4;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int, int j) { return j; }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float* tbl) {
        const uint8_t* b = row + g * kBlockBytes;
        const uint32_t e = b[0];
        // 2^(e-128) from its bits: a normal float for e >= 2, the denormals 2^-127, 2^-128 below.
        const float d = e >= 2 ? __uint_as_float((e - 1) << 23) : __uint_as_float(0x00200000u << e);
        set_d(s, d);
        uint32_t w[4];
        load_words<M>(b + 1, w);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t v = w[k];
            put4_table(s.q + 4 * k, v, tbl);
            put4_table(s.q + 16 + 4 * k, v >> 4, tbl);
        }
    }
};

struct Q8_0 {  // 34 B: d f16, qs[32] int8
    static constexpr int kBlockElems = 32, kBlockBytes = 34, kSegs = 1, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    static constexpr int kI8Groups = 1;
    __host__ __device__ static constexpr int elem_of(int, int j) { return j; }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + g * kBlockBytes;
        set_d(s, f16_at(b));
        uint32_t w[8];
        load_words<M>(b + 2, w);
#pragma unroll
        for (int k = 0; k < 8; ++k) put4(s.q + 4 * k, w[k] ^ 0x80808080u, kMagic + 128.0f);
    }
    __device__ static void load_i8(const uint8_t* row, int64_t g, SegI& s) {
        const uint8_t* b = row + g * kBlockBytes;
        set_d(s, f16_at(b));
        load_words(b + 2, s.q);
    }
};

// Q4_1 and Q5_1 store value d * q + m; as a segment that is d * q - (-m), so m[] holds -m (exact).

struct Q4_1 {  // 20 B: d f16, m f16, qs[16]; 4-byte aligned
    static constexpr int kBlockElems = 32, kBlockBytes = 20, kSegs = 1, kTable = kNoTable;
    static constexpr bool kHasMin = true;
    __host__ __device__ static constexpr int elem_of(int, int j) { return j; }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + g * kBlockBytes;
        const uint32_t dm = M::ld(reinterpret_cast<const uint32_t*>(b));
        set_d(s, f16_bits(dm & 0xFFFFu));
        const float m = -f16_bits(dm >> 16);
#pragma unroll
        for (int k = 0; k < 4; ++k) s.m[k] = m;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t v = M::ld(reinterpret_cast<const uint32_t*>(b + 4) + k);
            put4(s.q + 4 * k, v & 0x0F0F0F0Fu, kMagic);
            put4(s.q + 16 + 4 * k, (v >> 4) & 0x0F0F0F0Fu, kMagic);
        }
    }
};

// Bits 0-3 of v, each moved to bit 4 of its own byte: the fifth bits of four Q5 elements.
__device__ __forceinline__ uint32_t spread4_bit4(uint32_t v) {
    return ((v & 1u) | ((v & 2u) << 7) | ((v & 4u) << 14) | ((v & 8u) << 21)) << 4;
}

// The 32 five-bit quants of a Q5_0/Q5_1 block minus `bias`: nibbles in qs[4] (words), fifth bit of
// element e = bit e of qh.
__device__ __forceinline__ void put_q5(Seg& s, const uint32_t (&qs)[4], uint32_t qh, float bias) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        put4(s.q + 4 * k, (qs[k] & 0x0F0F0F0Fu) | spread4_bit4(qh >> (4 * k)), bias);
        put4(s.q + 16 + 4 * k, ((qs[k] >> 4) & 0x0F0F0F0Fu) | spread4_bit4(qh >> (16 + 4 * k)), bias);
    }
}

struct Q5_0 {  // 22 B: d f16, qh u32, qs[16]; 2-byte aligned; value d * (q - 16)
    static constexpr int kBlockElems = 32, kBlockBytes = 22, kSegs = 1, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int, int j) { return j; }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + g * kBlockBytes;
        set_d(s, f16_at(b));
        uint32_t w[5];
        load_words<M>(b + 2, w);
        const uint32_t qs[4] = {w[1], w[2], w[3], w[4]};
        put_q5(s, qs, w[0], kMagic + 16.0f);
    }
};

struct Q5_1 {  // 24 B: d f16, m f16, qh u32, qs[16]; 8-byte aligned; value d * q + m
    static constexpr int kBlockElems = 32, kBlockBytes = 24, kSegs = 1, kTable = kNoTable;
    static constexpr bool kHasMin = true;
    __host__ __device__ static constexpr int elem_of(int, int j) { return j; }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + g * kBlockBytes;
        const uint2 h = ld64_a8<M>(b), v0 = ld64_a8<M>(b + 8), v1 = ld64_a8<M>(b + 16);
        set_d(s, f16_bits(h.x & 0xFFFFu));
        const float m = -f16_bits(h.x >> 16);
#pragma unroll
        for (int k = 0; k < 4; ++k) s.m[k] = m;
        const uint32_t qs[4] = {v0.x, v0.y, v1.x, v1.y};
        put_q5(s, qs, h.y, kMagic);
    }
};

// ---- K-quants: 256-element super-blocks, 8 segments each.

// 6-bit scale and min of sub-block sb (0..7) from Q4_K/Q5_K's 12 packed bytes (spec §3.3). Byte
// loads: reading the header as four 4-byte words was measured slower on the H200 (more live
// registers: the batch-8 kernel spilled).
__device__ __forceinline__ void scale_min_k4(const uint8_t* s, int sb, int& sc, int& m) {
    if (sb < 4) {
        sc = s[sb] & 63;
        m = s[sb + 4] & 63;
    } else {
        sc = (s[sb + 4] & 15) | ((s[sb - 4] >> 6) << 4);
        m = (s[sb + 4] >> 4) | ((s[sb] >> 6) << 4);
    }
}

// Q4_K and Q5_K segment sb = (c = sb/2, half = sb%2): qs bytes 32c + 16 half + i (i < 16); their low
// nibbles are elements 64c + 16 half + i (sub-block 2c), high nibbles 64c + 32 + 16 half + i
// (sub-block 2c + 1). j < 16 are the low nibbles.
__host__ __device__ constexpr int k4_elem_of(int sb, int j) {
    return 64 * (sb >> 1) + 16 * (sb & 1) + (j < 16 ? j : 32 + (j - 16));
}

// k4_scales from the block's first 16 bytes held in registers (one 16-byte load: d, dmin and the
// 12 scale bytes), without branches: bytes 2c and 2c + 1 (c = sb / 2) of the 6-bit scales and mins
// as two-byte fields of the header words, selected by c < 2.
template <class S>
__device__ __forceinline__ void k4_scales_words(const uint4 hd, int sb, S& s) {
    const int c = sb >> 1, sh = 16 * (c & 1);
    const uint32_t w0 = hd.y >> sh, w1 = hd.z >> sh, w2 = hd.w >> sh;
    const bool low = c < 2;
    const uint32_t sc = low ? (w0 & 0x3F3Fu) : ((w2 & 0x0F0Fu) | ((w0 & 0xC0C0u) >> 2));
    const uint32_t mn = low ? (w1 & 0x3F3Fu) : (((w2 >> 4) & 0x0F0Fu) | ((w1 & 0xC0C0u) >> 2));
    const float d = f16_bits(hd.x & 0xFFFFu), dmin = f16_bits(hd.x >> 16);
    s.d[0] = s.d[1] = d * static_cast<float>(sc & 0xFFu);
    s.m[0] = s.m[1] = dmin * static_cast<float>(mn & 0xFFu);
    s.d[2] = s.d[3] = d * static_cast<float>(sc >> 8);
    s.m[2] = s.m[3] = dmin * static_cast<float>(mn >> 8);
}

template <class S>
__device__ __forceinline__ void k4_scales(const uint8_t* b, int sb, S& s) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const int c = sb >> 1;
    int sc0, m0, sc1, m1;
    scale_min_k4(b + 4, 2 * c, sc0, m0);
    scale_min_k4(b + 4, 2 * c + 1, sc1, m1);
    s.d[0] = s.d[1] = d * static_cast<float>(sc0);
    s.m[0] = s.m[1] = dmin * static_cast<float>(m0);
    s.d[2] = s.d[3] = d * static_cast<float>(sc1);
    s.m[2] = s.m[3] = dmin * static_cast<float>(m1);
}

// Q4_K and Q5_K share the super-block header (d, dmin, 12 bytes of 6-bit scales and mins) and the
// element order: a segment is T::qwords' values with its sub-block's scale and min.
template <class T, class M = Gmem>
__device__ __forceinline__ void k4_load(const uint8_t* row, int64_t g, Seg& s) {
    const uint8_t* b = row + (g >> 3) * T::kBlockBytes;
    const int sb = static_cast<int>(g & 7);
    uint32_t w[8];
    T::template qwords<M>(b, sb, w);
#pragma unroll
    for (int k = 0; k < 8; ++k) put4(s.q + 4 * k, w[k], kMagic);
    k4_scales(b, sb, s);
}

template <class T>
__device__ __forceinline__ void k4_load_i8(const uint8_t* row, int64_t g, SegI& s) {
    const uint8_t* b = row + (g >> 3) * T::kBlockBytes;
    const int sb = static_cast<int>(g & 7);
    T::qwords(b, sb, s.q);
    k4_scales_words(ld128_a16(b), sb, s);
}

struct Q4_K {  // 144 B: d, dmin f16; scales[12]; qs[128]
    static constexpr int kBlockElems = 256, kBlockBytes = 144, kSegs = 8, kTable = kNoTable;
    static constexpr bool kHasMin = true;
    static constexpr int kI8Groups = 2;
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return k4_elem_of(sb, j); }
    // The 32 nibble values (0..15) of segment sb, 4 per word: low nibbles (words 0..3), then high.
    template <class M = Gmem>
    __device__ static void qwords(const uint8_t* b, int sb, uint32_t (&w)[8]) {
        const uint4 v = ld128_a16<M>(b + 16 + 32 * (sb >> 1) + 16 * (sb & 1));
        const uint32_t x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) w[k] = x[k] & 0x0F0F0F0Fu, w[4 + k] = (x[k] >> 4) & 0x0F0F0F0Fu;
    }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        k4_load<Q4_K, M>(row, g, s);
    }
    __device__ static void load_i8(const uint8_t* row, int64_t g, SegI& s) {
        k4_load_i8<Q4_K>(row, g, s);
    }
};

struct Q5_K {  // 176 B: d, dmin f16; scales[12]; qh[32]; qs[128]
    static constexpr int kBlockElems = 256, kBlockBytes = 176, kSegs = 8, kTable = kNoTable;
    static constexpr bool kHasMin = true;
    static constexpr int kI8Groups = 2;
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return k4_elem_of(sb, j); }
    // The 32 five-bit values (0..31) of segment sb, 4 per word, in Q4_K's order. The fifth bit of
    // element 32 s + l is bit s of qh[l]; our bytes l = 16 half + i.
    template <class M = Gmem>
    __device__ static void qwords(const uint8_t* b, int sb, uint32_t (&w)[8]) {
        const int c = sb >> 1;
        const uint4 v = ld128_a16<M>(b + 48 + 32 * c + 16 * (sb & 1));
        const uint4 h = ld128_a16<M>(b + 16 + 16 * (sb & 1));
        const uint32_t x[4] = {v.x, v.y, v.z, v.w};
        const uint32_t hw[4] = {h.x, h.y, h.z, h.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            w[k] = (x[k] & 0x0F0F0F0Fu) | (((hw[k] >> (2 * c)) & 0x01010101u) << 4);
            w[4 + k] = ((x[k] >> 4) & 0x0F0F0F0Fu) | (((hw[k] >> (2 * c + 1)) & 0x01010101u) << 4);
        }
    }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        k4_load<Q5_K, M>(row, g, s);
    }
    __device__ static void load_i8(const uint8_t* row, int64_t g, SegI& s) {
        k4_load_i8<Q5_K>(row, g, s);
    }
};

// Q2_K, Q3_K and Q6_K place element e = 128 h + 32 k + l (k < 4, l < 32) in byte l of a 32-byte
// half (h) at bit position k. Segment sb = (h = sb/4, lq = sb%4) takes l in [8 lq, 8 lq + 8) for all
// four k: j = 8 k + (l - 8 lq). Its 16-element scale groups are 8 h + 2 k + lq/2, one per j / 8.
__host__ __device__ constexpr int k2_elem_of(int sb, int j) {
    return 128 * (sb >> 2) + 32 * (j >> 3) + 8 * (sb & 3) + (j & 7);
}

struct Q2_K {  // 84 B: scales[16]; qs[64]; d, dmin f16
    static constexpr int kBlockElems = 256, kBlockBytes = 84, kSegs = 8, kTable = kNoTable;
    static constexpr bool kHasMin = true;
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return k2_elem_of(sb, j); }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + (g >> 3) * kBlockBytes;
        const int sb = static_cast<int>(g & 7);
        const int h = sb >> 2, lq = sb & 3;
        const uint32_t v0 = ld32_a4(b + 16 + 32 * h + 8 * lq), v1 = ld32_a4(b + 20 + 32 * h + 8 * lq);
        const float d = f16_at(b + 80), dmin = f16_at(b + 82);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            put4(s.q + 8 * k, (v0 >> (2 * k)) & 0x03030303u, kMagic);
            put4(s.q + 8 * k + 4, (v1 >> (2 * k)) & 0x03030303u, kMagic);
            const int sc = b[8 * h + 2 * k + (lq >> 1)];
            s.d[k] = d * static_cast<float>(sc & 15);
            s.m[k] = dmin * static_cast<float>(sc >> 4);
        }
    }
};

struct Q3_K {  // 110 B: hmask[32]; qs[64]; scales[12]; d f16
    static constexpr int kBlockElems = 256, kBlockBytes = 110, kSegs = 8, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return k2_elem_of(sb, j); }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + (g >> 3) * kBlockBytes;
        const int sb = static_cast<int>(g & 7);
        const int h = sb >> 2, lq = sb & 3;
        const uint32_t v0 = ld32_a2(b + 32 + 32 * h + 8 * lq), v1 = ld32_a2(b + 36 + 32 * h + 8 * lq);
        // High bit of element e is bit e/32 = 4h + k of hmask[l].
        const uint32_t m0 = ld32_a2(b + 8 * lq), m1 = ld32_a2(b + 4 + 8 * lq);
        const float d = f16_at(b + 108);
        const uint8_t* sc = b + 96;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int bit = 4 * h + k;
            put4(s.q + 8 * k, ((v0 >> (2 * k)) & 0x03030303u) | (((m0 >> bit) & 0x01010101u) << 2),
                 kMagic + 4.0f);
            put4(s.q + 8 * k + 4, ((v1 >> (2 * k)) & 0x03030303u) | (((m1 >> bit) & 0x01010101u) << 2),
                 kMagic + 4.0f);
            // 6-bit scale of group g: low 4 bits in nibble g/8 of byte g%8, high 2 in bits 2(g/4) of
            // byte 8 + g%4; stored biased by 32.
            const int grp = 8 * h + 2 * k + (lq >> 1);
            const int lo4 = (sc[grp & 7] >> (4 * (grp >> 3))) & 15;
            const int hi2 = (sc[8 + (grp & 3)] >> (2 * (grp >> 2))) & 3;
            s.d[k] = d * static_cast<float>((lo4 | (hi2 << 4)) - 32);
        }
    }
};

struct Q6_K {  // 210 B: ql[128]; qh[64]; scales[16] int8; d f16
    static constexpr int kBlockElems = 256, kBlockBytes = 210, kSegs = 8, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    static constexpr int kI8Groups = 4;
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return k2_elem_of(sb, j); }
    // The 32 six-bit values (0..63) of segment sb = (h, lq), 4 per word (words 2k, 2k + 1: group k),
    // and the group scales. Low 4 bits of k = 0, 1 are the low nibbles of ql[64h + l] and
    // ql[64h + 32 + l]; k = 2, 3 the high nibbles of the same bytes. The top 2 bits are bits
    // 2k..2k+1 of qh[32h + l].
    template <class M = Gmem, class S>
    __device__ static void qwords(const uint8_t* b, int sb, uint32_t (&w)[8], S& s) {
        const int h = sb >> 2, lq = sb & 3;
        const uint8_t* a = b + 64 * h + 8 * lq;
        const uint32_t a0 = ld32_a2(a), a1 = ld32_a2(a + 4), b0 = ld32_a2(a + 32), b1 = ld32_a2(a + 36);
        const uint32_t c0 = ld32_a2(b + 128 + 32 * h + 8 * lq), c1 = ld32_a2(b + 132 + 32 * h + 8 * lq);
        const float d = f16_at(b + 208);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t s0 = (k & 1) ? b0 : a0, s1 = (k & 1) ? b1 : a1;
            const uint32_t n0 = k < 2 ? (s0 & 0x0F0F0F0Fu) : ((s0 >> 4) & 0x0F0F0F0Fu);
            const uint32_t n1 = k < 2 ? (s1 & 0x0F0F0F0Fu) : ((s1 >> 4) & 0x0F0F0F0Fu);
            w[2 * k] = n0 | (((c0 >> (2 * k)) & 0x03030303u) << 4);
            w[2 * k + 1] = n1 | (((c1 >> (2 * k)) & 0x03030303u) << 4);
            s.d[k] = d * static_cast<float>(static_cast<int8_t>(b[192 + 8 * h + 2 * k + (lq >> 1)]));
        }
    }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        uint32_t w[8];
        qwords<M>(row + (g >> 3) * kBlockBytes, static_cast<int>(g & 7), w, s);
#pragma unroll
        for (int k = 0; k < 8; ++k) put4(s.q + 4 * k, w[k], kMagic + 32.0f);
    }
    __device__ static void load_i8(const uint8_t* row, int64_t g, SegI& s) {
        qwords(row + (g >> 3) * kBlockBytes, static_cast<int>(g & 7), s.q, s);
#pragma unroll
        for (int k = 0; k < 8; ++k) s.q[k] = sub_bytes(s.q[k], 0x20202020u);
    }
};

struct IQ4_XS {  // 136 B: d f16; scales_h u16; scales_l[4]; qs[128]
    static constexpr int kBlockElems = 256, kBlockBytes = 136, kSegs = 8, kTable = kTableIq4nl;
    static constexpr bool kHasMin = false;
    // Sub-block ib: low nibble of qs[16 ib + i] is element 32 ib + i, the high one 32 ib + 16 + i.
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return 32 * sb + j; }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float* tbl) {
        const uint8_t* b = row + (g >> 3) * kBlockBytes;
        const int ib = static_cast<int>(g & 7);
        const uint2 v0 = ld64_a8<M>(b + 8 + 16 * ib), v1 = ld64_a8<M>(b + 16 + 16 * ib);
        const uint32_t w[4] = {v0.x, v0.y, v1.x, v1.y};
        const int sh = *reinterpret_cast<const uint16_t*>(b + 2);
        const int ls = ((b[4 + (ib >> 1)] >> (4 * (ib & 1))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
        set_d(s, f16_at(b) * static_cast<float>(ls - 32));
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            put4_table(s.q + 4 * k, w[k], tbl);
            put4_table(s.q + 16 + 4 * k, w[k] >> 4, tbl);
        }
    }
};

// ---- Grid i-quants (spec §4): 256-element super-blocks; segment ib is sub-block ib (elements
// 32 ib .. 32 ib + 31, in order), made of 4 groups of 8 (group l = j / 8, one scale each). Grid
// tables: quant/cuda/iq_tables.cuh. All these blocks are 2-byte aligned (IQ1_M: 8-byte).
//
// Exactness: the reference forms the sub-block scale first (e.g. d * (0.5 + s) * 0.25) and
// multiplies it by the grid value and a +-1 sign; here d[] is that same scale and q[] the signed
// grid value (a sign flip is exact), so d * q is the reference's value bit for bit. IQ1_*: q is
// grid + delta, which the reference also forms first (exact in fp32: values in {-1, 0, 1} +- 1/8).

__host__ __device__ constexpr int iq_elem_of(int sb, int j) {
    return 32 * sb + j;
}

// Eight grid magnitudes (bytes of lo, then of hi) into q[0..7], negated where bit j of `signs` is set.
__device__ __forceinline__ void put8_signed(float* q, uint32_t lo, uint32_t hi, uint32_t signs) {
    put4(q, lo, kMagic);
    put4(q + 4, hi, kMagic);
#pragma unroll
    for (int j = 0; j < 8; ++j)
        q[j] = __int_as_float(__float_as_int(q[j]) ^ static_cast<int>(((signs >> j) & 1u) << 31));
}

// Eight IQ1 grid values (int8 bytes -1/0/1 of lo, then hi) plus delta into q[0..7]. Adding 1 per byte
// (no carries: __vadd4) gives 0..2, which byte_f turns back into -1..1.
__device__ __forceinline__ void put8_iq1(float* q, uint2 e, float delta) {
    put4(q, __vadd4(e.x, 0x01010101u), kMagic + 1.0f);
    put4(q + 4, __vadd4(e.y, 0x01010101u), kMagic + 1.0f);
#pragma unroll
    for (int j = 0; j < 8; ++j) q[j] += delta;
}

// IQ2_XXS/IQ2_XS/IQ2_S/IQ3_XXS sub-block scale: d * (0.5 + s) * 0.25 (IQ3_XXS: * 0.5), in the
// reference's order.
__device__ __forceinline__ float iq_scale(float d, uint32_t s, float f) {
    return d * (0.5f + static_cast<float>(s)) * f;
}

struct IQ2_XXS {  // 66 B: d f16; per sub-block 8 bytes: 4 grid indices, u32 (4 x 7 sign bits, s)
    static constexpr int kBlockElems = 256, kBlockBytes = 66, kSegs = 8, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return iq_elem_of(sb, j); }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + (g >> 3) * kBlockBytes;
        const int ib = static_cast<int>(g & 7);
        uint32_t w[2];
        load_words<M>(b + 2 + 8 * ib, w);
        set_d(s, iq_scale(f16_at(b), w[1] >> 28, 0.25f));
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const uint2 e = grid8(kIqGrids.iq2xxs_grid, (w[0] >> (8 * l)) & 255u);
            put8_signed(s.q + 8 * l, e.x, e.y, ksigns((w[1] >> (7 * l)) & 127u));
        }
    }
};

struct IQ2_XS {  // 74 B: d f16; qs u16[32] (9-bit index, 7-bit sign index); scales[8]
    static constexpr int kBlockElems = 256, kBlockBytes = 74, kSegs = 8, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return iq_elem_of(sb, j); }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + (g >> 3) * kBlockBytes;
        const int ib = static_cast<int>(g & 7);
        uint32_t w[2];
        load_words<M>(b + 2 + 8 * ib, w);
        const float d = f16_at(b);
        const uint32_t sc = b[66 + ib];
        s.d[0] = s.d[1] = iq_scale(d, sc & 15u, 0.25f);
        s.d[2] = s.d[3] = iq_scale(d, sc >> 4, 0.25f);
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const uint32_t q = (w[l >> 1] >> (16 * (l & 1))) & 0xFFFFu;
            const uint2 e = grid8(kIqGrids.iq2xs_grid, q & 511u);
            put8_signed(s.q + 8 * l, e.x, e.y, ksigns(q >> 9));
        }
    }
};

struct IQ2_S {  // 82 B: d f16; qs[32]; signs[32]; qh[8]; scales[8]
    static constexpr int kBlockElems = 256, kBlockBytes = 82, kSegs = 8, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return iq_elem_of(sb, j); }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + (g >> 3) * kBlockBytes;
        const int ib = static_cast<int>(g & 7);
        const uint32_t qs = ld32_a2(b + 2 + 4 * ib), sg = ld32_a2(b + 34 + 4 * ib);
        const uint32_t qh = b[66 + ib], sc = b[74 + ib];
        const float d = f16_at(b);
        s.d[0] = s.d[1] = iq_scale(d, sc & 15u, 0.25f);
        s.d[2] = s.d[3] = iq_scale(d, sc >> 4, 0.25f);
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const uint32_t index = ((qs >> (8 * l)) & 255u) | (((qh >> (2 * l)) & 3u) << 8);
            const uint2 e = grid8(kIqGrids.iq2s_grid, index);
            put8_signed(s.q + 8 * l, e.x, e.y, sg >> (8 * l));
        }
    }
};

struct IQ3_XXS {  // 98 B: d f16; qs[64] (grid indices, 8 per sub-block); u32[8] (4 x 7 sign bits, s)
    static constexpr int kBlockElems = 256, kBlockBytes = 98, kSegs = 8, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return iq_elem_of(sb, j); }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + (g >> 3) * kBlockBytes;
        const int ib = static_cast<int>(g & 7);
        uint32_t w[2];
        load_words<M>(b + 2 + 8 * ib, w);
        const uint32_t aux = ld32_a2(b + 66 + 4 * ib);
        set_d(s, iq_scale(f16_at(b), aux >> 28, 0.5f));
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            // Group l: index byte 2l for elements 0-3, 2l + 1 for 4-7 (both in word l / 2).
            const uint32_t v = w[l >> 1] >> (16 * (l & 1));
            const uint32_t lo = grid4(kIqGrids.iq3xxs_grid, v & 255u);
            const uint32_t hi = grid4(kIqGrids.iq3xxs_grid, (v >> 8) & 255u);
            put8_signed(s.q + 8 * l, lo, hi, ksigns((aux >> (7 * l)) & 127u));
        }
    }
};

struct IQ3_S {  // 110 B: d f16; qs[64]; qh[8]; signs[32]; scales[4]
    static constexpr int kBlockElems = 256, kBlockBytes = 110, kSegs = 8, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return iq_elem_of(sb, j); }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + (g >> 3) * kBlockBytes;
        const int ib = static_cast<int>(g & 7);
        uint32_t w[2];
        load_words<M>(b + 2 + 8 * ib, w);
        const uint32_t qh = b[66 + ib], sg = ld32_a2(b + 74 + 4 * ib);
        const uint32_t nib = (b[106 + (ib >> 1)] >> (4 * (ib & 1))) & 15u;
        set_d(s, f16_at(b) * static_cast<float>(1 + 2 * nib));
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            // Indices k = 2l (elements 0-3) and 2l + 1 (4-7): byte k of the 8, ninth bit k of qh.
            const uint32_t v = w[l >> 1] >> (16 * (l & 1));
            const uint32_t lo = grid4(kIqGrids.iq3s_grid, (v & 255u) | (((qh >> (2 * l)) & 1u) << 8));
            const uint32_t hi =
                grid4(kIqGrids.iq3s_grid, ((v >> 8) & 255u) | (((qh >> (2 * l + 1)) & 1u) << 8));
            put8_signed(s.q + 8 * l, lo, hi, sg >> (8 * l));
        }
    }
};

struct IQ1_S {  // 50 B: d f16; qs[32]; qh u16[8] (3 index bits per group, s, delta sign)
    static constexpr int kBlockElems = 256, kBlockBytes = 50, kSegs = 8, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return iq_elem_of(sb, j); }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + (g >> 3) * kBlockBytes;
        const int ib = static_cast<int>(g & 7);
        const uint32_t qs = ld32_a2(b + 2 + 4 * ib);
        const uint32_t qh = *reinterpret_cast<const uint16_t*>(b + 34 + 2 * ib);
        set_d(s, f16_at(b) * static_cast<float>(2 * ((qh >> 12) & 7u) + 1));
        const float delta = (qh & 0x8000u) ? -0.125f : 0.125f;  // quant::kIq1Delta
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const uint32_t index = ((qs >> (8 * l)) & 255u) | (((qh >> (3 * l)) & 7u) << 8);
            put8_iq1(s.q + 8 * l, grid8(kIqGrids.iq1s_grid, index), delta);
        }
    }
};

struct IQ1_M {  // 56 B: qs[32]; qh[16] (per group: 3 index bits, delta sign); scales u16[4] (+ d)
    static constexpr int kBlockElems = 256, kBlockBytes = 56, kSegs = 8, kTable = kNoTable;
    static constexpr bool kHasMin = false;
    __host__ __device__ static constexpr int elem_of(int sb, int j) { return iq_elem_of(sb, j); }
    template <class M = Gmem>
    __device__ static void load(const uint8_t* row, int64_t g, int64_t, Seg& s, const float*) {
        const uint8_t* b = row + (g >> 3) * kBlockBytes;
        const int ib = static_cast<int>(g & 7);
        const uint32_t qs = ld32_a4(b + 4 * ib);
        const uint32_t qh = *reinterpret_cast<const uint16_t*>(b + 32 + 2 * ib);  // nibble l: group l
        // Scale words 0-3 (words 0, 1 in sc.x, 2, 3 in sc.y); their top nibbles are the f16 d.
        const uint2 sc = ld64_a8<M>(b + 48);
        const uint32_t d_bits =
            ((sc.x >> 12) & 15u) | ((sc.x >> 28) << 4) | (((sc.y >> 12) & 15u) << 8) | ((sc.y >> 28) << 12);
        const float d = f16_bits(d_bits);
        // Word ib / 2, from bit 6 (ib % 2): 3-bit scale of groups 0-1, then of groups 2-3.
        const uint32_t word = ((ib >> 2) ? sc.y : sc.x) >> (16 * ((ib >> 1) & 1));
        const uint32_t shift = 6 * (ib & 1);
        s.d[0] = s.d[1] = d * static_cast<float>(2 * ((word >> shift) & 7u) + 1);
        s.d[2] = s.d[3] = d * static_cast<float>(2 * ((word >> (shift + 3)) & 7u) + 1);
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const uint32_t nib = (qh >> (4 * l)) & 15u;
            const uint32_t index = ((qs >> (8 * l)) & 255u) | ((nib & 7u) << 8);
            put8_iq1(s.q + 8 * l, grid8(kIqGrids.iq1s_grid, index), (nib & 8u) ? -0.125f : 0.125f);
        }
    }
};

}  // namespace mox::cuda::seg
