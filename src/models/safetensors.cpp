#include "models/safetensors.h"

#include "core/error.h"
#include "quant/types.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mox::models {

namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the format's own limit on the JSON header

struct DtypeRow {
    StDtype dtype;
    std::string_view name;
    size_t bytes;
};

constexpr DtypeRow kDtypes[] = {
    {StDtype::boolean, "BOOL", 1}, {StDtype::u8, "U8", 1},           {StDtype::i8, "I8", 1},
    {StDtype::u16, "U16", 2},      {StDtype::i16, "I16", 2},         {StDtype::f16, "F16", 2},
    {StDtype::bf16, "BF16", 2},    {StDtype::u32, "U32", 4},         {StDtype::i32, "I32", 4},
    {StDtype::f32, "F32", 4},      {StDtype::u64, "U64", 8},         {StDtype::i64, "I64", 8},
    {StDtype::f64, "F64", 8},      {StDtype::f8_e4m3, "F8_E4M3", 1}, {StDtype::f8_e5m2, "F8_E5M2", 1},
};

const DtypeRow* dtype_row(std::string_view name) {
    for (const DtypeRow& r : kDtypes)
        if (r.name == name) return &r;
    return nullptr;
}

const DtypeRow& dtype_row(StDtype t) {
    for (const DtypeRow& r : kDtypes)
        if (r.dtype == t) return r;
    MOX_CHECK(false, "unknown StDtype {}", static_cast<int>(t));
    return kDtypes[0];
}

// A read-only private mapping of a whole file.
class Mapping {
  public:
    explicit Mapping(const std::string& path) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
        struct stat st {};
        if (::fstat(fd, &st) != 0) {
            const int e = errno;
            ::close(fd);
            fail("{}: cannot stat: {}", path, std::strerror(e));
        }
        if (!S_ISREG(st.st_mode)) {
            ::close(fd);
            fail("{}: not a regular file", path);
        }
        size_ = static_cast<size_t>(st.st_size);
        if (size_ > 0) {
            void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) {
                const int e = errno;
                ::close(fd);
                fail("{}: cannot map {} bytes: {}", path, size_, std::strerror(e));
            }
            data_ = static_cast<const uint8_t*>(p);
        }
        ::close(fd);
    }
    ~Mapping() {
        if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    }
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    std::span<const uint8_t> bytes() const { return {data_, size_}; }

  private:
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
    return __builtin_mul_overflow(a, b, out);
}

uint64_t read_u64_le(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

}  // namespace

std::string_view st_dtype_name(StDtype t) {
    return dtype_row(t).name;
}
size_t st_dtype_bytes(StDtype t) {
    return dtype_row(t).bytes;
}

int64_t StTensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;  // validated against overflow when parsed
    return n;
}

std::string StTensor::shape_text() const {
    return fmt::format("[{}]", fmt::join(shape, ", "));
}

void st_read_f32(const StTensor& t, int64_t first, int64_t n, float* out) {
    MOX_CHECK(first >= 0 && n >= 0 && first + n <= t.n_elements(),
              "range {}+{} outside tensor {} of {} elements", first, n, t.name, t.n_elements());
    const size_t esize = st_dtype_bytes(t.dtype);
    const uint8_t* src = t.data + static_cast<size_t>(first) * esize;
    quant::TypeId as;
    switch (t.dtype) {
        case StDtype::f32:
            std::memcpy(out, src, static_cast<size_t>(n) * 4);  // source may be unaligned
            return;
        case StDtype::f16:
            as = quant::TypeId::f16;
            break;
        case StDtype::bf16:
            as = quant::TypeId::bf16;
            break;
        case StDtype::f64:
            as = quant::TypeId::f64;
            break;
        default:
            fail("{}: tensor {} has dtype {}; only F32, F16, BF16 and F64 weights can be converted",
                 t.file ? *t.file : std::string("?"), t.name, st_dtype_name(t.dtype));
    }
    const quant::TypeTraits& tt = quant::traits(as);
    if (!tt.dequantize) fail("no reference conversion from {} to F32 in this build", tt.name);
    tt.dequantize(src, out, n);
}

// ---------------------------------------------------------------------------------------------
// One file

struct SafetensorsFile::Impl {
    std::string path;
    std::unique_ptr<Mapping> mapping;  // null for parse()
    std::vector<StTensor> tensors;
    std::map<std::string, std::string> metadata;
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

const std::string& SafetensorsFile::path() const {
    return impl_->path;
}
const std::vector<StTensor>& SafetensorsFile::tensors() const {
    return impl_->tensors;
}
const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
    return impl_->metadata;
}

