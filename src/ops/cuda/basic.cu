#include "ops/cuda_basic.h"
#include "ops/cuda/kv_format.cuh"
#include "quant/cuda/matvec.cuh"

#include <algorithm>

namespace mox::cuda {

namespace {

inline constexpr int kNormThreads = 256;

// Block-wide sum; every thread gets the total. `red` holds one float per warp.
__device__ float block_sum(float v, float* red) {
    v = warp_sum(v);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    __syncthreads();  // red may still be read by a previous call
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < static_cast<int>(blockDim.x / kWarp); ++i) t += red[i];
    return t;
}

// One thread per 32-element segment: decode it and scatter the values to their element positions.
template <class T>
__global__ void embed_kernel(const uint8_t* __restrict__ table, size_t row_bytes, int64_t n_in,
                             const int32_t* __restrict__ ids, float* __restrict__ out) {
    __shared__ float tbl[16];
    stage_table<T>(tbl);
    __syncthreads();
    const int64_t t = blockIdx.y;
    const uint8_t* row = table + static_cast<size_t>(ids[t]) * row_bytes;
    const int64_t n_segs = n_segments<T>(n_in);
    for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < n_segs;
         g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        seg::Seg s;
        T::load(row, g, n_in, s, tbl);
        const int64_t base = (g / T::kSegs) * T::kBlockElems;
        const int sb = static_cast<int>(g % T::kSegs);
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            const int64_t e = base + T::elem_of(sb, j);
            float v = __fmul_rn(s.d[j / 8], s.q[j]);  // no fma: the reference rounds the product first
            if constexpr (T::kHasMin) v -= s.m[j / 8];
            if (e < n_in) out[t * n_in + e] = v;
        }
    }
}

// Rows up to kNormThreads * kNormPer wide stay in registers between the sum and the scaling, and
// every load of a row (x, add, w) is issued before the first is used: one L2 round trip instead of
// one per strided loop trip (8 dependent trips for a 2048-wide row took ~6.7 us of a ~2 us kernel).
inline constexpr int kNormPer = 16;

// kLayer: LayerNorm, (x - mean) / sqrt(var + eps) * w + b, instead of RMSNorm.
template <bool kLayer>
__global__ void __launch_bounds__(kNormThreads)
    add_rms_norm_kernel(float* __restrict__ x, const float* __restrict__ add, const float* __restrict__ add2,
                        const float* __restrict__ w, const float* __restrict__ b, int64_t d, float eps,
                        float* __restrict__ out) {
    __shared__ float red[kNormThreads / kWarp];
    const int tid = static_cast<int>(threadIdx.x);
    const bool in_registers = d <= static_cast<int64_t>(kNormThreads) * kNormPer;
    float wr[kNormPer];
    if (in_registers) {
#pragma unroll
        for (int k = 0; k < kNormPer; ++k) {
            const int64_t i = tid + static_cast<int64_t>(k) * kNormThreads;
            wr[k] = i < d ? w[i] : 0.0f;
        }
    }
    float* xr = x + blockIdx.x * d;
    const float* ar = add ? add + blockIdx.x * d : nullptr;
    const float* ar2 = add2 ? add2 + blockIdx.x * d : nullptr;  // only with add (the launcher checks)
    float* o = out + blockIdx.x * d;
    if (in_registers) {
        float v[kNormPer];
#pragma unroll
        for (int k = 0; k < kNormPer; ++k) {
            const int64_t i = tid + static_cast<int64_t>(k) * kNormThreads;
            v[k] = i < d ? xr[i] : 0.0f;
            if (ar && i < d) v[k] += ar[i];
            if (ar2 && i < d) v[k] += ar2[i];
        }
        float mean = 0.0f;
        if constexpr (kLayer) {
            float sum = 0.0f;
#pragma unroll
            for (int k = 0; k < kNormPer; ++k) sum += v[k];
            mean = block_sum(sum, red) / static_cast<float>(d);
        }
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < kNormPer; ++k) {
            const int64_t i = tid + static_cast<int64_t>(k) * kNormThreads;
            if (ar && i < d) xr[i] = v[k];
            if constexpr (kLayer) v[k] = i < d ? v[k] - mean : 0.0f;
            ss += v[k] * v[k];
        }
        const float scale = rsqrtf(block_sum(ss, red) / static_cast<float>(d) + eps);
#pragma unroll
        for (int k = 0; k < kNormPer; ++k) {
            const int64_t i = tid + static_cast<int64_t>(k) * kNormThreads;
            if constexpr (kLayer) {
                if (i < d) o[i] = v[k] * scale * wr[k] + b[i];
            } else {
                if (i < d) o[i] = v[k] * scale * wr[k];
            }
        }
        return;
    }
    float sum = 0.0f;
    for (int64_t i = tid; i < d; i += blockDim.x) {
        float v = xr[i];
        if (ar) {
            v += ar[i];
            if (ar2) v += ar2[i];
            xr[i] = v;
        }
        sum += v;
    }
    const float mean = kLayer ? block_sum(sum, red) / static_cast<float>(d) : 0.0f;
    float ss = 0.0f;
    for (int64_t i = tid; i < d; i += blockDim.x) ss += (xr[i] - mean) * (xr[i] - mean);
    const float scale = rsqrtf(block_sum(ss, red) / static_cast<float>(d) + eps);
    for (int64_t i = tid; i < d; i += blockDim.x) o[i] = (xr[i] - mean) * scale * w[i] + (kLayer ? b[i] : 0.0f);
}

