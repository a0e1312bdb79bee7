#include "models/routing_trace.h"

#include "core/error.h"
#include "core/mapped_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <type_traits>

namespace mox::models {

namespace {

constexpr char kMagic[8] = {'M', 'O', 'X', 'R', 'O', 'U', 'T', 'E'};
constexpr uint32_t kVersion = 1;
// Ids are u16 in memory, so no trace can name more experts than that.
constexpr int64_t kMaxExperts = int64_t{1} << 16;

uint32_t id_width(int64_t n_expert) {
    return n_expert <= 256 ? 1 : 2;
}

// Reads little-endian fields from `bytes`, never past its end; every error names the source, the
// offset and the field.
class Cursor {
public:
    Cursor(std::span<const uint8_t> bytes, std::string_view what) : bytes_(bytes), what_(what) {}

    size_t offset() const { return offset_; }
    size_t remaining() const { return bytes_.size() - offset_; }
    std::string_view what() const { return what_; }

    std::span<const uint8_t> take(size_t n, const char* field) {
        if (n > remaining())
            fail("routing trace '{}': truncated at byte {} reading {} ({} bytes needed, {} left)", what_,
                 offset_, field, n, remaining());
        std::span<const uint8_t> out = bytes_.subspan(offset_, n);
        offset_ += n;
        return out;
    }

    template <typename T>
    T read(const char* field) {
        std::span<const uint8_t> raw = take(sizeof(T), field);
        std::make_unsigned_t<T> value = 0;
        for (size_t i = 0; i < sizeof(T); ++i)
            value |=
                static_cast<std::make_unsigned_t<T>>(static_cast<std::make_unsigned_t<T>>(raw[i]) << (8 * i));
        return static_cast<T>(value);
    }

    std::string read_string(const char* field) {
        const uint32_t length = read<uint32_t>(field);
        std::span<const uint8_t> raw = take(length, field);
        return std::string(raw.begin(), raw.end());
    }

private:
    std::span<const uint8_t> bytes_;
    std::string_view what_;
    size_t offset_ = 0;
};

// Sizes and layer order, shared by the reader (on the header) and the writer (on the struct).
void check_shape(std::string_view what, int64_t n_expert, int64_t k, std::span<const int32_t> layers,
                 int64_t n_tokens) {
    if (n_expert < 1 || n_expert > kMaxExperts)
        fail("routing trace '{}': n_expert {} out of range (1..{})", what, n_expert, kMaxExperts);
    if (k < 1 || k > n_expert)
        fail("routing trace '{}': k {} out of range (1..n_expert = {})", what, k, n_expert);
    if (layers.empty()) fail("routing trace '{}': no traced layers", what);
    if (n_tokens < 0) fail("routing trace '{}': n_tokens {} is negative", what, n_tokens);
    for (size_t i = 0; i < layers.size(); ++i) {
        if (layers[i] < 0) fail("routing trace '{}': trunk layer {} is negative", what, layers[i]);
        if (i > 0 && layers[i] <= layers[i - 1])
            fail("routing trace '{}': trunk layers not strictly ascending ({} after {})", what, layers[i],
                 layers[i - 1]);
    }
}

// Every id below n_expert and the k ids of one token in one layer distinct (a router's top-k).
void check_ids(std::string_view what, const RoutingTrace& t) {
    std::vector<int64_t> seen_in_group(static_cast<size_t>(t.n_expert), -1);
    const size_t n_layers = t.layers.size();
    for (int64_t tok = 0; tok < t.n_tokens; ++tok) {
        for (size_t li = 0; li < n_layers; ++li) {
            const int64_t group = tok * static_cast<int64_t>(n_layers) + static_cast<int64_t>(li);
            const uint16_t* ids = t.at(tok, li);
            for (int64_t j = 0; j < t.k; ++j) {
                if (ids[j] >= t.n_expert)
                    fail("routing trace '{}': token {} layer {}: expert id {} >= n_expert {}", what, tok,
                         t.layers[li], ids[j], t.n_expert);
                if (seen_in_group[ids[j]] == group)
                    fail("routing trace '{}': token {} layer {}: expert {} selected twice", what, tok,
                         t.layers[li], ids[j]);
                seen_in_group[ids[j]] = group;
            }
        }
    }
}

// n_tokens * n_layers * k, or fails when it overflows.
size_t id_count(std::string_view what, int64_t n_tokens, size_t n_layers, int64_t k) {
    uint64_t per_token = 0, total = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(n_layers), static_cast<uint64_t>(k), &per_token) ||
        __builtin_mul_overflow(per_token, static_cast<uint64_t>(n_tokens), &total) ||
        total > std::numeric_limits<size_t>::max() / 2)
        fail("routing trace '{}': {} tokens x {} layers x k {} is too large", what, n_tokens, n_layers, k);
    return static_cast<size_t>(total);
}

