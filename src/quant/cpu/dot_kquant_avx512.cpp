// kquant dot kernels, avx512 tier (see kernels.h for the rules of ISA-flagged files).
#include "quant/cpu/kernels.h"

namespace mox::quant::cpu {

KernelTable kquant_kernels_avx512() { return {nullptr, 0}; }

}  // namespace mox::quant::cpu
