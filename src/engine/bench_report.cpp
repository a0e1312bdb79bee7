#include "engine/bench_report.h"

#include "core/error.h"
#include "core/units.h"
#include "quant/dot.h"
#include "quant/types.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

namespace mox::engine {

SampleStats sample_stats(std::span<const double> values) {
    MOX_CHECK(!values.empty(), "statistics of no samples");
    SampleStats s;
    const double n = static_cast<double>(values.size());
    s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
    std::vector<double> sorted(values.begin(), values.end());
    std::sort(sorted.begin(), sorted.end());
    const size_t mid = sorted.size() / 2;
    s.median = sorted.size() % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    s.min = sorted.front();
    s.max = sorted.back();
    if (values.size() > 1) {
        double ss = 0;
        for (double v : values) ss += (v - s.mean) * (v - s.mean);
        s.stddev = std::sqrt(ss / (n - 1));
    }
    return s;
}

double decode_bytes_per_token(const BenchModelInfo& m, const BenchConfig& c) {
    if (c.test.n_gen <= 0) return 0;
    auto bytes_per_elem = [](const std::string& name) {
        const auto t = quant::type_from_name(name);
        if (!t) fail("unknown KV cache type '{}'", name);
        const quant::TypeTraits& tr = quant::traits(*t);
        return static_cast<double>(tr.block_bytes) / static_cast<double>(tr.block_elems);
    };
    // Token i of n (0-based) attends to depth + prompt + i + 1 positions; the mean over i.
    const double mean_ctx =
        static_cast<double>(c.test.n_depth + c.test.n_prompt) + static_cast<double>(c.test.n_gen + 1) / 2.0;
    const double kv =
        m.kv_k_elems_per_token * bytes_per_elem(c.type_k) + m.kv_v_elems_per_token * bytes_per_elem(c.type_v);
    return m.weight_bytes_per_token + kv * mean_ctx + 2.0 * static_cast<double>(m.recurrent_state_bytes);
}

namespace {

// A repetition where other work and the hypervisor together took this share of all cores' time gets a
// warning under the markdown table (a quiet machine shows a few percent: the kernel, a shell).
constexpr double kBusyHostWarning = 0.10;

// Whether every repetition of the row has its CPU shares (host_cpu_other / host_cpu_steal).
bool has_cpu_shares(const BenchResult& r) {
    return !r.samples_ts.empty() && r.host_cpu_other.size() == r.samples_ts.size() &&
           r.host_cpu_steal.size() == r.samples_ts.size();
}

// Decode roofline fraction of a pure tg row: achieved t/s x bytes per token / measured bandwidth.
std::optional<double> roofline_fraction(const BenchResult& r, double median_ts) {
    const BenchTest& t = r.config.test;
    // A row on the GPU reads its weights from device memory, a CPU row from host memory.
    const double bw = r.config.n_gpu_layers != 0 ? r.gpu_bytes_per_s : r.host_read_bytes_per_s;
    if (t.n_prompt != 0 || t.n_gen <= 0 || bw <= 0) return std::nullopt;
    const double bytes = decode_bytes_per_token(r.model, r.config);
    if (bytes <= 0) return std::nullopt;
    return median_ts * bytes / bw;
}

template <typename T>
nlohmann::ordered_json or_null(const std::optional<T>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

nlohmann::ordered_json result_fields(const BenchResult& r, const BenchMeta& meta) {
    const BenchConfig& c = r.config;
    const SampleStats ns = sample_stats(r.samples_ns), ts = sample_stats(r.samples_ts);
    nlohmann::ordered_json j;
    // llama-bench's names and meanings.
    j["build_commit"] = meta.build_commit;
    j["cpu_info"] = meta.cpu_info;
    j["gpu_info"] = "";
    j["backends"] = meta.backends;
    j["model_filename"] = r.model.filename;
    j["model_type"] = r.model.type;
    j["model_size"] = r.model.size;
    j["model_n_params"] = r.model.n_params;
    j["n_batch"] = c.n_batch;
    j["n_ubatch"] = c.n_ubatch;
    j["n_threads"] = c.threads;
    j["type_k"] = c.type_k;
    j["type_v"] = c.type_v;
    j["n_gpu_layers"] = c.n_gpu_layers;
    j["n_cpu_moe"] = c.n_cpu_moe;
    j["flash_attn"] = c.flash_attn;
    j["n_prompt"] = c.test.n_prompt;
    j["n_gen"] = c.test.n_gen;
    j["n_depth"] = c.test.n_depth;
    j["test_time"] = r.test_time;
    j["avg_ns"] = static_cast<int64_t>(std::llround(ns.mean));
    j["stddev_ns"] = static_cast<int64_t>(std::llround(ns.stddev));
    j["avg_ts"] = ts.mean;
    j["stddev_ts"] = ts.stddev;
    j["samples_ns"] = r.samples_ns;
    j["samples_ts"] = r.samples_ts;
    // mox's own.
    j["engine"] = "mox";
    j["test"] = c.test.name();
    j["repetitions"] = r.samples_ts.size();
    j["run_slots"] = r.run_slots;
    j["median_ts"] = ts.median;
    j["min_ts"] = ts.min;
    j["max_ts"] = ts.max;
    j["host_rss_bytes"] = r.host_rss_bytes;
    j["host_peak_bytes"] = r.host_peak_bytes;
    j["cpu_cores"] = meta.cpu_cores;
    j["model_sha256"] = r.model.sha256;
    j["prompt_corpus"] = meta.corpus;
    j["vram_budget"] = c.vram_budget;
    j["plan"] = c.plan;
    // Decode roofline: bandwidth in decimal GB/s, as datasheets and `mox inspect --bandwidth` give it.
    j["gpu_peak_gbps"] = r.gpu_bytes_per_s > 0 ? nlohmann::ordered_json(r.gpu_bytes_per_s / 1e9)
                                               : nlohmann::ordered_json(nullptr);
    j["host_read_gbps"] = r.host_read_bytes_per_s > 0 ? nlohmann::ordered_json(r.host_read_bytes_per_s / 1e9)
                                                      : nlohmann::ordered_json(nullptr);
    j["host_read_source"] = meta.bandwidth_source;
    // One share per repetition, or null (some repetition had no reading).
    const bool cpu = has_cpu_shares(r);
    j["host_cpu_other"] = cpu ? nlohmann::ordered_json(r.host_cpu_other) : nlohmann::ordered_json(nullptr);
    j["host_cpu_steal"] = cpu ? nlohmann::ordered_json(r.host_cpu_steal) : nlohmann::ordered_json(nullptr);
    j["host_read_buffer_bytes"] = meta.bandwidth_buffer;
    const double bpt = decode_bytes_per_token(r.model, c);
    j["decode_bytes_per_token"] = bpt > 0 ? nlohmann::ordered_json(bpt) : nlohmann::ordered_json(nullptr);
    j["roofline_fraction"] = or_null(roofline_fraction(r, ts.median));
    j["vram_bytes"] = or_null(r.vram_bytes);
    j["predicted_vram_bytes"] = or_null(r.predicted_vram_bytes);
    j["predicted_tps"] = r.predicted_tps ? nlohmann::json(*r.predicted_tps) : nlohmann::json(nullptr);
    j["expert_cache_bytes"] = c.expert_cache;
    j["cache_policy"] = c.expert_cache > 0 ? nlohmann::ordered_json(c.cache_policy) : nlohmann::ordered_json(nullptr);
    j["cache_admit_cap"] = c.cache_admit_cap;
    j["routing_trace"] = c.routing_trace;
    j["pcie_bytes"] = or_null(r.pcie_bytes);
    j["expert_cache_hit_rate"] = or_null(r.expert_cache_hit_rate);
    j["expert_cache_misses_per_token"] = or_null(r.expert_cache_misses_per_token);
    if (meta.compare) {
        // Same statistics over llama-bench's samples; ratio of medians (mox / llama.cpp).
        const bool have = r.llama && !r.llama->samples_ts.empty();
        const SampleStats l = have ? sample_stats(r.llama->samples_ts) : SampleStats{};
        auto num = [&](double v) {
            return have ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
        };
        j["llama_build_commit"] = r.llama ? r.llama->build_commit : "";
        j["llama_avg_ts"] = num(l.mean);
        j["llama_stddev_ts"] = num(l.stddev);
        j["llama_median_ts"] = num(l.median);
        j["llama_min_ts"] = num(l.min);
        j["llama_max_ts"] = num(l.max);
        j["llama_samples_ns"] = r.llama ? r.llama->samples_ns : std::vector<double>{};
        j["llama_samples_ts"] = r.llama ? r.llama->samples_ts : std::vector<double>{};
        j["llama_run_slots"] = r.llama ? r.llama->run_slots : std::vector<int64_t>{};
        j["ratio_median_ts"] = have && l.median > 0 ? nlohmann::ordered_json(ts.median / l.median)
                                                    : nlohmann::ordered_json(nullptr);
    }
    return j;
}

namespace {

std::string dump_row(const BenchResult& r, const BenchMeta& meta) {
    return result_fields(r, meta).dump();
}

// Display width of a cell: UTF-8 continuation bytes take no column ("±").
size_t text_width(const std::string& s) {
    size_t w = 0;
    for (unsigned char c : s) w += (c & 0xC0) != 0x80;
    return w;
}

// A markdown table padded to column widths, as llama-bench prints it; `align` holds ":--" (left)
// or "--:" (right) per column, its rule row is widened to the column.
std::string md_table(const std::vector<std::string>& head, const std::vector<std::string>& align,
                     const std::vector<std::vector<std::string>>& rows) {
    std::vector<size_t> width(head.size());
    for (size_t i = 0; i < head.size(); ++i) {
        width[i] = std::max<size_t>(text_width(head[i]), 3);
        for (const auto& r : rows) width[i] = std::max(width[i], text_width(r[i]));
    }
    auto line = [&](const std::vector<std::string>& cells) {
        std::string s = "|";
        for (size_t i = 0; i < cells.size(); ++i) {
            const std::string pad(width[i] - text_width(cells[i]), ' ');
            s += " " + (align[i] == "--:" ? pad + cells[i] : cells[i] + pad) + " |";
        }
        return s + "\n";
    };
    std::vector<std::string> rule(head.size());
    for (size_t i = 0; i < head.size(); ++i)
        rule[i] =
            align[i] == "--:" ? std::string(width[i] - 1, '-') + ":" : ":" + std::string(width[i] - 1, '-');
    std::string out = line(head) + line(rule);
    for (const auto& r : rows) out += line(r);
    return out;
}

// llama.cpp's size label for the shapes of the architectures mox runs (by layer and expert count).
std::string size_label(std::string_view arch, int64_t n_layer, int64_t n_expert) {
    struct Shape {
        const char* arch;
        int64_t n_layer, n_expert;
        const char* label;
    };
    static const Shape kShapes[] = {
        {"qwen35moe", 40, 256, "35B.A3B"},  {"qwen3moe", 48, 128, "30B.A3B"},
        {"qwen3moe", 94, 128, "235B.A22B"}, {"llama", 32, 8, "8x7B"},
        {"llama", 56, 8, "8x22B"},          {"phimoe", 32, 16, "16x3.8B"},
        {"qwen35", 64, 0, "27B"},           {"qwen35", 65, 0, "27B"},  // without and with the MTP block
    };
    for (const Shape& s : kShapes)
        if (arch == s.arch && n_layer == s.n_layer && n_expert == s.n_expert) return s.label;
    return "?B";
}

// llama.cpp's names of general.file_type values (its llama_ftype enum).
const char* file_type_name(uint32_t t) {
    switch (t) {
        case 0:
            return "all F32";
        case 1:
            return "F16";
        case 2:
            return "Q4_0";
        case 3:
            return "Q4_1";
        case 7:
            return "Q8_0";
        case 8:
            return "Q5_0";
        case 9:
            return "Q5_1";
        case 10:
            return "Q2_K - Medium";
        case 11:
            return "Q3_K - Small";
        case 12:
            return "Q3_K - Medium";
        case 13:
            return "Q3_K - Large";
        case 14:
            return "Q4_K - Small";
        case 15:
            return "Q4_K - Medium";
        case 16:
            return "Q5_K - Small";
        case 17:
            return "Q5_K - Medium";
        case 18:
            return "Q6_K";
        case 19:
            return "IQ2_XXS - 2.0625 bpw";
        case 20:
            return "IQ2_XS - 2.3125 bpw";
        case 21:
            return "Q2_K - Small";
        case 22:
            return "IQ3_XS - 3.3 bpw";
        case 23:
            return "IQ3_XXS - 3.0625 bpw";
        case 24:
            return "IQ1_S - 1.5625 bpw";
        case 25:
            return "IQ4_NL - 4.5 bpw";
        case 26:
            return "IQ3_S - 3.4375 bpw";
        case 27:
            return "IQ3_S mix - 3.66 bpw";
        case 28:
            return "IQ2_S - 2.5 bpw";
        case 29:
            return "IQ2_M - 2.7 bpw";
        case 30:
            return "IQ4_XS - 4.25 bpw";
        case 31:
            return "IQ1_M - 1.75 bpw";
        case 32:
            return "BF16";
        case 38:
            return "MXFP4 MoE";
        default:
            return nullptr;
    }
}

std::string csv_cell(const nlohmann::ordered_json& v) {
    std::string text;
    if (v.is_null()) {
        text = "";
    } else if (v.is_string()) {
        text = v.get<std::string>();
    } else if (v.is_array()) {  // samples: "a;b;c" keeps one cell per field
        for (size_t i = 0; i < v.size(); ++i) text += (i ? ";" : "") + v[i].dump();
    } else {
        text = v.dump();
    }
    std::string out = "\"";
    for (char ch : text) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return out + "\"";
}

std::string sql_value(const nlohmann::ordered_json& v) {
    if (v.is_null()) return "NULL";
    if (v.is_number()) return v.dump();
    if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
    const std::string text = v.is_string() ? v.get<std::string>() : v.dump();
    std::string out = "'";
    for (char ch : text) out += ch == '\'' ? std::string("''") : std::string(1, ch);
    return out + "'";
}

const char* sql_type(const nlohmann::ordered_json& v) {
    if (v.is_number_integer() || v.is_boolean()) return "INTEGER";
    if (v.is_number() || v.is_null()) return "REAL";  // the nullable fields are measurements
    return "TEXT";
}

}  // namespace

std::string llama_model_type(std::string_view arch, int64_t n_layer, int64_t n_expert,
                             std::optional<uint32_t> file_type, std::string_view dominant_type) {
    // llama.cpp marks a type it had to infer with this flag bit and " (guessed)".
    constexpr uint32_t kGuessed = 1024;
    const bool guessed = !file_type || (*file_type & kGuessed) != 0;
    const char* name = file_type ? file_type_name(*file_type & ~kGuessed) : nullptr;
    const std::string type = name ? std::string(name) : std::string(dominant_type);
    return fmt::format("{} {} {}{}", arch, size_label(arch, n_layer, n_expert), type,
                       guessed ? " (guessed)" : "");
}

std::string format_markdown(std::span<const BenchResult> rows, const BenchMeta& meta) {
    // Options that were swept or left their default get a column, as in llama-bench.
    auto varies = [&](auto get, auto default_value) {
        for (const auto& r : rows)
            if (get(r.config) != default_value) return true;
        return false;
    };
    const bool show_batch = varies([](const BenchConfig& c) { return c.n_batch; }, int64_t{2048});
    const bool show_ngl = varies([](const BenchConfig& c) { return c.n_gpu_layers; }, 0);
    const bool show_ncmoe = varies([](const BenchConfig& c) { return c.n_cpu_moe; }, 0);
    const bool show_fa = varies([](const BenchConfig& c) { return c.flash_attn; }, -1);
    const bool show_budget = varies([](const BenchConfig& c) { return c.vram_budget; }, uint64_t{0});
    const bool show_plan = varies([](const BenchConfig& c) { return c.plan; }, std::string("manual"));
    const bool show_cache = varies([](const BenchConfig& c) { return c.expert_cache; }, uint64_t{0});
    const bool show_trace = varies([](const BenchConfig& c) { return c.routing_trace; }, std::string());
    auto any = [&](auto has) { return std::any_of(rows.begin(), rows.end(), has); };
    const bool show_pcie = any([](const BenchResult& r) { return r.pcie_bytes.has_value(); });
    const bool show_hit = any([](const BenchResult& r) { return r.expert_cache_hit_rate.has_value(); });
    const bool show_misses =
        any([](const BenchResult& r) { return r.expert_cache_misses_per_token.has_value(); });
    const bool show_roofline =
        any([](const BenchResult& r) { return r.host_read_bytes_per_s > 0 || r.gpu_bytes_per_s > 0; });

    std::vector<std::string> head{"model", "size", "params", "backend", "threads", "type_k", "type_v"};
    std::vector<std::string> align{":--", "--:", "--:", ":--", "--:", ":--", ":--"};
    auto add = [&](const char* name, const char* a) {
        head.push_back(name);
        align.push_back(a);
    };
    if (show_batch) add("n_batch", "--:");
    add("n_ubatch", "--:");
    if (show_ngl) add("ngl", "--:");
    if (show_ncmoe) add("n_cpu_moe", "--:");
    if (show_fa) add("fa", "--:");
    if (show_budget) add("vram_budget", "--:");
    if (show_plan) add("plan", ":--");
    if (show_cache) add("expert cache", ":--");
    if (show_trace) add("routing", ":--");
    add("test", "--:");
    add("t/s", "--:");
    add("median t/s", "--:");
    add("min..max t/s", "--:");
    if (meta.compare) {
        add("llama.cpp median t/s", "--:");
        add("llama.cpp min..max", "--:");
        add("mox/llama", "--:");
    }
    add("RSS", "--:");
    add("VRAM", "--:");
    if (show_pcie) add("PCIe", "--:");
    if (show_hit) add("cache hit", "--:");
    if (show_misses) add("CPU experts/tok", "--:");
    if (show_roofline) add("roofline", "--:");

    std::vector<std::vector<std::string>> table;
    for (const auto& r : rows) {
        const BenchConfig& c = r.config;
        const SampleStats ts = sample_stats(r.samples_ts);
        std::vector<std::string> cells{
            r.model.type,  format_bytes(r.model.size), format_count(static_cast<double>(r.model.n_params)),
            meta.backends, std::to_string(c.threads),  c.type_k,
            c.type_v};
        if (show_batch) cells.push_back(std::to_string(c.n_batch));
        cells.push_back(std::to_string(c.n_ubatch));
        if (show_ngl) cells.push_back(std::to_string(c.n_gpu_layers));
        if (show_ncmoe) cells.push_back(std::to_string(c.n_cpu_moe));
        if (show_fa) cells.push_back(std::to_string(c.flash_attn));
        if (show_budget) cells.push_back(c.vram_budget ? format_bytes(c.vram_budget) : "-");
        if (show_plan) cells.push_back(c.plan);
        if (show_cache)
            cells.push_back(c.expert_cache > 0 ? fmt::format("{} {}", format_bytes(c.expert_cache), c.cache_policy)
                                               : "off");
        if (show_trace)  // replayed routing: the experts that ran are the trace's, not the router's
            cells.push_back(c.routing_trace.empty()
                                ? "router"
                                : "trace " + std::filesystem::path(c.routing_trace).filename().string());
        cells.push_back(c.test.name());
        cells.push_back(fmt::format("{:.2f} ± {:.2f}", ts.mean, ts.stddev));
        cells.push_back(fmt::format("{:.2f}", ts.median));
        cells.push_back(fmt::format("{:.2f}..{:.2f}", ts.min, ts.max));
        if (meta.compare) {
            if (r.llama && !r.llama->samples_ts.empty()) {
                const SampleStats l = sample_stats(r.llama->samples_ts);
                cells.push_back(fmt::format("{:.2f}", l.median));
                cells.push_back(fmt::format("{:.2f}..{:.2f}", l.min, l.max));
                cells.push_back(l.median > 0 ? fmt::format("{:.2f}", ts.median / l.median) : "-");
            } else {
                cells.insert(cells.end(), {"-", "-", "-"});
            }
        }
        cells.push_back(format_bytes(r.host_rss_bytes));
        cells.push_back(r.vram_bytes ? format_bytes(*r.vram_bytes) : "-");
        if (show_pcie) cells.push_back(r.pcie_bytes ? format_bytes(*r.pcie_bytes) : "-");
        if (show_hit)
            cells.push_back(r.expert_cache_hit_rate ? fmt::format("{:.1f}%", 100 * *r.expert_cache_hit_rate)
                                                    : "-");
        if (show_misses)
            cells.push_back(r.expert_cache_misses_per_token
                                ? fmt::format("{:.1f}", *r.expert_cache_misses_per_token)
                                : "-");
        if (show_roofline) {
            const auto f = roofline_fraction(r, ts.median);
            cells.push_back(f ? fmt::format("{:.1f}%", 100 * *f) : "-");
        }
        table.push_back(std::move(cells));
    }
    std::string out = md_table(head, align, table);
    out += fmt::format(
        "\nmox {} | {} ({} logical CPUs) | backend {} ({} kernels; -b and -fa are recorded, not acted on) | "
        "prompts: {}\n",
        meta.build_commit, meta.cpu_info, meta.cpu_cores, meta.backends, quant::isa_name(quant::host_isa()),
        meta.corpus);
    if (show_roofline) {
        // One bandwidth per thread count; rows with equal threads share one measurement.
        std::vector<std::pair<int, double>> bw;
        for (const auto& r : rows)
            if (r.host_read_bytes_per_s > 0 && std::none_of(bw.begin(), bw.end(), [&](const auto& b) {
                    return b.first == r.config.threads;
                }))
                bw.emplace_back(r.config.threads, r.host_read_bytes_per_s);
        std::string list;
        for (const auto& [t, b] : bw)
            list += fmt::format("{}t={}: {:.1f} GB/s", list.empty() ? "" : ", ", t, b / 1e9);
        if (list.empty()) list = "-";
        for (const auto& r : rows)
            if (r.gpu_bytes_per_s > 0) {
                out += fmt::format(
                    "roofline (GPU rows): tg t/s x bytes per token / the GPU's peak memory bandwidth "
                    "from the driver (memory clock x bus width): {:.1f} GB/s\n",
                    r.gpu_bytes_per_s / 1e9);
                break;
            }
        out += meta.bandwidth_source == "measured"
                   ? fmt::format(
                         "roofline: tg t/s x bytes per token / host read bandwidth measured in this run "
                         "({} buffer, best pass): {}\n",
                         format_bytes(meta.bandwidth_buffer), list)
                   : fmt::format(
                         "roofline: tg t/s x bytes per token / host read bandwidth given (--host-bandwidth): "
                         "{}\n",
                         list);
    }
    if (!any([](const BenchResult& r) { return r.vram_bytes.has_value(); })) out += "VRAM: - (no GPU used)\n";
    // Rows that shared the machine: their CPU-side numbers (and a hybrid decode's) are not this
    // engine's alone.
    for (const auto& r : rows) {
        if (!has_cpu_shares(r)) continue;
        double worst = 0;
        for (size_t i = 0; i < r.host_cpu_other.size(); ++i)
            worst = std::max(worst, r.host_cpu_other[i] + r.host_cpu_steal[i]);
        if (worst >= kBusyHostWarning)
            out += fmt::format(
                "warning: {}: other work on this machine (or the hypervisor) took up to {:.0f}% of the "
                "CPU time during a repetition (host_cpu_other, host_cpu_steal)\n",
                r.config.test.name(), 100 * worst);
    }
    if (meta.compare) {
        std::string commit;
        for (const auto& r : rows)
            if (r.llama && !r.llama->build_commit.empty()) commit = r.llama->build_commit;
        out += fmt::format(
            "llama.cpp: llama-bench {} run alternately with mox, one repetition per invocation; "
            "mox/llama is the ratio of medians\n",
            commit.empty() ? "(unknown commit)" : commit);
    }
    std::vector<std::string> seen;
    for (const auto& r : rows) {
        if (std::find(seen.begin(), seen.end(), r.model.filename) != seen.end()) continue;
        seen.push_back(r.model.filename);
        out += fmt::format("model {} sha256(first 16 MiB + size) {}\n", r.model.filename, r.model.sha256);
    }
    return out;
}

std::string format_csv(std::span<const BenchResult> rows, const BenchMeta& meta) {
    std::string out;
    for (size_t i = 0; i < rows.size(); ++i) {
        const auto j = result_fields(rows[i], meta);
        if (i == 0) {
            std::string head;
            for (const auto& [key, value] : j.items()) head += (head.empty() ? "" : ",") + key;
            out += head + "\n";
        }
        std::string line;
        for (const auto& [key, value] : j.items()) line += (line.empty() ? "" : ",") + csv_cell(value);
        out += line + "\n";
    }
    return out;
}

std::string format_json(std::span<const BenchResult> rows, const BenchMeta& meta) {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const auto& r : rows) all.push_back(result_fields(r, meta));
    return all.dump(2) + "\n";
}

std::string format_jsonl(std::span<const BenchResult> rows, const BenchMeta& meta) {
    std::string out;
    for (const auto& r : rows) out += dump_row(r, meta) + "\n";
    return out;
}

std::string format_sql(std::span<const BenchResult> rows, const BenchMeta& meta) {
    // llama-bench's table name, so results of both tools can share one database (column `engine`).
    std::string out;
    for (size_t i = 0; i < rows.size(); ++i) {
        const auto j = result_fields(rows[i], meta);
        if (i == 0) {
            out += "CREATE TABLE IF NOT EXISTS llama_bench (\n";
            size_t k = 0;
            for (const auto& [key, value] : j.items())
                out += fmt::format("  {} {}{}\n", key, sql_type(value), ++k < j.size() ? "," : "");
            out += ");\n\n";
        }
        std::string cols, vals;
        for (const auto& [key, value] : j.items()) {
            cols += (cols.empty() ? "" : ", ") + key;
            vals += (vals.empty() ? "" : ", ") + sql_value(value);
        }
        out += fmt::format("INSERT INTO llama_bench ({}) VALUES ({});\n", cols, vals);
    }
    return out;
}

std::string format_results(std::string_view format, std::span<const BenchResult> rows,
                           const BenchMeta& meta) {
    if (format == "md") return format_markdown(rows, meta);
    if (format == "csv") return format_csv(rows, meta);
    if (format == "json") return format_json(rows, meta);
    if (format == "jsonl") return format_jsonl(rows, meta);
    if (format == "sql") return format_sql(rows, meta);
    fail("-o '{}': expected md, csv, json, jsonl or sql", format);
}

}  // namespace mox::engine
