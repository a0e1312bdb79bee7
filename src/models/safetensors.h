// Validated reader for Hugging Face safetensors checkpoints (one file, or a sharded set described by
// model.safetensors.index.json).
//
// File layout: u64 little-endian N, then N bytes of JSON header, then the data buffer. The header maps
// each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to the
// data buffer; an optional "__metadata__" object holds strings. Nothing from the file is trusted
// before it is checked: the header length against the file size, every shape product and byte count
// against overflow, every offset range against the buffer, and ranges against each other (no overlap).
// Errors are mox::Error naming the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mox::models {

enum class StDtype { boolean, u8, i8, u16, i16, f16, bf16, u32, i32, f32, u64, i64, f64, f8_e4m3, f8_e5m2 };

std::string_view st_dtype_name(StDtype t);  // the header's spelling: "F32", "BF16", ...
size_t st_dtype_bytes(StDtype t);

struct StTensor {
    std::string name;
    StDtype dtype = StDtype::f32;
    std::vector<int64_t> shape;  // PyTorch order: shape.back() is contiguous
    uint64_t begin = 0;          // byte range in the data buffer
    uint64_t end = 0;
    const uint8_t* data = nullptr;      // into the mapping; valid while the owning file lives
    const std::string* file = nullptr;  // path of the file holding it (for messages)

    int64_t n_elements() const;
    std::string shape_text() const;  // "[8192, 1, 4]"
};

// Converts elements [first, first + n) of `t` to fp32. Supported dtypes: F32, F16, BF16, F64;
// any other throws mox::Error naming the tensor.
void st_read_f32(const StTensor& t, int64_t first, int64_t n, float* out);

class SafetensorsFile {
  public:
    // Maps `path` read-only and validates its header.
    static SafetensorsFile open(const std::string& path);
    // Validates an in-memory image (tests, fuzzing). The bytes must outlive the result.
    static SafetensorsFile parse(std::span<const uint8_t> bytes, const std::string& name);

    SafetensorsFile(SafetensorsFile&&) noexcept;
    SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
    ~SafetensorsFile();

    const std::string& path() const;
    const std::vector<StTensor>& tensors() const;  // sorted by name
    const StTensor* find(std::string_view name) const;
    const std::map<std::string, std::string>& metadata() const;  // "__metadata__"

  private:
    struct Impl;
    explicit SafetensorsFile(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// All tensors of a checkpoint directory: `model.safetensors`, or the shards that
// `model.safetensors.index.json` names. A tensor name may appear in one shard only.
class SafetensorsCheckpoint {
  public:
    static SafetensorsCheckpoint open_dir(const std::string& dir);

    const StTensor* find(std::string_view name) const;
    std::vector<std::string> names() const;  // sorted
    size_t n_files() const { return files_.size(); }

  private:
    std::vector<SafetensorsFile> files_;
    std::map<std::string, const StTensor*, std::less<>> by_name_;
};

}  // namespace mox::models
