// mox synth: write a synthetic GGUF (random weights of sane scale) for a preset or custom dims.
#include "commands.h"
#include "core/error.h"
#include "core/units.h"
#include "models/synth.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <memory>
#include <unistd.h>

namespace mox::cli {

namespace {

struct SynthCli {
    std::string preset = "tiny";
    std::string output;
    std::string mix;
    uint64_t seed = 42;
    int threads = 0;
    double router_skew = 0;
    // Custom dims (override the preset when set).
    int64_t layers = 0, embd = 0, vocab = 0, experts = 0, experts_used = 0, ff_exp = 0, ff_shexp = -1, ff = 0, ctx = 0;
    int64_t nextn = -1;
    std::string vocab_file, chat_template;
};

}  // namespace

void register_synth(CLI::App& app) {
    auto o = std::make_shared<SynthCli>();
    CLI::App* cmd = app.add_subcommand("synth", "Write a synthetic model (random weights) as GGUF");
    cmd->add_option("--preset", o->preset,
                    "qwen3.6-35b-a3b, qwen3.6-27b (dense), qwen3-30b-a3b, qwen3-235b-a22b, mixtral-8x7b, phi-3.5-moe "
                    "(full size); tiny, qwen35-tiny, qwen3moe-tiny, mixtral-tiny, phimoe-tiny")->capture_default_str();
    cmd->add_option("-o,--output", o->output, "Output .gguf path")->required();
    cmd->add_option("--mix", o->mix,
                    "Per-tensor type recipe: q4_k_m, q8_0, q6_k, iq4_xs, bf16, f16, f32 (default q4_k_m)");
    cmd->add_option("--seed", o->seed, "Random seed; same seed, same file")->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "Threads (default: all)");
    cmd->add_option("--router-skew", o->router_skew,
                    "Uneven expert popularity: approximately Zipf with this exponent (0 = uniform)");
    cmd->add_option("--vocab", o->vocab_file,
                    "Take the vocabulary from an HF tokenizer.json or a GGUF (e.g. the real Qwen3.6 one built by "
                    "tools/tok_qwen_vocab.py); default: a byte-level placeholder");
    cmd->add_option("--chat-template", o->chat_template, "File whose text becomes tokenizer.chat_template");
    cmd->add_option("--layers", o->layers, "Override: block_count");
    cmd->add_option("--nextn", o->nextn, "Override: MTP layers appended to the trunk");
    cmd->add_option("--embd", o->embd, "Override: embedding_length");
    cmd->add_option("--n-vocab", o->vocab, "Override: vocabulary rows");
    cmd->add_option("--experts", o->experts, "Override: expert_count");
    cmd->add_option("--experts-used", o->experts_used, "Override: expert_used_count");
    cmd->add_option("--ff-exp", o->ff_exp, "Override: expert_feed_forward_length");
    cmd->add_option("--ff-shexp", o->ff_shexp, "Override: expert_shared_feed_forward_length (0 = none)");
    cmd->add_option("--ff", o->ff, "Override: feed_forward_length (a dense model's FFN width)");
    cmd->add_option("--ctx", o->ctx, "Override: context_length");
    cmd->callback([o] {
        models::SynthOptions s;
        s.hparams = models::synth_preset(o->preset);
        auto& hp = s.hparams;
        if (o->layers) hp.n_layer = o->layers;
        if (o->nextn >= 0) {
            hp.n_nextn = o->nextn;
            hp.n_layer += o->nextn;
        }
        if (o->embd) hp.n_embd = o->embd;
        if (o->vocab) hp.n_vocab = o->vocab;
        if (o->experts) hp.n_expert = o->experts;
        if (o->experts_used) hp.n_expert_used = o->experts_used;
        if (o->ff_exp) hp.n_ff_exp = o->ff_exp;
        if (o->ff_shexp >= 0) hp.n_ff_shexp = o->ff_shexp;
        if (o->ff) hp.n_ff = o->ff;
        if (o->ctx) hp.n_ctx_train = o->ctx;
        s.mix = o->mix.empty() ? models::QuantMix::q4_k_m : models::quant_mix_from_name(o->mix);
        s.seed = o->seed;
        s.threads = o->threads;
        if (o->router_skew < 0) fail("--router-skew must be >= 0");
        s.router_skew = o->router_skew;
        s.vocab_path = o->vocab_file;
        if (!o->chat_template.empty()) {
            std::ifstream in(o->chat_template, std::ios::binary);
            if (!in) fail("cannot read chat template '{}'", o->chat_template);
            s.chat_template.assign(std::istreambuf_iterator<char>(in), {});
        }
        // llama.cpp patches token attributes by model name (a name with "phi-3" must hold Phi-3's special
        // tokens, which the placeholder vocabulary lacks): the preset's dashes and dots become '_'.
        std::string preset = o->preset;
        std::replace_if(preset.begin(), preset.end(), [](char c) { return c == '-' || c == '.'; }, '_');
        s.name = fmt::format("mox-synthetic-{}-{}", preset, models::quant_mix_name(s.mix));

        const auto start = std::chrono::steady_clock::now();
        const bool tty = isatty(STDERR_FILENO);
        int last_percent = -1;
        models::write_synthetic_model(o->output, s, [&](const models::SynthProgress& p) {
            const int percent = p.bytes_total ? static_cast<int>(100 * p.bytes_done / p.bytes_total) : 100;
            if (tty && percent != last_percent) {
                std::fprintf(stderr, "\rmox synth: %3d%% of %s", percent, format_bytes(p.bytes_total).c_str());
                last_percent = percent;
            }
        });
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (tty) std::fprintf(stderr, "\n");
        fmt::print("wrote {} ({} preset, {} mix, seed {}) in {:.1f} s\n", o->output, o->preset,
                   models::quant_mix_name(s.mix), s.seed, seconds);
    });
}

}  // namespace mox::cli
