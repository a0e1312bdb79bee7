// A fixed pool of worker threads for per-op parallelism (the calling thread works too).
// run(n, fn) calls fn(i) for i in [0, n) and returns when all are done; tasks are handed out one at a
// time from an atomic counter, so uneven tasks balance.
//
// Decode calls run() hundreds of times per token with tasks of a few microseconds, so workers spin
// (with pause) for a short while after each job before sleeping on a condition variable: a wake-up
// through the kernel costs more than many of those tasks. Threads are pinned to physical cores
// (core/topology.h) unless asked not to or there are more threads than cores.
// pinned() says the pool tried; a refused pin leaves that worker unbound.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mox {

class ThreadPool {
public:
    // n_threads: total including the caller; <= 0: one per physical core.
    explicit ThreadPool(int n_threads, bool pin = true);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return static_cast<int>(workers_.size()) + 1; }
    bool pinned() const { return pinned_; }
    // Not re-entrant: fn must not call run() on the same pool. The first exception a task throws is
    // rethrown here after every task has finished.
    void run(int64_t n_tasks, const std::function<void(int64_t)>& fn);

private:
    void worker_loop(int index);
    void work(uint64_t generation);

    std::vector<std::thread> workers_;
    bool pinned_ = false;
    // generation | task count | index of the next task (thread_pool.cpp). A worker claims a task with a
    // CAS on the whole word, so a late worker can never take a task of another job.
    std::atomic<uint64_t> state_{0};
    std::atomic<const std::function<void(int64_t)>*> job_{nullptr};
    std::atomic<int64_t> n_tasks_{0};
    std::atomic<int64_t> finished_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::condition_variable wake_;
    std::mutex error_mutex_;
    std::exception_ptr error_;
};

}  // namespace mox
