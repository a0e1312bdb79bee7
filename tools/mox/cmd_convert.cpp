// mox convert HF_DIR -o OUT.gguf: a Hugging Face Qwen3.5/3.6-MoE checkpoint to a llama.cpp GGUF.
#include "commands.h"
#include "core/error.h"
#include "core/units.h"
#include "models/convert.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <memory>

namespace mox::cli {

namespace {

struct ConvertCli {
    std::string hf_dir;
    std::string output;
    std::string outtype;
    int threads = 0;
    bool placeholder_vocab = false;
};

}  // namespace

void register_convert(CLI::App& app) {
    auto o = std::make_shared<ConvertCli>();
    CLI::App* cmd =
        app.add_subcommand("convert", "Convert a Hugging Face Qwen3.5/3.6-MoE checkpoint to GGUF");
    cmd->add_option("hf_dir", o->hf_dir, "Checkpoint folder (config.json + *.safetensors)")->required();
    cmd->add_option("-o,--output", o->output, "Output .gguf path")->required();
    cmd->add_option("--outtype", o->outtype,
                    "Tensor types: f32, f16, bf16, q8_0, q6_k, q4_k_m or iq4_xs (default: the checkpoint's "
                    "float type). Norms, routers, conv and ssm_a/ssm_dt stay F32");
    cmd->add_option("-t,--threads", o->threads, "Threads (default: all)");
    cmd->add_flag("--placeholder-vocab", o->placeholder_vocab,
                  "Write a byte-level placeholder vocabulary even though the checkpoint ships a tokenizer");
    cmd->callback([o] {
        models::ConvertOptions c;
        c.hf_dir = o->hf_dir;
        c.output = o->output;
        if (!o->outtype.empty()) c.mix = models::quant_mix_from_name(o->outtype);
        c.threads = o->threads;
        c.placeholder_vocab = o->placeholder_vocab;

        const auto start = std::chrono::steady_clock::now();
        const bool tty = isatty(STDERR_FILENO);
        const models::ConvertSummary s = models::convert_hf(c, [&](const models::ConvertProgress& p) {
            if (tty)
                std::fprintf(stderr, "\rmox convert: %zu/%zu tensors, %s of %s", p.tensors_done,
                             p.tensors_total, format_bytes(p.bytes_done).c_str(),
                             format_bytes(p.bytes_total).c_str());
        });
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (tty) std::fprintf(stderr, "\n");
        fmt::print("wrote {} ({} tensors, {} layers, {} mix, {} of tensor data) in {:.1f} s\n", o->output,
                   s.n_tensors, s.hparams.n_layer, models::quant_mix_name(s.mix), format_bytes(s.data_bytes),
                   seconds);
    });
}

}  // namespace mox::cli
