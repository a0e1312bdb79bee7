// quant_tool: drives the reference conversions of the quant registry from raw little-endian files, for
// the Python interop tests (tests/py/test_quant_interop.py).
//
//   quant_tool list                        one line per registry row:
//                                          "<id> <NAME> <block_elems> <block_bytes> <dequant 0|1> <quant
//                                          0|1>"
//   quant_tool dequant TYPE in.bin out.f32 packed blocks -> fp32 values
//   quant_tool quant TYPE in.f32 out.bin   fp32 values -> packed blocks
//
// Exit status: 0 ok, 1 bad input (message on stderr), 2 bad usage.
#include "core/error.h"
#include "quant/types.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

using mox::quant::TypeTraits;

constexpr const char* kUsage =
    "usage: quant_tool list\n"
    "       quant_tool dequant TYPE in.bin out.f32\n"
    "       quant_tool quant TYPE in.f32 out.bin\n";

std::vector<char> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) mox::fail("cannot open '{}' for reading", path);
    return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const void* data, size_t size) {
    std::ofstream out(path, std::ios::binary);
    if (!out) mox::fail("cannot open '{}' for writing", path);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) mox::fail("failed writing {} bytes to '{}'", size, path);
}

const TypeTraits& lookup(const std::string& name) {
    const auto id = mox::quant::type_from_name(name);
    if (!id) mox::fail("unknown type '{}' (see `quant_tool list`)", name);
    return mox::quant::traits(*id);
}

void cmd_list() {
    for (const TypeTraits& t : mox::quant::all_types())
        fmt::print("{} {} {} {} {} {}\n", static_cast<uint32_t>(t.id), t.name, t.block_elems, t.block_bytes,
                   t.dequantize ? 1 : 0, t.quantize ? 1 : 0);
}

void cmd_dequant(const std::string& type, const std::string& in_path, const std::string& out_path) {
    const TypeTraits& t = lookup(type);
    if (!t.dequantize) mox::fail("type {} has no reference dequantize", t.name);
    const std::vector<char> in = read_file(in_path);
    if (in.size() % t.block_bytes != 0)
        mox::fail("'{}' has {} bytes, not a whole number of {}-byte {} blocks", in_path, in.size(),
                  t.block_bytes, t.name);
    const int64_t n = static_cast<int64_t>(in.size() / t.block_bytes) * t.block_elems;
    std::vector<float> out(static_cast<size_t>(n));
    t.dequantize(in.data(), out.data(), n);
    write_file(out_path, out.data(), out.size() * sizeof(float));
}

void cmd_quant(const std::string& type, const std::string& in_path, const std::string& out_path) {
    const TypeTraits& t = lookup(type);
    if (!t.quantize) mox::fail("type {} has no reference quantize", t.name);
    const std::vector<char> in = read_file(in_path);
    if (in.size() % sizeof(float) != 0)
        mox::fail("'{}' has {} bytes, not a whole number of fp32 values", in_path, in.size());
    const int64_t n = static_cast<int64_t>(in.size() / sizeof(float));
    if (n % t.block_elems != 0)
        mox::fail("'{}' holds {} values, not a whole number of {}-element {} blocks", in_path, n,
                  t.block_elems, t.name);
    std::vector<float> values(static_cast<size_t>(n));
    std::memcpy(values.data(), in.data(), in.size());
    std::vector<uint8_t> out(mox::quant::row_bytes(t.id, n));
    t.quantize(values.data(), out.data(), n);
    write_file(out_path, out.data(), out.size());
}

}  // namespace

int main(int argc, char** argv) {
    const std::vector<std::string> args(argv + 1, argv + argc);
    try {
        if (args.size() == 1 && args[0] == "list") {
            cmd_list();
        } else if (args.size() == 4 && args[0] == "dequant") {
            cmd_dequant(args[1], args[2], args[3]);
        } else if (args.size() == 4 && args[0] == "quant") {
            cmd_quant(args[1], args[2], args[3]);
        } else {
            std::fputs(kUsage, stderr);
            return 2;
        }
    } catch (const mox::Error& e) {
        fmt::print(stderr, "quant_tool: error: {}\n", e.what());
        return 1;
    }
    return 0;
}
