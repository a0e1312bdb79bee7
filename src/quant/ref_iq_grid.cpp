// Scalar reference dequantizers for the grid-based i-quants. Written from the element formulas in
// shared/spec/gguf-and-quants.md §4.2; the layout of each block is spelled out above its function.
//
// Shared shape: a 256-element super-block = 8 sub-blocks (ib) of 32 = 4 groups (l) of 8 elements (j).
// Every group takes its magnitudes from one grid entry (8 values) or two (4 values each), its signs
// from a sign byte (bit j = element j negative) and its scale from the sub-block.
//
// Bit-exactness with ggml depends on the order of the float operations, so each function forms the
// sub-block scale first, exactly as the spec writes it (e.g. d * (0.5 + s) * 0.25), and then does
// one multiply per element by the integer grid value. Signs are applied as a multiply by +-1, which
// is exact.
#include "core/error.h"
#include "quant/iq_grids.h"
#include "quant/reference_iq_grid.h"

#include "core/fp16.h"

#include <cstring>

namespace mox::quant::ref {

namespace {

constexpr int64_t kBlockElems = 256;

// Little-endian reads from unaligned bytes, independent of the host's byte order.
uint16_t load_u16(const uint8_t* p) {
    return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t load_u32(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
           (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

int64_t block_count(int64_t n, const char* type) {
    MOX_CHECK(n >= 0 && n % kBlockElems == 0, "{}: {} elements is not a whole number of blocks", type, n);
    return n / kBlockElems;
}

float sign_of(uint8_t signs, int j) {
    return (signs >> j) & 1 ? -1.0f : 1.0f;
}

// One group of 8 from an 8-magnitude grid entry: y[j] = scale * grid[j] * sign_j.
void emit_group8(float* y, float scale, uint64_t entry, uint8_t signs) {
    for (int j = 0; j < 8; ++j) y[j] = scale * static_cast<float>(grid_byte(entry, j)) * sign_of(signs, j);
}

// One group of 8 from two 4-magnitude entries (elements 0-3 from lo, 4-7 from hi).
void emit_group4x2(float* y, float scale, uint32_t lo, uint32_t hi, uint8_t signs) {
    for (int j = 0; j < 4; ++j) {
        y[j] = scale * static_cast<float>(grid_byte(lo, j)) * sign_of(signs, j);
        y[j + 4] = scale * static_cast<float>(grid_byte(hi, j)) * sign_of(signs, j + 4);
    }
}

// One IQ1 group: y[j] = scale * (grid[j] + delta), grid values are int8 in {-1, 0, 1}.
void emit_group_iq1(float* y, float scale, uint64_t entry, float delta) {
    for (int j = 0; j < 8; ++j) {
        const auto g = static_cast<int8_t>(grid_byte(entry, j));
        y[j] = scale * (static_cast<float>(g) + delta);
    }
}

}  // namespace

// IQ2_XXS, 66 bytes: d f16 @0, then per sub-block ib 8 bytes @2+8ib read as two u32 words:
// word0 bytes = grid indices of groups 0-3; word1 bits 7l..7l+6 = sign index of group l, bits 28-31 = s.
void dequantize_iq2_xxs(const void* src, float* dst, int64_t n) {
    const int64_t nb = block_count(n, "IQ2_XXS");
    const auto* x = static_cast<const uint8_t*>(src);
    for (int64_t b = 0; b < nb; ++b, x += 66) {
        const float d = fp16_to_fp32(load_u16(x));
        for (int ib = 0; ib < 8; ++ib) {
            const uint8_t* q = x + 2 + 8 * ib;
            const uint32_t aux = load_u32(q + 4);
            const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; ++l) {
                const uint8_t signs = ksigns_iq2xs[(aux >> (7 * l)) & 0x7f];
                emit_group8(dst, db, iq2xxs_grid[q[l]], signs);
                dst += 8;
            }
        }
    }
}

// IQ2_XS, 74 bytes: d f16 @0, qs u16[32] @2 (bits 0-8 grid index, 9-15 sign index; group 4ib+l),
// scales[8] @66 (sub-block ib: low nibble for groups 0-1, high nibble for groups 2-3).
void dequantize_iq2_xs(const void* src, float* dst, int64_t n) {
    const int64_t nb = block_count(n, "IQ2_XS");
    const auto* x = static_cast<const uint8_t*>(src);
    for (int64_t b = 0; b < nb; ++b, x += 74) {
        const float d = fp16_to_fp32(load_u16(x));
        for (int ib = 0; ib < 8; ++ib) {
            const uint8_t sc = x[66 + ib];
            const float db[2] = {d * (0.5f + static_cast<float>(sc & 0xf)) * 0.25f,
                                 d * (0.5f + static_cast<float>(sc >> 4)) * 0.25f};
            for (int l = 0; l < 4; ++l) {
                const uint16_t q = load_u16(x + 2 + 2 * (4 * ib + l));
                emit_group8(dst, db[l / 2], iq2xs_grid[q & 0x1ff], ksigns_iq2xs[q >> 9]);
                dst += 8;
            }
        }
    }
}

// IQ2_S, 82 bytes: d f16 @0, qs[32] @2 (low 8 index bits, group 4ib+l), signs[32] @34 (one byte per
// group), qh[8] @66 (bits 2l..2l+1 of qh[ib] = index bits 8-9 of group l), scales[8] @74 (as IQ2_XS).
void dequantize_iq2_s(const void* src, float* dst, int64_t n) {
    const int64_t nb = block_count(n, "IQ2_S");
    const auto* x = static_cast<const uint8_t*>(src);
    for (int64_t b = 0; b < nb; ++b, x += 82) {
        const float d = fp16_to_fp32(load_u16(x));
        for (int ib = 0; ib < 8; ++ib) {
            const uint8_t sc = x[74 + ib];
            const float db[2] = {d * (0.5f + static_cast<float>(sc & 0xf)) * 0.25f,
                                 d * (0.5f + static_cast<float>(sc >> 4)) * 0.25f};
            const uint8_t qh = x[66 + ib];
            for (int l = 0; l < 4; ++l) {
                const int g = 4 * ib + l;
                const unsigned index = x[2 + g] | (((qh >> (2 * l)) & 3u) << 8);
                emit_group8(dst, db[l / 2], iq2s_grid[index], x[34 + g]);
                dst += 8;
            }
        }
    }
}

// IQ3_XXS, 98 bytes: d f16 @0, qs[64] @2 (grid indices; group l of sub-block ib uses qs[8ib+2l] for
// elements 0-3 and qs[8ib+2l+1] for 4-7), u32[8] @66 (bits 7l.. = sign index of group l, 28-31 = s).
void dequantize_iq3_xxs(const void* src, float* dst, int64_t n) {
    const int64_t nb = block_count(n, "IQ3_XXS");
    const auto* x = static_cast<const uint8_t*>(src);
    for (int64_t b = 0; b < nb; ++b, x += 98) {
        const float d = fp16_to_fp32(load_u16(x));
        for (int ib = 0; ib < 8; ++ib) {
            const uint8_t* q = x + 2 + 8 * ib;
            const uint32_t aux = load_u32(x + 66 + 4 * ib);
            const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; ++l) {
                const uint8_t signs = ksigns_iq2xs[(aux >> (7 * l)) & 0x7f];
                emit_group4x2(dst, db, iq3xxs_grid[q[2 * l]], iq3xxs_grid[q[2 * l + 1]], signs);
                dst += 8;
            }
        }
    }
}

// IQ3_S, 110 bytes: d f16 @0, qs[64] @2 (low 8 bits of index k=0..7 of sub-block ib at 8ib+k),
// qh[8] @66 (bit k of qh[ib] = index bit 8), signs[32] @74 (one byte per group), scales[4] @106
// (nibble ib%2 of byte ib/2). Group l uses indices 2l (elements 0-3) and 2l+1 (elements 4-7).
void dequantize_iq3_s(const void* src, float* dst, int64_t n) {
    const int64_t nb = block_count(n, "IQ3_S");
    const auto* x = static_cast<const uint8_t*>(src);
    for (int64_t b = 0; b < nb; ++b, x += 110) {
        const float d = fp16_to_fp32(load_u16(x));
        for (int ib = 0; ib < 8; ++ib) {
            const unsigned nib = (x[106 + ib / 2] >> (4 * (ib % 2))) & 0xfu;
            const float db = d * static_cast<float>(1 + 2 * nib);
            const uint8_t* q = x + 2 + 8 * ib;
            const uint8_t qh = x[66 + ib];
            for (int l = 0; l < 4; ++l) {
                const int k = 2 * l;
                const unsigned lo = q[k] | (((qh >> k) & 1u) << 8);
                const unsigned hi = q[k + 1] | (((qh >> (k + 1)) & 1u) << 8);
                emit_group4x2(dst, db, iq3s_grid[lo], iq3s_grid[hi], x[74 + 4 * ib + l]);
                dst += 8;
            }
        }
    }
}

// IQ1_S, 50 bytes: d f16 @0, qs[32] @2 (low 8 index bits, group 4ib+l), qh u16[8] @34: bits 3l..3l+2
// = index bits 8-10 of group l, bits 12-14 = s, bit 15 = delta sign. Value = d*(2s+1) * (grid + delta).
void dequantize_iq1_s(const void* src, float* dst, int64_t n) {
    const int64_t nb = block_count(n, "IQ1_S");
    const auto* x = static_cast<const uint8_t*>(src);
    for (int64_t b = 0; b < nb; ++b, x += 50) {
        const float d = fp16_to_fp32(load_u16(x));
        for (int ib = 0; ib < 8; ++ib) {
            const uint16_t qh = load_u16(x + 34 + 2 * ib);
            const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7u) + 1);
            const float delta = (qh & 0x8000u) ? -kIq1Delta : kIq1Delta;
            for (int l = 0; l < 4; ++l) {
                const unsigned index = x[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8);
                emit_group_iq1(dst, dl, iq1s_grid[index], delta);
                dst += 8;
            }
        }
    }
}

