// The routing trace's file format: a round trip, and every class of malformed input refused with a
// message that says what is wrong.
#include "models/routing_trace.h"
#include "core/error.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace mox::models {
namespace {

namespace fs = std::filesystem;

// 3 tokens, trunk layers 1 and 3 of a 6-expert top-2 model.
RoutingTrace small_trace() {
    RoutingTrace t;
    t.arch = "qwen35moe";
    t.model = "tiny";
    t.n_expert = 6;
    t.k = 2;
    t.layers = {1, 3};
    t.n_tokens = 3;
    t.ids = {0, 5, 1, 2,  //
             5, 0, 3, 4,  //
             2, 1, 4, 3};
    return t;
}

template <typename T>
void put(std::vector<uint8_t>& out, T value) {
    for (size_t i = 0; i < sizeof(T); ++i)
        out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * i)));
}

// The file of small_trace() written by hand from the format's description, so the writer is checked
// against the format and not only against the reader.
std::vector<uint8_t> small_trace_bytes() {
    std::vector<uint8_t> b;
    for (char c : std::string("MOXROUTE")) b.push_back(static_cast<uint8_t>(c));
    put<uint32_t>(b, 1);  // version
    put<uint32_t>(b, 1);  // id width
    put<int64_t>(b, 6);   // n_expert
    put<int64_t>(b, 2);   // k
    put<int64_t>(b, 2);   // n_layers
    put<int64_t>(b, 3);   // n_tokens
    put<int32_t>(b, 1);
    put<int32_t>(b, 3);
    put<uint32_t>(b, 9);
    for (char c : std::string("qwen35moe")) b.push_back(static_cast<uint8_t>(c));
    put<uint32_t>(b, 4);
    for (char c : std::string("tiny")) b.push_back(static_cast<uint8_t>(c));
    for (uint16_t id : small_trace().ids) b.push_back(static_cast<uint8_t>(id));
    return b;
}

// Byte offsets in small_trace_bytes().
constexpr size_t kVersionAt = 8, kWidthAt = 12, kExpertsAt = 16, kKAt = 24, kLayersCountAt = 32,
                 kTokensAt = 40, kLayersAt = 48, kIdsAt = 48 + 8 + 4 + 9 + 4 + 4;

