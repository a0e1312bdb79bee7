#include "gguf/split.h"

#include <fmt/format.h>

namespace mox::gguf {

namespace {

// Five decimal digits at `s`, or -1.
int five_digits(std::string_view s) {
    if (s.size() != 5) return -1;
    int v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return -1;
        v = v * 10 + (c - '0');
    }
    return v;
}

}  // namespace

std::optional<SplitName> parse_split_name(std::string_view path) {
    // "-00001-of-00003.gguf" is 20 characters; a non-empty prefix must precede it.
    constexpr std::string_view kSuffix = ".gguf";
    constexpr size_t kTail = 1 + 5 + 4 + 5 + kSuffix.size();
    if (path.size() <= kTail) return std::nullopt;
    std::string_view tail = path.substr(path.size() - kTail);
    if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || tail.substr(15) != kSuffix) return std::nullopt;
    const int number = five_digits(tail.substr(1, 5));
    const int count = five_digits(tail.substr(10, 5));
    if (number < 1 || count < 1 || number > count) return std::nullopt;
    std::string_view prefix = path.substr(0, path.size() - kTail);
    if (prefix.empty() || prefix.back() == '/') return std::nullopt;
    return SplitName{std::string(prefix), number, count};
}

std::string split_path(std::string_view prefix, int number, int count) {
    return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, number, count);
}

}  // namespace mox::gguf