// y[r, :] += bias for n rows of width values.
__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t width,
                                int64_t count) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] += bias[i % width];
}

// Decode's MoE input in one launch (add_rms_norm_matvec): every block computes add_rms_norm_kernel's
// in-register path for the row (the same threads, loads and sums: the same u bit for bit, x not
// written), block 0 stores it, and warp 0 then takes kRows rows of W from the copy in shared memory
// as matvec_short_kernel takes them from global memory (short_rows_dot: the same order). Why: the
// norm was a launch of its own, one block on one SM (3-5 us in ncu, 81 a step), before the router's
// 5.7 us; here its work is ~1 us inside the router's launch, and warp 0's first weight lines are
// already on their way.
inline constexpr int64_t kNormMatvecMaxIn = kNormThreads * kNormPer;

template <class T>
__global__ void __launch_bounds__(kNormThreads)
    add_rms_norm_matvec_kernel(const float* __restrict__ x, const float* __restrict__ add,
                               const float* __restrict__ norm_w, int64_t d, float eps,
                               float* __restrict__ out, const uint8_t* __restrict__ w, size_t row_bytes,
                               int64_t n_out, float* __restrict__ y) {
    __shared__ float red[kNormThreads / kWarp];
    __shared__ __align__(16) float us[kNormMatvecMaxIn / 32 * kShortSharedStride];
    const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarp;
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows;
    const uint8_t* rows[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) rows[r] = w + static_cast<size_t>(min(r0 + r, n_out - 1)) * row_bytes;
    float wr[kNormPer];
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) {
        const int64_t i = tid + static_cast<int64_t>(k) * kNormThreads;
        wr[k] = i < d ? norm_w[i] : 0.0f;
    }
    if (tid < kWarp) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) prefetch_segment<T>(rows[r], lane);
    }
    float v[kNormPer];
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) {
        const int64_t i = tid + static_cast<int64_t>(k) * kNormThreads;
        v[k] = i < d ? x[i] : 0.0f;
        if (i < d) v[k] += add[i];
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) ss += v[k] * v[k];
    const float scale = rsqrtf(block_sum(ss, red) / static_cast<float>(d) + eps);
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) {
        const int64_t i = tid + static_cast<int64_t>(k) * kNormThreads;
        if (i < d) {
            const float o = v[k] * scale * wr[k];
            us[i / 32 * kShortSharedStride + i % 32] = o;
            if (blockIdx.x == 0) out[i] = o;
        }
    }
    __syncthreads();
    if (tid >= kWarp) return;
    float acc[kRows] = {};
    short_rows_dot<T, true>(rows, us, d, lane, acc);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const float sum = warp_sum(acc[r]);
        if (lane == 0 && r0 + r < n_out) y[r0 + r] = sum;
    }
}

// QkCacheStore on the device (kc null: no store).
struct CacheTarget {
    uint8_t* kc = nullptr;
    uint8_t* vc = nullptr;
    size_t k_row_bytes = 0, v_row_bytes = 0;
    int kf = 0, vf = 0;
    int64_t capacity = 0;
    const float* v = nullptr;
    int64_t v_stride = 0;
};