std::string error_of(const std::vector<uint8_t>& bytes) {
    try {
        parse_routing_trace(bytes, "t.trace");
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

template <typename T>
std::vector<uint8_t> patched(size_t at, T value) {
    std::vector<uint8_t> b = small_trace_bytes();
    std::vector<uint8_t> v;
    put<T>(v, value);
    std::memcpy(b.data() + at, v.data(), v.size());
    return b;
}

class TempFile {
public:
    TempFile() : path_(fs::temp_directory_path() / ("mox_trace_test_" + std::to_string(::getpid()))) {}
    ~TempFile() { fs::remove(path_); }
    std::string path() const { return path_.string(); }

private:
    fs::path path_;
};

void expect_same(const RoutingTrace& a, const RoutingTrace& b) {
    EXPECT_EQ(a.arch, b.arch);
    EXPECT_EQ(a.model, b.model);
    EXPECT_EQ(a.n_expert, b.n_expert);
    EXPECT_EQ(a.k, b.k);
    EXPECT_EQ(a.layers, b.layers);
    EXPECT_EQ(a.n_tokens, b.n_tokens);
    EXPECT_EQ(a.ids, b.ids);
}

TEST(RoutingTrace, WriterMatchesTheFormatAndReadsBack) {
    TempFile f;
    write_routing_trace(f.path(), small_trace());
    std::ifstream in(f.path(), std::ios::binary);
    const std::vector<uint8_t> written((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(written, small_trace_bytes());
    const RoutingTrace back = read_routing_trace(f.path());
    expect_same(back, small_trace());
    EXPECT_EQ(back.at(1, 1)[0], 3);  // token 1, layer 3, first choice
}

TEST(RoutingTrace, TwoByteIdsAboveTwoHundredFiftySixExperts) {
    RoutingTrace t = small_trace();
    t.n_expert = 300;
    t.ids[5] = 299;
    TempFile f;
    write_routing_trace(f.path(), t);
    EXPECT_EQ(fs::file_size(f.path()), small_trace_bytes().size() + t.ids.size());
    expect_same(read_routing_trace(f.path()), t);
}

TEST(RoutingTrace, ZeroTokensIsAValidTrace) {
    RoutingTrace t = small_trace();
    t.n_tokens = 0;
    t.ids.clear();
    TempFile f;
    write_routing_trace(f.path(), t);
    EXPECT_EQ(read_routing_trace(f.path()).n_tokens, 0);
}

TEST(RoutingTrace, RefusesTruncationAtEveryByte) {
    const std::vector<uint8_t> whole = small_trace_bytes();
    for (size_t n = 0; n < whole.size(); ++n) {
        const std::string e = error_of(std::vector<uint8_t>(whole.begin(), whole.begin() + n));
        EXPECT_NE(e.find("truncated"), std::string::npos) << n << ": " << e;
        EXPECT_NE(e.find("t.trace"), std::string::npos) << e;
    }
}

TEST(RoutingTrace, RefusesBadMagicVersionAndWidth) {
    std::vector<uint8_t> b = small_trace_bytes();
    b[0] = 'G';
    EXPECT_NE(error_of(b).find("not a routing trace"), std::string::npos) << error_of(b);
    EXPECT_NE(error_of(patched<uint32_t>(kVersionAt, 2)).find("version 2"), std::string::npos);
    EXPECT_NE(error_of(patched<uint32_t>(kWidthAt, 2)).find("id width 2"), std::string::npos);
}

TEST(RoutingTrace, RefusesSizesOutOfRange) {
    EXPECT_NE(error_of(patched<int64_t>(kExpertsAt, 0)).find("n_expert 0 out of range"), std::string::npos);
    EXPECT_NE(error_of(patched<int64_t>(kExpertsAt, 70000)).find("n_expert 70000"), std::string::npos);
    EXPECT_NE(error_of(patched<int64_t>(kKAt, 7)).find("k 7 out of range"), std::string::npos);
    EXPECT_NE(error_of(patched<int64_t>(kKAt, 0)).find("k 0 out of range"), std::string::npos);
    EXPECT_NE(error_of(patched<int64_t>(kTokensAt, -1)).find("negative"), std::string::npos);
    EXPECT_NE(error_of(patched<int64_t>(kLayersCountAt, 0)).find("n_layers 0 out of range"),
              std::string::npos);
    // Counts the file cannot hold are refused before anything is allocated for them.
    EXPECT_NE(error_of(patched<int64_t>(kLayersCountAt, int64_t{1} << 60)).find("does not fit"),
              std::string::npos);
    EXPECT_NE(error_of(patched<int64_t>(kTokensAt, int64_t{1} << 40)).find("truncated"), std::string::npos);
    EXPECT_NE(error_of(patched<int64_t>(kTokensAt, int64_t{1} << 62)).find("too large"), std::string::npos);
}

TEST(RoutingTrace, RefusesLayerOrderAndNegativeLayers) {
    EXPECT_NE(error_of(patched<int32_t>(kLayersAt + 4, 1)).find("not strictly ascending (1 after 1)"),
              std::string::npos);
    EXPECT_NE(error_of(patched<int32_t>(kLayersAt + 4, 0)).find("not strictly ascending"), std::string::npos);
    EXPECT_NE(error_of(patched<int32_t>(kLayersAt, -1)).find("negative"), std::string::npos);
}

TEST(RoutingTrace, RefusesIdsOutOfRangeOrRepeated) {
    std::vector<uint8_t> b = small_trace_bytes();
    b[kIdsAt + 6] = 6;  // token 1, layer 3, first id
    EXPECT_NE(error_of(b).find("token 1 layer 3: expert id 6 >= n_expert 6"), std::string::npos)
        << error_of(b);
    b = small_trace_bytes();
    b[kIdsAt + 1] = 0;  // token 0, layer 1: 0, 0
    EXPECT_NE(error_of(b).find("token 0 layer 1: expert 0 selected twice"), std::string::npos) << error_of(b);
}

TEST(RoutingTrace, RefusesTrailingBytes) {
    std::vector<uint8_t> b = small_trace_bytes();
    b.push_back(0);
    b.push_back(0);
    EXPECT_NE(error_of(b).find("2 bytes after the last id"), std::string::npos) << error_of(b);
}

TEST(RoutingTrace, ReadNamesAMissingFile) {
    try {
        read_routing_trace("/nonexistent/x.trace");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/x.trace"), std::string::npos);
    }
}

TEST(RoutingTrace, WriterRefusesInconsistentTraces) {
    TempFile f;
    RoutingTrace t = small_trace();
    t.ids.pop_back();
    EXPECT_THROW(write_routing_trace(f.path(), t), Error);
    t = small_trace();
    t.ids[0] = 6;
    EXPECT_THROW(write_routing_trace(f.path(), t), Error);
    t = small_trace();
    t.layers = {3, 1};
    EXPECT_THROW(write_routing_trace(f.path(), t), Error);
    EXPECT_THROW(write_routing_trace("/nonexistent/dir/x.trace", small_trace()), Error);
}

TEST(RoutingTrace, TheCheckedInFuzzSeedParses) {
    const RoutingTrace t = read_routing_trace(MOX_TEST_DATA_DIR "/routing/synthetic-2x8x2.trace");
    EXPECT_EQ(t.layers, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(t.n_expert, 8);
    EXPECT_EQ(t.k, 2);
    EXPECT_EQ(t.n_tokens, 16);
}

}  // namespace
}  // namespace mox::models
