// Split models (shared/spec/gguf-and-quants.md §1.6): shards written here with the Writer, opened
// through the first shard, merged; every inconsistency between shards is an error naming the file.
#include "gguf/split.h"
#include "core/mapped_file.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "gguf_test_util.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace mox::gguf {
namespace {

using test::pattern;
using test::TempDir;
using test::throws_error;

struct ShardSpec {
    std::vector<std::string> tensors;
    int split_no;     // value written to split.no
    int split_count;  // value written to split.count
};

// Writes PREFIX-0000k-of-0000n.gguf for each spec; shard 0 also carries the model metadata.
// Every tensor is F32 [8] with bytes derived from its name's position.
void write_split(const std::string& prefix, const std::vector<ShardSpec>& shards, int tensors_count) {
    const int n = static_cast<int>(shards.size());
    int seed = 0;
    for (int k = 0; k < n; ++k) {
        Writer w(split_path(prefix, k + 1, n));
        if (k == 0) {
            w.set("general.architecture", Value::string("split-test"));
            w.set("general.name", Value::string("model"));
        }
        w.set(std::string(kKeySplitNo), Value::u16(static_cast<uint16_t>(shards[k].split_no)));
        w.set(std::string(kKeySplitCount), Value::u16(static_cast<uint16_t>(shards[k].split_count)));
        w.set(std::string(kKeySplitTensorsCount), Value::i32(tensors_count));
        for (const std::string& t : shards[k].tensors) w.add_tensor(t, {8}, quant::TypeId::f32);
        w.write_header();
        for (size_t i = 0; i < shards[k].tensors.size(); ++i)
            w.write_data(pattern(32, static_cast<uint64_t>(seed++)));
        w.finish();
    }
}

TEST(GgufSplit, NamesParseAndFormat) {
    EXPECT_EQ(split_path("/m/model", 2, 13), "/m/model-00002-of-00013.gguf");
    const auto n = parse_split_name("/m/model-00002-of-00013.gguf");
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(n->prefix, "/m/model");
    EXPECT_EQ(n->number, 2);
    EXPECT_EQ(n->count, 13);
    EXPECT_FALSE(parse_split_name("model.gguf"));
    EXPECT_FALSE(parse_split_name("model-0001-of-00013.gguf"));   // 4 digits
    EXPECT_FALSE(parse_split_name("model-00014-of-00013.gguf"));  // number > count
    EXPECT_FALSE(parse_split_name("model-00000-of-00013.gguf"));  // 1-based
    EXPECT_FALSE(parse_split_name("/dir/-00001-of-00002.gguf"));  // empty prefix
    EXPECT_FALSE(parse_split_name("model-00001-of-00002.bin"));
}

TEST(GgufSplit, FirstShardOpensAndMergesAll) {
    TempDir dir;
    const std::string prefix = dir.file("m");
    write_split(prefix, {{{"a", "b"}, 0, 3}, {{"c"}, 1, 3}, {{"d", "e"}, 2, 3}}, 5);
    const File f = File::open(split_path(prefix, 1, 3));
    EXPECT_EQ(f.n_shards(), 3);
    ASSERT_EQ(f.tensors().size(), 5u);
    const char* names[] = {"a", "b", "c", "d", "e"};
    const int shard_of[] = {0, 0, 1, 2, 2};
    uint64_t total = 0;
    for (int k = 1; k <= 3; ++k) total += std::filesystem::file_size(split_path(prefix, k, 3));
    EXPECT_EQ(f.total_file_bytes(), total);
    for (int i = 0; i < 5; ++i) {
        const TensorInfo& t = f.tensors()[static_cast<size_t>(i)];
        EXPECT_EQ(t.name, names[i]);
        EXPECT_EQ(t.shard, shard_of[i]);
        const std::vector<uint8_t> want = pattern(32, static_cast<uint64_t>(i));
        EXPECT_TRUE(std::equal(t.bytes().begin(), t.bytes().end(), want.begin(), want.end())) << t.name;
        // The data pointer is into that shard's own file at file_offset.
        const std::vector<uint8_t> shard = test::read_bytes(split_path(prefix, t.shard + 1, 3));
        EXPECT_TRUE(std::equal(want.begin(), want.end(), shard.begin() + static_cast<long>(t.file_offset)));
        EXPECT_EQ(f.find_tensor(t.name), &t);
    }
    EXPECT_EQ(f.get_string("general.name"), "model");  // metadata comes from shard 0
    EXPECT_EQ(f.get_uint("split.count"), 3u);
    // A File stays valid after a move (the mappings move with it).
    File moved = std::move(const_cast<File&>(f));
    EXPECT_EQ(moved.tensors()[4].bytes()[0], pattern(32, 4)[0]);
}

TEST(GgufSplit, MetadataOnlyFirstShard) {
    TempDir dir;
    const std::string prefix = dir.file("m");
    write_split(prefix, {{{}, 0, 2}, {{"x", "y"}, 1, 2}}, 2);
    const File f = File::open(split_path(prefix, 1, 2));
    ASSERT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.tensors()[0].shard, 1);
}

