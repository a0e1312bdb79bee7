// What every op call needs besides its operands: the thread pool. One per model instance.
#pragma once

#include "core/thread_pool.h"

namespace mox::ops {

struct Context {
    ThreadPool* pool = nullptr;
};

}  // namespace mox::ops
