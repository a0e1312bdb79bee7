#include "text/pretokenizer.h"

#include "core/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace mox::text {

std::string hf_regex_to_pcre2(std::string_view hf_regex) {
    std::string out;
    out.reserve(hf_regex.size() + 32);
    for (size_t i = 0; i < hf_regex.size(); ++i) {
        const char c = hf_regex[i];
        if (c != '\\' || i + 1 == hf_regex.size()) {
            out += c;
            continue;
        }
        const char next = hf_regex[++i];  // an escape: consume both characters
        if (next == 's') {
            out += "\\p{White_Space}";
        } else if (next == 'S') {
            out += "\\P{White_Space}";
        } else {
            out += '\\';
            out += next;
        }
    }
    return out;
}

namespace {

struct CodeDeleter {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataDeleter {
    void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
struct JitStackDeleter {
    void operator()(pcre2_jit_stack* s) const { pcre2_jit_stack_free(s); }
};

// Per-thread scratch: one match data block (2 offsets suffice: no capture groups are read) and a
// JIT stack larger than PCRE2's 32 KiB default, for long runs of whitespace or letters.
struct ThreadScratch {
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> match{pcre2_match_data_create(1, nullptr)};
    std::unique_ptr<pcre2_jit_stack, JitStackDeleter> jit_stack{
        pcre2_jit_stack_create(64 * 1024, 8 << 20, nullptr)};
    std::unique_ptr<pcre2_match_context, void (*)(pcre2_match_context*)> context{
        pcre2_match_context_create(nullptr), pcre2_match_context_free};
    ThreadScratch() {
        MOX_CHECK(match && context, "pcre2: out of memory");
        if (jit_stack) pcre2_jit_stack_assign(context.get(), nullptr, jit_stack.get());
    }
};

ThreadScratch& thread_scratch() {
    thread_local ThreadScratch scratch;
    return scratch;
}

}  // namespace

struct PreTokenizer::Impl {
    std::unique_ptr<pcre2_code, CodeDeleter> code;
    bool jit = false;
};

PreTokenizer::PreTokenizer(std::string_view hf_regex) : impl_(std::make_unique<Impl>()) {
    const std::string pattern = hf_regex_to_pcre2(hf_regex);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    impl_->code.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                    PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr));
    if (!impl_->code) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof(message));
        fail("tokenizer: pre-tokenizer regex does not compile at offset {}: {} (regex: {})", error_offset,
             reinterpret_cast<const char*>(message), hf_regex);
    }
    impl_->jit = pcre2_jit_compile(impl_->code.get(), PCRE2_JIT_COMPLETE) == 0;
}

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
    ThreadScratch& scratch = thread_scratch();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t done = 0;  // text[0, done) has been emitted
    size_t pos = 0;   // where the next search starts
    while (pos < text.size()) {
        // The caller guarantees valid UTF-8, so PCRE2's own check (O(n) per call) is skipped.
        const int rc = pcre2_match(impl_->code.get(), subject, text.size(), pos, PCRE2_NO_UTF_CHECK,
                                   scratch.match.get(), scratch.context.get());
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(rc, message, sizeof(message));
            fail("tokenizer: pre-tokenizer regex failed at byte {}: {}", pos,
                 reinterpret_cast<const char*>(message));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.match.get());
        const size_t start = ov[0], end = ov[1];
        if (start > done) out.push_back(text.substr(done, start - done));
        if (end > start) {
            out.push_back(text.substr(start, end - start));
            done = end;
            pos = end;
        } else {
            // An empty match: step over one whole character so the search moves on.
            pos = end + 1;
            while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
        }
    }
    if (done < text.size()) out.push_back(text.substr(done));
}

}  // namespace mox::text
