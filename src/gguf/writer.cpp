// Streaming GGUF v3 writer. Layout (shared/spec/gguf-and-quants.md §1.1): header, KVs, tensor
// infos, zero padding to the alignment, then each tensor's bytes padded to the alignment, in info
// order, so tensor i's offset is the sum of the padded sizes before it (what ggml's reader expects).
#include "gguf/writer.h"

#include "core/error.h"
#include "gguf/parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

namespace mox::gguf {

namespace {

constexpr uint32_t kVersion = 3;
constexpr std::string_view kKeyAlignment = "general.alignment";

bool is_power_of_two(uint64_t a) {
    return a != 0 && (a & (a - 1)) == 0;
}

// Rejects values the reader would reject, so that a file we write always reads back.
void check_value(const std::string& path, const std::string& key, const Value& v, int depth) {
    if (const std::string* s = v.as_string(); s && s->size() > detail::kMaxStringBytes)
        fail("{}: key '{}': string of {} bytes exceeds the limit of {}", path, key, s->size(),
             detail::kMaxStringBytes);
    const Array* a = v.as_array();
    if (a == nullptr) return;
    if (depth + 1 > detail::kMaxArrayDepth)
        fail("{}: key '{}': arrays nested more than {} deep are not supported", path, key,
             detail::kMaxArrayDepth);
    if (a->items.size() > detail::kMaxArrayElements)
        fail("{}: key '{}': array of {} elements exceeds the limit of {}", path, key, a->items.size(),
             detail::kMaxArrayElements);
    for (size_t i = 0; i < a->items.size(); ++i) {
        if (a->items[i].type() != a->elem_type)
            fail("{}: key '{}': array element {} has type {}, but the array holds {}", path, key, i,
                 value_type_name(a->items[i].type()), value_type_name(a->elem_type));
        check_value(path, key, a->items[i], depth + 1);
    }
}

}  // namespace

Writer::Writer(const std::string& path, uint32_t alignment) : path_(path), alignment_(alignment) {
    if (!is_power_of_two(alignment)) fail("{}: alignment {} is not a non-zero power of two", path, alignment);
    file_ = std::fopen(path.c_str(), "wb");
    if (file_ == nullptr) fail("cannot create '{}': {}", path, std::strerror(errno));
}

Writer::~Writer() {
    if (file_ != nullptr) std::fclose(file_);
    if (!finished_) std::remove(path_.c_str());
}

void Writer::set(const std::string& key, Value value) {
    if (header_written_) fail("{}: set('{}') after write_header()", path_, key);
    if (key.empty()) fail("{}: empty metadata key", path_);
    if (key.size() > detail::kMaxKeyBytes)
        fail("{}: metadata key of {} bytes exceeds the limit of {}", path_, key.size(), detail::kMaxKeyBytes);
    check_value(path_, key, value, 0);
    if (key == kKeyAlignment) {
        // The padding we write must be the one readers compute from this key.
        const std::optional<uint64_t> a = value.as_uint();
        if (value.type() != ValueType::u32 || !a || !is_power_of_two(*a))
            fail("{}: general.alignment must be a u32 power of two, got {} {}", path_,
                 value_type_name(value.type()), value.to_display());
        alignment_ = static_cast<uint32_t>(*a);
    }
    for (KeyValue& kv : metadata_) {
        if (kv.key == key) {
            kv.value = std::move(value);
            return;
        }
    }
    metadata_.push_back(KeyValue{key, std::move(value)});
}

size_t Writer::add_tensor(const std::string& name, std::span<const int64_t> ne, quant::TypeId type) {
    if (header_written_) fail("{}: add_tensor('{}') after write_header()", path_, name);
    if (name.empty() || name.size() > kMaxTensorNameBytes)
        fail("{}: tensor name '{}' must be 1..{} bytes", path_, name, kMaxTensorNameBytes);
    for (const Tensor& t : tensors_)
        if (t.name == name) fail("{}: duplicate tensor name '{}'", path_, name);
    if (ne.size() > static_cast<size_t>(kMaxDims))
        fail("{}: tensor '{}' has {} dims, at most {} are allowed", path_, name, ne.size(), kMaxDims);
    const quant::TypeTraits* traits = quant::find_type(static_cast<uint32_t>(type));
    if (traits == nullptr)
        fail("{}: tensor '{}' has unknown type id {}", path_, name, static_cast<uint32_t>(type));
    int64_t n = 1;
    for (int64_t d : ne) {
        if (d < 0) fail("{}: tensor '{}' has a negative dim {}", path_, name, d);
        if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
            fail("{}: tensor '{}': element count overflows int64", path_, name);
        n *= d;
    }
    const int64_t ne0 = ne.empty() ? 1 : ne[0];
    if (ne0 % traits->block_elems != 0)
        fail("{}: tensor '{}': ne[0] = {} is not a multiple of the {} block size {}", path_, name, ne0,
             traits->name, traits->block_elems);
    const uint64_t n_blocks = static_cast<uint64_t>(n / traits->block_elems);
    if (n_blocks > std::numeric_limits<uint64_t>::max() / 2 / traits->block_bytes)
        fail("{}: tensor '{}': byte size overflows", path_, name);
    tensors_.push_back(
        Tensor{name, std::vector<int64_t>(ne.begin(), ne.end()), type, n_blocks * traits->block_bytes});
    return tensors_.size() - 1;
}

uint64_t Writer::tensor_bytes(size_t index) const {
    MOX_CHECK(index < tensors_.size(), "tensor index {} out of range ({} tensors)", index, tensors_.size());
    return tensors_[index].n_bytes;
}

void Writer::put(const void* data, size_t n) {
    if (n == 0) return;
    if (std::fwrite(data, 1, n, file_) != n)
        fail("{}: write failed at byte {}: {}", path_, written_, std::strerror(errno));
    written_ += n;
}

void Writer::pad_to_alignment() {
    static constexpr uint8_t kZeros[256] = {};
    uint64_t pad = (alignment_ - written_ % alignment_) % alignment_;
    while (pad > 0) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(kZeros)));
        put(kZeros, n);
        pad -= n;
    }
}

