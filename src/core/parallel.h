// parallel_for over an index range with plain std::threads, for offline tools (synth, convert);
// per-token work runs on the pinned ThreadPool (core/thread_pool.h).
#pragma once

#include <cstdint>
#include <functional>

namespace mox {

// Calls fn(i) for i in [0, n) on up to n_threads threads (0 = hardware concurrency). Work is
// handed out one index at a time, so uneven items balance. The first exception thrown by fn is
// rethrown on the calling thread after all threads stop.
void parallel_for(int64_t n, int n_threads, const std::function<void(int64_t)>& fn);

int hardware_threads();

}  // namespace mox
