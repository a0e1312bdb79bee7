// Scalar reference dequantization of the grid-based i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S, IQ1_M), bit-exact with ggml (shared/spec/gguf-and-quants.md §4).
#pragma once

#include <cstdint>

namespace mox::quant::ref {

}  // namespace mox::quant::ref
