// Errors. Two kinds (STYLE.md #10):
//  - mox::Error: recoverable, caused by input (bad file, bad flag, plan that cannot fit). Carries a
//    message that names what failed and where; the CLI prints it on one line and exits 1.
//  - MOX_CHECK: an internal invariant. Failing it is a bug in mox, so it aborts with the location.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace mox {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws mox::Error with an fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw Error(fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace mox

#define MOX_CHECK(cond, ...)                                                                  \
    do {                                                                                      \
        if (!(cond)) ::mox::check_failed(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__)); \
    } while (0)
