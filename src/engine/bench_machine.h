// mox bench, part 3: facts about the machine and the model file that every result records.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace mox::engine {

// SHA-256 (FIPS 180-4) of a byte string, as 64 lowercase hex digits.
class Sha256 {
public:
    Sha256();
    void update(std::span<const uint8_t> bytes);
    std::string hex_digest();  // finishes; the object is spent afterwards

private:
    void block(const uint8_t* p);
    std::array<uint32_t, 8> h_;
    std::array<uint8_t, 64> buf_{};
    size_t buf_len_ = 0;
    uint64_t total_ = 0;
};

// Fast model fingerprint: SHA-256 of the file's first 16 MiB (all of it if smaller) followed by the
// file size as 8 bytes little-endian. Reads at most 16 MiB, so it costs milliseconds on a 100 GB file;
// GGUF headers (metadata, tensor table) and the first tensors all lie in that span.
std::string model_fingerprint(const std::string& path);

struct MemoryUse {
    uint64_t rss_bytes = 0;   // VmRSS
    uint64_t peak_bytes = 0;  // VmHWM
};
MemoryUse process_memory();  // from /proc/self/status; zeros where it cannot be read

std::string cpu_model_name();  // /proc/cpuinfo "model name" (or "unknown")
int logical_cpus();
std::string utc_now_iso8601();  // "2026-11-29T11:42:00Z"

}  // namespace mox::engine
