// GPT-2 byte-level mapping: every byte value gets a printable code point, so that a vocabulary of
// byte sequences can be stored as readable strings. Bytes that are printable Latin-1 characters
// ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves; the other 68 bytes (controls,
// space, DEL, NBSP, soft hyphen) map, in increasing byte order, to U+0100, U+0101, ...
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mox::text {

uint32_t byte_to_code_point(uint8_t b);
// The byte a code point stands for, or nullopt when it is not one of the 256 mapped code points.
std::optional<uint8_t> code_point_to_byte(uint32_t cp);

// Raw bytes -> their mapped UTF-8 spelling (the form stored in vocabularies).
std::string bytes_to_mapped(std::string_view bytes);
// Mapped spelling -> raw bytes; nullopt when the text is not valid UTF-8 or has a code point
// outside the 256 mapped ones.
std::optional<std::string> mapped_to_bytes(std::string_view mapped);

}  // namespace mox::text
