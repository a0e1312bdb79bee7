#include "core/log.h"

#include <atomic>
#include <cstdio>

namespace mox::log {

namespace {
std::atomic<Level> g_level{Level::info};
const char* level_name(Level l) {
    switch (l) {
        case Level::debug: return "debug";
        case Level::info: return "info";
        case Level::warn: return "warning";
        case Level::error: return "error";
    }
    return "?";
}
}  // namespace

void set_level(Level l) { g_level = l; }
Level level() { return g_level; }
void write(Level l, const std::string& msg) { std::fprintf(stderr, "mox: %s: %s\n", level_name(l), msg.c_str()); }

}  // namespace mox::log
