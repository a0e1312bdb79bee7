#include "core/error.h"
#include "engine/bench_compare.h"
#include "engine/bench_machine.h"
#include "engine/bench_options.h"
#include "engine/bench_report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
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

TEST(BenchOptions, VramBudgetAndPlanAreSweptAndRefusedWithoutGpu) {
    BenchParams p;
    p.models = {"a.gguf"};
    p.n_prompt = {0};
    p.n_gen = {4};
    p.vram_budget = {24ull << 30, 0};
    p.plan = {"auto", "manual"};
    const auto c = expand_configs(p);
    ASSERT_EQ(c.size(), 4u);
    EXPECT_EQ(c[0].vram_budget, 24ull << 30);
    EXPECT_EQ(c[0].plan, "auto");
    EXPECT_EQ(c[1].plan, "manual");
    EXPECT_EQ(c[2].vram_budget, 0u);
    p.plan = {"fast"};
    EXPECT_THROW(expand_configs(p), Error);

    auto message = [](const BenchConfig& one) {
        try {
            check_supported({one}, false);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_EQ(message(c[3]), "");  // plan manual, no budget: the CPU case runs
    EXPECT_NE(message(c[2]).find("--plan auto"), std::string::npos);
    // A budget is a GPU placement: refused without CUDA, and with -ngl 0 even with CUDA.
    EXPECT_NE(message(c[1]).find("built without CUDA"), std::string::npos);
    try {
        check_supported({c[1]}, true);
        ADD_FAILURE() << "-ngl 0 with a VRAM budget was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("need -ngl > 0"), std::string::npos) << e.what();
    }
    BenchConfig budget_gpu = c[1];
    budget_gpu.n_gpu_layers = 99;
    EXPECT_NO_THROW(check_supported({budget_gpu}, true));
    BenchConfig gpu = c[3];
    gpu.n_gpu_layers = 99;
    EXPECT_NE(message(gpu).find("-ngl 99"), std::string::npos);
    EXPECT_NE(message(gpu).find("built without CUDA"), std::string::npos);
}

TEST(BenchOptions, CompareScheduleAlternatesEngines) {
    using E = BenchEngine;
    const auto s = interleaved_schedule(2, 3, true);
    // Warm-ups (mox only), then per round each configuration on both engines; round 1 mox first,
    // round 2 llama-bench first, round 3 mox first again.
    struct W {
        size_t config;
        int rep;
        E engine;
    };
    const std::vector<W> want{{0, 0, E::mox},   {1, 0, E::mox},   {0, 1, E::mox},   {0, 1, E::llama},
                              {1, 1, E::mox},   {1, 1, E::llama}, {0, 2, E::llama}, {0, 2, E::mox},
                              {1, 2, E::llama}, {1, 2, E::mox},   {0, 3, E::mox},   {0, 3, E::llama},
                              {1, 3, E::mox},   {1, 3, E::llama}};
    ASSERT_EQ(s.size(), want.size());
    for (size_t i = 0; i < s.size(); ++i) {
        EXPECT_EQ(s[i].config, want[i].config) << i;
        EXPECT_EQ(s[i].repetition, want[i].rep) << i;
        EXPECT_EQ(s[i].engine, want[i].engine) << i;
        EXPECT_EQ(s[i].warmup, want[i].rep == 0) << i;
    }
    for (const auto& e : interleaved_schedule(3, 2)) EXPECT_EQ(e.engine, E::mox);
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

namespace {

// Columns a line takes on a terminal: UTF-8 continuation bytes ("±") take none.
size_t columns(const std::string& s) {
    return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// The markdown table's cells, trimmed of the padding that lines the columns up.
std::vector<std::string> md_cells(const std::string& line) {
    std::vector<std::string> cells;
    std::istringstream in(line);
    std::string cell;
    std::getline(in, cell, '|');  // before the first bar
    while (std::getline(in, cell, '|')) {
        const size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
        cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
    }
    if (!cells.empty() && cells.back().empty()) cells.pop_back();
    return cells;
}

// Whether some row of the markdown table has a cell that reads exactly `text`.
bool has_cell(const std::string& md, const std::string& text) {
    std::istringstream in(md);
    std::string line;
    while (std::getline(in, line))
        if (!line.empty() && line[0] == '|') {
            const auto cells = md_cells(line);
            if (std::find(cells.begin(), cells.end(), text) != cells.end()) return true;
        }
    return false;
}

}  // namespace

TEST(BenchReport, LlamaBenchModelName) {
    // llama-bench's words: architecture, size label of the shape, llama.cpp's name of general.file_type.
    EXPECT_EQ(llama_model_type("qwen35moe", 40, 256, 15u, "Q4_K"), "qwen35moe 35B.A3B Q4_K - Medium");
    EXPECT_EQ(llama_model_type("qwen3moe", 48, 128, 7u, "Q8_0"), "qwen3moe 30B.A3B Q8_0");
    EXPECT_EQ(llama_model_type("llama", 32, 8, 30u, "IQ4_XS"), "llama 8x7B IQ4_XS - 4.25 bpw");
    EXPECT_EQ(llama_model_type("qwen35", 64, 0, 15u, "Q4_K"), "qwen35 27B Q4_K - Medium");  // dense
    EXPECT_EQ(llama_model_type("qwen35moe", 4, 16, 1u, "F16"),
              "qwen35moe ?B F16");  // a shape llama.cpp has no name for
    EXPECT_EQ(llama_model_type("qwen35moe", 4, 16, std::nullopt, "Q6_K"), "qwen35moe ?B Q6_K (guessed)");
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
    // Padded as llama-bench pads: every line as long as the header, bar for bar.
    for (const auto& t : table) EXPECT_EQ(columns(t), columns(table[0])) << t;
    const auto head = md_cells(table[0]);
    EXPECT_NE(std::find(head.begin(), head.end(), "t/s"), head.end());
    EXPECT_NE(table[2].find("6000.00 ± 2828.43"), std::string::npos);
    EXPECT_NE(table[3].find("tg4 @ d8"), std::string::npos);
    EXPECT_NE(md.find("sha256"), std::string::npos);
    EXPECT_THROW(format_results("xml", rows, meta()), Error);
}

TEST(BenchReport, RooflineAndNullableColumns) {
    auto rows = two_rows();  // rows[1]: tg4 at depth 8, type_k q8_0, type_v f16, t/s {100, 200}
    for (auto& r : rows) {
        r.model.weight_bytes_per_token = 1e6;
        r.model.kv_k_elems_per_token = 100;
        r.model.kv_v_elems_per_token = 100;
        r.model.recurrent_state_bytes = 1000;
        r.host_read_bytes_per_s = 1e9;
    }
    // CPU shares: one per repetition (rows[1] has two), or null when a repetition had none.
    rows[1].host_cpu_other = {0.25, 0.5};
    rows[1].host_cpu_steal = {0.0, 0.125};
    rows[0].host_cpu_other = {0.1};  // rows[0] has more repetitions than readings
    rows[0].host_cpu_steal = {0.0};
    // Mean context 8 + (4 + 1) / 2 = 10.5 positions; K in q8_0 (34 bytes per 32), V in f16 (2 bytes).
    const double bytes = 1e6 + (100 * 34.0 / 32.0 + 100 * 2.0) * 10.5 + 2 * 1000;
    EXPECT_DOUBLE_EQ(decode_bytes_per_token(rows[1].model, rows[1].config), bytes);
    EXPECT_EQ(decode_bytes_per_token(rows[0].model, rows[0].config), 0.0);  // pp row: no decode

    BenchMeta m = meta();
    m.bandwidth_source = "measured";
    m.bandwidth_buffer = 1 << 28;
    const auto j = nlohmann::json::parse(format_json(rows, m));
    EXPECT_NEAR(j[1]["roofline_fraction"].get<double>(), 150 * bytes / 1e9, 1e-12);  // median 150 t/s
    EXPECT_DOUBLE_EQ(j[1]["host_read_gbps"].get<double>(), 1.0);
    EXPECT_EQ(j[1]["host_read_source"], "measured");
    EXPECT_TRUE(j[0]["roofline_fraction"].is_null());
    EXPECT_TRUE(j[0]["decode_bytes_per_token"].is_null());
    for (const char* key :
         {"vram_bytes", "pcie_bytes", "expert_cache_hit_rate", "host_cpu_other", "host_cpu_steal"}) {
        EXPECT_TRUE(j[0].contains(key) && j[0][key].is_null()) << key;
    }
    EXPECT_EQ(j[1]["host_cpu_other"], nlohmann::json::parse("[0.25, 0.5]"));
    EXPECT_EQ(j[1]["host_cpu_steal"], nlohmann::json::parse("[0.0, 0.125]"));
    EXPECT_EQ(j[0]["plan"], "manual");
    EXPECT_EQ(j[0]["vram_budget"], 0);
    EXPECT_FALSE(j[0].contains("llama_median_ts"));  // compare fields only with --compare

    const std::string md = format_markdown(rows, m);
    EXPECT_TRUE(has_cell(md, "VRAM"));
    EXPECT_TRUE(has_cell(md, "roofline"));
    EXPECT_NE(md.find(fmt::format("{:.1f}%", 100 * 150 * bytes / 1e9)), std::string::npos);
    EXPECT_NE(md.find("VRAM: - (no GPU used)"), std::string::npos);
    EXPECT_FALSE(has_cell(md, "PCIe"));  // shown once a row has a value
    // rows[1]'s second repetition shared the machine: 50% other + 12.5% steal; rows[0] has no full set.
    EXPECT_NE(md.find("warning: tg4 @ d8: other work on this machine (or the hypervisor) took up to 62%"),
              std::string::npos)
        << md;
    EXPECT_EQ(md.find("warning: pp"), std::string::npos);

    const std::string sql = format_sql(rows, m);
    EXPECT_NE(sql.find("vram_bytes REAL"), std::string::npos);
    EXPECT_NE(sql.find("NULL"), std::string::npos);
}

TEST(BenchReport, CompareFieldsAndRatio) {
    auto rows = two_rows();
    rows[0].llama = OtherEngineSamples{.samples_ns = {1e6, 3e6, 2e6},
                                       .samples_ts = {16000, 5333, 8000},
                                       .run_slots = {3, 6, 9},
                                       .build_commit = "0c1e"};
    rows[1].llama = OtherEngineSamples{};  // no sample: nulls, not a crash
    BenchMeta m = meta();
    m.compare = true;
    const auto j = nlohmann::json::parse(format_json(rows, m));
    EXPECT_DOUBLE_EQ(j[0]["llama_median_ts"].get<double>(), 8000.0);
    EXPECT_DOUBLE_EQ(j[0]["llama_min_ts"].get<double>(), 5333.0);
    EXPECT_DOUBLE_EQ(j[0]["ratio_median_ts"].get<double>(), 6000.0 / 8000.0);  // mox median 6000
    EXPECT_EQ(j[0]["llama_run_slots"], nlohmann::json::array({3, 6, 9}));
    EXPECT_EQ(j[0]["llama_build_commit"], "0c1e");
    EXPECT_TRUE(j[1]["ratio_median_ts"].is_null());
    const std::string md = format_markdown(rows, m);
    EXPECT_TRUE(has_cell(md, "mox/llama"));
    EXPECT_TRUE(has_cell(md, "0.75"));
    EXPECT_NE(md.find("llama-bench 0c1e"), std::string::npos);
}

std::string read_data(const std::string& name) {
    std::ifstream in(std::string(MOX_TEST_DATA_DIR) + "/bench/" + name, std::ios::binary);
    EXPECT_TRUE(in.good()) << name;
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

TEST(BenchCompare, LlamaBenchArguments) {
    BenchConfig c;
    c.model = "m.gguf";
    c.threads = 2;
    c.type_k = "q8_0";
    c.n_ubatch = 64;
    c.flash_attn = 0;
    c.test = {.n_prompt = 16, .n_depth = 8};
    using S = std::vector<std::string>;
    EXPECT_EQ(llama_bench_args(c, {"--repack", "0"}),
              S({"-m",  "m.gguf", "-r",   "1", "-o",     "json", "-p",   "16",  "-n",       "0",
                 "-d",  "8",      "-t",   "2", "-ctk",   "q8_0", "-ctv", "f16", "-b",       "2048",
                 "-ub", "64",     "-ngl", "0", "-ncmoe", "0",    "-fa",  "off", "--repack", "0"}));
    c.test = {.n_prompt = 8, .n_gen = 4};
    c.flash_attn = -1;
    const S pg = llama_bench_args(c, {});
    const S want_head{"-m", "m.gguf", "-r", "1", "-o", "json", "-p", "0", "-n", "0", "-pg", "8,4", "-d", "0"};
    EXPECT_EQ(S(pg.begin(), pg.begin() + static_cast<long>(want_head.size())), want_head);
    EXPECT_EQ(pg.back(), "auto");
    EXPECT_EQ(split_args("  --repack 0\t-nopo  1 "), S({"--repack", "0", "-nopo", "1"}));
    EXPECT_TRUE(split_args("   ").empty());
}

TEST(BenchCompare, ParsesRealLlamaBenchJson) {
    // Captured from llama.cpp 0c1e57098's llama-bench (tests/data/bench/README.md).
    BenchConfig pp;
    pp.test = {.n_prompt = 16, .n_depth = 8};
    const std::string pp_text = read_data("llama_bench_pp16_d8_q8_0.json");
    const LlamaBenchSample a = parse_llama_bench_json(pp_text, pp);
    EXPECT_DOUBLE_EQ(a.ns, 27343475.0);
    EXPECT_DOUBLE_EQ(a.tokens_per_s, 585.149);
    EXPECT_EQ(a.build_commit, "0c1e57098");

    BenchConfig pg;
    pg.test = {.n_prompt = 8, .n_gen = 4};
    const LlamaBenchSample b = parse_llama_bench_json(read_data("llama_bench_pg8_4.json"), pg);
    EXPECT_DOUBLE_EQ(b.ns, 76408069.0);
    EXPECT_DOUBLE_EQ(b.tokens_per_s, 157.051);
    // The rate is llama-bench's (n_prompt + n_gen) / time, the same definition mox uses.
    EXPECT_NEAR(b.tokens_per_s, 12 * 1e9 / b.ns, 0.01);

    // The row must be the test that was asked for.
    EXPECT_THROW(parse_llama_bench_json(pp_text, pg), Error);
    BenchConfig other_depth = pp;
    other_depth.test.n_depth = 0;
    EXPECT_THROW(parse_llama_bench_json(pp_text, other_depth), Error);
    // Without samples the averages are used; malformed or multi-row output is refused.
    auto j = nlohmann::json::parse(pp_text);
    j[0].erase("samples_ts");
    j[0].erase("samples_ns");
    const LlamaBenchSample c = parse_llama_bench_json(j.dump(), pp);
    EXPECT_DOUBLE_EQ(c.tokens_per_s, 585.148742);
    EXPECT_THROW(parse_llama_bench_json("not json", pp), Error);
    EXPECT_THROW(parse_llama_bench_json("[]", pp), Error);
    auto two = nlohmann::json::parse(pp_text);
    two.push_back(two[0]);
    EXPECT_THROW(parse_llama_bench_json(two.dump(), pp), Error);
    j[0]["avg_ts"] = 0;
    EXPECT_THROW(parse_llama_bench_json(j.dump(), pp), Error);
}

TEST(BenchCompare, RunProcessCapturesBothStreams) {
    const ProcessResult r = run_process("/bin/sh", {"-c", "echo out; echo err >&2; exit 3"});
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_EQ(r.out, "out\n");
    EXPECT_EQ(r.err, "err\n");
    // Far more stderr than a pipe holds, before any stdout: must not deadlock.
    const ProcessResult big =
        run_process("/bin/sh", {"-c", "head -c 300000 /dev/zero | tr '\\0' x >&2; echo done"});
    EXPECT_EQ(big.exit_code, 0);
    EXPECT_EQ(big.err.size(), 300000u);
    EXPECT_EQ(big.out, "done\n");
    EXPECT_THROW(run_process("/nonexistent/llama-bench", {}), Error);
}

}  // namespace
}  // namespace mox::engine
