// A stable sort that needs no temporary buffer. std::stable_sort's buffer (operator new(nothrow),
// released through return_temporary_buffer) trips AddressSanitizer's alloc-dealloc-mismatch check
// with GCC 12's libstdc++; ties are broken by original position instead, which is just as stable.
#pragma once

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

namespace mox::text {

template <typename T, typename Less>
void stable_sort_by_index(std::vector<T>& items, Less less) {
    std::vector<size_t> order(items.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        if (less(items[a], items[b])) return true;
        if (less(items[b], items[a])) return false;
        return a < b;
    });
    std::vector<T> sorted;
    sorted.reserve(items.size());
    for (size_t i : order) sorted.push_back(std::move(items[i]));
    items = std::move(sorted);
}

}  // namespace mox::text
