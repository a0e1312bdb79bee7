// The building blocks of the CUDA matvec and MoE kernels. Only .cu files include this header.
//
// Scheme (batch 1..8, memory-bound): activations are staged once per thread block in shared memory
// (fp32; or 8-bit for one column of the integer types, "int8 activations" below); each warp owns kRows weight
// rows at a time and each lane decodes 32-element segments of them (segments.cuh) with wide, coalesced loads:
// consecutive lanes read consecutive segments, so a warp streams contiguous bytes of the row. Partial sums
// are reduced with shuffles.
//
// Shared-memory layout of one activation row (the "permuted" order): the row's segments are grouped
// in units of 8 (one K-quant super-block, or 8 consecutive 32-element blocks). Inside a unit,
// value j of segment s sits at float (j / 4) * 32 + s * 4 + j % 4. Lanes 8u..8u+7 of a warp work on
// the 8 segments of one unit, so each float4 read of theirs covers 128 consecutive bytes: no bank
// conflicts, and each lane's x values come in the order its segment decodes (no shuffles). Values
// past n_in (a partial last segment or unit) are zero.
#pragma once

#include "quant/cuda/check.cuh"
#include "quant/cuda/segments.cuh"
#include "quant/types.h"

#include <cstdint>
#include <type_traits>

namespace mox::cuda {

inline constexpr int kWarp = 32;
inline constexpr int kThreads = 256;  // 8 warps per block
inline constexpr int kRows = 2;       // rows per warp: one x load serves both (halves shared-memory reads)

// Segments per row and 256-float units per staged activation row.
template <class T>
__host__ __device__ inline int64_t n_segments(int64_t n_in) {
    return (n_in + T::kBlockElems - 1) / T::kBlockElems * T::kSegs;
}
__host__ __device__ inline int64_t n_units(int64_t n_segs) {
    return (n_segs + 7) / 8;
}

// The element of x behind value j (consumption order) of segment g of a row.
template <class T>
__host__ __device__ inline int64_t segment_elem(int64_t g, int j) {
    return (g / T::kSegs) * T::kBlockElems + T::elem_of(static_cast<int>(g % T::kSegs), j);
}

// Stages n_rows activation rows (row c at x + c * x_stride, n_in values) into xs in the permuted
// order, row c at xs + c * n_units(n_segs) * 256; all threads of the block. Each thread issues the
// loads of kStageBatch elements before any store: a plain strided loop waits one L2 round trip
// (~0.5-0.7 us) per blockDim elements (the MoE down block stages 9 x 512 floats: 18 trips), batched
// it is ceil(elements / (kStageBatch * blockDim)) trips (2 there, 1 for a 2048..4096-wide x).
inline constexpr int kStageBatch = 16;

template <class T>
__device__ void stage_x_rows(float* xs, const float* __restrict__ x, int64_t x_stride, int n_rows,
                             int64_t n_in, int64_t n_segs) {
    const int per_row = static_cast<int>(n_units(n_segs) * 256);
    const int total = per_row * n_rows;
    const int step = static_cast<int>(blockDim.x);
    for (int p0 = static_cast<int>(threadIdx.x); p0 < total; p0 += kStageBatch * step) {
        float v[kStageBatch];
        int c = p0 / per_row, q = p0 - c * per_row;  // row and position of p0 + b * step, stepped below
#pragma unroll
        for (int b = 0; b < kStageBatch; ++b) {
            const int s = (q >> 2) & 7, j = (((q & 255) >> 5) << 2) | (q & 3);
            const int64_t g = static_cast<int64_t>(q >> 8) * 8 + s;
            int64_t e = -1;
            if (p0 + b * step < total && g < n_segs) {
                e = segment_elem<T>(g, j);
                if (e >= n_in) e = -1;
            }
            v[b] = e >= 0 ? __ldg(x + c * x_stride + e) : 0.0f;
            q += step;
            while (q >= per_row) q -= per_row, ++c;  // once at most while blockDim <= 256
        }
#pragma unroll
        for (int b = 0; b < kStageBatch; ++b)
            if (p0 + b * step < total) xs[p0 + b * step] = v[b];
    }
}

// One row x[0..n_in) into xs (n_units * 256 floats).
template <class T>
__device__ void stage_x(float* xs, const float* __restrict__ x, int64_t n_in, int64_t n_segs) {
    stage_x_rows<T>(xs, x, 0, 1, n_in, n_segs);
}

// The 16-entry value table of table-driven types, into shared memory.
template <class T>
__device__ void stage_table(float* tbl) {
    if constexpr (T::kTable != seg::kNoTable) {
        if (threadIdx.x < 16) tbl[threadIdx.x] = seg::table_value(T::kTable, threadIdx.x);
    }
}

// 32 staged activations of segment g (in decode order) into registers.
__device__ __forceinline__ void load_x(const float* xs, int64_t g, float (&xr)[32]) {
    const float4* p = reinterpret_cast<const float4*>(xs) + (g >> 3) * 64 + (g & 7);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const float4 v = p[8 * k];
        xr[4 * k] = v.x, xr[4 * k + 1] = v.y, xr[4 * k + 2] = v.z, xr[4 * k + 3] = v.w;
    }
}

