#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mox {

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

void parallel_for(int64_t n, int n_threads, const std::function<void(int64_t)>& fn) {
    if (n <= 0) return;
    if (n_threads <= 0) n_threads = hardware_threads();
    n_threads = static_cast<int>(std::min<int64_t>(n_threads, n));
    std::atomic<int64_t> next{0};
    std::exception_ptr first_error;
    std::mutex error_mutex;
    auto worker = [&] {
        for (;;) {
            const int64_t i = next.fetch_add(1);
            if (i >= n) return;
            try {
                fn(i);
            } catch (...) {
                std::lock_guard lock(error_mutex);
                if (!first_error) first_error = std::current_exception();
                next = n;  // stop handing out work
                return;
            }
        }
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < n_threads; ++t) threads.emplace_back(worker);
    worker();
    for (auto& t : threads) t.join();
    if (first_error) std::rethrow_exception(first_error);
}

}  // namespace mox
