#include "core/thread_pool.h"

#include "core/parallel.h"

namespace mox {

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0) n_threads = hardware_threads();
    for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

// Takes tasks of the current job until none is left.
void ThreadPool::drain() {
    std::unique_lock lock(mutex_);
    while (job_ && next_ < n_tasks_) {
        const int64_t i = next_++;
        const auto* job = job_;
        lock.unlock();
        (*job)(i);
        lock.lock();
        if (++finished_ == n_tasks_) done_.notify_all();
    }
}

void ThreadPool::worker_loop() {
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        drain();
    }
}

void ThreadPool::run(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
    if (n_tasks <= 0) return;
    if (workers_.empty() || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; ++i) fn(i);
        return;
    }
    {
        std::lock_guard lock(mutex_);
        job_ = &fn;
        n_tasks_ = n_tasks;
        next_ = 0;
        finished_ = 0;
        ++generation_;
    }
    wake_.notify_all();
    drain();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return finished_ == n_tasks_; });
    job_ = nullptr;
}

}  // namespace mox
