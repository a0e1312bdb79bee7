// The nearest known name to a mistyped one, for "did you mean" hints in command-line errors.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mox::cli {

// The candidate closest to `word` by edit distance (a swap of two neighbours counts as one edit),
// if it is close enough to be a typo: at most a third of the word's length, at least one edit.
std::optional<std::string> nearest_name(std::string_view word, const std::vector<std::string>& candidates);

// "; did you mean 'X'?" or "" when nothing is near.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace mox::cli
