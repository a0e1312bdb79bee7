#include "server/reasoning.h"

#include "engine/stop_strings.h"

#include <algorithm>

namespace mox::server {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

}  // namespace

ReasoningSplit::ReasoningSplit(bool in_think) : where_(in_think ? Where::reasoning : Where::start) {}

void ReasoningSplit::route(std::string_view text, SplitText& out) {
    if (where_ == Where::content && trim_content_) {
        while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
        if (!text.empty()) trim_content_ = false;
    }
    (where_ == Where::reasoning ? out.reasoning : out.content).append(text);
}

SplitText ReasoningSplit::push(std::string_view text) {
    SplitText out;
    held_.append(text);
    for (;;) {
        if (where_ == Where::start) {
            // Leading whitespace, then either "<think>" (reasoning follows) or anything else (no
            // reasoning at all).
            const size_t first = held_.find_first_not_of(" \n\r\t");
            if (first == std::string::npos) return out;  // only whitespace so far: undecided
            const std::string_view rest = std::string_view(held_).substr(first);
            if (rest.substr(0, kOpen.size()) == kOpen) {
                held_.erase(0, first + kOpen.size());
                where_ = Where::reasoning;
                trim_content_ = false;
                continue;
            }
            if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return out;  // maybe
            where_ = Where::content;
            continue;
        }
        if (where_ == Where::reasoning) {
            const size_t end = held_.find(kClose);
            if (end != std::string::npos) {
                route(std::string_view(held_).substr(0, end), out);
                held_.erase(0, end + kClose.size());
                where_ = Where::content;
                trim_content_ = true;
                continue;
            }
            const size_t keep = engine::partial_match_tail(held_, kClose);
            route(std::string_view(held_).substr(0, held_.size() - keep), out);
            held_.erase(0, held_.size() - keep);
            return out;
        }
        route(held_, out);  // content: nothing more to look for
        held_.clear();
        return out;
    }
}

SplitText ReasoningSplit::finish() {
    SplitText out;
    if (where_ == Where::start) where_ = Where::content;
    route(held_, out);
    held_.clear();
    return out;
}

bool prompt_opens_think(std::string_view prompt) {
    while (!prompt.empty() && is_space(prompt.back())) prompt.remove_suffix(1);
    return prompt.size() >= kOpen.size() && prompt.substr(prompt.size() - kOpen.size()) == kOpen;
}

}  // namespace mox::server
