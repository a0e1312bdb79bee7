#include "engine/stop_strings.h"

#include <algorithm>

namespace mox::engine {

size_t partial_match_tail(std::string_view text, std::string_view tag) {
    if (tag.empty()) return 0;
    for (size_t n = std::min(tag.size() - 1, text.size()); n > 0; --n)
        if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
    return 0;
}

StopStrings::StopStrings(std::vector<std::string> stops) {
    for (std::string& s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopStrings::push(std::string_view text) {
    if (stopped_) return {};
    held_.append(text);
    // The earliest complete stop string wins. held_ never contains a whole one from an earlier
    // call, so any match involves the new text.
    size_t first = std::string::npos;
    for (const std::string& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
        std::string out = held_.substr(0, first);
        held_.clear();
        stopped_ = true;
        return out;
    }
    // Hold back the longest tail of held_ that is a proper prefix of some stop string. Stop
    // strings are valid UTF-8 starting with a lead byte, so the cut is at a character boundary.
    size_t keep = 0;
    for (const std::string& s : stops_) keep = std::max(keep, partial_match_tail(held_, s));
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopStrings::finish() {
    std::string out;
    out.swap(held_);
    return out;
}

}  // namespace mox::engine
