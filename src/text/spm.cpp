#include "text/spm.h"

#include <fmt/format.h>

#include "core/error.h"

#include <algorithm>
#include <cstdint>

namespace mox::text {
namespace {

// Bytes of the UTF-8 character that starts with `lead`, judged by the lead byte alone (as llama.cpp
// splits): a stray continuation byte is one symbol, a truncated sequence ends at the text's end.
size_t utf8_char_bytes(uint8_t lead) {
    if (lead < 0xC0) return 1;
    if (lead < 0xE0) return 2;
    if (lead < 0xF0) return 3;
    return 4;
}

// A run of text: one character at first, longer as merges grow it. Merging always folds the right
// symbol into the left one, so symbol 0 stays the head of the list and a symbol's bytes are
// text[start, start + len); len 0 marks a symbol merged away.
struct Symbol {
    uint32_t start, len;
    int32_t prev, next;  // -1 at the ends
};

// Candidate merge of `left` with `right`; `len` is the bytes the two had when it was pushed, so an
// entry made stale by another merge is recognised when popped (lengths only grow).
struct Candidate {
    float score;
    int32_t left, right;
    uint32_t len;
};

// Heap order: the highest score on top, the leftmost among equal scores.
bool lower_priority(const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
}

struct Scratch {
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
};

}  // namespace

std::string spm_escape(std::string_view text, bool space_prefix) {
    std::string out;
    out.reserve(text.size() + text.size() / 4 + 3);
    if (space_prefix) out += kSpmSpace;
    for (char c : text) {
        if (c == ' ')
            out += kSpmSpace;
        else
            out += c;
    }
    return out;
}

std::string spm_unescape(std::string_view piece) {
    std::string out;
    out.reserve(piece.size());
    for (size_t i = 0; i < piece.size();) {
        if (piece.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
            out += ' ';
            i += kSpmSpace.size();
        } else {
            out += piece[i++];
        }
    }
    return out;
}

SpmModel::SpmModel(const Vocab& vocab) : scores_(vocab.scores) {
    by_text_.reserve(vocab.tokens.size());
    for (int32_t i = 0; i < vocab.size(); ++i) {
        const std::string& t = vocab.tokens[static_cast<size_t>(i)];
        by_text_.insert_or_assign(t, i);  // a repeated spelling resolves to its last id, as in llama.cpp
        max_token_bytes_ = std::max(max_token_bytes_, t.size());
    }
    const int32_t unk = vocab.unk.value_or(-1);
    for (int b = 0; b < 256; ++b) {
        int32_t id = find(fmt::format("<0x{:02X}>", b));
        if (id < 0) id = find(std::string(1, static_cast<char>(b)));
        byte_token_[static_cast<size_t>(b)] = id >= 0 ? id : unk;
    }
}

int32_t SpmModel::find(std::string_view text) const {
    if (text.size() > max_token_bytes_) return -1;
    const auto it = by_text_.find(text);
    return it == by_text_.end() ? -1 : it->second;
}

void SpmModel::encode(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    if (text.size() > UINT32_MAX) fail("tokenizer: a text of {} bytes is too long to encode", text.size());
    thread_local Scratch scratch;
    auto& sym = scratch.symbols;
    sym.clear();
    for (size_t pos = 0; pos < text.size();) {
        const size_t n = std::min(utf8_char_bytes(static_cast<uint8_t>(text[pos])), text.size() - pos);
        const auto index = static_cast<int32_t>(sym.size());
        sym.push_back(Symbol{static_cast<uint32_t>(pos), static_cast<uint32_t>(n), index - 1, index + 1});
        pos += n;
    }
    sym.back().next = -1;

    auto& heap = scratch.heap;
    heap.clear();
    // Neighbours are adjacent in the text, so their concatenation is a substring: no copies.
    const auto push_pair = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const Symbol& l = sym[static_cast<size_t>(left)];
        const uint32_t len = l.len + sym[static_cast<size_t>(right)].len;
        const int32_t id = find(text.substr(l.start, len));
        if (id < 0) return;
        heap.push_back(Candidate{scores_[static_cast<size_t>(id)], left, right, len});
        std::push_heap(heap.begin(), heap.end(), lower_priority);
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push_pair(i, i + 1);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), lower_priority);
        const Candidate c = heap.back();
        heap.pop_back();
        Symbol& l = sym[static_cast<size_t>(c.left)];
        Symbol& r = sym[static_cast<size_t>(c.right)];
        if (l.len == 0 || r.len == 0 || l.len + r.len != c.len) continue;  // stale
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = c.left;
        push_pair(l.prev, c.left);
        push_pair(c.left, l.next);
    }

    for (int32_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
        const Symbol& s = sym[static_cast<size_t>(i)];
        const std::string_view piece = text.substr(s.start, s.len);
        if (const int32_t id = find(piece); id >= 0) {
            out.push_back(id);
            continue;
        }
        for (char b : piece)  // byte fallback; a byte without any token is dropped
            if (const int32_t id = byte_token_[static_cast<uint8_t>(b)]; id >= 0) out.push_back(id);
    }
}

}  // namespace mox::text
