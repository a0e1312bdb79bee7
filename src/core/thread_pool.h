// A fixed pool of worker threads for per-op parallelism (the calling thread works too).
// run(n, fn) calls fn(i) for i in [0, n) and returns when all are done; tasks are handed out
// dynamically. Pinning to physical cores (hwloc) comes with the fast CPU kernels (issue 4).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mox {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);  // total threads including the caller; <= 0: hardware
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return static_cast<int>(workers_.size()) + 1; }
    // Not re-entrant: fn must not call run() on the same pool.
    void run(int64_t n_tasks, const std::function<void(int64_t)>& fn);

private:
    void worker_loop();
    void drain();

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    const std::function<void(int64_t)>* job_ = nullptr;
    int64_t n_tasks_ = 0;
    int64_t next_ = 0;
    int64_t finished_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
};

}  // namespace mox
