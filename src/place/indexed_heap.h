// A binary min-heap over the keys 0..n-1, each present at most once, whose priority can change in
// place: what the cache policies keep their resident experts in (the victim is the top). Every
// operation is O(log n) or O(1), and nothing allocates after reset().
#pragma once

#include "core/error.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace mox::place {

template <typename Priority>
class IndexedMinHeap {
public:
    void reset(int64_t n_keys) {
        heap_.clear();
        heap_.reserve(static_cast<size_t>(n_keys));
        slot_.assign(static_cast<size_t>(n_keys), kAbsent);
        priority_.assign(static_cast<size_t>(n_keys), Priority{});
    }

    int64_t size() const { return static_cast<int64_t>(heap_.size()); }
    bool empty() const { return heap_.empty(); }
    bool contains(int64_t key) const { return slot_[static_cast<size_t>(key)] != kAbsent; }
    int64_t top() const {
        MOX_CHECK(!heap_.empty(), "top() of an empty heap");
        return heap_.front();
    }
    const Priority& priority(int64_t key) const { return priority_[static_cast<size_t>(key)]; }

    void push(int64_t key, Priority p) {
        MOX_CHECK(!contains(key), "key {} pushed twice", key);
        priority_[static_cast<size_t>(key)] = std::move(p);
        slot_[static_cast<size_t>(key)] = heap_.size();
        heap_.push_back(key);
        sift_up(heap_.size() - 1);
    }

    void update(int64_t key, Priority p) {
        MOX_CHECK(contains(key), "key {} is not in the heap", key);
        priority_[static_cast<size_t>(key)] = std::move(p);
        sift_up(slot_[static_cast<size_t>(key)]);
        sift_down(slot_[static_cast<size_t>(key)]);
    }

    void erase(int64_t key) {
        MOX_CHECK(contains(key), "key {} is not in the heap", key);
        const size_t at = slot_[static_cast<size_t>(key)];
        const int64_t last = heap_.back();
        heap_.pop_back();
        slot_[static_cast<size_t>(key)] = kAbsent;
        if (at == heap_.size()) return;  // it was the last one
        place(at, last);  // the last key fills the hole and moves whichever way its priority says
        sift_up(at);
        sift_down(slot_[static_cast<size_t>(last)]);
    }

private:
    static constexpr size_t kAbsent = static_cast<size_t>(-1);

    bool less(size_t a, size_t b) const {
        return priority_[static_cast<size_t>(heap_[a])] < priority_[static_cast<size_t>(heap_[b])];
    }
    void place(size_t at, int64_t key) {
        heap_[at] = key;
        slot_[static_cast<size_t>(key)] = at;
    }
    void swap_slots(size_t a, size_t b) {
        const int64_t key_a = heap_[a];
        place(a, heap_[b]);
        place(b, key_a);
    }
    void sift_up(size_t at) {
        while (at > 0) {
            const size_t parent = (at - 1) / 2;
            if (!less(at, parent)) return;
            swap_slots(at, parent);
            at = parent;
        }
    }
    void sift_down(size_t at) {
        for (;;) {
            const size_t left = 2 * at + 1, right = left + 1;
            size_t smallest = at;
            if (left < heap_.size() && less(left, smallest)) smallest = left;
            if (right < heap_.size() && less(right, smallest)) smallest = right;
            if (smallest == at) return;
            swap_slots(at, smallest);
            at = smallest;
        }
    }

    std::vector<int64_t> heap_;       // keys in heap order
    std::vector<size_t> slot_;        // [n_keys] position in heap_, kAbsent when not in the heap
    std::vector<Priority> priority_;  // [n_keys]
};

}  // namespace mox::place
