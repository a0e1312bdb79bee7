// Split-file naming (gguf-split, llama.cpp): shard k of n is `PREFIX-%05d-of-%05d.gguf` with a
// 1-based k, while the `split.no` key inside the file is 0-based. Every shard is a complete GGUF;
// only shard 0 carries the model's metadata. See shared/spec/gguf-and-quants.md §1.6.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mox::gguf {

inline constexpr std::string_view kKeySplitNo = "split.no";                       // u16, 0-based
inline constexpr std::string_view kKeySplitCount = "split.count";                 // u16
inline constexpr std::string_view kKeySplitTensorsCount = "split.tensors.count";  // i32, all shards

struct SplitName {
    std::string prefix;  // everything before "-00001-of-00003.gguf", directory included
    int number = 0;      // 1-based, as in the name
    int count = 0;
};

// Recognises `PREFIX-NNNNN-of-MMMMM.gguf` (exactly 5 digits each, 1 <= NNNNN <= MMMMM).
std::optional<SplitName> parse_split_name(std::string_view path);

// `PREFIX-NNNNN-of-MMMMM.gguf` for the 1-based shard `number` of `count`.
std::string split_path(std::string_view prefix, int number, int count);

}  // namespace mox::gguf
