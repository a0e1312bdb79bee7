#include "flag_values.h"

#include "core/error.h"
#include "core/units.h"

#include <unistd.h>

#include <filesystem>

namespace mox::cli {

namespace {

bool bare_number(const std::string& text) {
    return !text.empty() && text.find_first_not_of("0123456789.eE+") == std::string::npos;
}

}  // namespace

uint64_t parse_size_flag(const char* flag, const std::string& text) {
    if (bare_number(text) && text != "0")
        fail("{} {}: give a unit, e.g. {}GiB or {}GB (a bare number would be bytes)", flag, text, text, text);
    try {
        return parse_size(text);
    } catch (const Error& e) {
        fail("{} {}: {}", flag, text, e.what());
    }
}

double parse_bandwidth_flag(const char* flag, const std::string& text) {
    if (bare_number(text))
        fail("{} {}: give a unit, e.g. {}GB/s (a bare number would be bytes/s)", flag, text, text);
    try {
        return parse_bandwidth(text);
    } catch (const Error& e) {
        fail("{} {}: {}", flag, text, e.what());
    }
}

void check_writable(const char* flag, const std::string& path) {
    namespace fs = std::filesystem;
    if (path.empty()) fail("{}: the path is empty", flag);
    if (fs::is_directory(path)) fail("{} {}: is a folder", flag, path);
    const fs::path dir = fs::absolute(fs::path(path)).parent_path();
    if (!fs::is_directory(dir)) fail("{} {}: the folder '{}' does not exist", flag, path, dir.string());
    if (access(dir.c_str(), W_OK) != 0)
        fail("{} {}: the folder '{}' is not writable", flag, path, dir.string());
}

quant::Isa cpu_isa_from_flag(const std::string& name) {
    if (name == "auto") return quant::host_isa();
    const auto want = quant::isa_from_name(name);
    if (!want) fail("--isa {}: expected auto, avx512, avx2 or scalar", name);
    if (*want > quant::host_isa())
        fail("--isa {}: this CPU supports up to {}", name, quant::isa_name(quant::host_isa()));
    return *want;
}

const char* no_cuda_reason() {
    return "this mox was built without CUDA (rebuild with -DMOX_CUDA=ON for the GPU)";
}

}  // namespace mox::cli
