#include "version.h"

#include <fmt/format.h>

#include "build_commit.h"  // generated at build time: MOX_BUILD_COMMIT
#ifndef MOX_VERSION
#define MOX_VERSION "unknown"
#endif

namespace mox::cli {

std::string version_text() {
#ifdef MOX_HAVE_CUDA
    const char* build = "CUDA build";
#else
    const char* build = "CPU build";
#endif
    return fmt::format("mox {} (commit {}, {})", MOX_VERSION, MOX_BUILD_COMMIT, build);
}

}  // namespace mox::cli
