// mox serve: the model behind an OpenAI-compatible HTTP API (server/http_server.h), as llama-server.
#include "commands.h"
#include "common_options.h"
#include "core/error.h"
#include "core/log.h"
#include "loaded_model.h"
#include "server/http_server.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <thread>

namespace mox::cli {

namespace {

struct ServeOptions {
    ModelOptions model;
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;
    std::string alias;
    int64_t n_predict = -1;
    bool no_think = false;
    std::string reasoning_format = "deepseek";
    std::string chat_template_file;
    engine::SamplerParams sampling;
};

std::atomic<server::HttpServer*> g_server{nullptr};

// SIGINT/SIGTERM, taken by this thread with sigwait (httplib's stop() is not async-signal-safe):
// a serving server is stopped, so run() returns and the model is freed normally; before it
// serves (the model still loading) the process exits at once.
void wait_for_signal_then_stop(sigset_t set) {
    int sig = 0;
    sigwait(&set, &sig);
    server::HttpServer* s = g_server.load();
    if (!s) std::_Exit(128 + sig);
    log::info("signal {}: stopping", sig);
    s->stop();
}

}  // namespace

void register_serve(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
    add_model_options(cmd, o->model, Command::serve, false);
    cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
    cmd->add_option("--port", o->port, "Port to listen on (0: any free one, printed)")->capture_default_str();
    cmd->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' on every API request");
    cmd->add_option("-a,--alias", o->alias, "The model's name in the API (default: the file name)");
    cmd->add_option(
           "-n,--n-predict,--predict", o->n_predict,
           "Most tokens per answer when a request gives no max_tokens (-1: until the context is full)")
        ->capture_default_str();
    cmd->add_flag("--no-think", o->no_think, "Chat template with thinking off unless a request asks for it");
    cmd->add_option(
           "--reasoning-format", o->reasoning_format,
           "deepseek: a chat answer's <think>...</think> goes to message.reasoning_content; none: all "
           "of it stays in content")
        ->capture_default_str();
    cmd->add_option("--chat-template-file", o->chat_template_file,
                    "A Jinja chat template to use instead of the model's own");
    add_sampling_options(cmd, o->sampling);
    cmd->callback([o] {
        // SIGINT/SIGTERM go to the waiting thread only: blocked here, before the model's thread pool
        // and the server's threads start (they inherit the mask).
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set, nullptr);
        std::thread(wait_for_signal_then_stop, set).detach();
        o->model.path = resolve_model_path(o->model.path);
        if (o->n_predict < -1 || o->n_predict == 0) fail("-n {}: at least 1, or -1", o->n_predict);
        if (o->reasoning_format != "deepseek" && o->reasoning_format != "none")
            fail("--reasoning-format {}: expected deepseek or none", o->reasoning_format);
        if (o->port < 0 || o->port > 65535) fail("--port {}: expected 0 to 65535", o->port);
        // A request without a seed draws a new one (the same default seed would give the same answer
        // to the same question every time).
        if (o->sampling.seed == engine::kRandomSeed)
            log::debug("sampling seed: a random one per request (-s N fixes it)");
        LoadedModel m = load(o->model);
        // The context of the one sequence slot: -c, else 8192 or the trained context if smaller (what
        // load planned the GPU placement for).
        o->model.n_ctx = o->model.context(m.model->hparams(), kDefaultContext);

        server::ServerOptions so;
        so.host = o->host;
        so.port = o->port;
        so.api_key = o->api_key;
        so.model_name =
            o->alias.empty() ? std::filesystem::path(o->model.path).filename().string() : o->alias;
        so.defaults.sampling = o->sampling;
        so.defaults.max_tokens = o->n_predict;
        so.chat_template = chat_template_of(*m.tokenizer);
        if (!o->chat_template_file.empty()) {
            std::ifstream in(o->chat_template_file, std::ios::binary);
            if (!in) fail("cannot read the chat template '{}'", o->chat_template_file);
            so.chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        so.chat = chat_options(*m.tokenizer, o->no_think);
        so.split_reasoning = o->reasoning_format == "deepseek";
        const models::StateOptions state = state_options(o->model, m.model->hparams(), 1);

        server::HttpServer http(*m.model, *m.tokenizer, state, so);
        const int port = http.bind();
        g_server = &http;
        fmt::print(stderr, "mox: serving {} on http://{}:{} (context {} tokens, one request at a time)\n",
                   so.model_name, so.host, port, state.n_ctx);
        http.run();
        g_server = nullptr;
    });
}

}  // namespace mox::cli
