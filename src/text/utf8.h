// UTF-8 helpers for the tokenizer: strict decoding (RFC 3629: no overlongs, no surrogates, at most
// U+10FFFF), lossy repair with U+FFFD, and the longest prefix that ends on a whole character.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mox::text {

// Decodes the character starting at s[pos]. Returns its length in bytes (1..4) and sets `cp`, or
// returns 0 when the bytes there do not start a well-formed character.
int utf8_decode(std::string_view s, size_t pos, uint32_t& cp);

// Length of the maximal subpart of an ill-formed sequence starting at s[pos] (Unicode 15, §3.9,
// "U+FFFD substitution of maximal subparts"): the longest prefix of a well-formed sequence that
// is there, at least 1. Only meaningful where utf8_decode returned 0.
int utf8_invalid_length(std::string_view s, size_t pos);

void utf8_append(std::string& out, uint32_t cp);
bool utf8_is_valid(std::string_view s);

// Replaces every maximal ill-formed subpart by U+FFFD, as Python's bytes.decode("utf-8",
// "replace") and Rust's String::from_utf8_lossy do.
std::string utf8_lossy(std::string_view s);

// The longest prefix of `s` that does not end inside an incomplete (but so far well-formed)
// character; used when streaming decoded tokens, whose bytes may split a character.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace mox::text
