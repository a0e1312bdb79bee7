// iq dot kernels, avx512 tier (see kernels.h for the rules of ISA-flagged files).
#include "quant/cpu/kernels.h"

namespace mox::quant::cpu {

KernelTable iq_kernels_avx512() { return {nullptr, 0}; }

}  // namespace mox::quant::cpu