TEST(GgufSplit, NonFirstShardIsAClearError) {
    TempDir dir;
    const std::string prefix = dir.file("m");
    write_split(prefix, {{{"a"}, 0, 2}, {{"b"}, 1, 2}}, 2);
    EXPECT_TRUE(throws_error(
        [&] { File::open(split_path(prefix, 2, 2)); },
        "this is shard 2 of 2 (split.no = 1); open the first shard '" + split_path(prefix, 1, 2)));
}

TEST(GgufSplit, InconsistentShardsAreErrors) {
    TempDir dir;
    // Each case: the file that must be named, then the field and the problem.
    auto expect = [](const std::string& open, const std::string& file, const std::string& field,
                     const std::string& problem) {
        EXPECT_TRUE(throws_error([&] { File::open(open); }, file + ": " + field));
        EXPECT_TRUE(throws_error([&] { File::open(open); }, problem));
    };
    {
        const std::string p = dir.file("missing");
        write_split(p, {{{"a"}, 0, 3}, {{"b"}, 1, 3}, {{"c"}, 2, 3}}, 3);
        std::filesystem::remove(split_path(p, 3, 3));
        expect(split_path(p, 1, 3), split_path(p, 1, 3), "shard 3 of 3",
               "cannot open '" + split_path(p, 3, 3));
    }
    {
        const std::string p = dir.file("dup");
        write_split(p, {{{"a", "b"}, 0, 2}, {{"b"}, 1, 2}}, 3);
        expect(split_path(p, 1, 2), split_path(p, 2, 2), "tensor 0 'b' name at byte ",
               "also in shard 1 (" + split_path(p, 1, 2) + ")");
    }
    {
        const std::string p = dir.file("wrongno");
        write_split(p, {{{"a"}, 0, 3}, {{"b"}, 2, 3}, {{"c"}, 2, 3}}, 3);
        expect(split_path(p, 1, 3), split_path(p, 2, 3), "split.no at byte ",
               ": 2, but the file name says shard 2 (split.no 1)");
    }
    {
        const std::string p = dir.file("wrongcount");
        write_split(p, {{{"a"}, 0, 2}, {{"b"}, 1, 3}}, 2);
        expect(split_path(p, 1, 2), split_path(p, 2, 2), "split.count at byte ",
               ": 3, but the first shard says 2 shards");
    }
    {
        const std::string p = dir.file("tensorcount");
        write_split(p, {{{"a"}, 0, 2}, {{"b"}, 1, 2}}, 7);
        expect(split_path(p, 1, 2), split_path(p, 1, 2), "split.tensors.count at byte ",
               ": 7, but the 2 shards hold 2 tensors");
    }
    {
        // The name says 3 shards, the key says 2.
        const std::string p = dir.file("namecount");
        write_split(p, {{{"a"}, 0, 2}, {{"b"}, 1, 2}}, 2);
        std::filesystem::rename(split_path(p, 1, 2), split_path(p, 1, 3));
        expect(split_path(p, 1, 3), split_path(p, 1, 3), "split.count at byte ",
               ": 2, but the file name says 3 shards");
    }
}

TEST(GgufMappedFile, ErrorsNameThePath) {
    TempDir dir;
    EXPECT_TRUE(throws_error([&] { MappedFile::open(dir.file("nope.gguf")); },
                             "cannot open '" + dir.file("nope.gguf") + "': No such file"));
    std::filesystem::create_directory(dir.file("d"));
    EXPECT_TRUE(throws_error([&] { MappedFile::open(dir.file("d")); }, "not a regular file"));
    test::write_bytes(dir.file("empty"), {});
    const MappedFile e = MappedFile::open(dir.file("empty"));
    EXPECT_EQ(e.size(), 0u);
    EXPECT_TRUE(e.bytes().empty());
    test::write_bytes(dir.file("three"), {1, 2, 3});
    MappedFile m = MappedFile::open(dir.file("three"));
    ASSERT_EQ(m.size(), 3u);
    EXPECT_EQ(m.data()[2], 3);
    MappedFile moved = std::move(m);
    EXPECT_EQ(moved.bytes()[1], 2);
    EXPECT_EQ(m.data(), nullptr);
    EXPECT_EQ(moved.path(), dir.file("three"));
}

}  // namespace
}  // namespace mox::gguf
