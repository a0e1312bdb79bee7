// Portable, bit-exact conversions between fp32 and the small float formats GGUF stores:
//  - IEEE binary16 ("fp16", GGML_TYPE_F16 and every block's `d`/`dmin`/`m` field),
//  - bfloat16 (GGML_TYPE_BF16),
//  - E8M0 (a bare power-of-two exponent; MXFP4's per-block scale).
// Pure integer bit manipulation, no intrinsics, so results do not depend on the host CPU or on the
// floating-point environment (shared/spec/gguf-and-quants.md §3.1, §3.5).
#pragma once

#include <bit>
#include <cstdint>

namespace mox {

// fp16 -> fp32. Exact for every input: zeros, subnormals, normals, infinities. A NaN keeps its sign and
// payload (shifted into the top of the fp32 mantissa), the same bits numpy's float16 -> float32 gives.
constexpr float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));        // inf / NaN
    if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));  // 127-15 = 112
    if (mant == 0) return std::bit_cast<float>(sign);                                       // +-0
    // Subnormal: value = mant * 2^-24. Normalise: shift the leading 1 up to bit 10, adjusting the exponent.
    uint32_t e = 113;  // exponent field of 2^-14, the smallest normal fp16
    while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --e;
    }
    return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3FFu) << 13));
}

// fp32 -> fp16, round to nearest, ties to even (IEEE default; what ggml, F16C and numpy do). Values that
// round past 65504 become +-inf; values below half the smallest subnormal become +-0. Any NaN becomes
// the quiet NaN 0x7E00 with the input's sign, as ggml's portable converter does.
constexpr uint16_t fp32_to_fp16(float f) {
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
    const uint32_t abs = bits & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) return sign | 0x7E00u;     // NaN
    if (abs >= 0x477FF000u) return sign | 0x7C00u;    // >= 65520 (half-way past 65504) and inf: overflow
    if (abs >= 0x38800000u) {                         // >= 2^-14: a normal fp16
        const uint32_t rebased = abs - (112u << 23);  // fp32 exponent bias 127 -> fp16 bias 15
        // Drop 13 mantissa bits rounding half to even; a carry out of the mantissa bumps the exponent,
        // which is exactly the right result (and cannot reach inf: that case was handled above).
        const uint32_t rounded = rebased + 0xFFFu + ((rebased >> 13) & 1u);
        return sign | static_cast<uint16_t>(rounded >> 13);
    }
    // Subnormal fp16 (or zero): the result is round(value / 2^-24) as a plain integer mantissa.
    // value = m * 2^(e-150) with the implicit bit, so value / 2^-24 = m >> (126 - e).
    const uint32_t e = abs >> 23;
    const uint32_t shift = 126u - e;  // >= 14 here
    if (shift > 24) return sign;      // below 2^-25 (or an fp32 subnormal): rounds to 0
    const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into 0x400 = smallest normal, correctly
    return sign | static_cast<uint16_t>(q);
}

// bf16 -> fp32: bf16 is the top half of an fp32, so this is exact for every input, NaN payloads included.
constexpr float bf16_to_fp32(uint16_t b) {
    return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// fp32 -> bf16 as ggml (and gguf-py) do it: round to nearest, ties to even, on the raw bits (so overflow
// correctly gives inf); a NaN is truncated and forced quiet (bf16 bit 6) rather than rounded, so it can
// never turn into an infinity.
constexpr uint16_t fp32_to_bf16(float f) {
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
    return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// E8M0 -> fp32: 2^(e-127). e = 0 gives the fp32 subnormal 2^-127; e = 255 gives +inf (the OCP spec
// calls it NaN; ggml builds the float from bits and gets inf, and so do we).
constexpr float e8m0_to_fp32(uint8_t e) {
    if (e == 0) return std::bit_cast<float>(0x00400000u);
    return std::bit_cast<float>(static_cast<uint32_t>(e) << 23);
}

// E8M0 -> fp32 halved: 2^(e-128). MXFP4 uses this because its value table (kvalues_mxfp4) holds the E2M1
// values doubled, so table * half-scale = E2M1 * 2^(e-127). e < 2 gives the subnormals 2^-128 and
// 2^-127; e = 255 gives 2^127 (no NaN case, as in ggml).
constexpr float e8m0_to_fp32_half(uint8_t e) {
    if (e < 2) return std::bit_cast<float>(0x00200000u << e);
    return std::bit_cast<float>(static_cast<uint32_t>(e - 1) << 23);
}

}  // namespace mox
