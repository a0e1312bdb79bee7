// Scalar reference conversions for the float, legacy, K-quant, IQ4 and MXFP4 formats. Bit-exact with
// ggml's dequantize_row_* / quantize_row_*_ref (shared/spec/gguf-and-quants.md §3, §5), except that IQ4_NL
// quantizes as llama-quantize does (quantize_iq4_nl); tests/quant/quant_oracle_test.cpp holds every
// quantizer to llama.cpp's bytes.
//
// Every function has the registry's signatures (quant/types.h): n is the element count, a multiple of the
// type's block size; `src`/`dst` point to packed blocks with no alignment requirement.
//
// Floating-point evaluation order matters for bit-exactness (spec §3): mox_quant is compiled with
// -ffp-contract=off (CMakeLists.txt) so that no a*b+c is fused into an FMA on hosts that have one.
#pragma once

#include <cstdint>

namespace mox::quant::ref {

// Plain floats (ref_float.cpp). F32 "quantize" is a copy; F64 narrows to the nearest fp32.
void dequantize_f32(const void* src, float* dst, int64_t n);
void quantize_f32(const float* src, void* dst, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);
void dequantize_f64(const void* src, float* dst, int64_t n);
void quantize_f64(const float* src, void* dst, int64_t n);

// Legacy 32-element blocks (ref_legacy.cpp).
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
void dequantize_q8_1(const void* src, float* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);

// K-quants, 256-element super-blocks (ref_kquants.cpp).
void dequantize_q2_k(const void* src, float* dst, int64_t n);
void quantize_q2_k(const float* src, void* dst, int64_t n);
void dequantize_q3_k(const void* src, float* dst, int64_t n);
void quantize_q3_k(const float* src, void* dst, int64_t n);
void dequantize_q4_k(const void* src, float* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);
void dequantize_q5_k(const void* src, float* dst, int64_t n);
void quantize_q5_k(const float* src, void* dst, int64_t n);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
void quantize_q6_k(const float* src, void* dst, int64_t n);
void dequantize_q8_k(const void* src, float* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);

// Non-linear 4-bit formats (ref_nonlinear.cpp).
void dequantize_iq4_nl(const void* src, float* dst, int64_t n);
void quantize_iq4_nl(const float* src, void* dst, int64_t n);
void dequantize_iq4_xs(const void* src, float* dst, int64_t n);
void quantize_iq4_xs(const float* src, void* dst, int64_t n);
void dequantize_mxfp4(const void* src, float* dst, int64_t n);
void quantize_mxfp4(const float* src, void* dst, int64_t n);

}  // namespace mox::quant::ref
