// mox logits: logits of every position as float32 .npy [n_tokens, n_vocab]. The interface every
// correctness test and comparison uses.
#include "commands.h"
#include "common_options.h"
#include "core/error.h"
#include "core/npy.h"
#include "gguf/reader.h"
#include "models/model.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

namespace mox::cli {

namespace {

std::vector<int32_t> parse_token_list(const std::string& spec) {
    std::string text = spec;
    if (!spec.empty() && spec[0] == '@') {
        std::ifstream in(spec.substr(1));
        if (!in) fail("cannot read token file '{}'", spec.substr(1));
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }
    std::vector<int32_t> ids;
    std::string item;
    for (char c : text + ",") {
        if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') {
            if (item.empty()) continue;
            size_t used = 0;
            long long v = 0;
            try {
                v = std::stoll(item, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != item.size() || v < 0 || v > INT32_MAX) fail("'{}' is not a token id", item);
            ids.push_back(static_cast<int32_t>(v));
            item.clear();
        } else {
            item += c;
        }
    }
    if (ids.empty()) fail("no token ids given");
    return ids;
}

}  // namespace

void register_logits(CLI::App& app) {
    struct Options {
        ModelOptions model;
        std::string tokens, output;
        int64_t incremental = -1;
        std::string dump_dir;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every position as float32 .npy");
    add_model_options(cmd, o->model, Command::logits);
    cmd->add_option("--tokens", o->tokens, "Token ids: comma list or @file")->required();
    cmd->add_option("-o,--output", o->output, "Output .npy [n_tokens, n_vocab]")->required();
    cmd->add_option("--incremental", o->incremental,
                    "Prefill the first K tokens in one batch, then decode the rest one at a time");
    cmd->add_option(
        "--dump-activations", o->dump_dir,
        "Also write every layer's named intermediates (l{N}_mixer_in, _mixer_out, _moe_in, _moe_out) "
        "as DIR/NAME.npy [n_tokens, n_embd] (CPU path)");
    cmd->callback([o] {
        const std::vector<int32_t> ids = parse_token_list(o->tokens);
        check_writable("-o", o->output);
        if (!o->dump_dir.empty() && !std::filesystem::is_directory(o->dump_dir))
            fail("--dump-activations: '{}' is not a directory", o->dump_dir);
        const gguf::File file = gguf::File::open(o->model.path);
        const std::unique_ptr<models::Model> loaded = o->model.load(file);
        models::Model& model = *loaded;
        models::StateOptions so = state_options(o->model, model.hparams(), static_cast<int64_t>(ids.size()));
        auto state = model.new_state(so);
        if (!o->dump_dir.empty()) model.set_activation_dump(true);
        const int64_t n = static_cast<int64_t>(ids.size());
        const int64_t k = o->incremental < 0 ? n : o->incremental;
        if (k > n) fail("--incremental {} is larger than the {} tokens given", k, n);
        std::vector<float> all, step;
        all.reserve(static_cast<size_t>(n * model.n_vocab()));
        if (k > 0) {
            models::SequenceBatch b{state.get(),
                                    std::span<const int32_t>(ids.data(), static_cast<size_t>(k))};
            model.forward(std::span(&b, 1), true, step);
            all.insert(all.end(), step.begin(), step.end());
        }
        for (int64_t i = k; i < n; ++i) {
            models::SequenceBatch b{state.get(), std::span<const int32_t>(ids.data() + i, 1)};
            model.forward(std::span(&b, 1), true, step);
            all.insert(all.end(), step.begin(), step.end());
        }
        write_npy_f32(o->output, all, {n, model.n_vocab()});
        for (const auto& [name, values] : model.activations()) {
            const int64_t d = model.hparams().n_embd;
            write_npy_f32((std::filesystem::path(o->dump_dir) / (name + ".npy")).string(), values,
                          {static_cast<int64_t>(values.size()) / d, d});
        }
        fmt::print(stderr, "wrote {} [{} x {}]\n", o->output, n, model.n_vocab());
    });
}

}  // namespace mox::cli
