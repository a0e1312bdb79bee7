// Valid blocks of any weight type filled with random values, for benchmarks and calibration
// (`mox calibrate` times kernels on them) and for tests. Kernel speed does not depend on the values,
// but their validity matters: a random f16 scale can be a NaN or a subnormal, which would make the
// CPU kernels take slow paths and the results meaningless.
#pragma once

#include "quant/types.h"

#include <cstdint>
#include <vector>

namespace mox::quant {

// The grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), which have no reference
// quantizer: random bytes, so that every grid index, sign pattern, sub-block scale and delta bit
// occurs, with each block's f16 super-block scale d overwritten by a random finite value,
// |d| uniform in [d_max / 4, d_max), either sign. d is an f16 at byte 0, except IQ1_M, which spreads
// it over the top nibbles of its four u16 scale words at bytes 48..55 (word w holds bits 4w..4w+3),
// spec §4.2. Throws mox::Error for any other type.
std::vector<uint8_t> random_grid_blocks(TypeId type, int64_t n_blocks, uint32_t seed, float d_max);

// n_blocks blocks of any type with a dequantizer: the reference quantizer applied to N(0, 1) values
// where the type has one, random_grid_blocks (d_max 1/32, values of about that size) otherwise.
// For plain types (F32, F16, BF16) a "block" is one element.
std::vector<uint8_t> random_valid_blocks(TypeId type, int64_t n_blocks, uint32_t seed);

}  // namespace mox::quant