// Sum over j of (d[j/8] q[j] - m[j/8]) x[j], grouped so each scale multiplies once per 8 values.
template <class T>
__device__ __forceinline__ float seg_dot(const seg::Seg& s, const float (&xr)[32]) {
    float acc = 0.0f;
#pragma unroll
    for (int grp = 0; grp < 4; ++grp) {
        float p = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) p = fmaf(s.q[8 * grp + i], xr[8 * grp + i], p);
        acc = fmaf(s.d[grp], p, acc);
        if constexpr (T::kHasMin) {
            float sx = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) sx += xr[8 * grp + i];
            acc = fmaf(-s.m[grp], sx, acc);
        }
    }
    return acc;
}

// Bytes of the block that holds a segment: quantized types say it; float types have none (a
// segment is 32 values: 128 B for F32, 64 B for F16/BF16).
template <class T>
__host__ __device__ constexpr int block_bytes() {
    if constexpr (requires { T::kBlockBytes; })
        return T::kBlockBytes;
    else if constexpr (std::is_same_v<T, seg::F32>)
        return 128;
    else
        return 64;
}

// A hint, no register and no wait: pulls the cache lines of the block holding segment g of `row`
// into L1. Issued for all of a pass's segments before the decoders' loads, it puts every line of
// the pass in flight at once whatever order the compiler gives the loads (ptxas keeps few of them
// in flight when the decoded values would cost registers), and the decoders then hit L1.
template <class T>
__device__ __forceinline__ void prefetch_segment(const uint8_t* row, int64_t g) {
    constexpr int kBytes = block_bytes<T>();
    const uint8_t* b = row + (g / T::kSegs) * kBytes;
    asm volatile("prefetch.global.L1 [%0];" ::"l"(b));
    if constexpr (requires { T::kBlockBytes; }) {
        // Whole blocks only (a float row's last segment may be partial): every byte is in the row.
        // Blocks are <= 256 B, so b, b + 128 and the last byte name all of their lines.
        static_assert(kBytes <= 256, "prefetch covers blocks of up to 256 bytes");
        if constexpr (kBytes > 128) asm volatile("prefetch.global.L1 [%0];" ::"l"(b + 128));
        asm volatile("prefetch.global.L1 [%0];" ::"l"(b + kBytes - 1));
    }
}

// One-column passes (decode): each pass covers kDotSlots segments per lane, whose R * kDotSlots weight loads
// are independent and unconditional (a slot past the row re-reads the row's last segment and its
// result is dropped), so they are all in flight before the first is used: a 2048-wide Q4_K row
// pair is one memory round trip (~0.6-1 us) per lane instead of two back to back.
inline constexpr int kDotSlots = 2;

