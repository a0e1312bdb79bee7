#include "core/read_bandwidth.h"

#include "core/error.h"
#include "core/units.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace mox {

namespace {

volatile uint64_t g_sink = 0;  // keeps the sums, so the reads cannot be optimised away

// Runs fn(i) for i in [0, n) on n threads at once (the caller takes i = 0). A thread per slice, not
// the op thread pool: the pool hands tasks out dynamically, so one thread could take two slices.
template <typename Fn>
void on_threads(int n, const Fn& fn) {
    std::vector<std::thread> workers;
    workers.reserve(static_cast<size_t>(n - 1));
    for (int i = 1; i < n; ++i) workers.emplace_back([&fn, i] { fn(i); });
    fn(0);
    for (auto& w : workers) w.join();
}

}  // namespace

uint64_t last_level_cache_bytes() {
    uint64_t best = 0;
    const std::filesystem::path dir = "/sys/devices/system/cpu/cpu0/cache";
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        std::ifstream in(entry.path() / "size");
        std::string text;
        if (!(in >> text)) continue;
        try {
            best = std::max(best, parse_size(text));  // "491520K" (binary K, as the kernel means it)
        } catch (const Error&) {
        }
    }
    return best;
}

uint64_t bandwidth_buffer_bytes() {
    constexpr uint64_t kMin = 256ull << 20, kPage = 4096;
    const uint64_t bytes = std::max(kMin, 2 * last_level_cache_bytes());
    return (bytes + kPage - 1) / kPage * kPage;
}

ReadBandwidth measure_read_bandwidth(int threads, uint64_t buffer_bytes, int passes) {
    if (threads < 1) fail("bandwidth measurement: {} threads", threads);
    if (passes < 1) fail("bandwidth measurement: {} passes", passes);
    const uint64_t n_words = buffer_bytes / sizeof(uint64_t);
    if (n_words < static_cast<uint64_t>(threads) * 8)
        fail("bandwidth buffer of {} bytes is too small", buffer_bytes);
    // Uninitialised on purpose: the threads that read a slice also first-touch it.
    std::unique_ptr<uint64_t[]> buf(new uint64_t[n_words]);
    auto slice = [&](int64_t i) {
        const uint64_t begin = n_words * static_cast<uint64_t>(i) / static_cast<uint64_t>(threads);
        const uint64_t end = n_words * static_cast<uint64_t>(i + 1) / static_cast<uint64_t>(threads);
        return std::pair{begin, end};
    };
    on_threads(threads, [&](int i) {
        auto [begin, end] = slice(i);
        for (uint64_t k = begin; k < end; ++k) buf[k] = k * 0x9e3779b97f4a7c15ull;
    });

    std::atomic<uint64_t> sink{0};
    double best = 0;
    for (int p = 0; p < passes; ++p) {
        const auto t0 = std::chrono::steady_clock::now();
        on_threads(threads, [&](int i) {
            auto [begin, end] = slice(i);
            // Eight independent sums in named locals (an array of sums is kept on the stack by GCC,
            // and its store-to-load latency, not memory, would then set the pace).
            const uint64_t* data = buf.get();
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
            uint64_t k = begin;
            for (; k + 8 <= end; k += 8) {
                s0 += data[k];
                s1 += data[k + 1];
                s2 += data[k + 2];
                s3 += data[k + 3];
                s4 += data[k + 4];
                s5 += data[k + 5];
                s6 += data[k + 6];
                s7 += data[k + 7];
            }
            for (; k < end; ++k) s0 += data[k];
            const uint64_t total = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
            sink.fetch_add(total, std::memory_order_relaxed);  // keeps the reads from being removed
        });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s > 0) best = std::max(best, static_cast<double>(n_words * sizeof(uint64_t)) / s);
    }
    g_sink = sink.load();
    return {.bytes_per_s = best,
            .buffer_bytes = n_words * sizeof(uint64_t),
            .threads = threads,
            .passes = passes};
}

}  // namespace mox
