#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace mox {

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
    std::fprintf(stderr, "mox: internal error: %s:%d: check failed: %s%s%s\n", file, line, expr,
                 msg.empty() ? "" : ": ", msg.c_str());
    std::abort();
}

}  // namespace mox
