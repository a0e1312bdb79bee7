#include "models/arch.h"

#include "core/error.h"
#include "models/archs/archs.h"

#include <fmt/format.h>

namespace mox::models {

namespace {

const std::vector<ArchInfo>& registry() {
    static const std::vector<ArchInfo> rows = {archs::qwen35moe(), archs::qwen35(), archs::qwen3moe(),
                                               archs::llama(), archs::phimoe()};
    return rows;
}

}  // namespace

const ArchInfo& arch_info(Arch arch) {
    for (const ArchInfo& a : registry())
        if (a.arch == arch) return a;
    MOX_CHECK(false, "architecture {} has no registry row", static_cast<int>(arch));
    return registry().front();
}

std::span<const ArchInfo> all_archs() {
    return registry();
}

const ArchInfo* find_arch(std::string_view name) {
    for (const ArchInfo& a : registry())
        if (name == a.name) return &a;
    return nullptr;
}

std::string known_archs() {
    std::string s;
    for (const ArchInfo& a : registry()) s += fmt::format("{}{}", s.empty() ? "" : ", ", a.name);
    return s;
}

}  // namespace mox::models
