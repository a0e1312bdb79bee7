// A thinking model's answer in two parts, as llama-server's --reasoning-format deepseek and
// OpenAI-style clients expect: the text inside <think>...</think> goes to message.reasoning_content,
// the rest to message.content. Qwen3.6's chat template opens the think block itself (the prompt
// ends with "<think>\n"), so the output starts inside it; other models write "<think>" first. Text
// that could still be the start of a tag is held back until the next piece decides it, so a stream
// never sends half a tag to the wrong field.
#pragma once

#include <string>
#include <string_view>

namespace mox::server {

struct SplitText {
    std::string reasoning, content;
};

class ReasoningSplit {
public:
    // in_think: the prompt ended inside an open think block.
    explicit ReasoningSplit(bool in_think);
    SplitText push(std::string_view text);
    SplitText finish();  // the held-back text, where it was heading

private:
    enum class Where { start, reasoning, content };
    void route(std::string_view text, SplitText& out);
    Where where_;
    bool trim_content_ = false;  // drop the whitespace that follows </think>
    std::string held_;
};

// Whether a rendered chat prompt leaves the model inside a think block: it ends with "<think>" (and
// whitespace) not closed by a later "</think>".
bool prompt_opens_think(std::string_view prompt);

}  // namespace mox::server
