// The built-in regexes on inputs whose split follows from reading the alternatives in order.
#include "text/pretokenizer.h"
#include "core/error.h"
#include "text/vocab.h"

#include <gtest/gtest.h>

namespace mox::text {
namespace {

std::vector<std::string> split(std::string_view pre, std::string_view text) {
    const PreTokenizer p(*builtin_pre_regex(pre));
    std::vector<std::string_view> views;
    p.split(text, views);
    return {views.begin(), views.end()};
}

using V = std::vector<std::string>;

TEST(PreTokenizer, Qwen35Basics) {
    EXPECT_EQ(split("qwen35", "Hello world"), (V{"Hello", " world"}));
    // \p{N} alone: one digit per piece.
    EXPECT_EQ(split("qwen35", "x 1234"), (V{"x", " ", "1", "2", "3", "4"}));
    // Contractions, any case, split off the word.
    EXPECT_EQ(split("qwen35", "don't WE'LL"), (V{"don", "'t", " WE", "'LL"}));
    // A run of spaces before a word: the last space goes with the word (\s+(?!\S) backtracks).
    EXPECT_EQ(split("qwen35", "a   b"), (V{"a", "  ", " b"}));
    // Punctuation run takes one optional leading space and trailing newlines.
    EXPECT_EQ(split("qwen35", "a ...\n\nb"), (V{"a", " ...\n\n", "b"}));
    // Whitespace ending in newlines is one piece; trailing spaces at the end are one piece.
    EXPECT_EQ(split("qwen35", "a \n b  "), (V{"a", " \n", " b", "  "}));
    EXPECT_EQ(split("qwen35", ""), V{});
}

TEST(PreTokenizer, Qwen35JoinsCombiningMarks) {
    // "e" + U+0301: qwen35 keeps the mark in the letter run; qwen2 splits it off.
    EXPECT_EQ(split("qwen35", "cafe\xCC\x81 x"), (V{"cafe\xCC\x81", " x"}));
    EXPECT_EQ(split("qwen2", "cafe\xCC\x81 x"), (V{"cafe", "\xCC\x81", " x"}));
    // Devanagari: virama and vowel sign are marks, so the whole syllable is one piece.
    EXPECT_EQ(split("qwen35", "\xE0\xA4\x95\xE0\xA5\x8D\xE0\xA4\xB7\xE0\xA4\xBF"),
              (V{"\xE0\xA4\x95\xE0\xA5\x8D\xE0\xA4\xB7\xE0\xA4\xBF"}));
}

TEST(PreTokenizer, WhitespaceIsTheUnicodeProperty) {
    // U+3000 (ideographic space) is White_Space, so it stands alone before punctuation; U+180E is
    // not (PCRE2's own \s would take it), so it joins the punctuation run.
    EXPECT_EQ(split("qwen35", "x\xE3\x80\x80."), (V{"x", "\xE3\x80\x80", "."}));
    EXPECT_EQ(split("qwen35", "x\xE1\xA0\x8E."), (V{"x", "\xE1\xA0\x8E."}));
    // The optional non-letter before a letter run may be a space of any kind.
    EXPECT_EQ(split("qwen35",
                    "a\xE3\x80\x80"
                    "b"),
              (V{"a",
                 "\xE3\x80\x80"
                 "b"}));
}

TEST(PreTokenizer, Gpt2KeepsDigitRuns) {
    EXPECT_EQ(split("gpt2", "ab 1234"), (V{"ab", " 1234"}));
}

TEST(PreTokenizer, LongRunsDoNotOverflowTheStack) {
    const std::string spaces(200000, ' ');
    EXPECT_EQ(split("qwen35", spaces + "x"), (V{spaces.substr(1), " x"}));
    const std::string letters(200000, 'a');
    EXPECT_EQ(split("qwen35", letters), (V{letters}));
}

TEST(PreTokenizer, BadRegexIsAnError) {
    EXPECT_THROW(PreTokenizer("(unclosed"), Error);
}

TEST(PreTokenizer, HfRegexTranslation) {
    EXPECT_EQ(hf_regex_to_pcre2(R"(\s+(?!\S)|[^\s\p{L}])"),
              R"(\p{White_Space}+(?!\P{White_Space})|[^\p{White_Space}\p{L}])");
    EXPECT_EQ(hf_regex_to_pcre2(R"(\\s)"), R"(\\s)");  // an escaped backslash, then a plain 's'
}

}  // namespace
}  // namespace mox::text
