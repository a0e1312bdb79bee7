// Validated, mmap-based GGUF reader (v2 and v3, split files).
//
// Every malformed input is rejected with mox::Error whose message names the file, the field and
// the byte offset; nothing is trusted before it is bounds- and overflow-checked, and no allocation
// is sized from the file before the file is shown to be large enough to hold it.
//
// Choices where the spec and ggml differ (details in parse.cpp): nested arrays are accepted (to a
// depth of 8); n_dims = 0 is a scalar (ne all 1), as ggml reads it; tensor data may use any aligned,
// in-bounds, non-overlapping layout (ggml's writer makes it contiguous); a bool byte other than 0
// is true. Opposite-endian files and GGUF v1 are rejected.
#pragma once

#include "gguf/value.h"
#include "quant/types.h"

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mox::gguf {

constexpr uint32_t kDefaultAlignment = 32;
constexpr size_t kMaxTensorNameBytes = 63;  // ggml's GGML_MAX_NAME - 1
constexpr int kMaxDims = 4;

struct TensorInfo {
    std::string name;
    int n_dims = 0;
    std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};  // ggml order: ne[0] is the contiguous dim
    quant::TypeId type = quant::TypeId::f32;
    uint64_t offset = 0;       // relative to the shard's data section, as stored
    uint64_t n_bytes = 0;      // exact bytes of the tensor's data
    int shard = 0;             // which split file holds it (0 for a single file)
    uint64_t file_offset = 0;  // absolute offset in that shard's file
    const uint8_t* data = nullptr;  // into the mmap; valid while the File lives

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    std::span<const uint8_t> bytes() const { return {data, n_bytes}; }
};

struct ReadOptions {
    // Also check F32/F16/BF16 data and per-block fp16 scales for inf/NaN (slow: reads every byte).
    bool check_tensor_data = false;
};

class File {
public:
    // Opens `path`. If its name is `PREFIX-00001-of-0000N.gguf` (or its `split.count` > 1), all N
    // shards are opened and merged; the tensors of all shards appear in one list.
    static File open(const std::string& path, const ReadOptions& options = {});
    // Parses an in-memory buffer (used by the fuzzer and tests). `name` appears in error messages.
    // The buffer must outlive the File.
    static File parse(std::span<const uint8_t> bytes, const std::string& name, const ReadOptions& options = {});

    File(File&&) noexcept;
    File& operator=(File&&) noexcept;
    ~File();

    const std::string& path() const;
    uint32_t version() const;
    uint32_t alignment() const;
    int n_shards() const;
    uint64_t total_file_bytes() const;  // all shards together

    const std::vector<KeyValue>& metadata() const;  // in file order (shard 0's)
    const Value* find(std::string_view key) const;

    // Typed metadata helpers; the *_or forms return a default when the key is absent and throw
    // mox::Error when the key is present with an unusable type. get_* throw when absent too.
    std::string get_string(std::string_view key) const;
    uint64_t get_uint(std::string_view key) const;
    double get_float(std::string_view key) const;
    std::string get_string_or(std::string_view key, std::string fallback) const;
    uint64_t get_uint_or(std::string_view key, uint64_t fallback) const;
    double get_float_or(std::string_view key, double fallback) const;
    bool get_bool_or(std::string_view key, bool fallback) const;

    const std::vector<TensorInfo>& tensors() const;
    const TensorInfo* find_tensor(std::string_view name) const;

private:
    struct Impl;
    explicit File(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace mox::gguf
