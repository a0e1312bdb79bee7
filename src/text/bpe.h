// Byte-level BPE merging of one pre-tokenized piece: the piece's bytes start as byte tokens, and
// the adjacent pair of lowest merge rank (leftmost among equals) is merged until no listed pair
// remains -- the semantics of HF tokenizers' BPE model and llama.cpp.
#pragma once

#include "text/vocab.h"

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mox::text {

class BpeModel {
  public:
    // Resolves every merge "a b" to token ids; throws mox::Error when a part or the merged
    // spelling is not a normal token of `vocab`.
    explicit BpeModel(const Vocab& vocab);

    // Appends the ids of the piece `bytes` (raw bytes, not the mapped spelling). A byte whose
    // token the vocabulary lacks becomes `unk` when there is one and is dropped otherwise.
    void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;

    size_t n_merges() const { return n_merges_; }

  private:
    struct Slot {
        uint64_t key = kEmpty;  // (left << 32) | right
        int32_t rank = 0;
        int32_t merged = 0;
    };
    static constexpr uint64_t kEmpty = ~uint64_t{0};

    const Slot* find_merge(int32_t left, int32_t right) const;
    void merge_piece(std::string_view bytes, std::vector<int32_t>& out) const;
    void insert_merge(int32_t left, int32_t right, int32_t rank, int32_t merged);

    std::array<int32_t, 256> byte_token_{};  // -1: the vocabulary has no token for that byte
    std::vector<Slot> slots_;                // open addressing, power-of-two size, <= 50% full
    uint64_t mask_ = 0;
    size_t n_merges_ = 0;
    int32_t unk_ = -1;
    bool ignore_merges_ = false;
    std::unordered_map<std::string, int32_t> whole_piece_;  // mapped spelling -> id; ignore_merges only

    // Results for short pieces (words repeat), shared by all threads under a mutex; emptied when
    // it reaches kCacheEntries.
    static constexpr size_t kCacheEntries = 1 << 16;
    static constexpr size_t kCacheMaxPieceBytes = 48;
    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace mox::text
