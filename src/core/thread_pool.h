// A fixed pool of worker threads for per-op parallelism (the calling thread works too).
// run(n, fn) calls fn(i) for i in [0, n) and returns when all are done; tasks are handed out one at a
// time from an atomic counter, so uneven tasks balance.
//
// Decode calls run() hundreds of times per token with tasks of a few microseconds, so workers spin
// (with pause) for a while after each job before sleeping (a futex wait): a wake-up through
// the kernel costs more than many of those tasks. The spin window (tuning().spin_us, core/tuning.h;
// set_spin()) should outlast the serial gaps between the pool's jobs, e.g. the GPU's work between two
// host expert layers; hold() keeps the workers spinning however long the gaps are, for a stretch of
// work the caller knows is dense (a decode step). Threads are pinned to physical cores
// (core/topology.h) unless asked not to or there are more threads than cores.
// pinned() says the pool tried; a refused pin leaves that worker unbound.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace mox {

// A non-owning reference to a callable `void(int64_t)`. run() takes one instead of a std::function,
// which heap-allocates for lambdas whose captures outgrow its small buffer: a decode step would
// allocate on every op. The callable must outlive the call that receives the reference.
class TaskFn {
public:
    template <typename F>
        requires(!std::is_same_v<std::remove_cvref_t<F>, TaskFn> && std::is_invocable_v<F&, int64_t>)
    TaskFn(F&& f)  // NOLINT: implicit, so lambdas convert at the call
        : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
          call_([](void* o, int64_t i) { (*static_cast<std::remove_reference_t<F>*>(o))(i); }) {}
    void operator()(int64_t i) const { call_(obj_, i); }

private:
    void* obj_;
    void (*call_)(void*, int64_t);
};

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
    void run(int64_t n_tasks, TaskFn fn);

    // How long an idle worker spins before it sleeps (0: sleep at once).
    void set_spin(std::chrono::microseconds spin);
    std::chrono::microseconds spin() const;

    // While at least one hold is active, idle workers spin and never sleep; hold() also wakes sleeping
    // workers, so a caller can warm the pool up before the jobs it knows are coming. Each hold() needs
    // one release(); Hold does both.
    void hold();
    void release();
    struct Hold {
        explicit Hold(ThreadPool& p) : pool(&p) { pool->hold(); }
        ~Hold() { pool->release(); }
        Hold(const Hold&) = delete;
        Hold& operator=(const Hold&) = delete;
        ThreadPool* pool;
    };

    // Whether run()'s caller takes tasks too (default). A caller that shares its core with another busy
    // thread (e.g. a CUDA callback thread next to a thread spinning on the GPU) can be preempted for
    // a scheduler slice while holding a task; an idle caller only waits.
    void set_caller_works(bool works) { caller_works_.store(works, std::memory_order_relaxed); }
    bool caller_works() const { return caller_works_.load(std::memory_order_relaxed); }

    // Times the workers went to sleep since the pool started (tests, benchmarks).
    int64_t sleeps() const { return sleeps_.load(std::memory_order_relaxed); }

private:
    void worker_loop(int index);
    int64_t work(uint64_t generation);
    bool wake_condition(uint64_t seen) const;
    void wake_sleepers();

    std::vector<std::thread> workers_;
    bool pinned_ = false;
    // generation | task count | index of the next task (thread_pool.cpp). A claim is one fetch_add on
    // the whole word: the old value names the job (generation) and the task, so a late worker can only
    // ever take a real task of the job that is running. Own cache line: every claim writes it.
    alignas(64) std::atomic<uint64_t> state_{0};
    std::atomic<const TaskFn*> job_{nullptr};
    alignas(64) std::atomic<int64_t> finished_{0};  // tasks done, added once per worker per job
    alignas(64) std::atomic<int> sleepers_{0};
    std::atomic<int> holds_{0};
    std::atomic<int64_t> spin_ns_{0};
    std::atomic<int64_t> sleeps_{0};
    // Sleepers wait on this word (a futex), bumped whenever one of them must look again: a new job, a
    // hold, the destructor. Each wakes on its own, with no mutex to take in turn as with a condition
    // variable, so fifteen sleeping workers resume in parallel.
    std::atomic<uint32_t> wake_epoch_{0};
    std::atomic<bool> stop_{false};
    std::atomic<bool> caller_works_{true};
    std::mutex error_mutex_;
    std::exception_ptr error_;
};

}  // namespace mox