namespace {

// Little-endian encoders for the header (the host is little-endian: see parse.cpp).
template <typename T>
void append(std::vector<uint8_t>& out, T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
}

void append_string(std::vector<uint8_t>& out, std::string_view s) {
    append<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

void append_value(std::vector<uint8_t>& out, const Value& v) {
    switch (v.type()) {
        case ValueType::u8:
            return append(out, static_cast<uint8_t>(*v.as_uint()));
        case ValueType::i8:
            return append(out, static_cast<int8_t>(*v.as_int()));
        case ValueType::u16:
            return append(out, static_cast<uint16_t>(*v.as_uint()));
        case ValueType::i16:
            return append(out, static_cast<int16_t>(*v.as_int()));
        case ValueType::u32:
            return append(out, static_cast<uint32_t>(*v.as_uint()));
        case ValueType::i32:
            return append(out, static_cast<int32_t>(*v.as_int()));
        case ValueType::u64:
            return append(out, *v.as_uint());
        case ValueType::i64:
            return append(out, *v.as_int());
        case ValueType::f32:
            return append(out, static_cast<float>(*v.as_float()));
        case ValueType::f64:
            return append(out, *v.as_float());
        case ValueType::boolean:
            return append(out, static_cast<uint8_t>(*v.as_bool() ? 1 : 0));
        case ValueType::string:
            return append_string(out, *v.as_string());
        case ValueType::array: {
            const Array& a = *v.as_array();
            append(out, static_cast<uint32_t>(a.elem_type));
            append<uint64_t>(out, a.items.size());
            for (const Value& item : a.items) append_value(out, item);
            return;
        }
    }
}

}  // namespace

void Writer::write_header() {
    if (header_written_) fail("{}: write_header() called twice", path_);
    const bool has_alignment_key = std::any_of(metadata_.begin(), metadata_.end(),
                                               [](const KeyValue& kv) { return kv.key == kKeyAlignment; });
    if (alignment_ != kDefaultAlignment && !has_alignment_key)
        metadata_.push_back(KeyValue{std::string(kKeyAlignment), Value::u32(alignment_)});

    // The header is built in memory: it is small next to the data (even a 250k-token vocabulary
    // is a few MB) and one buffer keeps the writes large.
    std::vector<uint8_t> out;
    out.reserve(1 << 16);  // also keeps GCC 12's -O3 stringop-overflow false positive away
    for (char c : {'G', 'G', 'U', 'F'}) out.push_back(static_cast<uint8_t>(c));
    append<uint32_t>(out, kVersion);
    append<uint64_t>(out, tensors_.size());
    append<uint64_t>(out, metadata_.size());
    for (const KeyValue& kv : metadata_) {
        append_string(out, kv.key);
        append(out, static_cast<uint32_t>(kv.value.type()));
        append_value(out, kv.value);
    }
    uint64_t offset = 0;  // relative to the data section
    for (const Tensor& t : tensors_) {
        append_string(out, t.name);
        append<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
        for (int64_t d : t.ne) append(out, d);
        append(out, static_cast<uint32_t>(t.type));
        append(out, offset);
        offset += (t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
    }
    put(out.data(), out.size());
    pad_to_alignment();
    header_written_ = true;
}

void Writer::write_data(std::span<const uint8_t> bytes) {
    if (!header_written_) fail("{}: write_data() before write_header()", path_);
    if (finished_) fail("{}: write_data() after finish()", path_);
    size_t pos = 0;
    while (pos < bytes.size()) {
        // Step over finished (and empty) tensors; each one's padding goes out as we leave it.
        while (current_ < tensors_.size() && current_done_ == tensors_[current_].n_bytes) {
            ++current_;
            current_done_ = 0;
            pad_to_alignment();
        }
        if (current_ == tensors_.size())
            fail("{}: {} bytes written past the end of the last tensor", path_, bytes.size() - pos);
        const uint64_t left = tensors_[current_].n_bytes - current_done_;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(left, bytes.size() - pos));
        put(bytes.data() + pos, n);
        current_done_ += n;
        pos += n;
    }
}

void Writer::finish() {
    if (!header_written_) fail("{}: finish() before write_header()", path_);
    if (finished_) return;
    while (current_ < tensors_.size() && current_done_ == tensors_[current_].n_bytes) {
        ++current_;
        current_done_ = 0;
        pad_to_alignment();
    }
    if (current_ < tensors_.size())
        fail("{}: tensor {} '{}' got {} of its {} bytes", path_, current_, tensors_[current_].name,
             current_done_, tensors_[current_].n_bytes);
    std::FILE* f = std::exchange(file_, nullptr);
    const bool flushed = std::fflush(f) == 0;
    const int flush_errno = errno;
    const bool closed = std::fclose(f) == 0;
    if (!flushed || !closed)
        fail("{}: cannot finish writing: {}", path_, std::strerror(flushed ? errno : flush_errno));
    finished_ = true;
}

}  // namespace mox::gguf
