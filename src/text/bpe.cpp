#include "text/bpe.h"

#include "core/error.h"
#include "text/byte_level.h"

#include <algorithm>
#include <bit>
#include <functional>

namespace mox::text {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t hash_key(uint64_t k) {
    // A 64-bit finalizer (murmur3's fmix64 constants): ids are small and dense, so mix them.
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

// Merge candidate in the heap: the pair (symbol `left`, its right neighbour) with its rank, and
// the two ids it had when pushed, so a stale entry is recognised when popped.
struct Candidate {
    int32_t rank;
    int32_t left;  // index of the left symbol; symbols keep the index of their first byte
    int32_t left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
};

struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
};

struct Scratch {
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
};

}  // namespace

BpeModel::BpeModel(const Vocab& vocab) : unk_(vocab.unk.value_or(-1)), ignore_merges_(vocab.ignore_merges) {
    // Spelling -> id of the normal tokens (the only ones merges may name).
    std::unordered_map<std::string_view, int32_t> by_spelling;
    by_spelling.reserve(vocab.tokens.size());
    for (int32_t i = 0; i < vocab.size(); ++i) {
        const TokenType t = vocab.type(i);
        if (t == TokenType::tt_normal || t == TokenType::tt_undefined)
            by_spelling.emplace(vocab.tokens[static_cast<size_t>(i)], i);
    }
    for (int b = 0; b < 256; ++b) {
        const auto it = by_spelling.find(bytes_to_mapped(std::string(1, static_cast<char>(b))));
        byte_token_[static_cast<size_t>(b)] = it == by_spelling.end() ? -1 : it->second;
    }

    const size_t capacity = std::bit_ceil(std::max<size_t>(16, vocab.merges.size() * 2));
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (size_t r = 0; r < vocab.merges.size(); ++r) {
        const std::string& m = vocab.merges[r];
        const size_t space = m.find(' ');
        if (space == std::string::npos) fail("tokenizer: merge {} ('{}') has no space", r, m);
        const std::string_view left(m.data(), space), right(m.data() + space + 1, m.size() - space - 1);
        const auto l = by_spelling.find(left), rr = by_spelling.find(right);
        if (l == by_spelling.end() || rr == by_spelling.end())
            fail("tokenizer: merge {} ('{}') names a token that is not in the vocabulary", r, m);
        const auto merged = by_spelling.find(std::string(left) + std::string(right));
        if (merged == by_spelling.end())
            fail("tokenizer: merge {} ('{}') makes a token that is not in the vocabulary", r, m);
        if (find_merge(l->second, rr->second)) continue;  // a repeated merge keeps its first rank
        insert_merge(l->second, rr->second, static_cast<int32_t>(r), merged->second);
        ++n_merges_;
    }
    if (ignore_merges_) {
        for (const auto& [spelling, id] : by_spelling) whole_piece_.emplace(std::string(spelling), id);
    }
}

const BpeModel::Slot* BpeModel::find_merge(int32_t left, int32_t right) const {
    const uint64_t key = pair_key(left, right);
    for (uint64_t i = hash_key(key) & mask_;; i = (i + 1) & mask_) {
        const Slot& s = slots_[i];
        if (s.key == key) return &s;
        if (s.key == kEmpty) return nullptr;
    }
}

void BpeModel::insert_merge(int32_t left, int32_t right, int32_t rank, int32_t merged) {
    const uint64_t key = pair_key(left, right);
    uint64_t i = hash_key(key) & mask_;
    while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
    slots_[i] = Slot{key, rank, merged};
}

void BpeModel::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
    if (bytes.empty()) return;
    if (bytes.size() == 1) {  // the common single-byte piece needs neither merges nor the cache
        const int32_t id = byte_token_[static_cast<uint8_t>(bytes[0])];
        if (id >= 0 || unk_ >= 0) out.push_back(id >= 0 ? id : unk_);
        return;
    }
    if (ignore_merges_) {
        const auto it = whole_piece_.find(bytes_to_mapped(bytes));
        if (it != whole_piece_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    if (bytes.size() > kCacheMaxPieceBytes) {
        merge_piece(bytes, out);
        return;
    }
    thread_local std::string key;
    key.assign(bytes);
    {
        const std::lock_guard lock(cache_mutex_);
        if (const auto it = cache_.find(key); it != cache_.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    const size_t start = out.size();
    merge_piece(bytes, out);
    const std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(key, std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(start), out.end()));
}

void BpeModel::merge_piece(std::string_view bytes, std::vector<int32_t>& out) const {
    thread_local Scratch scratch;
    auto& sym = scratch.symbols;
    sym.clear();
    for (char c : bytes) {
        const int32_t id = byte_token_[static_cast<uint8_t>(c)];
        if (id >= 0) {
            const auto n = static_cast<int32_t>(sym.size());
            sym.push_back(Symbol{id, n - 1, n + 1});
        } else if (unk_ >= 0) {  // as HF's BPE: a missing byte becomes unk (no merge names unk)
            const auto n = static_cast<int32_t>(sym.size());
            sym.push_back(Symbol{unk_, n - 1, n + 1});
        }
    }
    if (sym.empty()) return;
    sym.back().next = -1;
    if (sym.size() == 1) {
        out.push_back(sym[0].id);
        return;
    }

    // A min-heap on (rank, left) kept in the thread's scratch vector so its capacity is reused.
    auto& heap = scratch.heap;
    heap.clear();
    const auto push_pair = [&](int32_t left) {
        if (left < 0) return;
        const int32_t right = sym[static_cast<size_t>(left)].next;
        if (right < 0) return;
        const int32_t lid = sym[static_cast<size_t>(left)].id, rid = sym[static_cast<size_t>(right)].id;
        if (const Slot* s = find_merge(lid, rid)) {
            heap.push_back(Candidate{s->rank, left, lid, rid});
            std::push_heap(heap.begin(), heap.end(), std::greater<>{});
        }
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push_pair(i);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
        const Candidate c = heap.back();
        heap.pop_back();
        Symbol& l = sym[static_cast<size_t>(c.left)];
        // Stale when the left symbol was merged away or changed, or its neighbour changed. Ids only
        // ever grow into longer tokens, so equal ids mean the same pair is still there.
        if (l.id != c.left_id || l.next < 0 || sym[static_cast<size_t>(l.next)].id != c.right_id) continue;
        const Slot* s = find_merge(c.left_id, c.right_id);
        Symbol& r = sym[static_cast<size_t>(l.next)];
        l.id = s->merged;
        l.next = r.next;
        if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = c.left;
        r.id = -1;  // dead
        push_pair(l.prev);
        push_pair(c.left);
    }
    for (int32_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next)
        out.push_back(sym[static_cast<size_t>(i)].id);
}

}  // namespace mox::text
