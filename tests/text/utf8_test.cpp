#include "text/utf8.h"
#include "text/byte_level.h"

#include <gtest/gtest.h>

#include <set>

namespace mox::text {
namespace {

TEST(Utf8, EncodeDecodeEveryScalarValue) {
    for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        std::string s;
        utf8_append(s, cp);
        const size_t expected_len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        ASSERT_EQ(s.size(), expected_len) << cp;
        uint32_t back = 0;
        ASSERT_EQ(utf8_decode(s, 0, back), static_cast<int>(expected_len)) << cp;
        ASSERT_EQ(back, cp);
    }
}

TEST(Utf8, RejectsIllFormed) {
    uint32_t cp = 0;
    EXPECT_EQ(utf8_decode("\xC0\xAF", 0, cp), 0);          // overlong '/'
    EXPECT_EQ(utf8_decode("\xE0\x80\xAF", 0, cp), 0);      // overlong
    EXPECT_EQ(utf8_decode("\xED\xA0\x80", 0, cp), 0);      // surrogate U+D800
    EXPECT_EQ(utf8_decode("\xF4\x90\x80\x80", 0, cp), 0);  // U+110000
    EXPECT_EQ(utf8_decode("\xF5\x80\x80\x80", 0, cp), 0);
    EXPECT_EQ(utf8_decode("\x80", 0, cp), 0);      // stray continuation
    EXPECT_EQ(utf8_decode("\xE4\xBD", 0, cp), 0);  // truncated
    EXPECT_FALSE(utf8_is_valid("ab\xFF"));
    EXPECT_TRUE(utf8_is_valid("ab\xE4\xBD\xA0"));
}

TEST(Utf8, LossyUsesMaximalSubparts) {
    // The example of Unicode 15 §3.9 (Table 3-8): 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 becomes
    // a FFFD FFFD FFFD b FFFD c FFFD FFFD d.
    const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
    const std::string r = "\xEF\xBF\xBD";
    EXPECT_EQ(utf8_lossy(in), "a" + r + r + r + "b" + r + "c" + r + r + "d");
    EXPECT_EQ(utf8_lossy("ok"), "ok");
}

TEST(Utf8, CompletePrefixHoldsBackSplitCharacter) {
    const std::string ni = "\xE4\xBD\xA0";  // 你
    EXPECT_EQ(utf8_complete_prefix("a" + ni.substr(0, 1)), 1u);
    EXPECT_EQ(utf8_complete_prefix("a" + ni.substr(0, 2)), 1u);
    EXPECT_EQ(utf8_complete_prefix("a" + ni), 4u);
    EXPECT_EQ(utf8_complete_prefix("a\xFF"), 2u);         // ill-formed, not incomplete: let it through
    EXPECT_EQ(utf8_complete_prefix("a\xE4\x41"), 3u);     // can never complete
    EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);  // 3 of 4 bytes of an emoji
}

TEST(ByteLevel, IsABijectionOntoPrintableCodePoints) {
    std::set<uint32_t> seen;
    int remapped = 0;
    for (int b = 0; b < 256; ++b) {
        const uint32_t cp = byte_to_code_point(static_cast<uint8_t>(b));
        EXPECT_TRUE(seen.insert(cp).second) << b;
        EXPECT_EQ(code_point_to_byte(cp), static_cast<uint8_t>(b));
        if (cp != static_cast<uint32_t>(b)) {
            ++remapped;
            EXPECT_GE(cp, 256u);  // controls, space, DEL, NBSP, soft hyphen move above Latin-1
        }
    }
    EXPECT_EQ(remapped, 68);  // 33 (0x00-0x20) + 34 (0x7F-0xA0) + 1 (0xAD)
    // The well-known spellings of GPT-2 vocabularies: space is 'Ġ' (U+0120), newline 'Ċ' (U+010A).
    EXPECT_EQ(byte_to_code_point(' '), 0x120u);
    EXPECT_EQ(byte_to_code_point('\n'), 0x10Au);
    EXPECT_EQ(byte_to_code_point(0), 0x100u);
    EXPECT_EQ(byte_to_code_point('!'), static_cast<uint32_t>('!'));
    EXPECT_FALSE(code_point_to_byte(0x20));  // a raw space is not a mapped code point
}

TEST(ByteLevel, MappedRoundTripsAnyBytes) {
    std::string all;
    for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
    const std::string mapped = bytes_to_mapped(all);
    EXPECT_TRUE(utf8_is_valid(mapped));
    EXPECT_EQ(mapped_to_bytes(mapped), all);
    EXPECT_EQ(bytes_to_mapped(" hi\n"), "\xC4\xA0hi\xC4\x8A");  // "Ġhi" + "Ċ"
    EXPECT_FALSE(mapped_to_bytes("a b"));                       // raw space is not a mapped character
}

}  // namespace
}  // namespace mox::text