// One block per (token, head), q heads first, then k heads, then (storing into the cache) v heads;
// head_dim <= 1024, one element per thread.
__global__ void qk_norm_rope_kernel(const float* __restrict__ qg, const float* __restrict__ q_norm,
                                    float* __restrict__ k, const float* __restrict__ k_norm,
                                    const int32_t* __restrict__ pos0, QkPrepShape sh, float* __restrict__ q,
                                    const CacheTarget ct) {
    __shared__ float red[32];
    __shared__ float head[1024];
    const int64_t t = blockIdx.x;
    const int64_t hh = blockIdx.y;
    const int64_t hd = sh.head_dim;
    const int64_t pos = static_cast<int64_t>(*pos0) + t;
    if (hh >= sh.n_head + sh.n_head_kv) {  // a v head: only copied into the cache
        const int64_t h = hh - sh.n_head - sh.n_head_kv;
        const int i = threadIdx.x;
        if (pos >= 0 && pos < ct.capacity && i < hd)
            store_elementwise(ct.vf, ct.vc + static_cast<size_t>(pos) * ct.v_row_bytes, h * hd + i,
                              ct.v[t * ct.v_stride + h * hd + i]);
        return;
    }
    const bool is_q = hh < sh.n_head;
    const float* src;
    float* dst;
    const float* nw;
    if (is_q) {
        src = qg + (t * sh.n_head + hh) * sh.q_head_stride;
        dst = q + (t * sh.n_head + hh) * hd;
        nw = q_norm;
    } else {
        const int64_t h = hh - sh.n_head;
        src = k + (t * sh.n_head_kv + h) * hd;
        dst = k + (t * sh.n_head_kv + h) * hd;
        nw = k_norm;
    }
    const int i = threadIdx.x;
    const float v = i < hd ? src[i] : 0.0f;
    if (sh.qk_norm) {
        const float scale = rsqrtf(block_sum(v * v, red) / static_cast<float>(hd) + sh.eps);
        if (i < hd) head[i] = v * scale * nw[i];
    } else if (i < hd) {
        head[i] = v;
    }
    __syncthreads();
    const int64_t half = sh.n_rot / 2;
    float r = i < hd ? head[i] : 0.0f;
    if (i < sh.n_rot) {
        // Angles in double: at position 262143 a float angle would be off by ~0.02 rad.
        const int64_t pair = sh.rope_adjacent ? i / 2 : (i < half ? i : i - half);
        double freq = pow(static_cast<double>(sh.theta), -2.0 * static_cast<double>(pair) / static_cast<double>(sh.n_rot));
        if (sh.rope_factors) freq /= sh.rope_factors[pair];
        const double angle = static_cast<double>(*pos0 + t) * freq;
        double sd, cd;
        sincos(angle, &sd, &cd);
        const float c = static_cast<float>(cd * sh.attn_factor), s = static_cast<float>(sd * sh.attn_factor);
        if (sh.rope_adjacent)
            r = i % 2 == 0 ? head[i] * c - head[i + 1] * s : head[i - 1] * s + head[i] * c;
        else
            r = i < half ? head[i] * c - head[i + half] * s : head[i - half] * s + head[i] * c;
    }
    if (i >= hd) return;
    if (is_q || ct.kc == nullptr) {
        dst[i] = r;
    } else if (pos >= 0 && pos < ct.capacity) {
        store_elementwise(ct.kf, ct.kc + static_cast<size_t>(pos) * ct.k_row_bytes, (hh - sh.n_head) * hd + i, r);
    }
}

__global__ void __launch_bounds__(kNormThreads)
    shared_expert_add_kernel(float* __restrict__ out, const float* __restrict__ shared, const float* __restrict__ u,
                             const float* __restrict__ gate_inp, int64_t d) {
    __shared__ float red[kNormThreads / kWarp];
    const int64_t t = blockIdx.x;
    float dot = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dot += gate_inp[i] * u[t * d + i];
    const float g = 1.0f / (1.0f + expf(-block_sum(dot, red)));
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) out[t * d + i] += g * shared[t * d + i];
}

__global__ void swiglu_kernel(const float* __restrict__ g, const float* __restrict__ u, int64_t width,
                              int64_t stride, int64_t count, float* __restrict__ y) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t src = i / width * stride + i % width;
        const float a = g[src];
        y[i] = a / (1.0f + expf(-a)) * u[src];
    }
}

}  // namespace

void embed_rows(const ops::Weight& table, const int32_t* ids, int64_t n, float* out, StreamHandle stream) {
    if (n == 0) return;
    MOX_CHECK(n <= 65535, "embed_rows: {} rows in one call", n);
    const bool ok = dispatch_type(table.type, [&](auto tag) {
        using T = decltype(tag);
        const int64_t n_segs = n_segments<T>(table.n_in);
        const int threads = 128;
        const dim3 grid(static_cast<unsigned>((n_segs + threads - 1) / threads), static_cast<unsigned>(n));
        embed_kernel<T><<<grid, threads, 0, stream>>>(table.data, table.row_bytes, table.n_in, ids, out);
        MOX_CUDA_CHECK_LAUNCH("embed_kernel");
    });
    if (!ok) fail("CUDA embed_rows: no kernel for type {}", quant::traits(table.type).name);
}

