#include "core/units.h"

#include "core/error.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

namespace mox {

namespace {

// Splits "1.5GiB" into 1.5 and "GiB"; rejects empty numbers and trailing junk in the number.
void split_number(std::string_view text, double& value, std::string& unit) {
    std::string s(text);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    size_t start = 0;
    while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
    s = s.substr(start);
    const char* begin = s.c_str();
    char* end = nullptr;
    value = std::strtod(begin, &end);
    if (end == begin || !std::isfinite(value) || value < 0) fail("'{}' is not a size (expected e.g. 24G, 512MiB, 936GB/s)", text);
    unit = std::string(end);
    size_t u = 0;
    while (u < unit.size() && unit[u] == ' ') ++u;
    unit = unit.substr(u);
}

double unit_scale(std::string_view unit, std::string_view text) {
    std::string u;
    for (char c : unit) u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (u.empty() || u == "B") return 1;
    const char prefix = u[0];
    std::string rest = u.substr(1);
    double base;
    if (rest == "" || rest == "I" || rest == "IB") base = 1024;  // "24G", "24GI", "24GiB": binary
    else if (rest == "B") base = 1000;                          // "24GB": decimal
    else fail("'{}': unknown unit '{}'", text, unit);
    switch (prefix) {
        case 'K': return base;
        case 'M': return base * base;
        case 'G': return base * base * base;
        case 'T': return base * base * base * base;
        default: fail("'{}': unknown unit '{}'", text, unit);
    }
}

}  // namespace

uint64_t parse_size(std::string_view text) {
    double value;
    std::string unit;
    split_number(text, value, unit);
    const double bytes = value * unit_scale(unit, text);
    if (bytes > 1.8e19) fail("'{}' is too large", text);
    return static_cast<uint64_t>(std::llround(bytes));
}

double parse_bandwidth(std::string_view text) {
    double value;
    std::string unit;
    split_number(text, value, unit);
    if (unit.size() >= 2 && (unit.ends_with("/s") || unit.ends_with("/S"))) unit = unit.substr(0, unit.size() - 2);
    // Bandwidth units are decimal even without the B: "936G/s" means 936e9 bytes/s.
    std::string u;
    for (char c : unit) u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (u.size() >= 2 && u[1] == 'I') return value * unit_scale(unit, text);
    if (u.size() == 1 && u != "B") u += "B";
    const double bw = value * unit_scale(u, text);
    if (bw <= 0) fail("'{}': bandwidth must be positive", text);
    return bw;
}

std::string format_bytes(uint64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        ++i;
    }
    return i == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", v, units[i]);
}

std::string format_count(double n) {
    if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
    if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
    if (n >= 1e3) return fmt::format("{:.2f} K", n / 1e3);
    return fmt::format("{:.0f}", n);
}

}  // namespace mox
