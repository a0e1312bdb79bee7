// Writer -> reader round trips: every value type (nested arrays included), every tensor type of the
// registry, chunked streaming, alignment, and the writer's own error handling. One hand-assembled
// byte image (from the layout in shared/spec/gguf-and-quants.md §1.1) pins the writer's output.
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "gguf_test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>

namespace mox::gguf {
namespace {

using test::pattern;
using test::TempDir;
using test::throws_error;

std::vector<KeyValue> every_value_type() {
    std::vector<KeyValue> md;
    auto add = [&](std::string k, Value v) { md.push_back({std::move(k), std::move(v)}); };
    add("t.u8", Value::u8(0xFF));
    add("t.i8", Value::i8(std::numeric_limits<int8_t>::min()));
    add("t.u16", Value::u16(0xFFFF));
    add("t.i16", Value::i16(std::numeric_limits<int16_t>::min()));
    add("t.u32", Value::u32(0xFFFFFFFFu));
    add("t.i32", Value::i32(std::numeric_limits<int32_t>::min()));
    add("t.u64", Value::u64(~0ull));
    add("t.i64", Value::i64(std::numeric_limits<int64_t>::min()));
    add("t.f32", Value::f32(-1.17549435e-38f));
    add("t.f32_inf", Value::f32(std::numeric_limits<float>::infinity()));
    add("t.f64", Value::f64(1e-310));  // subnormal
    add("t.bool", Value::boolean(true));
    add("t.bool_f", Value::boolean(false));
    add("t.string", Value::string("ünïcødé 模型 \xF0\x9F\xA6\x99 with \"quotes\"\nand a newline"));
    add("t.binary", Value::string(std::string("a\0b\xff", 4)));  // GGUF strings are byte strings
    add("t.empty", Value::string(""));
    add("t.tokens", Value::string_array({"<s>", "", "▁the", "世界"}));
    add("t.i32s", Value::i32_array({0, -1, 2147483647}));
    add("t.f32s", Value::f32_array({0.5f, -0.0f, 3e38f}));
    Array bools{ValueType::boolean, {Value::boolean(false), Value::boolean(true)}};
    add("t.bools", Value::array(bools));
    Array u64s{ValueType::u64, {Value::u64(1), Value::u64(~0ull)}};
    add("t.u64s", Value::array(u64s));
    add("t.empty_array", Value::array(Array{ValueType::f64, {}}));
    // [[1, 2], [], [[...]]]: arrays of arrays, including an empty one and a third level.
    Array inner1{ValueType::u16, {Value::u16(1), Value::u16(2)}};
    Array inner2{ValueType::u16, {}};
    Array level3{ValueType::array, {Value::string_array({"deep"})}};
    Array mixed{ValueType::array, {Value::array(level3)}};
    add("t.nested", Value::array(Array{ValueType::array, {Value::array(inner1), Value::array(inner2)}}));
    add("t.nested3", Value::array(mixed));
    return md;
}

TEST(GgufRoundTrip, EveryValueTypeIsReadBackWithItsType) {
    TempDir dir;
    const std::string path = dir.file("values.gguf");
    const std::vector<KeyValue> md = every_value_type();
    {
        Writer w(path);
        for (const KeyValue& kv : md) w.set(kv.key, kv.value);
        w.write_header();
        w.finish();
    }
    const File f = File::open(path);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), kDefaultAlignment);
    ASSERT_EQ(f.metadata().size(), md.size());
    for (size_t i = 0; i < md.size(); ++i) {
        EXPECT_EQ(f.metadata()[i].key, md[i].key);
        EXPECT_EQ(f.metadata()[i].value.type(), md[i].value.type()) << md[i].key;
        EXPECT_EQ(f.metadata()[i].value, md[i].value)
            << md[i].key << ": " << f.metadata()[i].value.to_display();
    }
    EXPECT_TRUE(f.tensors().empty());
    // Typed helpers.
    EXPECT_EQ(f.get_uint("t.u64"), ~0ull);
    EXPECT_EQ(f.get_uint("t.u8"), 0xFFu);
    EXPECT_EQ(f.get_string("t.empty"), "");
    EXPECT_EQ(f.get_float("t.f64"), 1e-310);
    EXPECT_EQ(f.get_float("t.u16"), 65535.0);
    EXPECT_TRUE(f.get_bool_or("t.bool", false));
    EXPECT_EQ(f.get_uint_or("absent", 7), 7u);
    EXPECT_EQ(f.get_string_or("absent", "x"), "x");
    EXPECT_TRUE(throws_error([&] { f.get_uint("t.i8"); },
                             "metadata key 't.i8' holds i8 -128, expected a non-negative"));
    EXPECT_TRUE(throws_error([&] { f.get_string("t.u8"); }, "expected a string"));
    EXPECT_TRUE(throws_error([&] { f.get_bool_or("t.u8", true); }, "expected a bool"));
    EXPECT_TRUE(throws_error([&] { f.get_uint("absent"); }, "metadata key 'absent' is missing"));
    EXPECT_TRUE(throws_error([&] { f.get_float_or("t.string", 1.0); }, "expected a number"));
}

