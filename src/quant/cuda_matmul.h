// Quantized matrix products for batches of tokens on the GPU (prefill): Y = X W^T with W
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

// Batches of at least tuning().cublas_min_tokens tokens (core/tuning.h: kCublasMinTokens unless
// MOX_CUDA_CUBLAS_MIN_TOKENS raises it) run through cuBLAS: the weight is decoded once per call into
// fp16 rows in the workspace, the activations rounded to fp16 likewise, and cuBLAS multiplies them
// with fp32 accumulation: the same operands and rounding as the tensor-core tiles, which decode each
// weight tile again for every token tile. Not for weights of more than kCublasMaxWeightElems values
// (their fp16 copy would outgrow the scratch; a vocabulary-sized head) nor precise mode.
// The memory model (models/gpu_memory.cpp) reserves for these constants.
inline constexpr int64_t kCublasMinTokens = 128;
inline constexpr int64_t kCublasMaxWeightElems = int64_t{1} << 26;  // 128 MiB of fp16
inline constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;   // cuBLAS's own scratch on Hopper

// Makes cuBLAS's handle for the current device now, so the device memory it takes is in place before
// a caller measures what the CUDA context holds (cuda::set_vram_budget, `mox calibrate`).
void matmul_init();

// Device scratch the call needs (0 if none) for these sizes; it also covers every smaller batch.
size_t matmul_workspace_bytes(quant::TypeId type, int64_t n_in, int64_t n_out, int64_t n_tokens);

// y[t * n_out + r] = sum_i W[r, i] * x[t * n_in + i] for t < n_tokens, r < n_out. w: n_out rows of
// row_bytes on the device (16 bytes of slack after the last row, as cuda::upload_weight leaves);
// x, y fp32 device. workspace: matmul_workspace_bytes(...) bytes of device scratch.
// Tolerance vs the fp32 reference: fp16 operand rounding (about 1e-3 of sum |w x| per output, ~3e-4
// relative L2). precise = true: both operands carried as two fp16 parts (x = hi + lo, likewise each
// decoded weight) and three MMAs per product, for about 1e-5 relative at 2-3x the time.
void matmul(quant::TypeId type, const void* w, size_t row_bytes, int64_t n_in, int64_t n_out, const float* x,
            int64_t n_tokens, float* y, void* workspace, StreamHandle stream = nullptr, bool precise = false);

// Tests: while `direct` is set, the prefill tiles (matmul and batched MoE) load quantized weights
// directly, as on GPUs whose shared memory does not fit the raw-staged tiles twice per SM (sm_86,
// sm_89); unset (the default), they stage them raw wherever that fits (quant/cuda/matmul.cuh).
void set_direct_tiles(bool direct);

}  // namespace mox::cuda
