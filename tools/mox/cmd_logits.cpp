// mox logits: logits of every position as float32 .npy [n_tokens, n_vocab]. The interface every
// correctness test and comparison uses (issue 3 item 7).
#include "commands.h"
#include "common_options.h"
#include "core/error.h"
#include "core/npy.h"
#include "gguf/reader.h"
#include "models/qwen35moe.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

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
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every position as float32 .npy");
    add_model_options(cmd, o->model);
    cmd->add_option("--tokens", o->tokens, "Token ids: comma list or @file")->required();
    cmd->add_option("-o,--output", o->output, "Output .npy [n_tokens, n_vocab]")->required();
    cmd->add_option("--incremental", o->incremental,
                    "Prefill the first K tokens in one batch, then decode the rest one at a time");
    cmd->callback([o] {
        const std::vector<int32_t> ids = parse_token_list(o->tokens);
        const gguf::File file = gguf::File::open(o->model.path);
        const std::unique_ptr<models::Qwen35Moe> loaded = o->model.load(file);
        models::Qwen35Moe& model = *loaded;
        models::StateOptions so = state_options(o->model, model.hparams(), static_cast<int64_t>(ids.size()));
        auto state = model.new_state(so);
        const int64_t n = static_cast<int64_t>(ids.size());
        const int64_t k = o->incremental < 0 ? n : o->incremental;
        if (k > n) fail("--incremental {} is larger than the {} tokens given", k, n);
        std::vector<float> all, step;
        all.reserve(static_cast<size_t>(n * model.n_vocab()));
        if (k > 0) {
            models::SequenceBatch b{state.get(), std::span<const int32_t>(ids.data(), static_cast<size_t>(k))};
            model.forward(std::span(&b, 1), true, step);
            all.insert(all.end(), step.begin(), step.end());
        }
        for (int64_t i = k; i < n; ++i) {
            models::SequenceBatch b{state.get(), std::span<const int32_t>(ids.data() + i, 1)};
            model.forward(std::span(&b, 1), true, step);
            all.insert(all.end(), step.begin(), step.end());
        }
        write_npy_f32(o->output, all, {n, model.n_vocab()});
        fmt::print(stderr, "wrote {} [{} x {}]\n", o->output, n, model.n_vocab());
    });
}

}  // namespace mox::cli
