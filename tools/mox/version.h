// mox's version and the commit it was built from (`mox version`, `mox --version`).
#pragma once

#include <string>

namespace mox::cli {

// "mox 0.1.0 (commit 1a2b3c4, CPU build)": the project version from CMake, the commit `git
// describe` gave at build time ("unknown" when built outside a git checkout, e.g. from a tarball).
std::string version_text();

}  // namespace mox::cli