// IQ1_M, 56 bytes, no stored d: qs[32] @0 (low 8 index bits, group 4ib+l), qh[16] @32 (nibble l%2 of
// qh[2ib+l/2]: bits 0-2 = index bits 8-10, bit 3 = delta sign), scales u16[4] @48. The top nibbles of
// the four scale words are the fp16 d (word w gives bits 4w..4w+3). Word ib/2 from bit 6*(ib%2) holds
// the 3-bit scale of groups 0-1, the next 3 bits that of groups 2-3.
void dequantize_iq1_m(const void* src, float* dst, int64_t n) {
    const int64_t nb = block_count(n, "IQ1_M");
    const auto* x = static_cast<const uint8_t*>(src);
    for (int64_t b = 0; b < nb; ++b, x += 56) {
        uint16_t sc[4];
        uint16_t d_bits = 0;
        for (int w = 0; w < 4; ++w) {
            sc[w] = load_u16(x + 48 + 2 * w);
            d_bits = static_cast<uint16_t>(d_bits | ((sc[w] >> 12) << (4 * w)));
        }
        const float d = fp16_to_fp32(d_bits);
        for (int ib = 0; ib < 8; ++ib) {
            const unsigned shift = 6 * (ib % 2);
            const float dl[2] = {d * static_cast<float>(2 * ((sc[ib / 2] >> shift) & 7u) + 1),
                                 d * static_cast<float>(2 * ((sc[ib / 2] >> (shift + 3)) & 7u) + 1)};
            for (int l = 0; l < 4; ++l) {
                const unsigned nib = (x[32 + 2 * ib + l / 2] >> (4 * (l % 2))) & 0xfu;
                const unsigned index = x[4 * ib + l] | ((nib & 7u) << 8);
                const float delta = (nib & 8u) ? -kIq1Delta : kIq1Delta;
                emit_group_iq1(dst, dl[l / 2], iq1s_grid[index], delta);
                dst += 8;
            }
        }
    }
}

}  // namespace mox::quant::ref
