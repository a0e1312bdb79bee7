// Quantized matrix-vector products on the GPU: y = W x for 1..8 activation columns, with
// W in its GGUF block format in device memory. Plain C++ (no CUDA headers); kernels in
// quant/cuda/matvec.cu, linked only with -DMOX_CUDA=ON.
//
// Activations: for one column (decode) and weight types with an integer kernel (int8_activations),
// x is quantized to 8 bits per 32-value segment inside the kernel (rule below); otherwise x stays
// fp32 and results match the CPU reference dot product up to fp32 summation order.
#pragma once

#include "quant/cuda_stream.h"
#include "quant/types.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mox::cuda {

inline constexpr int kMaxMatvecCols = 8;

// Whether `type` has a CUDA matvec kernel: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL,
// MXFP4, Q2_K..Q6_K, IQ4_XS and the grid i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
// IQ1_M: every block type of the registry but Q8_1 and Q8_K (activation-side formats).
bool matvec_supported(quant::TypeId type);

// y[c * n_out + r] = sum_i W[r, i] * x[c * n_in + i] for r < n_out, c < n_cols (1..8).
// w: n_out rows of row_bytes (= quant::row_bytes(type, n_in)) on the device, 16-byte aligned (any
// cudaMalloc'ed base; for F32/F16/BF16 any n_in works, otherwise n_in is a multiple of the block).
// Block types of sizes that are not a multiple of 4 (17, 18, 22, 34, 66, 74, 98, 110 bytes) are
// read with aligned 4-byte loads, which may touch up to 3 bytes past the last row: keep 16 bytes of
// slack after it (cuda::upload_weight does).
// x, y: device fp32. Columns run in launches of up to 8, fewer where that many columns of a wide
// input would not fit in a block's shared memory. Asynchronous on `stream`; throws mox::Error for an
// unsupported type or a shape whose activations exceed the shared memory of a block even at one column.
void matvec(quant::TypeId type, const void* w, size_t row_bytes, int64_t n_in, int64_t n_out, const float* x,
            int n_cols, float* y, StreamHandle stream = nullptr);

// Whether one-column products with `type` weights (matvec with n_cols 1, the batch-1 MoE kernels)
// use 8-bit activations: Q4_0, Q8_0, Q4_K, Q5_K, Q6_K. The rule: x is cut
// into the type's 32-value segments (activation_segments); for each, amax = max |x|, dx = amax / 127
// and q = round-half-even(x * (127 / amax)) in fp32 (q = 0, dx = 0 when amax is 0); the kernel then
// computes W (dx q) exactly up to fp32 summation order.
bool int8_activations(quant::TypeId type);

// The element of x behind value j of segment g, at [32 g + j] (-1 past n_in): the order in which
// the kernels consume a row of `type` (quant/cuda/segments.cuh). For tests.
std::vector<int64_t> activation_segments(quant::TypeId type, int64_t n_in);

}  // namespace mox::cuda