void add_rms_norm(float* x, const float* add, const float* w, int64_t n, int64_t d, float eps, float* out,
                  StreamHandle stream, const float* add2) {
    if (add2 != nullptr && add == nullptr) fail("add_rms_norm: a second addend without a first");
    if (n == 0) return;
    add_rms_norm_kernel<false><<<static_cast<unsigned>(n), kNormThreads, 0, stream>>>(
        x, add, add2, w, static_cast<const float*>(nullptr), d, eps, out);
    MOX_CUDA_CHECK_LAUNCH("add_rms_norm_kernel");
}

void add_layer_norm(float* x, const float* add, const float* w, const float* b, int64_t n, int64_t d, float eps,
                    float* out, StreamHandle stream, const float* add2) {
    if (add2 != nullptr && add == nullptr) fail("add_layer_norm: a second addend without a first");
    if (n == 0) return;
    add_rms_norm_kernel<true>
        <<<static_cast<unsigned>(n), kNormThreads, 0, stream>>>(x, add, add2, w, b, d, eps, out);
    MOX_CUDA_CHECK_LAUNCH("add_layer_norm_kernel");
}

void add_bias(float* y, const float* bias, int64_t n_rows, int64_t width, StreamHandle stream) {
    const int64_t count = n_rows * width;
    if (count == 0) return;
    const int threads = 256;
    const auto blocks = static_cast<unsigned>(std::min<int64_t>((count + threads - 1) / threads, 4096));
    add_bias_kernel<<<blocks, threads, 0, stream>>>(y, bias, width, count);
    MOX_CUDA_CHECK_LAUNCH("add_bias_kernel");
}

bool add_rms_norm_matvec_supported(const ops::Weight& w) {
    const quant::TypeId t = w.type;
    const bool float_type = t == quant::TypeId::f32 || t == quant::TypeId::f16 || t == quant::TypeId::bf16;
    return float_type && w.n_in % 32 == 0 && w.n_in <= kNormMatvecMaxIn && w.n_out >= 1 && w.n_expert == 1;
}

void add_rms_norm_matvec(const float* x, const float* add, const float* norm_w, float eps, float* out,
                         const ops::Weight& w, float* y, StreamHandle stream) {
    if (!add_rms_norm_matvec_supported(w))
        fail("add_rms_norm_matvec: {} x {} {} weight (float types, a multiple of 32 up to {} inputs)",
             w.n_out, w.n_in, quant::type_name(w.type), kNormMatvecMaxIn);
    if (x == nullptr || add == nullptr || reinterpret_cast<uintptr_t>(w.data) % 16 != 0)
        fail("add_rms_norm_matvec: needs x, add and a 16-byte aligned weight");
    const auto blocks = static_cast<unsigned>((w.n_out + kRows - 1) / kRows);
    dispatch_type(w.type, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (seg::kIsFloat<T>) {
            add_rms_norm_matvec_kernel<T><<<blocks, kNormThreads, 0, stream>>>(
                x, add, norm_w, w.n_in, eps, out, w.data, w.row_bytes, w.n_out, y);
            MOX_CUDA_CHECK_LAUNCH("add_rms_norm_matvec_kernel");
        }
    });
}

bool qk_cache_store_supported(const ops::KvView& kv) {
    auto elementwise = [](quant::TypeId t) {
        return t == quant::TypeId::f32 || t == quant::TypeId::f16 || t == quant::TypeId::bf16;
    };
    return elementwise(kv.k_type) && elementwise(kv.v_type);
}

