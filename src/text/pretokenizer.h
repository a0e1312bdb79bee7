// Regex pre-tokenizer (HF "Split" with Isolated behaviour): cuts valid UTF-8 text into pieces at
// the matches of a regex; text between matches also becomes a piece. Runs on PCRE2 in UTF + UCP
// mode (JIT-compiled when available), so \p{L}, \p{N}, \p{M} use PCRE2's Unicode tables.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mox::text {

// Translates an HF/Oniguruma regex to PCRE2: \s and \S become \p{White_Space} and
// \P{White_Space} (Oniguruma's and Rust's \s are that property; PCRE2's UCP \s also takes
// U+180E). Everything else is passed through.
std::string hf_regex_to_pcre2(std::string_view hf_regex);

class PreTokenizer {
  public:
    // `hf_regex` in HF tokenizers syntax; throws mox::Error when it does not compile.
    explicit PreTokenizer(std::string_view hf_regex);
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;
    ~PreTokenizer();

    // Appends the pieces of `text` (valid UTF-8; the caller checks) to `out`; the pieces view
    // `text` and cover it exactly, in order. Thread-safe.
    void split(std::string_view text, std::vector<std::string_view>& out) const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mox::text