// warp_dot's pass from segment g0 (one-column path): this pass's lines, and the next pass's where
// the row has one (rows > 2048 wide), all in flight before the decoders' loads.
template <class T, int R, int L>
__device__ __forceinline__ void prefetch_pass(const uint8_t* const (&rows)[R], int64_t g0, int64_t n_segs) {
#pragma unroll
    for (int u = 0; u < 2 * kDotSlots; ++u) {
        const int64_t g = g0 + u * L;
        if (u < kDotSlots || g < n_segs) {
#pragma unroll
            for (int r = 0; r < R; ++r) prefetch_segment<T>(rows[r], min(g, n_segs - 1));
        }
    }
}

// ---- int8 activations (one column: decode). For types with an integer segment form (kHasI8),
// the batch-1 kernels stage x as signed bytes instead of floats: each 32-value segment (in the
// type's consumption order) gets its own scale dx = amax / 127 and q = round-half-even(x * 127 /
// amax), so x is used as dx * q (q = 0 where amax is 0). A segment's dot is then
// dx * sum_g (d[g] * idot_g - m[g] * qsum_g) over its 4 groups of 8, with idot_g = sum q_w q_x from
// two dp4a and qsum_g = sum q_x (types with a min): 8 dp4a per 32 weights instead of 32 fp32 FMAs
// plus 32 conversions, and 8 registers of weights instead of 32. Why: the fp32 kernels ran at
// 10-21% of HBM bandwidth, issue- and latency-bound (bench/results/2026-11-29-cuda-decode-pdl-h200).
// The error is that of 8-bit activations per 32 values (llama.cpp's CUDA and CPU paths and mox's
// CPU kernels quantize activations too); tests check the kernels exactly against this rule.
//
// Staged row layout (bytes; U = n_units): [q: U * 256][dx: U * 8 floats][qsum: U * 8 int4, with
// a min]. Unit u's q holds 16-byte chunk c (values 16c..16c+15) of its segment s at
// 256 u + 128 c + 16 s: the 8 lanes reading one unit's chunk read 128 consecutive bytes.
template <class T>
inline constexpr bool kHasI8 = requires(const uint8_t* r, int64_t g, seg::SegI& s) {
    T::load_i8(r, g, s);
};

template <class T>
__host__ __device__ inline int64_t i8_row_bytes(int64_t n_segs) {
    return n_units(n_segs) * (256 + 32 + (T::kHasMin ? 128 : 0));
}

// Each group of 8 consumption-order values is 8 consecutive elements (so a thread loads them with
// one address computation): true of every type with load_i8.
template <class T>
__host__ __device__ constexpr bool groups_contiguous() {
    for (int sb = 0; sb < T::kSegs; ++sb)
        for (int j = 0; j < 32; ++j)
            if (T::elem_of(sb, j) != T::elem_of(sb, j & ~7) + (j & 7)) return false;
    return true;
}

inline constexpr int kI8StageBatch = 2;  // (segment, group) items a thread loads before quantizing