void qk_norm_rope(const float* qg, const float* q_norm, float* k, const float* k_norm, const int32_t* pos0,
                  int64_t n, const QkPrepShape& shape, float* q, StreamHandle stream, const QkCacheStore* store) {
    if (n == 0) return;
    MOX_CHECK(shape.head_dim <= 1024 && shape.n_rot <= shape.head_dim && shape.n_rot % 2 == 0 &&
                  shape.q_head_stride >= shape.head_dim,
              "qk_norm_rope: head_dim {} n_rot {} q_head_stride {}", shape.head_dim, shape.n_rot, shape.q_head_stride);
    CacheTarget ct;
    int64_t heads = shape.n_head + shape.n_head_kv;
    if (store != nullptr) {
        const ops::KvView& kv = store->kv;
        MOX_CHECK(qk_cache_store_supported(kv) && kv.row_elems == shape.n_head_kv * shape.head_dim &&
                      store->v != nullptr,
                  "qk_norm_rope cache store: {} / {} cache, rows of {} for {} x {}", quant::type_name(kv.k_type),
                  quant::type_name(kv.v_type), kv.row_elems, shape.n_head_kv, shape.head_dim);
        ct = {kv.k, kv.v, kv.k_row_bytes, kv.v_row_bytes, kv_fmt(kv.k_type), kv_fmt(kv.v_type), kv.capacity, store->v,
              store->v_stride};
        heads += shape.n_head_kv;
    }
    const int threads = static_cast<int>((shape.head_dim + kWarp - 1) / kWarp * kWarp);
    const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(heads));
    qk_norm_rope_kernel<<<grid, threads, 0, stream>>>(qg, q_norm, k, k_norm, pos0, shape, q, ct);
    MOX_CUDA_CHECK_LAUNCH("qk_norm_rope_kernel");
}

void shared_expert_add(float* out, const float* shared, const float* u, const float* gate_inp, int64_t n, int64_t d,
                       StreamHandle stream) {
    if (n == 0) return;
    shared_expert_add_kernel<<<static_cast<unsigned>(n), kNormThreads, 0, stream>>>(out, shared, u, gate_inp,
                                                                                    d);
    MOX_CUDA_CHECK_LAUNCH("shared_expert_add_kernel");
}

void swiglu(const float* g, const float* u, int64_t n_rows, int64_t width, int64_t stride, float* y,
            StreamHandle stream) {
    const int64_t count = n_rows * width;
    if (count == 0) return;
    MOX_CHECK(width > 0 && stride >= width, "swiglu: width {} stride {}", width, stride);
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((count + threads - 1) / threads, 4096);
    swiglu_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(g, u, width, stride, count, y);
    MOX_CUDA_CHECK_LAUNCH("swiglu_kernel");
}

namespace {

// argmax's key of value v at index i: the float's bits mapped to an unsigned order (negative values
// flipped), index complemented below them, so the largest key is the largest value at its lowest
// index. NaN maps to 0 (never chosen over a number: the smallest number's key, -inf's, is above
// 2^54), and -0 to +0's key, since the host's comparison finds them equal.
__device__ __forceinline__ unsigned long long argmax_key(float v, uint32_t i) {
    if (v != v) return 0ull;
    const uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
    const uint32_t ord = (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
    return (static_cast<unsigned long long>(ord) << 32) | (0xFFFFFFFFu - i);
}

inline constexpr int kArgmaxThreads = 256;

// Each block reduces a strided share of x to its largest key, then one atomicMax per block.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* __restrict__ x, int64_t n, unsigned long long* __restrict__ result) {
    __shared__ unsigned long long red[kArgmaxThreads / kWarp];
    unsigned long long best = 0ull;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kArgmaxThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kArgmaxThreads) {
        const unsigned long long k = argmax_key(x[i], static_cast<uint32_t>(i));
        best = k > best ? k : best;
    }
#pragma unroll
    for (int o = kWarp / 2; o > 0; o >>= 1) {
        const unsigned long long other = __shfl_xor_sync(0xFFFFFFFFu, best, o);
        best = other > best ? other : best;
    }
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    if (lane == 0) red[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kArgmaxThreads / kWarp; ++w) best = red[w] > best ? red[w] : best;
        atomicMax(result, best);
    }
}

}  // namespace

void argmax(const float* x, int64_t n, uint64_t* result, StreamHandle stream) {
    MOX_CHECK(n >= 0 && n <= INT64_C(0xFFFFFFFF), "argmax over {} values", n);
    static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
    MOX_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(uint64_t), stream));
    if (n == 0) return;
    // ~4 values per thread for a 248K vocabulary: one round of loads, 2 blocks per SM.
    const int64_t blocks = std::min<int64_t>((n + 4 * kArgmaxThreads - 1) / (4 * kArgmaxThreads),
                                             2 * static_cast<int64_t>(launch_limits().sm_count));
    argmax_kernel<<<static_cast<unsigned>(blocks), kArgmaxThreads, 0, stream>>>(
        x, n, reinterpret_cast<unsigned long long*>(result));
    MOX_CUDA_CHECK_LAUNCH("argmax_kernel");
}

int64_t argmax_index(uint64_t result) {
    if ((result >> 32) == 0) return -1;
    return static_cast<int64_t>(0xFFFFFFFFu - static_cast<uint32_t>(result & 0xFFFFFFFFu));
}

}  // namespace mox::cuda
