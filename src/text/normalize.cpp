#include "text/normalize.h"

#include "core/error.h"
#include "text/utf8.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

namespace mox::text {
namespace {

// True when `text` is NFC for certain, without normalizing: every code point is below U+0300 or
// a CJK unified ideograph (U+4E00..U+9FFF). Such characters have no canonical decomposition in
// their NFC form and compose with nothing that follows, since every character that composes
// with a preceding one (combining marks, Hangul vowels/trailing consonants, kana voicing marks)
// is at or above U+0300 and outside that block. Anything else goes through utf8proc.
bool is_nfc_quick(std::string_view text) {
    uint32_t cp = 0;
    for (size_t i = 0; i < text.size();) {
        if (static_cast<uint8_t>(text[i]) < 0x80) {
            ++i;
            continue;
        }
        const int n = utf8_decode(text, i, cp);
        if (n == 0 || (cp >= 0x300 && (cp < 0x4E00 || cp > 0x9FFF))) return false;
        i += static_cast<size_t>(n);
    }
    return true;
}

}  // namespace

std::string nfc(std::string_view text) {
    if (is_nfc_quick(text)) return std::string(text);

    utf8proc_uint8_t* result = nullptr;
    // STABLE + COMPOSE is NFC; the explicit length (no NULLTERM) keeps embedded NUL bytes.
    const utf8proc_ssize_t n = utf8proc_map(
        reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
        &result, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) fail("tokenizer: NFC normalization failed: {}", utf8proc_errmsg(n));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
    return std::string(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
}

}  // namespace mox::text
