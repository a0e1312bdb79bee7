#include "text/tokenizer.h"

#include "core/error.h"
#include "text/byte_level.h"
#include "text/normalize.h"
#include "text/utf8.h"

#include <algorithm>

namespace mox::text {
namespace {

Vocab validated(Vocab vocab) {
    vocab.validate();
    return vocab;
}

// "<0xAB>" -> the byte 0xAB (SentencePiece byte tokens); nullopt for anything else.
std::optional<char> parse_byte_token(std::string_view s) {
    if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return std::nullopt;
    int v = 0;
    for (char c : s.substr(3, 2)) {
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else
            return std::nullopt;
    }
    return static_cast<char>(v);
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(validated(std::move(vocab))) {
    const bool spm = vocab_.sentencepiece();
    if (spm) {
        spm_ = std::make_unique<SpmModel>(vocab_);
    } else {
        pre_ = std::make_unique<PreTokenizer>(vocab_.effective_pre_regex());
        bpe_ = std::make_unique<BpeModel>(vocab_);
    }
    pieces_.resize(vocab_.tokens.size());
    special_.assign(vocab_.tokens.size(), false);
    for (int32_t i = 0; i < vocab_.size(); ++i) {
        const std::string& spelling = vocab_.tokens[static_cast<size_t>(i)];
        std::string& piece = pieces_[static_cast<size_t>(i)];
        TokenType type = vocab_.type(i);
        // llama.cpp makes an end marker a control token whatever the file says (Phi's <|end|>).
        if (type != TokenType::tt_unused && is_end_marker(spelling)) type = TokenType::tt_control;
        const bool special = type == TokenType::tt_control || type == TokenType::tt_unknown;
        special_[static_cast<size_t>(i)] = special;
        if (special || type == TokenType::tt_user_defined) {
            piece = spelling;  // stored as literal text
            const bool rstrip = std::binary_search(vocab_.rstrip.begin(), vocab_.rstrip.end(), i);
            added_.push_back(Added{spelling, i, special, rstrip});
            continue;
        }
        switch (type) {
            case TokenType::tt_unused:
                break;  // padding rows decode to nothing
            case TokenType::tt_byte:
                if (auto b = parse_byte_token(spelling))
                    piece.assign(1, *b);
                else
                    piece = spelling;
                break;
            case TokenType::tt_undefined:
                if (spm) break;  // llama.cpp renders nothing for them
                [[fallthrough]];
            default:
                if (spm) {
                    piece = spm_unescape(spelling);
                } else if (auto bytes = mapped_to_bytes(spelling)) {
                    // Normal tokens are in the byte-level spelling; one that is not (a malformed
                    // vocabulary) decodes to its literal text, as HF's ByteLevel decoder does.
                    piece = std::move(*bytes);
                } else {
                    piece = spelling;
                }
        }
    }
    std::sort(added_.begin(), added_.end(), [](const Added& a, const Added& b) {
        if (a.text[0] != b.text[0]) return static_cast<uint8_t>(a.text[0]) < static_cast<uint8_t>(b.text[0]);
        return a.text.size() > b.text.size();
    });
    for (const Added& a : added_) added_first_byte_[static_cast<uint8_t>(a.text[0])] = true;
    eog_ = vocab_.end_of_generation();
}

const Tokenizer::Added* Tokenizer::match_added(std::string_view text, size_t pos, bool parse_special) const {
    const auto first = static_cast<uint8_t>(text[pos]);
    auto it = std::lower_bound(added_.begin(), added_.end(), first,
                               [](const Added& a, uint8_t b) { return static_cast<uint8_t>(a.text[0]) < b; });
    // Candidates with this first byte are ordered longest first, so the first hit is the longest.
    for (; it != added_.end() && static_cast<uint8_t>(it->text[0]) == first; ++it) {
        if (it->control && !parse_special) continue;
        if (text.compare(pos, it->text.size(), it->text) == 0) return &*it;
    }
    return nullptr;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (options.add_special && vocab_.add_bos) out.push_back(*vocab_.bos);
    // SentencePiece: the space prefix goes before the first span and every span after an added
    // token (llama.cpp), and an empty span is no span.
    bool after_added = true;
    const auto encode_text = [&](std::string_view span) {
        if (!spm_) return encode_span(span, out);
        if (span.empty()) return;
        spm_->encode(spm_escape(span, vocab_.add_space_prefix && after_added), out);
        after_added = false;
    };
    size_t span_start = 0;
    for (size_t i = 0; i < text.size();) {
        const Added* added = added_first_byte_[static_cast<uint8_t>(text[i])]
                                 ? match_added(text, i, options.parse_special)
                                 : nullptr;
        if (!added) {
            ++i;
            continue;
        }
        encode_text(text.substr(span_start, i - span_start));
        out.push_back(added->id);
        after_added = true;
        i += added->text.size();
        if (added->rstrip)  // C isspace, as llama.cpp strips
            while (i < text.size() && (text[i] == ' ' || (text[i] >= '\t' && text[i] <= '\r'))) ++i;
        span_start = i;
    }
    encode_text(text.substr(span_start));
    if (options.add_special && vocab_.add_eos) out.push_back(*vocab_.eos);
    return out;
}

void Tokenizer::encode_span(std::string_view span, std::vector<int32_t>& out) const {
    size_t run_start = 0;
    uint32_t cp = 0;
    for (size_t i = 0; i < span.size();) {
        if (static_cast<uint8_t>(span[i]) < 0x80) {
            ++i;
            continue;
        }
        const int n = utf8_decode(span, i, cp);
        if (n > 0) {
            i += static_cast<size_t>(n);
            continue;
        }
        // Ill-formed bytes: each is a piece of its own (its byte token), so it round-trips.
        encode_valid_run(span.substr(run_start, i - run_start), out);
        const auto bad = static_cast<size_t>(utf8_invalid_length(span, i));
        for (size_t k = 0; k < bad; ++k) bpe_->encode_piece(span.substr(i + k, 1), out);
        i += bad;
        run_start = i;
    }
    encode_valid_run(span.substr(run_start), out);
}

void Tokenizer::encode_valid_run(std::string_view run, std::vector<int32_t>& out) const {
    if (run.empty()) return;
    std::string normalized;
    if (vocab_.normalizer == Normalizer::nfc) {
        normalized = nfc(run);
        run = normalized;
    }
    thread_local std::vector<std::string_view> pieces;
    pieces.clear();
    pre_->split(run, pieces);
    for (std::string_view piece : pieces) bpe_->encode_piece(piece, out);
}

void Tokenizer::check_id(int32_t id) const {
    if (id < 0 || id >= vocab_.size())
        fail("tokenizer: token id {} is outside the vocabulary of {} tokens", id, vocab_.size());
}

const std::string& Tokenizer::token_piece(int32_t id) const {
    check_id(id);
    return pieces_[static_cast<size_t>(id)];
}

bool Tokenizer::is_special(int32_t id) const {
    check_id(id);
    return special_[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
    std::string out;
    for (size_t k = 0; k < ids.size(); ++k) {
        const int32_t id = ids[k];
        check_id(id);
        if (options.skip_special && special_[static_cast<size_t>(id)]) continue;
        std::string_view piece = pieces_[static_cast<size_t>(id)];
        // The space prefix comes off the first token only, whatever it is (llama.cpp's detokenize).
        if (k == 0 && spm_ && vocab_.add_space_prefix && piece.starts_with(' ')) piece.remove_prefix(1);
        out += piece;
    }
    return options.lossy ? utf8_lossy(out) : out;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
    return std::binary_search(eog_.begin(), eog_.end(), id);
}

DecodeStream::DecodeStream(const Tokenizer& tokenizer, DecodeOptions options)
    : tokenizer_(tokenizer), options_(options) {}

std::string DecodeStream::push(int32_t id) {
    const std::string& piece = tokenizer_.token_piece(id);
    if (!(options_.skip_special && tokenizer_.is_special(id))) pending_ += piece;
    const size_t complete = utf8_complete_prefix(pending_);
    std::string out = utf8_lossy(std::string_view(pending_).substr(0, complete));
    pending_.erase(0, complete);
    return out;
}

std::string DecodeStream::finish() {
    std::string out = utf8_lossy(pending_);
    pending_.clear();
    return out;
}

}  // namespace mox::text
