// Stop strings for streamed text: generation ends where one of them appears, and the text before it
// is all the client ever sees. A piece of text that could still turn out to be the start of a stop
// string is held back until the next tokens decide it (so "Obs" is not sent while "Observation:"
// may be completing); everything else goes out as soon as it is generated.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mox::engine {

// The length of the longest tail of `text` that is a proper prefix of `tag`: how much of the text
// must be held back while `tag` may still be completing (0 when none could).
size_t partial_match_tail(std::string_view text, std::string_view tag);

class StopStrings {
public:
    // Empty strings are ignored (they would stop before the first token).
    explicit StopStrings(std::vector<std::string> stops);

    // Adds generated text; returns what may be sent now. Once a stop string has completed, the
    // result ends before it, stopped() is true and every later call returns nothing.
    std::string push(std::string_view text);
    // The end of generation: the held-back text (no stop string can complete any more).
    std::string finish();
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string held_;  // generated, not sent yet: shorter than the longest stop string
    bool stopped_ = false;
};

}  // namespace mox::engine
