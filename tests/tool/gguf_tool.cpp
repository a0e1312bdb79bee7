// gguf_tool: drives mox's GGUF reader and writer for tests/py/test_gguf_interop.py.
//
//   gguf_tool dump FILE [--check-data] [--hex]    JSON of metadata (with types) and tensors
//   gguf_tool write-json SPEC.json OUT [--split N] a GGUF from a JSON description (format below)
//   gguf_tool write-sample OUT [--split N]        every value type, nested arrays, unicode, several
//                                                 quant types with deterministic bytes
//
// Value JSON (dump output and write-json input): {"type": "u8", "value": 3}; arrays are
// {"type": "array", "value": {"elem_type": "i32", "items": [1, 2]}} where nested items are
// {"elem_type": ..., "items": [...]} again. Non-finite floats are the strings "nan", "inf", "-inf".
// Tensors: {"name", "ne": [ne0, ...], "type": "Q4_K", "data_hex": "..."}.
//
// Errors: one line on stderr, exit 1 (mox::Error) or 2 (anything else: a bug).
#include "core/error.h"
#include "gguf/reader.h"
#include "gguf/split.h"
#include "gguf/writer.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

using mox::gguf::Array;
using mox::gguf::Value;
using mox::gguf::ValueType;
using json = nlohmann::json;

// ---- JSON <-> Value ----

std::optional<ValueType> type_from_name(std::string_view name) {
    for (uint32_t t = 0; t <= 12; ++t)
        if (mox::gguf::value_type_name(static_cast<ValueType>(t)) == name) return static_cast<ValueType>(t);
    return std::nullopt;
}

json float_json(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    return d;
}

double float_from_json(const json& j) {
    if (j.is_string()) {
        const std::string s = j.get<std::string>();
        if (s == "nan") return NAN;
        if (s == "inf") return INFINITY;
        if (s == "-inf") return -INFINITY;
        mox::fail("bad float '{}'", s);
    }
    return j.get<double>();
}

json raw_value_json(const Value& v);

json array_json(const Array& a) {
    json items = json::array();
    for (const Value& item : a.items) items.push_back(raw_value_json(item));
    return json{{"elem_type", mox::gguf::value_type_name(a.elem_type)}, {"items", items}};
}

json raw_value_json(const Value& v) {
    switch (v.type()) {
        case ValueType::u8:
        case ValueType::u16:
        case ValueType::u32:
        case ValueType::u64:
            return *v.as_uint();
        case ValueType::i8:
        case ValueType::i16:
        case ValueType::i32:
        case ValueType::i64:
            return *v.as_int();
        case ValueType::f32:
        case ValueType::f64:
            return float_json(*v.as_float());
        case ValueType::boolean:
            return *v.as_bool();
        case ValueType::string:
            return *v.as_string();
        case ValueType::array:
            return array_json(*v.as_array());
    }
    return nullptr;
}

Value value_from_json(ValueType t, const json& j);

Array array_from_json(const json& j) {
    const std::optional<ValueType> elem = type_from_name(j.at("elem_type").get<std::string>());
    if (!elem) mox::fail("unknown elem_type {}", j.at("elem_type").dump());
    Array a{*elem, {}};
    for (const json& item : j.at("items")) a.items.push_back(value_from_json(*elem, item));
    return a;
}

Value value_from_json(ValueType t, const json& j) {
    switch (t) {
        case ValueType::u8:
            return Value::u8(j.get<uint8_t>());
        case ValueType::i8:
            return Value::i8(j.get<int8_t>());
        case ValueType::u16:
            return Value::u16(j.get<uint16_t>());
        case ValueType::i16:
            return Value::i16(j.get<int16_t>());
        case ValueType::u32:
            return Value::u32(j.get<uint32_t>());
        case ValueType::i32:
            return Value::i32(j.get<int32_t>());
        case ValueType::u64:
            return Value::u64(j.get<uint64_t>());
        case ValueType::i64:
            return Value::i64(j.get<int64_t>());
        case ValueType::f32:
            return Value::f32(static_cast<float>(float_from_json(j)));
        case ValueType::f64:
            return Value::f64(float_from_json(j));
        case ValueType::boolean:
            return Value::boolean(j.get<bool>());
        case ValueType::string:
            return Value::string(j.get<std::string>());
        case ValueType::array:
            return Value::array(array_from_json(j));
    }
    mox::fail("bad value type");
}

