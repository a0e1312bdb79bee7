// GGUF parsing with complete validation (shared/spec/gguf-and-quants.md §1.1-§1.5).
//
// Rule: nothing read from the file is used before it is checked. Every count is bounded by the
// bytes that remain (each element needs at least a known number of bytes), every length by the
// remaining bytes and a cap, every sum and product is overflow-checked, and allocations are sized
// only from counts that passed those checks.
#include "gguf/parse.h"
#include "core/error.h"
#include "gguf/split.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

namespace mox::gguf::detail {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");
static_assert(sizeof(size_t) == 8, "the GGUF reader assumes 64-bit size_t");

namespace {

constexpr uint32_t kMaxValueType = static_cast<uint32_t>(ValueType::f64);
// The smallest possible records, used to bound counts by the bytes that remain.
// KV: key length (8) + a 1-byte key + value type (4) + the smallest value (1).
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
// Tensor info: name length (8) + a 1-byte name + n_dims (4) + no dims + type (4) + offset (8).
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 4 + 8;
constexpr const char* kNeField[kMaxDims] = {"ne[0]", "ne[1]", "ne[2]", "ne[3]"};

// Bytes that one element of an array of type t needs at the least.
uint64_t min_value_bytes(ValueType t) {
    switch (t) {
        case ValueType::u8:
        case ValueType::i8:
        case ValueType::boolean:
            return 1;
        case ValueType::u16:
        case ValueType::i16:
            return 2;
        case ValueType::u32:
        case ValueType::i32:
        case ValueType::f32:
            return 4;
        case ValueType::u64:
        case ValueType::i64:
        case ValueType::f64:
        case ValueType::string:
            return 8;  // the length
        case ValueType::array:
            return 4 + 8;  // element type + count
    }
    return 1;
}

class Parser {
public:
    Parser(std::span<const uint8_t> bytes, const std::string& name)
        : base_(bytes.data()), size_(bytes.size()), name_(name) {}

