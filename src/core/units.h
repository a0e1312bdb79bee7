// Human units for sizes and bandwidths, as users type them: "24G", "16GiB", "512M", "936GB/s".
// Conventions: K/M/G/T with an "i" or alone are binary (GiB = 2^30, as llama.cpp and nvidia-smi print);
// "KB/MB/GB/TB" are decimal. Bandwidths follow vendor datasheets, which are decimal ("936GB/s").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mox {

// Bytes from "24G", "24GiB", "24GB", "1.5T", "4096". Throws mox::Error on anything else.
uint64_t parse_size(std::string_view text);
// Bytes per second from "936GB/s", "81 GB/s", "4.46TB/s", "55e9". Throws mox::Error on bad input.
double parse_bandwidth(std::string_view text);

std::string format_bytes(uint64_t bytes);      // "19.70 GiB"
std::string format_count(double n);            // "34.66 B", "3.00 M"

}  // namespace mox