// ---- data helpers ----

// FNV-1a, 64-bit: a short fingerprint of tensor bytes that Python recomputes independently.
uint64_t fnv1a64(std::span<const uint8_t> bytes) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint8_t b : bytes) {
        h ^= b;
        h *= 0x100000001b3ull;
    }
    return h;
}

std::string to_hex(std::span<const uint8_t> bytes) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s;
    s.reserve(bytes.size() * 2);
    for (uint8_t b : bytes) {
        s += kDigits[b >> 4];
        s += kDigits[b & 15];
    }
    return s;
}

std::vector<uint8_t> from_hex(const std::string& s) {
    auto nibble = [&](char c) -> uint8_t {
        if (c >= '0' && c <= '9') return static_cast<uint8_t>(c - '0');
        if (c >= 'a' && c <= 'f') return static_cast<uint8_t>(c - 'a' + 10);
        if (c >= 'A' && c <= 'F') return static_cast<uint8_t>(c - 'A' + 10);
        mox::fail("bad hex digit '{}'", c);
    };
    if (s.size() % 2 != 0) mox::fail("odd-length hex string");
    std::vector<uint8_t> out(s.size() / 2);
    for (size_t i = 0; i < out.size(); ++i)
        out[i] = static_cast<uint8_t>(nibble(s[2 * i]) << 4 | nibble(s[2 * i + 1]));
    return out;
}

// ---- dump ----

int dump(const std::string& path, bool check_data, bool hex) {
    mox::gguf::ReadOptions options;
    options.check_tensor_data = check_data;
    const mox::gguf::File f = mox::gguf::File::open(path, options);
    json out;
    out["path"] = f.path();
    out["version"] = f.version();
    out["alignment"] = f.alignment();
    out["n_shards"] = f.n_shards();
    out["total_file_bytes"] = f.total_file_bytes();
    json md = json::array();
    for (const mox::gguf::KeyValue& kv : f.metadata())
        md.push_back({{"key", kv.key},
                      {"type", mox::gguf::value_type_name(kv.value.type())},
                      {"value", raw_value_json(kv.value)}});
    out["metadata"] = md;
    json tensors = json::array();
    for (const mox::gguf::TensorInfo& t : f.tensors()) {
        json ne = json::array();
        for (int d = 0; d < t.n_dims; ++d) ne.push_back(t.ne[d]);
        json jt{{"name", t.name},
                {"n_dims", t.n_dims},
                {"ne", ne},
                {"type", mox::quant::type_name(t.type)},
                {"type_id", static_cast<uint32_t>(t.type)},
                {"offset", t.offset},
                {"n_bytes", t.n_bytes},
                {"shard", t.shard},
                {"file_offset", t.file_offset},
                {"fnv1a64", fmt::format("{:016x}", fnv1a64(t.bytes()))}};
        if (hex) jt["data_hex"] = to_hex(t.bytes());
        tensors.push_back(jt);
    }
    out["tensors"] = tensors;
    // Strings in a valid file need not be UTF-8; replace bad bytes rather than fail the dump.
    std::cout << out.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
    return 0;
}

// ---- writing ----

struct TensorSpec {
    std::string name;
    std::vector<int64_t> ne;
    mox::quant::TypeId type;
    std::vector<uint8_t> data;
};

struct FileSpec {
    std::vector<mox::gguf::KeyValue> metadata;
    std::vector<TensorSpec> tensors;
    uint32_t alignment = mox::gguf::kDefaultAlignment;
};

void write_one(const std::string& path, const FileSpec& spec,
               const std::vector<mox::gguf::KeyValue>& metadata, size_t first, size_t last) {
    mox::gguf::Writer w(path, spec.alignment);
    for (const mox::gguf::KeyValue& kv : metadata) w.set(kv.key, kv.value);
    for (size_t i = first; i < last; ++i)
        w.add_tensor(spec.tensors[i].name, spec.tensors[i].ne, spec.tensors[i].type);
    w.write_header();
    for (size_t i = first; i < last; ++i) {
        // Stream in uneven pieces to exercise the writer's chunking.
        std::span<const uint8_t> d = spec.tensors[i].data;
        size_t piece = 1;
        while (!d.empty()) {
            const size_t n = std::min(piece, d.size());
            w.write_data(d.first(n));
            d = d.subspan(n);
            piece = piece * 3 + 1;
        }
    }
    w.finish();
}

