// Small helpers shared by the scalar reference conversions (ref_*.cpp) and usable by kernels: unaligned
// little-endian field access, ggml's rounding rule, the K-quant 6-bit scale packing and the non-linear
// value tables. Facts from shared/spec/gguf-and-quants.md §3 and §5.
#pragma once

#include "core/fp16.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace mox::quant::ref {

constexpr int kQK = 32;    // elements of a legacy / IQ4_NL / MXFP4 block
constexpr int kQKK = 256;  // elements of a K-quant / IQ4_XS super-block

// Groups whose largest |x| is below this are treated as all-zero by the quantizers (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// IQ4_NL / IQ4_XS non-linear 4-bit values (sorted ascending, not symmetric).
inline constexpr int8_t kValuesIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// MXFP4 values: the E2M1 code table doubled. Index bit 3 is the sign; 0x8 is -0.
inline constexpr int8_t kValuesMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Blocks are packed with no padding, so multi-byte fields are read and written through memcpy.
inline uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, sizeof v);
    return v;  // little-endian host assumed (x86-64, aarch64, CUDA)
}
inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline float load_f32(const uint8_t* p) {
    return std::bit_cast<float>(load_u32(p));
}
inline float load_f16(const uint8_t* p) {
    return fp16_to_fp32(load_u16(p));
}

inline void store_u16(uint8_t* p, uint16_t v) {
    std::memcpy(p, &v, sizeof v);
}
inline void store_u32(uint8_t* p, uint32_t v) {
    std::memcpy(p, &v, sizeof v);
}
inline void store_f32(uint8_t* p, float v) {
    store_u32(p, std::bit_cast<uint32_t>(v));
}
inline void store_f16(uint8_t* p, float v) {
    store_u16(p, fp32_to_fp16(v));
}

// ggml's nearest_int: add 1.5 * 2^23 so the fp32 adder rounds to an integer (half to even in the default
// rounding mode), then read it from the mantissa. Valid for |x| < 2^22; beyond that (and for inf/NaN) it
// returns a garbage but deterministic integer, exactly like ggml, and every caller clamps the result.
// Not std::lround/roundf: those round half away from zero and would break bit-exactness.
inline int nearest_int(float x) {
    const float shifted = x + 12582912.0f;
    return static_cast<int>(std::bit_cast<uint32_t>(shifted) & 0x007FFFFFu) - 0x00400000;
}

// The element with the largest magnitude, with its sign (the first one wins ties); 0 for an all-zero
// group. Symmetric quantizers divide by it so that this element lands exactly on the end of the range.
inline float signed_absmax(const float* x, int n) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    return max;
}

// K-quant (Q4_K / Q5_K) 6-bit scale and min of sub-block b (0..7) from the 12 packed `scales` bytes:
//   bytes 0-3:  bits 0-5 = sc[0..3], bits 6-7 = bits 4-5 of sc[4..7]
//   bytes 4-7:  bits 0-5 = m[0..3],  bits 6-7 = bits 4-5 of m[4..7]
//   bytes 8-11: low nibble = bits 0-3 of sc[4..7], high nibble = bits 0-3 of m[4..7]
inline void get_scale_min_k4(const uint8_t* scales, int b, uint8_t* sc, uint8_t* m) {
    if (b < 4) {
        *sc = scales[b] & 63;
        *m = scales[b + 4] & 63;
    } else {
        *sc = static_cast<uint8_t>((scales[b + 4] & 0x0F) | ((scales[b - 4] >> 6) << 4));
        *m = static_cast<uint8_t>((scales[b + 4] >> 4) | ((scales[b] >> 6) << 4));
    }
}

// The inverse of get_scale_min_k4: packs eight 6-bit scales and mins (each 0..63) into 12 bytes.
inline void set_scale_min_k4(uint8_t* scales, const uint8_t sc[8], const uint8_t m[8]) {
    for (int b = 0; b < 4; ++b) {
        scales[b] = static_cast<uint8_t>((sc[b] & 63) | ((sc[b + 4] >> 4) << 6));
        scales[b + 4] = static_cast<uint8_t>((m[b] & 63) | ((m[b + 4] >> 4) << 6));
        scales[b + 8] = static_cast<uint8_t>((sc[b + 4] & 0x0F) | ((m[b + 4] & 0x0F) << 4));
    }
}

// Q3_K 6-bit scale g (0..15), still biased by +32, from the 12 packed `scales` bytes:
//   bytes 0-7:  low nibble of byte j = bits 0-3 of scale j, high nibble = bits 0-3 of scale j+8
//   bytes 8-11: byte 8+k holds bits 4-5 of scales k, k+4, k+8, k+12 in bit pairs 0-1, 2-3, 4-5, 6-7
inline uint8_t get_scale_q3k(const uint8_t* scales, int g) {
    const uint8_t low = (g < 8) ? (scales[g] & 0x0F) : (scales[g - 8] >> 4);
    const uint8_t high = (scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    return static_cast<uint8_t>(low | (high << 4));
}

// The inverse of get_scale_q3k: packs sixteen biased 6-bit scales (each 0..63) into 12 bytes.
inline void set_scales_q3k(uint8_t* scales, const uint8_t biased[16]) {
    std::memset(scales, 0, 12);
    for (int g = 0; g < 16; ++g) {
        const uint8_t low = biased[g] & 0x0F;
        if (g < 8)
            scales[g] |= low;
        else
            scales[g - 8] |= static_cast<uint8_t>(low << 4);
        scales[8 + g % 4] |= static_cast<uint8_t>(((biased[g] >> 4) & 3) << (2 * (g / 4)));
    }
}

}  // namespace mox::quant::ref