const StTensor* SafetensorsFile::find(std::string_view name) const {
    const auto& t = impl_->tensors;
    auto it = std::lower_bound(t.begin(), t.end(), name,
                               [](const StTensor& a, std::string_view b) { return a.name < b; });
    return it != t.end() && it->name == name ? &*it : nullptr;
}

namespace {

// Fills `tensors` (sorted by name) and `metadata`; `path` must outlive the tensors (they point to it).
void parse_into(std::span<const uint8_t> bytes, const std::string& path, std::vector<StTensor>& tensors,
                std::map<std::string, std::string>& metadata);

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    impl->mapping = std::make_unique<Mapping>(path);
    parse_into(impl->mapping->bytes(), impl->path, impl->tensors, impl->metadata);
    return SafetensorsFile(std::move(impl));
}

SafetensorsFile SafetensorsFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
    auto impl = std::make_unique<Impl>();
    impl->path = name;
    parse_into(bytes, impl->path, impl->tensors, impl->metadata);
    return SafetensorsFile(std::move(impl));
}

namespace {

uint64_t json_u64(const nlohmann::json& v, const std::string& path, const std::string& tensor,
                  const char* what) {
    if (!v.is_number_unsigned())
        fail("{}: tensor '{}': {} must be a non-negative integer", path, tensor, what);
    return v.get<uint64_t>();
}

void parse_into(std::span<const uint8_t> bytes, const std::string& path, std::vector<StTensor>& tensors,
                std::map<std::string, std::string>& metadata) {
    if (bytes.size() < 8)
        fail("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", path,
             bytes.size());
    const uint64_t header_len = read_u64_le(bytes.data());
    if (header_len > kMaxHeaderBytes)
        fail("{}: safetensors header length {} exceeds the format's limit of {} bytes", path, header_len,
             kMaxHeaderBytes);
    if (header_len > bytes.size() - 8)
        fail("{}: truncated safetensors file: header says {} bytes but only {} follow", path, header_len,
             bytes.size() - 8);
    const char* hbegin = reinterpret_cast<const char*>(bytes.data() + 8);
    const nlohmann::json header = nlohmann::json::parse(hbegin, hbegin + header_len, nullptr, false);
    if (header.is_discarded()) fail("{}: safetensors header is not valid JSON", path);
    if (!header.is_object()) fail("{}: safetensors header must be a JSON object", path);

    const uint8_t* data = bytes.data() + 8 + header_len;
    const uint64_t data_size = bytes.size() - 8 - header_len;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") {
            if (!entry.is_object()) fail("{}: __metadata__ must be an object", path);
            for (const auto& [k, v] : entry.items()) {
                if (!v.is_string()) fail("{}: __metadata__['{}'] must be a string", path, k);
                metadata[k] = v.get<std::string>();
            }
            continue;
        }
        if (!entry.is_object()) fail("{}: tensor '{}': entry must be an object", path, name);
        const auto dt = entry.find("dtype");
        const auto shape = entry.find("shape");
        const auto offsets = entry.find("data_offsets");
        if (dt == entry.end() || !dt->is_string())
            fail("{}: tensor '{}': missing string 'dtype'", path, name);
        if (shape == entry.end() || !shape->is_array())
            fail("{}: tensor '{}': missing array 'shape'", path, name);
        if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2)
            fail("{}: tensor '{}': 'data_offsets' must be [begin, end]", path, name);
        const DtypeRow* row = dtype_row(dt->get<std::string>());
        if (!row) fail("{}: tensor '{}': unknown dtype '{}'", path, name, dt->get<std::string>());

        StTensor t;
        t.name = name;
        t.dtype = row->dtype;
        uint64_t n = 1;
        for (const auto& d : *shape) {
            const uint64_t dim = json_u64(d, path, name, "each shape entry");
            if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
                mul_overflows(n, dim, &n) || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
                fail("{}: tensor '{}': element count overflows", path, name);
            t.shape.push_back(static_cast<int64_t>(dim));
        }
        uint64_t n_bytes = 0;
        if (mul_overflows(n, row->bytes, &n_bytes)) fail("{}: tensor '{}': byte size overflows", path, name);
        t.begin = json_u64((*offsets)[0], path, name, "data_offsets[0]");
        t.end = json_u64((*offsets)[1], path, name, "data_offsets[1]");
        if (t.end < t.begin)
            fail("{}: tensor '{}': data_offsets end {} < begin {}", path, name, t.end, t.begin);
        if (t.end - t.begin != n_bytes)
            fail("{}: tensor '{}': {} {} needs {} bytes but data_offsets span {}", path, name, row->name,
                 t.shape_text(), n_bytes, t.end - t.begin);
        if (t.end > data_size)
            fail("{}: truncated safetensors file: tensor '{}' ends at byte {} of a {}-byte data section",
                 path, name, t.end, data_size);
        t.data = data + t.begin;
        t.file = &path;
        tensors.push_back(std::move(t));
    }
    // Byte ranges must not overlap (a hostile header could alias one tensor's bytes as another's).
    std::vector<const StTensor*> by_offset;
    for (const StTensor& t : tensors) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const StTensor* a, const StTensor* b) { return a->begin < b->begin; });
    for (size_t i = 1; i < by_offset.size(); ++i)
        if (by_offset[i]->begin < by_offset[i - 1]->end && by_offset[i]->begin != by_offset[i]->end)
            fail("{}: tensors '{}' and '{}' overlap in the data section", path, by_offset[i - 1]->name,
                 by_offset[i]->name);
    std::sort(tensors.begin(), tensors.end(),
              [](const StTensor& a, const StTensor& b) { return a.name < b.name; });
}

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open", path);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) fail("{}: read error", path);
    return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// A checkpoint directory

