#include "text/byte_level.h"

#include "text/utf8.h"

#include <array>

namespace mox::text {
namespace {

bool maps_to_itself(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

struct Tables {
    std::array<uint32_t, 256> to_cp{};
    std::array<std::string, 256> to_utf8{};
    std::array<int16_t, 324> from_cp{};  // every mapped code point is below 256 + 68

    Tables() {
        from_cp.fill(-1);
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            to_cp[b] = maps_to_itself(b) ? static_cast<uint32_t>(b) : next++;
            utf8_append(to_utf8[b], to_cp[b]);
            from_cp[to_cp[b]] = static_cast<int16_t>(b);
        }
    }
};

const Tables& tables() {
    static const Tables t;
    return t;
}

}  // namespace

uint32_t byte_to_code_point(uint8_t b) {
    return tables().to_cp[b];
}

std::optional<uint8_t> code_point_to_byte(uint32_t cp) {
    const auto& t = tables();
    if (cp >= t.from_cp.size() || t.from_cp[cp] < 0) return std::nullopt;
    return static_cast<uint8_t>(t.from_cp[cp]);
}

std::string bytes_to_mapped(std::string_view bytes) {
    const auto& t = tables();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) out += t.to_utf8[static_cast<uint8_t>(c)];
    return out;
}

std::optional<std::string> mapped_to_bytes(std::string_view mapped) {
    std::string out;
    out.reserve(mapped.size());
    uint32_t cp = 0;
    for (size_t i = 0; i < mapped.size();) {
        const int n = utf8_decode(mapped, i, cp);
        if (n == 0) return std::nullopt;
        const auto b = code_point_to_byte(cp);
        if (!b) return std::nullopt;
        out += static_cast<char>(*b);
        i += static_cast<size_t>(n);
    }
    return out;
}

}  // namespace mox::text
