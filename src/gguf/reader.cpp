// gguf::File: the mmap'd, validated view of a GGUF model, single file or split into shards.
#include "gguf/reader.h"

#include "core/error.h"
#include "core/mapped_file.h"
#include "gguf/parse.h"
#include "gguf/split.h"

#include <fmt/format.h>

#include <map>
#include <utility>

namespace mox::gguf {

struct File::Impl {
    std::string path;
    std::vector<MappedFile> maps;  // one per shard; empty for File::parse
    uint32_t version = 0;
    uint32_t alignment = kDefaultAlignment;
    uint64_t total_bytes = 0;
    int n_shards = 1;
    std::vector<KeyValue> metadata;
    detail::NameIndex key_index;
    std::vector<TensorInfo> tensors;
    detail::NameIndex tensor_index;

    // Takes shard 0's parse result as the file's metadata and first tensors.
    void adopt_first(detail::Shard&& s) {
        version = s.version;
        alignment = s.alignment;
        total_bytes = s.file_bytes;
        metadata = std::move(s.metadata);
        key_index = std::move(s.key_index);
        tensors = std::move(s.tensors);
        tensor_index = std::move(s.tensor_index);
    }

    void merge_other_shards(const SplitName& name, const ReadOptions& options,
                            std::vector<std::string>& paths);
};

// Opens shards 2..n of a split model and merges their tensors (shard 0 is already in).
void File::Impl::merge_other_shards(const SplitName& name, const ReadOptions& options,
                                    std::vector<std::string>& paths) {
    for (int k = 2; k <= name.count; ++k) {
        const std::string p = split_path(name.prefix, k, name.count);
        MappedFile m;
        try {
            m = MappedFile::open(p);
        } catch (const Error& e) {
            fail("{}: shard {} of {}: {}", paths[0], k, name.count, e.what());
        }
        detail::Shard s = detail::parse_shard(m.bytes(), p, options);
        if (!s.split_no)
            fail("{}: split.no is absent, but the file name says shard {} of {}", p, k, name.count);
        if (*s.split_no != static_cast<uint64_t>(k - 1))
            detail::fail_at(
                p, s.value_at(kKeySplitNo), kKeySplitNo,
                fmt::format("{}, but the file name says shard {} (split.no {})", *s.split_no, k, k - 1));
        if (!s.split_count) fail("{}: split.count is absent in shard {} of {}", p, k, name.count);
        if (*s.split_count != static_cast<uint64_t>(name.count))
            detail::fail_at(
                p, s.value_at(kKeySplitCount), kKeySplitCount,
                fmt::format("{}, but the first shard says {} shards", *s.split_count, name.count));
        for (size_t i = 0; i < s.tensors.size(); ++i) {
            TensorInfo& t = s.tensors[i];
            if (auto it = tensor_index.find(t.name); it != tensor_index.end()) {
                const int other = tensors[it->second].shard;
                detail::fail_at(
                    p, s.tensor_pos[i], fmt::format("tensor {} '{}' name", i, detail::printable(t.name)),
                    fmt::format("also in shard {} ({})", other + 1, paths[static_cast<size_t>(other)]));
            }
            t.shard = k - 1;
            tensor_index.emplace(t.name, tensors.size());
            tensors.push_back(std::move(t));
        }
        total_bytes += m.size();
        maps.push_back(std::move(m));
        paths.push_back(p);
    }
}

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::parse(std::span<const uint8_t> bytes, const std::string& name, const ReadOptions& options) {
    auto impl = std::make_unique<Impl>();
    impl->path = name;
    impl->adopt_first(detail::parse_shard(bytes, name, options));
    return File(std::move(impl));
}

File File::open(const std::string& path, const ReadOptions& options) {
    MappedFile first = MappedFile::open(path);
    detail::Shard s0 = detail::parse_shard(first.bytes(), path, options);
    const std::optional<SplitName> name = parse_split_name(path);
    const uint64_t split_no = s0.split_no.value_or(0);
    const uint64_t split_count = s0.split_count.value_or(1);
    if (split_no != 0)
        detail::fail_at(
            path, s0.value_at(kKeySplitNo), kKeySplitNo,
            fmt::format("this is shard {} of {} (split.no = {}); open the first shard{}", split_no + 1,
                        split_count, split_no,
                        name ? fmt::format(" '{}'", split_path(name->prefix, 1, name->count)) : ""));
    if (name && name->number != 1)
        fail("{}: the file name says shard {} of {}; open the first shard '{}'", path, name->number,
             name->count, split_path(name->prefix, 1, name->count));
    // The name and split.count must agree: a split model renamed (or a file named like a shard)
    // would otherwise load with tensors missing.
    const bool split = split_count > 1 || (name && name->count > 1);
    if (split) {
        if (!name)
            detail::fail_at(
                path, s0.value_at(kKeySplitCount), kKeySplitCount,
                fmt::format("{} shards, but the file name does not end in -00001-of-{:05d}.gguf, so the "
                            "other shards cannot be found",
                            split_count, split_count));
        if (!s0.split_count)
            fail("{}: the file name says {} shards but split.count is absent", path, name->count);
        if (static_cast<uint64_t>(name->count) != split_count)
            detail::fail_at(path, s0.value_at(kKeySplitCount), kKeySplitCount,
                            fmt::format("{}, but the file name says {} shards", split_count, name->count));
    }
    const std::optional<uint64_t> split_tensors = s0.split_tensors;
    const uint64_t split_tensors_at = split_tensors ? s0.value_at(kKeySplitTensorsCount) : 0;

    auto impl = std::make_unique<Impl>();
    impl->path = path;
    impl->adopt_first(std::move(s0));
    impl->maps.push_back(std::move(first));
    if (split) {
        std::vector<std::string> paths{path};
        impl->merge_other_shards(*name, options, paths);
        impl->n_shards = name->count;
    }
    if (split_tensors && *split_tensors != impl->tensors.size())
        detail::fail_at(
            path, split_tensors_at, kKeySplitTensorsCount,
            fmt::format("{}, but {} {} tensors", *split_tensors,
                        split ? fmt::format("the {} shards hold", impl->n_shards) : "the file holds",
                        impl->tensors.size()));
    return File(std::move(impl));
}

const std::string& File::path() const {
    return impl_->path;
}
uint32_t File::version() const {
    return impl_->version;
}
uint32_t File::alignment() const {
    return impl_->alignment;
}
int File::n_shards() const {
    return impl_->n_shards;
}
uint64_t File::total_file_bytes() const {
    return impl_->total_bytes;
}
const std::vector<KeyValue>& File::metadata() const {
    return impl_->metadata;
}
const std::vector<TensorInfo>& File::tensors() const {
    return impl_->tensors;
}

const Value* File::find(std::string_view key) const {
    auto it = impl_->key_index.find(key);
    return it == impl_->key_index.end() ? nullptr : &impl_->metadata[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
    auto it = impl_->tensor_index.find(name);
    return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

namespace {

[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const Value& v,
                             std::string_view want) {
    fail("{}: metadata key '{}' holds {} {}, expected {}", path, key, value_type_name(v.type()),
         detail::printable(v.to_display(4), 80), want);
}

}  // namespace

std::string File::get_string(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) fail("{}: metadata key '{}' is missing", path(), key);
    const std::string* s = v->as_string();
    if (s == nullptr) wrong_type(path(), key, *v, "a string");
    return *s;
}

uint64_t File::get_uint(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) fail("{}: metadata key '{}' is missing", path(), key);
    const std::optional<uint64_t> u = v->as_uint();
    if (!u) wrong_type(path(), key, *v, "a non-negative integer");
    return *u;
}

double File::get_float(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) fail("{}: metadata key '{}' is missing", path(), key);
    const std::optional<double> f = v->as_float();
    if (!f) wrong_type(path(), key, *v, "a number");
    return *f;
}

std::string File::get_string_or(std::string_view key, std::string fallback) const {
    return find(key) == nullptr ? std::move(fallback) : get_string(key);
}

uint64_t File::get_uint_or(std::string_view key, uint64_t fallback) const {
    return find(key) == nullptr ? fallback : get_uint(key);
}

double File::get_float_or(std::string_view key, double fallback) const {
    return find(key) == nullptr ? fallback : get_float(key);
}

bool File::get_bool_or(std::string_view key, bool fallback) const {
    const Value* v = find(key);
    if (v == nullptr) return fallback;
    const std::optional<bool> b = v->as_bool();
    if (!b) wrong_type(path(), key, *v, "a bool");
    return *b;
}

}  // namespace mox::gguf
