// mox inspect MODEL.gguf: what the file holds and what it costs to run.
#include "commands.h"
#include "core/units.h"
#include "flag_values.h"
#include "gguf/reader.h"
#include "models/summary.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace mox::cli {

namespace {

struct InspectOptions {
    std::string model;
    bool json = false;
    bool tensors = false;
    bool check_data = false;
    std::vector<std::string> bandwidths;
};

std::string types_text(const models::ClassStats& c) {
    std::string out;
    for (const auto& [name, count] : c.types)
        out += fmt::format("{}{}x{}", out.empty() ? "" : " ", count, name);
    return out;
}

nlohmann::json to_json(const models::ModelSummary& s, const gguf::File& file, const InspectOptions& o,
                       const std::vector<double>& bws) {
    nlohmann::json j;
    j["path"] = s.path;
    j["architecture"] = s.architecture;
    j["name"] = s.name;
    j["file_bytes"] = s.file_bytes;
    j["gguf_version"] = file.version();
    j["shards"] = file.n_shards();
    for (const auto& [k, v] : s.hparams) j["hparams"][k] = v;
    for (int c = 0; c < models::kTensorClassCount; ++c) {
        const models::ClassStats& cs = s.classes[c];
        if (cs.n_tensors == 0) continue;
        j["classes"][models::tensor_class_name(static_cast<models::TensorClass>(c))] = {
            {"tensors", cs.n_tensors},
            {"params", cs.params},
            {"bytes", cs.bytes},
            {"active_params", cs.active_params},
            {"bytes_per_token", cs.bytes_per_token},
            {"types", cs.types}};
    }
    j["total_params"] = s.total_params;
    j["mtp_params"] = s.mtp_params;
    j["active_params"] = s.active_params;
    j["bytes_per_token"] = s.bytes_per_token;
    j["context_train"] = s.n_ctx_train;
    for (const auto& kv : s.kv) j["kv_bytes_per_token"][kv.type] = kv.bytes_per_token;
    j["recurrent_state_bytes"] = s.recurrent_state_bytes;
    for (size_t i = 0; i < bws.size(); ++i)
        j["roofline"].push_back({{"bandwidth", o.bandwidths[i]},
                                 {"bytes_per_s", bws[i]},
                                 {"tokens_per_s", s.roofline_tokens_per_s(bws[i])}});
    j["notes"] = s.notes;
    if (o.tensors) {
        for (const gguf::TensorInfo& t : file.tensors())
            j["tensors"].push_back({{"name", t.name},
                                    {"ne", std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)},
                                    {"type", std::string(quant::type_name(t.type))},
                                    {"bytes", t.n_bytes},
                                    {"shard", t.shard},
                                    {"offset", t.file_offset}});
    }
    return j;
}

void print_text(const models::ModelSummary& s, const gguf::File& file, const InspectOptions& o,
                const std::vector<double>& bws) {
    fmt::print("{}\n", s.path);
    fmt::print("  GGUF v{}, {} shard(s), {}, {} tensors, {} metadata keys\n", file.version(), file.n_shards(),
               format_bytes(s.file_bytes), file.tensors().size(), file.metadata().size());
    fmt::print("  architecture: {}{}\n", s.architecture, s.name.empty() ? "" : fmt::format(" ({})", s.name));
    for (const auto& [k, v] : s.hparams) fmt::print("    {:<26} {}\n", k, v);

    fmt::print("\n  {:<15} {:>7} {:>10} {:>11} {:>11} {:>12}  {}\n", "class", "tensors", "params", "bytes",
               "active", "bytes/token", "types");
    for (int c = 0; c < models::kTensorClassCount; ++c) {
        const models::ClassStats& cs = s.classes[c];
        if (cs.n_tensors == 0) continue;
        fmt::print("  {:<15} {:>7} {:>10} {:>11} {:>11} {:>12}  {}\n",
                   models::tensor_class_name(static_cast<models::TensorClass>(c)), cs.n_tensors,
                   format_count(cs.params), format_bytes(cs.bytes), format_count(cs.active_params),
                   format_bytes(static_cast<uint64_t>(cs.bytes_per_token)), types_text(cs));
    }
    fmt::print("\n  parameters: {} total ({:.0f}){}, {} active per token\n", format_count(s.total_params),
               s.total_params, s.mtp_params > 0 ? fmt::format(" + {} MTP", format_count(s.mtp_params)) : "",
               format_count(s.active_params));
    fmt::print("  weight bytes read per generated token: {} ({:.3f} GB)\n",
               format_bytes(static_cast<uint64_t>(s.bytes_per_token)), s.bytes_per_token / 1e9);
    if (!s.kv.empty()) {
        fmt::print("  KV cache per token of context:");
        for (const auto& kv : s.kv) fmt::print("  {} {:.0f} B", kv.type, kv.bytes_per_token);
        fmt::print("\n  KV cache at the trained context ({} tokens):", s.n_ctx_train);
        for (const auto& kv : s.kv)
            fmt::print(
                "  {} {}", kv.type,
                format_bytes(static_cast<uint64_t>(kv.bytes_per_token * static_cast<double>(s.n_ctx_train))));
        fmt::print("\n  recurrent state per sequence: {}\n", format_bytes(s.recurrent_state_bytes));
    }
    for (size_t i = 0; i < bws.size(); ++i)
        fmt::print("  decode roofline at {}: {:.1f} tokens/s\n", o.bandwidths[i],
                   s.roofline_tokens_per_s(bws[i]));
    for (const auto& n : s.notes) fmt::print("  note: {}\n", n);
    if (o.tensors) {
        fmt::print("\n  {:<40} {:<28} {:<8} {:>12}\n", "tensor", "ne", "type", "bytes");
        for (const gguf::TensorInfo& t : file.tensors()) {
            std::string ne;
            for (int d = 0; d < t.n_dims; ++d) ne += fmt::format("{}{}", d ? ", " : "", t.ne[d]);
            fmt::print("  {:<40} {:<28} {:<8} {:>12}\n", t.name, "{" + ne + "}", quant::type_name(t.type),
                       t.n_bytes);
        }
    }
}

}  // namespace

void register_inspect(CLI::App& app) {
    auto o = std::make_shared<InspectOptions>();
    CLI::App* cmd = app.add_subcommand("inspect", "Show a GGUF model's structure, sizes and decode roofline");
    cmd->add_option("model", o->model, "GGUF file (the first shard of a split model)")->required();
    cmd->add_flag("--json", o->json, "Machine-readable output");
    cmd->add_flag("--tensors", o->tensors, "List every tensor");
    cmd->add_flag("--check-data", o->check_data, "Also scan tensor data for inf/NaN (reads the whole file)");
    cmd->add_option("--bandwidth", o->bandwidths,
                    "Memory bandwidth(s) for the roofline, e.g. 936GB/s (repeatable)")
        ->take_all();
    cmd->callback([o] {
        std::vector<double> bws;
        for (const auto& b : o->bandwidths) bws.push_back(parse_bandwidth_flag("--bandwidth", b));
        const gguf::File file = gguf::File::open(o->model, {.check_tensor_data = o->check_data});
        const models::ModelSummary s = models::summarize(file);
        if (o->json)
            fmt::print("{}\n", to_json(s, file, *o, bws).dump(2));
        else
            print_text(s, file, *o, bws);
    });
}

}  // namespace mox::cli
