// Dot-product kernels between a weight row in its block format and activation rows, the inner loop
// of every matvec/matmul on the CPU. Each weight type has a scalar kernel (dequantize the
// row, fp32 dot with fp32 activations: the reference) and SIMD kernels per instruction set, which
// read activations quantized to the type's `act` format (Q8_0, Q8_1, Q8_K; F32 for float weights).
// The op layer picks one kernel per call: the best the CPU supports, capped by `--isa`.
#pragma once

#include "quant/types.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace mox::quant {

// Instruction-set tiers, ordered: a CPU that runs one tier runs every lower one.
//   avx2:   AVX2 + FMA + F16C (Haswell, Zen 1 and later)
//   avx512: AVX-512 F/BW/DQ/VL + VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later); Skylake-X
//           class CPUs without VNNI run the avx2 tier.
enum class Isa : uint8_t { scalar = 0, avx2 = 1, avx512 = 2 };

std::string_view isa_name(Isa isa);
std::optional<Isa> isa_from_name(std::string_view name);
// The highest tier this CPU (and OS: XSAVE-enabled register state) supports.
Isa host_isa();

// Up to this many activation rows share one pass over a weight row.
inline constexpr int kMaxDotCols = 8;

// out[j] = dot(weight row w, activation row (act + j * act_stride)) for j < n_cols, n elements per
// row (a multiple of the weight type's block size). n_cols in [1, kMaxDotCols].
using DotFn = void (*)(int64_t n, const void* w, const void* act, size_t act_stride, int n_cols, float* out);

struct DotKernel {
    TypeId weight;
    TypeId act;  // activation format the kernel reads
    Isa isa;
    DotFn dot;
};

// The fastest kernel for `weight` at a tier <= max_isa. Every type with a dequantizer has at least the
// scalar one; throws for types that cannot be a weight (integers).
const DotKernel& dot_kernel(TypeId weight, Isa max_isa);

// Every registered kernel (scalar ones included), for tests and `mox devices`-style reports.
std::vector<DotKernel> all_dot_kernels();

// Converts n fp32 activations (a multiple of the act type's block size) into the act format. For F32
// this is a copy. Uses the reference quantizers, so results do not depend on the ISA.
void quantize_activations(TypeId act, const float* x, void* dst, int64_t n);

// Bytes one activation row of n elements takes in `act` format.
size_t activation_row_bytes(TypeId act, int64_t n);

}  // namespace mox::quant