    Shard run(const ReadOptions& options);

private:
    // "kv 3 'tokenizer.ggml.tokens' element 17 string length": where we are, only built on error.
    std::string where(std::string_view field) const {
        std::string out = ctx_;
        for (uint64_t e : elem_path_) out += fmt::format(" element {}", e);
        if (!out.empty()) out += ' ';
        out += field;
        return out;
    }
    [[noreturn]] void error(uint64_t at, std::string_view field, std::string_view problem) const {
        fail_at(name_, at, where(field), problem);
    }
    uint64_t remaining() const { return size_ - pos_; }
    void need(uint64_t n, std::string_view field) const {
        if (n > remaining())
            error(pos_, field,
                  fmt::format("needs {} bytes but the file ends {} bytes later (file size {})", n,
                              remaining(), size_));
    }
    template <typename T>
    T read(std::string_view field) {
        need(sizeof(T), field);
        T v;
        std::memcpy(&v, base_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    std::string read_string(std::string_view field, uint64_t max_bytes) {
        const uint64_t at = pos_;
        const uint64_t len = read<uint64_t>(field);
        if (len > max_bytes)
            error(at, field, fmt::format("string length {} exceeds the limit of {} bytes", len, max_bytes));
        if (len > remaining())
            error(at, field,
                  fmt::format("string length {} runs past the end of the file ({} bytes remain)", len,
                              remaining()));
        std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
        pos_ += len;
        return s;
    }
    ValueType read_value_type(std::string_view field) {
        const uint64_t at = pos_;
        const uint32_t raw = read<uint32_t>(field);
        if (raw > kMaxValueType) error(at, field, fmt::format("{} is not a GGUF value type (0..12)", raw));
        return static_cast<ValueType>(raw);
    }
    Value read_value(ValueType t, int depth);
    Array read_array(int depth);

    void parse_header(Shard& s, uint64_t& n_tensors, uint64_t& n_kv);
    void parse_kvs(Shard& s, uint64_t n_kv);
    void check_alignment(Shard& s);
    void check_split_keys(Shard& s, uint64_t n_tensors);
    void parse_tensor_infos(Shard& s, uint64_t n_tensors, std::vector<uint64_t>& offset_pos);
    void place_tensors(Shard& s, const std::vector<uint64_t>& offset_pos);

    const uint8_t* base_;
    uint64_t size_;
    const std::string& name_;
    uint64_t pos_ = 0;
    std::string ctx_;                  // the record being read ("kv 3 'general.name'")
    std::vector<uint64_t> elem_path_;  // element indices inside (nested) arrays
    uint64_t values_left_ = kMaxMetadataValues;
};

Value Parser::read_value(ValueType t, int depth) {
    switch (t) {
        case ValueType::u8:
            return Value::u8(read<uint8_t>("value"));
        case ValueType::i8:
            return Value::i8(read<int8_t>("value"));
        case ValueType::u16:
            return Value::u16(read<uint16_t>("value"));
        case ValueType::i16:
            return Value::i16(read<int16_t>("value"));
        case ValueType::u32:
            return Value::u32(read<uint32_t>("value"));
        case ValueType::i32:
            return Value::i32(read<int32_t>("value"));
        case ValueType::u64:
            return Value::u64(read<uint64_t>("value"));
        case ValueType::i64:
            return Value::i64(read<int64_t>("value"));
        case ValueType::f32:
            return Value::f32(read<float>("value"));
        case ValueType::f64:
            return Value::f64(read<double>("value"));
        // The spec allows 0 and 1 only; ggml reads any non-zero byte as true, and so do we.
        case ValueType::boolean:
            return Value::boolean(read<uint8_t>("value") != 0);
        case ValueType::string:
            return Value::string(read_string("string length", kMaxStringBytes));
        case ValueType::array:
            return Value::array(read_array(depth));
    }
    MOX_CHECK(false, "unhandled value type {}", static_cast<uint32_t>(t));
}

Array Parser::read_array(int depth) {
    const uint64_t type_at = pos_;
    const ValueType elem = read_value_type("array element type");
    // Nested arrays are legal GGUF (ggml rejects them, gguf-py flattens them); we keep them, to a
    // fixed depth so that a chain of empty arrays cannot exhaust the stack.
    if (elem == ValueType::array && depth + 1 >= kMaxArrayDepth)
        error(type_at, "array element type",
              fmt::format("arrays nested more than {} deep are not supported", kMaxArrayDepth));
    const uint64_t count_at = pos_;
    const uint64_t count = read<uint64_t>("array count");
    if (count > kMaxArrayElements)
        error(count_at, "array count",
              fmt::format("{} exceeds the limit of {} elements", count, kMaxArrayElements));
    const uint64_t min_bytes = min_value_bytes(elem);
    if (count > remaining() / min_bytes)
        error(count_at, "array count",
              fmt::format("{} elements of type {} need at least {} bytes each, but only {} remain", count,
                          value_type_name(elem), min_bytes, remaining()));
    if (count > values_left_)
        error(count_at, "array count",
              fmt::format("arrays in this file hold more than {} elements in total", kMaxMetadataValues));
    values_left_ -= count;

    Array a{elem, {}};
    a.items.reserve(static_cast<size_t>(count));  // bounded above by the remaining bytes
    elem_path_.push_back(0);
    for (uint64_t i = 0; i < count; ++i) {
        elem_path_.back() = i;
        a.items.push_back(read_value(elem, depth + 1));
    }
    elem_path_.pop_back();
    return a;
}

void Parser::parse_header(Shard& s, uint64_t& n_tensors, uint64_t& n_kv) {
    if (size_ < 4)
        error(0, "magic", fmt::format("the file is {} bytes long, too short for a GGUF header", size_));
    if (std::memcmp(base_, "GGUF", 4) != 0)
        error(0, "magic",
              fmt::format("expected \"GGUF\" (47 47 55 46), found {:02x} {:02x} {:02x} {:02x}", base_[0],
                          base_[1], base_[2], base_[3]));
    pos_ = 4;

    const uint64_t version_at = pos_;
    const uint32_t version = read<uint32_t>("version");
    // gguf-py can write big-endian files; their version reads as 0x03000000 here. ggml uses the
    // same test (low 16 bits zero) and rejects such files, as do we.
    if (version != 0 && (version & 0xFFFF) == 0)
        error(version_at, "version",
              fmt::format("0x{:08x} looks byte-swapped: the file is opposite-endian (big-endian); only "
                          "little-endian GGUF is supported",
                          version));
    if (version == 1)
        error(version_at, "version", "GGUF v1 is obsolete and not supported (only v2 and v3 are)");
    if (version < 2 || version > 3)
        error(version_at, "version",
              fmt::format("{} is not a supported GGUF version (only 2 and 3 are)", version));
    s.version = version;

    const uint64_t tensors_at = pos_;
    n_tensors = read<uint64_t>("tensor_count");
    const uint64_t kv_at = pos_;
    n_kv = read<uint64_t>("kv_count");
    // Both are int64 in ggml; a count with the top bit set is negative there.
    if (n_tensors > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        error(tensors_at, "tensor_count", fmt::format("{} is negative as int64", n_tensors));
    if (n_kv > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        error(kv_at, "kv_count", fmt::format("{} is negative as int64", n_kv));
    const uint64_t rem = remaining();
    if (n_kv > rem / kMinKvBytes)
        error(kv_at, "kv_count",
              fmt::format("{} key-value records need at least {} bytes each, but only {} bytes follow", n_kv,
                          kMinKvBytes, rem));
    if (n_tensors > rem / kMinTensorInfoBytes)
        error(tensors_at, "tensor_count",
              fmt::format("{} tensor infos need at least {} bytes each, but only {} bytes follow", n_tensors,
                          kMinTensorInfoBytes, rem));
    // Each product is now <= rem, so the sum cannot overflow.
    if (n_kv * kMinKvBytes + n_tensors * kMinTensorInfoBytes > rem)
        error(tensors_at, "tensor_count",
              fmt::format("{} tensor infos and {} key-value records cannot fit in the {} bytes that follow",
                          n_tensors, n_kv, rem));
}

void Parser::parse_kvs(Shard& s, uint64_t n_kv) {
    s.metadata.reserve(static_cast<size_t>(std::min<uint64_t>(n_kv, 4096)));
    for (uint64_t i = 0; i < n_kv; ++i) {
        ctx_ = fmt::format("kv {}", i);
        const uint64_t key_at = pos_;
        std::string key = read_string("key length", kMaxKeyBytes);
        if (key.empty()) error(key_at, "key", "the key is empty");
        ctx_ = fmt::format("kv {} '{}'", i, printable(key));
        if (auto it = s.key_index.find(key); it != s.key_index.end())
            error(key_at, "key", fmt::format("duplicate key (first defined by kv {})", it->second));
        const ValueType type = read_value_type("value type");
        s.value_pos.push_back(pos_);
        Value v = read_value(type, 0);
        s.key_index.emplace(key, s.metadata.size());
        s.metadata.push_back(KeyValue{std::move(key), std::move(v)});
    }
    ctx_.clear();
}

void Parser::check_alignment(Shard& s) {
    auto it = s.key_index.find("general.alignment");
    if (it == s.key_index.end()) return;
    const Value& v = s.metadata[it->second].value;
    const uint64_t at = s.value_pos[it->second];
    ctx_ = fmt::format("kv {} 'general.alignment'", it->second);
    if (v.type() != ValueType::u32)
        error(at - 4, "value type", fmt::format("must be u32, found {}", value_type_name(v.type())));
    const uint64_t a = *v.as_uint();
    if (a == 0 || (a & (a - 1)) != 0) error(at, "value", fmt::format("{} is not a non-zero power of two", a));
    s.alignment = static_cast<uint32_t>(a);
    ctx_.clear();
}

void Parser::check_split_keys(Shard& s, uint64_t n_tensors) {
    // Any integer type is accepted (gguf-split writes u16/u16/i32); the values must be in range.
    auto get = [&](std::string_view key, uint64_t max) -> std::optional<uint64_t> {
        auto it = s.key_index.find(key);
        if (it == s.key_index.end()) return std::nullopt;
        const Value& v = s.metadata[it->second].value;
        const uint64_t at = s.value_pos[it->second];
        ctx_ = fmt::format("kv {} '{}'", it->second, key);
        if (!v.is_integer())
            error(at - 4, "value type",
                  fmt::format("must be an integer, found {}", value_type_name(v.type())));
        const std::optional<uint64_t> u = v.as_uint();
        if (!u || *u > max) error(at, "value", fmt::format("{} is out of range 0..{}", v.to_display(), max));
        return u;
    };
    s.split_no = get(kKeySplitNo, 65534);
    s.split_count = get(kKeySplitCount, 65535);
    s.split_tensors = get(kKeySplitTensorsCount, static_cast<uint64_t>(std::numeric_limits<int32_t>::max()));
    if (s.split_count && *s.split_count == 0) {
        ctx_ = "";
        error(s.value_at(kKeySplitCount), std::string(kKeySplitCount), "must be at least 1");
    }
    const uint64_t count = s.split_count.value_or(1);
    if (s.split_no && *s.split_no >= count) {
        ctx_ = "";
        error(s.value_at(kKeySplitNo), std::string(kKeySplitNo),
              fmt::format("{} is not below split.count = {}", *s.split_no, count));
    }
    if (s.split_tensors && *s.split_tensors < n_tensors) {
        ctx_ = "";
        error(s.value_at(kKeySplitTensorsCount), std::string(kKeySplitTensorsCount),
              fmt::format("{} is smaller than this file's own {} tensors", *s.split_tensors, n_tensors));
    }
    ctx_.clear();
}

void Parser::parse_tensor_infos(Shard& s, uint64_t n_tensors, std::vector<uint64_t>& offset_pos) {
    s.tensors.reserve(static_cast<size_t>(std::min<uint64_t>(n_tensors, 4096)));
    offset_pos.reserve(s.tensors.capacity());
    for (uint64_t i = 0; i < n_tensors; ++i) {
        ctx_ = fmt::format("tensor {}", i);
        TensorInfo t;
        const uint64_t name_at = pos_;
        s.tensor_pos.push_back(name_at);
        t.name = read_string("name length", kMaxTensorNameBytes);
        if (t.name.empty()) error(name_at, "name", "the name is empty");
        ctx_ = fmt::format("tensor {} '{}'", i, printable(t.name));
        if (auto it = s.tensor_index.find(t.name); it != s.tensor_index.end())
            error(name_at, "name",
                  fmt::format("duplicate tensor name (first used by tensor {})", it->second));

        const uint64_t dims_at = pos_;
        const uint32_t n_dims = read<uint32_t>("n_dims");
        // n_dims = 0 is accepted as a scalar (all ne = 1): ggml reads it that way, and gguf-py
        // writes it for a 0-d array. ggml's own writer never stores fewer than 1.
        if (n_dims > static_cast<uint32_t>(kMaxDims))
            error(dims_at, "n_dims", fmt::format("{} exceeds the maximum of {}", n_dims, kMaxDims));
        t.n_dims = static_cast<int>(n_dims);
        for (uint32_t j = 0; j < n_dims; ++j) {
            const uint64_t at = pos_;
            t.ne[j] = read<int64_t>(kNeField[j]);
            if (t.ne[j] < 0) error(at, kNeField[j], fmt::format("{} is negative", t.ne[j]));
        }
        // Running product, so an intermediate overflow is caught even if a later dim is 0.
        int64_t n = 1;
        for (int j = 0; j < kMaxDims; ++j) {
            if (t.ne[j] != 0 && n > std::numeric_limits<int64_t>::max() / t.ne[j])
                error(dims_at, "shape",
                      fmt::format("the element count of [{}, {}, {}, {}] overflows int64", t.ne[0], t.ne[1],
                                  t.ne[2], t.ne[3]));
            n *= t.ne[j];
        }

        const uint64_t type_at = pos_;
        const uint32_t type_id = read<uint32_t>("type");
        const quant::TypeTraits* traits = quant::find_type(type_id);
        if (traits == nullptr)
            error(type_at, "type",
                  fmt::format("{} is not a supported ggml type id (unknown or removed)", type_id));
        t.type = traits->id;
        if (t.ne[0] % traits->block_elems != 0)
            error(type_at, "type",
                  fmt::format("ne[0] = {} is not a multiple of the {} block size {}", t.ne[0], traits->name,
                              traits->block_elems));
        const uint64_t n_blocks = static_cast<uint64_t>(n / traits->block_elems);
        if (n_blocks > std::numeric_limits<uint64_t>::max() / traits->block_bytes)
            error(type_at, "type",
                  fmt::format("{} blocks of {} overflow a 64-bit byte count", n_blocks, traits->name));
        t.n_bytes = n_blocks * traits->block_bytes;

        const uint64_t offset_at = pos_;
        t.offset = read<uint64_t>("offset");
        if (t.offset % s.alignment != 0)
            error(offset_at, "offset",
                  fmt::format("{} is not a multiple of the alignment {}", t.offset, s.alignment));
        s.tensor_index.emplace(t.name, s.tensors.size());
        s.tensors.push_back(std::move(t));
        offset_pos.push_back(offset_at);
    }
    ctx_.clear();
}

void Parser::place_tensors(Shard& s, const std::vector<uint64_t>& offset_pos) {
    // The data section starts at the next multiple of the alignment after the infos. A file
    // without tensors may end before that padding (ggml's reader tolerates it), so no check then.
    const uint64_t data_start = (pos_ + s.alignment - 1) / s.alignment * s.alignment;
    s.data_start = data_start;
    for (size_t i = 0; i < s.tensors.size(); ++i) {
        TensorInfo& t = s.tensors[i];
        ctx_ = fmt::format("tensor {} '{}'", i, printable(t.name));
        if (data_start > size_ || t.offset > size_ - data_start || t.n_bytes > size_ - data_start - t.offset)
            error(offset_pos[i], "offset",
                  fmt::format(
                      "{} bytes at data offset {} (data section at byte {}) run past the end of the file "
                      "({} bytes)",
                      t.n_bytes, t.offset, data_start, size_));
        t.file_offset = data_start + t.offset;
        t.data = base_ + t.file_offset;
    }
    // Any aligned, in-bounds layout without overlaps is accepted (ggml's writer also makes the
    // tensors contiguous and in order, which this does not require).
    std::vector<size_t> order;
    order.reserve(s.tensors.size());
    for (size_t i = 0; i < s.tensors.size(); ++i)
        if (s.tensors[i].n_bytes > 0) order.push_back(i);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) {  // ties by index, so the later tensor is the one reported
                  return s.tensors[a].offset != s.tensors[b].offset
                             ? s.tensors[a].offset < s.tensors[b].offset
                             : a < b;
              });
    for (size_t k = 1; k < order.size(); ++k) {
        const TensorInfo& prev = s.tensors[order[k - 1]];
        const TensorInfo& cur = s.tensors[order[k]];
        if (prev.offset + prev.n_bytes > cur.offset) {
            ctx_ = fmt::format("tensor {} '{}'", order[k], printable(cur.name));
            error(offset_pos[order[k]], "offset",
                  fmt::format("data [{}, {}) overlaps tensor {} '{}' at [{}, {})", cur.offset,
                              cur.offset + cur.n_bytes, order[k - 1], printable(prev.name), prev.offset,
                              prev.offset + prev.n_bytes));
        }
    }
    ctx_.clear();
}

Shard Parser::run(const ReadOptions& options) {
    Shard s;
    s.file_bytes = size_;
    uint64_t n_tensors = 0;
    uint64_t n_kv = 0;
    parse_header(s, n_tensors, n_kv);
    parse_kvs(s, n_kv);
    check_alignment(s);
    check_split_keys(s, n_tensors);
    std::vector<uint64_t> offset_pos;
    parse_tensor_infos(s, n_tensors, offset_pos);
    place_tensors(s, offset_pos);
    if (options.check_tensor_data)
        for (size_t i = 0; i < s.tensors.size(); ++i) check_tensor_data(s.tensors[i], i, name_);
    return s;
}

}  // namespace

std::string printable(std::string_view s, size_t max_bytes) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (out.size() >= max_bytes) {
            out += "...";
            break;
        }
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\')
            out += fmt::format("\\x{:02x}", c);
        else
            out += static_cast<char>(c);
    }
    return out;
}

void fail_at(const std::string& file, uint64_t at, std::string_view field, std::string_view problem) {
    fail("{}: {} at byte {}: {}", printable(file, 4096), field, at, problem);
}

Shard parse_shard(std::span<const uint8_t> bytes, const std::string& name, const ReadOptions& options) {
    return Parser(bytes, name).run(options);
}

}  // namespace mox::gguf::detail
