#include "text/normalize.h"

#include "core/error.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

namespace mox::text {

std::string nfc(std::string_view text) {
    bool ascii = true;
    for (char c : text) ascii &= static_cast<uint8_t>(c) < 0x80;
    if (ascii || text.empty()) return std::string(text);

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