template <typename T>
void put(std::vector<uint8_t>& out, T value) {
    for (size_t i = 0; i < sizeof(T); ++i)
        out.push_back(static_cast<uint8_t>(static_cast<std::make_unsigned_t<T>>(value) >> (8 * i)));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
    if (s.size() > std::numeric_limits<uint32_t>::max())
        fail("routing trace: a string of {} bytes", s.size());
    put(out, static_cast<uint32_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
}

}  // namespace

RoutingTrace parse_routing_trace(std::span<const uint8_t> bytes, std::string_view what) {
    Cursor in(bytes, what);
    std::span<const uint8_t> magic = in.take(sizeof kMagic, "the magic");
    if (std::memcmp(magic.data(), kMagic, sizeof kMagic) != 0)
        fail("routing trace '{}': not a routing trace (the file does not start with \"MOXROUTE\")", what);
    const uint32_t version = in.read<uint32_t>("the version");
    if (version != kVersion)
        fail("routing trace '{}': version {} (mox reads version {})", what, version, kVersion);
    const uint32_t width = in.read<uint32_t>("the id width");

    RoutingTrace t;
    t.n_expert = in.read<int64_t>("n_expert");
    t.k = in.read<int64_t>("k");
    const int64_t n_layers = in.read<int64_t>("n_layers");
    t.n_tokens = in.read<int64_t>("n_tokens");
    // Refuse a layer count the file cannot hold before allocating for it.
    if (n_layers < 1) fail("routing trace '{}': n_layers {} out of range (at least 1)", what, n_layers);
    if (static_cast<uint64_t>(n_layers) > in.remaining() / sizeof(int32_t))
        fail("routing trace '{}': truncated or corrupt: n_layers {} does not fit the {} bytes left", what,
             n_layers, in.remaining());
    t.layers.resize(static_cast<size_t>(n_layers));
    for (int32_t& layer : t.layers) layer = in.read<int32_t>("the trunk layer indices");
    check_shape(what, t.n_expert, t.k, t.layers, t.n_tokens);
    if (width != id_width(t.n_expert))
        fail("routing trace '{}': id width {} bytes for {} experts (expected {})", what, width, t.n_expert,
             id_width(t.n_expert));
    t.arch = in.read_string("the architecture");
    t.model = in.read_string("the model name");

    const size_t n_ids = id_count(what, t.n_tokens, t.layers.size(), t.k);
    const size_t left = in.remaining();
    if (left < n_ids * width)
        fail("routing trace '{}': truncated: {} tokens x {} layers x k {} need {} bytes of ids, {} left",
             what, t.n_tokens, t.layers.size(), t.k, n_ids * width, left);
    if (left > n_ids * width)
        fail("routing trace '{}': {} bytes after the last id", what, left - n_ids * width);
    std::span<const uint8_t> raw = in.take(n_ids * width, "the ids");
    t.ids.resize(n_ids);
    for (size_t i = 0; i < n_ids; ++i)
        t.ids[i] = width == 1 ? raw[i] : static_cast<uint16_t>(raw[2 * i] | raw[2 * i + 1] << 8);
    check_ids(what, t);
    return t;
}

RoutingTrace read_routing_trace(const std::string& path) {
    const MappedFile file = MappedFile::open(path);
    return parse_routing_trace(file.bytes(), path);
}

void write_routing_trace(const std::string& path, const RoutingTrace& trace) {
    check_shape(path, trace.n_expert, trace.k, trace.layers, trace.n_tokens);
    const size_t n_ids = id_count(path, trace.n_tokens, trace.layers.size(), trace.k);
    if (trace.ids.size() != n_ids)
        fail("routing trace '{}': {} ids for {} tokens x {} layers x k {} ({} expected)", path,
             trace.ids.size(), trace.n_tokens, trace.layers.size(), trace.k, n_ids);
    check_ids(path, trace);

    const uint32_t width = id_width(trace.n_expert);
    std::vector<uint8_t> out(std::begin(kMagic), std::end(kMagic));
    put(out, kVersion);
    put(out, width);
    put(out, trace.n_expert);
    put(out, trace.k);
    put(out, static_cast<int64_t>(trace.layers.size()));
    put(out, trace.n_tokens);
    for (int32_t layer : trace.layers) put(out, layer);
    put_string(out, trace.arch);
    put_string(out, trace.model);
    out.reserve(out.size() + n_ids * width);
    for (uint16_t id : trace.ids) {
        if (width == 1)
            out.push_back(static_cast<uint8_t>(id));
        else
            put(out, id);
    }

    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    if (!file) fail("cannot write routing trace '{}': {}", path, std::strerror(errno));
    file.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
    file.close();
    if (!file) fail("cannot write routing trace '{}': {}", path, std::strerror(errno));
}

}  // namespace mox::models