TEST(GgufRoundTrip, EveryRegistryTypeWithChunkedWrites) {
    TempDir dir;
    const std::string path = dir.file("tensors.gguf");
    struct Expect {
        std::string name;
        quant::TypeId type;
        std::vector<int64_t> ne;
        std::vector<uint8_t> bytes;
    };
    std::vector<Expect> expect;
    uint64_t seed = 1;
    for (const quant::TypeTraits& t : quant::all_types()) {
        std::vector<int64_t> ne{t.block_elems * 2, 3};
        if (seed % 3 == 0) ne.push_back(2);  // some 3-D
        int64_t n = 1;
        for (int64_t d : ne) n *= d;
        const size_t bytes = static_cast<size_t>(n / t.block_elems) * t.block_bytes;
        expect.push_back({fmt::format("tensor.{}", t.name), t.id, ne, pattern(bytes, seed++)});
    }
    expect.push_back({"zero.sized", quant::TypeId::f32, {0, 5}, {}});
    expect.push_back({"scalar", quant::TypeId::f32, {}, pattern(4, 99)});
    {
        Writer w(path, 64);
        w.set("general.architecture", Value::string("x"));
        for (const Expect& e : expect) {
            const size_t i = w.add_tensor(e.name, e.ne, e.type);
            EXPECT_EQ(w.tensor_bytes(i), e.bytes.size());
        }
        w.write_header();
        // One stream of all tensors back to back, cut into pieces that straddle tensor ends.
        std::vector<uint8_t> all;
        for (const Expect& e : expect) all.insert(all.end(), e.bytes.begin(), e.bytes.end());
        size_t pos = 0, piece = 1;
        while (pos < all.size()) {
            const size_t n = std::min(piece, all.size() - pos);
            w.write_data(std::span<const uint8_t>(all).subspan(pos, n));
            pos += n;
            piece = piece * 2 + 3;
        }
        w.finish();
    }
    const File f = File::open(path);
    EXPECT_EQ(f.alignment(), 64u);
    ASSERT_NE(f.find("general.alignment"), nullptr);
    EXPECT_EQ(f.find("general.alignment")->type(), ValueType::u32);
    ASSERT_EQ(f.tensors().size(), expect.size());
    uint64_t next_offset = 0;
    for (size_t i = 0; i < expect.size(); ++i) {
        const TensorInfo& t = f.tensors()[i];
        SCOPED_TRACE(t.name);
        EXPECT_EQ(t.name, expect[i].name);
        EXPECT_EQ(t.type, expect[i].type);
        EXPECT_EQ(t.n_dims, static_cast<int>(expect[i].ne.size()));
        for (int d = 0; d < kMaxDims; ++d)
            EXPECT_EQ(t.ne[d], d < t.n_dims ? expect[i].ne[static_cast<size_t>(d)] : 1);
        EXPECT_EQ(t.n_bytes, expect[i].bytes.size());
        // Contiguous, in order, each padded to the alignment: what ggml's reader requires.
        EXPECT_EQ(t.offset, next_offset);
        next_offset += (t.n_bytes + 63) / 64 * 64;
        EXPECT_EQ(t.file_offset % 64, 0u);
        EXPECT_TRUE(
            std::equal(t.bytes().begin(), t.bytes().end(), expect[i].bytes.begin(), expect[i].bytes.end()));
        EXPECT_EQ(f.find_tensor(t.name), &t);
    }
    EXPECT_EQ(f.find_tensor("nope"), nullptr);
    EXPECT_EQ(f.total_file_bytes(), std::filesystem::file_size(path));
}

