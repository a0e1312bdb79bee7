#include "engine/stop_strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mox::engine {
namespace {

// Feeds pieces one by one and returns everything sent, with finish() at the end unless stopped.
std::string run(StopStrings& s, const std::vector<std::string>& pieces) {
    std::string out;
    for (const std::string& p : pieces) out += s.push(p);
    if (!s.stopped()) out += s.finish();
    return out;
}

TEST(StopStrings, PartialMatchTail) {
    EXPECT_EQ(partial_match_tail("abc </th", "</think>"), 4u);
    EXPECT_EQ(partial_match_tail("abc <", "</think>"), 1u);
    EXPECT_EQ(partial_match_tail("abc", "</think>"), 0u);
    EXPECT_EQ(partial_match_tail("x</think>", "</think>"), 0u);  // whole tags are the caller's to find
    EXPECT_EQ(partial_match_tail("aa", "aab"), 2u);
    EXPECT_EQ(partial_match_tail("", "ab"), 0u);
    EXPECT_EQ(partial_match_tail("ab", ""), 0u);
}

TEST(StopStrings, NoStopsPassEverythingAtOnce) {
    StopStrings s({});
    EXPECT_EQ(s.push("Hello"), "Hello");
    EXPECT_EQ(s.push(" world"), " world");
    EXPECT_EQ(s.finish(), "");
    EXPECT_FALSE(s.stopped());
}

TEST(StopStrings, StopInsideOnePiece) {
    StopStrings s({"\n\n"});
    EXPECT_EQ(s.push("one\n\ntwo"), "one");
    EXPECT_TRUE(s.stopped());
    EXPECT_EQ(s.push("three"), "");
}

TEST(StopStrings, StopAcrossPiecesIsHeldBackThenCut) {
    StopStrings s({"Observation:"});
    EXPECT_EQ(s.push("Thought: go. Obs"), "Thought: go. ");  // "Obs" may be starting the stop string
    EXPECT_EQ(s.push("erv"), "");
    EXPECT_EQ(s.push("ation: 42"), "");
    EXPECT_TRUE(s.stopped());
}

TEST(StopStrings, AFalseStartIsReleased) {
    StopStrings s({"Observation:"});
    EXPECT_EQ(s.push("Obs"), "");
    EXPECT_EQ(s.push("cure"), "Obscure");
    EXPECT_FALSE(s.stopped());
}

TEST(StopStrings, HeldTextComesOutAtTheEnd) {
    StopStrings s({"</answer>"});
    EXPECT_EQ(run(s, {"42 </ans"}), "42 </ans");
}

TEST(StopStrings, EarliestOfSeveralWins) {
    StopStrings s({"END", "\n"});
    EXPECT_EQ(run(s, {"a\nb END"}), "a");
    StopStrings t({"b", "ab"});
    EXPECT_EQ(run(t, {"xa", "b"}), "x");  // "ab" starts first
}

TEST(StopStrings, EmptyStopStringsAreIgnored) {
    StopStrings s({"", "z"});
    EXPECT_EQ(run(s, {"abc"}), "abc");
}

TEST(StopStrings, MultiByteTextIsNeverCut) {
    // The held tail is a prefix of a stop string, which starts at a character: "é" is never split.
    StopStrings s({"éé!"});
    EXPECT_EQ(s.push("café"), "caf");
    EXPECT_EQ(s.push("s"), "és");
    EXPECT_EQ(run(s, {"ééé!"}), "é");
}

// Whatever the piece boundaries, the text sent is the same: the text before the first stop string.
TEST(StopStrings, SplittingDoesNotChangeTheResult) {
    const std::string text = "alpha beta <stop> gamma";
    for (size_t cut1 = 0; cut1 <= text.size(); ++cut1)
        for (size_t cut2 = cut1; cut2 <= text.size(); ++cut2) {
            StopStrings s({"<stop>", "zeta"});
            const std::string got =
                run(s, {text.substr(0, cut1), text.substr(cut1, cut2 - cut1), text.substr(cut2)});
            ASSERT_EQ(got, "alpha beta ") << cut1 << " " << cut2;
        }
}

}  // namespace
}  // namespace mox::engine
