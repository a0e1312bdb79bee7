#include "core/cpu_times.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace mox {

namespace {

// Whitespace-separated integers of `text` from its start, as many as parse (signed: /proc/self/stat's
// tpgid is -1 without a controlling terminal).
std::vector<int64_t> leading_numbers(std::string_view text) {
    std::vector<int64_t> out;
    size_t i = 0;
    while (true) {
        while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
        if (i >= text.size() || text[i] == '\n') break;
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
        if (ec != std::errc()) break;
        out.push_back(v);
        i = static_cast<size_t>(end - text.data());
    }
    return out;
}

std::string read_file(const char* path) {
    std::ifstream in(path);
    return in ? std::string(std::istreambuf_iterator<char>(in), {}) : std::string();
}

}  // namespace

std::optional<CpuTimes> parse_cpu_times(std::string_view proc_stat, std::string_view self_stat) {
    // "cpu " (the machine-wide line; "cpu0" and so on follow it).
    if (proc_stat.substr(0, 4) != "cpu ") return std::nullopt;
    const std::vector<int64_t> f = leading_numbers(proc_stat.substr(4));
    if (f.size() < 4) return std::nullopt;  // user nice system idle at least
    if (std::any_of(f.begin(), f.end(), [](int64_t v) { return v < 0; })) return std::nullopt;
    auto at = [&](size_t i) { return i < f.size() ? static_cast<uint64_t>(f[i]) : uint64_t{0}; };
    CpuTimes t;
    // user nice system idle iowait irq softirq steal: disjoint, together all time. Guest time (fields
    // 9 and 10) is already inside user and nice.
    for (size_t i = 0; i < 8; ++i) t.total += at(i);
    t.idle = at(3) + at(4);
    t.steal = at(7);
    // The command name sits in parentheses and may contain anything: fields restart after the last ')'.
    const size_t close = self_stat.rfind(')');
    if (close == std::string_view::npos) return std::nullopt;
    std::string_view rest = self_stat.substr(close + 1);
    // Field 3 (state) is a letter; skip it, then fields 4.. are numbers up to utime (14), stime (15).
    const size_t state = rest.find_first_not_of(' ');
    if (state == std::string_view::npos) return std::nullopt;
    rest = rest.substr(state + 1);
    const std::vector<int64_t> g = leading_numbers(rest);
    if (g.size() < 12 || g[10] < 0 || g[11] < 0) return std::nullopt;  // fields 4..15
    t.self = static_cast<uint64_t>(g[10] + g[11]);
    return t;
}

std::optional<CpuTimes> read_cpu_times() {
    const std::string stat = read_file("/proc/stat"), self = read_file("/proc/self/stat");
    if (stat.empty() || self.empty()) return std::nullopt;
    return parse_cpu_times(stat, self);
}

std::optional<CpuShares> cpu_shares(const CpuTimes& before, const CpuTimes& after) {
    if (after.total <= before.total || after.idle < before.idle || after.steal < before.steal ||
        after.self < before.self)
        return std::nullopt;
    const auto total = static_cast<double>(after.total - before.total);
    const auto idle = static_cast<double>(after.idle - before.idle);
    const auto steal = static_cast<double>(after.steal - before.steal);
    const auto self = static_cast<double>(after.self - before.self);
    auto share = [&](double x) { return std::clamp(x / total, 0.0, 1.0); };
    // The process's own ticks and the machine's are sampled separately: clamp the difference.
    return CpuShares{.self = share(self), .other = share(total - idle - steal - self), .steal = share(steal)};
}

}  // namespace mox
