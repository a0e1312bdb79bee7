// iq dot kernels, avx2 tier (see kernels.h for the rules of ISA-flagged files).
#include "quant/cpu/kernels.h"

namespace mox::quant::cpu {

KernelTable iq_kernels_avx2() { return {nullptr, 0}; }

}  // namespace mox::quant::cpu