// The bytes of a tiny file, assembled here from the spec's table, not from the writer.
TEST(GgufWriter, MatchesHandAssembledBytes) {
    TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    {
        Writer w(path);
        w.set("a", Value::u8(7));
        w.add_tensor("t", {1}, quant::TypeId::f32);
        w.write_header();
        const uint8_t data[4] = {1, 2, 3, 4};
        w.write_data(data);
        w.finish();
    }
    std::vector<uint8_t> want;
    auto u32 = [&](uint32_t v) {
        for (int i = 0; i < 4; ++i) want.push_back(static_cast<uint8_t>(v >> (8 * i)));
    };
    auto u64 = [&](uint64_t v) {
        for (int i = 0; i < 8; ++i) want.push_back(static_cast<uint8_t>(v >> (8 * i)));
    };
    want.insert(want.end(), {'G', 'G', 'U', 'F'});
    u32(3);  // version
    u64(1);  // tensor_count
    u64(1);  // kv_count
    u64(1);  // key length
    want.push_back('a');
    u32(0);  // UINT8
    want.push_back(7);
    u64(1);  // name length
    want.push_back('t');
    u32(1);              // n_dims
    u64(1);              // ne[0]
    u32(0);              // F32
    u64(0);              // offset
    want.resize(96, 0);  // 71 bytes of header, padded to 32
    want.insert(want.end(), {1, 2, 3, 4});
    want.resize(128, 0);  // the tensor is padded too, as ggml's writer does
    EXPECT_EQ(test::read_bytes(path), want);
}