// n_rows rows of x (row c at x + c * x_stride) into xs, row c at xs + c * i8_row_bytes; all threads
// of the block (blockDim a multiple of 32). Four consecutive threads own one segment's 4 groups.
template <class T>
__device__ void stage_x_i8(uint8_t* xs, const float* __restrict__ x, int64_t x_stride, int n_rows,
                           int64_t n_in, int64_t n_segs) {
    static_assert(groups_contiguous<T>(), "int8 staging loads each group of 8 as consecutive elements");
    const int units = static_cast<int>(n_units(n_segs));
    const int per_row = units * 32;      // (segment, group) items
    const int total = per_row * n_rows;  // a multiple of 32: a warp is wholly in or out of the loop
    const int64_t row_bytes = i8_row_bytes<T>(n_segs);
    const int step = static_cast<int>(blockDim.x);
    for (int p0 = static_cast<int>(threadIdx.x); p0 < total; p0 += kI8StageBatch * step) {
        float v[kI8StageBatch][8];
#pragma unroll
        for (int b = 0; b < kI8StageBatch; ++b) {  // every load of the batch before any use
            const int p = p0 + b * step;
            const int c = p / per_row, it = p - c * per_row, g = it >> 2, grp = it & 3;
            int64_t e0 = -1;
            if (p < total && g < n_segs) e0 = segment_elem<T>(g, 8 * grp);
#pragma unroll
            for (int i = 0; i < 8; ++i)
                v[b][i] = e0 >= 0 && e0 + i < n_in ? __ldg(x + c * x_stride + e0 + i) : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < kI8StageBatch; ++b) {
            const int p = p0 + b * step;
            if (p >= total) break;  // uniform across the warp
            const int c = p / per_row, it = p - c * per_row, g = it >> 2, grp = it & 3;
            float amax = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[b][i]));
            amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
            amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
            const float inv = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
            uint32_t w[2] = {0u, 0u};
            int qsum = 0;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int q = __float2int_rn(__fmul_rn(v[b][i], inv));
                qsum += q;
                w[i >> 2] |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * (i & 3));
            }
            uint8_t* row = xs + c * row_bytes;
            *reinterpret_cast<uint2*>(row + (g >> 3) * 256 + (grp >> 1) * 128 + (g & 7) * 16 +
                                      (grp & 1) * 8) = make_uint2(w[0], w[1]);
            if (grp == 0) reinterpret_cast<float*>(row + units * 256)[g] = __fdiv_rn(amax, 127.0f);
            if constexpr (T::kHasMin) reinterpret_cast<int*>(row + units * 288)[4 * g + grp] = qsum;
        }
    }
}

// One staged segment of x, in registers.
struct XSegI {
    uint32_t q[8];
    float dx;
    int qsum[4];
};

template <class T>
__device__ __forceinline__ void load_xi(const uint8_t* row, int64_t units, int64_t g, XSegI& x) {
    const uint8_t* q = row + (g >> 3) * 256 + (g & 7) * 16;
    const uint4 lo = *reinterpret_cast<const uint4*>(q), hi = *reinterpret_cast<const uint4*>(q + 128);
    x.q[0] = lo.x, x.q[1] = lo.y, x.q[2] = lo.z, x.q[3] = lo.w;
    x.q[4] = hi.x, x.q[5] = hi.y, x.q[6] = hi.z, x.q[7] = hi.w;
    x.dx = reinterpret_cast<const float*>(row + units * 256)[g];
    if constexpr (T::kHasMin) {
        const int4 t = reinterpret_cast<const int4*>(row + units * 288)[g];
        x.qsum[0] = t.x, x.qsum[1] = t.y, x.qsum[2] = t.z, x.qsum[3] = t.w;
    }
}

template <class T>
__device__ __forceinline__ float seg_dot_i8(const seg::SegI& s, const XSegI& x) {
    constexpr int G = T::kI8Groups, W = 8 / G, P = 4 / G;  // scale groups, their words and groups of 8
    float acc = 0.0f;
#pragma unroll
    for (int gi = 0; gi < G; ++gi) {
        int i = 0, qs = 0;
#pragma unroll
        for (int w = 0; w < W; ++w)
            i = __dp4a(static_cast<int>(s.q[gi * W + w]), static_cast<int>(x.q[gi * W + w]), i);
        acc = fmaf(s.d[gi * P], static_cast<float>(i), acc);
        if constexpr (T::kHasMin) {
#pragma unroll
            for (int p = 0; p < P; ++p) qs += x.qsum[gi * P + p];
            acc = fmaf(-s.m[gi * P], static_cast<float>(qs), acc);
        }
    }
    return acc * x.dx;
}

