#include "text/utf8.h"

namespace mox::text {
namespace {

// For a lead byte: the number of bytes of the character and the allowed range of the second
// byte (the ranges that exclude overlongs, surrogates and code points above U+10FFFF).
struct LeadInfo {
    int length;  // 0: never a lead byte
    uint8_t lo, hi;
};

LeadInfo lead_info(uint8_t b) {
    if (b < 0x80) return {1, 0, 0};
    if (b < 0xC2) return {0, 0, 0};  // continuation bytes, and C0/C1 (always overlong)
    if (b < 0xE0) return {2, 0x80, 0xBF};
    if (b == 0xE0) return {3, 0xA0, 0xBF};
    if (b == 0xED) return {3, 0x80, 0x9F};  // excludes the surrogates D800..DFFF
    if (b < 0xF0) return {3, 0x80, 0xBF};
    if (b == 0xF0) return {4, 0x90, 0xBF};
    if (b < 0xF4) return {4, 0x80, 0xBF};
    if (b == 0xF4) return {4, 0x80, 0x8F};  // at most U+10FFFF
    return {0, 0, 0};
}

// Number of bytes at s[pos] that are a prefix of a well-formed character (== info.length when
// the character is complete).
int valid_prefix(std::string_view s, size_t pos, const LeadInfo& info) {
    if (info.length <= 1) return info.length;
    int n = 1;
    for (; n < info.length && pos + n < s.size(); ++n) {
        const auto b = static_cast<uint8_t>(s[pos + n]);
        const uint8_t lo = n == 1 ? info.lo : 0x80;
        const uint8_t hi = n == 1 ? info.hi : 0xBF;
        if (b < lo || b > hi) break;
    }
    return n;
}

}  // namespace

int utf8_decode(std::string_view s, size_t pos, uint32_t& cp) {
    if (pos >= s.size()) return 0;
    const auto b0 = static_cast<uint8_t>(s[pos]);
    const LeadInfo info = lead_info(b0);
    if (info.length == 0) return 0;
    if (info.length == 1) {
        cp = b0;
        return 1;
    }
    if (valid_prefix(s, pos, info) != info.length) return 0;
    static constexpr uint8_t kLeadMask[5] = {0, 0, 0x1F, 0x0F, 0x07};
    uint32_t v = b0 & kLeadMask[info.length];
    for (int i = 1; i < info.length; ++i) v = (v << 6) | (static_cast<uint8_t>(s[pos + i]) & 0x3F);
    cp = v;
    return info.length;
}

int utf8_invalid_length(std::string_view s, size_t pos) {
    const LeadInfo info = lead_info(static_cast<uint8_t>(s[pos]));
    if (info.length == 0) return 1;
    const int n = valid_prefix(s, pos, info);
    return n > 0 ? n : 1;
}

void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

bool utf8_is_valid(std::string_view s) {
    uint32_t cp = 0;
    for (size_t i = 0; i < s.size();) {
        const int n = utf8_decode(s, i, cp);
        if (n == 0) return false;
        i += static_cast<size_t>(n);
    }
    return true;
}

std::string utf8_lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    uint32_t cp = 0;
    for (size_t i = 0; i < s.size();) {
        const int n = utf8_decode(s, i, cp);
        if (n > 0) {
            out.append(s.substr(i, static_cast<size_t>(n)));
            i += static_cast<size_t>(n);
        } else {
            utf8_append(out, 0xFFFD);
            i += static_cast<size_t>(utf8_invalid_length(s, i));
        }
    }
    return out;
}

size_t utf8_complete_prefix(std::string_view s) {
    // A character is at most 4 bytes, so only the last 3 bytes can start an unfinished one.
    const size_t start = s.size() > 3 ? s.size() - 3 : 0;
    for (size_t i = start; i < s.size(); ++i) {
        const LeadInfo info = lead_info(static_cast<uint8_t>(s[i]));
        if (info.length < 2) continue;
        const int n = valid_prefix(s, i, info);
        // Well-formed so far but cut by the end of the buffer: hold it back.
        if (n < info.length && i + static_cast<size_t>(n) == s.size()) return i;
    }
    return s.size();
}

}  // namespace mox::text
