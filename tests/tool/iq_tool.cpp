// Test helper for tests/py/test_iq_grid_interop.py: runs a registry dequantizer over raw block files.
//
//   iq_tool dequant TYPE in.bin out.f32
//
// in.bin holds whole blocks of TYPE (e.g. IQ2_XXS, case-insensitive) back to back; out.f32 receives
// the dequantized values as little-endian fp32, block_elems per block. Exit status: 0 ok, 1 bad input
// (message on stderr), 2 bad usage.
#include "core/error.h"
#include "quant/types.h"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

constexpr const char* kUsage = "usage: iq_tool dequant TYPE in.bin out.f32\n";

std::vector<char> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) mox::fail("cannot open '{}' for reading", path);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) mox::fail("error reading '{}'", path);
    return bytes;
}

void write_file(const std::string& path, const void* data, size_t size) {
    std::ofstream out(path, std::ios::binary);
    if (!out) mox::fail("cannot open '{}' for writing", path);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) mox::fail("error writing '{}'", path);
}

void dequant(const std::string& type_name, const std::string& in_path, const std::string& out_path) {
    const auto id = mox::quant::type_from_name(type_name);
    if (!id) mox::fail("unknown type '{}'", type_name);
    const mox::quant::TypeTraits& t = mox::quant::traits(*id);
    if (t.dequantize == nullptr) mox::fail("type {} has no reference dequantizer", t.name);

    const std::vector<char> in = read_file(in_path);
    if (in.size() % t.block_bytes != 0)
        mox::fail("'{}' holds {} bytes, not a whole number of {}-byte {} blocks", in_path, in.size(),
                  t.block_bytes, t.name);
    const int64_t n = static_cast<int64_t>(in.size() / t.block_bytes) * t.block_elems;
    std::vector<float> out(static_cast<size_t>(n));
    t.dequantize(in.data(), out.data(), n);
    write_file(out_path, out.data(), out.size() * sizeof(float));
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5 || std::string(argv[1]) != "dequant") {
        std::fputs(kUsage, stderr);
        return 2;
    }
    try {
        dequant(argv[2], argv[3], argv[4]);
    } catch (const mox::Error& e) {
        fmt::print(stderr, "iq_tool: {}\n", e.what());
        return 1;
    }
    return 0;
}
