// Where the machine's CPU time went during a measurement: this process, the hypervisor (steal) and
// everything else (other processes, kernel threads). A hybrid decode keeps every core busy, so any
// other work on the machine preempts one of mox's threads and the whole layer waits for it; `mox
// bench` records these shares for each repetition so that a slow or noisy row can be told apart
// from a slow engine. Linux: /proc/stat and /proc/self/stat; elsewhere nothing is read.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace mox {

// Cumulative clock ticks since boot (all cores), as the kernel counts them.
struct CpuTimes {
    uint64_t total = 0;  // every state of the machine-wide "cpu" line
    uint64_t idle = 0;   // idle + iowait
    uint64_t steal = 0;  // time the hypervisor gave this VM's virtual CPUs to someone else
    uint64_t self = 0;   // this process: user + system time of all its threads
};

// The shares of all cores' time between two readings; each in [0, 1].
struct CpuShares {
    double self = 0;   // this process
    double other = 0;  // busy, but not this process (other processes, the kernel's own threads)
    double steal = 0;  // taken by the hypervisor
};

// Parses /proc/stat's text (its first line, "cpu  user nice system idle iowait irq softirq steal
// ..."; a kernel that reports fewer fields has no steal) and /proc/self/stat's (utime and stime,
// fields 14 and 15 after the parenthesised command name, which may itself hold spaces and ')').
// nullopt when either is malformed.
std::optional<CpuTimes> parse_cpu_times(std::string_view proc_stat, std::string_view self_stat);

// The current reading; nullopt where /proc cannot be read.
std::optional<CpuTimes> read_cpu_times();

// Shares of the interval between two readings; nullopt when no tick passed in between or the
// counters went backwards.
std::optional<CpuShares> cpu_shares(const CpuTimes& before, const CpuTimes& after);

}  // namespace mox
