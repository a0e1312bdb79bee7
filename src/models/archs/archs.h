// The registry's rows, one per file of this folder (arch.cpp lists them).
#pragma once

#include "models/arch.h"

namespace mox::models::archs {

ArchInfo qwen35moe();
ArchInfo qwen35();
ArchInfo qwen3moe();
ArchInfo llama();
ArchInfo phimoe();

}  // namespace mox::models::archs