// Writes `spec` to OUT, or to N shards named after OUT (OUT minus ".gguf" is the prefix); shard 0
// carries the metadata, all shards the split keys, tensors divided as evenly as possible.
void write_spec(const std::string& out, const FileSpec& spec, int n_split) {
    if (n_split <= 1) {
        write_one(out, spec, spec.metadata, 0, spec.tensors.size());
        return;
    }
    std::string prefix = out;
    if (prefix.size() > 5 && prefix.ends_with(".gguf")) prefix.resize(prefix.size() - 5);
    const size_t n = spec.tensors.size();
    for (int k = 0; k < n_split; ++k) {
        std::vector<mox::gguf::KeyValue> md;
        if (k == 0) md = spec.metadata;
        md.push_back({std::string(mox::gguf::kKeySplitNo), Value::u16(static_cast<uint16_t>(k))});
        md.push_back({std::string(mox::gguf::kKeySplitCount), Value::u16(static_cast<uint16_t>(n_split))});
        md.push_back({std::string(mox::gguf::kKeySplitTensorsCount), Value::i32(static_cast<int32_t>(n))});
        const size_t first = n * static_cast<size_t>(k) / static_cast<size_t>(n_split);
        const size_t last = n * static_cast<size_t>(k + 1) / static_cast<size_t>(n_split);
        write_one(mox::gguf::split_path(prefix, k + 1, n_split), spec, md, first, last);
    }
}

FileSpec spec_from_json(const json& j) {
    FileSpec spec;
    if (j.contains("alignment")) spec.alignment = j.at("alignment").get<uint32_t>();
    for (const json& kv : j.at("metadata")) {
        const std::optional<ValueType> t = type_from_name(kv.at("type").get<std::string>());
        if (!t) mox::fail("unknown value type {}", kv.at("type").dump());
        spec.metadata.push_back({kv.at("key").get<std::string>(), value_from_json(*t, kv.at("value"))});
    }
    for (const json& jt : j.at("tensors")) {
        const std::optional<mox::quant::TypeId> type =
            mox::quant::type_from_name(jt.at("type").get<std::string>());
        if (!type) mox::fail("unknown tensor type {}", jt.at("type").dump());
        spec.tensors.push_back({jt.at("name").get<std::string>(), jt.at("ne").get<std::vector<int64_t>>(),
                                *type, from_hex(jt.at("data_hex").get<std::string>())});
    }
    return spec;
}

// SplitMix64: deterministic bytes for the sample's tensors.
struct SplitMix {
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
};

