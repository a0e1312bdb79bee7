// Scalar reference dequantization of the grid-based i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S, IQ1_M), bit-exact with ggml (shared/spec/gguf-and-quants.md §4).
//
// All seven use 256-element super-blocks. n is the element count and must be a multiple of 256
// (checked); src holds n/256 packed blocks (no alignment needed), dst receives n floats.
// No reference quantizers: those need an importance matrix and a search that mox does not run.
#pragma once

#include <cstdint>

namespace mox::quant::ref {

void dequantize_iq2_xxs(const void* src, float* dst, int64_t n);  // 66 bytes / 256
void dequantize_iq2_xs(const void* src, float* dst, int64_t n);   // 74 bytes / 256
void dequantize_iq2_s(const void* src, float* dst, int64_t n);    // 82 bytes / 256
void dequantize_iq3_xxs(const void* src, float* dst, int64_t n);  // 98 bytes / 256
void dequantize_iq3_s(const void* src, float* dst, int64_t n);    // 110 bytes / 256
void dequantize_iq1_s(const void* src, float* dst, int64_t n);    // 50 bytes / 256
void dequantize_iq1_m(const void* src, float* dst, int64_t n);    // 56 bytes / 256

}  // namespace mox::quant::ref
