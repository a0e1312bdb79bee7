// The checked-in corpus (tests/data/gguf, made by tools/make_gguf_corpus.py from the spec's byte
// layout): every broken file must be rejected with the error text listed in broken.tsv, which
// includes the field and the byte offset the generator computed; every valid file must load.
#include "gguf/reader.h"
#include "gguf_test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace mox::gguf {
namespace {

namespace fs = std::filesystem;
using test::throws_error;

const fs::path kDir = fs::path(MOX_TEST_DATA_DIR) / "gguf";

// broken.tsv: file name -> expected message substring ("check:" prefix: needs check_tensor_data).
std::map<std::string, std::string> manifest() {
    std::map<std::string, std::string> out;
    std::ifstream in(kDir / "broken.tsv");
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        const size_t tab = line.find('\t');
        if (tab == std::string::npos) continue;
        out[line.substr(0, tab)] = line.substr(tab + 1);
    }
    return out;
}

bool starts_with(const std::string& s, const char* p) {
    return s.rfind(p, 0) == 0;
}

TEST(GgufCorpus, EveryBrokenFileIsListed) {
    const auto m = manifest();
    ASSERT_GT(m.size(), 40u);
    for (const auto& entry : fs::directory_iterator(kDir)) {
        const std::string name = entry.path().filename().string();
        if (starts_with(name, "broken_") || starts_with(name, "checkdata_")) {
            EXPECT_TRUE(m.count(name)) << name << " has no line in broken.tsv";
        }
    }
}

TEST(GgufCorpus, BrokenFilesFailWithTheExpectedMessage) {
    for (const auto& [name, expect] : manifest()) {
        SCOPED_TRACE(name);
        const std::string path = (kDir / name).string();
        ASSERT_TRUE(fs::exists(path));
        const bool check = starts_with(expect, "check:");
        const std::string want = check ? expect.substr(6) : expect;
        ReadOptions options;
        options.check_tensor_data = check;
        if (check) {
            EXPECT_NO_THROW(File::open(path));  // structurally fine
        }
        EXPECT_TRUE(throws_error([&] { File::open(path, options); }, want));
        // The message names the file.
        EXPECT_TRUE(throws_error([&] { File::open(path, options); }, name));
    }
}

TEST(GgufCorpus, BrokenFilesAlsoFailFromMemory) {
    // File::parse sees one buffer and cannot follow splits, so split-level checks are skipped.
    for (const auto& [name, expect] : manifest()) {
        if (name.find("split") != std::string::npos || name.find("shard") != std::string::npos) continue;
        SCOPED_TRACE(name);
        const std::vector<uint8_t> bytes = test::read_bytes((kDir / name).string());
        ReadOptions options;
        options.check_tensor_data = starts_with(expect, "check:");
        const std::string want = options.check_tensor_data ? expect.substr(6) : expect;
        const std::string file_name = name;  // clang 14 cannot capture structured bindings
        EXPECT_TRUE(throws_error([&] { File::parse(bytes, file_name, options); }, want));
    }
}

TEST(GgufCorpus, ValidFilesLoad) {
    int n = 0;
    for (const auto& entry : fs::directory_iterator(kDir)) {
        const std::string name = entry.path().filename().string();
        if (!starts_with(name, "valid_")) continue;
        SCOPED_TRACE(name);
        ++n;
        const std::vector<uint8_t> bytes = test::read_bytes(entry.path().string());
        ReadOptions check;
        check.check_tensor_data = name == "valid_finite.gguf";
        const File f = File::parse(bytes, name, check);
        for (const TensorInfo& t : f.tensors()) {
            EXPECT_EQ(t.file_offset % f.alignment(), 0u);
            EXPECT_LE(t.file_offset + t.n_bytes, bytes.size());
            EXPECT_EQ(t.data, bytes.data() + t.file_offset);
        }
        if (name == "valid_split-00002-of-00002.gguf") {
            EXPECT_TRUE(throws_error([&] { File::open(entry.path().string()); }, "open the first shard"));
        } else {
            EXPECT_NO_THROW(File::open(entry.path().string(), check));
        }
    }
    EXPECT_GE(n, 9);
}

TEST(GgufCorpus, SpecificValidLayouts) {
    {
        const File f = File::open((kDir / "valid_alignment64.gguf").string());
        EXPECT_EQ(f.alignment(), 64u);
        ASSERT_EQ(f.tensors().size(), 3u);
        EXPECT_EQ(f.tensors()[0].offset, 256u);  // out of order, with a gap: allowed
        EXPECT_EQ(f.tensors()[1].offset, 0u);
        EXPECT_EQ(f.tensors()[2].offset, 64u);
    }
    {
        const File f = File::open((kDir / "valid_v2.gguf").string());
        EXPECT_EQ(f.version(), 2u);
    }
    {
        const File f = File::open((kDir / "valid_zero_dims.gguf").string());
        const TensorInfo* s = f.find_tensor("scalar");
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(s->n_dims, 0);
        EXPECT_EQ(s->n_elements(), 1);
        EXPECT_EQ(s->n_bytes, 4u);
        const TensorInfo* e = f.find_tensor("empty");
        ASSERT_NE(e, nullptr);
        EXPECT_EQ(e->n_elements(), 0);
        EXPECT_EQ(e->n_bytes, 0u);
    }
    {
        const File f = File::open((kDir / "valid_nested.gguf").string());
        const Value* v = f.find("all.nested");
        ASSERT_NE(v, nullptr);
        ASSERT_NE(v->as_array(), nullptr);
        const Array& a = *v->as_array();
        EXPECT_EQ(a.elem_type, ValueType::array);
        ASSERT_EQ(a.items.size(), 3u);
        EXPECT_EQ(a.items[0], Value::array(Array{ValueType::u8, {Value::u8(1), Value::u8(2)}}));
        EXPECT_EQ(a.items[1], Value::array(Array{ValueType::u8, {}}));
        EXPECT_EQ(f.get_string("all.type8"), "ünï 模型");
    }
    {
        const File f = File::open((kDir / "valid_split-00001-of-00002.gguf").string());
        EXPECT_EQ(f.n_shards(), 2);
        ASSERT_EQ(f.tensors().size(), 3u);
        EXPECT_EQ(f.tensors()[2].name, "s1.a");
        EXPECT_EQ(f.tensors()[2].shard, 1);
    }
}

}  // namespace
}  // namespace mox::gguf
