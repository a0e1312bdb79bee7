// Checks of flag values that several commands share, with the same words in each.
#pragma once

#include "quant/dot.h"

#include <cstdint>
#include <string>

namespace mox::cli {

// A size such as 16GiB, 8000MiB or 24GB. A bare number other than 0 is refused: "--vram-budget 12"
// would be 12 bytes, which nobody means.
uint64_t parse_size_flag(const char* flag, const std::string& text);
// A bandwidth such as 936GB/s; a bare number is refused the same way.
double parse_bandwidth_flag(const char* flag, const std::string& text);

// Fails now, not after a long run, when `path` cannot be written (its folder is missing or read-only).
void check_writable(const char* flag, const std::string& path);

// --isa: auto (this CPU's best), avx512, avx2 or scalar (the reference path); fails on another name
// or a tier this CPU lacks.
quant::Isa cpu_isa_from_flag(const std::string& name);

// Why this build cannot run on the GPU.
const char* no_cuda_reason();

}  // namespace mox::cli
