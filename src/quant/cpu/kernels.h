// Internal: the tables each instruction-set file contributes to the dot-kernel registry.
//
// The *_avx2.cpp / *_avx512.cpp files are compiled with their ISA's -m flags (CMakeLists.txt). To keep
// those instructions from leaking into code that runs on any CPU, such files define everything in an
// anonymous namespace, include only C headers, <immintrin.h> and this file, and never instantiate
// inline functions or templates from shared headers (the linker may keep their ISA-flagged copy).
#pragma once

#include "quant/dot.h"

#include <cstddef>

namespace mox::quant::cpu {

struct KernelTable {
    const DotKernel* kernels;
    size_t count;
};

// Legacy 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), IQ4_NL and MXFP4.
KernelTable legacy_kernels_avx2();
KernelTable legacy_kernels_avx512();
// K-quants (Q2_K..Q6_K) and IQ4_XS.
KernelTable kquant_kernels_avx2();
KernelTable kquant_kernels_avx512();
// Grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M).
KernelTable iq_kernels_avx2();
KernelTable iq_kernels_avx512();
// Floats (F32, F16, BF16) against fp32 activations.
KernelTable float_kernels_avx2();
KernelTable float_kernels_avx512();

}  // namespace mox::quant::cpu
