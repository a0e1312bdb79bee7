// Definitions of the i-quant tables declared in iq_grids.h. The numbers are generated data; see
// tools/gen_iq_grids.py for where they come from and how they are checked.
#include "quant/iq_grids.h"

namespace mox::quant {

#include "quant/iq_grids.inc"

}  // namespace mox::quant