FileSpec sample_spec() {
    FileSpec s;
    auto add = [&](const char* key, Value v) { s.metadata.push_back({key, std::move(v)}); };
    add("general.architecture", Value::string("sample"));
    add("general.name", Value::string("mox sample — ünïcødé 模型 🦙"));
    add("sample.u8", Value::u8(250));
    add("sample.i8", Value::i8(-100));
    add("sample.u16", Value::u16(65000));
    add("sample.i16", Value::i16(-32000));
    add("sample.u32", Value::u32(4000000000u));
    add("sample.i32", Value::i32(-2000000000));
    add("sample.u64", Value::u64(18000000000000000000ull));
    add("sample.i64", Value::i64(-9000000000000000000ll));
    add("sample.f32", Value::f32(3.14159274f));
    add("sample.f64", Value::f64(-2.718281828459045));
    add("sample.bool_true", Value::boolean(true));
    add("sample.bool_false", Value::boolean(false));
    add("sample.empty_string", Value::string(""));
    add("sample.tokens", Value::string_array({"<s>", "</s>", "▁hello", "世界", "\n", "a\"b\\c"}));
    add("sample.scores", Value::f32_array({0.0f, -1.5f, 2.25f, -1e-20f, 3e30f}));
    add("sample.types", Value::i32_array({1, 2, 3, -4}));
    Array u8s{ValueType::u8, {}};
    for (int i = 0; i < 10; ++i) u8s.items.push_back(Value::u8(static_cast<uint8_t>(i * 25)));
    add("sample.u8_array", Value::array(u8s));
    Array bools{ValueType::boolean, {Value::boolean(true), Value::boolean(false), Value::boolean(true)}};
    add("sample.bool_array", Value::array(bools));
    Array u64s{ValueType::u64, {Value::u64(0), Value::u64(~0ull)}};
    add("sample.u64_array", Value::array(u64s));
    Array f64s{ValueType::f64, {Value::f64(1e300), Value::f64(-0.0)}};
    add("sample.f64_array", Value::array(f64s));
    add("sample.empty_array", Value::array(Array{ValueType::i16, {}}));
    // Nested: [[1, 2], [], [3]] of i16, and [["x"], ["y", "z"]].
    Array nested{
        ValueType::array,
        {Value::array(Array{ValueType::i16, {Value::i16(1), Value::i16(2)}}),
         Value::array(Array{ValueType::i16, {}}), Value::array(Array{ValueType::i16, {Value::i16(3)}})}};
    add("sample.nested_i16", Value::array(nested));
    Array nested_s{ValueType::array, {Value::string_array({"x"}), Value::string_array({"y", "z"})}};
    add("sample.nested_strings", Value::array(nested_s));

    SplitMix rng{42};
    auto tensor = [&](const char* name, std::vector<int64_t> ne, mox::quant::TypeId type) {
        const mox::quant::TypeTraits& tr = mox::quant::traits(type);
        int64_t n = 1;
        for (int64_t d : ne) n *= d;
        std::vector<uint8_t> data(static_cast<size_t>(n / tr.block_elems) * tr.block_bytes);
        for (uint8_t& b : data) b = static_cast<uint8_t>(rng.next());
        s.tensors.push_back({name, std::move(ne), type, std::move(data)});
    };
    using T = mox::quant::TypeId;
    tensor("token_embd.weight", {64, 3}, T::q8_0);
    tensor("blk.0.attn_q.weight", {256, 2}, T::q4_k);
    tensor("blk.0.ffn_down_exps.weight", {256, 2, 3}, T::q6_k);
    tensor("blk.0.ffn_gate_exps.weight", {256, 1, 2}, T::iq2_xxs);
    tensor("blk.0.attn_norm.weight", {7}, T::f32);
    tensor("blk.0.ssm_a", {5, 3}, T::f16);
    tensor("blk.0.bf16", {9}, T::bf16);
    tensor("blk.0.mxfp4", {32, 2}, T::mxfp4);
    tensor("blk.0.iq4_xs", {256}, T::iq4_xs);
    tensor("blk.0.idx", {3, 1, 1, 2}, T::i32);
    return s;
}

int usage() {
    std::fprintf(stderr,
                 "usage: gguf_tool dump FILE [--check-data] [--hex]\n"
                 "       gguf_tool write-json SPEC.json OUT [--split N]\n"
                 "       gguf_tool write-sample OUT [--split N]\n");
    return 2;
}

int run(int argc, char** argv) {
    if (argc < 3) return usage();
    const std::string cmd = argv[1];
    std::vector<std::string> args(argv + 2, argv + argc);
    bool check_data = false;
    bool hex = false;
    int n_split = 1;
    std::vector<std::string> positional;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--check-data") {
            check_data = true;
        } else if (args[i] == "--hex") {
            hex = true;
        } else if (args[i] == "--split" && i + 1 < args.size()) {
            n_split = std::stoi(args[++i]);
        } else {
            positional.push_back(args[i]);
        }
    }
    if (cmd == "dump" && positional.size() == 1) return dump(positional[0], check_data, hex);
    if (cmd == "write-sample" && positional.size() == 1) {
        write_spec(positional[0], sample_spec(), n_split);
        return 0;
    }
    if (cmd == "write-json" && positional.size() == 2) {
        std::ifstream in(positional[0]);
        if (!in) mox::fail("cannot open '{}'", positional[0]);
        write_spec(positional[1], spec_from_json(json::parse(in)), n_split);
        return 0;
    }
    return usage();
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const mox::Error& e) {
        std::fprintf(stderr, "gguf_tool: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gguf_tool: unexpected exception: %s\n", e.what());
        return 2;
    }
}
