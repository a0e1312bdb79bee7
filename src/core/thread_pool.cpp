#include "core/thread_pool.h"

#include "core/error.h"
#include "core/topology.h"
#include "core/tuning.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MOX_CPU_RELAX() _mm_pause()
#else
#define MOX_CPU_RELAX() std::this_thread::yield()
#endif

namespace mox {

namespace {

// state_ = generation (28 bits) | task count (18 bits) | next index (18 bits). The count travels in the
// same word as the generation, so a worker can never pair one job's index with another job's count.
constexpr int kIndexBits = 18;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
uint64_t generation_of(uint64_t state) { return state >> (2 * kIndexBits); }
int64_t count_of(uint64_t state) { return static_cast<int64_t>((state >> kIndexBits) & kIndexMask); }
int64_t index_of(uint64_t state) { return static_cast<int64_t>(state & kIndexMask); }
// A claim that finds no task left still adds 1 to the index; each thread makes at most one such claim
// per job (< 4096 threads), so the index never carries into the count.
constexpr int64_t kMaxThreads = 4096;
constexpr int64_t kMaxTasksPerRound = static_cast<int64_t>(kIndexMask) - kMaxThreads;

}  // namespace

ThreadPool::ThreadPool(int n_threads, bool pin) {
    const Topology& topo = topology();
    if (n_threads <= 0) n_threads = topo.physical_cores;
    MOX_CHECK(n_threads < kMaxThreads, "{} threads", n_threads);
    spin_ns_.store(tuning().spin_us * 1000);
    // Workers take cores 1..n-1; the caller is left unbound (threads it creates later inherit its
    // mask) and the scheduler finds it the one free core.
    pinned_ = pin && n_threads <= topo.physical_cores && n_threads > 1;
    for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true);
    wake_epoch_.fetch_add(1);
    wake_epoch_.notify_all();
    for (auto& t : workers_) t.join();
}

// A sleeper registers in sleepers_, reads the epoch, then checks its wake condition before waiting on
// that epoch value; a waker changes the condition, then reads sleepers_ and bumps the epoch (all
// seq_cst). A sleeper that missed the change registered before the waker read sleepers_, and read the
// epoch before the bump, so its wait returns.
void ThreadPool::wake_sleepers() {
    if (sleepers_.load() == 0) return;
    wake_epoch_.fetch_add(1);
    wake_epoch_.notify_all();
}

void ThreadPool::set_spin(std::chrono::microseconds spin) {
    spin_ns_.store(std::max<int64_t>(0, spin.count()) * 1000, std::memory_order_relaxed);
}

std::chrono::microseconds ThreadPool::spin() const {
    return std::chrono::microseconds(spin_ns_.load(std::memory_order_relaxed) / 1000);
}

void ThreadPool::hold() {
    holds_.fetch_add(1);
    wake_sleepers();
}

void ThreadPool::release() {
    const int before = holds_.fetch_sub(1);
    MOX_CHECK(before > 0, "ThreadPool::release without hold");
}

// Claims and runs tasks until none is left; returns how many it ran. Starts from a job of
// `generation`; a claim can only land in a newer job while this call has run none of the older one
// (that job cannot finish, so no newer one is published), and then the count belongs to the newer one.
int64_t ThreadPool::work(uint64_t generation) {
    int64_t done = 0;
    for (;;) {
        uint64_t s = state_.load(std::memory_order_acquire);
        if (generation_of(s) != generation || index_of(s) >= count_of(s)) return done;
        s = state_.fetch_add(1, std::memory_order_acq_rel);
        if (index_of(s) >= count_of(s)) return done;
        // The claimed task's job is the one published with generation_of(s): the next is published only
        // after this task has been counted as finished.
        const TaskFn* job = job_.load(std::memory_order_acquire);
        try {
            (*job)(index_of(s));
        } catch (...) {
            std::lock_guard lock(error_mutex_);
            if (!error_) error_ = std::current_exception();
        }
        ++done;
        generation = generation_of(s);
    }
}

bool ThreadPool::wake_condition(uint64_t seen) const {
    return stop_.load() || generation_of(state_.load()) != seen || holds_.load() > 0;
}

void ThreadPool::worker_loop(int index) {
    if (pinned_) pin_current_thread_to_core(index);
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = generation_of(state_.load(std::memory_order_acquire));
        if (g == seen && !stop_.load(std::memory_order_acquire)) {
            auto spin_until =
                std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns_.load(std::memory_order_relaxed));
            for (int i = 0; g == seen && !stop_.load(std::memory_order_relaxed); ++i) {
                MOX_CPU_RELAX();
                g = generation_of(state_.load(std::memory_order_acquire));
                if ((i & 63) == 63 && g == seen && holds_.load(std::memory_order_relaxed) == 0 &&
                    std::chrono::steady_clock::now() > spin_until) {
                    sleepers_.fetch_add(1);
                    sleeps_.fetch_add(1, std::memory_order_relaxed);
                    for (;;) {
                        const uint32_t epoch = wake_epoch_.load();
                        if (wake_condition(seen)) break;
                        wake_epoch_.wait(epoch);
                    }
                    sleepers_.fetch_sub(1);
                    g = generation_of(state_.load(std::memory_order_acquire));
                    // Woken by a hold (or spuriously): spin a full window again.
                    spin_until = std::chrono::steady_clock::now() +
                                 std::chrono::nanoseconds(spin_ns_.load(std::memory_order_relaxed));
                }
            }
        }
        if (stop_.load(std::memory_order_acquire)) return;
        seen = g;
        const int64_t done = work(g);
        if (done > 0) finished_.fetch_add(done, std::memory_order_acq_rel);
    }
}

void ThreadPool::run(int64_t n_tasks, TaskFn fn) {
    if (n_tasks <= 0) return;
    if (workers_.empty() || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; ++i) fn(i);
        return;
    }
    if (n_tasks > kMaxTasksPerRound) {  // more tasks than the state word counts: several rounds
        for (int64_t first = 0; first < n_tasks; first += kMaxTasksPerRound) {
            auto part = [&](int64_t i) { fn(first + i); };
            run(std::min(kMaxTasksPerRound, n_tasks - first), part);
        }
        return;
    }
    job_.store(&fn, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    const uint64_t generation = (generation_of(state_.load()) + 1) & ((uint64_t{1} << 28) - 1);
    // seq_cst: publishes the job, ordered before the sleepers_ check
    state_.store((generation << (2 * kIndexBits)) | (static_cast<uint64_t>(n_tasks) << kIndexBits));
    wake_sleepers();
    const int64_t mine = caller_works_.load(std::memory_order_relaxed) ? work(generation) : 0;
    if (mine > 0) finished_.fetch_add(mine, std::memory_order_acq_rel);
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
