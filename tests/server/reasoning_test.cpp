#include "server/reasoning.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mox::server {
namespace {

SplitText run(bool in_think, const std::vector<std::string>& pieces) {
    ReasoningSplit s(in_think);
    SplitText all;
    for (const std::string& p : pieces) {
        const SplitText t = s.push(p);
        all.reasoning += t.reasoning;
        all.content += t.content;
    }
    const SplitText t = s.finish();
    all.reasoning += t.reasoning;
    all.content += t.content;
    return all;
}

TEST(ReasoningSplit, TemplateOpenedThinkBlock) {
    // Qwen3.6: the prompt ends with "<think>\n", the answer starts inside it.
    const SplitText t = run(true, {"Let me think.\n</think>\n\nThe answer is 4."});
    EXPECT_EQ(t.reasoning, "Let me think.\n");
    EXPECT_EQ(t.content, "The answer is 4.");  // the whitespace after </think> dropped
}

TEST(ReasoningSplit, ModelOpenedThinkBlock) {
    const SplitText t = run(false, {"\n<think>hmm</think>Yes."});
    EXPECT_EQ(t.reasoning, "hmm");
    EXPECT_EQ(t.content, "Yes.");
}

TEST(ReasoningSplit, NoThinkBlockIsAllContent) {
    EXPECT_EQ(run(false, {"Plain answer."}).content, "Plain answer.");
    EXPECT_EQ(run(false, {"<thin", "g>"}).content, "<thing>");  // a false start of the tag
    EXPECT_EQ(run(false, {"  "}).content, "  ");
    // A think block that never closes (max_tokens hit) is all reasoning.
    const SplitText t = run(true, {"still thinking </thi"});
    EXPECT_EQ(t.reasoning, "still thinking </thi");
    EXPECT_EQ(t.content, "");
}

TEST(ReasoningSplit, StreamedDeltasNeverCarryHalfATag) {
    ReasoningSplit s(true);
    EXPECT_EQ(s.push("a </th").reasoning, "a ");
    const SplitText t = s.push("ink>\nb");
    EXPECT_EQ(t.reasoning, "");
    EXPECT_EQ(t.content, "b");
}

// Whatever the piece boundaries, the split is the same.
TEST(ReasoningSplit, SplittingDoesNotChangeTheResult) {
    const std::string text = " <think>step one\nstep two</think>\n\nfinal answer";
    for (size_t a = 0; a <= text.size(); ++a)
        for (size_t b = a; b <= text.size(); ++b) {
            const SplitText t = run(false, {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
            ASSERT_EQ(t.reasoning, "step one\nstep two") << a << " " << b;
            ASSERT_EQ(t.content, "final answer") << a << " " << b;
        }
}

TEST(ReasoningSplit, PromptOpensThink) {
    EXPECT_TRUE(prompt_opens_think("<|im_start|>assistant\n<think>\n"));
    EXPECT_FALSE(prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n"));  // thinking off
    EXPECT_FALSE(prompt_opens_think("<|im_start|>assistant\n"));
    EXPECT_FALSE(prompt_opens_think(""));
}

}  // namespace
}  // namespace mox::server
