#include "core/error.h"
#include "engine/bench_machine.h"
#include "engine/bench_options.h"
#include "engine/bench_report.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace mox::engine {
namespace {

using V = std::vector<int64_t>;

TEST(BenchOptions, ValueListsAndRanges) {
    EXPECT_EQ(parse_int_values("512"), V({512}));
    EXPECT_EQ(parse_int_values("1,2,4"), V({1, 2, 4}));
    EXPECT_EQ(parse_int_values("16-18"), V({16, 17, 18}));
    EXPECT_EQ(parse_int_values("0-40+8"), V({0, 8, 16, 24, 32, 40}));
    EXPECT_EQ(parse_int_values("0-10+4"), V({0, 4, 8}));  // the last value need not be hit
    EXPECT_EQ(parse_int_values("1-64*4"), V({1, 4, 16, 64}));
    EXPECT_EQ(parse_int_values("1,8-32*2"), V({1, 8, 16, 32}));
    EXPECT_EQ(parse_int_values("-1"), V({-1}));  // a sign, not a range
    EXPECT_EQ(parse_int_values("-1,0"), V({-1, 0}));
    for (const char* bad :
         {"", "a", "1,", ",1", "5-1", "1-5+0", "1-5*1", "0-8*2", "1-2x", "1--2", "1-1000000000"})
        EXPECT_THROW(parse_int_values(bad), Error) << bad;
    EXPECT_EQ(parse_string_values("f16,q8_0"), std::vector<std::string>({"f16", "q8_0"}));
    EXPECT_THROW(parse_string_values("f16,"), Error);
    EXPECT_EQ(parse_pg_value("512,128"), std::make_pair(int64_t{512}, int64_t{128}));
    EXPECT_THROW(parse_pg_value("512"), Error);
    EXPECT_THROW(parse_pg_value("512,0"), Error);
    EXPECT_EQ(flash_attn_value("on"), 1);
    EXPECT_EQ(flash_attn_value("off"), 0);
    EXPECT_EQ(flash_attn_value("auto"), -1);
    EXPECT_THROW(flash_attn_value("yes"), Error);
}

TEST(BenchOptions, TestNames) {
    EXPECT_EQ((BenchTest{.n_prompt = 512}).name(), "pp512");
    EXPECT_EQ((BenchTest{.n_gen = 128}).name(), "tg128");
    EXPECT_EQ((BenchTest{.n_prompt = 512, .n_gen = 128}).name(), "pp512+tg128");
    EXPECT_EQ((BenchTest{.n_gen = 128, .n_depth = 4096}).name(), "tg128 @ d4096");
}

TEST(BenchOptions, SweepExpansionOrder) {
    BenchParams p;
    p.models = {"a.gguf", "b.gguf"};
    p.n_prompt = {16, 0};  // 0 adds no test
    p.n_gen = {4};
    p.pg = {{8, 2}};
    p.type_k = {"f16", "q8_0"};
    p.n_depth = {0, 32};
    const auto c = expand_configs(p);
    // 2 models x 2 type_k x 2 depths x 3 tests
    ASSERT_EQ(c.size(), 24u);
    EXPECT_EQ(c[0].model, "a.gguf");
    EXPECT_EQ(c[0].type_k, "f16");
    EXPECT_EQ(c[0].test.name(), "pp16");
    EXPECT_EQ(c[1].test.name(), "tg4");
    EXPECT_EQ(c[2].test.name(), "pp8+tg2");
    EXPECT_EQ(c[3].test.name(), "pp16 @ d32");
    EXPECT_EQ(c[6].type_k, "q8_0");
    EXPECT_EQ(c[12].model, "b.gguf");
    for (const auto& x : c) EXPECT_EQ(x.type_v, "f16");

    BenchParams none;
    none.models = {"a.gguf"};
    none.n_prompt = {0};
    none.n_gen = {0};
    EXPECT_THROW(expand_configs(none), Error);
    BenchParams no_model;
    EXPECT_THROW(expand_configs(no_model), Error);
    BenchParams bad = none;
    bad.n_gen = {-3};
    EXPECT_THROW(expand_configs(bad), Error);
    bad = none;
    bad.n_gen = {1};
    bad.repetitions = 0;
    EXPECT_THROW(expand_configs(bad), Error);
}

TEST(BenchOptions, InterleavedSchedule) {
    const auto s = interleaved_schedule(3, 2);
    ASSERT_EQ(s.size(), 9u);
    // Warm-ups of every configuration, then rep 1 of each, then rep 2 of each.
    const std::vector<std::pair<size_t, int>> want{{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1},
                                                   {2, 1}, {0, 2}, {1, 2}, {2, 2}};
    for (size_t i = 0; i < s.size(); ++i) {
        EXPECT_EQ(s[i].config, want[i].first) << i;
        EXPECT_EQ(s[i].repetition, want[i].second) << i;
        EXPECT_EQ(s[i].warmup, want[i].second == 0) << i;
    }
}

TEST(BenchStats, HandComputed) {
    const std::vector<double> even{20, 10, 14, 12};
    const SampleStats a = sample_stats(even);
    EXPECT_DOUBLE_EQ(a.mean, 14.0);
    EXPECT_DOUBLE_EQ(a.median, 13.0);
    EXPECT_DOUBLE_EQ(a.min, 10.0);
    EXPECT_DOUBLE_EQ(a.max, 20.0);
    EXPECT_NEAR(a.stddev, std::sqrt(56.0 / 3.0), 1e-12);  // squares 16+4+0+36 over n-1
    const std::vector<double> odd{3, 1, 2};
    EXPECT_DOUBLE_EQ(sample_stats(odd).median, 2.0);
    EXPECT_DOUBLE_EQ(sample_stats(odd).stddev, 1.0);
    const std::vector<double> one{7};
    EXPECT_DOUBLE_EQ(sample_stats(one).stddev, 0.0);
}

TEST(BenchMachine, Sha256KnownVectors) {
    // FIPS 180-4 examples.
    auto sha = [](const std::string& s) {
        Sha256 h;
        h.update(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
        return h.hex_digest();
    };
    EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(sha(std::string(1000000, 'a')),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(BenchMachine, ProcessFacts) {
    const MemoryUse m = process_memory();
    EXPECT_GT(m.rss_bytes, 0u);
    EXPECT_GE(m.peak_bytes, m.rss_bytes);
    EXPECT_FALSE(cpu_model_name().empty());
    EXPECT_GE(logical_cpus(), 1);
    EXPECT_EQ(utc_now_iso8601().size(), 20u);
}

std::vector<BenchResult> two_rows() {
    BenchResult a;
    a.config.model = "m.gguf";
    a.config.threads = 2;
    a.config.test = {.n_prompt = 16};
    a.model = {
        .filename = "m.gguf", .type = "qwen35moe 14.7M F16", .size = 1000, .n_params = 500, .sha256 = "ab"};
    a.test_time = "2026-01-01T00:00:00Z";
    a.samples_ns = {2e6, 4e6};
    a.samples_ts = {8000, 4000};
    a.host_rss_bytes = 1 << 20;
    BenchResult b = a;
    b.config.type_k = "q8_0";
    b.config.test = {.n_gen = 4, .n_depth = 8};
    b.samples_ts = {100, 200};
    return {a, b};
}

BenchMeta meta() {
    BenchMeta m;
    m.build_commit = "v1-\"quoted\"";  // quoting must survive every format
    m.cpu_info = "Test CPU, 'x'";
    m.cpu_cores = 4;
    m.corpus = "c.txt";
    return m;
}

TEST(BenchReport, JsonParsesBackWithLlamaBenchFields) {
    const auto rows = two_rows();
    const auto j = nlohmann::json::parse(format_json(rows, meta()));
    ASSERT_TRUE(j.is_array());
    ASSERT_EQ(j.size(), 2u);
    for (const char* key :
         {"build_commit",   "cpu_info",  "backends",       "model_filename",  "model_type", "model_size",
          "model_n_params", "n_batch",   "n_ubatch",       "n_threads",       "type_k",     "type_v",
          "n_gpu_layers",   "n_cpu_moe", "flash_attn",     "n_prompt",        "n_gen",      "n_depth",
          "test_time",      "avg_ns",    "stddev_ns",      "avg_ts",          "stddev_ts",  "samples_ns",
          "samples_ts",     "median_ts", "host_rss_bytes", "host_peak_bytes", "cpu_cores",  "model_sha256"})
        EXPECT_TRUE(j[0].contains(key)) << key;
    EXPECT_EQ(j[0]["build_commit"], "v1-\"quoted\"");
    EXPECT_EQ(j[0]["n_prompt"], 16);
    EXPECT_DOUBLE_EQ(j[0]["avg_ts"].get<double>(), 6000.0);
    EXPECT_NEAR(j[0]["stddev_ts"].get<double>(), std::sqrt(2 * 2000.0 * 2000.0), 1e-9);
    EXPECT_EQ(j[0]["avg_ns"], 3000000);
    EXPECT_EQ(j[1]["type_k"], "q8_0");
    EXPECT_EQ(j[1]["n_depth"], 8);
    EXPECT_EQ(j[1]["test"], "tg4 @ d8");

    const std::string jl = format_jsonl(rows, meta());
    std::istringstream in(jl);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) EXPECT_EQ(nlohmann::json::parse(line), j[n++]);
    EXPECT_EQ(n, 2);
}

// Splits one CSV line, honouring "..." quoting with "" escapes.
std::vector<std::string> csv_split(const std::string& line) {
    std::vector<std::string> cells(1);
    bool quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
            cells.back() += '"';
            ++i;
        } else if (c == '"') {
            quoted = !quoted;
        } else if (c == ',' && !quoted) {
            cells.emplace_back();
        } else {
            cells.back() += c;
        }
    }
    return cells;
}

TEST(BenchReport, CsvHasOneHeaderAndEqualColumns) {
    const auto rows = two_rows();
    std::istringstream in(format_csv(rows, meta()));
    std::vector<std::vector<std::string>> lines;
    std::string line;
    while (std::getline(in, line)) lines.push_back(csv_split(line));
    ASSERT_EQ(lines.size(), 3u);
    const auto fields = result_fields(rows[0], meta());
    ASSERT_EQ(lines[0].size(), fields.size());
    for (size_t i = 1; i < lines.size(); ++i) EXPECT_EQ(lines[i].size(), lines[0].size());
    EXPECT_EQ(lines[0][0], "build_commit");
    EXPECT_EQ(lines[1][0], "v1-\"quoted\"");
    size_t samples = 0;
    while (lines[0][samples] != "samples_ts") ++samples;
    EXPECT_EQ(lines[1][samples], "8000.0;4000.0");
}

TEST(BenchReport, SqlShape) {
    const auto rows = two_rows();
    const std::string sql = format_sql(rows, meta());
    ASSERT_EQ(sql.rfind("CREATE TABLE IF NOT EXISTS llama_bench (", 0), 0u);
    const size_t n_fields = result_fields(rows[0], meta()).size();
    size_t inserts = 0, at = 0;
    while ((at = sql.find("INSERT INTO llama_bench (", at)) != std::string::npos) {
        ++inserts;
        const size_t cols_end = sql.find(") VALUES (", at);
        const size_t end = sql.find(");\n", cols_end);
        ASSERT_NE(end, std::string::npos);
        const std::string cols = sql.substr(at, cols_end - at);
        EXPECT_EQ(static_cast<size_t>(std::count(cols.begin(), cols.end(), ',')) + 1, n_fields);
        // Values: count commas outside '...' strings ('' is an escaped quote).
        const std::string vals = sql.substr(cols_end + 10, end - cols_end - 10);
        size_t commas = 0;
        bool in_str = false;
        for (char c : vals) {
            if (c == '\'') in_str = !in_str;
            if (c == ',' && !in_str) ++commas;
        }
        EXPECT_FALSE(in_str);
        EXPECT_EQ(commas + 1, n_fields);
        at = end;
    }
    EXPECT_EQ(inserts, 2u);
    EXPECT_NE(sql.find("'Test CPU, ''x'''"), std::string::npos);
}

TEST(BenchReport, MarkdownTable) {
    const auto rows = two_rows();
    const std::string md = format_markdown(rows, meta());
    std::istringstream in(md);
    std::string line;
    std::vector<std::string> table;
    while (std::getline(in, line))
        if (!line.empty() && line[0] == '|') table.push_back(line);
    ASSERT_EQ(table.size(), 4u);  // header, alignment, two rows
    const auto bars = [](const std::string& s) { return std::count(s.begin(), s.end(), '|'); };
    for (const auto& t : table) EXPECT_EQ(bars(t), bars(table[0]));
    EXPECT_NE(table[0].find("| t/s |"), std::string::npos);
    EXPECT_NE(table[2].find("6000.00 ± 2828.43"), std::string::npos);
    EXPECT_NE(table[3].find("tg4 @ d8"), std::string::npos);
    EXPECT_NE(md.find("sha256"), std::string::npos);
    EXPECT_THROW(format_results("xml", rows, meta()), Error);
}

}  // namespace
}  // namespace mox::engine