// One-column passes (decode) over x staged as floats (stage_x) or, I8, as 8-bit segments
// (stage_x_i8; U units): acc[r][0] += this lane's share of dot(row r, x), the same lane layout, slots
// and prefetch for both.
template <class T, int R, int L, bool I8>
__device__ __forceinline__ void one_column_passes(const uint8_t* const (&rows)[R], const void* xs,
                                                  int64_t n_in, int64_t n_segs, const float* tbl,
                                                  float (&acc)[R][1]) {
    const int lane = threadIdx.x & (L - 1);
#pragma unroll 1
    for (int64_t g0 = lane; g0 < n_segs; g0 += L * kDotSlots) {
        prefetch_pass<T, R, L>(rows, g0, n_segs);
#pragma unroll
        for (int u = 0; u < kDotSlots; ++u) {
            const int64_t g = g0 + u * L;
            const bool valid = g < n_segs;
            const int64_t gc = valid ? g : n_segs - 1;
            if constexpr (I8) {
                XSegI xr;
                load_xi<T>(static_cast<const uint8_t*>(xs), n_units(n_segs), gc, xr);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    seg::SegI sg;
                    T::load_i8(rows[r], gc, sg);
                    const float d = seg_dot_i8<T>(sg, xr);
                    acc[r][0] += valid ? d : 0.0f;
                }
            } else {
                float xr[32];
                load_x(static_cast<const float*>(xs), gc, xr);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    seg::Seg sg;
                    T::load(rows[r], gc, n_in, sg, tbl);
                    const float d = seg_dot<T>(sg, xr);
                    acc[r][0] += valid ? d : 0.0f;
                }
            }
        }
    }
}

// A group of L lanes (a warp, or half of one for short rows): acc[r][c] += this lane's share of
// dot(row r, activation column c), for R rows and NC staged columns (column c at xs + c * xs_stride).
// Reduce across the L lanes afterwards (warp_sum<L>).
template <class T, int R, int NC, int L = kWarp>
__device__ __forceinline__ void warp_dot(const uint8_t* const (&rows)[R], const float* xs, int64_t xs_stride,
                                         int64_t n_in, int64_t n_segs, const float* tbl,
                                         float (&acc)[R][NC]) {
    if constexpr (NC == 1) {
        one_column_passes<T, R, L, false>(rows, xs, n_in, n_segs, tbl, acc);
    } else {
        const int lane = threadIdx.x & (L - 1);
#pragma unroll 1
        for (int64_t g = lane; g < n_segs; g += L) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                seg::Seg s;
                T::load(rows[r], g, n_in, s, tbl);
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    float xr[32];
                    load_x(xs + c * xs_stride, g, xr);
                    acc[r][c] += seg_dot<T>(s, xr);
                }
            }
        }
    }
}

// warp_dot's one-column pass over int8-staged x (row at xs).
template <class T, int R, int L = kWarp>
__device__ __forceinline__ void warp_dot_i8(const uint8_t* const (&rows)[R], const uint8_t* xs,
                                            int64_t n_segs, float (&acc)[R][1]) {
    one_column_passes<T, R, L, true>(rows, xs, 0, n_segs, nullptr, acc);
}

// Sum over each aligned group of L lanes; every lane of the warp must call it.
template <int L = kWarp>
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}

// One warp's share of kRows float-weight rows (n_in a multiple of 32) against x: lane l takes
// segments l, l + 32, ... (one per pass: x and two weight segments are 96 registers) and adds its
// share to acc[r] (warp_sum afterwards). The next pass's weight lines are prefetched into L1 first,
// so a 2048-wide row's two passes overlap. x: 16-byte aligned, in global memory read through the
// read-only cache (XShared false: segment g at x + 32 g), or in shared memory with segment g at
// x + kShortSharedStride g (4 floats of padding: the lanes' float4 reads, one segment apart, fall
// on different banks).
inline constexpr int kShortSharedStride = 36;

