// Quantized matrix products for batches of tokens on the GPU (issue 5, prefill): Y = X W^T with W
// in its GGUF block format in device memory, on the tensor cores. Plain C++; kernels in
// quant/cuda/matmul.cu, linked only with -DMOX_CUDA=ON. Decode (1..8 columns) uses cuda_matvec.h.
#pragma once

#include "quant/cuda_stream.h"
#include "quant/types.h"

#include <cstddef>
#include <cstdint>

namespace mox::cuda {

// Whether `type` has a matmul path (at least every type matvec_supported() accepts).
bool matmul_supported(quant::TypeId type);

// Device scratch the call needs (0 if none) for these sizes.
size_t matmul_workspace_bytes(quant::TypeId type, int64_t n_in, int64_t n_out, int64_t n_tokens);

// y[t * n_out + r] = sum_i W[r, i] * x[t * n_in + i] for t < n_tokens, r < n_out. w: n_out rows of
// row_bytes on the device (16 bytes of slack after the last row, as cuda::upload_weight leaves);
// x, y fp32 device. workspace: matmul_workspace_bytes(...) bytes of device scratch.
// Tolerance vs the fp32 reference: fp16 operand rounding (about 1e-3 of sum |w x| per output, ~3e-4
// relative L2). precise = true: both operands carried as two fp16 parts (x = hi + lo, likewise each
// decoded weight) and three MMAs per product, for about 1e-5 relative at 2-3x the time.
void matmul(quant::TypeId type, const void* w, size_t row_bytes, int64_t n_in, int64_t n_out, const float* x,
            int64_t n_tokens, float* y, void* workspace, StreamHandle stream = nullptr, bool precise = false);

}  // namespace mox::cuda
