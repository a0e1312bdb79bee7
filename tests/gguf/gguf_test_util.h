// Helpers shared by the GGUF tests: a scratch directory, file I/O, deterministic bytes, and a
// check that a call throws mox::Error with a given one-line message.
#pragma once

#include "core/error.h"
#include "gguf/value.h"
#include "gguf/writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace mox::gguf::test {

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
public:
    TempDir() {
        static std::atomic<int> counter{0};
        path_ = std::filesystem::temp_directory_path() /
                ("mox_gguf_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Deterministic pseudo-random bytes (SplitMix64 stream).
inline std::vector<uint8_t> pattern(size_t n, uint64_t seed) {
    std::vector<uint8_t> out(n);
    uint64_t s = seed;
    for (uint8_t& b : out) {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        b = static_cast<uint8_t>(z ^ (z >> 31));
    }
    return out;
}

// Runs f; passes when it throws mox::Error whose message contains `want` and is one line.
template <typename F>
::testing::AssertionResult throws_error(F&& f, const std::string& want) {
    try {
        f();
    } catch (const Error& e) {
        const std::string msg = e.what();
        if (msg.find('\n') != std::string::npos)
            return ::testing::AssertionFailure() << "message is not one line: " << msg;
        if (msg.find(want) == std::string::npos)
            return ::testing::AssertionFailure() << "message '" << msg << "' lacks '" << want << "'";
        return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "no mox::Error thrown (wanted '" << want << "')";
}

}  // namespace mox::gguf::test
