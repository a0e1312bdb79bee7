#include "core/thread_pool.h"

#include "core/error.h"
#include "core/topology.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MOX_CPU_RELAX() _mm_pause()
#else
#define MOX_CPU_RELAX() std::this_thread::yield()
#endif

namespace mox {

namespace {

// How long an idle worker spins before sleeping: longer than the serial gaps between the ops of a
// decode step, short enough not to burn a core between requests.
constexpr auto kSpinTime = std::chrono::microseconds(200);

// state_ = generation (28 bits) | task count (18 bits) | next index (18 bits). The count travels in the
// same word as the generation, so a worker can never pair one job's index with another job's count.
constexpr int kIndexBits = 18;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
uint64_t generation_of(uint64_t state) { return state >> (2 * kIndexBits); }
int64_t count_of(uint64_t state) { return static_cast<int64_t>((state >> kIndexBits) & kIndexMask); }
int64_t index_of(uint64_t state) { return static_cast<int64_t>(state & kIndexMask); }
constexpr int64_t kMaxTasksPerRound = static_cast<int64_t>(kIndexMask);

}  // namespace

ThreadPool::ThreadPool(int n_threads, bool pin) {
    const Topology& topo = topology();
    if (n_threads <= 0) n_threads = topo.physical_cores;
    MOX_CHECK(n_threads < 4096, "{} threads", n_threads);
    // Workers take cores 1..n-1; the caller is left unbound (threads it creates later inherit its
    // mask) and the scheduler finds it the one free core.
    pinned_ = pin && n_threads <= topo.physical_cores && n_threads > 1;
    for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mutex_);
        stop_.store(true);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

// Claims and runs tasks of `generation` until none is left.
void ThreadPool::work(uint64_t generation) {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (;;) {
        if (generation_of(s) != generation || index_of(s) >= count_of(s)) return;
        // Read after seeing this generation: a successful claim below proves the job is still this one
        // (the next job is published only after every task of this one has finished).
        const auto* job = job_.load(std::memory_order_acquire);
        if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) continue;
        try {
            (*job)(index_of(s));
        } catch (...) {
            std::lock_guard lock(error_mutex_);
            if (!error_) error_ = std::current_exception();
        }
        finished_.fetch_add(1, std::memory_order_acq_rel);
        s = state_.load(std::memory_order_acquire);
    }
}

void ThreadPool::worker_loop(int index) {
    if (pinned_) pin_current_thread_to_core(index);
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = generation_of(state_.load(std::memory_order_acquire));
        if (g == seen && !stop_.load(std::memory_order_acquire)) {
            const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
            for (int i = 0; g == seen && !stop_.load(std::memory_order_relaxed); ++i) {
                MOX_CPU_RELAX();
                g = generation_of(state_.load(std::memory_order_acquire));
                if ((i & 63) == 63 && g == seen && std::chrono::steady_clock::now() > spin_until) {
                    std::unique_lock lock(mutex_);
                    sleepers_.fetch_add(1);
                    wake_.wait(lock, [&] { return stop_.load() || generation_of(state_.load()) != seen; });
                    sleepers_.fetch_sub(1);
                    g = generation_of(state_.load(std::memory_order_acquire));
                }
            }
        }
        if (stop_.load(std::memory_order_acquire)) return;
        seen = g;
        work(g);
    }
}

void ThreadPool::run(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
    if (n_tasks <= 0) return;
    if (workers_.empty() || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; ++i) fn(i);
        return;
    }
    if (n_tasks > kMaxTasksPerRound) {  // more tasks than the state word counts: several rounds
        for (int64_t first = 0; first < n_tasks; first += kMaxTasksPerRound) {
            const std::function<void(int64_t)> part = [&](int64_t i) { fn(first + i); };
            run(std::min(kMaxTasksPerRound, n_tasks - first), part);
        }
        return;
    }
    job_.store(&fn, std::memory_order_relaxed);
    n_tasks_.store(n_tasks, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    const uint64_t generation = (generation_of(state_.load()) + 1) & ((uint64_t{1} << 28) - 1);
    // seq_cst: publishes the job, ordered before the sleepers_ check
    state_.store((generation << (2 * kIndexBits)) | (static_cast<uint64_t>(n_tasks) << kIndexBits));
    if (sleepers_.load() > 0) {
        std::lock_guard lock(mutex_);
        wake_.notify_all();
    }
    work(generation);
    for (int i = 0; finished_.load(std::memory_order_acquire) < n_tasks; ++i) {
        if (i < 4096) MOX_CPU_RELAX();
        else std::this_thread::yield();
    }
    job_.store(nullptr, std::memory_order_relaxed);
    std::exception_ptr error;
    {
        std::lock_guard lock(error_mutex_);
        std::swap(error, error_);
    }
    if (error) std::rethrow_exception(error);
}

}  // namespace mox
