#include "did_you_mean.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>

namespace mox::cli {

namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps.
size_t edit_distance(std::string_view a, std::string_view b) {
    const size_t n = a.size(), m = b.size();
    std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
    for (size_t i = 0; i <= n; ++i) d[i][0] = i;
    for (size_t j = 0; j <= m; ++j) d[0][j] = j;
    for (size_t i = 1; i <= n; ++i)
        for (size_t j = 1; j <= m; ++j) {
            const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    return d[n][m];
}

std::string_view without_dashes(std::string_view s) {
    while (!s.empty() && s.front() == '-') s.remove_prefix(1);
    return s;
}

}  // namespace

std::optional<std::string> nearest_name(std::string_view word, const std::vector<std::string>& candidates) {
    // Dashes are not letters a user mistypes: "-temp" is near "--temp".
    const std::string_view w = without_dashes(word);
    std::optional<std::string> best;
    size_t best_distance = std::max<size_t>(1, w.size() / 3) + 1;
    for (const std::string& c : candidates) {
        const size_t d = edit_distance(w, without_dashes(c));
        if (d < best_distance) best_distance = d, best = c;
    }
    return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
    const auto n = nearest_name(word, candidates);
    return n ? fmt::format("; did you mean '{}'?", *n) : std::string();
}

}  // namespace mox::cli