SafetensorsCheckpoint SafetensorsCheckpoint::open_dir(const std::string& dir) {
    namespace fs = std::filesystem;
    SafetensorsCheckpoint ck;
    const fs::path single = fs::path(dir) / "model.safetensors";
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    std::vector<std::string> shard_names;
    std::map<std::string, std::string> weight_map;  // tensor -> shard file name, from the index
    if (fs::exists(index)) {
        const nlohmann::json j = nlohmann::json::parse(read_text_file(index.string()), nullptr, false);
        if (j.is_discarded()) fail("{}: not valid JSON", index.string());
        if (!j.is_object()) fail("{}: must be a JSON object with a 'weight_map'", index.string());
        const auto wm = j.find("weight_map");
        if (wm == j.end() || !wm->is_object()) fail("{}: missing object 'weight_map'", index.string());
        std::set<std::string> seen;
        for (const auto& [tensor, file] : wm->items()) {
            if (!file.is_string()) fail("{}: weight_map['{}'] must be a file name", index.string(), tensor);
            const std::string f = file.get<std::string>();
            // Shards live next to the index: a name with a path component could point anywhere.
            if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
                fail("{}: weight_map['{}'] = '{}' is not a plain file name", index.string(), tensor, f);
            weight_map[tensor] = f;
            if (seen.insert(f).second) shard_names.push_back(f);
        }
        if (shard_names.empty()) fail("{}: weight_map is empty", index.string());
    } else if (fs::exists(single)) {
        shard_names.push_back("model.safetensors");
    } else {
        // Shards without an index: model-00001-of-0000N.safetensors ... all N of them must be there.
        int64_t total = -1;
        for (const auto& entry : fs::directory_iterator(dir)) {
            const std::string name = entry.path().filename().string();
            unsigned index_no = 0, count = 0;
            char tail[32] = {};
            if (std::sscanf(name.c_str(), "model-%5u-of-%5u.safetensor%31s", &index_no, &count, tail) == 3 &&
                std::string(tail) == "s" && name.size() == std::string("model-00001-of-00002.safetensors").size()) {
                if (total >= 0 && total != count) fail("{}: shards disagree on their count ({} and {})", dir, total, count);
                total = count;
                shard_names.push_back(name);
            }
        }
        if (shard_names.empty()) fail("{}: no model.safetensors, model.safetensors.index.json or model-*-of-*.safetensors", dir);
        if (static_cast<int64_t>(shard_names.size()) != total)
            fail("{}: found {} of the {} shards model-*-of-{:05d}.safetensors", dir, shard_names.size(), total, total);
    }
    std::sort(shard_names.begin(), shard_names.end());
    for (const std::string& s : shard_names)
        ck.files_.push_back(SafetensorsFile::open((fs::path(dir) / s).string()));
    for (size_t i = 0; i < ck.files_.size(); ++i) {
        for (const StTensor& t : ck.files_[i].tensors()) {
            auto [it, inserted] = ck.by_name_.emplace(t.name, &t);
            if (!inserted)
                fail("{}: tensor '{}' appears in both {} and {}", dir, t.name, *it->second->file, *t.file);
            if (!weight_map.empty()) {
                auto w = weight_map.find(t.name);
                if (w != weight_map.end() && w->second != shard_names[i])
                    fail("{}: index puts tensor '{}' in {} but it is in {}", dir, t.name, w->second,
                         shard_names[i]);
            }
        }
    }
    for (const auto& [tensor, file] : weight_map)
        if (!ck.by_name_.count(tensor))
            fail("{}: index lists tensor '{}' in {} but that shard lacks it", dir, tensor, file);
    return ck;
}

const StTensor* SafetensorsCheckpoint::find(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
    std::vector<std::string> out;
    for (const auto& [name, t] : by_name_) out.push_back(name);
    return out;
}

}  // namespace mox::models
