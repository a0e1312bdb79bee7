// Plain float formats: F32 (copy), F16, BF16, F64. Element i is stored at byte offset i * size.
#include "quant/ref_common.h"
#include "quant/reference.h"

#include <cstring>

namespace mox::quant::ref {

void dequantize_f32(const void* src, float* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_f32(const float* src, void* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_f16(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(p + 2 * i);
}

void quantize_f16(const float* src, void* dst, int64_t n) {
    auto* p = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) store_f16(p + 2 * i, src[i]);
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(p + 2 * i));
}

void quantize_bf16(const float* src, void* dst, int64_t n) {
    auto* p = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) store_u16(p + 2 * i, fp32_to_bf16(src[i]));
}

void dequantize_f64(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, p + 8 * i, sizeof v);
        dst[i] = static_cast<float>(v);  // round to nearest even; out of range -> inf
    }
}

void quantize_f64(const float* src, void* dst, int64_t n) {
    auto* p = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
        const double v = src[i];  // exact
        std::memcpy(p + 8 * i, &v, sizeof v);
    }
}

}  // namespace mox::quant::ref
