// Writes float32 arrays as NumPy .npy files (format version 1.0), the interchange format of the
// correctness tools (`mox logits`, goldens).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mox {

void write_npy_f32(const std::string& path, std::span<const float> data, const std::vector<int64_t>& shape);

}  // namespace mox
