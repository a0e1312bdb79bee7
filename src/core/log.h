// Minimal leveled logging to stderr. Output that a user asked for goes to stdout instead.
#pragma once

#include <fmt/format.h>

namespace mox::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

void set_level(Level level);
Level level();
void write(Level level, const std::string& msg);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
    if (level() <= Level::info) write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
    if (level() <= Level::warn) write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
    if (level() <= Level::debug) write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace mox::log