TEST(GgufWriter, DestroyedBeforeFinishRemovesThePartialFile) {
    TempDir dir;
    const std::string path = dir.file("partial.gguf");
    {
        Writer w(path);
        w.add_tensor("t", {32}, quant::TypeId::f32);
        w.write_header();
        const std::vector<uint8_t> half(64);
        w.write_data(half);
        EXPECT_TRUE(std::filesystem::exists(path));
    }
    EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(GgufWriter, RejectsMisuseAndBadDeclarations) {
    TempDir dir;
    Writer w(dir.file("bad.gguf"));
    EXPECT_TRUE(throws_error([&] { w.add_tensor("q", {33}, quant::TypeId::q8_0); },
                             "not a multiple of the Q8_0 block size 32"));
    EXPECT_TRUE(throws_error([&] { w.add_tensor(std::string(64, 'n'), {4}, quant::TypeId::f32); },
                             "must be 1..63 bytes"));
    EXPECT_TRUE(throws_error([&] { w.add_tensor("neg", {-1}, quant::TypeId::f32); }, "negative dim"));
    EXPECT_TRUE(throws_error(
        [&] {
            w.add_tensor("five", {1, 1, 1, 1, 1}, quant::TypeId::f32);
        },
        "has 5 dims"));
    EXPECT_TRUE(
        throws_error([&] { w.add_tensor("odd", {4}, static_cast<quant::TypeId>(4)); }, "unknown type id 4"));
    EXPECT_TRUE(
        throws_error([&] { w.set("general.alignment", Value::u64(64)); }, "must be a u32 power of two"));
    EXPECT_TRUE(
        throws_error([&] { w.set("general.alignment", Value::u32(48)); }, "must be a u32 power of two"));
    EXPECT_TRUE(throws_error([&] { w.set("", Value::u8(1)); }, "empty metadata key"));
    Array mixed{ValueType::u8, {Value::u8(1), Value::i8(2)}};
    EXPECT_TRUE(throws_error([&] { w.set("mixed", Value::array(mixed)); }, "array element 1 has type i8"));
    w.add_tensor("a", {4}, quant::TypeId::f32);
    EXPECT_TRUE(
        throws_error([&] { w.add_tensor("a", {4}, quant::TypeId::f32); }, "duplicate tensor name 'a'"));
    const std::vector<uint8_t> bytes(20);
    EXPECT_TRUE(throws_error([&] { w.write_data(bytes); }, "before write_header"));
    w.write_header();
    EXPECT_TRUE(throws_error([&] { w.set("late", Value::u8(1)); }, "after write_header"));
    EXPECT_TRUE(throws_error([&] { w.finish(); }, "tensor 0 'a' got 0 of its 16 bytes"));
    EXPECT_TRUE(
        throws_error([&] { w.write_data(bytes); }, "4 bytes written past the end of the last tensor"));
    EXPECT_TRUE(throws_error([] { Writer bad("/nonexistent-dir/x.gguf"); },
                             "cannot create '/nonexistent-dir/x.gguf'"));
    EXPECT_TRUE(throws_error([&] { Writer bad(dir.file("a.gguf"), 24); }, "alignment 24"));
}

TEST(GgufWriter, SetReplacesKeepingFirstPositionAndAlignmentKeyDrivesPadding) {
    TempDir dir;
    const std::string path = dir.file("align.gguf");
    {
        Writer w(path);
        w.set("first", Value::u8(1));
        w.set("general.alignment", Value::u32(128));
        w.set("first", Value::string("replaced"));
        w.add_tensor("a", {3}, quant::TypeId::f32);
        w.add_tensor("b", {3}, quant::TypeId::f32);
        w.write_header();
        w.write_data(pattern(24, 5));
        w.finish();
    }
    const File f = File::open(path);
    ASSERT_EQ(f.metadata().size(), 2u);
    EXPECT_EQ(f.metadata()[0].key, "first");
    EXPECT_EQ(f.get_string("first"), "replaced");
    EXPECT_EQ(f.alignment(), 128u);
    EXPECT_EQ(f.tensors()[1].offset, 128u);
    EXPECT_EQ(f.tensors()[0].file_offset % 128, 0u);
}

TEST(GgufValue, AccessorsAndDisplay) {
    EXPECT_EQ(Value::i32(-3).as_uint(), std::nullopt);
    EXPECT_EQ(Value::i32(-3).as_int(), -3);
    EXPECT_EQ(Value::u64(~0ull).as_int(), std::nullopt);
    EXPECT_EQ(Value::u64(5).as_int(), 5);
    EXPECT_EQ(Value::u8(5).as_float(), 5.0);
    EXPECT_EQ(Value::string("x").as_float(), std::nullopt);
    EXPECT_EQ(Value::boolean(true).as_uint(), std::nullopt);
    EXPECT_EQ(Value::u8(1).as_bool(), std::nullopt);
    EXPECT_TRUE(Value::u16(1).is_integer());
    EXPECT_FALSE(Value::f32(1).is_integer());
    EXPECT_TRUE(Value::f64(1).is_float());
    EXPECT_EQ(Value::u8(1).as_string(), nullptr);
    EXPECT_EQ(Value::u8(1).as_array(), nullptr);
    EXPECT_NE(Value::u8(1), Value::u16(1));  // same number, different type
    EXPECT_EQ(Value::f32(0.1f).to_display(), "0.1");
    EXPECT_EQ(Value::string("a\"b\n").to_display(), "\"a\\\"b\\n\"");
    EXPECT_EQ(Value::string_array({"a", "b", "c"}).to_display(2), "[3 x string: \"a\", \"b\", ...]");
    EXPECT_EQ(Value::i32_array({}).to_display(), "[0 x i32]");
    EXPECT_EQ(value_type_name(ValueType::boolean), "bool");
}

}  // namespace
}  // namespace mox::gguf