template <class T, bool XShared>
__device__ __forceinline__ void short_rows_dot(const uint8_t* const (&rows)[kRows], const float* x,
                                               int64_t n_in, int lane, float (&acc)[kRows]) {
    const int64_t n_segs = n_in / 32;
#pragma unroll 1
    for (int64_t g = lane; g < n_segs; g += kWarp) {
        if (g + kWarp < n_segs) {
#pragma unroll
            for (int r = 0; r < kRows; ++r) prefetch_segment<T>(rows[r], g + kWarp);
        }
        float xr[32];
        const float4* xp = XShared ? reinterpret_cast<const float4*>(x + g * kShortSharedStride)
                                   : reinterpret_cast<const float4*>(x) + g * 8;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float4 v = XShared ? xp[k] : __ldg(xp + k);
            xr[4 * k] = v.x, xr[4 * k + 1] = v.y, xr[4 * k + 2] = v.z, xr[4 * k + 3] = v.w;
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            seg::Seg sg;
            T::load(rows[r], g, n_in, sg, nullptr);
            acc[r] += seg_dot<T>(sg, xr);
        }
    }
}

// Calls fn(T{}) with the segment decoder of `type`; false when the type has no CUDA kernel.
template <class Fn>
bool dispatch_type(quant::TypeId type, Fn&& fn) {
    using quant::TypeId;
    switch (type) {
        case TypeId::f32:
            fn(seg::F32{});
            return true;
        case TypeId::f16:
            fn(seg::F16{});
            return true;
        case TypeId::bf16:
            fn(seg::BF16{});
            return true;
        case TypeId::q4_0:
            fn(seg::Q4_0{});
            return true;
        case TypeId::q8_0:
            fn(seg::Q8_0{});
            return true;
        case TypeId::iq4_nl:
            fn(seg::IQ4_NL{});
            return true;
        case TypeId::mxfp4:
            fn(seg::MXFP4{});
            return true;
        case TypeId::q2_k:
            fn(seg::Q2_K{});
            return true;
        case TypeId::q3_k:
            fn(seg::Q3_K{});
            return true;
        case TypeId::q4_k:
            fn(seg::Q4_K{});
            return true;
        case TypeId::q5_k:
            fn(seg::Q5_K{});
            return true;
        case TypeId::q6_k:
            fn(seg::Q6_K{});
            return true;
        case TypeId::iq4_xs:
            fn(seg::IQ4_XS{});
            return true;
        case TypeId::q4_1:
            fn(seg::Q4_1{});
            return true;
        case TypeId::q5_0:
            fn(seg::Q5_0{});
            return true;
        case TypeId::q5_1:
            fn(seg::Q5_1{});
            return true;
        case TypeId::iq2_xxs:
            fn(seg::IQ2_XXS{});
            return true;
        case TypeId::iq2_xs:
            fn(seg::IQ2_XS{});
            return true;
        case TypeId::iq2_s:
            fn(seg::IQ2_S{});
            return true;
        case TypeId::iq3_xxs:
            fn(seg::IQ3_XXS{});
            return true;
        case TypeId::iq3_s:
            fn(seg::IQ3_S{});
            return true;
        case TypeId::iq1_s:
            fn(seg::IQ1_S{});
            return true;
        case TypeId::iq1_m:
            fn(seg::IQ1_M{});
            return true;
        default:
            return false;
    }
}

// Properties of the current device that launch sizing needs, read once.
struct LaunchLimits {
    int sm_count = 0;
    int max_smem_optin = 0;  // bytes of dynamic shared memory a block may opt in to
};
const LaunchLimits& launch_limits();

// Raises the kernel's dynamic shared-memory limit when `bytes` exceeds the default 48 KiB, and fails
// with a clear message past what the device allows.
void prepare_smem(const void* kernel, size_t bytes, const char* what);

// Blocks to launch: enough for `work_blocks`, capped at what fits on the device at once (the kernels
// loop over the rest, so each block stages its activations once).
int grid_blocks(const void* kernel, size_t smem_bytes, int64_t work_blocks);

}  // namespace mox::cuda
