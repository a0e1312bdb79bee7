// mox perplexity: exp(mean negative log-likelihood) of a text under the model, every token after the
// first scored from one pass over the whole text (or over windows of --window tokens).
#include "commands.h"
#include "common_options.h"
#include "core/error.h"
#include "gguf/reader.h"
#include "models/model.h"
#include "text/tokenizer.h"
#include "text/vocab_io.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

namespace mox::cli {

void register_perplexity(CLI::App& app) {
    struct Options {
        ModelOptions model;
        std::string file;
        int64_t window = 0;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of a text file under the model");
    add_model_options(cmd, o->model, Command::perplexity);
    cmd->add_option("-f,--file", o->file, "Text file to score")->required();
    cmd->add_option("--window", o->window,
                    "Score independent windows of this many tokens (0: the whole text)")
        ->check(CLI::NonNegativeNumber);
    cmd->callback([o] {
        std::ifstream in(o->file, std::ios::binary);
        if (!in) fail("cannot read '{}'", o->file);
        std::stringstream ss;
        ss << in.rdbuf();
        const gguf::File file = gguf::File::open(o->model.path);
        const std::unique_ptr<models::Model> loaded = o->model.load(file);
        models::Model& model = *loaded;
        const text::Tokenizer tokenizer(text::vocab_from_gguf(file));
        const std::vector<int32_t> ids = tokenizer.encode(ss.str());
        if (ids.size() < 2) fail("'{}' has fewer than 2 tokens", o->file);
        const int64_t n = static_cast<int64_t>(ids.size());
        const int64_t window = o->window > 0 ? o->window : n;
        double nll = 0;
        int64_t scored = 0;
        std::vector<float> logits;
        for (int64_t start = 0; start + 1 < n; start += window) {
            const int64_t len = std::min(window, n - start);
            if (len < 2) break;
            auto so = state_options(o->model, model.hparams(), len);
            auto state = model.new_state(so);
            models::SequenceBatch b{state.get(),
                                    std::span<const int32_t>(ids.data() + start, static_cast<size_t>(len))};
            model.forward(std::span(&b, 1), true, logits);
            const int64_t V = model.n_vocab();
            for (int64_t i = 0; i + 1 < len; ++i) {
                const float* row = logits.data() + i * V;
                const float mx = *std::max_element(row, row + V);
                double sum = 0;
                for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v] - mx));
                nll += std::log(sum) + mx - row[ids[static_cast<size_t>(start + i + 1)]];
                ++scored;
            }
        }
        const double mean = nll / static_cast<double>(scored);
        fmt::print("tokens {} scored {} mean_nll {:.6f} perplexity {:.4f}\n", n, scored, mean,
                   std::exp(mean));
    });
}

}  // namespace mox::cli
