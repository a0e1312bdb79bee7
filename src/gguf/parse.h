// Internal to src/gguf: parsing and validating one GGUF file (one shard) held in memory. The
// public entry points are gguf::File::open/parse (reader.h), which add split-file merging.
#pragma once

#include "gguf/reader.h"
#include "gguf/value.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mox::gguf::detail {

// Limits beyond the byte-bounds checks. The first two are ggml's; the others keep a hostile file
// from turning a few bytes into deep recursion or a huge tree of Values.
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;    // one string (ggml: GGUF_MAX_STRING_LENGTH)
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 30;  // one array (ggml: GGUF_MAX_ARRAY_ELEMENTS)
constexpr uint64_t kMaxKeyBytes = 65535;                   // the GGUF spec's key length limit
constexpr int kMaxArrayDepth = 8;                          // array of array of ... (ggml allows 1)
// All array elements of a file together. Real files hold ~1-2 M (vocab, scores, types, merges);
// each element costs ~48 bytes of memory as a Value.
constexpr uint64_t kMaxMetadataValues = uint64_t{64} << 20;

using NameIndex = std::map<std::string, size_t, std::less<>>;

struct Shard {
    uint32_t version = 0;
    uint32_t alignment = kDefaultAlignment;
    uint64_t file_bytes = 0;
    uint64_t data_start = 0;  // align_up(end of tensor infos, alignment)
    std::vector<KeyValue> metadata;
    std::vector<uint64_t> value_pos;   // byte offset of each KV's value (its type is 4 bytes before)
    NameIndex key_index;               // key -> index into metadata
    std::vector<TensorInfo> tensors;   // shard 0, data pointing into the parsed bytes
    std::vector<uint64_t> tensor_pos;  // byte offset of each tensor info record (its name)
    NameIndex tensor_index;            // name -> index into tensors
    // The split keys, when present (checked to be integers in range).
    std::optional<uint64_t> split_no;
    std::optional<uint64_t> split_count;
    std::optional<uint64_t> split_tensors;

    // Byte offset of the value of `key`, which must be present.
    uint64_t value_at(std::string_view key) const { return value_pos[key_index.find(key)->second]; }
};

// Parses and validates everything (ReadOptions::check_tensor_data adds the data scan). Throws
// mox::Error "NAME: FIELD at byte N: PROBLEM". The bytes must outlive the returned tensors' data.
Shard parse_shard(std::span<const uint8_t> bytes, const std::string& name, const ReadOptions& options);

// Scans one tensor's data for inf/NaN in floats and in per-block scales (tensor_check.cpp).
void check_tensor_data(const TensorInfo& t, size_t index, const std::string& file);

// `s` made safe for a one-line message: control bytes escaped, cut to about max_bytes.
std::string printable(std::string_view s, size_t max_bytes = 80);

// Throws the reader's one-line error: "FILE: FIELD at byte AT: PROBLEM".
[[noreturn]] void fail_at(const std::string& file, uint64_t at, std::string_view field,
                          std::string_view problem);

}  // namespace mox::gguf::detail
