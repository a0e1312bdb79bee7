// Unicode normalization before pre-tokenization (HF "normalizer"), through utf8proc.
#pragma once

#include <string>
#include <string_view>

namespace mox::text {

// NFC of valid UTF-8 `text` (the caller checks validity). Pure-ASCII text is returned unchanged
// without calling into utf8proc.
std::string nfc(std::string_view text);

}  // namespace mox::text
