// What every op call needs besides its operands: the thread pool and the instruction-set tier the
// kernels may use (quant/dot.h). One per model instance.
#pragma once

#include "core/thread_pool.h"
#include "quant/dot.h"

namespace mox::ops {

struct Context {
    ThreadPool* pool = nullptr;
    quant::Isa isa = quant::host_isa();  // Isa::scalar selects the reference kernels

    // Runs fn(i) for i < n on the pool (or inline without one).
    template <typename Fn>
    void parallel(int64_t n, Fn&& fn) const {
        if (pool) pool->run(n, fn);
        else
            for (int64_t i = 0; i < n; ++i) fn(i);
    }
    int threads() const { return pool ? pool->size() : 1; }
};

}  // namespace mox::ops
